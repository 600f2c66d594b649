"""SPEARBench leaderboard Space (gradio Blocks).

- Leaderboard: the published SPEAR table (``data/spear_benchmark.csv``, from
  ``thomasthebaud/SPEAR-benchmark-website``, MIT, licence in ``data/LICENSE.spear-website``) is
  the table's initial value, merged with results datasets: local folders and Hub ids given at
  start (``SPEARBENCH_RESULTS`` env var, ``--results`` CLI argument) and Hub ids typed in the
  page or passed to the API. Columns are the published keys grouped by the seven SPEAR
  dimensions, each labelled with its unit and direction of "better", all from the dimensions'
  ``MetricKey`` declarations (:mod:`spear_metrics.core.columns`). Missing values show "-", never 0.
- What may be read: :class:`spear_metrics.results.SourcePolicy` (start sources by their public
  label, Hub ids; never a server path typed into the page or the API; no server path in any
  message or cell).
- One tab per registered benchmark with a Space tab (:func:`benchmark_tabs`: each descriptor's
  :class:`~spear_metrics.core.benchmark.SpaceTab`): its results datasets, one row each.
- Per-sample browser: input clip (both speakers), human answer and model answer, transcripts
  and that sample's scores; filters by subset and by a range of one per-sample value.
- Plots: latency and answer-duration distributions against the human ones; per-dimension bars
  with the 95 % intervals of results datasets as error bars.
- A results dataset's values show their 95 % bootstrap interval and ``n`` (``summary.json``
  ``<key>_ci95`` / ``<key>_n``); a sample's timing evidence is drawn as a timeline (both
  speakers' waveforms, the VAD segments, latency and overlap); the Report tab shows each results
  dataset's ``report/index.html`` (``spearbench report``) in a sandboxed frame.

Run locally: ``python -m spear_metrics.space [--results SRC ...]`` (honours ``GRADIO_SERVER_NAME``
and ``GRADIO_SERVER_PORT``). On Hugging Face Spaces this file is the Space's ``app.py``
(``spearbench publish`` / ``scripts/build_space.py`` assemble the folder).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import gradio as gr
import numpy as np
import pandas as pd

from spear_datasets.identity import CUSTOM_LABEL, data_label, is_spear_data
from spear_metrics.core.columns import Column, groups, leaderboard_columns
from spear_metrics.core.registry import DEFAULT_BENCHMARK, benchmark_of_summary
from spear_metrics.core.summary import few_events
from spear_metrics.reports.runs import results_tie_cells
from spear_metrics.results import (
    PROTOCOL, Results, ResultsError, SourcePolicy, leaderboard_row, public_path, public_text, subset_of,
)

HERE = Path(__file__).resolve().parent

PUBLISHED_CSV = HERE / "data" / "spear_benchmark.csv"
SOURCE_URL = "https://github.com/thomasthebaud/SPEAR-benchmark-website"
ARROWS = {"higher": "↑", "lower": "↓", "closer_to_human": "≈human"}
ALL_SUBSETS = "all"
NO_METRIC = "(no range filter)"
CACHE = Path(tempfile.gettempdir()) / "spearbench-space-audio"
#: What this process may read (set by :func:`build_app`; a module-level default for helpers).
POLICY = SourcePolicy()


# ------------------------------------------------------------------------------------------------
# data


#: SPEARBench's own overall score, shown after the published columns (never in the published rows)
PROJECT_KEYS = ("human_likeness_auroc",)


def columns() -> list[Column]:
    """The published SPEAR columns in the published table's order
    (:func:`spear_metrics.core.columns.leaderboard_columns`), then :data:`PROJECT_KEYS`."""
    from spear_metrics.core.columns import find_column

    return leaderboard_columns() + [c for c in (find_column(k) for k in PROJECT_KEYS) if c is not None]


def project_cells(summary: dict[str, Any]) -> dict[str, Any]:
    """A results dataset's values of :data:`PROJECT_KEYS` with their ``_ci95`` and ``_n``, as
    :func:`spear_metrics.results.leaderboard_row` gives the published ones (``None`` = missing)."""
    out: dict[str, Any] = {}
    for k in PROJECT_KEYS:
        v, ci, n = summary.get(k), summary.get(f"{k}_ci95"), summary.get(f"{k}_n")
        out[k] = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None
        out[f"{k}_ci95"] = [float(x) for x in ci] if isinstance(ci, list) and len(ci) == 2 else None
        out[f"{k}_n"] = n if isinstance(n, int) and not isinstance(n, bool) else None
    return out


def header(c: Column, page: bool = False) -> str:
    """Display header of a column: dimension, exact CSV key, unit and direction, e.g.
    ``Interruptions · latency_ms [ms] ≈human``. ``page``: as shown in the page's table, where
    the unit is kept on one line (no-break space and hyphen: ``[MOS 1‑5]`` never breaks as
    ``[MOS 1-`` / ``5]``); the API and the CSV keep the plain text."""
    unit = c.unit.replace(" ", "\u00a0").replace("-", "\u2011") if page else c.unit
    return f"{c.group} · {c.name} [{unit}] {ARROWS.get(c.better, c.better)}"


def _num(cell: Any) -> float | None:
    """A CSV cell as a float; empty / "-" / non-finite -> ``None`` (missing, never 0)."""
    if cell is None:
        return None
    s = str(cell).strip()
    if s in ("", "-", "nan", "NaN", "None"):
        return None
    try:
        v = float(s)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def published_rows(path: Path = PUBLISHED_CSV) -> list[dict[str, Any]]:
    """Rows of the published leaderboard CSV: numbers as floats, empty cells as ``None``.

    ``open_weights``: "✓" -> True, "-" -> False (upstream marks closed models "-"), ``None`` for
    the human row (not a model).
    """
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    rows = []
    for rec in df.to_dict("records"):
        row: dict[str, Any] = {"protocol": rec.get("protocol") or PROTOCOL, "model": rec["model"],
                               "inference_mode": rec.get("inference_mode") or None, "source": "published",
                               "data": PUBLISHED_DATA}
        ow = (rec.get("open_weights") or "").strip()
        row["open_weights"] = None if row["inference_mode"] == "Human" else (True if ow == "✓" else False)
        for c in columns():
            row[c.name] = _num(rec.get(c.name))
        rows.append(row)
    return rows


def split_sources(text: str | None) -> list[str]:
    """``"a, b\\nc"`` -> ``["a", "b", "c"]`` (Hub ids or folders)."""
    return [s.strip() for s in (text or "").replace("\n", ",").split(",") if s.strip()]


def load_sources(sources: list[str]) -> tuple[list[Results], list[str]]:
    """Load each source through :data:`POLICY` (cached); returns the loaded ones and one whole
    message per rejected one (never cut mid-word, no server path)."""
    return POLICY.load_many(sources)


def all_rows(sources: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Published rows + one row per loaded results source, and the rejection messages."""
    loaded, errors = load_sources(sources)
    rows = published_rows()
    spear = [r for r in loaded if benchmark_of_summary(r.summary).name == DEFAULT_BENCHMARK]  # others: their own tabs
    # tie marks (★ best, ≈ tied, rank interval) among the results datasets, from their per-sample rows
    marks = results_tie_cells(spear, [c.name for c in columns()], human=next(
        (r for r in rows if r["model"] == "human" and r["source"] == "published"), None))
    for r in spear:
        row = leaderboard_row(r)
        row.update(project_cells(r.summary))
        row["source"] = r.source
        row.update({f"{k}_tie": mark for k, mark in marks.get(r.source, {}).items()})
        row["data"] = data_label(r.summary.get("data"))
        if not is_spear_data(r.summary.get("data")):  # shown apart, never as SPEAR's split
            row["protocol"] = CUSTOM_LABEL
        rows.append(row)
    # published rows, then runs on SPEAR's split, then runs on custom data
    rows.sort(key=lambda x: (x["source"] != "published", x.get("data") == CUSTOM_LABEL))
    return rows, errors


