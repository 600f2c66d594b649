"""Dynamic-SUPERB Phase-2 task instances: the manifest (instance -> Hub dataset, revision,
category, metric) and the reader of one instance's ``test`` split, checked row by row.

**An instance** is one Hub dataset ``DynamicSuperb/<Task>_<Dataset>`` (split ``test``) with the
columns ``file`` (the item's id), ``audio`` (``datasets.Audio``), ``instruction``, ``label`` and,
on some instances, ``audio2`` (a second clip) and ``label2``, ``label3``... (further answers of a
multi-label item). Every other column is kept as item metadata (upstream's baselines copy every
non-audio column into their prediction files). The Hub id is not always the instance name
(``NamedEntityRecognition_SLUE-VoxPopuli`` lives at ``DynamicSuperb/Named_Entity_Recognition_SLUE-VoxPopuli``):
the manifest says where each instance is.

**The manifest** (``manifest.csv`` in this package; columns ``instance, hub_path, revision,
category, metric``) lists the 231 instances whose metric is read from upstream's evaluator
(``taskname_to_metrics`` in ``dynamic_superb/evaluation/task_metrics.py`` of
``cyhuang-tw/speechlm_eval``). ``hub_path`` and ``revision`` come from the task list of the
Phase-2 baselines (``DynamicSUPERB_ConfirmedTasks.csv`` in ``figisiwirf/dynamic-superb-utils``)
where it names the instance (135 instances; 130 with a 40-hex revision that no other instance
shares); elsewhere ``hub_path`` is ``DynamicSuperb/<instance>`` (the baselines' own naming rule)
and ``revision`` is empty (the Hub's default branch: not pinned). ``category`` is the project's
grouping by metric family (``classification``, ``recognition``, ``translation``,
``regression``, ``task-specific``): the paper's own category of each task is not in the public
code read. ``--manifest CSV`` (columns ``instance``, ``metric``; optional ``hub_path``,
``revision``, ``category``) adds instances or overrides rows.

**Reading** (:func:`open_instance`): a local folder of ``datasets.Dataset.save_to_disk`` (or
a ``DatasetDict`` holding ``test``), a Hub-layout folder, a ``.parquet`` file of the same schema,
or the Hub id at its revision (``datasets.load_dataset(hub_path, revision=..., split="test")``;
``HF_HUB_OFFLINE=1`` reads the cache only). Audio columns are cast to ``Audio(decode=False)``: the
embedded bytes are decoded by THE audio loader (:func:`spear_datasets.audio.decode_bytes`) with
every channel kept, never through ``["array"]``. A row with no ``file``, an empty ``instruction``
or ``label``, or no audio is a failed row with its reason; an instance without a required column
fails every row with that reason.
"""

from __future__ import annotations

import csv
import io
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional


MANIFEST = Path(__file__).resolve().parent / "manifest.csv"
#: columns every instance must have
REQUIRED_COLUMNS = ("file", "audio", "instruction", "label")
MANIFEST_COLUMNS = ("instance", "hub_path", "revision", "category", "metric")
#: the categories the packaged manifest uses (a --manifest may use others)
CATEGORY_OF_METRIC = {"llm_classification": "classification", "word_error_rate": "recognition",
                      "character_error_rate": "recognition", "phoneme_error_rate": "recognition",
                      "mix_error_rate": "recognition", "sacre_bleu": "translation",
                      "pearson_correlation_coefficient": "regression"}
_LABEL_COL = re.compile(r"label(\d*)$")
_AUDIO_COL = re.compile(r"audio(\d*)$")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class ManifestError(ValueError):
    """A manifest that cannot be used (one line naming the file and the problem)."""


class InstanceError(RuntimeError):
    """A task instance that cannot be loaded at all (one line); its task fails, others go on."""


@dataclass(frozen=True)
class TaskSpec:
    """One task instance of the manifest.

    Attributes:
        instance: the evaluator's task name (``<Task>_<Dataset>``); predictions are ``<instance>.json``.
        hub_path: Hub dataset id.
        revision: Hub revision (commit) pinned, ``""`` when unknown (the default branch).
        category: grouping of per-category means.
        metric: upstream's metric function for the instance.
    """

    instance: str
    hub_path: str
    revision: str
    category: str
    metric: str


