"""FDB v2 scoring: ASR of both channels, the judge with upstream's prompts, upstream's
aggregates (``DanielLin94144/Full-Duplex-Bench`` ``v2/eval/`` and ``v2/scoring/``).

Pipeline per conversation folder (``A.wav`` examiner, ``B.wav`` examinee):

1. ASR (upstream ``v2/eval/asr_batch.py``: NeMo ``nvidia/parakeet-tdt-0.6b-v2``, word timestamps;
   audio first trimmed to 120 s, ``trim_combined_wavs.py``): here the project's packaged Whisper
   (:func:`spear_metrics.core.asr.load_asr`, ``--asr``) with word timestamps, recorded in each
   transcript's ``asr_model``; written as upstream's ``A.json``/``B.json`` (``{"text", "chunks":
   [{"text", "timestamp": [start_s, end_s]}]}``); existing files are used as upstream does.
2. The judge prompt, built exactly as ``v2/eval/eval_single_item.py`` ``build_full_prompt`` does
   from ``eval_prompts.json`` (upstream's file, CC BY-NC 4.0, not shipped: ``--eval-prompts``),
   the task's staged reveal, both transcripts' text and the examinee's word segments
   (``[start, end]: word``, 2 decimals). One user message; upstream samples at temperature 0.2.
3. The reply, read twice. As upstream's ``scoring/parse.py`` reads it
   (:func:`spear_metrics.full_duplex_v2.parse.parse_reply`: every score coerced with
   ``int(float(x))``, no range check, several fenced blocks merged): the published keys come from
   this reading. Strictly (:func:`parse_judge_reply`): upstream's format is a JSON object
   ``{"Turn-taking event and score": [[[start, end], turn_taking_fluency, instruction_following], ...],
   "Task-specific score": n}``, or the literal shape of its output-format prompt
   (``[start, end]: tt, if``) inside that key's list; every event must be two finite times and two
   integer scores 1-5, else it is a failed event with its reason: the project's ``strict_*`` keys.
   A reply from which neither reading gets anything (no event, no task score, no events list) is
   malformed: the judge is asked again, then the unit fails (upstream would write an empty row,
   which adds nothing to any mean).
4. Per task (``scoring/score.py``): ``n_events`` = the events whose two scores are numbers (times
   unchecked), ``avg_turn_taking`` / ``avg_instruction_following`` = mean over them
   (event-weighted), ``avg_task_specific`` = the task score when it is a number (``n_files`` = 1),
   unrounded (upstream's CSV rounds to 3 decimals). The binned curve (``scoring/score_time.py``):
   15 s bins up to 120 s; each of those events with ``end > start`` adds ``score * overlap`` and
   ``overlap`` to every bin it overlaps; a bin's value is ``sum(score * overlap) / sum(overlap)``
   (``TT[0-15]``, ``IF[0-15]``...; null for a bin no event overlaps; times past 120 s fall in no
   bin). Split means (project keys; upstream's code stops at per-task rows): the mean of the
   per-task values over the split's conversations, with a percentile bootstrap 95 % interval over
   conversations.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from spear_datasets.files import parse_json, read_limited

EVENTS_KEY = "Turn-taking event and score"
TASK_KEY = "Task-specific score"
#: upstream's judge prompts file keys (``eval_single_item.py`` ``load_eval_prompts``)
PROMPT_KEYS = ("system_prompt", "turn_taking_fluency_prompt", "multi_turn_instruction_following_prompt",
               "task_specific_prompts", "output_format_prompt")
#: sha256 of upstream's ``v2/eval/eval_prompts.json`` at commit d7336bd (recorded beside the run's)
UPSTREAM_EVAL_PROMPTS_SHA256 = "3c1540512de3fce1ed804d842a2f262d815ca37acfe626f3a1712e7765ee34c9"
#: upstream's judge (``run_evaluation.sh`` / ``eval_single_item.py`` default) and sampling
UPSTREAM_JUDGE_MODEL = "gemini-2.5-flash-preview-09-2025"  # scripts' default; v2/.env.example sets gemini-2.5-flash
UPSTREAM_JUDGE_TEMPERATURE = 0.2
UPSTREAM_JUDGE_MAX_TOKENS = 20000
#: ``score_time.py``'s fixed bins: 15 s up to 120 s
BINS = tuple((float(i), float(i + 15)) for i in range(0, 120, 15))
#: upstream trims A/B/combined.wav to this many seconds before ASR (``trim_combined_wavs.py``)
TRIM_S = 120.0
SCORE_RANGE = (1, 5)
#: largest transcript file read (bytes)
MAX_TRANSCRIPT_BYTES = 16 * 2 ** 20
#: largest eval_prompts.json read (bytes); upstream's is a few kB
MAX_PROMPTS_BYTES = 16 * 2 ** 20
#: largest judge reply parsed (characters)
MAX_REPLY_CHARS = 200_000


def _keys() -> tuple:
    from spear_metrics.core.dimension import MetricKey

    g = "Full-Duplex-Bench v2"
    per_bin = tuple(MetricKey(f"{p}[{int(a)}-{int(b)}]", "1-5", "higher",
                              f"{what} in the {int(a)}-{int(b)} s bin: sum(score x overlap) / sum(overlap) over the task's "
                              "events overlapping the bin (scoring/score_time.py); null for an empty bin",
                              group=g, published=True)
                    for a, b in BINS for p, what in (("TT", "turn-taking fluency"), ("IF", "instruction following")))
    return (
        MetricKey("n_files", "count", "higher", "1 when the judge gave a numeric task-specific score, else 0 "
                  "(scoring/score.py)", group=g, published=True, order=1),
        MetricKey("n_events", "count", "higher", "valid turn-taking events the judge rated (scoring/score.py)",
                  group=g, published=True, order=2),
        MetricKey("avg_turn_taking", "1-5", "higher", "mean turn-taking fluency over the task's events "
                  "(scoring/score.py; event-weighted)", group=g, published=True, order=3),
        MetricKey("avg_instruction_following", "1-5", "higher", "mean multi-turn instruction following over the "
                  "task's events (scoring/score.py)", group=g, published=True, order=4),
        MetricKey("avg_task_specific", "1-5", "higher", "the judge's task-specific score (entity tracking, correction "
                  "handling or safety; the Daily split has no rubric) (scoring/score.py)", group=g, published=True,
                  order=5),
        *per_bin,
        MetricKey("n_failed_events", "count", "lower", "events of the judge's reply that failed the strict check "
                  "(times, integer scores 1-5); left out of the strict_* means", group=g),
        MetricKey("strict_n_events", "count", "higher", "project: events that pass the strict check (two finite "
                  "times, end not before start, integer scores 1-5)", group=g),
        MetricKey("strict_avg_turn_taking", "1-5", "higher", "project: avg_turn_taking over the strict events only "
                  "(upstream counts any coerced score, 0 or 9 included)", group=g),
        MetricKey("strict_avg_instruction_following", "1-5", "higher", "project: avg_instruction_following over the "
                  "strict events only", group=g),
        MetricKey("strict_avg_task_specific", "1-5", "higher", "project: the task score when it is an integer 1-5 "
                  "(upstream counts any number)", group=g),
    )


#: the per-task keys of ``summary.json`` ``per_task`` rows (published: named and computed as upstream's
#: scoring/score.py and score_time.py)
KEYS = _keys()


class ScoreSetupError(ValueError):
    """A whole-run problem (one line)."""


def load_eval_prompts(path: str | os.PathLike) -> tuple[dict[str, Any], str]:
    """Read upstream's ``eval_prompts.json`` -> ``(prompts, sha256)``.

    Raises:
        ScoreSetupError: unreadable, not JSON, or a required key missing (upstream's check).
    """
    p = Path(path)
    try:
        data = read_limited(p, MAX_PROMPTS_BYTES)  # never more than the limit in memory
        obj = parse_json(data)
    except (OSError, ValueError) as e:
        raise ScoreSetupError(f"cannot read the judge prompts {p}: {' '.join(str(e).split())[:200]}") from None
    if not isinstance(obj, dict):
        raise ScoreSetupError(f"{p} is not a JSON object")
    missing = [k for k in PROMPT_KEYS if k not in obj]
    if missing:
        raise ScoreSetupError(f"{p} lacks {', '.join(missing)} (upstream's v2/eval/eval_prompts.json shape)")
    return obj, hashlib.sha256(data).hexdigest()


def subset_id(split: str) -> str:
    """Upstream's ``normalize_subset_name``: ``daily``, ``correction``, ``entity_tracking``, ``safety``.

    Raises:
        ValueError: another split name.
    """
    s = split.strip().lower().replace(" ", "")
    ids = {"daily": "daily", "correction": "correction", "corrections": "correction", "entitytracking": "entity_tracking",
           "entity_tracking": "entity_tracking", "safety": "safety"}
    if s not in ids:
        raise ValueError(f"unknown split {split!r}: one of Daily, Correction, EntityTracking, Safety")
    return ids[s]


def task_specific_prompt(prompts: dict[str, Any], split: str) -> Optional[str]:
    """The split's task-specific rubric (``None`` for Daily), as upstream's ``get_task_specific_prompt``.

    Raises:
        ValueError: no rubric of that id in the prompts file.
    """
    sid = subset_id(split)
    if sid == "daily":
        return None
    for item in prompts.get("task_specific_prompts") or []:
        if isinstance(item, dict) and item.get("id") == sid:
            return (item.get("prompt") or "").strip() or None
    raise ValueError(f"task_specific_prompts has no id {sid!r}")


def segment_lines(chunks: Sequence[dict[str, Any]]) -> str:
    """Upstream's ``format_chunks_as_lines``: ``[start, end]: text`` (2 decimals) per chunk."""
    lines = []
    for ch in chunks:
        ts = ch.get("timestamp")
        content = ch.get("text", "")
        if isinstance(ts, list) and len(ts) == 2 and all(isinstance(x, (int, float)) for x in ts):
            lines.append(f"[{ts[0]:.2f}, {ts[1]:.2f}]: {content}")
        elif content:
            lines.append(content)
    return "\n".join(lines)


def build_judge_prompt(prompts: dict[str, Any], split: str, staged_reveal: dict[str, str], transcript_a: dict[str, Any],
                       transcript_b: dict[str, Any]) -> str:
    """The judge's prompt, section for section as upstream's ``build_full_prompt``
    (``v2/eval/eval_single_item.py``); transcripts in upstream's ``A.json``/``B.json`` shape."""
    sections = ["SYSTEM INSTRUCTION:\n" + prompts["system_prompt"].strip(),
                "TURN-TAKING FLUENCY RUBRIC:\n" + prompts["turn_taking_fluency_prompt"].strip(),
                "MULTI-TURN INSTRUCTION-FOLLOWING RUBRIC:\n" + prompts["multi_turn_instruction_following_prompt"].strip()]
    tsp = task_specific_prompt(prompts, split)
    if tsp:
        sections.append("TASK-SPECIFIC RUBRIC:\n" + tsp)
    sections.append("OUTPUT FORMAT:\n" + prompts["output_format_prompt"].strip())
    sections.append("\n".join(["Dataset staged goals (T1–T4):"] + [f"{k}: {staged_reveal.get(k, '')}" for k in ("T1", "T2", "T3", "T4")]))
    sections.append("\n".join(["Transcript summary:", "Channel A (Examiner) summary:", transcript_a.get("text") or "", "",
                               "Channel B (Examinee) summary:", transcript_b.get("text") or "", "",
                               "Channel B (Examinee) segments with timestamps:",
                               segment_lines(transcript_b.get("chunks") or [])]))
    sections.append("Constraints:\n- Keep each evaluation output about ~100 words.\n"
                    "- Follow the JSON shape exactly as in OUTPUT FORMAT.\n"
                    "- Use time ranges from the provided Channel B timestamps.\n")
    return "\n\n".join(s for s in sections if s)


# ----------------------------------------------------------------------------- reply parsing


@dataclass
class Judgement:
    """A parsed judge reply: ``events`` ``[(start_s, end_s, turn_taking, instruction_following)]``
    (valid only), ``failed_events`` ``[(entry text, reason)]``, ``task_score`` (int 1-5 or ``None``)
    and ``task_score_reason`` when it is ``None``."""

    events: list[tuple[float, float, int, int]] = field(default_factory=list)
    failed_events: list[tuple[str, str]] = field(default_factory=list)
    task_score: Optional[int] = None
    task_score_reason: Optional[str] = None


_FENCED = re.compile(r"```(?:json|JSON)?\s*([\s\S]*?)\s*```")
_NUM = r"[+-]?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?"
_COLON_EVENT = re.compile(rf"^\[\s*({_NUM})\s*,\s*({_NUM})\s*\]\s*:\s*(\S+?)\s*,\s*(\S+?)\s*$")


def _finite(v: int | float) -> bool:
    """``math.isfinite`` that is ``False`` for an int past the float range (400 digits) instead
    of raising ``OverflowError``."""
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _score(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{what} {v!r} is not a number")
    if not _finite(v) or v != int(v):
        raise ValueError(f"{what} {v!r} is not an integer")
    if not SCORE_RANGE[0] <= int(v) <= SCORE_RANGE[1]:
        raise ValueError(f"{what} {int(v)} is outside {SCORE_RANGE[0]}-{SCORE_RANGE[1]}")
    return int(v)


def _event(item: Any) -> tuple[float, float, int, int]:
    if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], list) and len(item[0]) == 2):
        raise ValueError("not [[start, end], turn_taking, instruction_following]")
    s, e = item[0]
    for t in (s, e):
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not _finite(t) or t < 0:
            raise ValueError(f"time {t!r} is not a non-negative number of seconds")
    if e < s:
        raise ValueError(f"end {e} before start {s}")
    return float(s), float(e), _score(item[1], "turn-taking score"), _score(item[2], "instruction-following score")