def benchmark_tabs() -> list[tuple[str, Any]]:
    """``(title, SpaceTab)`` of every registered benchmark that has a Space tab
    (:attr:`spear_metrics.core.benchmark.Benchmark.space_tab`), in registry order."""
    from spear_metrics.core.registry import benchmarks

    return [(b.title, b.hook("space_tab")) for b in benchmarks() if b.space_tab]


def benchmark_table(tab: Any, sources: list[str], *controls: str) -> pd.DataFrame:
    """A benchmark tab's table: its ``table`` function over the loaded results datasets (it keeps
    its own benchmark's)."""
    from spear_metrics.core.benchmark import resolve

    frame = resolve(tab.table)(load_sources(sources)[0], *controls)
    for c in frame.columns:  # numbers as the leaderboard shows them: 3 decimals, "-" = missing; labels as they are
        vals = list(frame[c])
        if any(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in vals):
            frame[c] = [_fmt(None if isinstance(v, float) and math.isnan(v) else v)
                        if v is None or (isinstance(v, (int, float, np.number)) and not isinstance(v, bool)) else v
                        for v in vals]
    return frame


def _tab_view(frame: pd.DataFrame, none_line: str) -> tuple[dict, dict]:
    """Updates of a benchmark tab's table and its "none loaded" line: the table when it has rows,
    else the line alone (an empty gradio table would show placeholder headers "1 | 2 | 3")."""
    return gr.update(value=frame, visible=not frame.empty), gr.update(value=none_line, visible=frame.empty)


def benchmark_view(tab: Any, sources: list[str], *controls: str) -> tuple[dict, dict]:
    """A benchmark tab's table and "none loaded" line (:func:`benchmark_table`)."""
    return _tab_view(benchmark_table(tab, sources, *controls), tab.none_line)


def _human_value(rows: list[dict[str, Any]], key: str) -> float | None:
    for r in rows:
        if r["model"] == "human" and r["source"] == "published":
            return r.get(key)
    return None


def filter_sort(rows: list[dict[str, Any]], modes: list[str] | None, open_filter: str, sort_by: str,
                order: str) -> list[dict[str, Any]]:
    """Apply the inference-mode and open-weights filters, then sort (missing values always last).

    ``order``: "best first" (direction of the column: higher, lower, or closest to the published
    human value), "ascending" or "descending".
    """
    wanted = set(modes or [])
    out = [r for r in rows if (r["inference_mode"] or "not given") in wanted] if modes is not None else list(rows)
    if open_filter == "open weights":
        out = [r for r in out if r["open_weights"] is True]
    elif open_filter == "closed weights":
        out = [r for r in out if r["open_weights"] is False]
    if sort_by in ("", None, "model"):
        return sorted(out, key=lambda r: r["model"].lower(), reverse=(order == "descending"))
    info = {c.name: c for c in columns()}.get(sort_by)
    if info is None:
        return out
    present = [r for r in out if r.get(sort_by) is not None]
    missing = [r for r in out if r.get(sort_by) is None]
    if order == "ascending":
        present.sort(key=lambda r: r[sort_by])
    elif order == "descending":
        present.sort(key=lambda r: -r[sort_by])
    elif info.better == "higher":
        present.sort(key=lambda r: -r[sort_by])
    elif info.better == "lower":
        present.sort(key=lambda r: r[sort_by])
    else:
        h = _human_value(rows, sort_by)
        present.sort(key=lambda r: abs(r[sort_by] - h) if h is not None else r[sort_by])
    return present + missing


def _fmt(v: Any) -> str:
    return "-" if v is None else f"{v:.3f}"


def value_text(row: dict[str, Any], key: str) -> str:
    """A table cell: the value, and for a results dataset its 95 % interval and n
    (``742.055``; ``800.000 [700.000, 900.000] n=2``; ``800.000 n=1`` when no interval exists)."""
    v = row.get(key)
    if v is None:
        return "-"
    text = _fmt(v)
    ci, n = row.get(f"{key}_ci95"), row.get(f"{key}_n")
    if ci:
        text += f" [{ci[0]:.3f}, {ci[1]:.3f}]"
    if n is not None:
        text += f" n={int(n)}"
    if row.get(f"{key}_tie"):  # ★ best / ≈ tied with the best, and the rank interval (a mark, not a colour)
        text += f" {row[f'{key}_tie']}"
    if few_events(row, key):  # a rate from fewer than 10 events
        text += f" {few_events(row, key)}"
    return text


