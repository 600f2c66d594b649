"""Full-Duplex-Bench v1.0 scoring (take-over, latency, backchannel, interruption relevance).

``BENCHMARK``: its descriptor (:class:`spear_metrics.core.benchmark.Benchmark`), registered in
:data:`spear_metrics.core.registry.BENCHMARKS`."""

from spear_metrics.core.benchmark import Benchmark

#: version of the scoring code (``summary.json`` ``metric_versions``)
VERSION = "1.0.0"

BENCHMARK = Benchmark(
    name="full_duplex",
    title="Full-Duplex-Bench v1.0",
    version=VERSION,
    summary="Full-Duplex-Bench v1.0 (arXiv 2503.04721): pause handling, smooth turn-taking, backchannel and user "
            "interruption of full-duplex spoken dialogue models, scored on their replies to the benchmark's stimuli "
            "(take-over rate, latencies, backchannel frequency and JSD, interruption relevance).",
    keys="spear_metrics.full_duplex.definition:KEYS",
    command="fdb",
    command_help="Full-Duplex-Bench: score task folders or a release (fdb score), stream its stimuli through an "
                 "adapter (fdb infer)",
    cli="spear_metrics.commands.fdb",
    results="spear_metrics.full_duplex.results",
    space_tab="spear_metrics.full_duplex.ui:SPACE_TAB",
    evaluate_form="spear_metrics.full_duplex.ui:evaluate_form",
    aliases={"fdb-infer": ("spear_metrics.commands.fdb_infer", "spearbench fdb infer")},
    docs="full-duplex-bench.md",
)
