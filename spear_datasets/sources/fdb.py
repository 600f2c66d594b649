"""Reader of Full-Duplex-Bench (v1.0) task folders, in the upstream layout.

Source: ``DanielLin94144/Full-Duplex-Bench`` (arXiv 2503.04721); the layout is described in
``FDB_PROTOCOL.md``. One folder per sample, ``<task_dir>/<id>/``:

- ``input.wav`` (user channel) and ``output.wav`` (the model's channel), both from t = 0 s
  (the scorer requires both for the ASR-based tasks and ``output.wav`` for backchannel);
- ``output.json``: word-timed ASR of ``output.wav``
  ``{"text": str, "chunks": [{"text": word, "timestamp": [start_s, end_s]}]}`` (may be absent:
  the scorer then transcribes ``output.wav``);
- the task file: ``pause.json`` (pause handling), ``turn_taking.json`` (smooth turn-taking),
  ``interrupt.json`` (user interruption); backchannel folders (numeric ICC ids) need none.

Nothing here raises on a bad *sample*: :func:`list_samples` lists every sample folder and the
per-file readers raise :class:`FDBFormatError` (one line) so the caller fails that sample only.
Times are checked where they are read: a time must be a finite number >= 0 s (``null`` is kept as
``None``) and a span's end must not come before its start. Whether a time lies inside the audio
is checked by the scorer, which knows the durations.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

#: task name -> the task file each sample folder must hold (``None``: none needed)
TASK_FILES: dict[str, str | None] = {
    "pause_handling": "pause.json",
    "smooth_turn_taking": "turn_taking.json",
    "backchannel": None,
    "user_interruption": "interrupt.json",
}
TASKS = tuple(TASK_FILES)


class FDBFormatError(ValueError):
    """A sample file is missing or malformed; the message is one line and names the file."""


class Chunk(NamedTuple):
    """One ASR word: ``text`` and its ``start``/``end`` in seconds from the start of
    ``output.wav`` (either may be ``None`` when the ASR gave no time)."""

    text: str
    start: float | None
    end: float | None


@dataclass(frozen=True)
class OutputTranscript:
    """The ASR of ``output.wav``: full ``text``, word ``chunks`` (in file order) and ``source``
    (``"output.json"`` or the ASR model that made it)."""

    text: str
    chunks: tuple[Chunk, ...]
    source: str = "output.json"


@dataclass(frozen=True)
class FDBSample:
    """One sample folder. Paths are given whether or not the files exist."""

    id: str
    task: str
    dir: Path

    @property
    def input_wav(self) -> Path:
        return self.dir / "input.wav"

    @property
    def output_wav(self) -> Path:
        return self.dir / "output.wav"

    @property
    def output_json(self) -> Path:
        return self.dir / "output.json"

    @property
    def task_json(self) -> Path | None:
        name = TASK_FILES[self.task]
        return None if name is None else self.dir / name


def _sort_key(name: str) -> tuple:
    return (0, int(name), name) if name.isdigit() else (1, 0, name)


def list_samples(root: str | os.PathLike, task: str) -> list[FDBSample]:
    """Every sample folder of a task directory, numeric ids in numeric order, then the others.

    Hidden folders (``.name``) are skipped; every other sub-folder is a sample, even one that
    lacks files (it fails when scored, with the reason).

    Raises:
        ValueError: unknown ``task``.
        FileNotFoundError: ``root`` is not a folder.
    """
    if task not in TASK_FILES:
        raise ValueError(f"unknown FDB task {task!r}; known: {', '.join(TASKS)}")
    r = Path(root)
    if not r.is_dir():
        raise FileNotFoundError(f"FDB task folder not found: {r}")
    names = sorted((p.name for p in r.iterdir() if p.is_dir() and not p.name.startswith(".")), key=_sort_key)
    return [FDBSample(id=n, task=task, dir=r / n) for n in names]


def _load_json(path: Path) -> Any:
    if not path.is_file():
        raise FDBFormatError(f"missing file: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FDBFormatError(f"not valid JSON: {path} ({' '.join(str(e).split())})") from None


def _time(v: Any, path: Path, what: str) -> float | None:
    """A time in seconds: ``None`` stays ``None``; else a finite number >= 0 (FDBFormatError otherwise)."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise FDBFormatError(f"{path}: {what} is not a number: {v!r}")
    t = float(v)
    if not math.isfinite(t):
        raise FDBFormatError(f"{path}: {what} is not a finite time: {v!r}")
    if t < 0:
        raise FDBFormatError(f"{path}: {what} is a negative time: {v!r} s")
    return t


def _span(s: float | None, e: float | None, path: Path, what: str) -> None:
    if s is not None and e is not None and e < s:
        raise FDBFormatError(f"{path}: {what} ends before it starts: [{s!r}, {e!r}]")