def table_ids() -> tuple[str, ...]:
    """The tables' elem_ids: the SPEAR leaderboard and each registered benchmark's tab."""
    return ("leaderboard", *(tab.elem_id for _, tab in benchmark_tabs()))


def _table_css(ids: tuple[str, ...]) -> str:
    """Headers wrap between words, never inside one ("open weig hts"), and the value columns stay
    narrow enough for more of them to fit (values wrap at their spaces), in each table of ``ids``."""
    def sel(*parts: str) -> str:
        return ", ".join(f"#{i} {p}" for i in ids for p in parts)

    return (f"{sel('th', 'th *', 'td', 'td *')} {{\n"
            "  word-break: normal !important; overflow-wrap: normal !important; hyphens: none !important;\n}\n"
            f"{sel('th', 'th *')} {{ white-space: normal !important; }}\n"
            f"{sel('td')} {{ max-width: 14em; }}\n")




def _ow(v: bool | None) -> str:
    return "-" if v is None else ("yes" if v else "no")


#: the columns before the values: ``model`` and ``source`` first (pinned on the page: the source
#: tells a published row from a results dataset's row of the same model, e.g. two "human" rows)
ROW_COLUMNS = ("model", "source", "data", "inference mode", "open weights")
#: the data of the published table's rows
PUBLISHED_DATA = "SPEAR test split"


def display_frame(rows: list[dict[str, Any]], dims: list[str] | None, *, page: bool = False) -> pd.DataFrame:
    """The table as shown: strings, "-" for missing values, headers with unit and direction
    (:func:`header`; ``page``: the page's own header text); ``source`` ("published" or a results
    dataset's label) second, beside ``model``. When the loaded results follow different onset rules
    (:func:`spear_metrics.core.onset.mixed_onset_note`), each of their rows says its rule in the
    inference-mode cell (``"streaming · onset frame"``): never silently side by side."""
    from spear_metrics.core.onset import mixed_onset_note

    cols = [c for c in columns() if dims is None or c.group in dims]
    mixed = mixed_onset_note(r.get("onset_kind") for r in rows if r.get("source") != "published") is not None
    data = []
    for r in rows:
        mode = r["inference_mode"] or "-"
        if mixed and r.get("source") != "published":
            mode = f"{mode} · onset {r.get('onset_kind') or 'unstated'}"
        d = {"model": r["model"], "source": r["source"], "data": r.get("data") or CUSTOM_LABEL,
             "inference mode": mode,
             "open weights": _ow(r["open_weights"])}
        for c in cols:
            d[header(c, page)] = value_text(r, c.name)
        data.append(d)
    return pd.DataFrame(data, columns=[*ROW_COLUMNS, *[header(c, page) for c in cols]])


def csv_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The table for download: the published CSV keys, raw numbers, empty cell = missing."""
    data = []
    for r in rows:
        d = {"protocol": r["protocol"], "model": r["model"], "inference_mode": r["inference_mode"] or "",
             "open_weights": "" if r["open_weights"] is None else ("yes" if r["open_weights"] else "no")}
        for c in columns():
            d[c.name] = r.get(c.name)
        d["source"] = r["source"]
        d["data"] = r.get("data") or CUSTOM_LABEL
        d["onset_kind"] = r.get("onset_kind") or ("" if r["source"] == "published" else "unstated")
        data.append(d)
    return pd.DataFrame(data)


#: Most leaderboard CSVs kept in :data:`CACHE` (the oldest are removed beyond it).
MAX_TABLE_FILES = 16


def write_csv(rows: list[dict[str, Any]]) -> str:
    """Write the download CSV into :data:`CACHE`, named by its content (the same table is one
    file however often it is asked for), keeping at most :data:`MAX_TABLE_FILES` of them;
    returns its path."""
    text = csv_frame(rows).to_csv(index=False, float_format="%.6g")
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"spearbench_leaderboard_{hashlib.sha1(text.encode()).hexdigest()[:16]}.csv"
    if not path.exists():
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    os.utime(path)  # the newest, kept by the pruning below
    old = sorted(CACHE.glob("spearbench_leaderboard_*.csv"), key=lambda p: p.stat().st_mtime_ns)[:-MAX_TABLE_FILES]
    for p in old:
        p.unlink(missing_ok=True)
    return str(path)


def legend_markdown() -> str:
    """The column guide: the seven dimensions, their keys, units and direction of "better"."""
    lines = ["| dimension | column | unit | better | definition |", "|---|---|---|---|---|"]
    for c in columns():
        lines.append(f"| {c.group} | `{c.name}` | {c.unit} | {ARROWS.get(c.better, c.better)} | {c.description} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# per-sample browser


def _samples_models(sources: list[str]) -> list[tuple[str, str]]:
    loaded, _ = load_sources(sources)
    return [(f"{r.model} ({r.source})", r.source) for r in loaded]


def numeric_sample_columns(res: Results) -> list[str]:
    """Per-sample columns holding numbers (or booleans) that a range filter can use."""
    skip = {"row", "context_end_time", "question_end_time", "answer_duration", "answer_start_time"}
    out = []
    for c in res.samples.columns:
        if c in skip or c in res.audio_columns:
            continue
        s = res.samples[c].dropna()
        if len(s) and all(isinstance(v, (int, float, bool)) for v in s):
            out.append(c)
    return out


def filtered_rows(res: Results, subset: str, metric: str, lo: Any = None, hi: Any = None) -> list[int]:
    """``row`` ids of the samples passing the subset and value-range filters (rows with a
    missing value fail any range filter)."""
    lo, hi = _bound(lo), _bound(hi)
    df = res.samples
    if subset and subset != ALL_SUBSETS:
        sub = df["subset"] if "subset" in df else pd.Series([None] * len(df))
        df = df[sub.fillna("unknown") == subset]
    if metric and metric != NO_METRIC and metric in df and (lo is not None or hi is not None):
        v = pd.to_numeric(df[metric].map(lambda x: None if x is None else float(x)), errors="coerce")
        keep = v.notna()
        if lo is not None:
            keep &= v >= float(lo)
        if hi is not None:
            keep &= v <= float(hi)
        df = df[keep]
    return [int(x) for x in df["row"]]


def _sample_label(res: Results, row: int) -> str:
    """``row 0 · <input clip file name without extension> · ok`` (+ ``· failed`` etc.): the row
    id, the clip that identifies the sample across results datasets (:func:`sample_key`), and
    whether it was scored."""
    r = res.samples[res.samples["row"] == row].iloc[0]
    def text(k: str) -> str:
        v = r.get(k)
        return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)

    clip = Path(text("audio_path").replace("\\", "/")).stem or text("conversation_id") \
        or "/".join(x for x in (text("mode"), text("role"), text("dialogue")) if x) or "?"  # SpeechRole: mode/role/dialogue
    return f"row {row} · {clip} · {text('status') or '-'}"


def _audio_file(value: Any) -> str | None:
    """Write embedded audio bytes to a cache file (named by content hash); ``None`` when absent."""
    if not isinstance(value, dict) or not value.get("bytes"):
        return None
    data = value["bytes"]
    CACHE.mkdir(parents=True, exist_ok=True)
    suffix = Path(value.get("path") or "a.wav").suffix or ".wav"
    p = CACHE / f"{hashlib.sha1(data).hexdigest()}{suffix}"
    if not p.exists():
        p.write_bytes(data)
    return str(p)


def sample_key(audio_path: Any) -> tuple[str | None, str]:
    """The identity of an input clip across results datasets: its subset and file name (the
    same clip may be written ``data/improvised/audios/x.wav`` in one run and
    ``inputs/test/improvised/audios/x.wav`` in another)."""
    p = str(audio_path or "").strip().replace("\\", "/")
    return subset_of(p), p.rsplit("/", 1)[-1]


def _find(res_list: list[Results], audio_path: str, column: str, human_only: bool = False):
    key = sample_key(audio_path)
    for r in res_list:
        if human_only and r.model.lower() != "human":
            continue
        if column not in r.samples:
            continue
        m = r.samples[r.samples["audio_path"].map(sample_key) == key]
        if len(m):
            return m.iloc[0]
    return None


def _cell(v: Any) -> str:
    """One per-sample value as text: "-" when missing, booleans as true/false (never 0/1)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, str):
        return v
    try:
        if isinstance(v, (list, tuple, np.ndarray)):  # *_segments_s: [start, end] seconds
            return " ".join(f"[{float(p[0]):.2f}, {float(p[1]):.2f}]" for p in v) or "(none)"
        return f"{float(v):.3f}"
    except (TypeError, ValueError, IndexError, OverflowError):  # a value of another shape: shown, never raised
        text = " ".join(str(v).split())
        return text if len(text) <= 200 else text[:199] + "…"


