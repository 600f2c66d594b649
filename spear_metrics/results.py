"""Results datasets: one model's scored run (``RESULTS/``) published as a Hugging Face dataset.

Layout of a results dataset (the Hub repository, or the folder written with ``--local-dir``)::

    README.md                         dataset card; YAML: configs (parquet split), ``spearbench:``
                                      block (model name, inference mode, open weights, protocol,
                                      split, metric versions, the models that scored it, counts)
    summary.json                      the run's ``summary.json`` unchanged
    data/<split>-00000-of-00001.parquet
                                      one row per metadata row: ``row``, ``audio_path``,
                                      ``answer_audio_path``, the per-sample values of
                                      ``per_sample.jsonl`` (null stays null), ``status``, ``error``;
                                      with ``--metadata``: the SPEAR metadata columns and ``subset``;
                                      with ``--with-audio``: ``answer_audio`` (``datasets.Audio``,
                                      bytes embedded); with ``--with-inputs``: ``input_audio``;
                                      audio only in rows scored ``ok`` whose file decodes as
                                      audio (paths resolved as ``score`` does), null elsewhere.

``datasets.load_dataset(folder_or_repo)`` loads the parquet split (the card's ``configs``).

Validation (:func:`validate_run`) rejects, with a one-line :class:`ResultsError`, a run whose
summary or per-sample rows lack a column, hold a non-numeric value where a number belongs, or
name a metric or metric version this code does not know.

Column units and directions of "better" come from the dimension registry's
:class:`~spear_metrics.core.dimension.MetricKey` where a registered dimension defines the key;
for keys of dimensions that are not importable here (e.g. in a Space without torch) they come
from :data:`FALLBACK_KEYS`, the project's reading of ``SPEAR_PROTOCOL.md`` section 2.

This module imports only the standard library and pandas at import time; ``datasets`` and
``huggingface_hub`` are imported when a function needs them.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd

from spear_datasets.schema import subset_of

#: The protocol every SPEARBench results dataset of this version is scored on.
PROTOCOL = "seamless_2t_2s_questions"
#: Accepted inference modes (as in the published leaderboard; ``Human`` only for the human row).
INFERENCE_MODES: tuple[str, ...] = ("Full-duplex", "Half-duplex", "Non-streaming")
#: Splits of the protocol.
SPLITS: tuple[str, ...] = ("test", "dev")

#: Per-sample columns every ``per_sample.jsonl`` row carries (``SampleResult.to_json``).
BASE_SAMPLE_COLUMNS: tuple[str, ...] = ("row", "audio_path", "answer_audio_path", "status", "error")
#: Summary keys every ``summary.json`` carries (``build_summary``).
REQUIRED_SUMMARY_KEYS: tuple[str, ...] = ("n_samples", "n_scored", "n_failed", "metrics", "metric_versions")
#: Per-sample text columns (everything else that is not audio must be numeric, boolean or null).
TEXT_SAMPLE_COLUMNS: frozenset[str] = frozenset(
    {"audio_path", "answer_audio_path", "status", "error", "speakers", "conversation_id",
     "transcript_question", "transcript_answer", "subset", "model"}
)
#: SPEAR metadata columns copied next to the scores when ``--metadata`` is given (times in s).
METADATA_COLUMNS: tuple[str, ...] = (
    "context_end_time", "question_end_time", "answer_duration", "speakers", "conversation_id",
    "transcript_question", "transcript_answer", "answer_start_time",
)
_METADATA_FLOATS = {"context_end_time", "question_end_time", "answer_duration", "answer_start_time"}

#: The seven SPEAR dimensions in leaderboard order: (registry name, label, CSV keys).
GROUPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("speech_quality", "Speech quality", ("UTMOS", "WER_%", "CER_%")),
    ("interruptions", "Interruptions", ("latency_ms", "interrupted_time_ms", "interruptions_%")),
    ("language_dialect", "Language & dialect", (
        "english_answers_%", "same_dialect_as_question_%", "north_american_dialect_%",
        "dialectal_entrainment_spearman", "dialectal_variance")),
    ("turn_taking", "Turn-taking", ("turn_taking_naturalness",)),
    ("emotions", "Emotions", (
        "emotional_naturalness_logit", "arousal_question_answer_corr",
        "valence_question_answer_corr", "dominance_question_answer_corr")),
    ("stances", "Stances", ("stance_same_as_question_%", "stance_more_negative_%", "stance_more_positive_%")),
    ("explainable_features", "Explainable features", (
        "explainable_duration_s", "explainable_voiced_ratio", "explainable_normalized_f0_std_avg")),
)

#: key -> (unit, better, description): used only where no importable dimension defines the key.
#: Directions are the project's reading of SPEAR_PROTOCOL.md section 2 (upstream shows none).
FALLBACK_KEYS: dict[str, tuple[str, str, str]] = {
    "UTMOS": ("MOS 1-5", "higher", "UTMOS22 strong predicted MOS of the answer audio"),
    "WER_%": ("%", "lower", "WER x100 between transcript_answer and ASR of the answer audio"),
    "CER_%": ("%", "lower", "CER x100 between transcript_answer and ASR of the answer audio"),
    "latency_ms": ("ms", "closer_to_human", "silence from the end of question speech to the answer's first speech"),
    "interrupted_time_ms": ("ms", "closer_to_human", "overlap of answer speech with question speech"),
    "interruptions_%": ("%", "closer_to_human", "share of samples whose answer overlaps question speech"),
    "english_answers_%": ("%", "closer_to_human", "share of answers identified as English (mms-lid-126)"),
    "same_dialect_as_question_%": ("%", "closer_to_human", "share of English answers with the question's dialect"),
    "north_american_dialect_%": ("%", "closer_to_human", "share of answers classified North America"),
    "dialectal_entrainment_spearman": ("slope", "closer_to_human",
                                       "least-squares slope of answer on question dialect log-scores (not a Spearman rho)"),
    "dialectal_variance": ("log-prob^2", "closer_to_human", "trace of the covariance of the answers' dialect log-scores"),
    "turn_taking_naturalness": ("-nats", "higher", "-DialogNLL of a voice-activity-projection model"),
    "emotional_naturalness_logit": ("logit", "higher", "naturalness classifier logit over emotion embeddings"),
    "arousal_question_answer_corr": ("r", "closer_to_human", "question/answer arousal correlation"),
    "valence_question_answer_corr": ("r", "closer_to_human", "question/answer valence correlation"),
    "dominance_question_answer_corr": ("r", "closer_to_human", "question/answer dominance correlation"),
    "stance_same_as_question_%": ("%", "higher", "share of answers with the reference stance sign"),
    "stance_more_negative_%": ("%", "closer_to_human", "share of answers more negative than the reference"),
    "stance_more_positive_%": ("%", "closer_to_human", "share of answers more positive than the reference"),
    "explainable_duration_s": ("s", "closer_to_human", "duration of the answer audio file (not of its speech)"),
    "explainable_voiced_ratio": ("ratio", "closer_to_human", "share of voiced pitch frames"),
    "explainable_normalized_f0_std_avg": ("ratio", "closer_to_human", "mean across-sample std of 7 normalised F0 stats"),
}

#: Metric versions this code accepts for dimensions it cannot import here (the live registry
#: class version is always accepted too). Add a version here when a dimension changes.
#: interruptions/explainable_features 1.0.0 and speech_quality 1.0.0 computed latency_ms, the F0
#: spread and WER_% by rules other than SPEAR's: results of those versions are not accepted.
KNOWN_METRIC_VERSIONS: dict[str, frozenset[str]] = {
    "interruptions": frozenset({"2.0.0"}),
    "explainable_features": frozenset({"2.0.0"}),
    "speech_quality": frozenset({"2.0.0"}),
}



class ResultsError(ValueError):
    """A results folder or results dataset that cannot be published or shown. One-line message."""


@dataclass(frozen=True)
class ColumnInfo:
    """One leaderboard column: CSV ``name``, its dimension and group label, ``unit``, ``better``
    (``"higher"``, ``"lower"`` or ``"closer_to_human"``), ``description`` and ``source``
    (``"registry"`` = the dimension's MetricKey, ``"fallback"`` = :data:`FALLBACK_KEYS`)."""

    name: str
    dimension: str
    group: str
    unit: str
    better: str
    description: str
    source: str


def _dimension_class(name: str):
    """The registered dimension class, or ``None`` when unregistered or not importable here."""
    try:
        from spear_metrics.core.registry import dimension_class

        return dimension_class(name)
    except Exception:  # a missing package (torch, a model library) just means: use the fallback
        return None


def column_info() -> list[ColumnInfo]:
    """The SPEAR leaderboard columns in group order, with unit and direction of "better"."""
    out = []
    for dim, label, keys in GROUPS:
        cls = _dimension_class(dim)
        declared = {k.name: k for k in getattr(cls, "keys", ())} if cls is not None else {}
        for key in keys:
            if key in declared:
                mk = declared[key]
                out.append(ColumnInfo(key, dim, label, mk.unit, mk.better, mk.description, "registry"))
            else:
                unit, better, desc = FALLBACK_KEYS[key]
                out.append(ColumnInfo(key, dim, label, unit, better, desc, "fallback"))
    return out


def dimension_keys(name: str) -> list[str]:
    """Summary keys of dimension ``name``: its MetricKeys when importable, else its :data:`GROUPS` keys."""
    cls = _dimension_class(name)
    if cls is not None:
        return [k.name for k in cls.keys]
    for dim, _, keys in GROUPS:
        if dim == name:
            return list(keys)
    return []


def known_versions(name: str) -> frozenset[str]:
    """Metric versions accepted for dimension ``name`` (live class version + :data:`KNOWN_METRIC_VERSIONS`)."""
    versions = set(KNOWN_METRIC_VERSIONS.get(name, ()))
    cls = _dimension_class(name)
    if cls is not None:
        versions.add(str(cls.version))
    return frozenset(versions)


def _is_number(v: Any) -> bool:
    """A JSON number (not a bool) that is finite."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


def validate_run(summary: dict[str, Any], rows: Sequence[dict[str, Any]], *, where: str = "results") -> None:
    """Check a scored run before it is published or shown.

    Args:
        summary: the parsed ``summary.json``.
        rows: the per-sample rows (parsed ``per_sample.jsonl`` objects or parquet rows).
        where: a name for messages (the folder or repo id).

    Raises:
        ResultsError: one line naming the file and the first problem: a missing summary key or
            per-sample column, a non-numeric value where a number belongs (a summary key of a
            scored dimension, a count, a per-sample value), an unknown metric, or an unknown
            metric version.
    """
    from spear_metrics.core.registry import DIMENSIONS

    if not isinstance(summary, dict):
        raise ResultsError(f"{where}: summary.json is not a JSON object")
    for k in REQUIRED_SUMMARY_KEYS:
        if k not in summary:
            raise ResultsError(f"{where}: summary.json is missing column {k!r}")
    for k in ("n_samples", "n_scored", "n_failed"):
        if not _is_number(summary[k]):
            raise ResultsError(f"{where}: summary.json {k!r} is not numeric: {summary[k]!r}")
    metrics, versions = summary["metrics"], summary["metric_versions"]
    if not isinstance(metrics, list) or not isinstance(versions, dict):
        raise ResultsError(f"{where}: summary.json 'metrics' must be a list and 'metric_versions' an object")
    for name in metrics:
        if name not in DIMENSIONS:
            raise ResultsError(f"{where}: unknown metric {name!r} (known: {', '.join(sorted(DIMENSIONS))})")
        if name not in versions:
            raise ResultsError(f"{where}: summary.json has no metric version for {name!r}")
        ok = known_versions(name)
        if str(versions[name]) not in ok:
            known = ", ".join(sorted(ok)) or "none (dimension not installed here)"
            raise ResultsError(f"{where}: unknown metric version {name}={versions[name]!r} (known: {known})")
        for key in dimension_keys(name):
            if key not in summary:
                raise ResultsError(f"{where}: summary.json is missing column {key!r} (metric {name!r})")
            v = summary[key]
            if v is not None and not _is_number(v):
                raise ResultsError(f"{where}: summary.json {key!r} is not numeric: {v!r}")
    if not rows:
        raise ResultsError(f"{where}: per_sample.jsonl has no rows")
    for i, r in enumerate(rows):
        for c in BASE_SAMPLE_COLUMNS:
            if c not in r:
                raise ResultsError(f"{where}: per_sample.jsonl line {i + 1} is missing column {c!r}")
        if not _is_number(r["row"]):
            raise ResultsError(f"{where}: per_sample.jsonl line {i + 1} 'row' is not numeric: {r['row']!r}")
        for k, v in r.items():
            if k in TEXT_SAMPLE_COLUMNS or k.endswith("_audio") or k == "timings" or v is None or isinstance(v, bool):
                continue
            if not _is_number(v):
                raise ResultsError(f"{where}: per_sample.jsonl row {r['row']} value {k!r} is not numeric: {v!r}")


def read_run(results_dir: str | os.PathLike) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Read and validate ``RESULTS/summary.json`` and ``RESULTS/per_sample.jsonl``.

    Raises:
        ResultsError: a file is missing or unparsable, or :func:`validate_run` rejects it.
    """
    d = Path(results_dir)
    sp, pp = d / "summary.json", d / "per_sample.jsonl"
    for p in (sp, pp):
        if not p.is_file():
            raise ResultsError(f"{d}: {p.name} not found (is this a scored RESULTS folder?)")
    try:
        summary = json.loads(sp.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ResultsError(f"{d}: summary.json is not valid JSON: {e}") from None
    rows = []
    for n, line in enumerate(pp.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ResultsError(f"{d}: per_sample.jsonl line {n} is not valid JSON: {e}") from None
        if not isinstance(obj, dict):
            raise ResultsError(f"{d}: per_sample.jsonl line {n} is not a JSON object")
        obj.pop("timings", None)
        rows.append(obj)
    validate_run(summary, rows, where=str(d))
    rows.sort(key=lambda r: r["row"])
    return summary, rows


def _float_or_none(s: str) -> float | None:
    """A metadata time cell as a float; ``None`` when empty or not finite.

    Raises:
        ResultsError: the cell is not a number (the caller decides whether that refuses the run).
    """
    s = (s or "").strip()
    if not s:
        return None
    try:
        v = float(s)
    except ValueError:
        raise ResultsError(f"metadata value {s!r} is not numeric") from None
    return v if math.isfinite(v) else None


def _cell(value: Any) -> str:
    """A path cell the way ``score`` reads it (:func:`spear_datasets.schema.parse_row`): stripped."""
    return str(value or "").strip()


def _merge_metadata(rows: list[dict[str, Any]], metadata: Path) -> tuple[list[dict[str, Any]], Path]:
    """Add the SPEAR metadata columns to each per-sample row (matched by ``row`` = CSV position).

    Paths are compared stripped, as ``score`` reads them. A metadata cell that cannot be read
    (a non-numeric time) becomes ``None`` in a row that failed scoring (the scorer already
    failed it with the reason, in ``error``); in a row scored ``ok`` it means the file is not the
    one the run scored.

    Raises:
        ResultsError: the metadata is unusable, or does not match ``per_sample.jsonl`` (fewer
            rows, another ``audio_path``, another ``answer_audio_path`` or a non-numeric time in
            an ``ok`` row).
    """
    from spear_datasets.schema import MetadataError, read_metadata

    try:
        meta = read_metadata(metadata)
    except MetadataError as e:
        raise ResultsError(str(e)) from None
    out = []
    for r in rows:
        i = int(r["row"])
        if i >= len(meta):
            raise ResultsError(f"{metadata}: has {len(meta)} rows but per_sample.jsonl has row {i}")
        m = meta[i]
        ok = r.get("status") == "ok"
        if _cell(m.get("audio_path")) != _cell(r.get("audio_path")):
            raise ResultsError(f"{metadata}: row {i} audio_path {m.get('audio_path')!r} does not match "
                               f"per_sample.jsonl {r.get('audio_path')!r} (wrong metadata file?)")
        if ok and _cell(m.get("answer_audio_path")) != _cell(r.get("answer_audio_path")):
            raise ResultsError(f"{metadata}: row {i} answer_audio_path {m.get('answer_audio_path')!r} does not "
                               f"match per_sample.jsonl {r.get('answer_audio_path')!r} (wrong metadata file?)")
        r = dict(r)
        for c in METADATA_COLUMNS:
            if c in _METADATA_FLOATS:
                try:
                    r[c] = _float_or_none(m.get(c, ""))
                except ResultsError as e:
                    if ok:
                        raise ResultsError(f"{metadata}: row {i} {c}: {e}, but per_sample.jsonl scored the row "
                                           "ok (wrong metadata file?)") from None
                    r[c] = None  # the row already failed scoring, with its reason in ``error``
            else:
                r[c] = m.get(c) or None
        out.append(r)
    return out, metadata.parent


def _audio_bytes(value: str | None, csv_dir: Path) -> dict[str, Any] | None:
    """``{"bytes", "path"}`` of a metadata audio path, or ``None``.

    The path resolves with :func:`spear_datasets.schema.resolve_path` against ``csv_dir`` (the
    root rules of ``score``: a relative path escaping its data root is never read). The bytes
    are read once and embedded only when they decode as audio through
    :func:`spear_datasets.audio.decode` (the very bytes read, decoded from a private temporary
    copy, so a file swapped in between cannot slip through). ``None`` for an empty cell, a path
    outside its root, a missing/unreadable file, or bytes that are not audio.
    """
    from spear_datasets.audio import AudioError, decode
    from spear_datasets.schema import RowError, resolve_path

    value = _cell(value)
    if not value:
        return None
    try:
        p = resolve_path(value, csv_dir)
        if not p.is_file():
            return None
        data = p.read_bytes()
    except (RowError, OSError):
        return None
    if not data:
        return None
    with tempfile.TemporaryDirectory(prefix="spearbench-audio-check-") as tmp:
        probe = Path(tmp) / ("probe" + (p.suffix if re.fullmatch(r"\.[A-Za-z0-9]{1,10}", p.suffix) else ""))
        probe.write_bytes(data)
        try:
            decode(probe)
        except AudioError:
            return None
    return {"bytes": data, "path": p.name}


def _row_audio(r: dict[str, Any], column: str, csv_dir: Path) -> dict[str, Any] | None:
    """The audio to embed for per-sample row ``r`` (``column`` = ``answer_audio_path`` or
    ``audio_path``): only a row scored ``ok`` whose file decodes as audio (:func:`_audio_bytes`);
    ``None`` for every other row (a failed row's file is never read)."""
    if r.get("status") != "ok":
        return None
    return _audio_bytes(r.get(column), csv_dir)


def _features(rows: list[dict[str, Any]], audio_cols: Iterable[str]):
    """``datasets.Features`` for the per-sample table: ints, floats, bools, strings, Audio."""
    from datasets import Audio, Features, Value

    cols: list[str] = []
    for r in rows:
        for k in r:
            if k not in cols:
                cols.append(k)
    feats = {}
    for c in cols:
        if c in audio_cols:
            feats[c] = Audio()
            continue
        vals = [r.get(c) for r in rows if r.get(c) is not None]
        if c == "row":
            feats[c] = Value("int64")
        elif c in TEXT_SAMPLE_COLUMNS:
            feats[c] = Value("string")
        elif vals and all(isinstance(v, bool) for v in vals):
            feats[c] = Value("bool")
        else:
            feats[c] = Value("float64")
    return Features(feats)


def _card(summary: dict[str, Any], *, model_name: str, inference_mode: str | None, open_weights: bool | None,
          split: str, n_rows: int, audio_cols: Sequence[str]) -> str:
    """The dataset card (README.md) text with its YAML header."""
    from huggingface_hub import DatasetCard, DatasetCardData

    info = {
        "model_name": model_name,
        "inference_mode": inference_mode,
        "open_weights": open_weights,
        "protocol": PROTOCOL,
        "split": split,
        "metrics": list(summary.get("metrics", [])),
        "metric_versions": dict(summary.get("metric_versions", {})),
        "models": dict(summary.get("models", {})),
        "spearbench_version": summary.get("spearbench_version"),
        "n_samples": summary.get("n_samples"),
        "n_scored": summary.get("n_scored"),
        "n_failed": summary.get("n_failed"),
    }
    data = DatasetCardData(
        pretty_name=f"SPEARBench results: {model_name}",
        tags=["spearbench", "spoken-dialogue", "evaluation-results", PROTOCOL],
        configs=[{"config_name": "default", "data_files": [{"split": split, "path": f"data/{split}-*.parquet"}]}],
        spearbench=info,
    )
    keys = [c for c in column_info() if c.name in summary]
    lines = [f"| {c.group} | `{c.name}` | {c.unit} | {c.better.replace('_', ' ')} | "
             f"{'-' if summary[c.name] is None else format(summary[c.name], '.3f')} |" for c in keys]
    body = "\n".join([
        f"# SPEARBench results: {model_name}",
        "",
        f"Scores of **{model_name}** on the SPEARBench protocol `{PROTOCOL}` ({split} split), written by "
        f"`spearbench push-results` (spearbench {summary.get('spearbench_version')}).",
        "",
        f"- inference mode: {inference_mode or 'not given'}; open weights: "
        f"{'yes' if open_weights else ('no' if open_weights is False else 'not given')}",
        f"- samples: {summary.get('n_samples')} (scored {summary.get('n_scored')}, failed {summary.get('n_failed')})",
        f"- per-sample table: `data/{split}-*.parquet` ({n_rows} rows; null = value does not exist)"
        + (f"; audio columns: {', '.join(audio_cols)}" if audio_cols else ""),
        "- run summary: `summary.json`",
        "",
        "| dimension | key | unit | better | value |",
        "|---|---|---|---|---|",
        *lines,
        "",
        "Load with `datasets.load_dataset(<this repo or folder>)`.",
        "",
    ])
    return DatasetCard.from_template(data, template_str="---\n{{ card_data }}\n---\n\n" + body).content


def write_results_dataset(
    results_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    model_name: str,
    inference_mode: str | None = None,
    open_weights: bool | None = None,
    split: str = "test",
    metadata: str | os.PathLike | None = None,
    with_audio: bool = False,
    with_inputs: bool = False,
) -> Path:
    """Write the results dataset of ``results_dir`` into ``out_dir`` (created; files replaced).

    Args:
        results_dir: a scored run folder (``summary.json`` + ``per_sample.jsonl``).
        out_dir: destination folder; ``datasets.load_dataset(out_dir)`` loads it afterwards.
        model_name: the model's display name (the leaderboard row label).
        inference_mode: one of :data:`INFERENCE_MODES` or ``None`` (not given).
        open_weights: ``True``/``False`` or ``None`` (not given).
        split: ``"test"`` (the leaderboard split) or ``"dev"``.
        metadata: the metadata CSV the run scored; adds the SPEAR columns and ``subset``, and
            is needed to find the audio files.
        with_audio: embed each answer as ``answer_audio`` (``datasets.Audio``, bytes). Only rows
            scored ``ok`` in ``per_sample.jsonl`` whose answer file decodes as audio get bytes;
            every other row gets a null cell (see :func:`_audio_bytes`).
        with_inputs: embed each input clip (both speakers) as ``input_audio``, under the same rule.

    Returns:
        ``out_dir`` as a Path.

    Raises:
        ResultsError: invalid run (:func:`read_run`), bad options, or metadata not matching.
    """
    from datasets import Dataset

    if not model_name or not model_name.strip():
        raise ResultsError("a model name is needed (--model-name)")
    if inference_mode is not None and inference_mode not in INFERENCE_MODES:
        raise ResultsError(f"inference mode {inference_mode!r} is not one of {', '.join(INFERENCE_MODES)}")
    if split not in SPLITS:
        raise ResultsError(f"split {split!r} is not one of {', '.join(SPLITS)}")
    if (with_audio or with_inputs) and metadata is None:
        raise ResultsError("--with-audio/--with-inputs need --metadata (the CSV the run scored) to find the audio")
    summary, rows = read_run(results_dir)
    csv_dir = None
    if metadata is not None:
        rows, csv_dir = _merge_metadata(rows, Path(metadata))
    for r in rows:
        r["subset"] = subset_of(r.get("audio_path"))
    audio_cols: list[str] = []
    if with_audio:
        audio_cols.append("answer_audio")
        for r in rows:
            r["answer_audio"] = _row_audio(r, "answer_audio_path", csv_dir)
    if with_inputs:
        audio_cols.append("input_audio")
        cache: dict[str, Any] = {}
        for r in rows:
            if r.get("status") != "ok":
                r["input_audio"] = None
                continue
            ap = _cell(r.get("audio_path"))
            if ap not in cache:
                cache[ap] = _row_audio(r, "audio_path", csv_dir)
            r["input_audio"] = cache[ap]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data_dir = out / "data"
    if data_dir.is_dir():
        shutil.rmtree(data_dir)
    data_dir.mkdir()
    ds = Dataset.from_list(rows, features=_features(rows, audio_cols))
    ds.to_parquet(str(data_dir / f"{split}-00000-of-00001.parquet"))
    (out / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False, allow_nan=False) + "\n",
                                      encoding="utf-8")
    (out / "README.md").write_text(
        _card(summary, model_name=model_name.strip(), inference_mode=inference_mode, open_weights=open_weights,
              split=split, n_rows=len(rows), audio_cols=audio_cols),
        encoding="utf-8")
    return out


def push_results(
    results_dir: str | os.PathLike,
    repo_id: str,
    *,
    private: bool = False,
    api: Any = None,
    token: str | None = None,
    **kwargs: Any,
) -> str:
    """Publish ``results_dir`` as the Hub dataset ``repo_id`` (created when missing).

    The dataset is written to a temporary folder with :func:`write_results_dataset` (``kwargs``)
    and uploaded in one commit with ``HfApi.upload_folder``. The token comes from ``token``,
    ``HF_TOKEN`` or the ``huggingface-cli login`` cache (huggingface_hub's own lookup); it is never
    printed or written.

    Args:
        api: an ``HfApi``-like object (tests inject a recorder); default ``HfApi(token=token)``.

    Returns:
        The URL of the upload commit (or of the repo when the API returns none).

    Raises:
        ResultsError: invalid run or options (nothing is uploaded).
    """
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo_id or ""):
        raise ResultsError(f"repo id {repo_id!r} is not USER/NAME")
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi(token=token)
    kwargs.setdefault("model_name", repo_id.split("/", 1)[1])
    with tempfile.TemporaryDirectory(prefix="spearbench-results-") as tmp:
        folder = write_results_dataset(results_dir, tmp, **kwargs)  # validates before any network call
        api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        info = api.upload_folder(
            folder_path=str(folder), repo_id=repo_id, repo_type="dataset",
            commit_message=f"SPEARBench results: {kwargs['model_name']}",
        )
    url = getattr(info, "commit_url", None) or (info if isinstance(info, str) else None)
    return url or f"https://huggingface.co/datasets/{repo_id}"


# ---------------------------------------------------------------------------------------------
# reading results back (the Space)


@dataclass
class Results:
    """One loaded results source.

    Attributes:
        source: the folder path or Hub id it came from.
        model: display name; ``inference_mode`` / ``open_weights`` as in the card (``None`` = not given).
        summary: the run's summary dict.
        samples: per-sample table (pandas; missing values are NaN/None, never 0), audio columns
            hold ``{"bytes", "path"}`` dicts or ``None``.
    """

    source: str
    model: str
    inference_mode: str | None
    open_weights: bool | None
    summary: dict[str, Any]
    samples: pd.DataFrame
    split: str = "test"
    audio_columns: list[str] = field(default_factory=list)


def _card_info(folder: Path) -> dict[str, Any]:
    readme = folder / "README.md"
    if not readme.is_file():
        return {}
    from huggingface_hub import DatasetCard

    try:
        data = DatasetCard.load(readme).data.to_dict()
    except Exception as e:  # a broken YAML header
        raise ResultsError(f"{folder}: README.md card cannot be parsed: {' '.join(str(e).split())[:200]}") from None
    return data.get("spearbench") or {}


def load_results(source: str | os.PathLike) -> Results:
    """Load a results dataset (local folder or Hub dataset id) or a raw scored ``RESULTS/`` folder.

    A Hub id is fetched with ``huggingface_hub.snapshot_download`` (honours ``HF_HUB_OFFLINE``
    and the cache). A raw folder is named after the folder (its inference mode is unknown).

    Raises:
        ResultsError: not found, or the content fails :func:`validate_run`.
    """
    src = str(source).strip()
    folder = Path(src).expanduser()
    if not folder.exists():
        if not re.fullmatch(r"[\w.-]+/[\w.-]+", src):
            raise ResultsError(f"{src}: no such folder, and not a Hub dataset id USER/NAME")
        try:
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(src, repo_type="dataset"))
        except Exception as e:
            raise ResultsError(f"{src}: cannot fetch the Hub dataset: {type(e).__name__}: "
                               f"{' '.join(str(e).split())[:200]}") from None
    if not folder.is_dir():
        raise ResultsError(f"{src}: not a folder")
    if (folder / "per_sample.jsonl").is_file():  # a raw RESULTS/ folder
        summary, rows = read_run(folder)
        for r in rows:
            r.setdefault("subset", subset_of(r.get("audio_path")))
        return Results(src, folder.name, None, None, summary, pd.DataFrame(rows))
    parquets = sorted((folder / "data").glob("*.parquet")) if (folder / "data").is_dir() else []
    if not (folder / "summary.json").is_file() or not parquets:
        raise ResultsError(f"{src}: not a results dataset (needs summary.json and data/*.parquet) "
                           "nor a scored RESULTS folder (summary.json + per_sample.jsonl)")
    try:
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ResultsError(f"{src}: summary.json is not valid JSON: {e}") from None
    info = _card_info(folder)
    from datasets import Audio, load_dataset

    try:
        # a private cache per load: datasets' cache key of a local folder ignores its absolute path,
        # so another folder of the same name (or one rewritten in place) would load stale rows
        with tempfile.TemporaryDirectory(prefix="spearbench-load-") as cache:
            dd = load_dataset(str(folder), cache_dir=cache, keep_in_memory=True)
    except Exception as e:
        raise ResultsError(f"{src}: cannot load the parquet data: {' '.join(str(e).split())[:200]}") from None
    split = info.get("split") or next(iter(dd))
    ds = dd[split] if split in dd else dd[next(iter(dd))]
    audio_cols = [c for c, f in ds.features.items() if isinstance(f, Audio)]
    for c in audio_cols:
        ds = ds.cast_column(c, Audio(decode=False))
    rows = ds.to_list()
    validate_run(summary, [{k: v for k, v in r.items() if k not in audio_cols} for r in rows], where=src)
    mode = info.get("inference_mode")
    if mode is not None and mode not in INFERENCE_MODES + ("Human",):
        raise ResultsError(f"{src}: card inference_mode {mode!r} is not one of {', '.join(INFERENCE_MODES)}")
    ow = info.get("open_weights")
    return Results(src, str(info.get("model_name") or folder.name), mode, ow if isinstance(ow, bool) else None,
                   summary, pd.DataFrame(rows), split=split, audio_columns=audio_cols)


def leaderboard_row(res: Results) -> dict[str, Any]:
    """One leaderboard row of a loaded results source: the published CSV's columns
    (``protocol, model, inference_mode, open_weights`` then every SPEAR key; ``None`` = missing)."""
    row: dict[str, Any] = {
        "protocol": PROTOCOL,
        "model": res.model,
        "inference_mode": res.inference_mode,
        "open_weights": res.open_weights,
    }
    for c in column_info():
        v = res.summary.get(c.name)
        row[c.name] = float(v) if _is_number(v) else None
    return row
