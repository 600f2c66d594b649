"""SPEAR ``distributional``: the distributional baselines' per-answer features and scores, and
SPEARBench's own ``human_likeness_auroc``."""

import evaluate

try:  # the code lives in the spearbench package (an indented import: evaluate's own check would name the wrong package)
    from spear_metrics.core import evaluate_glue as glue
except ModuleNotFoundError as e:
    if not (e.name or "").startswith(("spear_metrics", "spear_datasets")):
        raise
    raise ImportError(
        "the SPEARBench metric 'distributional' needs the Python package spearbench: pip install 'spearbench[score]' "
        "(until it is on PyPI: pip install './spearbench-<version>-py3-none-any.whl[score]' with the wheel "
        "from the files of the Space spearbench/distributional)"
    ) from None

_DESCRIPTION = """\
SPEAR's distributional baselines (SPEARBench). Per answer: Praat F0 statistics (raw and trimmed
to the 10-90 and 25-75 % ranges), lexical diversity of its text (TTR, MATTR, MTLD, entropy,
hapax, backchannel and discourse-marker ratios) and its speech and articulation rates and pauses
(Silero VAD stretches, ASR word times). With a baseline fitted on a dev split
(`spearbench fit-baseline`, option baseline=): each feature's P(human) and their average,
average_naturalness_score. With the human answers' run (option human_run=): per-feature accuracy
and AUROC, and human_likeness_auroc, a cross-validated classifier two-sample test over every
per-answer value (0.5 = a classifier cannot tell the model from the humans).
"""

_KWARGS_DESCRIPTION = """
Args:
    audio_path, answer_audio_path, context_end_time, question_end_time, answer_start_time:
        the SPEAR columns (see the interruptions module); the times are checked, not used.
    transcript_answer (list of str, optional): the answers' text for the lexical features
        (else the ASR's); answer_duration (list of float, optional): used with asr="none".
Returns:
    average_naturalness_score (null without a baseline), the per-feature naturalness means,
    human_likeness_auroc (null without human_run), per_sample (every feature of each answer),
    n_samples, n_scored, n_failed.
Examples:
    >>> m = evaluate.load("spear_metrics/distributional")
    >>> r = m.compute(audio_path=["q.wav"], answer_audio_path=["a.wav"], context_end_time=[3.2],
    ...               question_end_time=[5.0], answer_start_time=[None], transcript_answer=["P0001A: yeah sure"],
    ...               asr="none")
    >>> r["per_sample"][0]["lexical_total_words"]
    2
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Distributional(glue.SpearMetric):
    dimension = "distributional"
    description = _DESCRIPTION
    kwargs_description = _KWARGS_DESCRIPTION
