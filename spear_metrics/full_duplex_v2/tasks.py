"""The FDB v2 tasks file: upstream's ``v2/prompts_staged_200.json`` shape.

Shape (``DanielLin94144/Full-Duplex-Bench`` ``v2/prompts_staged_200.json``)::

    {"settings": {"turn_limit": 5, "max_duration_sec": 60, "examiner_can_interrupt": true,
                  "examiner_is_interruptible": false, "language": "en-US"},
     "splits": {"Daily": {"classes": [...], "tasks": [{"id", "split", "class_id",
                "examiner_system_prompt", "examiner_task_prompt", "staged_reveal": {"T1".."T4"}, ...}]}, ...}}

The file itself is CC BY-NC 4.0 and is not shipped; pass its path (``--tasks``).

The examiner's instructions are composed as upstream's runner does (``v2/run_dataset.sh`` +
``v2/single_conversation.sh``): ``examiner_system_prompt + " Do not talk over the other speaker."``,
a blank line, then ``examiner_task_prompt`` (which holds the staged reveal T1-T4); the staged
reveal itself is not sent separately (upstream sends no other text), it is given to the judge.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spear_datasets.files import parse_json, read_limited

#: upstream's split names (``v2/eval/eval_single_item.py`` ``normalize_subset_name``)
SPLITS = ("Daily", "Correction", "EntityTracking", "Safety")
#: the examinee's system prompt of upstream's ``v2/.env.example`` (``EXAMINEE_SYSTEM_PROMPT``)
EXAMINEE_SYSTEM_PROMPT = "You are a helpful AI assistant. Only speak English throughout the conversation."
#: appended to the examiner's system prompt by ``v2/run_dataset.sh``
EXAMINER_SUFFIX = " Do not talk over the other speaker."
#: largest tasks file read (bytes); upstream's is about 1 MB
MAX_TASKS_BYTES = 64 * 2 ** 20
#: sha256 of upstream's ``v2/prompts_staged_200.json`` at commit d7336bd (recorded, never required)
UPSTREAM_TASKS_SHA256 = "a606a9740bb48245f9b63e36c8a0c09b4fb49a98f4b00280992a1caa1828f62e"


#: the longest task id (UTF-8 bytes): it names a folder (file systems allow 255 bytes a name)
MAX_ID_BYTES = 200
#: the log a run writes beside its task folders (``fdb infer --version 2``): never a task id
RUN_LOG = "conversations.jsonl"
RESERVED_IDS = (RUN_LOG,)
#: the summary's group of every split together (``summary.json`` ``splits.all``): never a split name
OVERALL = "all"


class TasksError(ValueError):
    """The tasks file cannot be used (one line)."""


@dataclass(frozen=True)
class Settings:
    """The file's ``settings`` (upstream's names). Durations in s."""

    turn_limit: int = 5
    max_duration_sec: float = 60.0
    examiner_can_interrupt: bool = True
    examiner_is_interruptible: bool = False
    language: str = "en-US"


@dataclass(frozen=True)
class Task:
    """One conversation task (upstream's fields)."""

    id: str
    split: str
    class_id: str
    examiner_system_prompt: str
    examiner_task_prompt: str
    staged_reveal: dict[str, str] = field(default_factory=dict)

    def examiner_instructions(self) -> str:
        """The examiner's session instructions as upstream composes them (module docstring)."""
        prompt = self.examiner_system_prompt + EXAMINER_SUFFIX
        return f"{prompt}\n\n{self.examiner_task_prompt}" if self.examiner_task_prompt else prompt


@dataclass
class TaskFile:
    """A read tasks file: ``settings``, ``tasks`` (file order, splits in file order), ``sha256``,
    ``bad``: ``(position, reason)`` of task entries that could not be read (each a failed unit)."""

    settings: Settings
    tasks: list[Task]
    sha256: str
    bad: list[tuple[str, str]] = field(default_factory=list)


def _bool(v: Any, name: str) -> bool:
    if not isinstance(v, bool):
        raise TasksError(f"settings.{name} must be true or false, got {v!r}")
    return v


def read_settings(raw: Any) -> Settings:
    """``settings`` object -> :class:`Settings` (missing keys take upstream's values).

    Raises:
        TasksError: a value of the wrong type or out of range.
    """
    if raw is None:
        return Settings()
    if not isinstance(raw, dict):
        raise TasksError("settings must be an object")
    d = Settings()
    tl = raw.get("turn_limit", d.turn_limit)
    if not isinstance(tl, int) or isinstance(tl, bool) or tl < 1 or tl > 1000:
        raise TasksError(f"settings.turn_limit must be an integer in 1..1000, got {tl!r}")
    md = raw.get("max_duration_sec", d.max_duration_sec)
    if not isinstance(md, (int, float)) or isinstance(md, bool) or not (0 < md <= 3600):
        raise TasksError(f"settings.max_duration_sec must be a number in (0, 3600], got {md!r}")
    return Settings(turn_limit=tl, max_duration_sec=float(md),
                    examiner_can_interrupt=_bool(raw.get("examiner_can_interrupt", d.examiner_can_interrupt), "examiner_can_interrupt"),
                    examiner_is_interruptible=_bool(raw.get("examiner_is_interruptible", d.examiner_is_interruptible),
                                                    "examiner_is_interruptible"),
                    language=str(raw.get("language", d.language)))


def _task(t: Any, split: str) -> Task:
    if not isinstance(t, dict):
        raise ValueError("task is not an object")
    tid = t.get("id")
    if not isinstance(tid, str) or not tid.strip() or "/" in tid or "\\" in tid or tid.startswith(".") \
            or any(ord(c) < 32 or ord(c) == 127 for c in tid) or len(tid.encode("utf-8")) > MAX_ID_BYTES \
            or tid in RESERVED_IDS:
        raise ValueError(f"task id must be a non-empty name usable as a folder (no path separator, control "
                         f"character or leading dot, at most {MAX_ID_BYTES} bytes, not "
                         f"{' or '.join(RESERVED_IDS)}), got {tid[:80] if isinstance(tid, str) else tid!r}")
    for k in ("examiner_system_prompt", "examiner_task_prompt"):
        if not isinstance(t.get(k, ""), str):
            raise ValueError(f"{k} must be text")
    if not (t.get("examiner_system_prompt") or "").strip():
        raise ValueError("no examiner_system_prompt")
    sr = t.get("staged_reveal") or {}
    if not isinstance(sr, dict) or not all(isinstance(v, str) for v in sr.values()):
        raise ValueError("staged_reveal must map T1..T4 to text")
    if str(t.get("split") or split) == OVERALL:
        raise ValueError(f"split name {OVERALL!r} is the summary's name for all splits together")
    return Task(id=tid, split=str(t.get("split") or split), class_id=str(t.get("class_id") or ""),
                examiner_system_prompt=t["examiner_system_prompt"], examiner_task_prompt=t.get("examiner_task_prompt") or "",
                staged_reveal={k: sr[k] for k in ("T1", "T2", "T3", "T4") if k in sr})


def load_tasks(path: str | os.PathLike, *, splits: list[str] | None = None, limit: int | None = None) -> TaskFile:
    """Read a tasks file (upstream's shape, module docstring).

    Args:
        path: the JSON file.
        splits: keep only these splits (``None``: all).
        limit: keep the first ``limit`` tasks (upstream's ``--limit``).

    Returns:
        :class:`TaskFile`; a malformed task entry is listed in ``bad`` (never dropped silently).

    Raises:
        TasksError: unreadable file, not JSON, no ``splits``, bad settings, a task id twice.
    """
    import hashlib

    p = Path(path)
    try:
        data = read_limited(p, MAX_TASKS_BYTES)  # a device or a pipe is refused, never read for ever
    except OSError as e:
        raise TasksError(f"cannot read tasks file {p}: {e.strerror or e}") from None
    except ValueError as e:
        raise TasksError(f"tasks file {p}: {e}") from None
    try:
        raw = parse_json(data)
    except ValueError as e:
        raise TasksError(f"{p} is not JSON ({e})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("splits"), dict):
        raise TasksError(f"{p} has no 'splits' object (upstream's prompts_staged_200.json shape)")
    settings = read_settings(raw.get("settings"))
    tasks: list[Task] = []
    bad: list[tuple[str, str]] = []
    seen: set[str] = set()
    for split, body in raw["splits"].items():
        if splits and split not in splits:
            continue
        items = body.get("tasks") if isinstance(body, dict) else None
        if not isinstance(items, list):
            bad.append((f"{split}", "split has no tasks list"))
            continue
        for i, t in enumerate(items):
            try:
                task = _task(t, split)
            except ValueError as e:
                bad.append((f"{split}[{i}]", str(e)))
                continue
            if task.id in seen:
                raise TasksError(f"task id {task.id!r} appears twice in {p}")
            seen.add(task.id)
            tasks.append(task)
    if limit is not None:
        tasks = tasks[: max(0, int(limit))]
    return TaskFile(settings, tasks, hashlib.sha256(data).hexdigest(), bad)