def _json_number(tok: str) -> Any:
    try:
        return json.loads(tok)
    except (ValueError, RecursionError):
        return tok


def _colon_events(body: str) -> list[Any]:
    """Entries ``[s, e]: tt, if`` of the output-format prompt's literal shape -> list of items
    (a parsed event list, or ``("raw", text)`` for an entry that does not match)."""
    entries: list[Any] = []
    i, n = 0, len(body)
    while i < n:
        while i < n and body[i] in " \t\r\n,":
            i += 1
        if i >= n:
            break
        j = body.find("[", i + 1)
        # an entry runs to the next "[" that starts a new "[s, e]:" (or to the end)
        while j != -1 and not re.match(rf"\[\s*{_NUM}\s*,\s*{_NUM}\s*\]\s*:", body[j:]):
            j = body.find("[", j + 1)
        text = body[i:j if j != -1 else n].strip().rstrip(",").strip()
        m = _COLON_EVENT.match(text)
        if m:
            entries.append([[_json_number(m.group(1)), _json_number(m.group(2))], _json_number(m.group(3)),
                            _json_number(m.group(4))])
        else:
            entries.append(("raw", text))
        i = j if j != -1 else n
    return entries


def _matching(text: str, start: int) -> int:
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "[":
            depth += 1
        elif text[i] == "]":
            depth -= 1
            if depth == 0:
                return i
    return -1


