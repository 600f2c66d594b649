"""The onset rules by which an adapter places its answer in time (``answer_start_time``, and so
``latency_ms`` and the interruption keys): one short key per rule, recorded as ``onset_kind`` by
``infer`` (``run_info.json``), ``score`` (``summary.json``), the results card and each leaderboard
row, so that systems measured by different rules are marked wherever they are compared.
"""

from __future__ import annotations

from typing import Any, Iterable

#: How an adapter places its answer in time (``answer_start_time``, and so ``latency_ms``): the
#: onset rule of a run, recorded as ``onset_kind`` in ``run_info.json``, the score's
#: ``summary.json``, the results card and every leaderboard row, so that systems measured by
#: different rules are never compared silently. An adapter declares its kind in ``onset_kind``.
ONSET_KINDS = {
    "first_audio": "full duplex: the wall-clock arrival of the first output audio (SPEAR's realtime proxy)",
    "frame": "full duplex, frame-synchronous: the answer's first output frame placed by its index (Moshi)",
    "question_end": "half duplex: the answer is placed at the question end (EMPTY answer_start_time)",
    "first_text_token": "in-process: the question end plus the time to the first text token (SPEAR's Qwen-Omni rule)",
    "fixed_delay": "a fixed delay after the question end",
    "reference": "the human answer's own onset (a reference, not a system)",
    "unstated": "the adapter does not state its onset rule",
}


#: The rules that MEASURE when a system answered (its own timing). Every other rule places the
#: answer (``question_end``, ``fixed_delay``), replays a reference's timing (``reference``) or says
#: nothing (``unstated``): such onsets are not the system's, so a leaderboard never ranks them on
#: :func:`onset_derived` keys, and measured onsets are ranked only against the same rule.
MEASURED_ONSET_KINDS = ("first_audio", "frame", "first_text_token")
#: The dimensions whose keys are computed from where the answer is placed in time
#: (``answer_start_time``): interruptions (``latency_ms``, ``interrupted_time_ms``,
#: ``interruptions_%``, ``latency_ms_speech``) and turn-taking (the answer is laid on its own
#: channel from its onset).
ONSET_DIMENSIONS = ("interruptions", "turn_taking")


def onset_derived(key: str) -> bool:
    """Whether the value of ``key`` depends on the answer's onset (a key of the
    :data:`ONSET_DIMENSIONS`, :func:`spear_metrics.core.columns.find_column`)."""
    from spear_metrics.core.columns import find_column

    col = find_column(key)
    return col is not None and col.dimension in ONSET_DIMENSIONS


def onset_kind(agent: Any) -> str:
    """``agent``'s onset rule, a key of :data:`ONSET_KINDS` (its ``onset_kind`` attribute;
    ``"unstated"`` when it has none or an unknown one)."""
    kind = getattr(agent, "onset_kind", None)
    return kind if kind in ONSET_KINDS else "unstated"


def onset_text(kind: str) -> str:
    """One line saying what onset rule ``kind`` means (``"unstated"``'s line for an unknown key)."""
    return ONSET_KINDS.get(kind, ONSET_KINDS["unstated"])


def mixed_onset_note(kinds: Iterable[Any]) -> str | None:
    """The line a comparison shows when its rows follow different onset rules (``None`` when they
    share one): the rules and how many rows follow each, e.g. ``"onset rules differ: first_audio
    (3), question_end (2): latency_ms and interruptions are not comparable across them"``."""
    from collections import Counter

    counts = Counter(k if k in ONSET_KINDS else "unstated" for k in kinds)
    if len(counts) < 2:
        return None
    parts = ", ".join(f"{k} ({n})" for k, n in sorted(counts.items()))
    return (f"onset rules differ: {parts}: answer_start_time, latency_ms and the interruption keys are not "
            "comparable across them")
