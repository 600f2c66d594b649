"""Space entry point of the `explainable_features` metric (the standard evaluate widget)."""

import evaluate
from evaluate.utils import launch_gradio_widget

module = evaluate.load("spearbench/explainable_features")
launch_gradio_widget(module)
