"""Reader of Full-Duplex-Bench v1.5 folders (upstream layout).

Source: ``v1_v1.5/dataset/README.md`` of ``DanielLin94144/Full-Duplex-Bench`` (v1.5 data: MIT).
Four subsets, one folder per sample ``<subset>/<id>/``:

- ``input.wav``: user audio **with** the overlap event;
- ``clean_input.wav``: the same user audio **without** it;
- ``metadata.json``: ``{"context_text", "current_turn_text", "timestamps": [start_s, end_s]}``
  (the overlap window on ``input.wav``'s time line, seconds).

After inference a sample folder also holds ``output.wav`` (reply to ``input.wav``) and
``clean_output.wav`` (reply to ``clean_input.wav``), each time-synchronous with its input, and
optionally word-timed transcripts ``input.json``, ``clean_input.json``, ``output.json``,
``clean_output.json`` (``{"text", "chunks": [{"text", "timestamp": [s, e]}]}``, the shape of
upstream's ``get_transcript/asr.py``).

Nothing here raises on a bad *sample*: :func:`list_samples` lists every sample folder; the readers
raise :class:`spear_datasets.sources.fdb.FDBFormatError` (one line) so that sample fails alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spear_datasets.sources.fdb import FDBFormatError, load_json, timestamp_pair

#: the v1.5 subsets and their sizes in the upstream release (dataset README)
SUBSETS: dict[str, int] = {
    "user_interruption": 200,
    "user_backchannel": 99,
    "talking_to_other": 100,
    "background_speech": 100,
}
#: the two halves of a sample: prefix of the input / output file names (upstream's Moshi client
#: ``prefix = ""  # "" or "clean_"``)
HALVES = ("", "clean_")
#: the files that make a folder a v1.5 sample folder
MARKERS = ("input.wav", "clean_input.wav", "metadata.json")


@dataclass(frozen=True)
class Metadata:
    """``metadata.json`` of a sample: texts and the overlap window ``[start_s, end_s]`` (s, on
    ``input.wav``'s time line)."""

    context_text: str
    current_turn_text: str
    overlap_start_s: float
    overlap_end_s: float


@dataclass(frozen=True)
class V15Sample:
    """One v1.5 sample folder (paths given whether or not the files exist)."""

    id: str
    subset: str
    dir: Path

    def path(self, name: str) -> Path:
        return self.dir / name

    @property
    def key(self) -> str:
        return f"{self.subset}/{self.id}"


def read_metadata(path: str | os.PathLike) -> Metadata:
    """Read ``metadata.json``.

    Raises:
        FDBFormatError: missing/invalid file, ``timestamps`` not two finite numbers >= 0, an end
            before the start.
    """
    p = Path(path)
    data: Any = load_json(p)
    if not isinstance(data, dict):
        raise FDBFormatError(f"{p}: not a JSON object")
    s, e = timestamp_pair({"timestamp": data.get("timestamps")}, p)  # v1.0's checks of a [start, end] pair
    return Metadata(str(data.get("context_text") or ""), str(data.get("current_turn_text") or ""), s, e)


def is_sample_dir(d: Path) -> bool:
    """A v1.5 sample folder: holds ``clean_input.wav`` and ``metadata.json`` (and ``input.wav``)."""
    return all((d / m).is_file() for m in MARKERS)


def _subdirs(d: Path) -> list[Path]:
    return [c for c in d.iterdir() if c.is_dir() and not c.name.startswith(".")]


def _sort_key(name: str) -> tuple:
    return (0, int(name), name) if name.isdigit() else (1, 0, name)


def detect_layout(root: str | os.PathLike) -> tuple[str, list[Path]] | None:
    """How ``root`` holds v1.5 samples: ``("subset", [root])`` when its sub-folders are sample
    folders, ``("root", [subset folders...])`` when its sub-folders hold sample folders (the
    ``v1_5/`` root), ``None`` when neither (not a v1.5 folder: e.g. a v1.0 task folder)."""
    r = Path(root)
    if not r.is_dir():
        return None
    subs = _subdirs(r)
    if any(is_sample_dir(c) for c in subs):
        return "subset", [r]
    holders = sorted((c for c in subs if any(is_sample_dir(g) for g in _subdirs(c))), key=lambda p: p.name)
    if holders:
        return "root", holders
    return None


def is_v15_folder(root: str | os.PathLike) -> bool:
    """``root`` is a v1.5 subset folder or a v1.5 root (:func:`detect_layout`)."""
    return detect_layout(root) is not None


def list_samples(subset_dir: str | os.PathLike, subset: str | None = None) -> list[V15Sample]:
    """Every sample folder of a subset folder, numeric ids in numeric order, then the others.
    Hidden folders are skipped; every other sub-folder is a sample, even one that lacks files
    (it fails when scored, with the reason). ``subset`` defaults to the folder's name.

    Raises:
        FileNotFoundError: ``subset_dir`` is not a folder.
    """
    d = Path(subset_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"FDB v1.5 folder not found: {d}")
    name = subset or d.name
    return [V15Sample(c.name, name, c) for c in sorted(_subdirs(d), key=lambda p: _sort_key(p.name))]
