"""Dynamic-SUPERB runs as results datasets: the checks ``push-results`` and the Space apply to a
run whose ``summary.json`` says ``"benchmark": "dynamic_superb"`` (dispatched by
its descriptor's ``results``), its dataset card, and its leaderboard table.

- :func:`validate_summary`: the summary's shape (counts, tasks, each task's metric and values:
  numbers or null, intervals ``[lo, hi]``, ``<key>_n`` counts, ``na_rate`` in [0, 1]);
- :func:`validate_rows`: rows ``0..n-1`` once each, ``ok``/``failed``, counts that match, every
  row's instance in the summary;
- :func:`check_summary_values`: every task's value, ``<key>_n`` and ``na_rate`` recomputed from
  its rows by the same code that scored it (:func:`spear_metrics.dynamic_superb.scoring.aggregate_task`):
  an edited summary or row is refused;
- :func:`card_text`: the results dataset's README; :func:`leaderboard_frame`: one row per loaded
  Dynamic-SUPERB results dataset, one column per task (the Space's Dynamic-SUPERB table).

Imports no torch and no model library (the light install reads results).
"""

from __future__ import annotations

from typing import Any, Sequence

from spear_metrics.results.validate import ResultsError, check_counts, is_count, is_number, same_value, short_repr

BENCHMARK = "dynamic_superb"
#: metric-definition versions whose results this code reads
KNOWN_VERSIONS = frozenset({"1", "2", "3"})
#: versions whose ``llm_classification`` value is upstream's per-row rule (version 2 on)
UPSTREAM_CLASSIFICATION_VERSIONS = frozenset({"2", "3"})
#: versions whose ``word_error_rate``, ``phoneme_error_rate`` and ``pos_estimation`` values are
#: upstream's per-row rule (version 3 on; null before)
UPSTREAM_ROW_RATE_VERSIONS = frozenset({"3"})


def computes_published(metric: Any, version: Any) -> bool:
    """Whether results of metrics ``version`` hold a value under the published key ``metric``."""
    from spear_metrics.dynamic_superb.metrics import UPSTREAM_ROW_RATES

    if not isinstance(metric, str):  # a list or an object is no function name (nor hashable)
        return False
    if metric == "llm_classification":
        return str(version) in UPSTREAM_CLASSIFICATION_VERSIONS
    return metric in UPSTREAM_ROW_RATES and str(version) in UPSTREAM_ROW_RATE_VERSIONS