def parse_judge_reply(text: Any) -> Judgement:
    """Parse one judge reply in upstream's format, strictly (module docstring, step 3).

    Returns:
        :class:`Judgement` (events that fail validation are in ``failed_events`` with a reason).

    Raises:
        ValueError: no events list could be read at all (garbage, no ``Turn-taking event and
            score`` key, over :data:`MAX_REPLY_CHARS`): the judgement fails.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("empty reply")
    if len(text) > MAX_REPLY_CHARS:
        raise ValueError(f"reply of {len(text)} characters is over the {MAX_REPLY_CHARS}-character limit")
    blocks = [m.group(1) for m in _FENCED.finditer(text) if EVENTS_KEY in m.group(1)] or [text.strip()]
    block = blocks[-1]
    items: Optional[list[Any]] = None
    task_raw: Any = None
    has_task = False
    try:
        obj = json.loads(block, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except (ValueError, RecursionError):  # RecursionError: a reply nested past the parser's depth
        obj = None
    if obj is not None:
        if not isinstance(obj, dict):
            raise ValueError(f"reply is JSON {type(obj).__name__}, not an object")
        if EVENTS_KEY not in obj:
            raise ValueError(f"reply lacks {EVENTS_KEY!r}")
        if not isinstance(obj[EVENTS_KEY], list):
            raise ValueError(f"{EVENTS_KEY!r} is not a list")
        items = obj[EVENTS_KEY]
        has_task, task_raw = TASK_KEY in obj, obj.get(TASK_KEY)
    else:  # the output-format prompt's literal (non-JSON) shape
        k = block.find(f'"{EVENTS_KEY}"')
        lb = block.find("[", k) if k != -1 else -1
        rb = _matching(block, lb) if lb != -1 else -1
        if rb == -1:
            raise ValueError(f"reply is neither JSON nor upstream's '{EVENTS_KEY}' list")
        items = _colon_events(block[lb + 1:rb])
        m = re.search(rf'"{TASK_KEY}"\s*:\s*("[^"]*"|[^\s,}}\]]+)', block[rb:])
        if m:
            has_task, task_raw = True, _json_number(m.group(1))
    out = Judgement()
    for item in items:
        if isinstance(item, tuple):
            out.failed_events.append((item[1][:200], "entry is not '[start, end]: turn_taking, instruction_following'"))
            continue
        try:
            out.events.append(_event(item))
        except ValueError as e:
            out.failed_events.append((json.dumps(item)[:200], str(e)))
    if not has_task:
        out.task_score_reason = f"reply lacks {TASK_KEY!r}"
    elif task_raw is None:
        out.task_score_reason = f"{TASK_KEY!r} is null"
    else:
        try:
            out.task_score = _score(task_raw, "task-specific score")
        except ValueError as e:
            out.task_score_reason = str(e)
    return out


# ----------------------------------------------------------------------------- aggregates


def judge_reply_gate(text: Any) -> dict[str, Any]:
    """The judge's reply check (what :meth:`spear_metrics.core.judge.Judge.ask` retries on): the
    reply as upstream's ``parse.py`` reads it (:func:`spear_metrics.full_duplex_v2.parse.parse_reply`).

    Raises:
        ValueError: an empty reply, one over :data:`MAX_REPLY_CHARS`, or one from which neither
            upstream's reading (no event, no task score) nor :func:`parse_judge_reply` gets anything.
    """
    from spear_metrics.full_duplex_v2.parse import parse_reply

    if not isinstance(text, str) or not text.strip():
        raise ValueError("empty reply")
    if len(text) > MAX_REPLY_CHARS:
        raise ValueError(f"reply of {len(text)} characters is over the {MAX_REPLY_CHARS}-character limit")
    up = parse_reply(text)
    if not up[EVENTS_KEY] and TASK_KEY not in up:
        parse_judge_reply(text)  # raises when the strict reading finds no events list either
    return up


def _mean(xs: Sequence[float]) -> Optional[float]:
    return sum(xs) / len(xs) if xs else None


def task_scores(reply: str) -> dict[str, Any]:
    """The per-task row of one judge reply: upstream's (``scoring/score.py`` on ``parse.py``'s
    reading: ``n_files``, ``n_events``, ``avg_turn_taking``, ``avg_instruction_following``,
    ``avg_task_specific``, unrounded, ``None`` where undefined; ``events``: the events it counts,
    ``[start_s, end_s, tt, if]``), and the project's strict reading beside it (``strict_*``,
    ``n_failed_events``, ``failed_events``, ``task_score_reason``; ``strict_reason`` when the
    strict reading refuses the whole reply).

    Raises:
        ValueError: :func:`judge_reply_gate` refuses the reply.
    """
    from spear_metrics.full_duplex_v2.parse import counted_events, task_value

    up = judge_reply_gate(reply)
    ev = counted_events(up)
    task = task_value(up)
    row: dict[str, Any] = {"n_files": 1 if task is not None else 0, "n_events": len(ev),
                           "avg_turn_taking": _mean([e[2] for e in ev]),
                           "avg_instruction_following": _mean([e[3] for e in ev]), "avg_task_specific": task}
    try:
        j = parse_judge_reply(reply)
    except ValueError as e:
        j, why = Judgement(task_score_reason="no strict reading"), str(e)
    else:
        why = None
    row.update({"n_failed_events": len(j.failed_events), "strict_n_events": len(j.events),
                "strict_avg_turn_taking": _mean([e[2] for e in j.events]),
                "strict_avg_instruction_following": _mean([e[3] for e in j.events]),
                "strict_avg_task_specific": float(j.task_score) if j.task_score is not None else None,
                "failed_events": [{"entry": e, "reason": r} for e, r in j.failed_events],
                "task_score_reason": j.task_score_reason, "strict_reason": why,
                "events": [list(e) for e in ev]})
    return row


def bin_label(b: tuple[float, float]) -> str:
    """A time bin ``(start_s, end_s)`` as upstream's column label, e.g. ``"0-15"`` (whole seconds)."""
    return f"{int(b[0])}-{int(b[1])}"


