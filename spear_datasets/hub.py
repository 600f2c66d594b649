"""Build (and push) the Hub-layout dataset ``spearbench/seamless_2t_2s_questions``.

Input: a SPEAR data folder in the upstream layout (``SPEAR_PROTOCOL.md`` section 1)::

    SRC/inputs/<split>/<subset>/metadata.csv      split in {dev, test}, subset in {improvised, naturalistic}

whose paths read ``data/seamless_2t_2s_questions/inputs/...`` and resolve against the folder
that holds ``data/`` (else the CSV's own folder): :func:`spear_datasets.schema.resolve_path`.
Split/subset pairs that do not exist are simply absent from the output.

Output (``HUB_DIR``), what ``push_to_hub`` would have produced, loadable offline with
``datasets.load_dataset(HUB_DIR, "improvised", split="test")`` and no loading script::

    HUB_DIR/README.md                                   dataset card, YAML ``configs``:
                                                        improvised, naturalistic, all (default)
    HUB_DIR/data/<subset>/<split>-00000-of-0000N.parquet
    HUB_DIR/skipped_rows.jsonl                          one line per skipped source row, with reason
    HUB_DIR/build_report.json                           counts per subset/split

Parquet columns: ``audio`` (input clip, 16 kHz stereo: channel 0 = first speaker of
``speakers``), ``answer_audio`` (the human answer clip, ``None`` when the row names none), the
SPEAR metadata columns (times in seconds, float64; empty -> null) and ``subset``. Audio is
EMBEDDED as the original file bytes (``{"bytes": <file bytes>, "path": <file name>}``), so the
decoder's samples equal the source samples exactly. Note that ``value["array"]`` of a
``datasets`` Audio value may average the channels: to keep speakers apart, read
``value.get_all_samples().data`` (shape ``(2, n)``) or the embedded bytes.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from spear_datasets.audio import TARGET_SR, AudioError, decode, input_clip_info
from spear_datasets.files import atomic_path
from spear_datasets.ownership import open_folder
from spear_datasets.schema import (
    PARTICIPANT_RE,
    SPEAR_COLUMNS,
    MetadataError,
    RowError,
    check_times_against_clip,
    hf_features,
    parse_row,
    read_metadata,
    resolve_path,
)


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` is set to a true value (as ``huggingface_hub`` reads it), read
    at each call (not at import time, as ``huggingface_hub.constants`` does). THE check of the
    project (:func:`spear_metrics.core.models.hub_offline` is this function)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


#: Subsets and splits of the protocol, in card order.
SUBSETS: tuple[str, ...] = ("improvised", "naturalistic")
SPLITS: tuple[str, ...] = ("dev", "test")
#: Name of the combined configuration (the default one).
ALL_CONFIG = "all"
#: Default Hub repository of the dataset.
DEFAULT_REPO_ID = "spearbench/seamless_2t_2s_questions"
#: Files of HUB_DIR that are reports of the build (pushed too: they say what was left out).
SKIPPED_FILE = "skipped_rows.jsonl"
REPORT_FILE = "build_report.json"

_TIME_COLUMNS = ("context_end_time", "question_end_time", "answer_duration", "answer_start_time")


class HubBuildError(RuntimeError):
    """The build cannot proceed as a whole (no metadata found, output folder in the way...)."""


@dataclass(frozen=True)
class DataSource:
    """Where the recordings of a built dataset come from, as its card states it.

    ``license`` is a Hub licence id (``cc-by-nc-4.0``, ``cc-by-4.0``, ``mit``...; ``unknown``
    when nobody said); ``name`` one phrase (``""`` when unknown); ``url`` optional.
    """

    name: str
    license: str = "unknown"
    url: str | None = None


#: Meta's Seamless Interaction recordings (the SPEAR benchmark's own source).
SEAMLESS = DataSource("Meta's Seamless Interaction dataset", "cc-by-nc-4.0",
                      "https://github.com/facebookresearch/seamless_interaction")
_SEAMLESS_CONVERSATION = re.compile(r"V\d+_S\d+_I\d+")


def is_seamless_row(row: Any) -> bool:
    """A row (``SpearRow`` or dict of cells) whose ids are Seamless Interaction's:
    ``conversation_id`` ``V<v>_S<s>_I<i>`` and two ``speakers`` matching
    :data:`spear_datasets.schema.PARTICIPANT_RE` (``P1234A``)."""
    get = row.get if isinstance(row, dict) else (lambda k: getattr(row, k, ""))
    spk = [s for s in str(get("speakers") or "").split("|") if s]
    return (bool(_SEAMLESS_CONVERSATION.fullmatch(str(get("conversation_id") or "")))
            and len(spk) == 2 and all(PARTICIPANT_RE.fullmatch(s) for s in spk))


@dataclass
class BuildReport:
    """What :func:`build_hub_dataset` wrote.

    ``counts[subset][split]`` = rows written; ``skipped`` = one dict per skipped source row
    (``split``, ``subset``, ``row`` (0-based CSV data line), ``audio_path``, ``reason``).
    """

    out_dir: Path
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    shards: list[str] = field(default_factory=list)
    source: DataSource | None = None

    @property
    def n_rows(self) -> int:
        """Rows written over every split and subset (the sum of :attr:`counts`)."""
        return sum(n for per in self.counts.values() for n in per.values())


def find_sources(source: str | os.PathLike) -> list[tuple[str, str, Path]]:
    """``(split, subset, metadata.csv)`` for each split/subset present under ``source``.

    ``source`` is the SPEAR data folder (``.../data/seamless_2t_2s_questions``, holding
    ``inputs/``) or a folder above it that holds ``data/seamless_2t_2s_questions``.
    """
    src = Path(source)
    candidates = [src, src / "data" / "seamless_2t_2s_questions"]
    for base in candidates:
        found = [
            (split, subset, base / "inputs" / split / subset / "metadata.csv")
            for split in SPLITS
            for subset in SUBSETS
            if (base / "inputs" / split / subset / "metadata.csv").is_file()
        ]
        if found:
            return found
    return []


def _cell_float(v: float | None) -> float | None:
    return None if v is None else float(v)


def _embedded(path: Path) -> dict[str, Any]:
    return {"bytes": path.read_bytes(), "path": path.name}


def _check_input_clip(path: Path) -> float:
    """Check the input clip: header and channels first (:func:`input_clip_info`, the rule of every
    command), 16 kHz (the dataset embeds the bytes unchanged), then decodable. Returns its duration (s).

    Raises:
        AudioError: bad header, not stereo, unreadable / empty / NaN clip.
        RowError: not 16 kHz.
    """
    info = input_clip_info(path)
    if info.sample_rate != TARGET_SR:
        raise RowError(f"input clip is {info.sample_rate} Hz, expected {TARGET_SR} Hz: {path.name}")
    wav, sr = decode(path)
    return wav.shape[1] / sr


def collect_rows(csv_path: Path, subset: str, split: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Read one upstream metadata CSV into dataset rows (audio embedded) and skipped rows.

    A row is skipped (never raises) when: a cell is invalid (:func:`parse_row`), a path is
    unsafe (escapes its data root), the input clip is missing/undecodable/not 16 kHz stereo,
    the question ends after the clip, the named answer clip is missing/undecodable, or its
    ``audio_path`` repeats an earlier row.

    Raises:
        MetadataError: the CSV as a whole is unusable.
    """
    raw_rows = read_metadata(csv_path, required=("audio_path", "context_end_time", "question_end_time"))
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    first: dict[str, int] = {}
    for i, raw in enumerate(raw_rows):
        audio_cell = str(raw.get("audio_path") or "")
        try:
            row = parse_row(raw, require_answer=False)
            in_path = resolve_path(row.audio_path, csv_path.parent)
            if str(in_path) in first:
                raise RowError(f"duplicate of row {first[str(in_path)]} (same audio_path)")
            check_times_against_clip(row, _check_input_clip(in_path))
            answer = None
            if row.answer_audio_path:
                ans_path = resolve_path(row.answer_audio_path, csv_path.parent)
                decode(ans_path)  # missing / empty / undecodable / NaN -> AudioError
                answer = _embedded(ans_path)
            first[str(in_path)] = i
        except (RowError, AudioError, OSError) as e:
            skipped.append({"split": split, "subset": subset, "row": i, "audio_path": audio_cell,
                            "reason": " ".join(str(e).split()) or type(e).__name__})
            continue
        out: dict[str, Any] = {"audio": _embedded(in_path), "answer_audio": answer}
        for c in SPEAR_COLUMNS:
            v = getattr(row, c)
            out[c] = _cell_float(v) if c in _TIME_COLUMNS else ("" if v is None else str(v))
        out["subset"] = subset
        rows.append(out)
    return rows, skipped


