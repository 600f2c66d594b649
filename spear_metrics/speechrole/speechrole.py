"""SpeechRole-Eval (``speechrole``): pairwise audio-judge results aggregated per aspect."""

import datasets
import evaluate

try:  # the code lives in the spearbench package (an indented import: evaluate's own check would name the wrong package)
    from spear_metrics.core import evaluate_glue as glue
except ModuleNotFoundError as e:
    if not (e.name or "").startswith(("spear_metrics", "spear_datasets")):
        raise
    raise ImportError(
        "the SPEARBench metric 'speechrole' needs the Python package spearbench: pip install 'spearbench[score]' "
        "(until it is on PyPI: pip install './spearbench-<version>-py3-none-any.whl[score]' with the wheel "
        "from the files of the Space spearbench/speechrole)"
    ) from None

_DESCRIPTION = """\
SpeechRole-Eval (arXiv 2508.02013; yuhui1038/SpeechRole) scores speech role-playing agents: an
audio LLM judge compares the system's spoken answers (Model A) with the role's reference speech
(Model B) on eight aspects, each a pair of scores 1-10. This module aggregates the judge's result
files (one role's <role>.json per input, the repository's nested or flat shape, or what
`spearbench speechrole score` writes): per scope (single, multi, overall) and aspect (plus
all_aspects) the mean of A, the mean of B and 100*sum(A)/sum(B) (a project key: the aggregation
behind the published headline is not in public code), each with a 95 % bootstrap interval over
dialogues, the na share, and with swapped results the position bias. Judging itself needs a judge
endpoint: `spearbench speechrole score`.
"""

_KWARGS_DESCRIPTION = """
Args:
    result_file (list of str): judge result files, one role each (<role>.json).
    mode (list of str): "single" or "multi", one per file.
    order (list of str, optional): "benchmark" (system first, default) or "swapped" (reference
        first, from `score --swap-order`), one per file.
    bootstrap (int, optional): resamples behind each *_ci95 (default 1000; 0 = none); seed (int, optional).
Returns:
    <scope>_<aspect>_mean_A / _mean_B / _ratio_100_sumA_over_sumB (+ _ci95, _n), <scope>_<aspect>_na_share,
    <scope>_<aspect>_position_bias_system/_reference (swapped files only), counts, headline_note,
    dimensions_note, n_samples, n_scored, n_failed (dialogues), read_problems, per_sample (list of dicts).
Examples:
    >>> m = evaluate.load("spear_metrics/speechrole")
    >>> r = m.compute(result_file=["ali_cloud/single/Shrek.json"], mode=["single"], bootstrap=0)
    >>> r["single_Instruction_Adherence_mean_A"], r["single_Instruction_Adherence_ratio_100_sumA_over_sumB"]
    (8.0, 80.0)
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SpeechRole(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation=glue.CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"result_file": datasets.Value("string"), "mode": datasets.Value("string")}),
            reference_urls=["https://github.com/yuhui1038/SpeechRole", "https://arxiv.org/abs/2508.02013"],
        )

    def _compute(self, result_file, mode, order=None, bootstrap=1000, seed=0):
        from spear_metrics.speechrole.aggregate import aggregate_files

        return aggregate_files(result_file, mode, order, n_resamples=int(bootstrap), seed=int(seed))