def _spec(row: dict[str, str], where: str) -> TaskSpec:
    inst = (row.get("instance") or "").strip()
    metric = (row.get("metric") or "").strip()
    if not inst or not _NAME.fullmatch(inst):
        raise ManifestError(f"{where}: instance {inst!r} is not a task name (letters, digits, . _ -)")
    if not metric:
        raise ManifestError(f"{where}: instance {inst} has no metric")
    rev = (row.get("revision") or "").strip()
    if rev and not re.fullmatch(r"[A-Za-z0-9._/-]{1,100}", rev):
        raise ManifestError(f"{where}: instance {inst} has an unusable revision {rev!r}")
    return TaskSpec(instance=inst, hub_path=(row.get("hub_path") or "").strip() or f"DynamicSuperb/{inst}",
                    revision=rev, category=(row.get("category") or "").strip() or CATEGORY_OF_METRIC.get(metric, "task-specific"),
                    metric=metric)


def read_manifest_file(path: str | os.PathLike) -> dict[str, TaskSpec]:
    """The rows of a manifest CSV by instance (later rows of one instance win).

    Raises:
        ManifestError: unreadable file, no ``instance``/``metric`` column, a bad row.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError(f"manifest {p}: cannot be read: {e}") from None
    reader = csv.DictReader(io.StringIO(text))
    cols = [c.strip() for c in (reader.fieldnames or [])]
    missing = [c for c in ("instance", "metric") if c not in cols]
    if missing:
        raise ManifestError(f"manifest {p}: missing column(s) {', '.join(missing)} (columns: {', '.join(MANIFEST_COLUMNS)})")
    out: dict[str, TaskSpec] = {}
    for i, row in enumerate(reader, start=2):
        row = {(k or "").strip(): (v or "") for k, v in row.items()}
        if not any(v.strip() for v in row.values()):
            continue
        spec = _spec(row, f"manifest {p} line {i}")
        out[spec.instance] = spec
    return out


def load_manifest(extra: str | os.PathLike | None = None) -> dict[str, TaskSpec]:
    """The packaged manifest, with the rows of ``extra`` (``--manifest``) added or overriding.

    Raises:
        ManifestError: as :func:`read_manifest_file`.
    """
    specs = read_manifest_file(MANIFEST)
    if extra is not None:
        specs.update(read_manifest_file(extra))
    return specs


# --------------------------------------------------------------------------- one instance


@dataclass
class TaskRow:
    """One item of an instance.

    Attributes:
        index: position in the instance's ``test`` split (0-based).
        file: the ``file`` cell (the prediction file's key).
        instruction: the text instruction.
        labels: ``label``, then ``label2``, ``label3``... (non-empty ones, in order).
        audio: the audio columns this row has a cell in (``audio``, ``audio2``); the cells
            themselves are read when the row runs (:meth:`TaskInstance.audio_cell`): an instance
            is never held in memory whole.
        meta: the other non-audio cells (JSON-able), copied into the prediction entry.
        error: why the row cannot be run (``None`` when it can).
    """

    index: int
    file: str
    instruction: str
    labels: tuple[str, ...]
    audio: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)
    error: Optional[str] = None

    def entry(self, response: str) -> dict[str, Any]:
        """The prediction entry of this row in upstream's layout: every non-audio column
        (``file``, ``instruction``, ``label``, ``label2``..., the rest) and ``sllm_response``."""
        out = dict(self.meta)
        out.update(file=self.file, instruction=self.instruction)
        for k, lab in zip(label_columns(len(self.labels)), self.labels):
            out[k] = lab
        out["sllm_response"] = response
        return out


def label_columns(n: int) -> list[str]:
    """``["label", "label2", ...]`` for ``n`` labels."""
    return ["label"] + [f"label{i}" for i in range(2, n + 1)]


@dataclass
class TaskInstance:
    """A loaded instance: its spec, where it was read (``source``), its rows and the Hub
    revision it was loaded at (``revision``: the manifest's pin, ``None`` for local data or an
    unpinned Hub load)."""

    spec: TaskSpec
    source: str
    rows: list[TaskRow]
    revision: Optional[str] = None
    dataset: Any = None

    def audio_cell(self, index: int, column: str) -> dict[str, Any]:
        """The ``{"bytes", "path"}`` cell of row ``index``'s audio column ``column`` (read now).

        Raises:
            KeyError: the dataset has no such column.
        """
        cell = self.dataset[int(index)][column]
        return cell if isinstance(cell, dict) else {"bytes": None, "path": None if cell is None else str(cell)}


def _json_cell(v: Any) -> Any:
    from spear_metrics.core.records import clean_value

    v = clean_value(v)
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, list) and all(isinstance(x, (str, int, float, bool)) or x is None for x in v):
        return v
    return str(v)


def _label_text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, (list, tuple)):
        return ", ".join(str(x).strip() for x in v if str(x).strip())
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v).strip()


def _load_dataset(spec: TaskSpec, data_root: Optional[str | os.PathLike]) -> tuple[Any, str, Optional[str]]:
    """``(datasets.Dataset, source description, resolved revision)`` of ``spec``."""
    import datasets

    local = None
    if data_root is not None:
        root = Path(data_root)
        for cand in (root / spec.instance, root / f"{spec.instance}.parquet"):
            if cand.exists():
                local = cand
                break
    try:
        if local is not None and local.is_file():
            ds = datasets.load_dataset("parquet", data_files=str(local), split="train")
            return ds, str(local), None
        if local is not None:
            if (local / "state.json").is_file() or (local / "dataset_dict.json").is_file():
                obj = datasets.load_from_disk(str(local))
                if isinstance(obj, datasets.DatasetDict):
                    if "test" not in obj:
                        raise InstanceError(f"{local} holds splits {', '.join(obj)} but no 'test'")
                    obj = obj["test"]
                return obj, str(local), None
            return datasets.load_dataset(str(local), split="test"), str(local), None
        ds = datasets.load_dataset(spec.hub_path, revision=spec.revision or None, split="test")
        return ds, f"{spec.hub_path}@{spec.revision or 'default branch'}", spec.revision or None
    except InstanceError:
        raise
    except Exception as e:
        where = str(local) if local is not None else f"{spec.hub_path} (revision {spec.revision or 'default'})"
        raise InstanceError(f"cannot load instance {spec.instance} from {where}: {type(e).__name__}: "
                            f"{' '.join(str(e).split())[:300]}") from None


def open_instance(spec: TaskSpec, data_root: Optional[str | os.PathLike] = None) -> TaskInstance:
    """Load and check one instance (see the module docstring).

    Args:
        spec: the manifest row.
        data_root: a folder holding ``<instance>/`` (save_to_disk or Hub layout) or
            ``<instance>.parquet``; the Hub is used for an instance not found there.

    Raises:
        InstanceError: the dataset cannot be loaded (one line).
    """
    from datasets import Audio

    ds, source, rev = _load_dataset(spec, data_root)
    cols = list(ds.column_names)
    audio_cols = sorted((c for c in cols if _AUDIO_COL.fullmatch(c)), key=lambda c: int(_AUDIO_COL.fullmatch(c).group(1) or 1))
    for c in audio_cols:
        if isinstance(ds.features.get(c), Audio):
            ds = ds.cast_column(c, Audio(decode=False))
    label_cols = sorted((c for c in cols if _LABEL_COL.fullmatch(c)), key=lambda c: int(_LABEL_COL.fullmatch(c).group(1) or 1))
    missing = [c for c in REQUIRED_COLUMNS if c not in cols]
    whole = f"instance {spec.instance} has no {', '.join(repr(c) for c in missing)} column" if missing else None
    if not missing and len(audio_cols) > 2:
        whole = (f"instance {spec.instance} has {len(audio_cols)} audio columns ({', '.join(audio_cols)}); the adapter "
                 "request carries two (audio, audio2)")
    meta_cols = [c for c in cols if c not in audio_cols and c not in label_cols and c not in ("file", "instruction")]
    rows: list[TaskRow] = []
    seen: dict[str, int] = {}
    n = ds.num_rows
    table = ds.select_columns([c for c in cols if c not in audio_cols]).to_list() if n else []
    for i in range(n):
        cells = table[i]
        file_id = str(cells.get("file") or "").strip() if cells.get("file") is not None else ""
        labels = tuple(t for t in (_label_text(cells.get(c)) for c in label_cols) if t)
        row = TaskRow(index=i, file=file_id or f"#{i}", instruction=str(cells.get("instruction") or "").strip(),
                      labels=labels, meta={c: _json_cell(cells.get(c)) for c in meta_cols})
        if whole:
            row.error = whole
        elif not file_id:
            row.error = f"row {i} has an empty 'file'"
        elif file_id in seen:
            row.error = f"row {i} repeats file {file_id!r} of row {seen[file_id]} (the prediction file is keyed by file)"
        elif not row.instruction:
            row.error = f"row {i} ({file_id}) has an empty instruction"
        elif not cells.get("label") or not _label_text(cells.get("label")):
            row.error = f"row {i} ({file_id}) has an empty label"
        if file_id and file_id not in seen:
            seen[file_id] = i
        rows.append(row)
    # which rows hold audio, from the Arrow table (no audio bytes are copied); a row without its
    # first audio fails
    for c in audio_cols if not whole else ():
        for i, present in enumerate(_audio_present(ds, c)):
            r = rows[i]
            if present:
                r.audio += (c,)
            elif c == "audio" and r.error is None:
                r.error = f"row {i} ({r.file}) has no audio"
    return TaskInstance(spec=spec, source=source, rows=rows, revision=rev, dataset=ds)


def _audio_present(ds: Any, column: str) -> list[bool]:
    """Per row: whether audio column ``column`` holds embedded bytes or a path (read from the
    Arrow table, as lengths: the bytes stay where they are)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    col = ds.with_format("arrow")[column] if ds.num_rows else None
    if col is None:
        return []
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_struct(arr.type):
        out = None
        for name in ("bytes", "path"):
            if arr.type.get_field_index(name) < 0:
                continue
            f = pc.struct_field(arr, name)
            has = pc.fill_null(pc.greater(pc.binary_length(f), 0), False)
            out = has if out is None else pc.or_(out, has)
        if out is None:
            return [False] * len(arr)
        # a null struct (no cell at all) has no audio even where its fields read as present
        return pc.and_(out, pc.is_valid(arr)).to_pylist()
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        return pc.fill_null(pc.greater(pc.utf8_length(arr), 0), False).to_pylist()
    return pc.is_valid(arr).to_pylist()


def decode_cell(cell: dict[str, Any], what: str) -> tuple[Any, int]:
    """Decode one ``Audio(decode=False)`` cell with THE audio loader: ``((C, n) float32, Hz)``,
    every channel kept (embedded bytes first; else a ``path`` that exists).

    Raises:
        spear_datasets.audio.AudioError: no bytes and no readable path, or undecodable audio.
    """
    from spear_datasets.audio import AudioError, decode, decode_bytes

    data = cell.get("bytes")
    name = f"{what} ({cell.get('path') or 'embedded bytes'})"
    if data:
        return decode_bytes(data, name=str(cell.get("path") or what))
    path = cell.get("path")
    if path and os.path.isfile(path):
        return decode(path)
    raise AudioError(f"{name}: no embedded bytes and no readable file")


def select_specs(specs: dict[str, TaskSpec], names: list[str]) -> list[TaskSpec]:
    """The specs of ``names`` in the order given.

    Raises:
        ManifestError: a name the manifest lacks (``--manifest`` can add it).
    """
    missing = [n for n in names if n not in specs]
    if missing:
        raise ManifestError(f"instance(s) not in the manifest: {', '.join(missing)} (add them with --manifest CSV: "
                            "columns instance,metric[,hub_path,revision,category])")
    return [specs[n] for n in names]