def validate_summary(summary: Any, *, where: str = "results") -> None:
    """Check a Dynamic-SUPERB ``summary.json`` alone.

    Raises:
        ResultsError: one line naming the first problem.
    """
    from spear_metrics.dynamic_superb.metrics import PROJECT_METRICS

    if not isinstance(summary, dict) or summary.get("benchmark") != BENCHMARK:
        raise ResultsError(f"{where}: not a Dynamic-SUPERB summary (benchmark {BENCHMARK!r})")
    if str(summary.get("metrics_version")) not in KNOWN_VERSIONS:
        raise ResultsError(f"{where}: unknown Dynamic-SUPERB metrics_version {summary.get('metrics_version')!r} "
                           f"(known: {', '.join(sorted(KNOWN_VERSIONS))})")
    check_counts(summary, where=where)
    tasks = summary.get("tasks")
    if not isinstance(tasks, dict) or not tasks:
        raise ResultsError(f"{where}: summary.json has no tasks")
    for inst, t in tasks.items():
        if not isinstance(t, dict):
            raise ResultsError(f"{where}: task {inst} is not an object")
        for k in ("n_rows", "n_scored", "n_failed"):
            if not is_count(t.get(k)):
                raise ResultsError(f"{where}: task {inst} {k!r} is not a count: {short_repr(t.get(k))}")
        na = t.get("na_rate")
        if na is not None and not (is_number(na) and 0 <= na <= 1):
            raise ResultsError(f"{where}: task {inst} na_rate is not a share in [0, 1]: {short_repr(na)}")
        metric = t.get("metric")
        if metric is not None and not isinstance(metric, str):  # every later reading uses it as a key
            raise ResultsError(f"{where}: task {inst} metric is not a function name: {short_repr(metric)}")
        spec = PROJECT_METRICS.get(metric) if isinstance(metric, str) else None
        computed = computes_published(metric, summary.get("metrics_version"))
        if isinstance(metric, str) and t.get(metric) is not None:
            if not computed:
                raise ResultsError(f"{where}: task {inst} has a value under upstream's key {metric!r}, which this code "
                                   "never computes (its definition is not public)")
            if not (is_number(t[metric]) and 0 <= t[metric] <= 1):
                raise ResultsError(f"{where}: task {inst} {metric!r} is not a share in [0, 1]: {short_repr(t[metric])}")
        if spec is None:
            continue
        v, ci, n = t.get(spec.key), t.get(f"{spec.key}_ci95"), t.get(f"{spec.key}_n")
        if v is not None and not is_number(v):
            raise ResultsError(f"{where}: task {inst} {spec.key!r} is not numeric: {short_repr(v)}")
        if ci is not None and not (isinstance(ci, list) and len(ci) == 2 and all(is_number(x) for x in ci) and ci[0] <= ci[1]):
            raise ResultsError(f"{where}: task {inst} {spec.key}_ci95 is not an interval [lo, hi] or null: {short_repr(ci)}")
        if n is not None and not is_count(n):
            raise ResultsError(f"{where}: task {inst} {spec.key}_n is not a count: {short_repr(n)}")


def validate_rows(summary: dict[str, Any], rows: Sequence[dict[str, Any]], *, where: str = "results") -> None:
    """Check the per-sample rows against themselves and the summary's counts.

    Raises:
        ResultsError: a missing column, a bad or repeated ``row`` id, an unknown status or
            instance, counts that do not match.
    """
    if not rows:
        raise ResultsError(f"{where}: per_sample.jsonl has no rows")
    seen: set[int] = set()
    n_ok = 0
    tasks = summary.get("tasks") or {}
    for i, r in enumerate(rows):
        for c in ("row", "status", "instance", "file"):
            if c not in r:
                raise ResultsError(f"{where}: per_sample line {i + 1} is missing column {c!r}")
        rid = r["row"]
        if not is_count(rid) or rid in seen:
            raise ResultsError(f"{where}: per_sample line {i + 1}: row id {short_repr(rid)} is not a new integer >= 0")
        seen.add(rid)
        if r["status"] not in ("ok", "failed"):
            raise ResultsError(f"{where}: row {rid} status is not 'ok' or 'failed': {short_repr(r['status'])}")
        if r["instance"] not in tasks:
            raise ResultsError(f"{where}: row {rid} names instance {short_repr(r['instance'])}, which the summary lacks")
        n_ok += r["status"] == "ok"
    n = len(rows)
    if summary.get("n_samples") != n or seen != set(range(n)):
        raise ResultsError(f"{where}: rows must be 0..{n - 1}, each once, and n_samples {summary.get('n_samples')} = {n}")
    if summary.get("n_scored") != n_ok:
        raise ResultsError(f"{where}: summary.json n_scored={summary.get('n_scored')} but the rows hold {n_ok} ok rows")


