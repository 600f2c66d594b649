"""Network rules shared by every client of the project (the judge client in
:mod:`spear_metrics.core.judge`, the API adapters in :mod:`spear_metrics.agents`): which HTTP
statuses are retried, how long to wait between tries, how a ``Retry-After`` header is read, and
whether a key can travel in an HTTP header.

This module is the one place of these rules; :mod:`spear_metrics.agents.net` re-exports them
(``core`` never imports ``agents``).

- :func:`retryable_status`: HTTP 408, 409, 425, 429, 500, 502, 503, 504 (:data:`RETRY_STATUSES`);
  every other error status fails at once.
- :class:`RetryPolicy`: at most ``max_tries`` tries; waits ``Retry-After`` when the server sent it,
  else ``base_delay_s * 2**k`` (with full jitter unless ``jitter=False``), never longer than
  ``max_delay_s``.
- :func:`parse_retry_after`: delta-seconds or an HTTP date (RFC 9110 section 10.2.3).
- :func:`key_problem` / :func:`env_key`: keys come from environment variables only; a key holding
  a character an HTTP header cannot carry is refused by name, never quoted.
"""

from __future__ import annotations

import email.utils
import math
import os
import random
import time
from dataclasses import dataclass
from typing import Any, Optional

from spear_metrics.core.secrets import register_secret

__all__ = ["RETRY_STATUSES", "RetryPolicy", "env_key", "key_problem", "parse_retry_after", "retryable_status"]

#: HTTP statuses worth retrying
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


def retryable_status(status: int) -> bool:
    """Whether an HTTP error ``status`` is worth another try (:data:`RETRY_STATUSES`: 408, 409, 425,
    429, 500, 502, 503, 504); every other 4xx/5xx fails at once. THE rule of the adapters and of
    the judge client (:mod:`spear_metrics.core.judge`)."""
    return int(status) in RETRY_STATUSES


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


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries: at most ``max_tries`` calls; waits ``Retry-After`` when given, else
    ``uniform(0, min(max_delay_s, base_delay_s * 2**k))`` (full jitter; ``jitter=False``: the
    upper end itself) before try ``k + 2``; never longer than ``max_delay_s``. THE backoff rule of
    the adapters (:func:`spear_metrics.agents.net.with_retries`) and of the judge client
    (:mod:`spear_metrics.core.judge`)."""

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


def env_key(env: str, *, required: bool = True) -> Optional[str]:
    """The key held by environment variable ``env`` (registered for masking), ``None`` when unset
    and not ``required``.

    Raises:
        ValueError: ``required`` and the variable is unset or empty, or (always) the value cannot
            be sent in an HTTP header (:func:`key_problem`); the message names the variable,
            never a value.
    """
    raw = os.environ.get(env, "")
    register_secret(raw.strip())  # masked even in the errors below
    value = raw.strip()
    if not value:
        if required:
            raise ValueError(f"environment variable {env} is not set (it must hold the API key)")
        return None
    why = key_problem(value)
    if why:
        raise ValueError(f"environment variable {env} {why}: set it to the API key as issued")
    return value
