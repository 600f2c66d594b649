"""SPEAR ``turn_taking``: turn-taking naturalness of spoken answers."""

import evaluate

from spear_metrics.core import evaluate_glue as glue

_DESCRIPTION = """\
Turn-taking of spoken answers (SPEARBench). turn_taking_naturalness = -DialogNLL of a
voice-activity-projection model (256 classes) on question clip + answer placed at
len(question) + answer_start_time on the answerer's channel; units are 2 s windows ending at each
utterance start/end; DialogNLL = 1/2 mean + 1/2 mean of the worst 25 % units (null without
vap_model). turn_taking_offset_loglik = mean log density of the response offset under a KDE
of human offsets from a reference metadata CSV (null without offset_reference).
"""

_KWARGS_DESCRIPTION = """
Args:
    audio_path (list of str): stereo 16 kHz input clips (context + question).
    answer_audio_path (list of str): answer audio, any rate or channel count.
    context_end_time (list of float): seconds, where the question starts in the clip.
    question_end_time (list of float): seconds, where the question ends.
    answer_start_time (list of float or None): answer onset minus question end, seconds.
    speakers, transcript_question, transcript_answer (list of str, optional): metadata columns.
    vap_model (str, optional): TorchScript VAP export or a tiny-VAP folder (default none -> null).
    offset_reference (str, optional): SPEAR metadata CSV of human answers, e.g. the dev split.
    offset_reference_onset (str, optional): "vad" (default) or "none".
    vad_time_resolution (int, optional): decimals of VAD seconds (default 1, as upstream).
Models load on the first compute(), not at evaluate.load(); a missing model fails then with a
one-line reason naming it.
Returns:
    turn_taking_naturalness, turn_taking_offset_loglik, per_sample, n_samples, n_scored, n_failed.
Examples:
    >>> m = evaluate.load("spear_metrics/turn_taking")  # or "spearbench/turn_taking"
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class TurnTaking(glue.SpearMetric):
    dimension = "turn_taking"
    description = _DESCRIPTION
    kwargs_description = _KWARGS_DESCRIPTION