def _write_shards(rows: list[dict[str, Any]], folder: Path, split: str, max_shard_bytes: int) -> list[Path]:
    """Write rows as ``<split>-0000i-of-0000N.parquet`` shards of about ``max_shard_bytes``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = hf_features().arrow_schema  # carries the `huggingface` features metadata (Audio columns)
    groups: list[list[dict[str, Any]]] = [[]]
    size = 0
    for r in rows:
        n = len(r["audio"]["bytes"]) + (len(r["answer_audio"]["bytes"]) if r["answer_audio"] else 0)
        if groups[-1] and size + n > max_shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(r)
        size += n
    paths = []
    for k, g in enumerate(groups):
        p = folder / f"{split}-{k:05d}-of-{len(groups):05d}.parquet"
        with atomic_path(p) as tmp:
            pq.write_table(pa.Table.from_pylist(g, schema=schema), tmp)
        paths.append(p)
    return paths


def dataset_card(counts: dict[str, dict[str, int]], *, skipped: int = 0, source: DataSource = SEAMLESS) -> str:
    """The dataset card (README.md): YAML header with ``license`` (of ``source``), ``configs``
    (one per subset present and ``all``, the default, pooling both), ``dataset_info`` (features;
    row counts are in the body table and ``build_report.json``) and a body naming the source of
    the recordings and describing the columns. Only split/subset pairs with rows are listed."""
    import yaml

    feats = hf_features()
    present = {s: [sp for sp in SPLITS if counts.get(s, {}).get(sp)] for s in SUBSETS}
    configs: list[dict[str, Any]] = []
    infos: list[dict[str, Any]] = []
    all_splits = [sp for sp in SPLITS if any(sp in present[s] for s in SUBSETS)]
    if all_splits:
        configs.append({
            "config_name": ALL_CONFIG,
            "default": True,
            "data_files": [{"split": sp, "path": [f"data/{s}/{sp}-*.parquet" for s in SUBSETS if sp in present[s]]}
                           for sp in all_splits],
        })
        infos.append({"config_name": ALL_CONFIG, "features": feats._to_yaml_list()})
    for s in SUBSETS:
        if present[s]:
            configs.append({"config_name": s,
                            "data_files": [{"split": sp, "path": f"data/{s}/{sp}-*.parquet"} for sp in present[s]]})
            infos.append({"config_name": s, "features": feats._to_yaml_list()})
    seamless = source == SEAMLESS
    header = {
        "license": source.license or "unknown",
        "language": ["en"],
        "task_categories": ["audio-to-audio"],
        "pretty_name": "SPEAR seamless_2t_2s_questions" if seamless else "SPEAR question/answer samples",
        "configs": configs,
        "dataset_info": infos,
    }
    table = "\n".join(f"| {s} | {sp} | {counts[s][sp]} |" for s in SUBSETS for sp in present[s])
    licence = "licence not stated: check the source's terms before sharing" if source.license in ("", "unknown") else (
        f"licence {source.license}")
    origin = source.name or "a source that was not named at build time (spearbench build-dataset --source-name)"
    link = f" ({source.url})" if source.url else ""
    title = "SPEAR `seamless_2t_2s_questions`" if seamless else "SPEAR question/answer samples"
    repo = DEFAULT_REPO_ID if seamless else "PATH_OR_REPO_ID"
    body = f"""
