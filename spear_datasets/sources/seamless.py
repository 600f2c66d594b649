"""Reader of Meta's Seamless Interaction raw layout for the SPEAR selection protocol.

Layout (``SPEAR_PROTOCOL.md`` section 1): one 48 kHz WAV per participant named
``V<vendor>_S<session>_I<interaction>_P<participant>.wav``, a transcript JSON beside it (same
stem) holding a list of ``{start, end, transcript, words: [{word, start, end, score}]}`` (or a record
holding that list under ``metadata:transcript``); a
dyad is the two participants sharing ``V_S_I``. Data licence: CC BY-NC 4.0.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from spear_datasets.audio import TARGET_SR, load_audio
from spear_datasets.protocol import Turn
from spear_datasets.schema import NumberError, parse_number

STEM_RE = re.compile(r"^(?P<conv>V\d+_S\d+_I\d+)_(?P<pid>P\d{4}A?)$")


def read_transcript(path: str | os.PathLike, speaker: str) -> list[Turn]:
    """Turns of one participant from a Seamless transcript JSON (seconds): a list of segments, or
    the release's record holding it under ``transcript`` or ``metadata:transcript`` (as SPEAR's
    ``bin/prepare_data_from_seamless.py`` ``extract_turns`` reads it).

    Entries without text, or whose times are not finite numbers >= 0 (:func:`parse_number`), are skipped.

    Raises:
        ValueError: the file is not a JSON list.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, dict):  # the release's per-participant record: its "transcript" or "metadata:transcript"
        data = data.get("transcript") if data.get("transcript") is not None else data.get("metadata:transcript", [])
    if not isinstance(data, list):
        raise ValueError(f"{path}: a Seamless transcript is a JSON list of segments, or a record holding one "
                         "under 'transcript' / 'metadata:transcript'")
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


def clip_key(stem: str) -> Optional[tuple[str, frozenset, int]]:
    """``(conversation_id, {P1, P2}, k)`` of a SPEAR clip stem ``<V_S_I>_<P1>_<P2>_<k>`` (the
    speaker order left out: upstream orders them as its dyad table, the project sorts them);
    ``None`` for another name."""
    m = CLIP_STEM_RE.match(stem)
    return (m["conv"], frozenset((m["p1"], m["p2"])), int(m["k"])) if m else None


CLIP_STEM_RE = re.compile(r"^(?P<conv>V\d+_S\d+_I\d+)_(?P<p1>P\d{4}A?)_(?P<p2>P\d{4}A?)_(?P<k>\d+)$")


def package_members(metadata_csv: str | os.PathLike) -> set[tuple[str, frozenset, int]]:
    """The clips a SPEAR package lists for one split/subset (:func:`clip_key` of each row's
    ``audio_path`` stem).

    Raises:
        spear_datasets.schema.MetadataError: the CSV is unusable."""
    from spear_datasets.schema import read_metadata

    keys = set()
    for r in read_metadata(metadata_csv, required=("audio_path",)):
        k = clip_key(Path(str(r.get("audio_path") or "").replace("\\", "/")).stem)
        if k is not None:
            keys.add(k)
    return keys


def build_from_seamless(seamless_dir: str | os.PathLike, root: str | os.PathLike, *, split: str = "test",
                        subsets: Sequence[str] = ("improvised", "naturalistic"),
                        members: Optional[dict[str, set]] = None, progress: bool = False) -> dict[str, int]:
    """Cut SPEAR's samples from a local copy of Seamless Interaction into the upstream layout.

    Reads ``SEAMLESS/<subset>/<split>/`` (the Hub dataset ``facebook/seamless-interaction``'s
    layout: per-participant ``V.._S.._I.._P....wav`` with its transcript JSON beside it, any
    folders below), pairs the participants of each conversation (:func:`find_dyads`), loads them
    (:func:`load_dyad`: 16 kHz mono per participant), applies the selection protocol
    (:func:`spear_datasets.protocol.select_samples`) and writes
    ``ROOT/data/seamless_2t_2s_questions/inputs/<split>/<subset>/`` (``audios/`` input clips,
    ``answers/`` human answers, ``metadata.csv``).

    Args:
        members: per subset, the clips to keep (:func:`package_members` of SPEAR's package lists);
            ``None``: every selected clip.

    Returns:
        rows written per subset.

    Raises:
        spear_datasets.identity.DataCheckError: a subset folder missing, no complete dyad in it,
            or the output folder already there.
        AudioError: a participant WAV that cannot be decoded.
    """
    from spear_datasets.identity import DataCheckError
    from spear_datasets.protocol import select_samples, write_samples
    from spear_datasets.schema import write_metadata
    from spear_datasets.sources.package import inputs_dir

    out: dict[str, int] = {}
    for subset in subsets:
        src = Path(seamless_dir) / subset / split
        if not src.is_dir():
            raise DataCheckError(f"{src}: missing (Seamless Interaction's layout is <subset>/<split>/...)")
        dyads = find_dyads(src)
        if not dyads:
            raise DataCheckError(f"{src}: no complete conversation (two participants' WAV + transcript JSON)")
        dest = inputs_dir(root) / split / subset
        if (dest / "metadata.csv").exists():
            raise DataCheckError(f"{dest / 'metadata.csv'} already exists: build into another root")
        keep = None if members is None else members.get(subset, set())
        rows = []
        items = sorted(dyads.items())
        if progress:
            from tqdm.auto import tqdm

            items = tqdm(items, desc=f"seamless {split}/{subset}", unit="conversation")
        for conv, participants in items:
            turns, channels = load_dyad(participants)
            samples = select_samples(turns)
            written = write_samples(samples, channels, dest, conversation_id=conv)
            for r in written:
                k = clip_key(Path(r.audio_path).stem)
                if keep is None or k in keep:
                    rows.append(r)
                else:  # not one of SPEAR's clips of this split: its files go
                    (dest / r.audio_path).unlink(missing_ok=True)
                    if r.answer_audio_path:
                        (dest / r.answer_audio_path).unlink(missing_ok=True)
        if not rows:
            raise DataCheckError(f"{src}: no sample kept ({'none of the listed clips' if keep is not None else 'no question'})")
        write_metadata(dest / "metadata.csv", rows)
        out[subset] = len(rows)
    return out
