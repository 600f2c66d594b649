"""Network plumbing shared by the API adapters: keys from the environment, secret masking,
bounded retries with exponential backoff and jitter, time limits.

- Keys come from environment variables only (:func:`api_key`; default names ``OPENAI_API_KEY``,
  ``GEMINI_API_KEY``; an adapter's ``api_key_env=NAME`` option names another). A key's value is
  registered for this process (:func:`spear_metrics.core.secrets.register_secret`) and masked by
  the project's one masking function (:func:`spear_metrics.core.secrets.mask_secrets`, re-exported
  here as ``mask_secrets``/``register_secret``) in every error message the adapters raise and in
  every reason ``infer``/``fdb-infer`` write; it never reaches a file.
- :func:`with_retries` retries what is worth retrying: HTTP 408, 409, 425, 429, 500, 502, 503, 504
  and connection failures (timeouts, refused/reset connections), and WebSocket close codes
  1012 (service restart) and 1013 (try again later, RFC 6455's "try later"), waiting
  ``Retry-After`` when the server sends one (seconds or an HTTP date; capped at
  :attr:`RetryPolicy.max_delay_s`) and otherwise ``base_delay_s * 2**k`` with full jitter. HTTP
  400, 401, 403, 404, 422 and every other 4xx fail at once (retrying cannot help), as does a
  WebSocket close with any other code. After ``max_tries`` the last reason is kept:
  ``gave up after N tries: <reason>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import random
from typing import Any, Awaitable, Callable, Mapping, Optional, TypeVar

from spear_metrics.agents.base import AgentError
# THE retry, backoff and key rules of the project (core/net.py; re-exported: adapters import them from here)
from spear_metrics.core.net import (  # noqa: F401
    RETRY_STATUSES, RetryPolicy, env_key, key_problem, parse_retry_after, retryable_status,
)
# THE masking of the project (re-exported: adapters import these names from here)
from spear_metrics.core.secrets import mask_secrets, register_secret  # noqa: F401

T = TypeVar("T")

#: WebSocket close codes that mean "try later": 1012 service restart, 1013 try again later
RETRY_CLOSE_CODES = frozenset({1012, 1013})


class NetError(AgentError):
    """A network call failed (one line, secrets masked).

    Attributes:
        retryable: worth another try (see the module docstring).
        retry_after: seconds the server asked to wait (``Retry-After``), ``None`` if it did not say.
        status: the HTTP status or WebSocket close code, if any.
    """

    def __init__(self, message: str, *, retryable: bool = False, retry_after: Optional[float] = None,
                 status: Optional[int] = None):
        super().__init__(mask_secrets(" ".join(str(message).split())))
        self.retryable = retryable
        self.retry_after = retry_after
        self.status = status


class MissingKeyError(AgentError):
    """The environment variable that should hold an API key is not set (names the variable only)."""


def api_key(env: str, *, required: bool = True) -> Optional[str]:
    """The API key held by environment variable ``env`` (registered for masking).

    Raises:
        MissingKeyError: ``required`` and the variable is unset or empty, or (always) the value
            cannot be sent in an HTTP header (:func:`key_problem`); the message names the
            variable, never a value. A whole-run problem: every request would fail the same way.
    """
    from spear_metrics.core.net import env_key

    try:
        return env_key(env, required=required)
    except ValueError as e:
        raise MissingKeyError(str(e)) from None


#: the request-tracing header the adapters send with the row's identity (OpenAI echoes it in its logs)
REQUEST_ID_HEADER = "X-Client-Request-Id"


def request_id(row_id: str) -> str:
    """``row_id`` as a header value: printable ASCII, at most 512 characters."""
    text = "".join(c if 32 < ord(c) < 127 else "_" for c in str(row_id))
    return text[:512] or "row"


def http_error(status: int, body: str = "", headers: Optional[Mapping[str, str]] = None, *, what: str = "server") -> NetError:
    """The :class:`NetError` for an HTTP error ``status`` (retryable per :data:`RETRY_STATUSES`,
    ``Retry-After`` read from ``headers``); ``body`` is masked (:func:`mask_secrets`, whole: a key
    cut in two would no longer be recognised), then cut to 200 characters."""
    h = {str(k).lower(): v for k, v in (headers or {}).items()}
    detail = mask_secrets(" ".join(str(body or "").split()))[:200]
    msg = f"{what} answered HTTP {status}" + (f": {detail}" if detail else "")
    return NetError(msg, retryable=retryable_status(status), retry_after=parse_retry_after(h.get("retry-after")),
                    status=status)


#: loop time (``loop.time()``, s) at which the current row's time limit ends; ``None`` outside a row
ROW_DEADLINE: contextvars.ContextVar[Optional[float]] = contextvars.ContextVar("spearbench_row_deadline", default=None)


@contextlib.asynccontextmanager
async def row_deadline(limit_s: float):
    """``asyncio.timeout(limit_s)`` for one row's session that also tells :func:`with_retries`
    when the row ends (:data:`ROW_DEADLINE`), so it never sleeps past it. Raises ``TimeoutError``
    when the limit passes (as ``asyncio.timeout``)."""
    token = ROW_DEADLINE.set(asyncio.get_running_loop().time() + limit_s)
    try:
        async with asyncio.timeout(limit_s):
            yield
    finally:
        ROW_DEADLINE.reset(token)


async def with_retries(call: Callable[[], Awaitable[T]], policy: RetryPolicy, *,
                       rng: Optional[random.Random] = None,
                       sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep) -> T:
    """``await call()`` with :class:`RetryPolicy` retries of retryable :class:`NetError` s.

    Raises:
        NetError: a non-retryable error at once; after ``max_tries`` the last one, as
            ``gave up after N tries: <reason>``; at once, when the server's ``Retry-After`` (or
            the backoff) would end after the row's time limit (:func:`row_deadline`), e.g.
            ``rate limited (HTTP 429, Retry-After 86400 s beyond the row time limit): <reason>``
            (sleeping would only end as "timed out", hiding why).
        Anything else ``call`` raises, at once.
    """
    rng = rng or random.Random()
    for attempt in range(policy.max_tries):
        try:
            return await call()
        except NetError as e:
            if not e.retryable:
                raise
            if attempt + 1 >= policy.max_tries:
                raise NetError(f"gave up after {policy.max_tries} tries: {e}", retryable=False,
                               status=e.status) from None
            wait = policy.delay(attempt, e.retry_after, rng)
            deadline = ROW_DEADLINE.get()
            if deadline is not None:
                left = deadline - asyncio.get_running_loop().time()
                asked = e.retry_after if e.retry_after is not None else wait
                if asked >= left or wait >= left:
                    what = "rate limited" if e.status == 429 else "asked to wait"
                    code = f"HTTP {e.status}, " if e.status is not None else ""
                    how = f"Retry-After {asked:g} s" if e.retry_after is not None else f"backoff {wait:g} s"
                    raise NetError(f"{what} ({code}{how} beyond the row time limit): {e}", retryable=False,
                                   status=e.status) from None
            await sleep(wait)
    raise AssertionError("unreachable")


def close_reason(exc: BaseException) -> tuple[Optional[int], str]:
    """How a WebSocket connection closed, read from websockets' ``ConnectionClosed`` ``exc``:
    ``(close code or None, words)``, e.g. ``(1011, "code 1011 (internal error)")``, or ``(None,
    "the connection was lost without a close frame")`` (the project's one reading of a close frame)."""
    rcvd = getattr(exc, "rcvd", None)
    code = getattr(rcvd, "code", None)
    reason = getattr(rcvd, "reason", "") or ""
    if code is None:
        return None, "the connection was lost without a close frame"
    return code, f"code {code}" + (f" ({reason})" if reason else "")


async def settle(receiver: Optional[asyncio.Task], timeout_s: float = 1.0) -> None:
    """Let a receiver task read what arrived before the connection closed (at most ``timeout_s``
    s), so that a send that met the closed connection reports the server's own reason."""
    if receiver is not None and not receiver.done():
        await asyncio.wait({receiver}, timeout=timeout_s)


async def within(seconds: float, awaitable: Awaitable[T], what: str) -> T:
    """``await awaitable`` for at most ``seconds``.

    Raises:
        NetError: ``<what> timed out after N s`` (retryable: a slow server may answer next time).
    """
    try:
        return await asyncio.wait_for(awaitable, timeout=seconds)
    except asyncio.TimeoutError:
        raise NetError(f"{what} timed out after {seconds:g} s", retryable=True) from None


#: THE limit (bytes) of one HTTP response body an adapter reads (the Chat Completions answer,
#: an error body): 3,600 s of 24 kHz 16-bit PCM (the longest answer ``score`` reads) is 173 MB,
#: 230 MB in base64 inside JSON; 256 MiB holds it. Read as the body arrives (:class:`BoundedTransport`).
MAX_RESPONSE_BYTES = 2 ** 28


class ResponseTooLarge(NetError):
    """A response body passed its size limit while it arrived (not retryable: the same request
    would get the same body)."""


def bounded_http_client(*, timeout_s: float, max_bytes: Optional[int] = None, where: str = "server",
                        **kw: Any) -> Any:
    """An ``httpx.AsyncClient`` whose every response body is cut at ``max_bytes`` (raises
    :class:`ResponseTooLarge` as the body arrives, wrapped by whatever calls httpx, e.g. the
    ``openai`` SDK's ``APIConnectionError`` whose ``__cause__`` it is). ``timeout_s`` is httpx's
    per-operation timeout; the caller bounds the whole call (``asyncio.timeout``). ``max_bytes``
    ``None``: :data:`MAX_RESPONSE_BYTES` (read when the client is made). It asks for
    uncompressed bodies (``Accept-Encoding: identity``) and refuses a compressed one anyway (a
    gzip bomb: its decoded size has no bound)."""
    import httpx

    if max_bytes is None:
        max_bytes = MAX_RESPONSE_BYTES

    class BoundedStream(httpx.AsyncByteStream):
        """The response body, refused once more than ``max_bytes`` bytes have arrived."""

        def __init__(self, inner: Any):
            self._inner, self._n = inner, 0

        async def __aiter__(self):
            async for chunk in self._inner:
                self._n += len(chunk)
                if self._n > max_bytes:
                    raise ResponseTooLarge(f"{where} sent a response of more than {max_bytes} bytes "
                                           "(refused as it arrived)")
                yield chunk

        async def aclose(self) -> None:
            await self._inner.aclose()

    class BoundedTransport(httpx.AsyncHTTPTransport):
        async def handle_async_request(self, request: Any) -> Any:
            resp = await super().handle_async_request(request)
            coding = resp.headers.get("content-encoding", "").strip().lower()
            if coding not in ("", "identity"):  # asked for identity: a compressed body's size is unbounded
                await resp.aclose()
                raise ResponseTooLarge(f"{where} sent a compressed response (Content-Encoding: {coding[:40]}) "
                                       "although asked for none; refused (its decoded size has no bound)")
            resp.stream = BoundedStream(resp.stream)
            return resp

    headers = {"Accept-Encoding": "identity", **kw.pop("headers", {})}
    return httpx.AsyncClient(transport=BoundedTransport(), timeout=timeout_s, headers=headers, **kw)


def too_large_cause(exc: BaseException) -> Optional[ResponseTooLarge]:
    """The :class:`ResponseTooLarge` behind ``exc`` (itself or in its ``__cause__``/``__context__``
    chain), ``None`` if none."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, ResponseTooLarge):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None