def check_summary_values(summary: dict[str, Any], rows: Sequence[dict[str, Any]], *, where: str = "results",
                         use_options: bool = False) -> None:
    """Recompute each task's value, ``<key>_n`` and ``na_rate`` from its rows and compare.

    Raises:
        ResultsError: a value that differs from its recomputation (rel 1e-6).
    """
    from spear_metrics.dynamic_superb.metrics import PROJECT_METRICS, UPSTREAM_READABLE, UPSTREAM_ROW_RATES
    from spear_metrics.dynamic_superb.scoring import aggregate_task

    by_task: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: r["row"]):
        by_task.setdefault(r["instance"], []).append(r)
    for inst, t in (summary.get("tasks") or {}).items():
        spec = PROJECT_METRICS.get(t.get("metric") or "")
        if spec is None and (t.get("metric") not in UPSTREAM_ROW_RATES or t.get(t["metric"]) is None):
            continue
        got = aggregate_task(t["metric"], by_task.get(inst, []), int(t.get("n_rows") or 0), n_resamples=0)
        keys = [spec.key, f"{spec.key}_n", "na_rate"] if spec is not None else ["na_rate"]
        if t["metric"] in UPSTREAM_READABLE and t.get(t["metric"]) is not None:
            keys += [t["metric"], f"{t['metric']}_n"]
        for k in keys:
            if not same_value(t.get(k), got.get(k)):
                raise ResultsError(f"{where}: task {inst} {k!r} is {t.get(k)!r} but its rows give {got.get(k)!r} "
                                   "(edited results? a summary must be the one its rows were scored into)")


