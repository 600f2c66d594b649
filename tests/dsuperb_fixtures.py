"""Small Dynamic-SUPERB task instances in the exact Hub schema (``file``, ``audio``, ``instruction``,
``label``[, ``audio2``, ``label2``]), built from the real recordings of tests/fixtures/real
and stored as local ``datasets`` folders (``save_to_disk``), one per instance.

- ``SuperbASR_LibriSpeech-TestClean`` (word_error_rate) with an ``audio2`` column: JFK's 11 s
  FLAC (44.1 kHz, 24-bit) with its exact transcript, a VCTK sentence, an AMI headset clip, a
  stereo clip as ``audio2``; a row whose bytes are not audio and a row with an empty label.
- ``SpeechDetection_LJSpeech`` (llm_classification): speaker-sex questions on VCTK, JFK, AMI; one
  multi-label row (the stereo AMI dialogue: ``label`` female, ``label2`` male).
- ``L2EnglishFluency_speechocean762-Scoring`` (pearson_correlation_coefficient): numeric labels.
"""

from __future__ import annotations

from pathlib import Path

ASR = "SuperbASR_LibriSpeech-TestClean"
CLS = "SpeechDetection_LJSpeech"
REG = "L2EnglishFluency_speechocean762-Scoring"

JFK_TEXT = ("And so my fellow Americans, ask not what your country can do for you, ask what you can do for your "
            "country.")
VCTK_TEXT = "Ask her to bring these things with her from the store."
AMI_TEXT = "I'M ABIGAIL CLAFLIN YOU CAN CALL ME ABBIE"


def _audio(real: Path, name: str) -> dict:
    return {"bytes": (real / name).read_bytes(), "path": name}


def build_instances(real: Path, root: Path) -> Path:
    """Write the three instances under ``root/<instance>/`` (``save_to_disk``); returns ``root``."""
    from datasets import Audio, Dataset, Features, Value

    root.mkdir(parents=True, exist_ok=True)
    base = {"file": Value("string"), "audio": Audio(), "instruction": Value("string"), "label": Value("string")}

    asr_feats = Features({**base, "audio2": Audio()})
    asr = {
        "file": ["jfk", "p225_002", "ES2011a_40_46", "broken", "nolabel"],
        "audio": [_audio(real, "faster-whisper__jfk.flac"), _audio(real, "speechbrain__p225_002.wav"),
                  _audio(real, "lhotse__ES2011a.Headset-0-40s-46s.wav"),
                  {"bytes": b"RIFF\x24\x00\x00\x00WAVEnot really audio" * 4, "path": "broken.wav"},
                  _audio(real, "speechbrain__p226_002.wav")],
        "audio2": [_audio(real, "speechbrain__p226_002.wav"), _audio(real, "faster-whisper__stereo_diarization.wav"),
                   _audio(real, "speechbrain__p225_002.wav"), _audio(real, "speechbrain__p225_002.wav"),
                   _audio(real, "speechbrain__p225_002.wav")],
        "instruction": ["Transcribe the first recording verbatim."] * 5,
        "label": [JFK_TEXT, VCTK_TEXT, AMI_TEXT, "whatever", ""],
    }
    Dataset.from_dict(asr, features=asr_feats).save_to_disk(str(root / ASR))

    cls_feats = Features({**base, "label2": Value("string")})
    q = "Is the speaker male or female? Answer with one word."
    cls = {
        "file": ["p225_002", "p226_002", "jfk", "ES2011a_40_46", "ami_dialogue"],
        "audio": [_audio(real, "speechbrain__p225_002.wav"), _audio(real, "speechbrain__p226_002.wav"),
                  _audio(real, "faster-whisper__jfk.flac"), _audio(real, "lhotse__ES2011a.Headset-0-40s-46s.wav"),
                  _audio(real, "DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav")],
        "instruction": [q, q, q, q, "Which speaker sexes are heard in this meeting? List them."],
        "label": ["female", "male", "male", "female", "female"],
        "label2": [None, None, None, None, "male"],
    }
    Dataset.from_dict(cls, features=cls_feats).save_to_disk(str(root / CLS))

    reg = {
        "file": ["s1", "s2", "s3", "s4", "s5"],
        "audio": [_audio(real, n) for n in ("speechbrain__p225_002.wav", "speechbrain__p226_002.wav",
                                            "faster-whisper__jfk.flac", "lhotse__ES2011a.Headset-0-40s-46s.wav",
                                            "speechbrain__p225_002.wav")],
        "instruction": ["Rate the fluency of the speaker from 0 to 10."] * 5,
        "label": ["7", "9", "4", "6", "8"],
    }
    Dataset.from_dict(reg, features=Features(base)).save_to_disk(str(root / REG))
    return root
