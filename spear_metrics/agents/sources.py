"""The inputs of ``spearbench infer``: the rows of a SPEAR split, read from a metadata CSV
(:class:`CsvSource`) or a Hub-layout dataset (:class:`DatasetSource`), each with its typed row
(or why it cannot be run) and a unique output name (:func:`open_source`). Run by
:mod:`spear_metrics.agents.harness`.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from spear_datasets.audio import AudioError
from spear_datasets.files import active_folder, atomic_path
from spear_datasets.schema import RowError, SpearRow, parse_row, read_metadata, resolve_path
from spear_metrics.agents.rows import failure_reason

WORK_DIR = ".work"
INPUTS_DIR = "inputs"


class InferError(RuntimeError):
    """The run cannot proceed as a whole (one-line reason; the CLI exits non-zero)."""


# --------------------------------------------------------------------------- sources


@dataclass
class _Entry:
    """One input of a source: its typed row (or why it cannot be run) and its output name."""

    row: Optional[SpearRow]
    audio_cell: str
    name: str
    error: Optional[str] = None
    #: the earlier row this one repeats (``duplicate of row N``), else ``None``
    duplicate_of: Optional[int] = None


class Source:
    """Rows of a SPEAR split, whatever they come from. Subclasses fill :attr:`entries` and
    implement :meth:`input_file` / :meth:`reference_file`."""

    description: str = ""
    entries: list[_Entry]
    #: True when input clips are written under OUT/inputs (their metadata path is relative)
    copies_inputs: bool = False

    def input_file(self, i: int, out: Path) -> Path:
        raise NotImplementedError

    def reference_file(self, i: int, out: Path) -> Optional[Path]:
        raise NotImplementedError

    def fingerprint(self) -> dict[str, Any]:
        return {"data": self.description}

    def failed_audio_path(self, i: int, out: Path) -> str:
        """The ``audio_path`` written to ``OUT/metadata.csv`` for row ``i`` that failed before its
        input was read: the same path form as the rows that ran. Default: the cell as written."""
        return self.entries[i].audio_cell

    def _name_entries(self, rows: list[tuple[Optional[SpearRow], str, Optional[str], str]]) -> None:
        """``(row, audio_cell, error, identity)`` -> entries with unique output names (``<stem>.wav``;
        when taken, ``<stem>__row<i>.wav``, then ``<stem>__row<i>_<k>.wav``); a repeated identity
        (same input clip) fails as ``duplicate of row N``."""
        seen_id: dict[str, int] = {}
        seen_name: set[str] = set()
        self.entries = []
        for i, (row, cell, err, ident) in enumerate(rows):
            dup = None
            if err is None and ident in seen_id:
                dup = seen_id[ident]
                err = f"duplicate of row {dup} (same audio_path)"
            elif err is None:
                seen_id[ident] = i
            stem = Path(cell).stem or f"row{i:06d}"
            name, k = f"{stem}.wav", 0
            while name in seen_name:  # another row's clip of the same name, or a name made so for it
                name = f"{stem}__row{i}.wav" if k == 0 else f"{stem}__row{i}_{k}.wav"
                k += 1
            seen_name.add(name)
            self.entries.append(_Entry(row=row if err is None else None, audio_cell=cell, name=name, error=err,
                                       duplicate_of=dup))


def _copy_once(dest: Path, size: int, write: Callable[[Path], None]) -> Path:
    """``write(tmp)`` then ``tmp`` renamed to ``dest``, unless an earlier invocation of this run
    already put ``size`` bytes there (a file it recorded)."""
    owner = active_folder(dest)
    if dest.is_file() and dest.stat().st_size == size and (owner is None or owner.is_recorded(dest)):
        return dest  # copied by an earlier invocation of this run
    with atomic_path(dest, tmp_suffix=str(os.getpid())) as tmp:
        write(tmp)
    return dest


class CsvSource(Source):
    """A SPEAR metadata CSV; input paths resolve with :func:`resolve_path` and are written to the
    output metadata as absolute paths (the clips are not copied), or, with ``copy_inputs``, as
    copies ``inputs/<clip><suffix>`` inside ``OUT`` (a folder ``score`` takes anywhere, e.g. on
    another machine)."""

    def __init__(self, csv_path: str | os.PathLike, copy_inputs: bool = False):
        self.copies_inputs = bool(copy_inputs)
        self.path = Path(csv_path).resolve()
        self.description = str(self.path)
        raw = read_metadata(self.path, required=("audio_path", "context_end_time", "question_end_time"))
        self._inputs: dict[int, Path] = {}
        self._refs: dict[int, Optional[Path]] = {}
        self._resolved: dict[int, Path] = {}  # every row whose audio_path resolves, failed ones too
        rows = []
        for i, cells in enumerate(raw):
            cell = str(cells.get("audio_path") or "")
            try:
                self._resolved[i] = resolve_path(cell.strip(), self.path.parent)
            except RowError:
                pass
            try:
                row = parse_row(cells, require_answer=False)
                p = resolve_path(row.audio_path, self.path.parent)
                self._inputs[i] = p
                self._refs[i] = resolve_path(row.answer_audio_path, self.path.parent) if row.answer_audio_path else None
                rows.append((row, cell, None, str(p)))
            except RowError as e:
                rows.append((None, cell, str(e), f"#{i}"))
        self._name_entries(rows)

    def fingerprint(self) -> dict[str, Any]:
        fp = {"data": self.description, "data_sha256": hashlib.sha256(self.path.read_bytes()).hexdigest()}
        return {**fp, "copy_inputs": True} if self.copies_inputs else fp

    def _copy_name(self, i: int) -> str:
        return Path(self.entries[i].name).stem + (self._inputs[i].suffix.lower() or ".wav")

    def input_file(self, i: int, out: Path) -> Path:
        src = self._inputs[i]
        if not self.copies_inputs:
            return src
        if not src.is_file():
            raise AudioError(f"input clip not found: {src}")
        import shutil

        return _copy_once(out / INPUTS_DIR / self._copy_name(i), src.stat().st_size,
                          lambda tmp: shutil.copyfile(src, tmp))

    def reference_file(self, i: int, out: Path) -> Optional[Path]:
        return self._refs.get(i)

    def failed_audio_path(self, i: int, out: Path) -> str:
        """The absolute resolved path, like the rows that ran; the cell as written when it does not
        resolve (empty, NUL byte, or escaping its data root: it escapes OUT's root too, so ``score``
        fails it for the same reason and never reads it). With ``copy_inputs``, as a dataset
        source: a duplicate row names the copy of the row it repeats, any other the cell as written."""
        if self.copies_inputs:
            dup = self.entries[i].duplicate_of
            return f"{INPUTS_DIR}/{self._copy_name(dup)}" if dup is not None else self.entries[i].audio_cell
        p = self._resolved.get(i)
        return str(p) if p is not None else self.entries[i].audio_cell


class DatasetSource(Source):
    """A Hub-layout dataset (local folder from ``build-dataset`` or a Hub id) loaded with
    ``datasets.load_dataset(data, subset, split)``; audio is read as the embedded file bytes
    (``Audio(decode=False)``), never through ``["array"]`` (which may mix channels)."""

    copies_inputs = True

    def __init__(self, data: str, split: str, subset: str):
        from datasets import Audio, load_dataset

        try:
            ds = load_dataset(data, subset, split=split)
        except Exception as e:  # missing config/split, no such repo, offline...
            raise InferError(f"cannot load dataset {data!r} (config {subset!r}, split {split!r}): {failure_reason(e)}") from None
        if "audio" not in ds.column_names:
            raise InferError(f"dataset {data!r} has no 'audio' column")
        ds = ds.cast_column("audio", Audio(decode=False))
        if "answer_audio" in ds.column_names:
            ds = ds.cast_column("answer_audio", Audio(decode=False))
        self.ds = ds
        self.description = f"{os.path.abspath(data) if os.path.isdir(data) else data}::{subset}/{split}"
        meta_cols = [c for c in ds.column_names if c not in ("audio", "answer_audio")]
        table = ds.select_columns(meta_cols).to_list()
        rows = []
        for i, cells in enumerate(table):
            cell = str(cells.get("audio_path") or "") or f"row{i:06d}.wav"
            try:
                cells = dict(cells, audio_path=cell)
                rows.append((parse_row(cells, require_answer=False), cell, None, cell))
            except RowError as e:
                rows.append((None, cell, str(e), f"#{i}"))
        self._name_entries(rows)

    def _write(self, value: Optional[dict], dest: Path) -> Optional[Path]:
        if not value or not value.get("bytes"):
            if value and value.get("path") and os.path.isfile(value["path"]):
                return Path(value["path"])
            return None
        data = value["bytes"]
        return _copy_once(dest, len(data), lambda tmp: tmp.write_bytes(data))

    def input_file(self, i: int, out: Path) -> Path:
        p = self._write(self.ds[i]["audio"], out / INPUTS_DIR / self.entries[i].name)
        if p is None:
            raise AudioError(f"dataset row {i} has no input audio")
        return p

    def failed_audio_path(self, i: int, out: Path) -> str:
        """A duplicate row names the copied input of the row it repeats (``inputs/<clip>.wav``, the
        form of the rows that ran); any other failed row keeps its dataset cell (no clip was copied)."""
        dup = self.entries[i].duplicate_of
        if dup is not None:
            return f"{INPUTS_DIR}/{self.entries[dup].name}"
        return self.entries[i].audio_cell

    def reference_file(self, i: int, out: Path) -> Optional[Path]:
        if "answer_audio" not in self.ds.column_names:
            return None
        return self._write(self.ds[i]["answer_audio"], out / WORK_DIR / "reference" / self.entries[i].name)


def open_source(data: str, *, split: str = "test", subset: str = "improvised", copy_inputs: bool = False) -> Source:
    """A SPEAR metadata CSV (``*.csv``; ``copy_inputs``: its clips copied into ``OUT/inputs``), a
    Hub-layout dataset folder, or a Hub dataset id (its clips always written into ``OUT/inputs``).

    Raises:
        MetadataError: an unusable CSV. InferError: a dataset that cannot be loaded.
    """
    if str(data).lower().endswith(".csv"):
        return CsvSource(data, copy_inputs=copy_inputs)
    return DatasetSource(str(data), split, subset)