def _bound(text: Any) -> float | None:
    """A min/max box: empty -> no bound; a number -> that bound (unparsable -> no bound)."""
    return _num(text)


def row_index(row: Any) -> int | None:
    """``row`` as a results row number (an int >= 0, or a float/str holding one exactly: ``2``,
    ``2.0``, ``"2"``), else ``None`` (``1.5``, ``-1``, ``nan``, ``True``, ``"x"``)."""
    if isinstance(row, bool):
        return None
    try:
        x = float(row)
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(x) or not x.is_integer() or x < 0:
        return None
    return int(x)


def sample_view(sources: list[str], source: str | None, row: int | None) -> tuple:
    """Everything shown for one sample: (input clip, human answer, model answer, question
    transcript, human answer transcript, model answer transcript, scores table, info line)."""
    empty = pd.DataFrame({"value": [], "key": []})[["key", "value"]]
    loaded, _ = load_sources(sources)
    res = next((r for r in loaded if r.source == source), None)
    if res is None and source:
        try:
            res = POLICY.load(source)
        except ResultsError as e:
            return None, None, None, "", "", "", empty, f"rejected {e}"
    if res is None or row is None:
        return None, None, None, "", "", "", empty, "Load a results dataset and pick a sample."
    index = row_index(row)  # 1.5 is no row: refused like a row that is not there, never rounded to one
    m = res.samples[res.samples["row"] == index] if index is not None else res.samples.iloc[:0]
    if not len(m):
        return None, None, None, "", "", "", empty, f"row {row} is not in {res.model}"
    row = index
    s = m.iloc[0]
    ap = s.get("audio_path")
    inp = _audio_file(s.get("input_audio")) if "input_audio" in res.samples else None
    if inp is None:
        other = _find(loaded, ap, "input_audio")
        inp = _audio_file(other.get("input_audio")) if other is not None else None
    human = _find(loaded, ap, "answer_audio", human_only=True)
    human_any = _find(loaded, ap, "transcript_answer", human_only=True)
    model_ans = _audio_file(s.get("answer_audio")) if "answer_audio" in res.samples else None
    skip = {"row", "audio_path", "answer_audio_path", "status", "error", "speakers", "conversation_id",
            "transcript_question", "transcript_answer", "subset", *res.audio_columns}
    scores = [(k, public_text(_cell(v))) for k, v in s.items() if k not in skip]
    err = s.get("error")
    where = f"`{public_path(ap)}`" if isinstance(ap, str) and ap else _sample_label(res, row).split(" · ")[1]
    info = (f"**{res.model}** · row {int(row)} · {where} · subset {s.get('subset') or '-'} · "
            f"status {s.get('status')}" + (f" · error: {public_text(err)}" if isinstance(err, str) and err else ""))
    missing = [n for n, v in (("input clip", inp), ("human answer", human), ("model answer", model_ans)) if v is None]
    if missing and res.summary.get("benchmark"):  # SpeechRole-Eval, Dynamic-SUPERB: their datasets hold no audio
        info += f"  \n({res.summary['benchmark']} results datasets hold scores only, no audio)"
    elif missing:
        info += f"  \n(no audio for: {', '.join(missing)} — embed it with `push-results --with-audio/--with-inputs`," \
                " and load the `human` results dataset for human answers)"
    return (inp, _audio_file(human.get("answer_audio")) if human is not None else None, model_ans,
            s.get("transcript_question") or "-", (human_any.get("transcript_answer") if human_any is not None else None) or "-",
            s.get("transcript_answer") or "-", pd.DataFrame(scores, columns=["key", "value"]), info)