def binned_sums(events: Sequence[tuple[float, float, int, int]], bins: Sequence[tuple[float, float]] = BINS
                ) -> dict[str, list[float]]:
    """``score_time.py``'s per-bin sums: ``tt``/``if`` = sum of score * overlap (s), ``dur`` =
    sum of overlap (s); events with ``end <= start`` are skipped, as upstream."""
    out = {"tt": [0.0] * len(bins), "if": [0.0] * len(bins), "dur": [0.0] * len(bins)}
    for s, e, tt, iff in events:
        if e <= s:
            continue
        for i, (b0, b1) in enumerate(bins):
            ov = max(0.0, min(e, b1) - max(s, b0))
            if ov > 0:
                out["tt"][i] += tt * ov
                out["if"][i] += iff * ov
                out["dur"][i] += ov
    return out


def binned_row(sums: dict[str, list[float]], bins: Sequence[tuple[float, float]] = BINS) -> dict[str, Optional[float]]:
    """``TT[a-b]`` / ``IF[a-b]`` = time-weighted mean per bin (``None`` for a bin no event overlaps)."""
    row: dict[str, Optional[float]] = {}
    for i, b in enumerate(bins):
        d = sums["dur"][i]
        row[f"TT[{bin_label(b)}]"] = sums["tt"][i] / d if d > 0 else None
        row[f"IF[{bin_label(b)}]"] = sums["if"][i] / d if d > 0 else None
    return row


