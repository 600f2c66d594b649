"""Full-Duplex-Bench runs as results datasets: what ``push-results`` checks and writes for a
``spearbench fdb score --task`` folder, and the table of the leaderboard Space's FDB tab.

A run is recognised by ``summary.json`` ``"metrics": ["full_duplex"]`` (the registry's
:func:`~spear_metrics.core.registry.benchmark_of_summary`); :mod:`spear_metrics.results.validate`
hands it to the checks below (its descriptor's ``results``):

- the summary: counts, ``metrics == ["full_duplex"]`` with a version this code reads, ``task`` one
  of FDB v1.0's four, each key of the task (:data:`~spear_metrics.full_duplex.definition.TASK_KEYS`)
  present as a number or null, ``<key>_ci95`` an interval ``[lo, hi]`` or null, ``<key>_n`` a count;
- the rows (one per sample): ``row`` exactly ``0..n-1``, ``id``, ``status`` ``ok``/``failed``, the
  task's values numbers or null, the summary's counts;
- the summary recomputed from the ``ok`` rows (:func:`spear_metrics.full_duplex.definition.aggregate`:
  point values and ``<key>_n``; intervals depend on the resampling and are not recomputed): an
  edited ``summary.json`` or row is refused.

A run of the model-outputs release (``fdb score --release``, its ten leaderboard columns) is not
a results dataset of this kind: publish the task runs. No torch, no model: the light install
reads these.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from spear_metrics.full_duplex import BENCHMARK, VERSION
from spear_metrics.results.validate import ResultsError, interval_base, is_number

NAME = BENCHMARK.name
#: metric versions whose results this code reads
KNOWN_VERSIONS = frozenset({VERSION})
REQUIRED_SUMMARY_KEYS = ("n_samples", "n_scored", "n_failed", "metrics", "metric_versions", "task")
#: tolerance of a recomputed value
REL_TOL, ABS_TOL = 1e-6, 1e-9


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _task_keys(summary: dict[str, Any]) -> tuple[str, ...]:
    from spear_metrics.full_duplex.definition import TASK_KEYS

    return TASK_KEYS.get(summary.get("task"), ())


def validate_summary(summary: Any, *, where: str = "results") -> None:
    """Check an FDB task run's ``summary.json`` alone.

    Raises:
        ResultsError: one line naming the first problem.
    """
    from spear_metrics.full_duplex.definition import TASK_KEYS

    if not isinstance(summary, dict) or summary.get("metrics") != [NAME]:
        raise ResultsError(f"{where}: not a Full-Duplex-Bench summary (metrics [{NAME!r}])")
    for k in REQUIRED_SUMMARY_KEYS:
        if k not in summary:
            what = " (a release run: publish its task runs, spearbench fdb score --task)" if k == "task" else ""
            raise ResultsError(f"{where}: summary.json is missing column {k!r}{what}")
    for k in ("n_samples", "n_scored", "n_failed"):
        if not _count(summary[k]):
            raise ResultsError(f"{where}: summary.json {k!r} is not a count (a non-negative integer): {_short(summary[k])}")
    if summary["n_scored"] + summary["n_failed"] != summary["n_samples"]:
        raise ResultsError(f"{where}: summary.json n_scored + n_failed != n_samples")
    ver = (summary.get("metric_versions") or {}).get(NAME) if isinstance(summary.get("metric_versions"), dict) else None
    if str(ver) not in KNOWN_VERSIONS:
        raise ResultsError(f"{where}: unknown metric version {NAME}={ver!r} (known: {', '.join(sorted(KNOWN_VERSIONS))})")
    if summary["task"] not in TASK_KEYS:
        raise ResultsError(f"{where}: summary.json task {_short(summary['task'])} is not one of {', '.join(TASK_KEYS)}")
    for k in _task_keys(summary):
        if k not in summary:
            raise ResultsError(f"{where}: summary.json is missing column {k!r} (task {summary['task']})")
    for key, v in summary.items():
        base = interval_base(key, summary)
        if base is not None and base in _task_keys(summary):
            if key.endswith("_ci95") and v is not None and not (
                    isinstance(v, list) and len(v) == 2 and all(is_number(x) for x in v) and v[0] <= v[1]):
                raise ResultsError(f"{where}: summary.json {key!r} is not an interval [lo, hi] or null: {_short(v)}")
            if key.endswith("_n") and not _count(v):
                raise ResultsError(f"{where}: summary.json {key!r} is not a count (a non-negative integer): {_short(v)}")
        elif key in _task_keys(summary) and v is not None and not is_number(v):
            raise ResultsError(f"{where}: summary.json {key!r} is not numeric: {_short(v)}")


def validate_rows(summary: dict[str, Any], rows: Sequence[dict[str, Any]], *, where: str = "results") -> None:
    """Check the per-sample rows against themselves and the summary's counts.

    Raises:
        ResultsError: a missing column, a bad or repeated ``row`` id, an unknown status, a
            non-number under a task key, counts that do not match.
    """
    if not rows:
        raise ResultsError(f"{where}: per_sample.jsonl has no rows")
    keys = _task_keys(summary)
    seen: set[int] = set()
    n_ok = 0
    for i, r in enumerate(rows):
        for c in ("row", "id", "status"):
            if c not in r:
                raise ResultsError(f"{where}: per_sample line {i + 1} is missing column {c!r}")
        rid = r["row"]
        if not _count(rid) or rid in seen:
            raise ResultsError(f"{where}: per_sample line {i + 1}: row id {_short(rid)} is not a new integer >= 0")
        seen.add(rid)
        if r["status"] not in ("ok", "failed"):
            raise ResultsError(f"{where}: row {rid} status is not 'ok' or 'failed': {_short(r['status'])}")
        for k in keys:
            v = r.get(k)
            if v is not None and not is_number(v):
                raise ResultsError(f"{where}: row {rid} value {k!r} is not numeric: {_short(v)}")
        n_ok += r["status"] == "ok"
    n = len(rows)
    if summary.get("n_samples") != n or seen != set(range(n)):
        raise ResultsError(f"{where}: rows must be 0..{n - 1}, each once, and n_samples {summary.get('n_samples')} = {n}")
    if summary.get("n_scored") != n_ok or summary.get("n_failed") != n - n_ok:
        raise ResultsError(f"{where}: summary.json counts n_scored={summary.get('n_scored')}, n_failed="
                           f"{summary.get('n_failed')} but the rows hold {n_ok} ok and {n - n_ok} failed rows")


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=ABS_TOL)


def check_summary_values(summary: dict[str, Any], rows: Sequence[dict[str, Any]], *, where: str = "results",
                         use_options: bool = False) -> None:
    """Recompute each task key and its ``<key>_n`` from the ``ok`` rows
    (:func:`spear_metrics.full_duplex.definition.aggregate`) and compare (rel 1e-6).

    Raises:
        ResultsError: a value that differs from its recomputation.
    """
    from spear_metrics.full_duplex.definition import aggregate

    validate_summary(summary, where=where)
    validate_rows(summary, rows, where=where)
    ok = [r for r in sorted(rows, key=lambda r: r["row"]) if r["status"] == "ok"]
    got = aggregate(summary["task"], ok, n_resamples=0)
    for k in _task_keys(summary):
        for name in (k, f"{k}_n"):
            if name in summary and not _same(summary.get(name), got.get(name)):
                raise ResultsError(f"{where}: summary.json {name!r} is {summary.get(name)!r} but its rows give "
                                   f"{got.get(name)!r} (edited results? a summary must be the one its rows were "
                                   "scored into)")


def card_text(summary: dict[str, Any], *, model_name: str, split: str, n_rows: int, **_: Any) -> str:
    """The dataset card of an FDB results dataset: the ``spearbench:`` block (benchmark, task,
    model, reading of the reply, versions, counts) and the task's values with their intervals."""
    from spear_metrics.core.summary import interval_text
    from spear_metrics.results.write import results_card

    info = {
        "benchmark": NAME,
        "protocol": summary.get("protocol"),
        "task": summary.get("task"),
        "model_name": model_name,
        "compat": summary.get("compat"),
        "metric_versions": dict(summary.get("metric_versions") or {}),
        "spearbench_version": summary.get("spearbench_version"),
        "n_samples": summary.get("n_samples"),
        "n_scored": summary.get("n_scored"),
        "n_failed": summary.get("n_failed"),
    }
    lines = []
    for k in _task_keys(summary):
        cell = interval_text(summary.get(k), summary.get(f"{k}_ci95"), digits=4)
        note = summary.get(f"{k.split('_')[0]}_note") or ""
        lines.append(f"| `{k}` | {cell} | {summary.get(f'{k}_n', '-')} | {note} |")
    body = "\n".join([
        f"# Full-Duplex-Bench results: {model_name}",
        "",
        f"**{model_name}** scored on Full-Duplex-Bench v1.0 task `{summary.get('task')}` by `spearbench fdb score` "
        f"(spearbench {summary.get('spearbench_version')}; reading of the reply: {summary.get('reply_reading') or '-'}).",
        "",
        f"- samples: {summary.get('n_samples')} (scored {summary.get('n_scored')}, failed {summary.get('n_failed')}); "
        f"per-sample table: `data/{split}-*.parquet` ({n_rows} rows; null = no value)",
        "- values with their 95 % bootstrap interval over samples [lo, hi]; `n` = samples with a value",
        "",
        "| key | value [95 % interval] | n | note |",
        "|---|---|---|---|",
        *lines,
        "",
        "Load with `datasets.load_dataset(<this repo or folder>)`.",
        "",
    ])
    return results_card(info, pretty_name=f"SPEARBench Full-Duplex-Bench results: {model_name} ({summary.get('task')})",
                        tags=["spearbench", "full-duplex-bench", "evaluation-results"], split=split, body=body)


def leaderboard_frame(results: Sequence[Any]):
    """The Space's Full-Duplex-Bench table: one row per loaded FDB results dataset
    (:class:`spear_metrics.results.Results` whose summary is an FDB task run), columns ``model``,
    ``task``, ``samples``, then each FDB key with its interval; ``-`` = missing or not a key of
    that task. Other results are left out."""
    import pandas as pd

    from spear_metrics.full_duplex.definition import KEYS

    from spear_metrics.core.summary import interval_text

    def cell(summary: dict[str, Any], key: str) -> str:
        return interval_text(summary.get(key), summary.get(f"{key}_ci95"), digits=3)

    names = [k.name for k in KEYS]
    data = []
    for r in results:
        s = r.summary
        if s.get("metrics") != [NAME] or "benchmark" in s:
            continue
        data.append([r.model, s.get("task") or "-", s.get("n_samples", "-"), *[cell(s, k) for k in names], r.source])
    return pd.DataFrame(data, columns=["model", "task", "samples", *names, "source"])
