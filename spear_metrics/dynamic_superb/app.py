"""Space entry point of the `dynamic_superb` metric: a form over the module file next to this one
(``dynamic_superb.py``), so the Space runs the code it publishes (the form:
``spear_metrics.core.evaluate_glue.metric_space``)."""

from pathlib import Path

import evaluate

from spear_metrics.core.evaluate_glue import metric_space

HERE = Path(__file__).resolve().parent
module = evaluate.load(str(HERE / "dynamic_superb.py"))
metric_space(module, readme=HERE / "README.md").launch()