#: the per-task values averaged per split: upstream's three, then the project's strict ones
SPLIT_MEAN_KEYS = ("avg_turn_taking", "avg_instruction_following", "avg_task_specific", "strict_avg_turn_taking",
                   "strict_avg_instruction_following", "strict_avg_task_specific")


def split_summary(rows: Sequence[dict[str, Any]], *, n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Per split and ``all``: the mean over conversations of each per-task value, with a
    percentile bootstrap 95 % interval over conversations (:func:`spear_metrics.core.stats.bootstrap_ci`),
    ``n`` the conversations with a value; and the pooled binned curve (all the split's events)."""
    from spear_metrics.core.stats import bootstrap_ci
    from spear_metrics.full_duplex_v2.tasks import OVERALL

    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["split"], []).append(r)
    groups[OVERALL] = list(rows)
    out: dict[str, Any] = {}
    for name, rs in groups.items():
        g: dict[str, Any] = {"n_conversations": len(rs)}
        for key in SPLIT_MEAN_KEYS:
            vals = [r[key] for r in rs if r.get(key) is not None]
            g[key] = {"mean": float(np.mean(vals)) if vals else None, "n": len(vals),
                      "ci95": bootstrap_ci(vals, n_resamples=n_resamples, seed=seed)}
        sums = {"tt": [0.0] * len(BINS), "if": [0.0] * len(BINS), "dur": [0.0] * len(BINS)}
        for r in rs:
            for k in sums:
                sums[k] = [a + b for a, b in zip(sums[k], r["_bins"][k])]
        g["curve"] = binned_row(sums)
        out[name] = g
    return out


# ----------------------------------------------------------------------------- a scoring run


def per_sample_rows(tasks: Sequence[Any], done: dict[str, dict[str, Any]], root: str | os.PathLike | None = None
                    ) -> list[dict[str, Any]]:
    """``per_sample.jsonl``: one row per conversation of ``tasks`` that has a logged judgement
    (``done``: task id -> ``judgements.jsonl`` record), in task order: ``row`` (0..n-1), ``id`` (the
    task id), ``split``, ``status`` (``ok``/``failed``), ``reason`` (failed), upstream's per-task
    values and the project's strict ones (:func:`task_scores`, :func:`binned_row`) and ``events``:
    the events upstream's ``score.py`` counts, each ``[start_s, end_s, turn_taking_fluency,
    instruction_following]`` (s on the conversation's clock; integer scores as the judge gave them,
    not range-checked) - what :mod:`spear_metrics.full_duplex_v2.results` recomputes the values from.

    With the conversations' folder ``root``, each row also names its channels, ``audio_path``
    (``root/<id>/A.wav``, the examiner: what the examinee heard) and ``answer_audio_path``
    (``B.wav``, the examinee), and an ``ok`` row holds each channel's speech as the judge read it:
    ``a_speech`` / ``b_speech``, the ``[start_s, end_s]`` of every word of ``A.json`` / ``B.json``
    (:func:`word_spans`; ``None`` when the transcript cannot be read)."""
    out: list[dict[str, Any]] = []
    for t in tasks:
        r = done.get(t.id)
        if r is None:
            continue
        row: dict[str, Any] = {"row": len(out), "id": t.id, "split": r.get("split", t.split)}
        if root is not None:
            folder = Path(root) / t.id
            row.update(audio_path=str(folder / "A.wav"), answer_audio_path=str(folder / "B.wav"))
        if r.get("status") != "ok":
            row.update(status="failed", reason=r.get("reason"))
        else:
            vals = task_scores(r["reply"])
            row.update(status="ok", reason=None, **vals, **binned_row(binned_sums([tuple(e) for e in vals["events"]])))
            if root is not None:
                row.update(a_speech=word_spans(Path(root) / t.id / "A.json"),
                           b_speech=word_spans(Path(root) / t.id / "B.json"))
        out.append(row)
    return out


def read_transcript(path: str | os.PathLike) -> dict[str, Any]:
    """One channel's transcript file in upstream's shape (``{"text", "chunks": [{"text",
    "timestamp": [start_s, end_s]}]}``), read up to :data:`MAX_TRANSCRIPT_BYTES`.

    Raises:
        ValueError: not a regular file (a FIFO would block the open), over the limit, not JSON or
            not that shape; OSError: unreadable.
    """
    from spear_datasets.files import read_json

    p = Path(path)
    d = read_json(p, MAX_TRANSCRIPT_BYTES)  # a FIFO or a device refused, never more than the limit read
    if not isinstance(d, dict) or not isinstance(d.get("chunks", []), list):
        raise ValueError(f"{p.name} is not upstream's transcript shape")
    return d


def word_spans(path: str | os.PathLike) -> Optional[list[list[float]]]:
    """``[[start_s, end_s], ...]`` of the words of a transcript file (:func:`read_transcript`) that
    have two finite times, end not before start; ``None`` when the file cannot be read."""
    try:
        chunks = read_transcript(path).get("chunks") or []
    except (ValueError, OSError, RecursionError):
        return None
    out = []
    for c in chunks:
        ts = c.get("timestamp") if isinstance(c, dict) else None
        if isinstance(ts, (list, tuple)) and len(ts) == 2:
            try:
                a, b = float(ts[0]), float(ts[1])
            except (TypeError, ValueError):
                continue
            if math.isfinite(a) and math.isfinite(b) and b >= a:
                out.append([a, b])
    return out


def transcript_json(t: Any) -> dict[str, Any]:
    """A :class:`spear_metrics.core.asr.Transcript` with word times -> upstream's ``A.json`` shape
    (``text`` the words joined by spaces, as ``asr_batch.py``), plus ``asr_model`` (the backend's
    name; :func:`ensure_transcripts` records its full description)."""
    words = [w for w in t.words if w.start is not None and w.end is not None]
    return {"text": " ".join(w.text for w in words).strip() or (t.text or "").strip(),
            "chunks": [{"text": w.text, "timestamp": [round(float(w.start), 3), round(float(w.end), 3)]} for w in words],
            "asr_model": t.model, "word_timestamps": True}


def _conversations_folder(folder: Path):
    """The ownership of the folder holding the conversation folder ``folder`` while transcripts are
    written into it: ``fdb infer --version 2``'s output folder (``folder.parent``, recognised by its
    ``.work/``) opened as that command's (:func:`spear_datasets.ownership.open_folder`: its rank-0
    lock taken, so every write is recorded in its manifest and its ``--overwrite`` removes them);
    nothing for a folder this tool did not write (upstream's own outputs: written as its
    ``asr_batch.py`` does, nothing recorded).

    Raises:
        spear_datasets.ownership.OutFolderError: a live ``fdb infer --version 2`` holds the folder
            (its lock is never taken away), or it is another command's.
    """
    import contextlib

    from spear_datasets.ownership import is_recognised, open_folder

    root = folder.parent
    if not is_recognised(root):
        return contextlib.nullcontext()
    return open_folder(root, command=INFER_COMMAND, activity="written", flag="--root")


def ensure_transcripts(folder: Path, asr: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``folder/A.json`` and ``B.json`` (upstream's shape): read when present (as upstream's
    ``asr_batch.py``), else transcribed from ``A.wav``/``B.wav`` trimmed to :data:`TRIM_S` s,
    with word timestamps, and written atomically (:func:`spear_datasets.files.atomic_path`); in a
    conversation folder of ``fdb infer --version 2`` each file is recorded in that run's
    ownership record (:func:`_conversations_folder`), so its ``--overwrite`` removes them.

    Raises:
        ValueError / OSError: a missing or unreadable channel, a transcript file of another shape;
        spear_datasets.files.OutputError: a live ``fdb infer --version 2`` writes the folder (one
            line), or the file cannot be written.
    """
    from spear_datasets.audio import load_audio
    from spear_datasets.files import atomic_path
    from spear_metrics.core.asr import ASR_SR

    paths = [folder / f"{ch}.json" for ch in ("A", "B")]
    found = {p: read_transcript(p) for p in paths if p.exists()}  # a FIFO or a device is refused, not opened
    if len(found) == len(paths):
        return found[paths[0]], found[paths[1]]
    if asr is None:
        raise ValueError(f"{next(p.name for p in paths if p not in found)} missing and no ASR backend")
    with _conversations_folder(folder):
        for p in paths:
            if p in found:
                continue
            wav = load_audio(p.with_suffix(".wav"), sr=ASR_SR, channels="mix")[0][: int(TRIM_S * ASR_SR)]
            d = transcript_json(asr.transcribe([wav], sr=ASR_SR, word_timestamps=True)[0])
            d["asr_model"] = asr.describe() if callable(getattr(asr, "describe", None)) else d["asr_model"]
            with atomic_path(p) as tmp:
                tmp.write_text(json.dumps(d, indent=1, ensure_ascii=False), encoding="utf-8")
            found[p] = d
    return found[paths[0]], found[paths[1]]


def _whole_record(r: dict[str, Any]) -> bool:
    """A judgements.jsonl record the summary can use: ``failed``, or ``ok`` with a reply that
    parses (:func:`parse_judge_reply`). Anything else (an edited or foreign line) is ignored like a
    torn line: its task is judged again."""
    if r.get("status") == "failed":
        return True
    if r.get("status") != "ok" or not isinstance(r.get("reply"), str):
        return False
    try:
        judge_reply_gate(r["reply"])
    except ValueError:
        return False
    return True


#: the command owning a scoring run's ``--out`` (``.work/owner.json``) and the one owning the
#: conversation folders it reads (:mod:`spear_metrics.full_duplex_v2.engine`)
SCORE_COMMAND = "fdb2-score"
INFER_COMMAND = "fdb2-infer"
#: what a scoring run writes in ``--out``: the judge's work log and the results
JUDGEMENTS = "judgements.jsonl"
OUTPUTS = (JUDGEMENTS, "per_sample.jsonl", "summary.json")


def score_fingerprint(root: str | os.PathLike, tasks: Sequence[Any], prompts_sha256: str, judge: Any, *,
                      asr: Any = None, judge_kw: Optional[dict[str, Any]] = None,
                      tasks_sha256: Optional[str] = None) -> dict[str, Any]:
    """What binds a scoring run to its ``--out`` (``.work/run.json``): the conversations folder,
    the tasks file's sha256 (``tasks_sha256``; without it, that of the tasks' ids, splits and staged
    reveals), the judge prompts' sha256, the judge (model @ URL, temperature, seed, request
    parameters ``judge_kw``) and the ASR. The same fingerprint resumes (every logged judgement
    kept); another one is refused unless ``overwrite`` (:func:`score_run`). The task selection
    (``--split``, ``--limit``) is not part of it: each task's judgement is its own unit."""
    if tasks_sha256 is None:
        tasks_sha256 = hashlib.sha256(json.dumps([[t.id, t.split, t.staged_reveal] for t in tasks], sort_keys=True,
                                                 default=str).encode("utf-8")).hexdigest()
    return {"mode": "fdb v2 score", "root": str(Path(root).resolve()), "tasks_sha256": tasks_sha256,
            "eval_prompts_sha256": prompts_sha256,
            "judge": getattr(judge, "describe", lambda: str(judge))(), "judge_model": getattr(judge, "model", None),
            "judge_temperature": getattr(judge, "temperature", None), "judge_seed": getattr(judge, "seed", None),
            "judge_params": dict(judge_kw or {}),
            "asr": (asr.describe() if callable(getattr(asr, "describe", None)) else getattr(asr, "name", str(asr)))
                   if asr is not None else None}