def card_text(summary: dict[str, Any], *, model_name: str, inference_mode: str | None, open_weights: bool | None,
              split: str, n_rows: int, audio_cols: Sequence[str] = (), has_report: bool = False) -> str:
    """The results dataset's README (YAML header with a ``spearbench:`` block, a table per task)."""
    from huggingface_hub import DatasetCard, DatasetCardData

    from spear_metrics.dynamic_superb.metrics import PROJECT_METRICS

    judge = summary.get("judge") or {}
    info = {"benchmark": BENCHMARK, "model_name": model_name, "inference_mode": inference_mode,
            "open_weights": open_weights, "protocol": summary.get("protocol"), "split": split,
            "metrics_version": summary.get("metrics_version"), "judge_model": judge.get("model"),
            "judge_prompt_version": judge.get("prompt_version"), "spearbench_version": summary.get("spearbench_version"),
            "n_samples": summary.get("n_samples"), "n_scored": summary.get("n_scored"),
            "n_failed": summary.get("n_failed"), "n_tasks": len(summary.get("tasks") or {})}
    data = DatasetCardData(pretty_name=f"SPEARBench Dynamic-SUPERB results: {model_name}",
                           tags=["spearbench", "dynamic-superb", "evaluation-results"],
                           configs=[{"config_name": "default",
                                     "data_files": [{"split": split, "path": f"data/{split}-*.parquet"}]}],
                           spearbench=info)
    lines = []
    for inst, t in sorted((summary.get("tasks") or {}).items()):
        spec = PROJECT_METRICS.get(t.get("metric") or "")
        if spec is None:
            up = t.get(t.get("metric") or "")
            na = t.get("na_rate")
            lines.append(f"| {inst} | {t.get('metric') or '-'} | {'-' if up is None else f'{up:.4f}'} | - | - | "
                         f"{t.get('n_rows')} | {'-' if na is None else f'{na:.3f}'} | "
                         f"{(t.get('value_note') or '').replace('|', '/')} |")
            continue
        v, ci = t.get(spec.key), t.get(f"{spec.key}_ci95")
        cell = "-" if v is None else f"{v:.4f}" + (f" [{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "")
        up = t.get(t["metric"])
        up_cell = "-" if up is None else f"{up:.4f}"
        na = t.get("na_rate")
        lines.append(f"| {inst} | {t['metric']} | {up_cell} | `{spec.key}` | {cell} | {t.get('n_rows')} | "
                     f"{'-' if na is None else f'{na:.3f}'} | {(t.get(f'{spec.key}_note') or '').replace('|', '/')} |")
    body = "\n".join([
        f"# SPEARBench Dynamic-SUPERB results: {model_name}",
        "",
        f"Scores of **{model_name}** on Dynamic-SUPERB Phase-2 task instances, written by `spearbench dsuperb score` "
        f"and `spearbench push-results` (spearbench {summary.get('spearbench_version')}).",
        "",
        f"- rows: {summary.get('n_samples')} (scored {summary.get('n_scored')}, failed {summary.get('n_failed')}); "
        f"judge: {judge.get('model') or 'none'} (prompt {judge.get('prompt_version')})",
        "- `llm_classification` (published key) is upstream's public per-row rule (its judge prompt, the row's label, "
        "temperature 0, 512 tokens, `result: yes` -> 1.0), averaged over the task's rows; `word_error_rate`, "
        "`phoneme_error_rate` and `pos_estimation` (published keys) are upstream's public per-row rule (punctuation "
        "removed, speech_metrics' WER, the row's max(0, 1 - WER): higher is better), averaged over the task's rows; "
        "the other values are SPEARBench's project keys (`judge_accuracy`, `WER`, `CER`, `PER`, `MER`, `BLEU`, "
        "`pearson_r`): the bodies of upstream's other metric functions are not public, so their keys are null with "
        "the reason",
        f"- per-row table: `data/{split}-*.parquet` ({n_rows} rows); summary: `summary.json`",
        "",
        "| instance | upstream metric | upstream value | project key | value [95 % CI] | rows | na_rate | note |",
        "|---|---|---|---|---|---|---|---|",
        *lines,
        "",
    ])
    return DatasetCard.from_template(data, template_str="---\n{{ card_data }}\n---\n\n" + body).content


#: the task keys whose value is the mean of the per-row column of the same name (the error rates
#: are ratios of sums; BLEU and Pearson's r are whole-set statistics: no tie group)
_ROW_MEAN_KEYS = ("judge_accuracy", "llm_classification", "word_error_rate", "phoneme_error_rate", "pos_estimation")


def _better(key: str) -> str | None:
    from spear_metrics.dynamic_superb.metrics import KEY_INFO, UPSTREAM_READABLE

    return "higher" if key in UPSTREAM_READABLE else (KEY_INFO[key].better if key in KEY_INFO else None)


def tie_specs():
    """The tie groups of the Dynamic-SUPERB table (:class:`spear_metrics.reports.runs.TieSpec`),
    ``(per task, overall)``: a task's rows paired by ``(instance, file)`` and resampled one by one
    within the instance, each row's share of the task value as
    :func:`spear_metrics.dynamic_superb.scoring.aggregate_task` computes it (a 0/1 verdict, whose
    mean is the value; an error rate's ``(edits, reference tokens)``, missing counting 0 as there,
    whose ratio of sums is the value; BLEU and Pearson's r are whole-set statistics and have none);
    the overall means paired by instance, instances resampled (each task's value one unit, as the
    overall's interval)."""
    from spear_metrics.dynamic_superb.metrics import PROJECT_METRICS
    from spear_metrics.reports.runs import TieSpec

    rates = tuple(m.key for m in PROJECT_METRICS.values() if m.kind == "error_rate")

    def row_value(row: dict[str, Any], key: str) -> Any:
        if key in _ROW_MEAN_KEYS:
            return row.get(key)
        return (row.get(f"{key}_edits") or 0, row.get(f"{key}_ref_tokens") or 0) if key in rates else None

    task = TieSpec(row_id=lambda r: (r.get("instance"), r.get("file")), better=_better, unit="row", value=row_value,
                   columns=("instance", "file", "status", *_ROW_MEAN_KEYS,
                            *(f"{k}_{x}" for k in rates for x in ("edits", "ref_tokens"))))
    overall = TieSpec(row_id=lambda r: r.get("instance"), better=_better, unit="instance")
    return task, overall


def leaderboard_frame(results: Sequence[Any]):
    """One row per loaded Dynamic-SUPERB results dataset (``Results`` of
    :mod:`spear_metrics.results.load` whose summary is a Dynamic-SUPERB one): ``model``,
    ``source``, ``judge``, then per task ``<instance> (<key>)`` (empty = no value), then the overall
    mean of each project key (``mean <key> (n tasks)``).

    Marks, as text after the value (a column holding one is text throughout, 3 decimals): with two
    datasets or more, a task key with per-row values carries its tie mark and rank interval (★
    best, ≈ tied with the best over the rows every dataset scored) and an overall mean its own
    (over the instances every dataset has; :func:`spear_metrics.reports.runs.rows_tie_cells`,
    :func:`tie_specs`); a share or error rate over fewer than 10 rows carries its few-events mark."""
    import pandas as pd

    from spear_metrics.dynamic_superb.metrics import PROJECT_METRICS
    from spear_metrics.reports.runs import marked, results_rows, rows_tie_cells

    mine = [r for r in results if (getattr(r, "summary", {}) or {}).get("benchmark") == BENCHMARK]
    task_spec, overall_spec = tie_specs()
    by_instance: dict[Any, dict[str, list[dict[str, Any]]]] = {}  # instance -> source -> its rows
    for src, rs in (results_rows(mine, (), task_spec) if len(mine) >= 2 else {}).items():
        for x in rs:
            by_instance.setdefault(x.get("instance"), {}).setdefault(src, []).append(x)
    instances = sorted({i for r in mine for i in (r.summary.get("tasks") or {})})
    marks: dict[str, dict[str, str]] = {r.source: {} for r in mine}  # source -> column -> tie mark
    for inst in instances:
        keys: list[str] = []  # the instance's upstream key and project key, as the datasets name them
        for r in mine:
            t = (r.summary.get("tasks") or {}).get(inst) or {}
            spec = PROJECT_METRICS.get(t.get("metric") or "")
            if spec is not None or t.get(t.get("metric") or "") is not None:
                keys += [k for k in (t["metric"], *((spec.key,) if spec else ())) if k not in keys]
        cells = rows_tie_cells(by_instance.get(inst, {}), keys, spec=task_spec)
        for src, by_key in cells.items():
            marks[src].update({f"{inst} ({k})": m for k, m in by_key.items()})
    overall_keys = _overall_keys()
    task_values = {r.source: [{"instance": i, **{k: v for k, v in t.items() if k in overall_keys}}
                              for i, t in (r.summary.get("tasks") or {}).items()] for r in mine}
    overall = rows_tie_cells(task_values, overall_keys, spec=overall_spec) if len(mine) >= 2 else {}
    data, text_cols = [], set()
    for r in mine:
        s = r.summary
        row: dict[str, Any] = {"model": r.model, "source": r.source, "judge": (s.get("judge") or {}).get("model")}
        for inst, t in sorted((s.get("tasks") or {}).items()):
            spec = PROJECT_METRICS.get(t.get("metric") or "")
            metric = t.get("metric") or ""
            for k in ((metric,) if t.get(metric) is not None else ()) + ((spec.key,) if spec is not None else ()):
                col = f"{inst} ({k})"
                row[col] = (t.get(k), marked("", marks[r.source].get(col, ""), t, k,
                                             rate=True if k == "llm_classification" else None))
        for key, m in (s.get("overall") or {}).items():
            row[f"mean {key} ({m.get('n_tasks')} tasks)"] = (m.get("mean"), overall.get(r.source, {}).get(key, ""))
        text_cols |= {c for c, v in row.items() if isinstance(v, tuple) and v[1]}
        data.append(row)
    for row in data:  # a marked column is text throughout; an unmarked one keeps its numbers
        for c, v in list(row.items()):
            if isinstance(v, tuple):
                value, mark = v
                row[c] = marked("-" if value is None else f"{value:.3f}", mark) if c in text_cols else value
    return pd.DataFrame(data)


def _overall_keys() -> tuple[str, ...]:
    from spear_metrics.dynamic_superb.metrics import PROJECT_METRICS

    return tuple(m.key for m in PROJECT_METRICS.values())
