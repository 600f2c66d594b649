"""Full-Duplex-Bench v1.5 (overlap handling): data reader, timing, behaviour judge, before/after
features and significance tests, scored through ``spearbench fdb score --version 1.5``.

``BENCHMARK``: its descriptor (:class:`spear_metrics.core.benchmark.Benchmark`), registered in
:data:`spear_metrics.core.registry.BENCHMARKS`. Its command is Full-Duplex-Bench's ``fdb`` (v1.0's
descriptor owns it; a v1.5 folder is detected from its layout or named with ``--version 1.5``)."""

from spear_metrics.core.benchmark import Benchmark

#: version of the scoring code (``summary.json`` ``metric_versions``)
VERSION = "1.5.1"  # 1.5.1: Holm counts a NaN p-value in m, as upstream's statsmodels call does

BENCHMARK = Benchmark(
    name="full_duplex_v15",
    title="Full-Duplex-Bench v1.5",
    version=VERSION,
    summary="Full-Duplex-Bench v1.5 (arXiv 2507.23159): how a full-duplex model handles a second voice while it "
            "speaks (user interruption, user backchannel, talking to another person, background speech). Per subset: "
            "the LLM judge's behaviour tags with upstream's prompt, stop and response latency from Silero VAD, the "
            "reply's speech rate, pitch and intensity before vs after the overlap and against the clean reply, with "
            "upstream's paired t-tests.",
    keys="spear_metrics.full_duplex_v15.keys:KEYS",
    # Full-Duplex-Bench's one command: v1.5 folders are detected from their layout (or --version 1.5)
    command="fdb",
    command_help="Full-Duplex-Bench v1.0 task folders and releases, v1.5 folders (--version 1.5, or detected): "
                 "score them (fdb score), stream their stimuli through an adapter (fdb infer)",
    cli="spear_metrics.commands.fdb",
    results="spear_metrics.full_duplex_v15.results",
    space_tab="spear_metrics.full_duplex_v15.ui:SPACE_TAB",
    report="spear_metrics.full_duplex_v15.report:write_report",
    has_metric_module=False,
    docs="full-duplex-bench-v1.5.md",
)