def score_run(root: str | os.PathLike, tasks: Sequence[Any], prompts_path: str | os.PathLike, judge: Any, out: str | os.PathLike,
              *, asr: Any = None, retry_failed: bool = False, overwrite: bool = False, n_resamples: int = 1000,
              seed: int = 0, judge_kw: Optional[dict[str, Any]] = None, concurrency: int = 1,
              tasks_sha256: Optional[str] = None) -> dict[str, Any]:
    """Score the conversations under ``root`` (``root/<task id>/A.wav, B.wav``) of ``tasks``.

    Each task is a resumable unit logged in ``out/judgements.jsonl`` as it finishes (the reply
    kept: a rerun never asks the judge again for a logged task); a missing conversation, an ASR
    failure or a judge that gives no parsable reply after its retries is a failed unit with a
    one-line reason. Writes ``out/summary.json`` (upstream's per-task rows, the binned rows,
    split means with intervals, provenance) and returns it.

    ``out`` is owned by the run (:func:`spear_metrics.core.records.claim_out`, the rule of every
    output folder): it must be new, empty or this command's; a live process writing it is
    refused; a run with another fingerprint (:func:`score_fingerprint`) is refused unless
    ``overwrite``, which first removes exactly what earlier runs recorded as written there.
    Transcripts written into ``root`` are recorded there (:func:`ensure_transcripts`).

    Args:
        judge: a :class:`spear_metrics.core.judge.Judge` (its ``ask``); upstream samples at
            temperature 0.2 with up to 20000 output tokens.
        asr: an ASR backend for channels without ``A.json``/``B.json``.
        concurrency: judge calls in flight at once (the ASR runs in the calling thread).
        tasks_sha256: the tasks file's sha256 (for the fingerprint).

    Raises:
        ScoreSetupError: unreadable prompts file; ``out`` holds another scoring run (without
            ``overwrite``). spear_datasets.files.OutputError: ``out`` cannot be used (the user's
            or another command's files, a live process writing it, unwritable).
    """
    from spear_metrics.core.records import claim_out

    prompts, prompts_sha = load_eval_prompts(prompts_path)
    fp = score_fingerprint(root, tasks, prompts_sha, judge, asr=asr, judge_kw=judge_kw, tasks_sha256=tasks_sha256)
    conflict = ScoreSetupError(f"{out} holds judgements of another scoring run (other conversations, tasks file, judge "
                               "prompts, judge or ASR); use a new --out folder or --overwrite")
    with claim_out(out, fp, overwrite=overwrite, conflict=conflict, command=SCORE_COMMAND, activity="scored",
                   adopt=OUTPUTS):
        return _score_claimed(root, tasks, prompts, prompts_sha, judge, out, asr=asr, retry_failed=retry_failed,
                              n_resamples=n_resamples, seed=seed, judge_kw=judge_kw, concurrency=concurrency)


