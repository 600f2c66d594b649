"""The leaderboard Space's tables: the published SPEAR table merged with the loaded results
datasets (:func:`all_rows`), its filters and order (:func:`filter_sort`), the table as shown
(:func:`display_frame`) and as downloaded (:func:`csv_frame`, :func:`write_csv`), and each
registered benchmark's tab table (:func:`benchmark_table`). What this process may read is
:data:`POLICY` (:func:`set_sources`). Wired into the page by :mod:`spear_metrics.space.app`.

The tie marks (★ best, ≈ tied, rank intervals: paired bootstraps over every dataset's per-sample
rows) are computed once per loaded set of results datasets and table options and kept in
:data:`MARKS` (:class:`MarksCache`), so that re-rendering a table, switching tabs, filtering or
sorting reuses them; loading another dataset is another set, computed once in its turn.
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
import threading
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Hashable, Sequence

import numpy as np
import pandas as pd

from spear_datasets.identity import CUSTOM_LABEL, data_label, is_spear_data
from spear_metrics.core.columns import Column, leaderboard_columns
from spear_metrics.core.registry import DEFAULT_BENCHMARK, benchmark_of_summary
from spear_metrics.core.summary import few_events, interval_text
from spear_metrics.reports.runs import ONSET_TIE_NOTE, results_tie_cells
from spear_metrics.results import PROTOCOL, Results, SourcePolicy, leaderboard_row

PUBLISHED_CSV = Path(__file__).resolve().parent / "data" / "spear_benchmark.csv"
ARROWS = {"higher": "↑", "lower": "↓", "closer_to_human": "≈human"}
CACHE = Path(tempfile.gettempdir()) / "spearbench-space-audio"
#: What this process may read (set by :func:`set_sources`, which :func:`spear_metrics.space.app.build_app`
#: calls; a module-level default for helpers).
POLICY = SourcePolicy()


#: Most entries :data:`MARKS` keeps (one per loaded set of results datasets and table options; the
#: least recently used goes first beyond it).
MAX_CACHED_MARKS = 32


class MarksCache:
    """Values computed from a loaded set of results datasets (the tie marks of a table, a
    benchmark tab's whole table), kept per set and per table options, least recently used out
    beyond ``size`` entries.

    An entry's key is ``(name, identity of each loaded dataset, options)``: a dataset's identity is
    its label and the identity of its loaded :class:`~spear_metrics.results.Results` object
    (:data:`POLICY` keeps one object per label while it stays loaded: a dataset loaded again, or a
    new policy, is a new object and so a new set). The cache holds no dataset: when a dataset is
    freed (e.g. a Hub dataset the policy no longer keeps), every entry computed from it is
    dropped before any other object can take its identity. One computation per key at a time: a
    second request for a key being computed waits for it instead of computing it again. The
    values are shared: callers must not change them (copy first).

    Attributes:
        size: most entries kept (>= 1).
        computed: how many times a value was computed (not found in the cache), for tests and
            ``scripts/bench_space_render.py``.
    """

    def __init__(self, size: int = MAX_CACHED_MARKS):
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size = size
        self.computed = 0
        self._entries: OrderedDict[tuple, Any] = OrderedDict()
        self._computing: dict[tuple, threading.Lock] = {}
        self._watched: set[int] = set()  # ids of the datasets whose freeing is watched
        self._freed: list[int] = []  # ids of freed datasets, appended by their finalizers
        self._lock = threading.Lock()

    @staticmethod
    def identity(loaded: Sequence[Any]) -> tuple[tuple[str, int], ...]:
        """``((label, id(dataset)), ...)`` of loaded results datasets, in their order."""
        return tuple((str(getattr(r, "source", "")), id(r)) for r in loaded)

    def __len__(self) -> int:
        with self._lock:
            self._purge()
            return len(self._entries)

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()

    def _purge(self) -> None:
        """Drop the entries of freed datasets (under the lock). A finalizer only appends to
        ``_freed`` (it may run in any thread, even while this one holds the lock); the ids are
        read here, before any lookup, so a new object that takes a freed one's id never meets
        its entries."""
        while self._freed:
            oid = self._freed.pop()
            self._watched.discard(oid)
            for key in [k for k in self._entries if any(i == oid for _, i in k[1])]:
                del self._entries[key]

    def _watch(self, loaded: Sequence[Any]) -> bool:
        """Watch the freeing of each dataset; ``False`` when one cannot be watched (an object
        without weak references: its id could be taken by another object, so nothing is kept)."""
        for r in loaded:
            if id(r) not in self._watched:
                try:
                    weakref.finalize(r, self._freed.append, id(r))
                except TypeError:
                    return False
                self._watched.add(id(r))
        return True

    def get(self, name: str, loaded: Sequence[Any], options: Hashable, compute: Callable[[], Any]) -> Any:
        """The value of ``(name, loaded, options)``: the kept one, else ``compute()`` (kept).

        Args:
            name: what is computed (e.g. ``"spear marks"`` or a tab's table function).
            loaded: the loaded results datasets the value is computed from.
            options: everything else the value depends on (hashable: the table's controls, keys...).
            compute: the computation (no arguments); an exception it raises is raised and nothing kept.
        """
        key = (name, self.identity(loaded), options)
        with self._lock:
            self._purge()
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
            gate = self._computing.setdefault(key, threading.Lock())
        with gate:
            with self._lock:
                self._purge()
                if key in self._entries:  # computed by the request this one waited for
                    self._entries.move_to_end(key)
                    return self._entries[key]
            try:
                value = compute()
            finally:
                with self._lock:
                    self._computing.pop(key, None)
            with self._lock:
                self._purge()
                self.computed += 1
                if not self._watch(loaded):
                    return value
                self._entries[key] = value
                while len(self._entries) > self.size:
                    self._entries.popitem(last=False)
        return value


#: The Space's tie marks and benchmark tables, per loaded set of results (:class:`MarksCache`).
MARKS = MarksCache()


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
    marks = spear_marks(spear, next((r for r in rows if r["model"] == "human" and r["source"] == "published"), None))
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


def spear_marks(spear: Sequence[Any], human: dict[str, Any] | None, *, cached: bool = True
                ) -> dict[str, dict[str, str]]:
    """The tie marks (★ best, ≈ tied, rank interval) of SPEAR results datasets on the leaderboard,
    ``{source: {key: mark}}`` (:func:`spear_metrics.reports.runs.results_tie_cells` over their
    per-sample rows, every key of :func:`columns`; ``human``: the published human row, what
    "closer to human" keys are judged against). ``cached``: computed once per set of datasets and
    human values (:data:`MARKS`); the value is shared, never to be changed."""
    keys = tuple(c.name for c in columns())

    def compute() -> dict[str, dict[str, str]]:
        return results_tie_cells(list(spear), list(keys), human=human)

    if not cached:
        return compute()
    target = tuple((k, (human or {}).get(k)) for k in keys)
    return MARKS.get("spear marks", spear, (keys, target), compute)


def benchmark_tabs() -> list[tuple[str, Any]]:
    """``(title, SpaceTab)`` of every registered benchmark that has a Space tab
    (:attr:`spear_metrics.core.benchmark.Benchmark.space_tab`), in registry order."""
    from spear_metrics.core.registry import benchmarks

    return [(b.title, b.hook("space_tab")) for b in benchmarks() if b.space_tab]


def benchmark_table(tab: Any, sources: list[str], *controls: str) -> pd.DataFrame:
    """A benchmark tab's table: its ``table`` function over the loaded results datasets (it keeps
    its own benchmark's), :func:`benchmark_frame`."""
    return benchmark_frame(tab, load_sources(sources)[0], *controls)


def benchmark_frame(tab: Any, loaded: Sequence[Any], *controls: str, cached: bool = True) -> pd.DataFrame:
    """A benchmark tab's table over loaded results datasets: ``tab.table(own, *controls)``
    (:class:`spear_metrics.core.benchmark.SpaceTab`; its tie marks included) over the datasets of
    the tab's benchmark (:func:`tab_results`: those its table keeps), numbers as the leaderboard
    shows them. ``cached``: computed once per set of those datasets and control values
    (:data:`MARKS`; the table is a function of those alone, so loading another benchmark's
    dataset computes nothing here); a copy is returned."""
    own = tab_results(tab, loaded)
    if not cached:
        return _benchmark_frame(tab, own, *controls)
    return MARKS.get(f"table {tab.table}", own, tuple(controls), lambda: _benchmark_frame(tab, own, *controls)).copy()


def tab_results(tab: Any, loaded: Sequence[Any]) -> list[Any]:
    """The loaded results datasets of the benchmark whose Space tab ``tab`` is
    (:func:`spear_metrics.core.registry.benchmark_of_summary` of each summary: the datasets each
    tab's table keeps), in their order; all of them for a tab no registered benchmark has."""
    from spear_metrics.core.registry import UnknownBenchmarkError, benchmarks

    name = next((b.name for b in benchmarks() if b.space_tab and b.hook("space_tab") is tab), None)
    if name is None:
        return list(loaded)
    out = []
    for r in loaded:
        try:
            if benchmark_of_summary(r.summary).name == name:
                out.append(r)
        except UnknownBenchmarkError:
            continue
    return out


def _benchmark_frame(tab: Any, loaded: list[Any], *controls: str) -> pd.DataFrame:
    from spear_metrics.core.benchmark import resolve

    frame = resolve(tab.table)(loaded, *controls)
    for c in frame.columns:  # numbers as the leaderboard shows them: 3 decimals, "-" = missing; labels as they are
        vals = list(frame[c])
        if any(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in vals):
            frame[c] = [interval_text(None if isinstance(v, float) and math.isnan(v) else v)
                        if v is None or (isinstance(v, (int, float, np.number)) and not isinstance(v, bool)) else v
                        for v in vals]
    return frame


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


def value_text(row: dict[str, Any], key: str) -> str:
    """A table cell: the value, and for a results dataset its 95 % interval and n
    (``742.055``; ``800.000 [700.000, 900.000] n=2``; ``800.000 n=1`` when no interval exists)."""
    v = row.get(key)
    if v is None:
        return "-"
    ci, n = row.get(f"{key}_ci95"), row.get(f"{key}_n")
    text = interval_text(v, ci)
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


#: the first column's cells of a gradio table, header and body (gradio draws the body's cells as
#: ``div[role=gridcell]``; both carry ``aria-colindex``, 1-based)
FIRST_COLUMN = ('th[aria-colindex="1"]', '[role="gridcell"][aria-colindex="1"]')


def _table_css(ids: tuple[str, ...]) -> str:
    """Headers wrap between words, never inside one ("open weig hts"), and the value columns stay
    narrow enough for more of them to fit (values wrap at their spaces), in each table of ``ids``.
    The first column (``model``) stays in place when the table is scrolled sideways, so a value far
    to the right still shows whose it is (gradio's own ``pinned_columns`` pins nothing in the
    gradio this Space runs on)."""
    def sel(*parts: str) -> str:
        return ", ".join(f"#{i} {p}" for i in ids for p in parts)

    return (f"{sel('th', 'th *', 'td', 'td *')} {{\n"
            "  word-break: normal !important; overflow-wrap: normal !important; hyphens: none !important;\n}\n"
            f"{sel('th', 'th *')} {{ white-space: normal !important; }}\n"
            f"{sel('td')} {{ max-width: 14em; }}\n"
            f"{sel(*FIRST_COLUMN)} {{ position: sticky !important; left: 0; z-index: 3; }}\n"
            # a body cell is transparent: it takes its row's (odd/even) colour to hide what scrolls under it
            f"{sel(FIRST_COLUMN[1])} {{ background: inherit; box-shadow: 1px 0 0 var(--border-color-primary); }}\n"
            f"{sel(FIRST_COLUMN[0])} {{ box-shadow: 1px 0 0 var(--border-color-primary); }}\n")




def _ow(v: bool | None) -> str:
    return "-" if v is None else ("yes" if v else "no")


#: the columns before the values: ``model`` first (pinned on the page, :func:`_table_css`), then
#: ``source`` (it tells a published row from a results dataset's row of the same model, e.g. two
#: "human" rows)
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


def marks_markdown() -> str:
    """What the marks beside a leaderboard value mean (every tab's table): ★ / ≈ / rank interval
    (:func:`spear_metrics.core.ties.tie_groups`, the rule as the rows were compared), the
    few-events mark (:func:`spear_metrics.core.summary.few_events`) and an onset rule in
    brackets (:data:`spear_metrics.reports.runs.ONSET_TIE_NOTE`)."""
    from spear_metrics.core.stats import ALPHA, FEW_EVENTS, SMALL_SAMPLE
    from spear_metrics.core.ties import TIE_RULE

    rule = TIE_RULE.format(unit="resampled unit", alpha=ALPHA, min_units=SMALL_SAMPLE)
    return "\n".join([
        "Marks beside a value (text, not colour; shown with two results datasets or more):",
        f"- {rule}. The unit is each benchmark's sampled unit (SPEAR: conversation; Full-Duplex-Bench: "
        "sample or conversation; SpeechRole: dialogue within its role; Dynamic-SUPERB: row within a task), "
        "and only the rows every dataset scored are compared.",
        f"- (few events: n = N): a rate or share computed from fewer than {FEW_EVENTS} events.",
        f"- {ONSET_TIE_NOTE}.",
    ])


def set_sources(sources: list[str]) -> list[str]:
    """Make ``sources`` (local folders, Hub ids) the start sources of :data:`POLICY`, what this
    process may read besides Hub ids; returns their public labels (what the page and the API
    show and take)."""
    global POLICY
    POLICY = SourcePolicy(list(sources))
    return POLICY.start_labels