def _plain_row(s: pd.Series) -> dict[str, Any]:
    from spear_metrics.core.records import clean_value

    return {k: clean_value(v) for k, v in s.items()}


def timeline_view(sources: list[str], source: str | None, row: int | None):
    """The sample's timing evidence on the question's time line
    (:func:`spear_metrics.reports.plots.timeline`): the input clip's waveform (both speakers)
    and VAD segments, the model's answer placed at its onset with its VAD segments, the overlap
    and the latency. A figure that says why when the results dataset has no evidence."""
    from spear_metrics.reports import plots

    loaded, _ = load_sources(sources)
    res = next((r for r in loaded if r.source == source), None)
    if res is None or row is None:
        return plots.message("Pick a sample to see its timing.")
    m = res.samples[res.samples["row"] == int(row)]
    if not len(m):
        return plots.message(f"row {row} is not in {res.model}")
    s = _plain_row(m.iloc[0])
    if s.get("question_vad_segments_s") is None:
        why = (f"row {row} failed: {public_text(s.get('error'))}" if s.get("status") != "ok" else
               "no timing evidence in this results dataset (scored without interruptions, or by a version "
               "that did not keep question_vad_segments_s...)")
        return plots.message(why)
    inp = _audio_file(s.get("input_audio")) if "input_audio" in res.samples else None
    if inp is None:
        other = _find(loaded, s.get("audio_path"), "input_audio")
        inp = _audio_file(other.get("input_audio")) if other is not None else None
    ans = _audio_file(s.get("answer_audio")) if "answer_audio" in res.samples else None
    from spear_datasets.audio import AudioError, load_audio

    def wave(path):
        try:
            return load_audio(path, sr=16000, channels="keep") if path else None
        except AudioError:
            return None

    title = (f"{res.model} · row {int(row)} · latency {_fmt(s.get('latency_ms'))} ms · overlap "
             + ("not measured (answer placed at the question end)" if s.get("interrupted_time_ms") is None
                else f"{_fmt(s.get('interrupted_time_ms'))} ms"))
    return plots.timeline(s, title=title, question_end_time=s.get("question_end_time"),
                          context_end_time=s.get("context_end_time"), input_wave=wave(inp), answer_wave=wave(ans))


REPORT_FRAME = ('<iframe sandbox="" title="report" srcdoc="{doc}" '
                'style="width:100%;height:1100px;border:1px solid #ddd;background:white"></iframe>')


def report_view(sources: list[str], source: str | None) -> tuple[str, str | None]:
    """A results dataset's report (``report/index.html``, written by ``spearbench report``):
    the page in a sandboxed frame (no script, no same-origin: the page is the dataset's, not
    ours) and a copy to download; a sentence instead when the dataset has none."""
    import html as html_lib

    loaded, _ = load_sources(sources)
    res = next((r for r in loaded if r.source == source), None)
    if res is None:
        return "<p>Load a results dataset to see its report.</p>", None
    data = res.read_report()  # its real path inside the dataset's folder, checked now (links never followed out)
    if data is None:
        return (f"<p>{html_lib.escape(res.model)} ({html_lib.escape(res.source)}) has no report: write one with "
                "<code>spearbench report RESULTS --human HUMAN_RESULTS --out RESULTS/report</code> before "
                "<code>spearbench push-results</code>, which then includes <code>report/</code>.</p>"), None
    CACHE.mkdir(parents=True, exist_ok=True)
    copy = CACHE / f"report-{hashlib.sha1(data).hexdigest()[:16]}.html"
    if not copy.exists():
        copy.write_bytes(data)
    doc = html_lib.escape(data.decode("utf-8", errors="replace"), quote=True)
    return REPORT_FRAME.format(doc=doc), str(copy)


def _report_choices(sources: list[str]) -> list[tuple[str, str]]:
    loaded, _ = load_sources(sources)
    return [(f"{r.model} ({r.source})" + ("" if r.report is not None else " · no report"), r.source) for r in loaded]


# ------------------------------------------------------------------------------------------------
# plots


