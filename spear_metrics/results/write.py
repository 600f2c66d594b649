"""Writing a results dataset: a scored run (``RESULTS/``) as a folder that
``datasets.load_dataset`` loads and the Space shows (layout: :mod:`spear_metrics.results`).

Order of work in :func:`write_results_dataset`: read and check the run (summary, rows, counts);
merge the metadata the run scored (``--metadata``); compare the summary with its recomputation
from the rows (:func:`~spear_metrics.results.validate.check_summary_values`); embed audio of
``ok`` rows whose files decode; make every path public (:mod:`spear_metrics.results.paths`);
write the parquet split, ``summary.json`` and the card.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Sequence

from spear_datasets.files import atomic_path
from spear_datasets.ownership import WORK_DIR, open_folder
from spear_metrics.core.secrets import mask_secrets
from spear_datasets.schema import subset_of
from spear_metrics.results.paths import public_path, public_text, public_value
from spear_metrics.results.validate import (
    INFERENCE_MODES,
    METADATA_COLUMNS,
    METADATA_FLOATS,
    PROTOCOL,
    SPLITS,
    TEXT_SAMPLE_COLUMNS,
    ResultsError,
    benchmark_checks,
    check_summary_values,
    interval_base,
    read_run,
    value_kind,
)

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


def merge_metadata(rows: list[dict[str, Any]], metadata: Path) -> tuple[list[dict[str, Any]], Path]:
    """Add the SPEAR metadata columns to each per-sample row (matched by ``row`` = CSV position;
    the rows are checked to be ``0..n-1`` before this).

    Paths are compared stripped, as ``score`` reads them. A metadata cell that cannot be read
    (a non-numeric time) becomes ``None`` in a row that failed scoring (the scorer already
    failed it with the reason, in ``error``); in a row scored ``ok`` it means the file is not the
    one the run scored.

    Raises:
        ResultsError: the metadata is unusable, or does not match ``per_sample.jsonl`` (another
            row count, another ``audio_path``, another ``answer_audio_path`` or a non-numeric
            time in an ``ok`` row).
    """
    from spear_datasets.schema import MetadataError, read_metadata

    try:
        meta = read_metadata(metadata)
    except MetadataError as e:
        raise ResultsError(str(e)) from None
    if len(meta) != len(rows):
        raise ResultsError(f"{metadata}: has {len(meta)} rows but per_sample.jsonl has {len(rows)} (wrong metadata file?)")
    out = []
    for r in rows:
        i = int(r["row"])
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
            if c in METADATA_FLOATS:
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
    outside its root, a missing/unreadable file, or bytes that are not audio. ``path`` is the
    file name only.
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
    """``datasets.Features`` for the per-sample table from each column's kind
    (:func:`~spear_metrics.results.validate.value_kind`): ``row`` int64, numbers float64,
    booleans bool, text string, lists of numbers a list of float64, segments a list of
    ``[start, end]`` float64 lists, audio ``Audio``; a column of nulls only is string when it is
    a text column, else float64."""
    from datasets import Audio, Features, List, Value

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
        found = {value_kind(r.get(c)) for r in rows}
        kinds = found - {None, "empty"}
        kind = kinds.pop() if len(kinds) == 1 else None
        if kind is None and "empty" in found:  # only empty lists: segments by name, else numbers
            kind = "segments" if c.endswith("_segments_s") else "numbers"
        if c == "row":
            feats[c] = Value("int64")
        elif c in TEXT_SAMPLE_COLUMNS or kind == "text":
            feats[c] = Value("string")
        elif kind == "bool":
            feats[c] = Value("bool")
        elif kind == "numbers":
            feats[c] = List(Value("float64"))
        elif kind == "segments":
            feats[c] = List(List(Value("float64")))
        else:
            feats[c] = Value("float64")
    return Features(feats)


def _options_lines(options: Any) -> list[str]:
    """The card's lines for the options the run was scored with (``summary.json`` ``options``)."""
    if not isinstance(options, dict) or not options:
        return ["- options: not recorded in summary.json (unknown)"]
    lines = ["- options the run was scored with:"]
    for k, v in options.items():
        if isinstance(v, dict):
            inner = ", ".join(f"`{ik}={iv}`" for ik, iv in v.items()) or "defaults"
            lines.append(f"  - {k}: {inner}")
        else:
            lines.append(f"  - `{k}={v}`")
    return lines


