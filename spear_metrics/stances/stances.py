"""SPEAR ``stances``: stance of spoken answers relative to the question."""

import evaluate

from spear_metrics.core import evaluate_glue as glue

_DESCRIPTION = """\
Stance of spoken answers (SPEARBench). An LLM judge behind an OpenAI-compatible chat API
rates the answer's stance on the reference dimension from -2 to +2 (audio when the judge takes
audio, else the ASR transcript); stance_same_as_question_% = share with the same sign as the
reference, stance_more_negative_% / stance_more_positive_% = share lower / higher.
"""

_KWARGS_DESCRIPTION = glue.INPUTS_DOC + """\
    judge_base_url (str): OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1.
    judge_model (str): model name the server expects.
    judge_audio (bool, optional): send the answer audio to the judge (default false: ASR transcript).
    asr_model (str, optional): ASR used when the judge takes text (default: the project's default).
Models load on the first compute(), not at evaluate.load(); a missing model fails then with a
one-line reason naming it.
Returns:
    stance_same_as_question_%, stance_more_negative_%, stance_more_positive_%, per_sample, n_samples, n_scored, n_failed.
Examples:
    >>> m = evaluate.load("spear_metrics/stances")  # or "spearbench/stances"
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Stances(glue.SpearMetric):
    dimension = "stances"
    description = _DESCRIPTION
    kwargs_description = _KWARGS_DESCRIPTION
