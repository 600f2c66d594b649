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
import math
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
        from spear_metrics.results.validate import ResultsError, read_summary_file

        try:
            obj = read_summary_file(sp, where="")
            if isinstance(obj, dict):
                summary = obj
            else:
                problems.append("summary.json is not a JSON object")
        except ResultsError as e:
            problems.append(str(e).removeprefix(": ")[:200])
    rows: list[dict[str, Any]] = []
    for n, line in enumerate((d / "per_sample.jsonl").read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: a line nested past the parser's depth
            problems.append(f"per_sample.jsonl line {n} is not valid JSON (left out)")
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("row"), int):
            problems.append(f"per_sample.jsonl line {n} is not a row object (left out)")
            continue
        obj.pop("timings", None)
        rows.append(obj)
    return summary, rows, problems


#: summary.json fields the writers give as JSON objects (every benchmark's; the pages read them as such)
SUMMARY_OBJECTS = frozenset({"metric_versions", "models", "options", "metric_keys", "bootstrap", "data", "judge_calls",
                             "subsets", "significance", "behaviour_ratios_upstream", "cache"})


def _drop_misshapen_fields(summary: dict[str, Any], problems: list[str]) -> None:
    """Remove, in place, the summary fields that are not of the shape every writer gives them (an
    object in :data:`SUMMARY_OBJECTS`, ``metrics`` a list of names), with one problem line: the
    report then says the field is missing instead of failing on it."""
    bad = [k for k in SUMMARY_OBJECTS if k in summary and summary[k] is not None and not isinstance(summary[k], dict)]
    metrics = summary.get("metrics")
    if metrics is not None and not (isinstance(metrics, list) and all(isinstance(m, str) for m in metrics)):
        bad.append("metrics")
    for k in sorted(bad):
        del summary[k]
    if bad:
        problems.append(f"summary.json fields of the wrong shape left out: {', '.join(sorted(bad))}")


def _blank_bad_values(rows: list[dict[str, Any]], metrics: tuple[str, ...], problems: list[str]) -> None:
    """Per-sample values a report cannot use as they are, made missing (``None``) in place, with one
    problem line: under a numeric column (a metric's key, a metadata time) anything but a finite
    number (text, NaN, inf, objects), and under a VAD evidence column (``*_segments_s``) anything
    but ``[start, end]`` pairs (other columns are left as they are: a benchmark's rows may hold
    objects). The tables, tests and plots then see a missing value, never a string where a number goes."""
    from spear_metrics.core.columns import find_column
    from spear_metrics.results.validate import METADATA_FLOATS, value_kind

    bad: list[str] = []
    for r in rows:
        for k, v in r.items():
            if v is None or k == "row" or k.endswith("_audio"):
                continue
            kind = value_kind(v)
            numeric = k in METADATA_FLOATS or find_column(k, metrics) is not None
            if ((numeric and kind != "number")
                    or (k.endswith("_segments_s") and kind not in ("segments", "empty"))):
                r[k] = None
                bad.append(f"row {r['row']} {k!r}")
    if bad:
        problems.append(f"{len(bad)} per-sample value(s) of the wrong kind shown as missing: {', '.join(bad[:5])}"
                        + (" ..." if len(bad) > 5 else ""))


def _agent_of(results: Path) -> str | None:
    """The agent that answered a scored run's metadata: ``agent`` of ``run_info.json`` beside the
    metadata CSV the run scored (written by ``spearbench infer``); ``None`` when the run's record,
    that file or the key is missing (the dataset's own human answers have none)."""
    from spear_metrics.commands import read_run_info
    from spear_metrics.core.scoring import scored_metadata

    metadata = scored_metadata(results)
    agent = read_run_info(metadata.parent).get("agent") if metadata is not None else None
    return agent.strip() or None if isinstance(agent, str) else None


