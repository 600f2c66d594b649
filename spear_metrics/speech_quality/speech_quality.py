"""SPEAR ``speech_quality``: predicted MOS of the answer and WER/CER of its ASR against ``transcript_answer``."""

import evaluate

try:  # the code lives in the spearbench package (an indented import: evaluate's own check would name the wrong package)
    from spear_metrics.core import evaluate_glue as glue
except ModuleNotFoundError as e:
    if not (e.name or "").startswith(("spear_metrics", "spear_datasets")):
        raise
    raise ImportError(
        "the SPEARBench metric 'speech_quality' needs the Python package spearbench: pip install 'spearbench[score,quality]' "
        "(until it is on PyPI: pip install './spearbench-<version>-py3-none-any.whl[score,quality]' with the wheel "
        "from the files of the Space spearbench/speech_quality)"
    ) from None

_DESCRIPTION = """\
Speech quality and intelligibility of a spoken answer (SPEARBench). UTMOS: UTMOS22 "strong"
predicted MOS (1-5) of the answer audio (profile=reference, or mos=utmos); embedded offline
predictors write their own keys (DNSMOS_OVRL... from speechmos, DistillMOS). WER_% / CER_%
(SPEAR's rule): 100 x jiwer WER/CER of raw text between the cleaned transcript_answer and the
ASR of the answer audio, pooled over (row, ASR) values of Whisper large-v3 and Qwen3-ASR-0.6B
(profile=reference); null with WER_note for other ASR systems, whose values stand as
WER_%_<asr>. WER_norm_% / CER_norm_%: the project's normalised variant (Whisper's English
normaliser on both sides). Default ASR: the packaged Whisper base (faster-whisper), offline.
"""

_KWARGS_DESCRIPTION = """
Args:
    audio_path (list of str): stereo 16 kHz input clips (context + question).
    answer_audio_path (list of str): answer audio, any rate or channel count (channels averaged).
    context_end_time, question_end_time (list of float): seconds.
    answer_start_time (list of float or None): seconds (unused here, required by every SPEAR module).
    transcript_answer (list of str, optional): reference text of each answer (`SPK: text`); without
        it WER/CER are null.
    profile (str, optional): "embedded" (default, offline) or "reference" (published table).
    asr (str, optional): comma list of ASR backends ("embedded", "whisper-large-v3", "qwen3-asr-0.6b").
    mos (str, optional): comma list of MOS backends ("utmos", "dnsmos", "distillmos").
    whisper_model, qwen_asr_model, embedded_asr_model, utmos_model (str, optional): Hub id or local path.
    device (str, optional), asr_batch_size (int, optional), empty_hypothesis ("error" | "skip").
Returns:
    UTMOS (null + UTMOS_note when not run), WER_%, CER_% (null + WER_note without SPEAR's ASR systems),
    WER_norm_%, CER_norm_%, the embedded MOS keys, WER_%_<asr>, CER_%_<asr>, WER_norm_%_<asr>,
    CER_norm_%_<asr>, asr_models, no_reference_%, per_sample, n_samples, n_scored, n_failed.
Examples:
    >>> m = evaluate.load("spear_metrics/speech_quality")  # or "spearbench/speech_quality"
    >>> r = m.compute(audio_path=["q.wav"], answer_audio_path=["a.wav"], context_end_time=[3.2],
    ...               question_end_time=[5.0], answer_start_time=[0.4], transcript_answer=["P0001A: Yes I do."])
    >>> sorted(k for k in r if k.endswith("ER_%") or k.endswith("ER_norm_%"))
    ['CER_%', 'CER_norm_%', 'WER_%', 'WER_norm_%']
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SpeechQuality(glue.SpearMetric):
    dimension = "speech_quality"
    description = _DESCRIPTION
    kwargs_description = _KWARGS_DESCRIPTION