def results_card(info: dict[str, Any], *, pretty_name: str, tags: list[str], split: str, body: str,
                 extra_configs: Sequence[str] = ()) -> str:
    """THE dataset card of a results dataset (every benchmark's ``card_text`` ends here): YAML
    header with ``pretty_name``, ``tags``, the parquet config ``default`` of ``split`` (and one
    config per name of ``extra_configs``: ``<name>/<split>-*.parquet``, a benchmark's
    ``extra_tables``) and the ``spearbench:`` block ``info``, then the Markdown ``body``."""
    from huggingface_hub import DatasetCard, DatasetCardData

    data = DatasetCardData(
        pretty_name=pretty_name, tags=tags,
        configs=[{"config_name": "default", "data_files": [{"split": split, "path": f"data/{split}-*.parquet"}]},
                 *({"config_name": c, "data_files": [{"split": split, "path": f"{c}/{split}-*.parquet"}]}
                   for c in extra_configs)],
        spearbench=info,
    )
    return DatasetCard.from_template(data, template_str="---\n{{ card_data }}\n---\n\n" + body).content


def card_text(summary: dict[str, Any], *, model_name: str, inference_mode: str | None, open_weights: bool | None,
              split: str, n_rows: int, audio_cols: Sequence[str], has_report: bool = False) -> str:
    """The dataset card (README.md) with its YAML header: the ``spearbench:`` block (model,
    mode, weights, protocol, split, metrics and versions, models, options, counts) and a table
    of the run's columns (every declared key in the summary, from the column registry)."""
    from huggingface_hub import DatasetCard, DatasetCardData

    from spear_datasets.identity import data_label, is_spear_data
    from spear_metrics.core.columns import better_text, columns
    from spear_metrics.core.onset import onset_text
    from spear_metrics.core.summary import interval_text

    data = summary.get("data") if isinstance(summary.get("data"), dict) else {}
    spear = is_spear_data(data)
    info = {
        "model_name": model_name,
        "inference_mode": inference_mode,
        "open_weights": open_weights,
        "protocol": PROTOCOL,
        "split": split,
        "metrics": list(summary.get("metrics", [])),
        "metric_versions": dict(summary.get("metric_versions", {})),
        "models": dict(summary.get("models", {})),
        "options": summary.get("options") if isinstance(summary.get("options"), dict) else {},
        "spearbench_version": summary.get("spearbench_version"),
        "n_samples": summary.get("n_samples"),
        "n_scored": summary.get("n_scored"),
        "n_failed": summary.get("n_failed"),
        "data": {"label": data_label(data), "n_rows": data.get("n_rows"), "fingerprint": data.get("fingerprint"),
                 "subsets": data.get("subsets"), "check": data.get("check")},
        "onset_kind": summary.get("onset_kind") or "unstated",
    }
    if spear:
        what = f"on the SPEARBench protocol `{PROTOCOL}` ({data_label(data)})"
    else:  # never named after the benchmark's data
        what = (f"on **custom data** ({data.get('n_rows', 'unknown')} rows; not SPEAR's split: "
                f"{data.get('check') or 'no record of the data scored'})")
    data = DatasetCardData(
        pretty_name=f"SPEARBench results: {model_name}",
        tags=["spearbench", "spoken-dialogue", "evaluation-results", *([PROTOCOL] if spear else ["custom-data"])],
        configs=[{"config_name": "default", "data_files": [{"split": split, "path": f"data/{split}-*.parquet"}]}],
        spearbench=info,
    )
    lines = []
    for c in columns():
        for key in [k for k in summary if c.key.matches(k) and interval_base(k, summary) is None]:
            v = summary[key]
            kind = "published" if c.published else "project"
            ci, n = summary.get(f"{key}_ci95"), summary.get(f"{key}_n")
            cell = interval_text(v, ci)
            if n is not None:
                cell += f" (n={n})"
            lines.append(f"| {c.group} | `{key}` | {kind} | {c.unit} | {better_text(c.better)} | {cell} |")
    body = "\n".join([
        f"# SPEARBench results: {model_name}",
        "",
        f"Scores of **{model_name}** {what}, written by "
        f"`spearbench push-results` (spearbench {summary.get('spearbench_version')}).",
        "",
        f"- data scored: {info['data']['label']}, {info['data']['n_rows']} rows, fingerprint "
        f"`{info['data']['fingerprint']}` (sha256 of the sorted split/subset/clip names)",
        "",
        f"- inference mode: {inference_mode or 'not given'}; open weights: "
        f"{'yes' if open_weights else ('no' if open_weights is False else 'not given')}",
        f"- samples: {summary.get('n_samples')} (scored {summary.get('n_scored')}, failed {summary.get('n_failed')})",
        f"- onset rule (`answer_start_time`, `latency_ms`): `{info['onset_kind']}`: {onset_text(info['onset_kind'])}",
        *_options_lines(info["options"]),
        f"- per-sample table: `data/{split}-*.parquet` ({n_rows} rows; null = value does not exist)"
        + (f"; audio columns: {', '.join(audio_cols)}" if audio_cols else ""),
        "- run summary: `summary.json` (checked against the rows when written); values with their "
        "95 % bootstrap interval [lo, hi] and n (units that entered them)",
        *(["- report: `report/index.html` (self-contained; `spearbench report`)"] if has_report else []),
        "",
        "| dimension | key | column | unit | better | value |",
        "|---|---|---|---|---|---|",
        *lines,
        "",
        "Load with `datasets.load_dataset(<this repo or folder>)`.",
        "",
    ])
    return DatasetCard.from_template(data, template_str="---\n{{ card_data }}\n---\n\n" + body).content