def _conversations_from_metadata(results: Path, rows: list[dict[str, Any]]) -> None:
    """Give the rows of a scored folder their ``conversation_id`` from the metadata CSV the run
    scored (:func:`spear_metrics.core.scoring.scored_metadata`; ``per_sample.jsonl`` keeps none),
    so that paired comparisons and tie groups resample the conversations ``summary.json``
    resampled, also on clips whose names do not carry SPEAR's ``V_S_I`` id. A row takes the id
    only when the metadata row of its index names the same clip; nothing is changed when the CSV
    is gone or unreadable (clip names then decide, :func:`spear_metrics.core.stats.conversation_of`)."""
    if not rows or all(str(r.get("conversation_id") or "").strip() for r in rows):
        return
    from spear_datasets.schema import MetadataError, read_metadata
    from spear_metrics.core.scoring import scored_metadata

    path = scored_metadata(results)
    if path is None:
        return
    try:
        meta = read_metadata(path, required=("audio_path",))
    except (MetadataError, OSError):
        return
    for r in rows:
        i = r.get("row")
        if str(r.get("conversation_id") or "").strip() or not isinstance(i, int) or not 0 <= i < len(meta):
            continue
        cells = meta[i]
        same = Path(str(cells.get("audio_path") or "")).name == Path(str(r.get("audio_path") or "")).name
        if same and str(cells.get("conversation_id") or "").strip():
            r["conversation_id"] = str(cells["conversation_id"]).strip()


def scored_rows(results: str | Path) -> list[dict[str, Any]]:
    """The per-sample rows of a scored folder (``per_sample.jsonl``; unreadable lines left out)
    with their ``conversation_id`` from the metadata the run scored
    (:func:`_conversations_from_metadata`): what tie groups and comparisons pair and resample."""
    rows = _read_raw_folder(Path(results))[1]
    _conversations_from_metadata(Path(results), rows)
    return rows


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
        _conversations_from_metadata(d, rows)
    else:
        try:
            res = load_results(src)
        except ResultsError as e:
            if not (d.is_dir() and (d / "data").is_dir()):
                raise RunLoadError(str(e)) from None
            problems.append(str(e))  # a results dataset that fails validation: read it anyway
            import pandas as pd

            try:
                from spear_metrics.results.validate import read_summary_file

                summary = read_summary_file(d / "summary.json", where=src)
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
    summary = summary if isinstance(summary, dict) else {}
    _drop_misshapen_fields(summary, problems)
    _blank_bad_values(rows, tuple(summary.get("metrics") or ()), problems)
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


@dataclass(frozen=True)
class TieSpec:
    """What a benchmark's leaderboard tells :func:`leaderboard_ties` about its per-sample rows:
    the one place where tie groups of every leaderboard are computed, each benchmark giving only
    this (and its key list).

    Attributes:
        row_id: row -> its sample id, the pairing of the systems' rows (SPEAR: :func:`input_id`;
            FDB: the sample id; SpeechRole: ``(mode, role, dialogue)``; Dynamic-SUPERB:
            ``(instance, file)``).
        better: key -> its direction of "better" (``"higher"``, ``"lower"``, ``"closer_to_human"``;
            anything else: no tie group for that key).
        unit: what a resample draws, as the rule names it (``"conversation"``, ``"sample"``,
            ``"dialogue"``, ``"row"``...).
        cluster: row -> its cluster (``None`` = its own); ``None``: every row is its own.
        stratum: row -> its stratum (clusters drawn within it, e.g. SpeechRole's role), named
            ``stratum_name``; ``None``: one stratum.
        value: ``(row, key)`` -> the row's value of the key: a number (the key is a mean) or a
            pair ``(num, den)`` (the key is ``sum(num) / sum(den)``,
            :func:`spear_metrics.core.ties.value_parts`); ``None``: ``row.get(key)``.
        columns: the per-sample columns the rows need besides the keys (what
            :func:`results_rows` reads of a results dataset); ``None``: every column but audio.
    """

    row_id: Callable[[dict[str, Any]], Any]
    better: Callable[[str], str | None]
    unit: str = "row"
    cluster: Callable[[dict[str, Any]], Any] | None = None
    stratum: Callable[[dict[str, Any]], Any] | None = None
    stratum_name: str = "stratum"
    value: Callable[[dict[str, Any], str], Any] | None = None
    columns: tuple[str, ...] | None = None


def _declared_better(key: str) -> str | None:
    from spear_metrics.core.columns import find_column

    col = find_column(key)
    return None if col is None else col.better


