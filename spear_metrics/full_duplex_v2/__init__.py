"""Full-Duplex-Bench v2 (``DanielLin94144/Full-Duplex-Bench``, ``v2/``): live multi-turn
conversations between an examiner and any network adapter (:mod:`.engine`), the tasks file
(:mod:`.tasks`) and the scoring (:mod:`.score`). See docs/full-duplex-bench-v2.md.

``BENCHMARK``: its descriptor (:class:`spear_metrics.core.benchmark.Benchmark`), registered in
:data:`spear_metrics.core.registry.BENCHMARKS`."""

from spear_metrics.core.benchmark import Benchmark

#: version of the scoring code (``summary.json``). 2.1.0: the published per-task keys follow
#: upstream's ``parse.py`` reading (any coerced score counts, as upstream), the strict 1-5 reading
#: moved to the project's ``strict_*`` keys; 2.0.0 results (strict values under the published
#: names) are not read as 2.1.0's.
VERSION = "2.1.0"

BENCHMARK = Benchmark(
    name="full_duplex_v2",
    title="Full-Duplex-Bench v2",
    version=VERSION,
    summary="Full-Duplex-Bench v2 (arXiv 2510.07838): live multi-turn conversations between an examiner (an OpenAI "
            "Realtime session following a task's staged goals) and the system under test, recorded on both channels, "
            "transcribed and rated per turn-taking event by an LLM judge with upstream's prompts (turn-taking fluency, "
            "instruction following, a task-specific score; per task, per 15-s bin, per split).",
    keys="spear_metrics.full_duplex_v2.score:KEYS",
    command="fdb2",
    command_help="Full-Duplex-Bench v2: live conversations (fdb2 infer) and their scoring (fdb2 score); also "
                 "`fdb infer|score --version 2`",
    cli="spear_metrics.commands.fdb_v2",
    results="spear_metrics.full_duplex_v2.results",
    space_tab="spear_metrics.full_duplex_v2.results:SPACE_TAB",
    has_metric_module=False,
    docs="full-duplex-bench-v2.md",
)
