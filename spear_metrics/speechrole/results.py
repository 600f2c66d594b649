"""SpeechRole-Eval runs as results datasets: what ``push-results`` checks and writes for a
``speechrole score`` / ``summarize`` folder, and the table the leaderboard Space shows.

A run is recognised by ``summary.json`` ``"benchmark": "speechrole"``;
:mod:`spear_metrics.results.validate` hands it to the checks below (its descriptor's ``results``, :data:`spear_metrics.core.registry.BENCHMARKS`):

- the summary: the required keys, counts, ``metrics == ["speechrole"]`` with a version this code
  reads, every declared key (:data:`KEYS`) a number or null, intervals ``[lo, hi]``, counts;
- the rows (one per dialogue): ``row`` exactly ``0..n-1``, ``mode``/``role``/``status``, each
  score an integer or null, each status one of the pair statuses, the counts of the summary;
- the summary recomputed from the rows (:func:`spear_metrics.speechrole.aggregate.aggregate_rows`,
  point values and counts; intervals depend on the resampling and are not recomputed): an edited
  ``summary.json`` or row is refused.

No torch, no model: the light install reads these.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from spear_metrics.core.dimension import MetricKey
from spear_metrics.speechrole.aggregate import ALL, NOT_JUDGED, OVERALL, SCORED, STATS, UNPARSED
from spear_metrics.speechrole.data import MODES
from spear_metrics.speechrole import BENCHMARK as DESCRIPTOR, VERSION
from spear_metrics.speechrole.protocol import ASPECTS
from spear_metrics.results.validate import short_repr

GROUP = "SpeechRole-Eval"
#: the ``"benchmark"`` value of a SpeechRole run's ``summary.json``
BENCHMARK = DESCRIPTOR.name
#: the declared summary keys (templates: ``<scope>`` = single, multi or overall; ``<aspect>`` = one
#: of the eight aspects or ``all_aspects``). None is a published SpeechRole-Eval column: the
#: aggregation behind the published scores is not in public code.
KEYS: tuple[MetricKey, ...] = (
    MetricKey("<scope>_<aspect>_mean_A", "score 1-10", "higher",
              "mean of the judge's scores of the tested system (Model A) over the dialogues whose pair was scored "
              "(SpeechRole-Eval's pairwise audio judge, `yuhui1038/SpeechRole`); `all_aspects`: every pair pooled",
              group=GROUP),
    MetricKey("<scope>_<aspect>_mean_B", "score 1-10", "higher",
              "mean of the judge's scores of the role's reference speech (Model B) over the same pairs", group=GROUP),
    MetricKey("<scope>_<aspect>_ratio_100_sumA_over_sumB", "%", "higher",
              "100 x sum of the system's scores / sum of the reference's (project key: consistent with the published "
              "headline scores above 100, whose aggregation is not in public code)", group=GROUP),
    MetricKey("<scope>_<aspect>_na_share", "fraction", "lower",
              "pairs the judge replied to whose replies could not be parsed after the retries, over the pairs it "
              "replied to", group=GROUP),
    MetricKey("<scope>_<aspect>_position_bias_system", "score points", "lower",
              "with --swap-order: mean over dialogues of the system's score when presented first minus its score "
              "when presented second (0 = no position bias)", group=GROUP),
    MetricKey("<scope>_<aspect>_position_bias_reference", "score points", "lower",
              "with --swap-order: the same for the reference speech", group=GROUP),
)
#: summary keys every SpeechRole run carries (build_summary's, plus the benchmark's)
REQUIRED_SUMMARY_KEYS = ("n_samples", "n_scored", "n_failed", "metrics", "metric_versions", "benchmark", "modes")
BASE_SAMPLE_COLUMNS = ("row", "mode", "role", "dialogue", "status", "error")
COMPATIBLE_VERSIONS = frozenset({VERSION})
PAIR_STATUSES = (SCORED, UNPARSED, NOT_JUDGED)


def _error(where: str, msg: str):
    from spear_metrics.results.validate import ResultsError

    return ResultsError(f"{where}: {msg}")


def declared(key: str) -> MetricKey | None:
    """The :data:`KEYS` entry ``key`` is one of (``None``: not a declared key)."""
    scopes, aspects = (*MODES, OVERALL), (*ASPECTS, ALL)
    for k in KEYS:
        suffix = k.name.split("<aspect>_", 1)[1]
        if key.endswith("_" + suffix):
            head = key[: -len(suffix) - 1]
            for s in scopes:
                if head.startswith(s + "_") and head[len(s) + 1:] in aspects:
                    return k
    return None


def validate_summary(summary: dict[str, Any], *, where: str = "results") -> None:
    """Check a SpeechRole ``summary.json`` alone (module docstring).

    Raises:
        ResultsError: one line naming the first problem.
    """
    from spear_metrics.results.validate import check_counts, interval_base, is_number

    for k in REQUIRED_SUMMARY_KEYS:
        if k not in summary:
            raise _error(where, f"summary.json is missing {k!r}")
    check_counts(summary, where=where, total=False)
    if summary["metrics"] != [BENCHMARK]:
        raise _error(where, f"summary.json metrics must be ['{BENCHMARK}'], got {short_repr(summary['metrics'])}")
    ver = (summary.get("metric_versions") or {}).get(BENCHMARK) if isinstance(summary.get("metric_versions"), dict) else None
    if str(ver) not in COMPATIBLE_VERSIONS:
        raise _error(where, f"unknown metric version {BENCHMARK}={ver!r} (known: {', '.join(sorted(COMPATIBLE_VERSIONS))})")
    if not isinstance(summary["modes"], list) or any(m not in MODES for m in summary["modes"]):
        raise _error(where, f"summary.json modes must be a list of {', '.join(MODES)}: {short_repr(summary['modes'])}")
    for key, v in summary.items():
        base = interval_base(key, summary)
        if base is not None:
            if key.endswith("_ci95") and v is not None and not (
                    isinstance(v, list) and len(v) == 2 and all(is_number(x) for x in v) and v[0] <= v[1]):
                raise _error(where, f"summary.json {key!r} is not an interval [lo, hi] or null: {short_repr(v)}")
            if key.endswith("_n") and not (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
                raise _error(where, f"summary.json {key!r} is not a count: {short_repr(v)}")
            continue
        if declared(key) is not None and v is not None and not is_number(v):
            raise _error(where, f"summary.json {key!r} is not numeric: {short_repr(v)}")


def validate_rows(summary: dict[str, Any], rows: Sequence[dict[str, Any]], *, where: str = "results") -> None:
    """Check the dialogue rows against themselves and the summary's counts.

    Raises:
        ResultsError: a missing column, bad ``row`` ids, a bad status or mode, a score that is
            not an integer, a pair status that is not one of :data:`PAIR_STATUSES`, counts that
            do not match.
    """
    if not rows:
        raise _error(where, "per_sample.jsonl has no rows")
    seen: set[int] = set()
    n_ok = 0
    for i, r in enumerate(rows):
        for c in BASE_SAMPLE_COLUMNS:
            if c not in r:
                raise _error(where, f"per_sample.jsonl line {i + 1} is missing column {c!r}")
        rid = r["row"]
        if not (isinstance(rid, int) and not isinstance(rid, bool) and rid >= 0) or rid in seen:
            raise _error(where, f"per_sample.jsonl line {i + 1}: 'row' {short_repr(rid)} is not a new row id")
        seen.add(rid)
        if r["status"] not in ("ok", "failed") or r["mode"] not in MODES:
            raise _error(where, f"row {rid}: status {short_repr(r['status'])} / mode {short_repr(r['mode'])} not known")
        n_ok += r["status"] == "ok"
        for a in ASPECTS:
            for c in (f"{a}_A", f"{a}_B", f"{a}_A_second", f"{a}_B_first"):
                v = r.get(c)
                if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool)
                                          and math.isfinite(v) and float(v).is_integer()):
                    raise _error(where, f"row {rid} value {c!r} is not an integer score: {short_repr(v)}")
            for c in (f"{a}_status", f"{a}_swapped_status"):
                if r.get(c) is not None and r[c] not in PAIR_STATUSES:
                    raise _error(where, f"row {rid} value {c!r} is not one of {', '.join(PAIR_STATUSES)}")
    n = len(rows)
    if summary.get("n_samples") != n or seen != set(range(n)):
        raise _error(where, f"summary.json n_samples is {summary.get('n_samples')} but the rows are not 0..{n - 1}")
    if summary.get("n_scored") != n_ok or summary.get("n_failed") != n - n_ok:
        raise _error(where, f"summary.json counts n_scored={summary.get('n_scored')}, n_failed={summary.get('n_failed')} "
                            f"but the rows hold {n_ok} ok and {n - n_ok} failed")


def check_summary_values(summary: dict[str, Any], rows: Sequence[dict[str, Any]], *, where: str = "results",
                         use_options: bool = False) -> None:
    """Recompute the summary's point values and counts from the rows and compare every declared
    key the summary holds (intervals excepted).

    Raises:
        ResultsError: a value that differs from its recomputation.
    """
    from spear_metrics.results.validate import same_value
    from spear_metrics.speechrole.aggregate import aggregate_rows

    got = aggregate_rows(sorted(rows, key=lambda r: r["row"]), n_resamples=0)
    for k, v in got.items():
        if k not in summary or k.endswith("_ci95") or (declared(k) is None and not k.endswith("_n")
                                                      and "_n_" not in k):
            continue
        s = summary[k]
        if not same_value(s, v):
            raise _error(where, f"summary.json {k!r} is {s!r} but its rows give {v!r} (edited results?)")


def card_text(summary: dict[str, Any], *, model_name: str, split: str, n_rows: int, **_: Any) -> str:
    """The dataset card of a SpeechRole results dataset: the ``spearbench:`` block (benchmark,
    model, judge, protocol, prompt version, reference set, counts) and the all-aspects and
    per-aspect table of each scope."""
    from spear_metrics.results.write import results_card

    info = {
        "benchmark": BENCHMARK,
        "model_name": model_name,
        "modes": list(summary.get("modes") or []),
        "judge_model": summary.get("judge_model"),
        "protocol": summary.get("protocol"),
        "prompt_version": summary.get("prompt_version"),
        "reference_key": summary.get("reference_key"),
        "swap_order": summary.get("swapped"),
        "metric_versions": dict(summary.get("metric_versions") or {}),
        "spearbench_version": summary.get("spearbench_version"),
        "n_samples": summary.get("n_samples"),
        "n_scored": summary.get("n_scored"),
        "n_failed": summary.get("n_failed"),
    }
    lines = []
    for scope in [*info["modes"], OVERALL]:
        for a in [ALL, *ASPECTS]:
            k = f"{scope}_{a}"
            cells = []
            for s in STATS:
                v, ci = summary.get(f"{k}_{s}"), summary.get(f"{k}_{s}_ci95")
                cell = "-" if v is None else f"{v:.3f}"
                if v is not None and isinstance(ci, list) and len(ci) == 2:
                    cell += f" [{ci[0]:.3f}, {ci[1]:.3f}]"
                cells.append(cell)
            na = summary.get(f"{k}_na_share")
            lines.append(f"| {scope} | {a} | {' | '.join(cells)} | {'-' if na is None else f'{na:.3f}'} | "
                         f"{summary.get(f'{k}_mean_A_n', '-')} |")
    body = "\n".join([
        f"# SpeechRole-Eval results: {model_name}",
        "",
        f"**{model_name}** judged on SpeechRole-Eval (arXiv 2508.02013) by `spearbench speechrole` "
        f"(spearbench {summary.get('spearbench_version')}): an audio LLM judge "
        f"(`{summary.get('judge_model') or 'not recorded'}`, protocol `{summary.get('protocol') or 'not recorded'}`) "
        "compares the system's spoken answers (Model A) with the role's reference speech (Model B) on eight aspects, "
        "each a pair of scores 1-10.",
        "",
        f"- dialogues: {summary.get('n_samples')} (scored {summary.get('n_scored')}, failed {summary.get('n_failed')}); "
        f"per-dialogue table: `data/{split}-*.parquet` ({n_rows} rows; null = no score)",
        f"- {summary.get('headline_note', '')}",
        f"- {summary.get('dimensions_note', '')}",
        "- values with their 95 % bootstrap interval over dialogues [lo, hi]; `n` = dialogues with a scored pair",
        "",
        "| scope | aspect | mean_A (system) | mean_B (reference) | ratio_100_sumA_over_sumB | na share | n |",
        "|---|---|---|---|---|---|---|",
        *lines,
        "",
        "Load with `datasets.load_dataset(<this repo or folder>)`.",
        "",
    ])
    return results_card(info, pretty_name=f"SPEARBench SpeechRole-Eval results: {model_name}",
                        tags=["spearbench", "speechrole-eval", "role-play", "evaluation-results"], split=split, body=body)


#: the suffix of the ratio keys the Space table shows
RATIO = "ratio_100_sumA_over_sumB"


def ratio_parts(row: dict[str, Any], aspect: str) -> tuple[float, float] | None:
    """One dialogue's share of ``<scope>_<aspect>_ratio_100_sumA_over_sumB``: ``(100 * A, B)`` of
    the aspect's pair when both scores exist (``all_aspects``: the sums over the aspects whose
    pair was scored), ``None`` when none was; the key over dialogues is
    ``sum(100 A) / sum(B)`` (:func:`spear_metrics.speechrole.aggregate.aggregate_rows`)."""
    num = den = 0.0
    seen = False
    for a in (ASPECTS if aspect == ALL else (aspect,)):
        x, y = row.get(f"{a}_A"), row.get(f"{a}_B")
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and not isinstance(x, bool) \
                and not isinstance(y, bool) and math.isfinite(x) and math.isfinite(y):
            num, den, seen = num + 100.0 * x, den + y, True
    return (num, den) if seen else None


def tie_spec():
    """The tie groups of the SpeechRole table (:class:`spear_metrics.reports.runs.TieSpec`): rows
    paired by ``(mode, role, dialogue)``, dialogues resampled within their role (each role keeps
    its number of dialogues, as the intervals of :func:`spear_metrics.speechrole.aggregate.aggregate_rows`),
    each ratio key's per-dialogue parts :func:`ratio_parts` (higher is better)."""
    from spear_metrics.reports.runs import TieSpec

    def aspect_of(key: str) -> str | None:
        return next((a for a in (*ASPECTS, ALL) if key.endswith(f"_{a}_{RATIO}")), None)

    return TieSpec(row_id=lambda r: (r.get("mode"), r.get("role"), r.get("dialogue")),
                   better=lambda k: "higher" if aspect_of(k) else None, unit="dialogue",
                   stratum=lambda r: r.get("role"), stratum_name="role",
                   value=lambda r, k: ratio_parts(r, aspect_of(k)) if aspect_of(k) else None,
                   columns=("mode", "role", "dialogue", "status", *(f"{a}_{x}" for a in ASPECTS for x in "AB")))