def spear_tie_spec(unit: str = "conversation") -> TieSpec:
    """SPEAR's :class:`TieSpec`: rows paired by :func:`input_id`, clustered by
    :func:`spear_metrics.core.stats.conversation_of` (``unit`` ``"conversation"``) or not
    (``"row"``), each key's direction as declared (:func:`spear_metrics.core.columns.find_column`)."""
    return TieSpec(row_id=input_id, better=_declared_better, unit=unit,
                   cluster=conversation_of if unit == "conversation" else None,
                   columns=("audio_path", "conversation_id", "status"))


def leaderboard_ties(rows_by_system: dict[str, Sequence[dict[str, Any]]], keys: Sequence[str], *,
                     n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0, unit: str = "conversation",
                     human: dict[str, Any] | None = None, spec: TieSpec | None = None,
                     onset_kinds: dict[str, str] | None = None) -> dict[str, Any]:
    """Tie groups and rank intervals of a leaderboard, key by key
    (:func:`spear_metrics.core.ties.tie_groups`, ``common=True``: only the rows every system
    has a value for): systems' ``ok`` rows (``status`` absent counts as ok) paired by
    ``spec.row_id``, clustered and stratified as ``spec`` says (default :func:`spear_tie_spec` of
    ``unit``).

    A key gets a tie group when its direction of "better" (``spec.better``) is ``higher`` or
    ``lower``, or ``closer_to_human`` and ``human`` (the human answers' values, e.g. their summary
    or the published human row) has a number for it, and at least two systems have per-row
    values for it (the tests run on those per-row values); other keys are left out.

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
    from spear_metrics.core.onset import onset_derived
    from spear_metrics.core.stats import as_number
    from spear_metrics.core.ties import tie_groups, value_parts

    spec = spec or spear_tie_spec(unit)
    get = spec.value or (lambda r, k: r.get(k))
    ok = {name: [r for r in rows if r.get("status", "ok") == "ok"] for name, rows in rows_by_system.items()}
    ids = {name: [spec.row_id(r) for r in rows] for name, rows in ok.items()}  # each row's id, once
    cluster: dict[Any, Any] = {}
    stratum: dict[Any, Any] = {}
    for name, rows in ok.items():
        if spec.cluster is None and spec.stratum is None:  # every row its own cluster
            cluster.update(zip(ids[name], ids[name]))
            continue
        for i, r in zip(ids[name], rows):
            cluster.setdefault(i, spec.cluster(r) if spec.cluster is not None else i)
            if spec.stratum is not None:
                stratum.setdefault(i, spec.stratum(r))
    out: dict[str, Any] = {}
    for key in keys:
        better = spec.better(key)
        target = as_number((human or {}).get(key))
        if not (better in ("higher", "lower") or (better == "closer_to_human" and target is not None)):
            continue
        values = {name: {i: v for i, r in zip(ids[name], rows) if (v := value_parts(get(r, key))) is not None}
                  for name, rows in ok.items()}  # (num, den) pairs: tie_groups reads them as they are
        values = {n: v for n, v in values.items() if v}
        if len(values) < 2:
            continue

        def ties_of(vals: dict[str, dict]) -> dict[str, Any]:
            return tie_groups(vals, better=better, target=target, cluster=cluster.get, unit=spec.unit,
                              stratum=stratum.get if spec.stratum is not None else None,
                              stratum_name=spec.stratum_name, common=True, n_resamples=n_resamples, seed=seed,
                              parsed=True)

        if onset_kinds is None or not onset_derived(key):
            out[key] = ties_of(values)
            continue
        out[key] = _onset_ties(values, {n: onset_kinds.get(n) or "unstated" for n in values}, ties_of, spec.unit)
    return out


def _onset_ties(values: dict[str, dict], kinds: dict[str, str], ties_of: Callable[[dict[str, dict]], dict[str, Any]],
                unit: str) -> dict[str, Any]:
    """:func:`leaderboard_ties` of one onset-derived key: each measured onset rule shared by two
    systems or more ranked within itself, every other system ``unranked`` with its rule."""
    from spear_metrics.core.onset import MEASURED_ONSET_KINDS
    from spear_metrics.core.stats import ALPHA, SMALL_SAMPLE
    from spear_metrics.core.ties import TIE_RULE

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
               "systems": {n: {**e, "onset_group": k} for k, r in result.items() for n, e in r["systems"].items()}}
    out["groups"] = result
    out["unranked"] = {n: k for n, k in kinds.items() if k not in ranked}
    out["onset_note"] = ONSET_TIE_NOTE
    return out


#: what a leaderboard says under a table whose onset-derived keys left systems unranked
ONSET_TIE_NOTE = ("[rule]: a key computed from the answer's onset (latency_ms, interrupted_time_ms, interruptions_%, "
                  "turn_taking_naturalness...) ranks only systems whose onset is measured, each against the systems "
                  "measured by the same rule; a system whose onset is placed (question_end: a cascade at 0 ms; "
                  "fixed_delay), replayed (reference), unstated, or measured by a rule no other system shares is not "
                  "ranked there and shows its onset rule instead (docs/statistics.md: onset rules)")


def onset_tie_note(ties: dict[str, Any]) -> str | None:
    """:data:`ONSET_TIE_NOTE` when a key of ``ties`` left a system unranked for its onset rule."""
    return ONSET_TIE_NOTE if any((t or {}).get("unranked") for t in ties.values()) else None


def tie_cell(ties: dict[str, Any], key: str, system: str) -> str:
    """What a leaderboard shows beside ``system``'s value of ``key``: its mark (★ best, ≈ tied
    with the best) and rank interval, e.g. ``"≈ rank 1-2"``; ``""`` without a tie group;
    ``"[question_end]"`` (its onset rule) on an onset-derived key it is not ranked on
    (:func:`leaderboard_ties`); ``"★ rank 1 among frame"`` when several measured onset rules are
    each ranked apart on the key (one best per rule)."""
    unranked = (ties.get(key) or {}).get("unranked") or {}
    if system in unranked:  # an onset-derived key this system is not ranked on: its onset rule instead
        return f"[{unranked[system]}]"
    s = (ties.get(key) or {}).get("systems", {}).get(system)
    if not s:
        return ""
    ci = s.get("rank_ci95")
    rank = "" if ci is None else (f"rank {ci[0]}" if ci[0] == ci[1] else f"rank {ci[0]}-{ci[1]}")
    # several measured onset rules each ranked apart: the mark says within which (one ★ per rule)
    group = f"among {s['onset_group']}" if s.get("onset_group") else ""
    return " ".join(x for x in (s.get("mark") or "", rank, group) if x)


def marked(text: str, tie: str = "", summary: dict[str, Any] | None = None, key: str | None = None, *,
           rate: bool | None = None) -> str:
    """A leaderboard cell with its marks, as every leaderboard writes it: ``text`` (the value,
    its interval), then ``tie`` (:func:`tie_cell`), then the few-events mark of ``summary[key]``
    (:func:`spear_metrics.core.summary.few_events`; ``rate`` as there), e.g.
    ``"0.400 [0.100, 0.700] ★ rank 1-2 (few events: n = 5)"``."""
    from spear_metrics.core.summary import few_events

    few = few_events(summary, key, rate=rate) if summary is not None and key is not None else ""
    return " ".join(x for x in (text, tie, few) if x)


def results_rows(loaded: Sequence[Any], keys: Sequence[str], spec: TieSpec | None = None
                 ) -> dict[str, list[dict[str, Any]]]:
    """The per-sample rows of loaded results datasets (:class:`spear_metrics.results.Results`:
    their ``samples`` tables), ``{source: [row]}``: the ``keys`` and ``spec.columns`` (default
    :func:`spear_tie_spec`'s) that the table has, every column but audio when ``spec.columns`` is
    ``None``; values cleaned (:func:`spear_metrics.core.records.clean_value`: NaN -> ``None``)."""
    spec = spec or spear_tie_spec()
    out: dict[str, list[dict[str, Any]]] = {}
    for res in loaded:
        frame = res.samples
        want = (*spec.columns, *keys) if spec.columns is not None else tuple(
            c for c in frame.columns if c not in set(getattr(res, "audio_columns", None) or ()) and not c.endswith("_audio"))
        cols = list(dict.fromkeys(c for c in want if c in frame.columns))
        out[res.source] = _clean_records(frame, cols)
    return out


def _clean_records(frame: Any, cols: Sequence[Any] | None = None) -> list[dict[str, Any]]:
    """``[{column: clean_value(value)}]`` of ``frame``'s rows over ``cols`` (default all), as
    ``frame[cols].to_dict("records")`` cleaned value by value
    (:func:`~spear_metrics.core.records.clean_value`), built column by column: numeric numpy
    columns as Python numbers (``tolist``; a non-finite float -> ``None``), object columns and
    ``str`` columns (missing = NaN) value by value, any other column through ``to_dict``."""
    import numpy as np
    import pandas as pd

    cols = list(frame.columns if cols is None else cols)
    if not cols:
        return [{} for _ in range(len(frame))]
    if not frame.columns.is_unique:  # a repeated column name: to_dict's own reading of it
        return [{k: clean_value(v) for k, v in r.items()} for r in frame[cols].to_dict("records")]
    values: dict[Any, list[Any]] = {}
    for c in cols:
        ser = frame[c]
        dt = ser.dtype
        if isinstance(dt, np.dtype) and dt.kind in "iub":
            values[c] = ser.to_numpy().tolist()
        elif isinstance(dt, np.dtype) and dt.kind == "f":
            values[c] = [x if math.isfinite(x) else None for x in ser.to_numpy().tolist()]
        elif isinstance(dt, np.dtype) and dt.kind == "O":
            values[c] = [v if type(v) is str else clean_value(v) for v in ser.tolist()]
        elif isinstance(dt, pd.StringDtype) and getattr(dt, "na_value", pd.NA) is not pd.NA:  # str: missing = NaN
            values[c] = [v if type(v) is str else clean_value(v) for v in ser.to_numpy(dtype=object).tolist()]
    rest = [c for c in cols if c not in values]
    if rest:
        recs = frame[rest].to_dict("records")
        for c in rest:
            values[c] = [clean_value(r[c]) for r in recs]
    return [dict(zip(cols, t)) for t in zip(*(values[c] for c in cols))]


def rows_tie_cells(rows_by_system: dict[str, Sequence[dict[str, Any]]], keys: Sequence[str], *,
                   spec: TieSpec | None = None, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                   human: dict[str, Any] | None = None, onset_kinds: dict[str, str] | None = None
                   ) -> dict[str, dict[str, str]]:
    """``{system: {key: tie_cell}}`` of the systems' rows (:func:`leaderboard_ties` with ``spec``
    and ``onset_kinds``, :func:`tie_cell`); empty with fewer than 2 systems."""
    if len(rows_by_system) < 2:
        return {}
    ties = leaderboard_ties(rows_by_system, keys, n_resamples=n_resamples, seed=seed, human=human, spec=spec,
                            onset_kinds=onset_kinds)
    return {name: {k: tie_cell(ties, k, name) for k in ties} for name in rows_by_system}


def results_tie_cells(loaded: Sequence[Any], keys: Sequence[str], *, n_resamples: int = DEFAULT_RESAMPLES,
                      seed: int = 0, human: dict[str, Any] | None = None, spec: TieSpec | None = None
                      ) -> dict[str, dict[str, str]]:
    """The tie marks of loaded results datasets (:class:`spear_metrics.results.Results`: their
    per-sample ``samples`` tables) on a leaderboard: ``{source: {key: tie_cell}}``
    (:func:`results_rows`, then :func:`rows_tie_cells` with ``spec``, default SPEAR's by
    conversation; ``human``: the human values "closer to human" keys are judged against); empty
    with fewer than 2 datasets. Only the columns the tests need are read (no audio).
    On SPEAR's leaderboard (``spec`` ``None``) each dataset's onset rule (its summary's
    ``onset_kind``) decides whether it is ranked on the onset-derived keys
    (:func:`leaderboard_ties` ``onset_kinds``: a placed onset shows ``[rule]``)."""
    if len(loaded) < 2:
        return {}
    kinds = None if spec is not None else {
        res.source: (getattr(res, "summary", None) or {}).get("onset_kind") or "unstated" for res in loaded}
    return rows_tie_cells(results_rows(loaded, keys, spec), keys, spec=spec, n_resamples=n_resamples, seed=seed,
                          human=human, onset_kinds=kinds)
