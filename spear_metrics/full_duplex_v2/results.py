"""Full-Duplex-Bench v2 runs as results datasets: what ``push-results`` checks and writes for a
``spearbench fdb score --version 2`` folder (``summary.json``, ``per_sample.jsonl``: one row per
conversation), and the table of the leaderboard Space's v2 tab.

A run is recognised by ``summary.json`` ``"benchmark": "full_duplex_v2"`` (the registry's
:func:`~spear_metrics.core.registry.benchmark_of_summary`); :mod:`spear_metrics.results.validate`
hands it to the checks below (the descriptor's ``results``):

- the summary: counts, ``metrics == ["full_duplex_v2"]`` with a version this code reads, and
  ``splits``: per split (and ``all``) ``n_conversations`` and, for each of
  :data:`SPLIT_KEYS`, ``{"mean", "n", "ci95"}`` (a number or null, a count, ``[lo, hi]`` or null);
- the rows (one per conversation), nested as ``per_sample.jsonl`` holds them or flat as published
  (:func:`table_rows`): ``row`` exactly ``0..n-1``, ``id``, ``split``, ``status`` ``ok``/``failed``,
  the values numbers or null, the summary's counts;
- every value recomputed from the judge's events of its row (upstream's ``scoring/score.py`` and
  ``score_time.py``: :func:`~spear_metrics.full_duplex_v2.score.task_scores`,
  :func:`~spear_metrics.full_duplex_v2.score.binned_row`), and each split's means and ``n`` from
  the ``ok`` rows (intervals are not recomputed): an edited ``summary.json`` or row is refused.

The published dataset has two configs: ``default`` (``data/<split>-*.parquet``: one row per
conversation; ``events`` and ``failed_events`` as JSON text) and ``events``
(``events/<split>-*.parquet``, :func:`extra_tables`: one row per judged turn-taking event:
``id``, ``split``, ``event`` (0-based), ``start_s``, ``end_s`` (s on the conversation's clock),
``turn_taking_fluency``, ``instruction_following`` (the judge's integers, 1-5 asked)). ``push-results --with-audio`` /
``--with-inputs`` embed the conversation's channels (:func:`audio_files`), which the Space's
conversation browser plays (:mod:`spear_metrics.full_duplex_v2.ui`). No torch, no model.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from spear_metrics.full_duplex_v2 import BENCHMARK, VERSION
from spear_metrics.results.validate import (
    ResultsError, check_benchmark_rows, check_run_head, is_count, is_number, same_value, short_repr,
)

NAME = BENCHMARK.name
#: metric versions whose results this code reads
KNOWN_VERSIONS = frozenset({VERSION})
REQUIRED_SUMMARY_KEYS = ("n_samples", "n_scored", "n_failed", "metrics", "metric_versions", "benchmark", "splits")
#: the per-conversation values averaged per split (``summary.json`` ``splits``)
SPLIT_KEYS = ("avg_turn_taking", "avg_instruction_following", "avg_task_specific")
#: the columns of the ``events`` config
EVENT_COLUMNS = ("id", "split", "event", "start_s", "end_s", "turn_taking_fluency", "instruction_following")


def value_keys() -> tuple[str, ...]:
    """The per-conversation value columns (the declared keys of :data:`~spear_metrics.full_duplex_v2.score.KEYS`)."""
    from spear_metrics.full_duplex_v2.score import KEYS

    return tuple(k.name for k in KEYS)


def _events(r: dict[str, Any], where: str) -> list[list[Any]]:
    ev = r.get("events")
    if ev is None:
        return []
    if isinstance(ev, str):
        try:
            ev = json.loads(ev)
        except (ValueError, RecursionError):
            raise ResultsError(f"{where}: row {r.get('row')} 'events' is not JSON") from None
    if not isinstance(ev, list) or not all(
            isinstance(e, list) and len(e) == 4 and all(is_number(x) for x in e) for e in ev):
        raise ResultsError(f"{where}: row {r.get('row')} 'events' is not a list of [start_s, end_s, tt, if]")
    return ev


def flat_row(r: dict[str, Any]) -> dict[str, Any]:
    """One ``per_sample.jsonl`` record as a row of the published table: ``events`` and
    ``failed_events`` as JSON text (a flat row is returned as it is)."""
    out = dict(r)
    for k in ("events", "failed_events"):
        if k in out and out[k] is not None and not isinstance(out[k], str):
            out[k] = json.dumps(out[k], ensure_ascii=False)
    return out


def table_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The published per-conversation table: :func:`flat_row` of each row."""
    return [flat_row(r) for r in rows]