# {title}

Question/answer exchanges cut from two-person conversations of {origin}{link}, {licence}; in the
SPEAR layout, as used by SPEARBench.

| subset | split | rows |
|---|---|---|
{table}

Rows skipped at build time (missing/unsafe/unreadable files, with reasons): {skipped} — see `{SKIPPED_FILE}`.

Columns:
- `audio`: input clip, 16 kHz, 16-bit, **stereo**, one speaker per channel (channel 0 = first
  participant of `speakers`). The clip ends at the question's end.
  `value["array"]` may average channels: use `value.get_all_samples().data` (shape `(2, n)`).
- `answer_audio`: the human answer clip (null when the source row names none).
- `context_end_time`, `question_end_time`, `answer_duration`, `answer_start_time`: seconds
  (`answer_start_time` < 0 = the answer started before the question ended).
- `audio_path`, `answer_audio_path`: the upstream relative paths; `speakers` (`P1|P2`),
  `conversation_id`, `transcript_question`, `transcript_answer`; `subset`.

```python
from datasets import load_dataset
ds = load_dataset("{repo}", "all", split="test")
stereo = ds[0]["audio"].get_all_samples().data  # (2, n) at 16 kHz
```
"""
    return "---\n" + yaml.safe_dump(header, sort_keys=False, allow_unicode=True) + "---\n" + body


def build_hub_dataset(
    source: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    max_shard_bytes: int = 500 * 1024 * 1024,
    overwrite: bool = False,
    progress: bool = True,
    data_source: DataSource | None = None,
) -> BuildReport:
    """Turn an upstream SPEAR data folder into the Hub layout (see module docstring).

    Args:
        source: the SPEAR data folder (holding ``inputs/<split>/<subset>/metadata.csv``).
        out_dir: the Hub folder to write (created).
        max_shard_bytes: approximate audio bytes per parquet shard.
        overwrite: replace a dataset this tool built in ``out_dir`` (the files it recorded there; nothing else).
        data_source: where the recordings come from, for the card. ``None``: Seamless
            Interaction (CC BY-NC 4.0) when every kept row carries Seamless ids
            (:func:`is_seamless_row`), else an unnamed source of unknown licence: the card
            never claims a licence the data was not given under.

    Bad rows are skipped and listed in ``out_dir/skipped_rows.jsonl`` (never raise).

    Raises:
        HubBuildError: no metadata under ``source``, ``out_dir`` already holds a dataset (and
            not ``overwrite``), or no row at all could be kept.
        spear_datasets.ownership.OutFolderError: ``out_dir`` holds files this tool did not write, or a
            live process writes it.
        MetadataError: a metadata CSV is unusable as a whole.
        spear_datasets.files.OutputError: ``out_dir`` cannot be written (no temporary file is left).
    """
    out = Path(out_dir)
    sources = find_sources(source)
    if not sources:
        raise HubBuildError(f"no inputs/<split>/<subset>/metadata.csv under {source} "
                            f"(splits {', '.join(SPLITS)}; subsets {', '.join(SUBSETS)})")
    # --out: new, empty or a dataset this tool built; --overwrite removes what it recorded, nothing else
    with open_folder(out, command="build-dataset") as folder:
        if folder.recorded():
            if not overwrite:
                raise HubBuildError(f"{out} already holds a dataset; use another --out or --overwrite")
            folder.remove_recorded()
        return _build(sources, out, max_shard_bytes=max_shard_bytes, progress=progress, data_source=data_source)


def _build(sources: list, out: Path, *, max_shard_bytes: int, progress: bool, data_source: DataSource | None) -> BuildReport:
    """:func:`build_hub_dataset` once ``out`` is open (writes recorded)."""
    report = BuildReport(out_dir=out)
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    iterator: Iterable = sources
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(sources, desc="build-dataset", unit="split")
    all_seamless = True
    for split, subset, csv_path in iterator:
        rows, skipped = collect_rows(csv_path, subset, split)
        report.skipped.extend(skipped)
        all_seamless = all_seamless and all(is_seamless_row(r) for r in rows)
        if rows:
            for p in _write_shards(rows, out / "data" / subset, split, max_shard_bytes):
                report.shards.append(str(p.relative_to(out)))
            counts[subset][split] = len(rows)
        del rows
    report.counts = {k: dict(v) for k, v in counts.items()}
    with atomic_path(out / SKIPPED_FILE) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for s in report.skipped:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")
    with atomic_path(out / REPORT_FILE) as tmp:
        tmp.write_text(json.dumps({"counts": report.counts, "n_rows": report.n_rows, "n_skipped": len(report.skipped),
                                   "shards": report.shards}, indent=2) + "\n", encoding="utf-8")
    if report.n_rows == 0:
        raise HubBuildError(f"no row could be kept ({len(report.skipped)} skipped); see {out / SKIPPED_FILE}")
    report.source = data_source or (SEAMLESS if all_seamless else DataSource(""))
    with atomic_path(out / "README.md") as tmp:
        tmp.write_text(dataset_card(report.counts, skipped=len(report.skipped), source=report.source), encoding="utf-8")
    return report


def push_dataset(
    hub_dir: str | os.PathLike,
    repo_id: str = DEFAULT_REPO_ID,
    *,
    token: str | None = None,
    private: bool | None = None,
    commit_message: str = "Upload SPEAR seamless_2t_2s_questions (spearbench build-dataset)",
    api: Any = None,
) -> str:
    """Upload a folder written by :func:`build_hub_dataset` as a Hub **dataset** repository.

    Token: ``token`` if given, else ``HF_TOKEN`` / the stored ``hf auth login`` token
    (resolved by ``huggingface_hub`` itself); it is never printed or logged.
    ``api``: an ``HfApi``-like object (tests inject a fake; default ``huggingface_hub.HfApi``).
    Returns the commit URL (a string).

    Raises:
        HubBuildError: ``hub_dir`` holds no dataset card or no parquet shard.
        huggingface_hub errors (authentication, network) propagate unchanged.
    """
    folder = Path(hub_dir)
    if not (folder / "README.md").is_file() or not any((folder / "data").glob("*/*.parquet")):
        raise HubBuildError(f"{folder} is not a built dataset (README.md and data/*/*.parquet expected)")
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi(token=token)
    api.create_repo(repo_id=repo_id, repo_type="dataset", private=private, exist_ok=True)
    info = api.upload_folder(
        repo_id=repo_id,
        repo_type="dataset",
        folder_path=str(folder),
        allow_patterns=["README.md", "data/**", SKIPPED_FILE, REPORT_FILE],
        ignore_patterns=["**/.*", ".*"],
        delete_patterns=["data/**"],  # a rebuilt dataset replaces the old shards
        commit_message=commit_message,
    )
    return str(getattr(info, "commit_url", info))


__all__ = [
    "ALL_CONFIG", "BuildReport", "DEFAULT_REPO_ID", "DataSource", "HubBuildError", "MetadataError", "SEAMLESS", "SPLITS",
    "SUBSETS", "build_hub_dataset", "collect_rows", "dataset_card", "find_sources", "is_seamless_row", "push_dataset",
]
