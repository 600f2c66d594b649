"""SPEAR ``turn_taking``: turn-taking naturalness of spoken answers."""

import evaluate

try:  # the code lives in the spearbench package (an indented import: evaluate's own check would name the wrong package)
    from spear_metrics.core import evaluate_glue as glue
except ModuleNotFoundError as e:
    if not (e.name or "").startswith(("spear_metrics", "spear_datasets")):
        raise
    raise ImportError(
        "the SPEARBench metric 'turn_taking' needs the Python package spearbench: pip install 'spearbench[score]' "
        "(until it is on PyPI: pip install './spearbench-<version>-py3-none-any.whl[score]' with the wheel "
        "from the files of the Space spearbench/turn_taking)"
    ) from None

_DESCRIPTION = """\
Turn-taking of spoken answers (SPEARBench). turn_taking_naturalness = -DialogNLL of a
voice-activity-projection checkpoint (256 classes) on SPEAR's dialog: question clip + answer
added to both channels at max(0, len(question) + answer_start_time), Silero VAD (0.5, 100/50 ms)
cleaned to 150/150 ms at 50 Hz, units = the 2 s before each utterance start/end after 3 s of
context; DialogNLL = 1/2 mean + 1/2 mean of the worst 25 % units (null without vap_model).
turn_taking_naturalness_separated (project key, vap_separated=true): the same with the answer on
the answerer's channel only. turn_taking_offset_loglik = mean log density of the response offset
under a KDE of human offsets from a reference metadata CSV (null without offset_reference).
"""

_KWARGS_DESCRIPTION = glue.INPUTS_DOC + """\
    vap_model (str, optional): TorchScript VAP export or a tiny-VAP folder (default none -> null).
    vap_sample_rate, vap_frame_hz (optional): a TorchScript model's input rate (16000) and frame rate (50).
    vap_separated (bool, optional): also score turn_taking_naturalness_separated (default false).
    offset_reference (str, optional): SPEAR metadata CSV of human answers, e.g. the dev split.
    offset_reference_onset (str, optional): "vad" (default) or "none".
    vad_time_resolution (int, optional): decimals of VAD seconds (default 1, as upstream).
Models load on the first compute(), not at evaluate.load(); a missing model fails then with a
one-line reason naming it.
Returns:
    turn_taking_naturalness, turn_taking_naturalness_separated, turn_taking_offset_loglik, per_sample, n_samples, n_scored, n_failed.
Examples:
    >>> m = evaluate.load("spear_metrics/turn_taking")  # or "spearbench/turn_taking"
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class TurnTaking(glue.SpearMetric):
    dimension = "turn_taking"
    description = _DESCRIPTION
    kwargs_description = _KWARGS_DESCRIPTION
