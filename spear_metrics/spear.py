"""SPEAR's descriptor (:class:`spear_metrics.core.benchmark.Benchmark`): the benchmark whose
dimensions are the folders of :data:`spear_metrics.core.registry.DIMENSIONS`.

Its keys are its dimensions' (each dimension carries its own version); its commands are the
generic ones (``score``, ``infer``, ``report``...); its results checks are
:mod:`spear_metrics.results.validate`'s own; its Space tabs are the leaderboard Space's
leaderboard, samples, plots and report tabs (``space/app.py``); its report is
:mod:`spear_metrics.reports.html`."""

from spear_metrics.core.benchmark import Benchmark

BENCHMARK = Benchmark(
    name="spear",
    title="SPEAR",
    version="",  # per dimension: summary.json metric_versions
    summary="SPEAR: how human-like a spoken dialogue model is in conversation, scored on real two-speaker "
            "conversations against the human answers (interruptions, explainable features, speech quality, "
            "language and dialect, emotions, turn-taking, stances, distributional likeness).",
    results="spear_metrics.results.validate",
    report="spear_metrics.reports.html:build_report",
    has_metric_module=False,
    docs="scoring.md",
)