def distribution_plot(sources: list[str]):
    """Per model: histograms of per-sample ``latency_ms`` and ``explainable_duration_s`` (answer
    audio file duration, s), with the human answers' distribution (results source named "human")
    drawn behind each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loaded, _ = load_sources(sources)
    human = next((r for r in loaded if r.model.lower() == "human"), None)
    models = [r for r in loaded if r is not human] or ([human] if human else [])
    keys = (("latency_ms", "latency (ms)"), ("explainable_duration_s", "answer audio duration (s)"))
    fig, axes = plt.subplots(max(1, len(models)), 2, figsize=(10, 2.6 * max(1, len(models))), squeeze=False)
    if not models:
        for ax in axes[0]:
            ax.text(0.5, 0.5, "no per-sample results loaded", ha="center", va="center")
            ax.set_axis_off()
        return fig
    for i, res in enumerate(models):
        for j, (key, label) in enumerate(keys):
            ax = axes[i][j]
            vals = _values(res, key)
            hv = _values(human, key) if human is not None and human is not res else []
            if hv:
                ax.hist(hv, bins=20, color="0.75", label=f"human (n={len(hv)})")
            if vals:
                ax.hist(vals, bins=20, histtype="step", linewidth=2, color="C0", label=f"{res.model} (n={len(vals)})")
            if not vals and not hv:
                ax.text(0.5, 0.5, f"no {key} values", ha="center", va="center", transform=ax.transAxes)
            ax.set_xlabel(f"{key}: {label}")
            ax.set_ylabel("samples")
            ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _values(res: Results | None, key: str) -> list[float]:
    if res is None or key not in res.samples:
        return []
    return [float(v) for v in res.samples[key] if v is not None and not (isinstance(v, float) and math.isnan(v))]


def dimension_plot(sources: list[str], group: str):
    """One bar panel per key of dimension ``group``: every leaderboard row with a value (rows
    without one get no bar and are marked "-"), a results dataset's 95 % interval as its error
    bar; the published human value as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, _ = all_rows(sources)
    cols = [c for c in columns() if c.group == group] or [c for c in columns() if c.group == groups()[0][1]]
    fig, axes = plt.subplots(1, len(cols), figsize=(4.2 * len(cols), 4), squeeze=False)
    names = [r["model"] if r["source"] == "published" else f"{r['model']} (results)" for r in rows]
    for ax, c in zip(axes[0], cols):
        vals = [r.get(c.name) for r in rows]
        xs = list(range(len(rows)))
        cis = [r.get(f"{c.name}_ci95") for r, v in zip(rows, vals) if v is not None]
        err = [[max(0.0, v - ci[0]) if ci else 0.0 for v, ci in zip([v for v in vals if v is not None], cis)],
               [max(0.0, ci[1] - v) if ci else 0.0 for v, ci in zip([v for v in vals if v is not None], cis)]]
        ax.bar([x for x, v in zip(xs, vals) if v is not None], [v for v in vals if v is not None], yerr=err, capsize=3,
               color=["0.6" if n.startswith("human") else "C0" for n, v in zip(names, vals) if v is not None])
        for x, v in zip(xs, vals):
            if v is None:
                ax.text(x, 0, "-", ha="center", va="bottom")
        h = _human_value(rows, c.name)
        if h is not None:
            ax.axhline(h, color="k", linestyle="--", linewidth=1, label="human (published)")
            ax.legend(fontsize=7)
        ax.set_xticks(xs)
        ax.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
        ax.set_title(f"{c.name} [{c.unit}] {ARROWS.get(c.better, c.better)}", fontsize=9)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------------------
# UI


def default_sources(argv_sources: list[str] | None = None) -> list[str]:
    """Sources given at start: ``results.txt`` beside this file (one per line, written by
    ``spearbench publish --results``), ``SPEARBENCH_RESULTS`` (comma/newline separated), then
    ``--results``."""
    listed = HERE / "results.txt"
    from_file = split_sources(listed.read_text(encoding="utf-8")) if listed.is_file() else []
    return from_file + split_sources(os.environ.get("SPEARBENCH_RESULTS")) + list(argv_sources or [])


def status_text(n_loaded: int, messages: list[str]) -> str:
    """The status line under the table: counts, then every message of the last load, whole."""
    msg = f"{len(published_rows())} published rows · {n_loaded} results dataset(s) loaded"
    return msg + "".join(f"  \n⚠️ {e}" for e in messages)


def set_sources(sources: list[str]) -> list[str]:
    """Make ``sources`` (local folders, Hub ids) the start sources of :data:`POLICY`, what this
    process may read besides Hub ids; returns their public labels (what the page and the API
    show and take)."""
    global POLICY
    POLICY = SourcePolicy(list(sources))
    return POLICY.start_labels