def parse_chunks(raw: Any, path: Path | str = "output.json") -> tuple[Chunk, ...]:
    """``[{"text", "timestamp": [s, e]}, ...]`` -> chunks; times may be ``null`` (-> ``None``).

    Raises:
        FDBFormatError: not a list, an entry without a two-element ``timestamp``, a time that is
            not a finite number >= 0, or a word whose end comes before its start.
    """
    p = Path(path)
    if not isinstance(raw, list):
        raise FDBFormatError(f"{p}: 'chunks' is not a list")
    out = []
    for i, c in enumerate(raw):
        if not isinstance(c, dict) or not isinstance(c.get("timestamp"), (list, tuple)) or len(c["timestamp"]) != 2:
            raise FDBFormatError(f"{p}: chunk {i} has no [start, end] timestamp")
        s, e = _time(c["timestamp"][0], p, f"chunk {i} start"), _time(c["timestamp"][1], p, f"chunk {i} end")
        _span(s, e, p, f"chunk {i}")
        out.append(Chunk(str(c.get("text", "")), s, e))
    return tuple(out)


def read_output_json(path: str | os.PathLike) -> OutputTranscript:
    """Read an ``output.json`` (word-timed ASR of ``output.wav``; times in seconds).

    Raises:
        FDBFormatError: missing file, invalid JSON, no ``chunks`` list, malformed chunk or bad
            time (see :func:`parse_chunks`).
    """
    p = Path(path)
    data = _load_json(p)
    if not isinstance(data, dict) or "chunks" not in data:
        raise FDBFormatError(f"{p}: no 'chunks' list")
    return OutputTranscript(text=str(data.get("text") or ""), chunks=parse_chunks(data["chunks"], p))


def _first_entry(path: Path) -> dict:
    data = _load_json(path)
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        raise FDBFormatError(f"{path}: expected a non-empty list of objects")
    return data[0]


def _timestamp(entry: dict, path: Path) -> tuple[float, float]:
    ts = entry.get("timestamp")
    if not isinstance(ts, (list, tuple)) or len(ts) != 2:
        raise FDBFormatError(f"{path}: first entry has no [start, end] timestamp")
    s, e = _time(ts[0], path, "timestamp start"), _time(ts[1], path, "timestamp end")
    if s is None or e is None:
        raise FDBFormatError(f"{path}: null timestamp {list(ts)!r}")
    _span(s, e, path, "first entry")
    return s, e


def read_turn_taking(path: str | os.PathLike) -> tuple[float, float]:
    """``turn_taking.json`` (or ``pause.json``): ``(start_s, end_s)`` of its first entry.

    For turn-taking, the *start* of this span is where the user's turn ends (FDB measures
    latency from ``timestamp[0]``).

    Raises:
        FDBFormatError: missing/invalid file, empty list, missing or null timestamp, a time
            that is not a finite number >= 0, an end before the start.
    """
    p = Path(path)
    return _timestamp(_first_entry(p), p)


@dataclass(frozen=True)
class Interrupt:
    """First entry of ``interrupt.json``: the ``context`` turn, the ``interrupt`` turn text and
    the interrupting turn's ``start_s``/``end_s`` (seconds from the start of ``input.wav``)."""

    context: str
    interrupt: str
    start_s: float
    end_s: float


def read_interrupt(path: str | os.PathLike) -> Interrupt:
    """Read ``interrupt.json``.

    Raises:
        FDBFormatError: missing/invalid file, empty list, missing or null timestamp, a time
            that is not a finite number >= 0, an end before the start.
    """
    p = Path(path)
    entry = _first_entry(p)
    s, e = _timestamp(entry, p)
    return Interrupt(context=str(entry.get("context") or ""), interrupt=str(entry.get("interrupt") or ""), start_s=s, end_s=e)


def read_reference_distribution(path: str | os.PathLike) -> dict[str, Any]:
    """FDB's human backchannel distribution (``icc_gt_distribution.json``: id -> time histogram).

    The file belongs to FDB (CC BY-NC 4.0); users pass its path, the project does not ship it.

    An entry that is a list of numbers comes back as a list of floats; any other entry (empty
    list, non-numbers, ...) is kept as given, so that only the samples of that id fail when
    scored (``spear_metrics.full_duplex.definition.reference_histogram`` says why), not the run.

    Raises:
        FDBFormatError: missing/invalid file, or not a JSON object.
    """
    p = Path(path)
    data = _load_json(p)
    if not isinstance(data, dict):
        raise FDBFormatError(f"{p}: expected an object id -> list of numbers")
    out: dict[str, Any] = {}
    for k, v in data.items():
        numeric = isinstance(v, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
        out[str(k)] = [float(x) for x in v] if numeric else v
    return out
