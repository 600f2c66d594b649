"""Factories that build small real SPEAR inputs from the stereo AMI dialogue fixture.

The dialogue (31 s, 16 kHz, one speaker per channel): FEE016 (channel 0) speaks 0.78-15.48 s,
MEO015 (channel 1) backchannels and then takes the floor at 15.46 s and speaks to the end.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from spear_datasets.audio import load_audio, write_wav
from spear_datasets.schema import SpearRow, write_metadata

SR = 16_000
QUESTION_END = 15.48  # end of FEE016's long turn (RTTM)
CONTEXT_END = 8.74  # end of MEO015's "Menu, alright." backchannel
ANSWER_START = 15.46  # MEO015 takes the floor


def dialogue(stereo_path: Path) -> np.ndarray:
    return load_audio(stereo_path)  # (2, n)


def make_clips(stereo_path: Path, out: Path, *, pad_s: float = 0.0, answer_s: float = 6.0, name: str = "in") -> tuple[Path, Path]:
    """Write the input clip (0 - 15.48 s, stereo) as ``<name>.wav`` and MEO015's answer
    (15.46 s + answer_s) with ``pad_s`` seconds of digital silence before it; returns their paths."""
    x = dialogue(stereo_path)
    q = out / f"{name}.wav"
    if not q.exists():
        write_wav(q, x[:, : int(QUESTION_END * SR)])
    ans = x[1, int(ANSWER_START * SR) : int((ANSWER_START + answer_s) * SR)]
    ans = np.concatenate([np.zeros(int(round(pad_s * SR)), np.float32), ans])
    a = out / f"answer_pad{pad_s:g}.wav"
    write_wav(a, ans)
    return q, a


def row(audio: str, answer: str, ast: float | None, **kw) -> SpearRow:
    base = dict(audio_path=audio, answer_audio_path=answer, context_end_time=CONTEXT_END, question_end_time=QUESTION_END,
                answer_duration=None, speakers="FEE016|MEO015", conversation_id="ES2004a",
                transcript_question="FEE016: ... a little L_C_D_ display?", transcript_answer="MEO015: Right, I was thinking",
                answer_start_time=ast)
    base.update(kw)
    return SpearRow(**base)


def write_rows(path: Path, rows) -> Path:
    return write_metadata(path, rows)