def build_app(sources: list[str] | None = None) -> gr.Blocks:
    """The Blocks app; ``sources`` = results datasets (local folders, Hub ids) the Space may
    read besides Hub ids typed in (:func:`set_sources`), shown by label."""
    start_all = set_sources(list(sources if sources is not None else default_sources()))
    loaded0, errors0 = load_sources(start_all)
    start = [r.source for r in loaded0]  # the start sources that loaded (the others are reported)
    rows0, _ = all_rows(start)
    modes0 = sorted({r["inference_mode"] or "not given" for r in rows0})
    group_labels = list(dict.fromkeys([g[1] for g in groups()] + [c.group for c in columns()]))
    sort_choices = ["model", *[c.name for c in columns()]]
    models0 = _samples_models(start)

    # gradio's copies of served files (tables, audio, reports) older than an hour go every hour
    with gr.Blocks(title="SPEARBench leaderboard", delete_cache=(3600, 3600)) as demo:
        gr.HTML(f"<style>{_table_css(table_ids())}</style>", padding=False, elem_id="table_css")
        src_state = gr.State(start)
        gr.Markdown(
            "# SPEARBench leaderboard\n"
            f"Protocol `{PROTOCOL}`, test split (improvised + naturalistic pooled). Published rows: "
            f"[SPEAR benchmark website]({SOURCE_URL}) (`spear_benchmark.csv`, MIT licence, "
            "© 2026 Thomas Thebaud; copy in `data/`). `-` = not measured / does not exist. "
            "↑ higher is better, ↓ lower is better, ≈human closer to the human row is better.")
        with gr.Tab("Leaderboard"):
            with gr.Row():
                modes = gr.CheckboxGroup(modes0, value=modes0, label="inference mode")
                open_w = gr.Radio(["all", "open weights", "closed weights"], value="all", label="open weights")
            with gr.Row():
                dims = gr.CheckboxGroup(group_labels, value=group_labels, label="dimensions shown")
            with gr.Row():
                sort_by = gr.Dropdown(sort_choices, value="model", label="sort by")
                order = gr.Radio(["best first", "ascending", "descending"], value="ascending", label="order")
            table = gr.Dataframe(value=display_frame(filter_sort(rows0, modes0, "all", "model", "ascending"), group_labels,
                                                     page=True),
                                 interactive=False, wrap=True, label="SPEAR leaderboard", elem_id="leaderboard",
                                 max_height=600, pinned_columns=2)
            status = gr.Markdown(status_text(len(start), errors0), elem_id="status")
            with gr.Row():
                src_box = gr.Textbox(label="add results datasets (Hub dataset ids OWNER/NAME, comma separated; "
                                           "server folders are read only when given at start)",
                                     scale=4, elem_id="sources")
                add_btn = gr.Button("Load", scale=1, elem_id="load")
            download = gr.File(value=write_csv(filter_sort(rows0, modes0, "all", "model", "ascending")),
                               label="download the table (CSV; empty cell = missing)")
            with gr.Accordion("Columns: dimensions, units, direction of better", open=False):
                gr.Markdown(legend_markdown())
        tab_events = []  # (refresh, inputs, outputs) of each benchmark tab, rerun after a load
        for title, tab in benchmark_tabs():
            with gr.Tab(title):
                gr.Markdown(tab.intro)
                controls = [gr.Radio(list(choices), value=default, label=label) for label, choices, default in tab.controls]
                frame0 = benchmark_table(tab, start, *(default for _, _, default in tab.controls))
                b_table = gr.Dataframe(value=frame0, interactive=False, wrap=True, elem_id=tab.elem_id,
                                       visible=not frame0.empty)
                b_none = gr.Markdown(tab.none_line, visible=frame0.empty, elem_id=f"{tab.elem_id}_none")
                if tab.samples:  # the benchmark's own components under its table
                    from spear_metrics.core.benchmark import resolve

                    resolve(tab.samples)(src_state, load=lambda s: load_sources(s)[0], audio_file=_audio_file)
                view = functools.partial(benchmark_view, tab)
                for c in controls:
                    c.change(view, [src_state, *controls], [b_table, b_none], api_visibility="private")
                tab_events.append((view, [src_state, *controls], [b_table, b_none]))
        with gr.Tab("Samples"):
            with gr.Row():
                model_dd = gr.Dropdown(models0, value=models0[0][1] if models0 else None, label="model",
                                       elem_id="model")
                subset_dd = gr.Dropdown([ALL_SUBSETS, "improvised", "naturalistic", "unknown"], value=ALL_SUBSETS,
                                        label="subset")
                metric_dd = gr.Dropdown([NO_METRIC], value=NO_METRIC, label="filter on value", allow_custom_value=True)
                lo = gr.Textbox(label="min (empty = none)", value="", elem_id="min")
                hi = gr.Textbox(label="max (empty = none)", value="", elem_id="max")
            with gr.Row():
                prev_btn = gr.Button("◀ previous", elem_id="prev")
                sample_dd = gr.Dropdown([], label="sample", elem_id="sample", scale=3)
                next_btn = gr.Button("next ▶", elem_id="next")
            info = gr.Markdown()
            with gr.Row():
                a_in = gr.Audio(label="input clip (both speakers)", type="filepath", elem_id="audio_input")
                a_h = gr.Audio(label="human answer", type="filepath", elem_id="audio_human")
                a_m = gr.Audio(label="model answer", type="filepath", elem_id="audio_model")
            with gr.Row():
                t_q = gr.Textbox(label="question transcript (context + question)", lines=4)
                t_h = gr.Textbox(label="human answer transcript", lines=4)
                t_m = gr.Textbox(label="model answer transcript", lines=4, elem_id="t_model")
            timeline = gr.Plot(label="timing: why this latency and overlap (s on the question's time line)",
                               elem_id="timeline")
            scores = gr.Dataframe(label="this sample's values (- = does not exist)", interactive=False)
        with gr.Tab("Plots"):
            dist = gr.Plot(label="latency and answer duration vs human")
            group_dd = gr.Dropdown(group_labels, value=group_labels[1], label="dimension")
            dim_plot = gr.Plot(label="per-dimension comparison")
            plot_btn = gr.Button("Refresh plots")
        with gr.Tab("Report"):
            reports0 = _report_choices(start)
            with_report = [v for label, v in reports0 if not label.endswith("no report")]
            report_dd = gr.Dropdown(reports0, value=(with_report or [None])[0] if reports0 else None,
                                    label="results dataset", elem_id="report_model")
            report_html = gr.HTML(elem_id="report")
            report_file = gr.File(label="download the report (index.html, self-contained)")

        # ---- leaderboard events
        def refresh(sources_, modes_, open_, dims_, sort_, order_):
            # the status line is the last load's report: a refresh never overwrites it
            rows, _ = all_rows(sources_)
            shown = filter_sort(rows, modes_, open_, sort_, order_)
            return display_frame(shown, dims_, page=True), write_csv(shown)

        lb_inputs = [src_state, modes, open_w, dims, sort_by, order]
        lb_outputs = [table, download]
        for comp in (modes, open_w, dims, sort_by, order):
            comp.change(refresh, lb_inputs, lb_outputs, api_visibility="private")

        def add_sources(sources_, text, modes_, open_):
            typed = [s for s in split_sources(text) if s not in sources_]
            loaded, errors = load_sources(typed)  # rejected ones are reported (whole), not kept
            kept = list(sources_) + [r.source for r in loaded if r.source not in sources_]
            rows, _ = all_rows(kept)
            all_modes = sorted({r["inference_mode"] or "not given" for r in rows})
            modes_ = sorted(set(modes_ or []) | (set(all_modes) - set(modes0)))
            models = _samples_models(kept)
            return (kept, gr.update(choices=all_modes, value=modes_), "",
                    gr.update(choices=models, value=models[-1][1] if models else None),
                    status_text(len(kept), errors), gr.update(choices=_report_choices(kept)))

        event = add_btn.click(add_sources, [src_state, src_box, modes, open_w],
                              [src_state, modes, src_box, model_dd, status, report_dd],
                              api_visibility="private").then(refresh, lb_inputs, lb_outputs, api_visibility="private")
        for view, inputs, outputs in tab_events:
            event = event.then(view, inputs, outputs, api_visibility="private")

        def leaderboard(sources_text: str = "", inference_modes: str = "", open_weights: str = "all",
                        sort: str = "model", sort_order: str = "ascending") -> dict:
            """The leaderboard table ``{"headers", "data", "errors"}`` (cells are strings; "-" =
            missing; ``source`` = "published" or a results dataset's label) for extra sources (Hub
            ids or labels of start sources, comma separated), inference modes (comma separated,
            empty = all), the open-weights filter ("all", "open weights", "closed weights"), sort
            column and order. ``errors``: the start sources' and the extra sources' rejections."""
            rows, errors = all_rows(start + [s for s in split_sources(sources_text) if s not in start])
            errors = errors0 + errors
            wanted = split_sources(inference_modes) or None
            df = display_frame(filter_sort(rows, wanted, open_weights, sort, sort_order), None)
            return {"headers": list(df.columns), "data": df.values.tolist(), "errors": errors}

        gr.api(leaderboard, api_name="leaderboard")

        def pick_row(evt: gr.SelectData, sources_):
            """Clicking a leaderboard row of a loaded results dataset opens it in the sample browser."""
            row = evt.row_value or []
            src = row[ROW_COLUMNS.index("source")] if len(row) > 1 else None
            models = _samples_models(sources_)
            if src in [m[1] for m in models]:
                return gr.update(value=src)
            return gr.update()

        table.select(pick_row, [src_state], [model_dd], api_visibility="private")

        # ---- sample browser events
        def update_samples(sources_, source, subset, metric, lo_, hi_):
            loaded, _ = load_sources(sources_)
            res = next((r for r in loaded if r.source == source), None)
            if res is None:
                return gr.update(choices=[], value=None), gr.update(choices=[NO_METRIC], value=NO_METRIC)
            rows = filtered_rows(res, subset, metric, lo_, hi_)
            metrics = [NO_METRIC, *numeric_sample_columns(res)]
            return (gr.update(choices=[(_sample_label(res, r), r) for r in rows], value=rows[0] if rows else None),
                    gr.update(choices=metrics, value=metric if metric in metrics else NO_METRIC))

        def step(sources_, source, subset, metric, lo_, hi_, current, delta):
            loaded, _ = load_sources(sources_)
            res = next((r for r in loaded if r.source == source), None)
            if res is None:
                return gr.update()
            rows = filtered_rows(res, subset, metric, lo_, hi_)
            if not rows:
                return gr.update(value=None)
            i = rows.index(current) if current in rows else -delta
            return gr.update(value=rows[(i + delta) % len(rows)])

        filt_inputs = [src_state, model_dd, subset_dd, metric_dd, lo, hi]
        view_outputs = [a_in, a_h, a_m, t_q, t_h, t_m, scores, info]
        for comp in (model_dd, subset_dd, metric_dd, lo, hi):
            # the view follows the model too: another model's first sample may keep the same row id,
            # and a dropdown whose value does not change fires no change event
            comp.change(update_samples, filt_inputs, [sample_dd, metric_dd], api_visibility="private").then(
                sample_view, [src_state, model_dd, sample_dd], view_outputs, api_visibility="private").then(
                timeline_view, [src_state, model_dd, sample_dd], [timeline], api_visibility="private")
        prev_btn.click(lambda *a: step(*a, -1), filt_inputs + [sample_dd], [sample_dd], api_visibility="private")
        next_btn.click(lambda *a: step(*a, 1), filt_inputs + [sample_dd], [sample_dd], api_visibility="private")
        sample_dd.change(sample_view, [src_state, model_dd, sample_dd], view_outputs, api_visibility="private")
        sample_dd.change(timeline_view, [src_state, model_dd, sample_dd], [timeline], api_visibility="private")
        report_dd.change(report_view, [src_state, report_dd], [report_html, report_file], api_visibility="private")

        def sample(source: str, row: float):
            """One sample of a results source (a start source's label or a Hub id; loaded when new):
            input clip, human answer, model answer, question / human / model transcripts, the
            sample's values, an info line (the rejection message when the source is refused)."""
            source = str(source or "").strip()
            return sample_view(start + [s for s in [source] if s not in start], source, row)

        api_source = gr.Textbox(visible=False)
        api_row = gr.Number(visible=False)  # no precision: 1.5 must reach sample_view, not be rounded to 2
        api_btn = gr.Button(visible=False)
        api_btn.click(sample, [api_source, api_row], view_outputs, api_name="sample")

        # ---- plots
        plot_btn.click(lambda s, g: (distribution_plot(s), dimension_plot(s, g)), [src_state, group_dd],
                       [dist, dim_plot], api_visibility="private")
        group_dd.change(dimension_plot, [src_state, group_dd], [dim_plot], api_visibility="private")

        def on_load(sources_, source, subset, metric, lo_, hi_, group, report_src):
            samples_upd, metric_upd = update_samples(sources_, source, subset, metric, lo_, hi_)
            return (samples_upd, metric_upd, distribution_plot(sources_), dimension_plot(sources_, group),
                    *report_view(sources_, report_src))

        demo.load(on_load, filt_inputs + [group_dd, report_dd],
                  [sample_dd, metric_dd, dist, dim_plot, report_html, report_file], api_visibility="private")
    check_public_api(demo)
    return demo


