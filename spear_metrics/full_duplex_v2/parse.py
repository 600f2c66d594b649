"""Full-Duplex-Bench v2 judge replies read as upstream's ``v2/scoring/parse.py`` reads them.

Source: ``v2/scoring/parse.py`` (``process_one_text``) of ``DanielLin94144/Full-Duplex-Bench``,
read for its rules; the code here is the project's. Upstream's published per-task numbers
(``scoring/score.py``, ``score_time.py``) are computed from what this parse gives, quirks included:

- Blocks: every fenced block (```` ``` ```` or ```` ```json ````, any case) holding the text
  ``Turn-taking event and score``; none: the whole reply. Events of all blocks are merged; the
  task score is the last block's that has one.
- A block is first normalised (``{"start": x, "end": y}`` and ``{x, y}`` become ``[x, y]``) and
  read as JSON (Python's ``json``, so ``NaN``/``Infinity`` are numbers). An object holding either
  key is used: each entry of its events list with at least 3 elements gives one event per
  ``[start, end]`` pair found (recursively) in its elements before the last two; the last two are
  the scores, each ``int(float(x))`` (truncated; ``"null"`` or anything else that fails: ``None``);
  times may be ``"m:ss"`` strings. The task score is the value as the JSON holds it (not coerced).
- Otherwise (not JSON) the ``[ ... ]`` after the key is scanned for ``[start, end]: tt, if``
  entries (JSON-shaped entries there are skipped), each score coerced as above; the task score is
  the token after ``"Task-specific score":`` (coerced).

No range check anywhere: a score of 0, 9 or 3.7 (read as 3) counts upstream.
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional

EVENTS_KEY = "Turn-taking event and score"
TASK_KEY = "Task-specific score"

_NUM = r"[+-]?(?:\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)"
_BRACE_PAIR = re.compile(r"\{\s*([^{}]+?)\s*\}", re.DOTALL)
_START = r"""['"](?:start_time|start|startTime)['"]"""
_END = r"""['"](?:end_time|end|endTime)['"]"""
_VAL = rf"""({_NUM}|"[^"]+")"""
_START_END = re.compile(rf"\{{\s*{_START}\s*:\s*{_VAL}\s*,\s*{_END}\s*:\s*{_VAL}\s*\}}")
_END_START = re.compile(rf"\{{\s*{_END}\s*:\s*{_VAL}\s*,\s*{_START}\s*:\s*{_VAL}\s*\}}")
_FENCED = re.compile(r"```(?:json)?\s*([\s\S]*?)\s*```", re.IGNORECASE)
_TASK_DQ = re.compile(r'"Task-specific score"\s*:\s*("[^"]+"|[^\s,}\]]+)')
_TASK_SQ = re.compile(r"'Task-specific score'\s*:\s*('[^']+'|[^\s,}\]]+)")
_STOP = ",[]{}:\n\r\t "


def time_token(tok: Any) -> float:
    """A time as upstream reads it: a number, or a string ``"s"``, ``"m:ss"``, ``"h:mm:ss"``.

    Raises:
        ValueError / TypeError: anything else (an integer past the float range included).
    """
    if isinstance(tok, (int, float)):
        try:
            return float(tok)
        except OverflowError:  # a JSON integer past the float range (400 digits): no time
            raise ValueError(f"not a time: an integer of {len(str(abs(int(tok))))} digits") from None
    if isinstance(tok, str):
        s = tok.strip().strip('"').strip("'")
        if ":" in s:
            parts = s.split(":")
            if len(parts) == 2:
                return float(parts[0]) * 60.0 + float(parts[1])
            total, mul = 0.0, 1.0
            for p in reversed(parts):
                total += float(p) * mul
                mul *= 60.0
            return total
        return float(s)
    raise ValueError(f"not a time: {tok!r}")


def coerce_int(x: Any) -> Optional[int]:
    """A score as upstream coerces it: ``int(float(x))``; ``None``, ``"null"`` or a failure: ``None``."""
    if x is None or (isinstance(x, str) and x.strip().lower() == "null"):
        return None
    try:
        return int(float(x))
    except Exception:  # noqa: BLE001 - upstream's rule: anything that fails is no score
        return None


def _time_like(s: str) -> bool:
    s = s.strip().strip('"').strip("'")
    try:
        if ":" in s:
            parts = s.split(":")
            for p in parts:
                float(p)
            return True
        float(s)
        return True
    except ValueError:
        return False


def normalize_intervals(text: str) -> str:
    """``{"start": x, "end": y}`` (either order; also ``start_time``/``startTime``) and ``{x, y}``
    (two times) -> ``[x, y]``."""
    text = _START_END.sub(lambda m: f"[{m.group(1)}, {m.group(2)}]", text)
    text = _END_START.sub(lambda m: f"[{m.group(2)}, {m.group(1)}]", text)

    def pair(m: re.Match) -> str:
        parts = [p.strip() for p in m.group(1).split(",")]
        if len(parts) == 2 and _time_like(parts[0]) and _time_like(parts[1]):
            return f"[{parts[0]}, {parts[1]}]"
        return m.group(0)

    return _BRACE_PAIR.sub(pair, text)


def _pair(o: Any) -> bool:
    return isinstance(o, list) and len(o) == 2 and all(isinstance(x, (int, float, str)) for x in o)


def _intervals_json_entry(o: Any) -> list[list[float]]:
    """``flatten_turn_taking``'s collector: a pair that does not read as times gives nothing."""
    if _pair(o):
        try:
            return [[time_token(o[0]), time_token(o[1])]]
        except (ValueError, TypeError):
            return []
    out: list[list[float]] = []
    if isinstance(o, list):
        for e in o:
            out.extend(_intervals_json_entry(e))
    return out


def _json_block(block: str) -> Optional[dict[str, Any]]:
    try:
        d = json.loads(normalize_intervals(block))
    except (ValueError, RecursionError):
        return None
    if not isinstance(d, dict) or (EVENTS_KEY not in d and TASK_KEY not in d):
        return None
    items = d.get(EVENTS_KEY, [])
    events: list[list[Any]] = []
    if isinstance(items, list):
        for item in items:
            if not isinstance(item, list) or len(item) < 3:
                continue
            ivs = _intervals_json_entry(item[:-2])
            if ivs:
                s1, s2 = coerce_int(item[-2]), coerce_int(item[-1])
                events.extend([iv, s1, s2] for iv in ivs)
    d[EVENTS_KEY] = events
    return d


def _matching(text: str, start: int) -> int:
    """Index of the ``]`` closing the ``[`` at ``start`` (quoted text skipped); -1 when none."""
    depth, i, n = 0, start, len(text)
    while i < n:
        c = text[i]
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth == 0:
                return i
        elif c in "\"'":
            i += 1
            while i < n and text[i] != c:
                if text[i] == "\\":
                    i += 1
                i += 1
        i += 1
    return -1


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n,":
        i += 1
    return i


def _score_token(text: str, i: int) -> tuple[Optional[str], int]:
    n = len(text)
    i = _skip(text, i)
    if i >= n:
        return None, i
    if text[i] == '"':
        j = i + 1
        while j < n and text[j] != '"':
            if text[j] == "\\":
                j += 1
            j += 1
        return (text[i + 1:j], j + 1) if j < n and text[j] == '"' else (None, i)
    j = i
    while j < n and text[j] not in _STOP:
        j += 1
    tok = text[i:j].strip()
    return (tok or None), j


def _coerce_score(tok: Optional[str]) -> Optional[int]:
    if tok is None:
        return None
    t = tok.strip()
    if t == "" or t.lower() == "null":
        return None
    if len(t) >= 2 and t[0] == t[-1] == '"':
        t = t[1:-1]
    try:
        return int(float(t))
    except (ValueError, OverflowError):
        return None


def _intervals_expr(expr: str) -> list[list[float]]:
    expr = normalize_intervals(expr)
    try:
        obj = json.loads(expr)
    except ValueError:
        obj = json.loads(re.sub(r",\s*]", "]", expr))
    out: list[list[float]] = []

    def collect(o: Any) -> None:
        if _pair(o):
            try:
                out.append([time_token(o[0]), time_token(o[1])])
                return
            except (ValueError, TypeError):
                pass
        if isinstance(o, list):
            for e in o:
                collect(e)

    collect(obj)
    return out


def _colon_array(text: str) -> list[list[Any]]:
    """``parse_turn_taking_array``: ``[start, end]: tt, if`` entries of the events list's body."""
    i, n, out = 0, len(text), []
    while True:
        i = _skip(text, i)
        if i >= n:
            break
        if text[i] != "[":
            i = text.find("[", i)
            if i == -1:
                break
        lb = i
        rb = _matching(text, lb)
        if rb == -1:
            break
        expr = text[lb:rb + 1]
        i = rb + 1
        j = _skip(text, i)
        if j >= n or text[j] != ":":
            i = j
            continue
        s1_tok, j = _score_token(text, j + 1)
        s2_tok, j = _score_token(text, j)
        s1, s2 = _coerce_score(s1_tok), _coerce_score(s2_tok)
        try:
            ivs = _intervals_expr(expr)
        except (ValueError, RecursionError):
            ivs = []
        out.extend([iv, s1, s2] for iv in ivs)
        i = j
    return out


def _task_token(block: str) -> Optional[int]:
    m = _TASK_DQ.search(block) or _TASK_SQ.search(block)
    if not m:
        return None
    tok = m.group(1)
    if tok and (tok[0] == tok[-1] == '"' or tok[0] == tok[-1] == "'"):
        tok = tok[1:-1]
    return coerce_int(tok)


def parse_reply(text: str) -> dict[str, Any]:
    """Upstream's ``process_one_text``: ``{"Turn-taking event and score": [[[start, end], tt, if],
    ...], "Task-specific score": value}`` (the second key only when a score was found; ``tt``/``if``
    an int or ``None``). Never raises for the reply's content."""
    blocks = [m.group(1) for m in _FENCED.finditer(text) if EVENTS_KEY in m.group(1)] or [text]
    events: list[list[Any]] = []
    tasks: list[Any] = []
    for block in blocks:
        d = _json_block(block)
        if d is not None:
            ev = d.get(EVENTS_KEY, [])
            if isinstance(ev, list):
                events.extend(ev)
            if d.get(TASK_KEY) is not None:
                tasks.append(d[TASK_KEY])
            continue
        for key in (f'"{EVENTS_KEY}"', f"'{EVENTS_KEY}'"):
            k = block.find(key)
            if k == -1:
                continue
            lb = block.find("[", k + len(key))
            if lb == -1:
                continue
            rb = _matching(block, lb)
            if rb == -1:
                continue
            events.extend(_colon_array(block[lb + 1:rb]))
            ts = _task_token(block[rb:]) or _task_token(block)
            if ts is not None:
                tasks.append(ts)
            break
    out: dict[str, Any] = {EVENTS_KEY: events}
    if tasks:
        out[TASK_KEY] = tasks[-1]
    return out


def _number(x: Any) -> bool:
    return isinstance(x, (int, float))


def counted_events(parsed: dict[str, Any]) -> list[tuple[float, float, int, int]]:
    """The events upstream's ``scoring/score.py`` counts: entries ``[[start, end], tt, if]`` whose
    two scores are numbers, as ``(start_s, end_s, tt, if)`` (no time or range check; an event with
    ``end <= start`` counts in the means and is skipped by ``score_time.py``'s bins)."""
    out = []
    for item in parsed.get(EVENTS_KEY) or []:
        if isinstance(item, list) and len(item) >= 3 and _number(item[1]) and _number(item[2]):
            iv = item[0]
            out.append((float(iv[0]), float(iv[1]), item[1], item[2]))
    return out


def task_value(parsed: dict[str, Any]) -> Optional[float]:
    """``Task-specific score`` when upstream's ``score.py`` counts it (a JSON number, ``true``
    included, as ``isinstance(x, (int, float))``), as a float; else ``None`` (so is an integer
    past the float range, which upstream's mean cannot hold either)."""
    v = parsed.get(TASK_KEY)
    if not _number(v):
        return None
    try:
        return float(v)
    except OverflowError:  # a JSON integer past the float range: no value a float can hold
        return None
