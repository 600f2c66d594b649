"""Space entry point of the `interruptions` metric (the standard evaluate widget)."""

import evaluate
from evaluate.utils import launch_gradio_widget

module = evaluate.load("spearbench/interruptions")
launch_gradio_widget(module)
