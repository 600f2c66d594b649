"""SPEAR ``explainable_features``: answer duration, voicing and pitch variability."""

import evaluate

try:  # the code lives in the spearbench package (an indented import: evaluate's own check would name the wrong package)
    from spear_metrics.core import evaluate_glue as glue
except ModuleNotFoundError as e:
    if not (e.name or "").startswith(("spear_metrics", "spear_datasets")):
        raise
    raise ImportError(
        "the SPEARBench metric 'explainable_features' needs the Python package spearbench: pip install 'spearbench[score]' "
        "(until it is on PyPI: pip install './spearbench-<version>-py3-none-any.whl[score]' with the wheel "
        "from the files of the Space spearbench/explainable_features)"
    ) from None

_DESCRIPTION = """\
Explainable acoustic features of spoken answers (SPEARBench). explainable_duration_s: duration
of the answer file. explainable_voiced_ratio: share of voiced frames of Praat's autocorrelation
pitch (75-500 Hz). explainable_normalized_f0_std_avg: the seven F0 statistics (min, p10, p25,
median, p75, p90, max) of each answer divided by the mean F0 of the answers to the same
questioner; the mean over the seven of their across-sample standard deviation (ddof 1).
"""

_KWARGS_DESCRIPTION = """
Args:
    audio_path, answer_audio_path, context_end_time, question_end_time, answer_start_time:
        the SPEAR columns (see the interruptions module); the times are checked, not used.
    transcript_question (list of str, optional): "SPK: text" turns; its last speaker tag
        groups answers by questioner for the F0 normalisation (all in one group without it).
Returns:
    explainable_duration_s, explainable_voiced_ratio, explainable_normalized_f0_std_avg,
    per_sample (with the F0 statistics in Hz), n_samples, n_scored, n_failed.
Examples:
    >>> m = evaluate.load("spear_metrics/explainable_features")
    >>> r = m.compute(audio_path=["q.wav"], answer_audio_path=["a.wav"], context_end_time=[3.2],
    ...               question_end_time=[5.0], answer_start_time=[None])
    >>> round(r["explainable_duration_s"], 2)
    2.5
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class ExplainableFeatures(glue.SpearMetric):
    dimension = "explainable_features"
    description = _DESCRIPTION
    kwargs_description = _KWARGS_DESCRIPTION
