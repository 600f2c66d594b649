"""Network rules shared by the adapters (:mod:`spear_metrics.agents.net`) and the judge client
(:mod:`spear_metrics.core.judge`): which HTTP statuses are retried, how long to wait
(``Retry-After``, exponential backoff with jitter), and which key values can be sent at all.
Pure functions; no network here (the core imports nothing above it)."""

from __future__ import annotations

import email.utils
import math
import random
import time
from dataclasses import dataclass
from typing import Any, Optional

#: HTTP statuses worth retrying
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


def key_problem(value: str) -> Optional[str]:
    """Why ``value`` cannot be sent as a key in an HTTP header (``Authorization: Bearer ...``, a
    URL query), or ``None`` when it can: a non-ASCII character (HTTP header values are ASCII; the
    client would fail with ``UnicodeEncodeError`` on every request) or a control character (CR,
    LF, TAB inside the key, NUL...). Never quotes the value."""
    if any(ord(c) > 126 for c in value):
        return "holds a non-ASCII character (an HTTP header cannot carry it)"
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return "holds a control character (a line break, tab or NUL inside the key)"
    return None


def parse_retry_after(value: Any, *, now: Optional[float] = None) -> Optional[float]:
    """``Retry-After`` header value -> seconds (>= 0): delta-seconds or an HTTP date; ``None``
    when absent or unreadable."""
    if value is None:
        return None
    text = str(value).strip()
    try:
        s = float(text)
        return max(0.0, s) if math.isfinite(s) else None
    except ValueError:
        pass
    try:
        dt = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if dt is None:
        return None
    return max(0.0, dt.timestamp() - (time.time() if now is None else now))


def retryable_status(status: int) -> bool:
    """Whether an HTTP error ``status`` is worth another try (:data:`RETRY_STATUSES`: 408, 409, 425,
    429, 500, 502, 503, 504); every other 4xx/5xx fails at once. THE rule of the adapters and of
    the judge client (:mod:`spear_metrics.core.judge`)."""
    return int(status) in RETRY_STATUSES


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries: at most ``max_tries`` calls; waits ``Retry-After`` when given, else
    ``uniform(0, min(max_delay_s, base_delay_s * 2**k))`` (full jitter; ``jitter=False``: the
    upper end itself) before try ``k + 2``; never longer than ``max_delay_s``. THE backoff rule of
    the adapters (:func:`with_retries`) and of the judge client (:mod:`spear_metrics.core.judge`)."""

    max_tries: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    jitter: bool = True

    def __post_init__(self) -> None:
        if self.max_tries < 1:
            raise ValueError("max_tries must be >= 1")

    def delay(self, attempt: int, retry_after: Optional[float], rng: Optional[random.Random] = None) -> float:
        """Seconds to wait after failed try number ``attempt`` (0-based)."""
        if retry_after is not None:
            return min(self.max_delay_s, retry_after)
        cap = min(self.max_delay_s, self.base_delay_s * (2 ** attempt))
        return (rng or random).uniform(0.0, cap) if self.jitter else cap
