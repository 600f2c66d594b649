"""Reader of Meta's Seamless Interaction raw layout for the SPEAR selection protocol.

Layout (``SPEAR_PROTOCOL.md`` section 1): one 48 kHz WAV per participant named
``V<vendor>_S<session>_I<interaction>_P<participant>.wav``, a transcript JSON beside it (same
stem) holding a list of ``{start, end, transcript, words: [{word, start, end, score}]}``; a
dyad is the two participants sharing ``V_S_I``. Data licence: CC BY-NC 4.0.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from spear_datasets.audio import TARGET_SR, load_audio
from spear_datasets.protocol import Turn
from spear_datasets.schema import NumberError, parse_number

STEM_RE = re.compile(r"^(?P<conv>V\d+_S\d+_I\d+)_(?P<pid>P\d{4}A?)$")


def read_transcript(path: str | os.PathLike, speaker: str) -> list[Turn]:
    """Turns of one participant from a Seamless transcript JSON (seconds).

    Entries without text, or whose times are not finite numbers >= 0 (:func:`parse_number`), are skipped.

    Raises:
        ValueError: the file is not a JSON list.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{path}: a Seamless transcript is a JSON list")
    out = []
    for e in data:
        try:
            start = parse_number(e["start"], what="start", minimum=0)
            end = parse_number(e["end"], what="end", minimum=0)
        except (KeyError, TypeError, NumberError):
            continue
        text = str(e.get("transcript") or "").strip()
        if text and end >= start:
            out.append(Turn(speaker, start, end, text))
    return out


def find_dyads(root: str | os.PathLike) -> dict[str, dict[str, Path]]:
    """``conversation_id -> {participant: wav path}`` for every complete dyad under ``root``
    (both WAVs and both transcript JSONs present)."""
    dyads: dict[str, dict[str, Path]] = defaultdict(dict)
    for wav in sorted(Path(root).rglob("*.wav")):
        m = STEM_RE.match(wav.stem)
        if m and wav.with_suffix(".json").is_file():
            dyads[m["conv"]][m["pid"]] = wav
    return {k: v for k, v in dyads.items() if len(v) == 2}


def load_dyad(participants: dict[str, Path], sr: int = TARGET_SR) -> tuple[list[Turn], dict[str, np.ndarray]]:
    """Turns of both participants and their mono channels resampled to ``sr`` Hz.

    Raises:
        AudioError: a WAV cannot be decoded.
    """
    turns: list[Turn] = []
    channels: dict[str, np.ndarray] = {}
    for pid, wav in participants.items():
        turns.extend(read_transcript(wav.with_suffix(".json"), pid))
        channels[pid] = load_audio(wav, sr=sr, channels="mix")[0]
    return turns, channels
