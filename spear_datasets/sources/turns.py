"""Generic speaker-turn readers (NIST RTTM and STM), so any two-person corpus can feed the
SPEAR selection protocol, and the mono-to-per-speaker channel split the demo uses.

Formats: RTTM ``SPEAKER <file> <chan> <onset_s> <duration_s> <NA> <NA> <speaker> <NA> <NA>``;
STM ``<file> <chan> <speaker> <start_s> <end_s> [<label>] <text>`` (``;;`` comments).
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Sequence

import numpy as np

from spear_datasets.protocol import Turn
from spear_datasets.schema import NumberError, parse_number


class TurnFileError(ValueError):
    """A malformed RTTM/STM line (the message names the file and line number)."""


def read_rttm(path: str | os.PathLike) -> list[Turn]:
    """Speaker segments of an RTTM file as text-less :class:`Turn` objects (seconds).

    Raises:
        TurnFileError: a ``SPEAKER`` line with fewer than 8 fields, or an onset/duration that is not a
            finite number >= 0 (:func:`spear_datasets.schema.parse_number`).
    """
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if not parts or parts[0] != "SPEAKER":
                continue
            if len(parts) < 8:
                raise TurnFileError(f"{path}:{n}: RTTM line has {len(parts)} fields, needs 8+")
            try:
                onset = parse_number(parts[3], what="onset", minimum=0)
                dur = parse_number(parts[4], what="duration", minimum=0)
            except NumberError as e:
                raise TurnFileError(f"{path}:{n}: {e}") from None
            out.append(Turn(parts[7], onset, onset + dur))
    return sorted(out, key=lambda t: (t.start, t.end))


def read_stm(path: str | os.PathLike) -> list[Turn]:
    """Timed, speaker-labelled utterances of an STM file as :class:`Turn` objects (seconds).

    Raises:
        TurnFileError: a line with fewer than 5 fields, or times that are not finite numbers >= 0 with
            end >= start.
    """
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip() or line.startswith(";;"):
                continue
            parts = line.split(maxsplit=5)
            if len(parts) < 5:
                raise TurnFileError(f"{path}:{n}: STM line has {len(parts)} fields, needs 5+")
            try:
                start = parse_number(parts[3], what="start", minimum=0)
                end = parse_number(parts[4], what="end", minimum=start)
            except NumberError as e:
                raise TurnFileError(f"{path}:{n}: {e}") from None
            text = parts[5] if len(parts) > 5 else ""
            if text.startswith("<") and ">" in text:  # optional <label> field
                text = text.split(">", 1)[1]
            out.append(Turn(parts[2], start, end, text.strip()))
    return sorted(out, key=lambda t: (t.start, t.end))


def map_speakers(turns: Sequence[Turn], segments: Sequence[Turn]) -> dict[str, str]:
    """Map each speaker label of ``turns`` to the label of ``segments`` it overlaps most in time
    (e.g. STM names ``Diane`` -> RTTM ``speaker90``).

    Raises:
        ValueError: two labels map to the same segment label, or a label overlaps none.
    """
    overlap: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for t in turns:
        for s in segments:
            o = min(t.end, s.end) - max(t.start, s.start)
            if o > 0:
                overlap[t.speaker][s.speaker] += o
    mapping = {}
    for spk in {t.speaker for t in turns}:
        if not overlap[spk]:
            raise ValueError(f"speaker {spk!r} overlaps no segment")
        mapping[spk] = max(overlap[spk], key=overlap[spk].get)
    if len(set(mapping.values())) != len(mapping):
        raise ValueError(f"speaker mapping is not one-to-one: {mapping}")
    return mapping


def split_by_speaker(mono: np.ndarray, segments: Sequence[Turn], sr: int) -> dict[str, np.ndarray]:
    """One channel per speaker from a mono mix: the mix where that speaker's segments are, zeros elsewhere.

    Where segments of both speakers overlap, both channels hold the mix (the speakers cannot be
    separated without a source-separation model).

    Args:
        mono: ``(n,)`` or ``(1, n)`` waveform at ``sr`` Hz.
        segments: speaker segments in seconds (e.g. from :func:`read_rttm`).

    Returns:
        speaker -> ``(n,)`` float32 waveform.
    """
    x = np.asarray(mono, dtype=np.float32).reshape(-1)
    out: dict[str, np.ndarray] = {}
    for seg in segments:
        ch = out.setdefault(seg.speaker, np.zeros_like(x))
        a, b = max(0, int(round(seg.start * sr))), min(len(x), int(round(seg.end * sr)))
        ch[a:b] = x[a:b]
    return out