#: The only endpoints the Space offers to API clients; every other event (chained ones
#: included) is internal to the page (``api_visibility="private"``).
PUBLIC_API = ("leaderboard", "sample")


def check_public_api(demo: gr.Blocks) -> None:
    """Raise ``RuntimeError`` when an event other than :data:`PUBLIC_API` is callable by API
    clients (an event wired without ``api_visibility="private"``: a ``.then`` chain forgets it
    easily). Called when the app is built, so such an app never starts."""
    exposed = sorted(str(f.api_name) for f in demo.fns.values()
                     if getattr(f, "api_visibility", "public") != "private" and f.api_name not in PUBLIC_API)
    if exposed:
        raise RuntimeError(f"events exposed as API endpoints besides {', '.join(PUBLIC_API)}: {', '.join(exposed)}")


def main(argv: list[str] | None = None) -> None:
    """``python -m spear_metrics.space [--results SRC ...]`` (or ``python app.py`` in the Space
    folder); host/port from GRADIO_SERVER_NAME/PORT."""
    p = argparse.ArgumentParser(description="SPEARBench leaderboard Space")
    p.add_argument("--results", nargs="*", default=[], help="results datasets: Hub ids or local folders")
    args = p.parse_args(argv)
    from spear_metrics.results import expand_results_folders

    sources, messages = expand_results_folders(default_sources(args.results))
    for m in messages:  # a parent folder of results datasets (e.g. DEMO_OUT/datasets): said on the console
        print(f"warning: {m}", file=sys.stderr)
    build_app(sources).launch()


if __name__ == "__main__":
    main()