def leaderboard_frame(results: Sequence[Any], scope: str = OVERALL):
    """The Space's SpeechRole table: one row per loaded SpeechRole results dataset
    (:class:`spear_metrics.results.Results` whose summary is a SpeechRole run), columns ``model``,
    ``judge``, ``protocol``, ``dialogues``, then ``ratio_100_sumA_over_sumB`` of ``all_aspects`` and
    of each aspect for ``scope`` with its interval, and the all-aspects ``na`` share; ``-`` =
    missing. Other results are left out.

    With two datasets or more, each ratio carries its tie mark and rank interval (★ best, ≈ tied
    with the best: :func:`spear_metrics.reports.runs.rows_tie_cells` over the dialogues of
    ``scope`` every dataset scored, :func:`tie_spec`); a ratio over fewer than 10 dialogues
    carries its few-events mark."""
    import pandas as pd

    from spear_metrics.reports.runs import marked, results_rows, rows_tie_cells

    def cell(summary: dict[str, Any], key: str) -> str:
        v, ci = summary.get(key), summary.get(f"{key}_ci95")
        if v is None:
            return "-"
        return f"{v:.1f}" + (f" [{ci[0]:.1f}, {ci[1]:.1f}]" if isinstance(ci, list) and len(ci) == 2 else "")

    mine = [r for r in results if r.summary.get("benchmark") == BENCHMARK]
    keys = [f"{scope}_{a}_{RATIO}" for a in [ALL, *ASPECTS]]
    spec = tie_spec()
    marks = {}
    if len(mine) >= 2:
        rows = results_rows(mine, (), spec)
        marks = rows_tie_cells({src: [x for x in rs if scope == OVERALL or x.get("mode") == scope]
                                for src, rs in rows.items()}, keys, spec=spec)
    cols = ["model", "judge", "protocol", "dialogues", *[f"{a} · 100·ΣA/ΣB" for a in [ALL, *ASPECTS]], "na share",
            "source"]
    data = []
    for r in mine:
        s = r.summary
        na = s.get(f"{scope}_{ALL}_na_share")
        data.append([r.model, s.get("judge_model") or "-", s.get("protocol") or "-", s.get(f"{scope}_n_dialogues", "-"),
                     *[marked(cell(s, k), marks.get(r.source, {}).get(k, ""), s, k) for k in keys],
                     "-" if na is None else f"{na:.3f}", r.source])
    return pd.DataFrame(data, columns=cols)