def _score_claimed(root: str | os.PathLike, tasks: Sequence[Any], prompts: dict[str, Any], prompts_sha: str, judge: Any,
                   out: str | os.PathLike, *, asr: Any, retry_failed: bool, n_resamples: int, seed: int,
                   judge_kw: Optional[dict[str, Any]], concurrency: int) -> dict[str, Any]:
    """:func:`score_run` once ``out`` is claimed."""
    from spear_datasets.files import atomic_path, record_write
    from spear_metrics.core.records import AppendLog

    rootp, outp = Path(root), Path(out)
    log = outp / JUDGEMENTS
    done: dict[str, dict[str, Any]] = {}
    wanted = {t.id for t in tasks}
    if log.is_file():
        from spear_metrics.core.records import read_jsonl

        # the bounded work-log reader (one line at a time; torn, non-object, too deep or over-long lines
        # skipped); only the tasks asked for are kept
        for r in read_jsonl(log):
            if isinstance(r.get("task_id"), str) and r["task_id"] in wanted and _whole_record(r):
                done[r["task_id"]] = r
    import threading
    from concurrent.futures import ThreadPoolExecutor

    lock = threading.Lock()
    record_write(log)  # recorded as this run's before it is first written
    applog = AppendLog(log)

    def finish(task: Any, rec: dict[str, Any]) -> None:
        with lock:
            applog.write([rec])
            done[task.id] = rec

    def fail(task: Any, e: BaseException) -> None:
        finish(task, {"task_id": task.id, "split": task.split, "status": "failed",
                      "reason": " ".join(str(e).split())[:300] or type(e).__name__})

    def judged(task: Any, prompt: str, asr_model: str) -> None:
        try:
            ans = judge.ask([{"role": "user", "content": prompt}], judge_reply_gate, extra_body=judge_kw)
        except Exception as e:  # noqa: BLE001 - one task's failure is its unit's failure
            return fail(task, e)
        finish(task, {"task_id": task.id, "split": task.split, "status": "ok", "reply": ans.reply,
                      "attempts": len(ans.attempts), "prompt_sha256": hashlib.sha256(prompt.encode()).hexdigest(),
                      "asr_model": asr_model})

    # ASR in this thread (one model), each task's judge call handed to the pool as soon as its prompt exists
    futures = []
    try:
        with ThreadPoolExecutor(max_workers=max(1, int(concurrency))) as pool:
            for task in tasks:
                r = done.get(task.id)
                if r and (r.get("status") == "ok" or not retry_failed):
                    continue
                try:
                    folder = rootp / task.id
                    if not (folder / "manifest.json").exists() and not (folder / "B.wav").exists():
                        raise ValueError("no conversation folder (run `spearbench fdb infer --version 2` first)")
                    ta, tb = ensure_transcripts(folder, asr)
                    prompt = build_judge_prompt(prompts, task.split, task.staged_reveal, ta, tb)
                except Exception as e:  # noqa: BLE001
                    fail(task, e)
                    continue
                futures.append(pool.submit(judged, task, prompt, tb.get("asr_model", "transcript file")))
    finally:
        applog.close()
    for fut in futures:  # a unit that could not be logged (a full disk...) is a whole-run problem, never a lost task
        if fut.exception() is not None:
            raise fut.exception()
    rows, failed = [], []
    for tid, r in done.items():
        if tid not in wanted:
            continue
        if r.get("status") != "ok":
            failed.append({"task_id": tid, "split": r.get("split"), "reason": r.get("reason")})
            continue
        row = {"task_id": tid, "split": r.get("split"), **task_scores(r["reply"])}
        sums = binned_sums([tuple(e) for e in row["events"]])
        row.update(binned_row(sums))
        row["_bins"] = sums
        rows.append(row)
    splits = split_summary(rows, n_resamples=n_resamples, seed=seed)
    for r in rows:
        r.pop("_bins")
    from spear_metrics.core.judge import moving_alias

    model = getattr(judge, "model", None)
    from spear_metrics.full_duplex_v2 import VERSION

    per_sample = per_sample_rows(tasks, done, rootp)
    summary = {
        "benchmark": "full_duplex_v2", "version": VERSION,
        "metrics": ["full_duplex_v2"], "metric_versions": {"full_duplex_v2": VERSION},
        "n_samples": len(per_sample), "n_scored": sum(r["status"] == "ok" for r in per_sample),
        "n_failed": sum(r["status"] != "ok" for r in per_sample),
        "per_task": rows, "failed": failed, "splits": splits,
        "provenance": {
            "judge": getattr(judge, "describe", lambda: str(judge))(), "judge_model": model,
            "judge_moving_alias": moving_alias(model or ""), "judge_temperature": getattr(judge, "temperature", None),
            "judge_seed": getattr(judge, "seed", None),
            "eval_prompts_sha256": prompts_sha, "eval_prompts_upstream": prompts_sha == UPSTREAM_EVAL_PROMPTS_SHA256,
            "asr": (asr.describe() if callable(getattr(asr, "describe", None)) else getattr(asr, "name", None))
                   if asr is not None else "transcript files",
            "asr_note": "upstream transcribes with NeMo nvidia/parakeet-tdt-0.6b-v2; a different ASR gives the judge "
                        "different transcripts and word times",
            "upstream_judge": UPSTREAM_JUDGE_MODEL,
        },
    }
    if callable(getattr(judge, "report", None)):
        summary["judge_calls"] = judge.report()
    with atomic_path(outp / "per_sample.jsonl") as tmp:
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in per_sample), encoding="utf-8")
    with atomic_path(outp / "summary.json") as tmp:
        tmp.write_text(json.dumps(summary, indent=1, ensure_ascii=False), encoding="utf-8")
    return summary
