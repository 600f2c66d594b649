"""SpeechRole-Eval (Jiang et al., arXiv 2508.02013; ``yuhui1038/SpeechRole``, MIT): speech
role-playing agents judged pairwise against the roles' reference speech by an audio LLM.

- :mod:`.protocol`: the aspects, prompt texts, message layout and reply parsers (v1, v2);
- :mod:`.data`: the test data, model-output folders and their dialogue-by-dialogue check;
- :mod:`.judging`: ``spearbench speechrole score`` (resumable, concurrent judge calls);
- :mod:`.aggregate`: judge results on disk -> dialogue rows -> summary with intervals;
- :mod:`.infer`: ``spearbench speechrole infer`` (any adapter, turn by turn);
- :mod:`.results`: SpeechRole runs as results datasets (``push-results``, the Space).

``BENCHMARK``: its descriptor (:class:`spear_metrics.core.benchmark.Benchmark`).
"""

from spear_metrics.core.benchmark import Benchmark

#: version of the judging and aggregation code (``summary.json`` ``metric_versions``)
VERSION = "1.0.0"

BENCHMARK = Benchmark(
    name="speechrole",
    title="SpeechRole-Eval",
    version=VERSION,
    summary="SpeechRole-Eval (arXiv 2508.02013): speech role-playing agents judged pairwise against the roles' "
            "reference speech by an audio LLM on eight aspects; per aspect 100·ΣA/ΣB with a 95 % interval over "
            "dialogues.",
    keys="spear_metrics.speechrole.results:KEYS",
    command="speechrole",
    command_help="SpeechRole-Eval: infer role-play speech, judge it against the reference voices, summarize",
    cli="spear_metrics.commands.speechrole",
    results="spear_metrics.speechrole.results",
    space_tab="spear_metrics.speechrole.ui:SPACE_TAB",
    evaluate_form="spear_metrics.speechrole.ui:evaluate_form",
    docs="speechrole.md",
)
