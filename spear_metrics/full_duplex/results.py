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

from typing import Any, Sequence

from spear_metrics.full_duplex import BENCHMARK, VERSION
from spear_metrics.results.validate import (
    ResultsError, check_benchmark_rows, check_key_values, check_recomputed, is_count, short_repr,
)

NAME = BENCHMARK.name
#: metric versions whose results this code reads
KNOWN_VERSIONS = frozenset({VERSION})
REQUIRED_SUMMARY_KEYS = ("n_samples", "n_scored", "n_failed", "metrics", "metric_versions", "task")


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
        if not is_count(summary[k]):
            raise ResultsError(f"{where}: summary.json {k!r} is not a count (a non-negative integer): {short_repr(summary[k])}")
    if summary["n_scored"] + summary["n_failed"] != summary["n_samples"]:
        raise ResultsError(f"{where}: summary.json n_scored + n_failed != n_samples")
    ver = (summary.get("metric_versions") or {}).get(NAME) if isinstance(summary.get("metric_versions"), dict) else None
    if str(ver) not in KNOWN_VERSIONS:
        raise ResultsError(f"{where}: unknown metric version {NAME}={ver!r} (known: {', '.join(sorted(KNOWN_VERSIONS))})")
    if summary["task"] not in TASK_KEYS:
        raise ResultsError(f"{where}: summary.json task {short_repr(summary['task'])} is not one of {', '.join(TASK_KEYS)}")
    for k in _task_keys(summary):
        if k not in summary:
            raise ResultsError(f"{where}: summary.json is missing column {k!r} (task {summary['task']})")
    check_key_values(summary, _task_keys(summary), where=where)


def validate_rows(summary: dict[str, Any], rows: Sequence[dict[str, Any]], *, where: str = "results") -> None:
    """Check the per-sample rows against themselves and the summary's counts.

    Raises:
        ResultsError: a missing column, a bad or repeated ``row`` id, an unknown status, a
            non-number under a task key, counts that do not match.
    """
    check_benchmark_rows(summary, rows, _task_keys(summary), where=where)


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
    check_recomputed(summary, got, _task_keys(summary), where=where)


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


def tie_spec(task: str):
    """The tie groups of a task's leaderboard (:class:`spear_metrics.reports.runs.TieSpec`): rows
    paired by sample ``id``, samples resampled one by one, each key's direction in ``task``
    (:func:`spear_metrics.full_duplex.definition.key_better`: ``tor`` lower for pause handling and
    backchannel, higher for turn-taking and interruption; ``backchannel_frequency`` is "closer to
    human" and has no human value here, so no tie group)."""
    from spear_metrics.full_duplex.definition import key_better
    from spear_metrics.reports.runs import TieSpec

    return TieSpec(row_id=lambda r: str(r.get("id")), better=lambda k: key_better(task, k), unit="sample",
                   columns=("id", "status"))


def leaderboard_frame(results: Sequence[Any]):
    """The Space's Full-Duplex-Bench table: one row per loaded FDB results dataset
    (:class:`spear_metrics.results.Results` whose summary is an FDB task run), columns ``model``,
    ``task``, ``samples``, then each FDB key with its interval; ``-`` = missing or not a key of
    that task. Other results are left out.

    Among the datasets of one task, each key's cell also carries its tie mark and rank interval
    (``★`` best, ``≈`` tied with the best: :func:`spear_metrics.reports.runs.rows_tie_cells` over
    the samples every dataset scored, :func:`tie_spec`) and a take-over rate from fewer than 10
    samples its few-events mark (:func:`spear_metrics.core.summary.few_events`)."""
    import pandas as pd

    from spear_metrics.core.summary import interval_text
    from spear_metrics.full_duplex.definition import KEYS, TASK_KEYS
    from spear_metrics.reports.runs import marked, results_rows, rows_tie_cells

    names = [k.name for k in KEYS]
    mine = [r for r in results if r.summary.get("metrics") == [NAME] and "benchmark" not in r.summary]
    marks: dict[str, dict[str, str]] = {}
    for task in dict.fromkeys(r.summary.get("task") for r in mine):
        group = [r for r in mine if r.summary.get("task") == task]
        if task in TASK_KEYS and len(group) >= 2:
            spec = tie_spec(task)
            marks.update(rows_tie_cells(results_rows(group, TASK_KEYS[task], spec), TASK_KEYS[task], spec=spec))
    data = []
    for r in mine:
        s = r.summary
        cells = [marked(interval_text(s.get(k), s.get(f"{k}_ci95"), digits=3), marks.get(r.source, {}).get(k, ""), s, k)
                 for k in names]
        data.append([r.model, s.get("task") or "-", s.get("n_samples", "-"), *cells, r.source])
    return pd.DataFrame(data, columns=["model", "task", "samples", *names, "source"])
