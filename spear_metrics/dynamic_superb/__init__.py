"""Dynamic-SUPERB Phase-2 in SPEARBench: task instances and their manifest (:mod:`.tasks`), the
metrics and the judge protocol (:mod:`.metrics`), inference through the shared adapters into
upstream's prediction files (:mod:`.infer`), scoring with intervals and N/A rates
(:mod:`.scoring`), results datasets (:mod:`.results`) and the evaluate module
(``dynamic_superb.py``).

``BENCHMARK``: its descriptor (:class:`spear_metrics.core.benchmark.Benchmark`)."""

from spear_metrics.core.benchmark import Benchmark

#: version of the project's metric definitions (bumped when a definition changes)
METRICS_VERSION = "3"

BENCHMARK = Benchmark(
    name="dynamic_superb",
    title="Dynamic-SUPERB Phase-2",
    version=METRICS_VERSION,
    summary="Dynamic-SUPERB Phase-2 (arXiv 2411.05361): instruction-following speech tasks answered in text; per "
            "task the project's keys (judge accuracy, WER, BLEU, correlation...) with intervals and N/A rates; the "
            "published keys are null where upstream's metric code cannot be read.",
    keys="spear_metrics.dynamic_superb.metrics:PROJECT_KEYS",
    command="dsuperb",
    command_help="Dynamic-SUPERB Phase-2: list tasks, infer text answers into upstream's prediction files, score them",
    cli="spear_metrics.commands.dsuperb",
    results="spear_metrics.dynamic_superb.results",
    space_tab="spear_metrics.dynamic_superb.ui:SPACE_TAB",
    evaluate_form="spear_metrics.dynamic_superb.ui:evaluate_form",
    docs="dynamic_superb.md",
)