def _make_public(rows: list[dict[str, Any]], summary: dict[str, Any], roots: list[Path]):
    """Rows and summary with every absolute local path made public (:mod:`.paths`) and every
    secret masked (:func:`spear_metrics.core.secrets.mask_value`)."""
    from spear_metrics.core.secrets import mask_value

    out_rows = []
    for r in rows:
        r = dict(r)
        for k, v in r.items():
            if k in ("audio_path", "answer_audio_path"):
                r[k] = public_path(v, roots)
            elif isinstance(v, str):
                r[k] = public_text(v, roots)
        out_rows.append(mask_value(r))
    return out_rows, mask_value(public_value(summary, roots))


#: In a report folder's work folder (``spearbench report``): the results the report was built
#: from (``summary_sha256`` of their ``summary.json``), so that the report of replaced results is
#: never published with the new ones.
REPORT_RECORD = "report.json"


def report_matches(report_dir: str | os.PathLike, results_dir: str | os.PathLike) -> bool:
    """Whether the report in ``report_dir`` was built from the ``summary.json`` now in
    ``results_dir`` (:data:`REPORT_RECORD`); a report without that record (written by hand or
    by an older version) counts as matching."""
    import hashlib

    rec = Path(report_dir) / WORK_DIR / REPORT_RECORD
    try:
        want = json.loads(rec.read_text(encoding="utf-8")).get("summary_sha256")
    except (OSError, ValueError, AttributeError):
        return True
    try:
        have = hashlib.sha256((Path(results_dir) / "summary.json").read_bytes()).hexdigest()
    except OSError:
        return False
    return want == have


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
    own: bool = True,
) -> Path:
    """Write the results dataset of ``results_dir`` into ``out_dir`` (new, empty, or one this
    tool wrote there before: the files it wrote then are replaced, nothing else is touched).

    Args:
        results_dir: a scored run folder (``summary.json`` + ``per_sample.jsonl``).
        out_dir: destination folder; ``datasets.load_dataset(out_dir)`` loads it afterwards.
        model_name: the model's display name (the leaderboard row label).
        inference_mode: one of :data:`INFERENCE_MODES` or ``None`` (not given).
        open_weights: ``True``/``False`` or ``None`` (not given).
        split: ``"test"`` (the leaderboard split) or ``"dev"``.
        metadata: the metadata CSV the run scored; adds the SPEAR columns and ``subset``, is
            needed to find the audio files, and to check a summary key computed from metadata
            (``explainable_normalized_f0_std_avg`` groups answers by questioner).
        with_audio: embed each answer as ``answer_audio`` (``datasets.Audio``, bytes). Only rows
            scored ``ok`` in ``per_sample.jsonl`` whose answer file decodes as audio get bytes;
            every other row gets a null cell (see :func:`_audio_bytes`).
        with_inputs: embed each input clip (both speakers) as ``input_audio``, under the same rule.
        own: claim ``out_dir`` under the output-folder rule (:func:`spear_datasets.ownership.open_folder`,
            ``out_dir/.work/`` keeps the record); ``False`` for a fresh temporary folder of the
            caller's (the upload of :func:`~spear_metrics.results.push.push_results`).

    A report of the run (``results_dir/report/``, as ``spearbench report RESULTS --out
    RESULTS/report`` writes it: ``index.html`` and its PNG files) is copied to ``out_dir/report/``,
    unless it was built from another ``summary.json`` than the one now in ``results_dir``.

    Paths: ``audio_path``/``answer_audio_path`` are written relative to the metadata's folder
    (or the results folder); other absolute paths (in errors, notes, model names) are reduced to
    their SPEAR tail or file name (:func:`~spear_metrics.results.paths.public_path`).

    Returns:
        ``out_dir`` as a Path.

    Raises:
        ResultsError: invalid run (:func:`~spear_metrics.results.validate.read_run`), a summary
            that its rows do not give (:func:`~spear_metrics.results.validate.check_summary_values`),
            bad options, or metadata not matching.
        spear_datasets.ownership.OutFolderError: ``out_dir`` holds files this tool did not write.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not model_name or not model_name.strip():
        raise ResultsError("a model name is needed (--model-name)")
    if inference_mode is not None and inference_mode not in INFERENCE_MODES:
        raise ResultsError(f"inference mode {inference_mode!r} is not one of {', '.join(INFERENCE_MODES)}")
    if split not in SPLITS:
        raise ResultsError(f"split {split!r} is not one of {', '.join(SPLITS)}")
    summary, rows = read_run(results_dir)
    bench = benchmark_checks(summary)
    # a benchmark whose rows name their own audio (audio_files) embeds it without --metadata
    bench_audio = bench is not None and hasattr(bench, "audio_files")
    if (with_audio or with_inputs) and metadata is None and not bench_audio:
        raise ResultsError("--with-audio/--with-inputs need --metadata (the CSV the run scored) to find the audio")
    if bench is not None and (metadata is not None or ((with_audio or with_inputs) and not bench_audio)):
        from spear_metrics.core.registry import benchmark_of_summary

        raise ResultsError(f"{results_dir}: a {benchmark_of_summary(summary).name} run takes no --metadata, --with-audio or "
                           "--with-inputs (its rows hold that benchmark's own per-item values)")
    csv_dir = None
    if metadata is not None:
        rows, csv_dir = merge_metadata(rows, Path(metadata))
    check_summary_values(summary, rows, where=str(results_dir), use_options=True)
    for r in rows if bench is None else ():
        r["subset"] = subset_of(r.get("audio_path"))
    # a benchmark's other tables (configs of their own, e.g. FDB v2's per-event rows), from its records
    extra = bench.extra_tables(rows) if bench is not None and hasattr(bench, "extra_tables") else {}
    audio_cols: list[str] = []
    if bench is not None and hasattr(bench, "table_rows"):  # a benchmark whose records nest values: its flat table
        rows = bench.table_rows(rows)
    if bench_audio and (with_audio or with_inputs):  # (folder, file name) per row: read under that folder only
        for col, files in bench.audio_files(rows, answers=with_audio, inputs=with_inputs).items():
            audio_cols.append(col)
            for r, f in zip(rows, files):
                r[col] = _audio_bytes(f[1], f[0]) if f and r.get("status") == "ok" else None
    if with_audio and not bench_audio:
        audio_cols.append("answer_audio")
        for r in rows:
            r["answer_audio"] = _row_audio(r, "answer_audio_path", csv_dir)
    if with_inputs and not bench_audio:
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
    roots = [p for p in (csv_dir, Path(results_dir)) if p is not None]
    rows, summary = _make_public(rows, summary, roots)
    report = Path(results_dir) / "report"
    # a report built from other results (the run was replaced since) is not published with these
    has_report = (report / "index.html").is_file() and report_matches(report, results_dir)
    out = Path(out_dir)
    # --local-dir: new, empty or a results dataset this tool wrote; a rewrite replaces the files
    # it wrote there before (recorded), nothing else
    with open_folder(out, command="results-dataset", flag="--local-dir") if own else contextlib.nullcontext() as folder:
        if folder is not None:
            folder.remove_recorded()
        # written with pyarrow against the Features' own schema (their JSON rides in the parquet
        # metadata, so load_dataset reads Audio columns back): datasets' Audio encoder would import
        # torch and torchcodec just to pass the embedded bytes through
        schema = _features(rows, audio_cols).arrow_schema
        table = pa.Table.from_pylist([{c: r.get(c) for c in schema.names} for r in rows], schema=schema)
        with atomic_path(out / "data" / f"{split}-00000-of-00001.parquet") as tmp:
            pq.write_table(table, tmp)
        for name, extra_rows in extra.items():
            if not extra_rows:  # no rows, no columns: the config is left without files
                continue
            extra_rows, _ = _make_public(extra_rows, {}, roots)
            schema_x = _features(extra_rows, []).arrow_schema
            with atomic_path(out / name / f"{split}-00000-of-00001.parquet") as tmp:
                pq.write_table(pa.Table.from_pylist([{c: r.get(c) for c in schema_x.names} for r in extra_rows],
                                                    schema=schema_x), tmp)
        with atomic_path(out / "summary.json") as tmp:
            tmp.write_text(json.dumps(summary, indent=2, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8")
        with atomic_path(out / "README.md") as tmp:
            tmp.write_text(
                mask_secrets((card_text if bench is None else bench.card_text)(
                    summary, model_name=model_name.strip(), inference_mode=inference_mode, open_weights=open_weights,
                    split=split, n_rows=len(rows), audio_cols=audio_cols, has_report=has_report), shapes=False),
                encoding="utf-8")
        if has_report:
            for f in sorted(report.iterdir()):  # the page and its PNGs only (no links, no folders)
                if f.is_file() and not f.is_symlink() and f.suffix in (".html", ".png"):
                    with atomic_path(out / "report" / f.name) as tmp:
                        shutil.copyfile(f, tmp)
    return out
