"""The leaderboard Space's per-sample browser: the samples of a results dataset, filtered by
subset and by a range of one per-sample value (:func:`filtered_rows`), one sample's audio,
transcripts and values (:func:`sample_view`), its timing evidence (:func:`timeline_view`) and a
results dataset's report page (:func:`report_view`). Wired into the page by
:mod:`spear_metrics.space.app`.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from spear_metrics.core.summary import interval_text
from spear_metrics.results import Results, ResultsError, public_path, public_text, subset_of
from spear_metrics.space import tables
from spear_metrics.space.tables import CACHE, _num, load_sources

ALL_SUBSETS = "all"
NO_METRIC = "(no range filter)"


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
            res = tables.POLICY.load(source)
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

    title = (f"{res.model} · row {int(row)} · latency {interval_text(s.get('latency_ms'))} ms · overlap "
             + ("not measured (answer placed at the question end)" if s.get("interrupted_time_ms") is None
                else f"{interval_text(s.get('interrupted_time_ms'))} ms"))
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
