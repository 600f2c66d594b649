"""SPEAR ``interruptions``: response latency and overlap of the answer with question speech."""

import evaluate

try:  # the code lives in the spearbench package (an indented import: evaluate's own check would name the wrong package)
    from spear_metrics.core import evaluate_glue as glue
except ModuleNotFoundError as e:
    if not (e.name or "").startswith(("spear_metrics", "spear_datasets")):
        raise
    raise ImportError(
        "the SPEARBench metric 'interruptions' needs the Python package spearbench: pip install 'spearbench[score]' "
        "(until it is on PyPI: pip install './spearbench-<version>-py3-none-any.whl[score]' with the wheel "
        "from the files of the Space spearbench/interruptions)"
    ) from None

_DESCRIPTION = """\
Timing of a spoken answer against the question it answers (SPEARBench). Silero VAD (library
defaults, 16 kHz, 0.1 s times) runs on the input clip with both speakers mixed and on the
answer. latency_ms: silence from the end of question speech to the answer's first speech.
interrupted_time_ms: overlap between answer speech placed at question end + answer_start_time
and question speech. interruptions_%: share of samples with any overlap.
"""

_KWARGS_DESCRIPTION = glue.INPUTS_DOC + """\
    (rows with answer_start_time None have null interruption values: the system chose no timing)
    vad_backend (str, optional): "batched" (default), "sequence" or "jit" (upstream's streaming call).
    vad_time_resolution (int, optional): decimals of VAD seconds, 1 (default, as upstream) or 3.
Returns:
    latency_ms, interrupted_time_ms, interruptions_%, no_speech_answers_%, per_sample,
    n_samples, n_scored, n_failed.
Examples:
    >>> m = evaluate.load("spear_metrics/interruptions")  # or "spearbench/interruptions"
    >>> r = m.compute(audio_path=["q.wav"], answer_audio_path=["a.wav"], context_end_time=[3.2],
    ...               question_end_time=[5.0], answer_start_time=[0.4])
    >>> sorted(k for k in r if k.endswith("_ms"))
    ['interrupted_time_ms', 'latency_ms']
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Interruptions(glue.SpearMetric):
    dimension = "interruptions"
    description = _DESCRIPTION
    kwargs_description = _KWARGS_DESCRIPTION