def extra_tables(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The dataset's other configs: ``{"events": one row per judged event of each ``ok``
    conversation}`` (columns :data:`EVENT_COLUMNS`; times in s, the judge's integer scores)."""
    out = []
    for r in rows:
        if r.get("status") != "ok":
            continue
        for i, (s, e, tt, iff) in enumerate(_events(r, "results")):
            out.append({"id": r["id"], "split": r.get("split"), "event": i, "start_s": float(s), "end_s": float(e),
                        "turn_taking_fluency": int(tt), "instruction_following": int(iff)})
    return {"events": out}


def validate_summary(summary: Any, *, where: str = "results") -> None:
    """Check a v2 run's ``summary.json`` alone (:func:`~spear_metrics.results.validate.check_run_head`,
    then ``splits``).

    Raises:
        ResultsError: one line naming the first problem.
    """
    check_run_head(summary, name=NAME, title=BENCHMARK.title, required=REQUIRED_SUMMARY_KEYS,
                   known_versions=KNOWN_VERSIONS, where=where)
    splits = summary["splits"]
    if not isinstance(splits, dict):
        raise ResultsError(f"{where}: summary.json 'splits' is not an object")
    for name, g in splits.items():
        if not isinstance(g, dict) or not is_count(g.get("n_conversations")):
            raise ResultsError(f"{where}: summary.json splits[{name!r}] has no count 'n_conversations'")
        for k in SPLIT_KEYS:
            v = g.get(k)
            if not isinstance(v, dict) or not is_count(v.get("n")) or (v.get("mean") is not None and not is_number(v["mean"])):
                raise ResultsError(f"{where}: summary.json splits[{name!r}][{k!r}] is not {{mean, n, ci95}}: {short_repr(v)}")
            ci = v.get("ci95")
            if ci is not None and not (isinstance(ci, list) and len(ci) == 2 and all(is_number(x) for x in ci)
                                       and ci[0] <= ci[1]):
                raise ResultsError(f"{where}: summary.json splits[{name!r}][{k!r}] ci95 is not [lo, hi] or null: {short_repr(ci)}")


def validate_rows(summary: dict[str, Any], rows: Sequence[dict[str, Any]], *, where: str = "results") -> None:
    """Check the per-conversation rows (nested or flat) against themselves and the summary's
    counts (:func:`~spear_metrics.results.validate.check_benchmark_rows`; ``events`` a list of
    ``[start_s, end_s, tt, if]``, as a list or JSON text).

    Raises:
        ResultsError: a missing column, a bad or repeated ``row`` id, an unknown status, a
            non-number under a key, bad events, counts that do not match.
    """
    def row_check(r: dict[str, Any], rid: int) -> None:
        if "split" not in r:
            raise ResultsError(f"{where}: row {rid} is missing column 'split'")
        _events(r, where)

    check_benchmark_rows(summary, rows, value_keys(), where=where, row_check=row_check)


def check_summary_values(summary: dict[str, Any], rows: Sequence[dict[str, Any]], *, where: str = "results",
                         use_options: bool = False) -> None:
    """Recompute each ``ok`` row's values from its events (upstream's per-task row and bins) and
    each split's means and ``n`` from the rows; compare (rel 1e-6).

    Raises:
        ResultsError: a value that differs from its recomputation.
    """
    import numpy as np

    from spear_metrics.full_duplex_v2.score import binned_row, binned_sums

    validate_summary(summary, where=where)
    validate_rows(summary, rows, where=where)
    ok = [r for r in sorted(rows, key=lambda r: r["row"]) if r["status"] == "ok"]
    for r in ok:
        ev = [tuple(e) for e in _events(r, where)]
        n = len(ev)
        got = {"n_events": n, "avg_turn_taking": sum(e[2] for e in ev) / n if n else None,
               "avg_instruction_following": sum(e[3] for e in ev) / n if n else None,
               "n_files": 1 if r.get("avg_task_specific") is not None else 0, **binned_row(binned_sums(ev))}
        for k, v in got.items():
            if not same_value(r.get(k), v):
                raise ResultsError(f"{where}: row {r['row']} {k!r} is {r.get(k)!r} but its events give {v!r} "
                                   "(edited results?)")
    groups: dict[str, list[dict[str, Any]]] = {"all": ok}
    for r in ok:
        groups.setdefault(r["split"], []).append(r)
    for name, g in summary["splits"].items():
        rs = groups.get(name, [])
        for k in SPLIT_KEYS:
            vals = [r[k] for r in rs if r.get(k) is not None and r.get(k) == r.get(k)]
            want = float(np.mean(vals)) if vals else None
            have = summary["splits"][name][k]
            if not same_value(have.get("mean"), want) or have.get("n") != len(vals):
                raise ResultsError(f"{where}: summary.json splits[{name!r}][{k!r}] is {have.get('mean')!r} (n "
                                   f"{have.get('n')}) but its rows give {want!r} (n {len(vals)}) (edited results? a "
                                   "summary must be the one its rows were scored into)")


def split_cell(summary: dict[str, Any], split: str, key: str) -> str:
    """``"mean [lo, hi]"`` of ``key`` in ``split`` (``-`` when there is none)."""
    from spear_metrics.core.summary import interval_text

    g = ((summary.get("splits") or {}).get(split) or {}).get(key) or {}
    return interval_text(g.get("mean"), g.get("ci95"), digits=3)


def card_text(summary: dict[str, Any], *, model_name: str, split: str, n_rows: int, **_: Any) -> str:
    """The dataset card of a v2 results dataset: the ``spearbench:`` block (benchmark, model,
    versions, counts, the judge, the ASR) and the split means with their intervals."""
    from spear_metrics.results.write import results_card

    prov = summary.get("provenance") or {}
    info = {
        "benchmark": NAME,
        "model_name": model_name,
        "metric_versions": dict(summary.get("metric_versions") or {}),
        "n_samples": summary.get("n_samples"),
        "n_scored": summary.get("n_scored"),
        "n_failed": summary.get("n_failed"),
        "judge_model": prov.get("judge_model"),
        "judge_moving_alias": prov.get("judge_moving_alias"),
        "eval_prompts_upstream": prov.get("eval_prompts_upstream"),
        "asr": prov.get("asr") if isinstance(prov.get("asr"), (str, type(None))) else json.dumps(prov.get("asr")),
    }
    lines = [f"| {s} | {(summary['splits'][s] or {}).get('n_conversations', '-')} | "
             + " | ".join(split_cell(summary, s, k) for k in SPLIT_KEYS) + " |" for s in summary.get("splits") or {}]
    body = "\n".join([
        f"# Full-Duplex-Bench v2 results: {model_name}",
        "",
        f"**{model_name}** in live conversations with a Full-Duplex-Bench v2 examiner, judged by "
        "`spearbench fdb score --version 2`.",
        "",
        f"- conversations: {summary.get('n_samples')} (scored {summary.get('n_scored')}, failed "
        f"{summary.get('n_failed')}); per-conversation table: config `default`, `data/{split}-*.parquet` "
        f"({n_rows} rows); per-event table: config `events`, `events/{split}-*.parquet`",
        "- split means over conversations with their 95 % bootstrap interval [lo, hi] (scores 1-5). A live "
        "examiner is a new sample on every run: compare runs made with the same examiner model, voice and seed.",
        "",
        "| split | conversations | " + " | ".join(f"`{k}`" for k in SPLIT_KEYS) + " |",
        "|---|---|" + "---|" * len(SPLIT_KEYS),
        *lines,
        "",
        "Load with `datasets.load_dataset(<this repo or folder>)` (`name=\"events\"` for the events).",
        "",
    ])
    return results_card(info, pretty_name=f"SPEARBench Full-Duplex-Bench v2 results: {model_name}",
                        tags=["spearbench", "full-duplex-bench", "evaluation-results"], split=split, body=body,
                        extra_configs=tuple(extra_tables([])))


def tie_spec():
    """The tie groups of the v2 table (:class:`spear_metrics.reports.runs.TieSpec`): rows paired by
    the conversation's task ``id``, conversations resampled one by one (each row is one), every
    split key higher-is-better (scores 1-5, :data:`~spear_metrics.full_duplex_v2.score.KEYS`)."""
    from spear_metrics.full_duplex_v2.score import KEYS
    from spear_metrics.reports.runs import TieSpec

    better = {k.name: k.better for k in KEYS}
    return TieSpec(row_id=lambda r: r.get("id"), better=better.get, unit="conversation", columns=("id", "split", "status"))


#: the audio columns ``push-results`` embeds (``--with-audio``: the examinee; ``--with-inputs``: the
#: examiner; both: the stereo mix too) -> (file in the conversation folder, which flag embeds it)
AUDIO_COLUMNS = {"examinee_audio": ("B.wav", "answers"), "examiner_audio": ("A.wav", "inputs"),
                 "combined_audio": ("combined.wav", "both")}


def audio_files(rows: Sequence[dict[str, Any]], *, answers: bool, inputs: bool) -> dict[str, list[Any]]:
    """What ``push-results --with-audio`` (``answers``: ``examinee_audio``, the examinee's
    ``B.wav``) and ``--with-inputs`` (``inputs``: ``examiner_audio``, the examiner's ``A.wav``)
    embed for each row, and with both ``combined_audio`` (``combined.wav``, A left, B right):
    ``(conversation folder, file name)`` (the folder of the row's ``audio_path``; the file is
    read inside it only), ``None`` for a row that names no folder (scored by a version that
    recorded none)."""
    from pathlib import Path

    on = {"answers": answers, "inputs": inputs, "both": answers and inputs}
    dirs = [Path(r["audio_path"]).parent if r.get("audio_path") else None for r in rows]
    return {col: [(d, name) if d is not None else None for d in dirs]
            for col, (name, flag) in AUDIO_COLUMNS.items() if on[flag]}


def leaderboard_frame(results: Sequence[Any]):
    """The Space's v2 table: one row per loaded v2 results dataset and split (``all`` first),
    columns ``model``, ``split``, ``conversations``, then each of :data:`SPLIT_KEYS` as
    ``mean [lo, hi]`` (``-`` = none), ``source``. Other results are left out.

    With two datasets or more, each split's cells carry their tie mark and rank interval (★ best,
    ≈ tied with the best: :func:`spear_metrics.reports.runs.rows_tie_cells` over the split's
    conversations every dataset scored, :func:`tie_spec`)."""
    import pandas as pd

    from spear_metrics.reports.runs import marked, results_rows, rows_tie_cells

    mine = [r for r in results if r.summary.get("benchmark") == NAME]
    spec = tie_spec()
    rows = results_rows(mine, SPLIT_KEYS, spec) if len(mine) >= 2 else {}
    marks: dict[str, dict[str, dict[str, str]]] = {}  # split -> source -> key -> mark
    for name in dict.fromkeys(n for r in mine for n in (r.summary.get("splits") or {})):
        sel = {src: [x for x in rs if name == "all" or x.get("split") == name] for src, rs in rows.items()}
        marks[name] = rows_tie_cells(sel, SPLIT_KEYS, spec=spec)
    data = []
    for r in mine:
        s = r.summary
        splits = s.get("splits") or {}
        for name in sorted(splits, key=lambda n: (n != "all", n)):
            data.append([r.model, name, splits[name].get("n_conversations", "-"),
                         *[marked(split_cell(s, name, k), marks.get(name, {}).get(r.source, {}).get(k, ""))
                           for k in SPLIT_KEYS], r.source])
    return pd.DataFrame(data, columns=["model", "split", "conversations", *SPLIT_KEYS, "source"])


def _space_tab():
    from spear_metrics.core.benchmark import SpaceTab

    return SpaceTab(
        intro="Full-Duplex-Bench v2 results datasets (`spearbench fdb score --version 2` + `push-results`): one row "
              "per results dataset and split (`all` first): the mean over conversations of upstream's per-task "
              "turn-taking fluency, instruction following and task-specific score (1-5; the Daily split has no "
              "task-specific rubric) with its 95 % bootstrap interval over conversations. A live examiner is a new "
              "sample on every run: compare runs made with the same examiner model, voice and seed. Below: each "
              "conversation's two channels (embedded by push-results --with-audio --with-inputs) and its time line "
              "(each channel's speech and the judged turn-taking events with their scores).",
        none_line="No Full-Duplex-Bench v2 results dataset loaded: pass one to --results (spearbench fdb score "
                  "--version 2, then push-results --local-dir).",
        elem_id="fdb2",
        table="spear_metrics.full_duplex_v2.results:leaderboard_frame",
        samples="spear_metrics.full_duplex_v2.ui:build_samples",
    )


#: the leaderboard Space's Full-Duplex-Bench v2 tab (:func:`leaderboard_frame`)
SPACE_TAB = _space_tab()
