"""SPEAR ``emotions``: emotional entrainment of spoken answers."""

import evaluate

try:  # the code lives in the spearbench package (an indented import: evaluate's own check would name the wrong package)
    from spear_metrics.core import evaluate_glue as glue
except ModuleNotFoundError as e:
    if not (e.name or "").startswith(("spear_metrics", "spear_datasets")):
        raise
    raise ImportError(
        "the SPEARBench metric 'emotions' needs the Python package spearbench: pip install 'spearbench[score]' "
        "(until it is on PyPI: pip install './spearbench-<version>-py3-none-any.whl[score]' with the wheel "
        "from the files of the Space spearbench/emotions)"
    ) from None

_DESCRIPTION = """\
Emotional behaviour of spoken answers (SPEARBench). Vox-Profile's dimensional emotion model
(tiantiaf/whisper-large-v3-msp-podcast-emotion-dim) predicts arousal, valence and dominance in
[0, 1] for the question turn (input clip, channels averaged, between context_end_time and
question_end_time) and for the answer, each in one whole-turn pass (SPEAR's turn scores);
questions shorter than min_question_s (1.0 s) are left out; each *_question_answer_corr is the
Pearson r across samples (null with < 2 pairs or a constant side). emotional_naturalness_logit needs a naturalness classifier (no public weights): null
with a note otherwise.
"""

_KWARGS_DESCRIPTION = glue.INPUTS_DOC + """\
    emotion_model (str, optional): Hub id or local folder of the emotion-dim model.
    min_question_s (float, optional): shortest question turn scored, in s (default 1.0, SPEAR's stage script).
    naturalness_classifier (str, optional): local folder of a naturalness classifier (see README).
    naturalness_shift (float, optional): dev-set shift overriding the classifier's stored one.
    model_batch_size (int or 'auto', optional): clips per forward pass (default auto: 8 on CPU, from the free GPU memory on CUDA).
    model_dtype (str, optional): float32 (default, the reference), float16, bfloat16 or auto (half precision on CUDA).
Models load on the first compute(), not at evaluate.load(); a missing model fails then with a
one-line reason naming it.
Returns:
    arousal_question_answer_corr, valence_question_answer_corr, dominance_question_answer_corr, emotional_naturalness_logit, per_sample, n_samples, n_scored, n_failed.
Examples:
    >>> m = evaluate.load("spear_metrics/emotions")  # or "spearbench/emotions"
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Emotions(glue.SpearMetric):
    dimension = "emotions"
    description = _DESCRIPTION
    kwargs_description = _KWARGS_DESCRIPTION
