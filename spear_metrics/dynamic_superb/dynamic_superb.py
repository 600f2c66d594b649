"""Dynamic-SUPERB Phase-2 (``dynamic_superb``): one task's text answers scored by its metric."""

import datasets
import evaluate

try:  # the code lives in the spearbench package (an indented import: evaluate's own check would name the wrong package)
    from spear_metrics.core import evaluate_glue as glue
except ModuleNotFoundError as e:
    if not (e.name or "").startswith(("spear_metrics", "spear_datasets")):
        raise
    raise ImportError(
        "the SPEARBench metric 'dynamic_superb' needs the Python package spearbench: pip install 'spearbench[score]' "
        "(until it is on PyPI: pip install './spearbench-<version>-py3-none-any.whl[score]' with the wheel "
        "from the files of the Space spearbench/dynamic_superb)"
    ) from None

_DESCRIPTION = """\
Dynamic-SUPERB Phase-2 (arXiv 2411.05361) scored by SPEARBench: the text answers of an
audio-language model to one task instance, scored by the metric upstream's evaluator maps the
task to (taskname_to_metrics of cyhuang-tw/speechlm_eval). The published key
llm_classification is computed by upstream's public per-row rule (its judge prompt, temperature 0,
result: yes -> 1.0), and so are word_error_rate, phoneme_error_rate and pos_estimation (the row's
max(0, 1 - WER) after upstream's normalisation: higher is better), each the mean of the rows; the
bodies of the other upstream functions are not public, so their keys are null with the reason and
the values are SPEARBench's project keys:
judge_accuracy (the project's LLM judge, Result: YES/NO), WER, CER, PER, MER (corpus error
rates), BLEU (sacrebleu corpus), pearson_r; each with a bootstrap 95 % interval over rows
(_ci95), its row count (_n) and na_rate.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of str): the model's answers (sllm_response).
    references (list of str): the labels (label).
    instructions (list of str): the instructions given with each item.
    task (str): the instance name (e.g. SuperbASR_LibriSpeech-TestClean): its metric comes from the
        manifest; or metric (str): an upstream metric function name, e.g. word_error_rate.
    extra_references (list of list of str, optional): further labels of multi-label items
        (label2, label3...), one list per item.
    judge (Judge or LocalJudge, optional): spear_metrics.core.judge; needed for llm_classification tasks.
    judge_concurrency (int, optional): judge calls at once (default 1).
    bootstrap (int, optional): resamples of the *_ci95 interval (default 1000; 0 = none); seed (int).
Returns:
    the task's summary (metric, upstream key null + note, the project key's value, <key>_ci95,
    <key>_n, na_rate, n_rows, n_scored, n_failed) and per_sample (list of dicts).
Examples:
    >>> m = evaluate.load("spear_metrics/dynamic_superb")
    >>> r = m.compute(predictions=["ask her to bring these things"], references=["Ask her to bring these things."],
    ...               instructions=["Transcribe."], task="SuperbASR_LibriSpeech-TestClean", bootstrap=0)
    >>> r["WER"]
    0.0
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class DynamicSuperb(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation=glue.CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Value("string"),
                                        "references": datasets.Value("string"),
                                        "instructions": datasets.Value("string")}),
            reference_urls=["https://github.com/dynamic-superb/dynamic-superb", "https://arxiv.org/abs/2411.05361"],
        )

    def _compute(self, predictions, references, instructions, task=None, metric=None, extra_references=None,
                 judge=None, judge_concurrency=1, bootstrap=1000, seed=0):
        from spear_metrics.dynamic_superb.scoring import score_texts

        return score_texts(predictions, references, instructions, task=task, metric=metric,
                           extra_references=extra_references, judge=judge, judge_concurrency=int(judge_concurrency),
                           n_resamples=int(bootstrap), seed=int(seed))
