"""THE summary writer: ``summary.json`` of a scored run.

Flat: the benchmark keys named exactly as in the published leaderboard CSV
(``spear_benchmark.csv``), then ``n_samples``, ``n_scored``, ``n_failed``, ``n_processes``,
the metrics and their versions, the models behind each key, the options of each dimension
in effect (``options``) and the package version. No run
timings (those go to ``run_info.json``), so a resumed run writes the same file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from spear_metrics.core.records import SampleResult, write_json_atomic


def __getattr__(name: str):
    # ``BENCHMARK_KEYS``: the published leaderboard keys in the published table's column order,
    # derived from the dimensions' MetricKeys (spear_metrics.core.columns.benchmark_keys)
    if name == "BENCHMARK_KEYS":
        from spear_metrics.core.columns import benchmark_keys

        return benchmark_keys()
    raise AttributeError(name)


def spearbench_version() -> str:
    """The installed ``spearbench`` distribution's version (what every ``summary.json`` records),
    ``"0+unknown"`` when the package is not installed (a bare checkout on ``PYTHONPATH``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("spearbench")
    except PackageNotFoundError:
        return "0+unknown"


def build_summary(
    *,
    aggregates: dict[str, Any],
    results: Sequence[SampleResult],
    metrics: Sequence[str],
    versions: dict[str, str],
    models: dict[str, str],
    options: dict[str, dict[str, Any]] | None = None,
    n_processes: int = 1,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The summary dict: aggregates first, then counts and provenance.

    ``options``: per dimension, every declared option with the value in effect
    (:meth:`spear_metrics.core.dimension.Dimension.options_in_effect`), written as ``options``."""
    n_failed = sum(1 for r in results if not r.ok)
    summary: dict[str, Any] = dict(aggregates)
    summary.update(
        {
            "n_samples": len(results),
            "n_scored": len(results) - n_failed,
            "n_failed": n_failed,
            "n_processes": int(n_processes),
            "metrics": list(metrics),
            "metric_versions": dict(versions),
            "models": dict(models),
            "options": {k: dict(v) for k, v in (options or {}).items()},
            "spearbench_version": spearbench_version(),
        }
    )
    if extra:
        summary.update(extra)
    return summary


def write_summary(out_dir: str | os.PathLike, summary: dict[str, Any]) -> Path:
    """Write ``out_dir/summary.json`` atomically (NaN/inf -> ``null``)."""
    return write_json_atomic(Path(out_dir) / "summary.json", summary)


#: why a key has no unit at all (``<key>_n`` = 0), where the reason follows from its definition
EMPTY_REASONS: dict[str, str] = {
    "interrupted_time_ms": "n = 0: no row has an answer_start_time (answers placed at the question end, "
                           "the published '-' of half-duplex systems)",
    "interruptions_%": "n = 0: no row has an answer_start_time (answers placed at the question end, "
                       "the published '-' of half-duplex systems)",
    "latency_ms_speech": "n = 0: no answer holds speech after the skip point",
}


#: keys whose note is written under another name than ``<key>_note``
NOTE_KEYS: dict[str, str] = {"human_likeness_auroc": "human_likeness_note"}


def null_reason(summary: dict[str, Any], key: str, dimension: str | None = None) -> str:
    """Why ``summary[key]`` is null, in words: its ``<key>_note`` (or the one :data:`NOTE_KEYS`
    names, or ``<stem>_note``: ``WER_note`` for every ``WER_*`` key), else the dimension's
    ``<dimension>_note``, else, when no unit entered it (``<key>_n`` = 0), the reason its
    definition gives (:data:`EMPTY_REASONS`), else that no scored row has a value. THE reason the
    console, the report and the Space give."""
    for k in (f"{key}_note", NOTE_KEYS.get(key), f"{key.split('_')[0]}_note", f"{dimension}_note" if dimension else None):
        if k and summary.get(k):
            return str(summary[k])
    if summary.get(f"{key}_n") == 0:
        return EMPTY_REASONS.get(key, "n = 0: no scored row has a value")
    return "no scored row has a value"



def is_rate(key: str) -> bool:
    """Whether summary key ``key`` is a percentage or a rate: its declared unit is ``%`` or
    ``fraction`` (a share of rows: FDB's take-over rate ``tor``, v1.5's tag shares, Dynamic-SUPERB's
    ``judge_accuracy``; :func:`spear_metrics.core.columns.find_column`), else its name ends in
    ``%``, ``_rate`` or ``_share``."""
    from spear_metrics.core.columns import find_column

    col = find_column(key)
    if col is not None:
        return col.unit.strip() in ("%", "fraction")
    return key.endswith(("%", "_rate", "_share"))


def few_events(summary: dict[str, Any], key: str, *, rate: bool | None = None) -> str:
    """The mark of a percentage or rate computed from fewer than
    :data:`spear_metrics.core.stats.FEW_EVENTS` events (its ``<key>_n``: the rows, pairs or
    answers it counts over), e.g. ``"(few events: n = 4)"``; ``""`` otherwise. THE rule the
    console, the report, the leaderboards and the Space apply. ``rate``: whether ``key`` is a
    percentage or rate, for a key under a name of its own (FDB's release column
    ``pause_tor_synthetic`` is the ``tor`` of one category); ``None``: :func:`is_rate`."""
    from spear_metrics.core.stats import FEW_EVENTS

    n = summary.get(f"{key}_n")
    if summary.get(key) is None or not isinstance(n, int) or isinstance(n, bool) or not 0 < n < FEW_EVENTS:
        return ""
    return f"(few events: n = {n})" if (is_rate(key) if rate is None else rate) else ""


def interval_unit(summary: dict[str, Any]) -> str:
    """What the run's intervals resample, as shown beside them: ``"by conversation"`` or
    ``"by row"`` (``summary["bootstrap"]["unit"]``; older summaries resampled rows)."""
    unit = (summary.get("bootstrap") or {}).get("unit") or "row"
    return "by conversation" if unit == "conversation" else "by row"


def interval_text(value: Any, ci: Any = None, *, digits: int = 3) -> str:
    """A summary value with its 95 % interval for a table cell: ``"0.750 [0.500, 1.000]"``,
    ``"0.750"`` without an interval (``ci`` not a ``[lo, hi]`` pair), ``"-"`` when ``value`` is
    null. THE formatter of a value with its interval in plain text: the Space's tables (the SPEAR
    leaderboard and the benchmarks' tabs), the results cards and the console."""
    if value is None:
        return "-"
    text = f"{float(value):.{digits}f}"
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(isinstance(x, (int, float)) for x in ci):
        text += f" [{float(ci[0]):.{digits}f}, {float(ci[1]):.{digits}f}]"
    return text
