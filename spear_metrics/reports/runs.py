"""Scored runs as the report and ``spearbench compare`` read them, and their paired comparison.

A run is a scored ``RESULTS/`` folder (``summary.json`` + ``per_sample.jsonl``) or a results
dataset (``push-results --local-dir`` folder or Hub id, :func:`spear_metrics.results.load_results`).
Unlike the leaderboard, which refuses a run that fails :func:`spear_metrics.results.validate_run`,
a report shows what there is: :func:`load_run` keeps a run it can parse and lists what is wrong
with it in ``problems`` (a missing key, an unknown metric version, a broken line), so the report
says so in words and still renders everything else.

Rows of two runs are paired by the input clip's file name without extension (SPEAR's reports
pair a model's rows with the original answers by ``Path(audio_path).stem``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence


from spear_metrics.core.records import clean_value
from spear_metrics.core.stats import DEFAULT_RESAMPLES, compare_runs, conversation_of

#: Per-sample columns that are bookkeeping, metadata or evidence, not measurements: never compared.
#: The timing evidence of :func:`spear_metrics.interruptions.definition.timing_evidence` describes
#: how a value was found (tests keep the two lists in step).
NOT_COMPARED: frozenset[str] = frozenset({
    "row", "context_end_time", "question_end_time", "answer_duration", "answer_start_time",
    "question_speech_end_s", "skip_point_s", "answer_onset_after_skip_s", "answer_speech_start_s",
    "language_prob",
})

MATCHING = "input clip file name without extension (as SPEAR's reports pair runs)"


class RunLoadError(ValueError):
    """A source that holds no readable run at all (one-line message)."""


@dataclass
class RunData:
    """One scored run, as read for a report or a comparison.

    Attributes:
        source: the folder or Hub id given.
        name: display name: the one given, else the results card's model name, else the agent
            of the ``spearbench infer`` run whose answers a raw folder scored, else the folder name.
        summary: the parsed ``summary.json`` (``{}`` when it could not be read).
        rows: per-sample rows (``per_sample.jsonl`` objects; values missing = ``None``), row order.
        problems: one line per thing wrong with the run (shown, never fatal).
        inference_mode: from the results card, when there is one.
    """

    source: str
    name: str
    summary: dict[str, Any]
    rows: list[dict[str, Any]]
    problems: list[str] = field(default_factory=list)
    inference_mode: str | None = None

    @property
    def ok_rows(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r.get("status") == "ok"]

    @property
    def failed_rows(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r.get("status") != "ok"]


def _read_raw_folder(d: Path) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    problems: list[str] = []
    summary: dict[str, Any] = {}
    sp = d / "summary.json"
    if not sp.is_file():
        problems.append("summary.json not found: no aggregate values")
    else:
        try:
            obj = json.loads(sp.read_text(encoding="utf-8"))
            if isinstance(obj, dict):
                summary = obj
            else:
                problems.append("summary.json is not a JSON object")
        except (OSError, ValueError) as e:
            problems.append(f"summary.json is not valid JSON: {' '.join(str(e).split())[:160]}")
    rows: list[dict[str, Any]] = []
    for n, line in enumerate((d / "per_sample.jsonl").read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            problems.append(f"per_sample.jsonl line {n} is not valid JSON (left out)")
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("row"), int):
            problems.append(f"per_sample.jsonl line {n} is not a row object (left out)")
            continue
        obj.pop("timings", None)
        rows.append(obj)
    return summary, rows, problems


def _agent_of(results: Path) -> str | None:
    """The agent that answered a scored run's metadata: ``agent`` of ``run_info.json`` beside the
    metadata CSV the run scored (written by ``spearbench infer``); ``None`` when the run's record,
    that file or the key is missing (the dataset's own human answers have none)."""
    from spear_metrics.commands import read_run_info
    from spear_metrics.core.runner import scored_metadata

    metadata = scored_metadata(results)
    agent = read_run_info(metadata.parent).get("agent") if metadata is not None else None
    return agent.strip() or None if isinstance(agent, str) else None


def load_run(source: str | Path, *, name: str | None = None) -> RunData:
    """Read a run for a report or a comparison (see the module docstring).

    Raises:
        RunLoadError: nothing readable there (no such folder and not a loadable Hub id, or a
            folder with neither ``per_sample.jsonl`` nor a results dataset).
    """
    from spear_datasets.schema import subset_of
    from spear_metrics.results import (
        ResultsError, check_summary_values, load_results, validate_rows, validate_summary,
    )

    src = str(source)
    d = Path(src).expanduser()
    problems: list[str] = []
    mode = None
    if d.is_dir() and (d / "per_sample.jsonl").is_file():
        summary, rows, problems = _read_raw_folder(d)
        display = name or _agent_of(d) or d.name
    else:
        try:
            res = load_results(src)
        except ResultsError as e:
            if not (d.is_dir() and (d / "data").is_dir()):
                raise RunLoadError(str(e)) from None
            problems.append(str(e))  # a results dataset that fails validation: read it anyway
            import pandas as pd

            try:
                summary = json.loads((d / "summary.json").read_text(encoding="utf-8"))
                frame = pd.concat([pd.read_parquet(p) for p in sorted((d / "data").glob("*.parquet"))], ignore_index=True)
            except Exception as e2:
                raise RunLoadError(f"{src}: cannot read the results dataset: {' '.join(str(e2).split())[:200]}") from None
            display = name or d.name
        else:
            summary, frame, display, mode = res.summary, res.samples, name or res.model, res.inference_mode
        audio_cols = [c for c in frame.columns if c.endswith("_audio")]
        rows = [{k: clean_value(v) for k, v in r.items() if k not in audio_cols} for r in frame.to_dict("records")]
    if summary and rows:
        try:
            validate_summary(summary, where=src)
            validate_rows(summary, rows, where=src)
            ok = [r for r in rows if r.get("status") == "ok"]
            if ok and all("transcript_question" in r for r in ok):  # the metadata some aggregates need
                check_summary_values(summary, rows, where=src)
        except ResultsError as e:
            if str(e) not in problems:
                problems.append(str(e))
    if not rows:
        problems.append("no per-sample rows: n = 0")
    for r in rows:
        r.setdefault("subset", subset_of(r.get("audio_path")))
    rows.sort(key=lambda r: r["row"])
    return RunData(src, display, summary if isinstance(summary, dict) else {}, rows, problems, mode)


def input_id(row: dict[str, Any]) -> str:
    """The pairing id of a row: its input clip's file name without extension."""
    return Path(str(row.get("audio_path") or "").replace("\\", "/")).stem


def compare(a: RunData, b: RunData, *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
            names: tuple[str, str] | None = None, unit: str = "conversation") -> dict[str, Any]:
    """``comparison.json`` content: run A minus run B on every numeric per-sample key both share
    (:func:`spear_metrics.core.stats.compare_runs`; rows paired by :func:`input_id`; unpaired
    tests pooled and per subset), with each run's identity and problems. ``unit``: what the paired
    bootstrap resamples, ``"conversation"`` (:func:`spear_metrics.core.stats.conversation_of`;
    every pair of a drawn conversation comes along) or ``"row"``. ``names``: how the
    notes name the runs (default their names, or "A (name)" / "B (name)" when they are equal)."""
    if names is None:
        names = (a.name, b.name) if a.name != b.name else (f"A ({a.name})", f"B ({b.name})")
    comp = compare_runs(a.rows, b.rows, match=input_id, exclude=NOT_COMPARED, group=lambda r: r.get("subset"),
                        n_resamples=n_resamples, seed=seed, names=names,
                        cluster=conversation_of if unit == "conversation" else None, unit=unit)
    side = lambda r: {"source": r.source, "name": r.name, "n_rows": len(r.rows), "n_ok": len(r.ok_rows),  # noqa: E731
                      "problems": list(r.problems)}
    out = {"a": side(a), "b": side(b), "difference": "A - B", "matching": MATCHING}
    out.update(comp)
    from spear_metrics.core.onset import mixed_onset_note

    kinds = [r.summary.get("onset_kind") or "unstated" for r in (a, b)]
    out["a"]["onset_kind"], out["b"]["onset_kind"] = kinds
    note = mixed_onset_note(kinds)
    if note:  # never silently side by side
        out["notes"] = [*out.get("notes", []), f"{note} (A: {kinds[0]}, B: {kinds[1]})"]
    return out


def _f(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) and (abs(v) < 1e-3 or abs(v) >= 1e5) else f"{v:.{digits}f}"
    return str(v)


def _p(v: Any, floor: Any = None) -> str:
    """A p-value: at the bootstrap's floor (no resample beyond 0) as ``<=floor``."""
    if v is None:
        return "-"
    if floor is not None and v <= floor:
        return f"<={floor:.3g}"
    return _f(v)


#: the columns of :func:`comparison_table` (name in ``--columns`` = field of comparison.json):
#: header and cell of one key's entry ``e`` (its pooled unpaired tests in ``e["unpaired"]["all"]``)
COMPARISON_COLUMNS: dict[str, tuple[str, Callable[[dict[str, Any]], str]]] = {
    "n": ("n", lambda e: str(e["n"])),
    "mean_a": ("mean A", lambda e: _f(e["mean_a"])),
    "mean_b": ("mean B", lambda e: _f(e["mean_b"])),
    "diff": ("A-B", lambda e: _f(e["diff"])),
    "diff_ci95": ("95% CI", lambda e: "-" if e["diff_ci95"] is None else f"[{_f(e['diff_ci95'][0])}, {_f(e['diff_ci95'][1])}]"),
    "p_value": ("p boot", lambda e: _p(e["p_value"], e.get("p_value_floor"))),
    "p_value_holm": ("p Holm", lambda e: _p(e.get("p_value_holm"))),
    "wilcoxon_p": ("p Wilcoxon", lambda e: _p(e["wilcoxon_p"]) + ("*" if e.get("caution") and e["wilcoxon_p"] is not None else "")),
    "d_z": ("d_z", lambda e: _f(e["d_z"])),
    "welch_p": ("p Welch", lambda e: _f(e["unpaired"]["all"]["welch_p"])
                + ("*" if e["unpaired"]["all"].get("caution") and e["unpaired"]["all"]["welch_p"] is not None else "")),
    "mannwhitney_p": ("p MWU", lambda e: _f(e["unpaired"]["all"]["mannwhitney_p"])
                      + ("*" if e["unpaired"]["all"].get("caution") and e["unpaired"]["all"]["mannwhitney_p"] is not None else "")),
    "cliffs_delta": ("Cliff d", lambda e: _f(e["unpaired"]["all"]["cliffs_delta"])),
}


def comparison_table(comp: dict[str, Any], columns: Sequence[str] | None = None, *, width: int | None = None) -> str:
    """The comparison as a plain-text table (one line per key, at most ``width`` characters a
    line: wider tables wrap into blocks of columns, :func:`spear_metrics.commands.text_table`),
    with its notes and, once each, the small-sample cautions behind a ``*``.

    Args:
        columns: names of :data:`COMPARISON_COLUMNS` to show, in order (default all).

    Raises:
        ValueError: an unknown column name (the message lists the valid ones).
    """
    from spear_metrics.commands import CONSOLE_WIDTH, text_table, wrap

    cols = list(columns) if columns else list(COMPARISON_COLUMNS)
    unknown = [c for c in cols if c not in COMPARISON_COLUMNS]
    if unknown:
        raise ValueError(f"unknown column(s) {', '.join(unknown)}; valid: {', '.join(COMPARISON_COLUMNS)}")
    head = ["key"] + [COMPARISON_COLUMNS[c][0] for c in cols]
    rows = [[k] + [COMPARISON_COLUMNS[c][1](e) for c in cols] for k, e in comp["keys"].items()]
    text = [f"A = {comp['a']['name']} ({comp['a']['n_ok']} scored rows), B = {comp['b']['name']} "
            f"({comp['b']['n_ok']} scored rows); pairs matched by {comp['matching']}: {comp['n_common']}"]
    unit = (comp.get("bootstrap") or {}).get("unit", "row")
    text.append(f"95% CI and p boot resample {unit}s"
                + (f" ({comp['n_clusters_common']} shared)" if comp.get("n_clusters_common") is not None else "")
                + "; p Holm: p boot adjusted over the keys of this table")
    for side in ("a", "b"):
        for p in comp[side]["problems"]:
            text.append(f"{side.upper()}: {p}")
    text += [f"note: {n}" for n in comp["notes"]]
    cautions = list(dict.fromkeys(c for e in comp["keys"].values()
                                  for c in (e.get("caution"), e["unpaired"]["all"].get("caution")) if c))
    text += [f"* {c}" for c in cautions]
    text = [wrap(t, width=width or CONSOLE_WIDTH) for t in text]
    text.append(text_table(head, rows, width=width or CONSOLE_WIDTH))
    if not rows:
        text.append("(no key to compare)")
    return "\n".join(text)


def leaderboard_ties(rows_by_system: dict[str, Sequence[dict[str, Any]]], keys: Sequence[str], *,
                     n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0, unit: str = "conversation",
                     human: dict[str, Any] | None = None,
                     onset_kinds: dict[str, str] | None = None) -> dict[str, Any]:
    """Tie groups and rank intervals of a leaderboard, key by key
    (:func:`spear_metrics.core.stats.tie_groups`): systems' scored rows paired by
    :func:`input_id`, clustered by :func:`spear_metrics.core.stats.conversation_of` (``unit``
    ``"conversation"``) or not (``"row"``).

    A key gets a tie group when its direction of "better" is ``higher`` or ``lower``
    (:func:`spear_metrics.core.columns.find_column`), or ``closer_to_human`` and ``human`` (the
    human answers' values, e.g. their summary or the published human row) has a number for it,
    and at least two systems have per-row values under its name (the tests run on those per-row
    values); other keys are left out.

    With ``onset_kinds`` (system -> its onset rule, :data:`spear_metrics.core.onset.ONSET_KINDS`;
    a system not named counts as ``unstated``), the keys computed from the answer's onset
    (:func:`spear_metrics.core.onset.onset_derived`: ``latency_ms``...) rank only systems whose
    onset is measured (:data:`~spear_metrics.core.onset.MEASURED_ONSET_KINDS`) and only against
    systems measured by the same rule: a placed onset (``question_end``: a cascade at 0 ms,
    ``fixed_delay``), a replayed reference, an unstated rule, or a measured rule no other system
    shares is not ranked and is listed in the key's ``unranked`` (``{system: rule}``, shown by
    :func:`tie_cell` as ``[rule]``) with the ``onset_note`` saying so; several measured rules are
    ranked each within its own group (``groups``: ``{rule: tie_groups(...)}``).

    Returns:
        ``{key: tie_groups(...)}`` for the keys that have one (plus ``unranked``, ``onset_note``
        and ``groups`` on onset-derived keys under ``onset_kinds``).
    """
    from spear_metrics.core.columns import find_column
    from spear_metrics.core.onset import onset_derived
    from spear_metrics.core.stats import as_number, conversation_of, tie_groups

    ok = {name: [r for r in rows if r.get("status", "ok") == "ok"] for name, rows in rows_by_system.items()}
    conv: dict[str, Any] = {}
    for rows in ok.values():
        for r in rows:
            conv.setdefault(input_id(r), conversation_of(r))
    out: dict[str, Any] = {}
    for key in keys:
        col = find_column(key)
        target = as_number((human or {}).get(key))
        if col is None or not (col.better in ("higher", "lower") or (col.better == "closer_to_human" and target is not None)):
            continue
        values = {name: {input_id(r): r.get(key) for r in rows if as_number(r.get(key)) is not None}
                  for name, rows in ok.items()}
        values = {n: v for n, v in values.items() if v}
        if len(values) < 2:
            continue

        def ties_of(vals: dict[str, dict]) -> dict[str, Any]:
            return tie_groups(vals, better=col.better, target=target, cluster=conv.get if unit == "conversation" else None,
                              unit=unit, n_resamples=n_resamples, seed=seed)

        if onset_kinds is None or not onset_derived(key):
            out[key] = ties_of(values)
            continue
        out[key] = _onset_ties(values, {n: onset_kinds.get(n) or "unstated" for n in values}, ties_of, unit)
    return out


def _onset_ties(values: dict[str, dict], kinds: dict[str, str], ties_of: Callable[[dict[str, dict]], dict[str, Any]],
                unit: str) -> dict[str, Any]:
    """:func:`leaderboard_ties` of one onset-derived key: each measured onset rule shared by two
    systems or more ranked within itself, every other system ``unranked`` with its rule."""
    from spear_metrics.core.onset import MEASURED_ONSET_KINDS
    from spear_metrics.core.stats import ALPHA, SMALL_SAMPLE, TIE_RULE

    groups: dict[str, dict[str, dict]] = {}
    for name, vals in values.items():
        groups.setdefault(kinds[name], {})[name] = vals
    ranked = {k: g for k, g in groups.items() if k in MEASURED_ONSET_KINDS and len(g) >= 2}
    result = {k: ties_of(g) for k, g in sorted(ranked.items())}
    if len(result) == 1:
        out = dict(next(iter(result.values())))
    else:
        unit_name = unit if unit == "conversation" else "row"
        out = {"rule": TIE_RULE.format(unit=unit_name, alpha=ALPHA, min_units=SMALL_SAMPLE), "unit": unit_name,
               "best": None, "note": None if result else "no onset rule measured for two systems: nobody ranked",
               "systems": {n: e for r in result.values() for n, e in r["systems"].items()}}
    out["groups"] = result
    out["unranked"] = {n: k for n, k in kinds.items() if k not in ranked}
    out["onset_note"] = ONSET_TIE_NOTE
    return out


#: what a leaderboard says under a table whose onset-derived keys left systems unranked
ONSET_TIE_NOTE = ("[rule]: a key computed from the answer's onset (latency_ms, interrupted_time_ms, interruptions_%, "
                  "turn_taking_naturalness...) ranks only systems whose onset is measured, each against the systems "
                  "measured by the same rule; a system whose onset is placed (question_end: a cascade at 0 ms; "
                  "fixed_delay), replayed (reference), unstated, or measured by a rule no other system shares is not "
                  "ranked there and shows its onset rule instead (spear_metrics.core.onset)")


def onset_tie_note(ties: dict[str, Any]) -> str | None:
    """:data:`ONSET_TIE_NOTE` when a key of ``ties`` left a system unranked for its onset rule."""
    return ONSET_TIE_NOTE if any((t or {}).get("unranked") for t in ties.values()) else None


def tie_cell(ties: dict[str, Any], key: str, system: str) -> str:
    """What a leaderboard shows beside ``system``'s value of ``key``: its mark (★ best, ≈ tied
    with the best) and rank interval, e.g. ``"≈ rank 1-2"``; ``""`` without a tie group;
    ``"[question_end]"`` (its onset rule) on an onset-derived key it is not ranked on
    (:func:`leaderboard_ties`)."""
    unranked = (ties.get(key) or {}).get("unranked") or {}
    if system in unranked:  # an onset-derived key this system is not ranked on: its onset rule instead
        return f"[{unranked[system]}]"
    s = (ties.get(key) or {}).get("systems", {}).get(system)
    if not s:
        return ""
    ci = s.get("rank_ci95")
    rank = "" if ci is None else (f"rank {ci[0]}" if ci[0] == ci[1] else f"rank {ci[0]}-{ci[1]}")
    return " ".join(x for x in (s.get("mark") or "", rank) if x)


def results_tie_cells(loaded: Sequence[Any], keys: Sequence[str], *, n_resamples: int = DEFAULT_RESAMPLES,
                      seed: int = 0, human: dict[str, Any] | None = None) -> dict[str, dict[str, str]]:
    """The tie marks of loaded results datasets (:class:`spear_metrics.results.Results`: their
    per-sample ``samples`` tables) on a leaderboard: ``{source: {key: tie_cell}}``
    (:func:`leaderboard_ties` by conversation, ``human``: the human values "closer to human"
    keys are judged against, :func:`tie_cell`); empty with fewer than 2 datasets.
    Each dataset's onset rule (its summary's ``onset_kind``) decides whether it is ranked on the
    onset-derived keys (:func:`leaderboard_ties` ``onset_kinds``: a placed onset shows ``[rule]``).
    Only the columns the tests need are read (no audio)."""
    rows_by: dict[str, list[dict[str, Any]]] = {}
    for res in loaded:
        frame = res.samples
        cols = [c for c in ("audio_path", "conversation_id", "status", *keys) if c in frame.columns]
        rows_by[res.source] = [{k: clean_value(v) for k, v in r.items()} for r in frame[cols].to_dict("records")]
    if len(rows_by) < 2:
        return {}
    kinds = {res.source: (getattr(res, "summary", None) or {}).get("onset_kind") or "unstated" for res in loaded}
    ties = leaderboard_ties(rows_by, keys, n_resamples=n_resamples, seed=seed, human=human, onset_kinds=kinds)
    return {src: {k: tie_cell(ties, k, src) for k in ties} for src in rows_by}
