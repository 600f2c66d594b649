"""An LLM judge over any OpenAI-compatible chat-completions endpoint (vLLM, TGI, llama.cpp,
OpenAI itself, Gemini's OpenAI-compatible endpoint...).

The judge POSTs ``{base_url}/chat/completions`` (``base_url`` as OpenAI clients take it, e.g.
``http://127.0.0.1:8000/v1``) through ``httpx``. Messages go out as given: plain text, or a list
of content parts (``{"type": "text", ...}``, audio as ``{"type": "input_audio", "input_audio":
{"data", "format"}}``, as SpeechRole's judge sends them).

- :meth:`Judge.ask` parses the reply with any parser (a v1 SpeechRole reply is prose ending in
  ``[Scores]: (a, b)``); :meth:`Judge.ask_json` asks for a JSON object and parses it strictly:
  the whole reply must be one JSON object, or the reply must hold a fenced
  ```` ```json ... ``` ```` block holding one.
- A malformed reply, a network error or a retryable HTTP error (the adapters' rule,
  :func:`spear_metrics.core.net.retryable_status`: 408, 409, 425, 429, 500, 502, 503, 504) is
  retried, at most ``max_retries`` times, sleeping ``backoff_s * 2**k`` before retry ``k + 1`` or,
  when the server sent ``Retry-After`` (:func:`spear_metrics.core.net.parse_retry_after`), that
  long; never longer than ``max_wait_s`` (:class:`spear_metrics.core.net.RetryPolicy` without
  jitter). Any other HTTP error status is not retried. After the retries :class:`JudgeError` says why in one line and
  carries every attempt (``attempts``). The key is registered for masking
  (:func:`spear_metrics.core.secrets.mask_secrets`): an error body that echoes it is stored as ``***``.
- Deterministic settings by default (``temperature=0``, ``seed=0``), as FDB's judge;
  ``temperature=None`` / ``seed=None`` leave the field out of the request (the server's default).
- Every request has a TOTAL time limit (``timeout``: connecting, sending and receiving the whole
  reply; a server trickling its reply byte by byte is cut off when it passes) and a size limit
  (``max_reply_bytes``, default :data:`MAX_REPLY_BYTES`; refused as the bytes arrive, never stored).
- A reply cache (:mod:`spear_metrics.core.judge_cache`) answers a request asked before, by any run
  or benchmark, without a call; the returned ``model``, ``system_fingerprint`` and ``usage`` of
  every reply are kept (:class:`Reply`) and tallied per judge (:meth:`Judge.report`).
- The judge's command-line options, the same for every benchmark: :func:`add_judge_options`,
  :func:`judge_config_from_args`, :func:`make_judge`.
- One :class:`Judge` may be used from several threads at once (one pooled ``httpx.AsyncClient`` on
  one I/O thread).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Optional, Sequence, TypeVar

from spear_metrics.core.net import RetryPolicy, key_problem, parse_retry_after, retryable_status
from spear_metrics.core.secrets import mask_secrets, register_secret
from spear_metrics.core.usage import Usage, UsageTally, normalize_usage

T = TypeVar("T")

_FENCE = re.compile(r"```(?:json|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)
_OUTER_BRACES = re.compile(r"\{.*\}", re.DOTALL)


class JudgeError(RuntimeError):
    """The judge gave no usable answer (after retries); the message is one line.

    Attributes (set where known; class defaults otherwise):
        status: the HTTP status of the last failed request (``None``: no HTTP error).
        fatal: ``True`` when a retry cannot help (any HTTP error status but those
            :func:`spear_metrics.core.net.retryable_status` retries).
        retry_after: seconds the server asked to wait (``Retry-After``), ``None`` when it did not.
        body: the error response's text.
        kind: why :meth:`Judge.ask` gave up: ``"malformed"`` (the last attempt got a reply the
            parser refused) or ``"no_reply"`` (network error, HTTP error, no content).
        attempts: every attempt of that call (:class:`Attempt`), oldest first.
    """

    status: int | None = None
    fatal: bool = False
    retry_after: float | None = None
    body: str = ""
    kind: str = "no_reply"
    attempts: list = []


@dataclass
class Attempt:
    """One request of a judged call.

    Attributes:
        reply: the reply text, ``None`` when the request failed.
        error: why the attempt did not count (``None`` when it gave the answer): the HTTP or
            network error, or the parser's reason (``"malformed reply: ..."``).
        status: HTTP status of a failed request, ``None`` otherwise.
        waited_s: seconds slept before this attempt.
    """

    reply: str | None
    error: str | None = None
    status: int | None = None
    waited_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"reply": self.reply, "error": self.error, "status": self.status, "waited_s": round(self.waited_s, 3)}


@dataclass
class JudgeAnswer(Generic[T]):
    """What :meth:`Judge.ask` returns: the parsed ``value``, the ``reply`` it came from,
    every ``attempt`` of the call (:class:`Attempt`; the last one gave the answer) and ``meta``,
    the :class:`Reply` that gave it (returned model id, ``system_fingerprint``, usage, ``cached``;
    ``None`` from a local judge)."""

    value: T
    reply: str
    attempts: list[Attempt] = field(default_factory=list)
    meta: Any = None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def parse_json_reply(text: str, required_keys: Sequence[str] = (), *, outer_braces: bool = False) -> dict[str, Any]:
    """Parse a judge reply into a dict, strictly.

    Accepted: the whole reply is a JSON object (surrounding whitespace allowed), or the reply
    contains a fenced block (```` ```json ```` or plain ```` ``` ````) whose content is a JSON
    object; with ``outer_braces``, also the span from the first ``{`` to the last ``}`` (SPEAR's
    ``bin/STANCE/score.py`` ``extract_json_object``). ``NaN``/``Infinity`` are rejected.

    Raises:
        ValueError: not JSON, not an object, or a required key missing (one-line message).
    """
    if text is None:
        raise ValueError("empty reply")
    s = str(text).strip()
    if not s:
        raise ValueError("empty reply")
    candidates = [s]
    m = _FENCE.search(s)
    if m:
        candidates.insert(0, m.group(1).strip())
    if outer_braces:
        b = _OUTER_BRACES.search(s)
        if b:
            candidates.append(b.group(0))
    obj: Any = None
    err = "reply is not JSON"
    for c in candidates:
        try:
            obj = json.loads(c, parse_constant=_reject_constant)
            break
        except (ValueError, RecursionError) as e:  # RecursionError: a reply nested past the parser's depth
            err = f"reply is not JSON ({e})"
            obj = None
    if obj is None:
        raise ValueError(err)
    if not isinstance(obj, dict):
        raise ValueError(f"reply is JSON {type(obj).__name__}, not an object")
    missing = [k for k in required_keys if k not in obj]
    if missing:
        raise ValueError(f"reply lacks key(s) {', '.join(map(repr, missing))}")
    return obj


#: the largest reply body read from a judge (bytes; a chat completion of a few thousand tokens is
#: a few kB); a larger one is refused as it arrives, never stored
MAX_REPLY_BYTES = 4 * 1024 * 1024
#: the most of an HTTP error body read (bytes)
MAX_ERROR_BYTES = 64 * 1024

_DATED = re.compile(r"(?:19|20)\d{2}-?\d{2}-?\d{2}|-\d{4}(?=-|$)|-\d{2}-\d{2}(?=-|$)|-\d{3}$")


def moving_alias(model: str) -> Optional[str]:
    """Why the model id ``model`` may name different models over time, or ``None`` when it names a
    dated snapshot: ``-latest`` anywhere is an alias; otherwise an id is pinned when it carries a
    date (``2024-08-06``, ``20240806``, ``-0613``, ``-05-06``) or a version suffix (``-002``).
    E.g. ``gpt-4o`` and ``gpt-4-turbo`` are aliases, ``gpt-4o-2024-08-06`` and
    ``gemini-1.5-pro-002`` are pinned (OpenAI's and Google's model-id conventions)."""
    m = str(model).strip()
    low = m.lower()
    if "latest" in low:
        return f"{m!r} is a '-latest' alias (the service moves it to new models)"
    if _DATED.search(low):
        return None
    if "preview" in low or re.search(r"(?:^|-)exp(?:-|$)", low):
        return f"{m!r} is an undated preview id (the service replaces and retires previews)"
    return f"{m!r} names no dated snapshot (the service may move it to a new model)"


@dataclass
class Reply:
    """One chat completion received (or read from the cache).

    Attributes:
        content: the first choice's message text.
        model: the ``model`` the service answered with (``None`` when it sent none).
        system_fingerprint: the service's ``system_fingerprint`` (``None`` when it sent none).
        usage: the reply's token usage (:class:`spear_metrics.core.usage.Usage`; ``None`` when the
            service reported none).
        cached: read from the reply cache (no request, nothing billed).
    """

    content: str
    model: Optional[str] = None
    system_fingerprint: Optional[str] = None
    usage: Optional[Usage] = None
    cached: bool = False

    def to_cache(self) -> dict[str, Any]:
        return {"content": self.content, "model": self.model, "system_fingerprint": self.system_fingerprint,
                "usage": None if self.usage is None else self.usage.to_json()}

    @classmethod
    def from_cache(cls, d: dict[str, Any]) -> "Reply":
        u = d.get("usage")
        return cls(d["content"], d.get("model"), d.get("system_fingerprint"),
                   Usage(**{k: int(v) for k, v in u.items() if k in Usage.__dataclass_fields__}) if isinstance(u, dict) else None,
                   cached=True)


class Judge:
    """A chat-completions judge.

    Args:
        base_url: the OpenAI-compatible API root, e.g. ``http://127.0.0.1:8000/v1``; requests go
            to ``{base_url}/chat/completions``.
        model: the model name the server expects (e.g. ``gpt-4-turbo``, FDB's judge).
        api_key: bearer token; ``None`` reads ``OPENAI_API_KEY`` and sends none when unset.
        temperature: sampling temperature (0 = greedy); ``None`` sends none (the server's default).
        seed: sampling seed sent with each request (servers that honour it are reproducible);
            ``None`` sends none.
        max_retries: extra attempts after the first one (so ``1 + max_retries`` requests at most).
        timeout: the TOTAL time limit of one request, s: connecting, sending and receiving the
            whole reply (a server that trickles its reply is cut off when it passes).
        backoff_s: sleep before retry ``k`` is ``backoff_s * 2**k`` seconds (0 = no sleep), or the
            server's ``Retry-After``.
        max_wait_s: longest sleep before a retry, also when ``Retry-After`` asks for more (s).
        key_source: where ``api_key`` came from (an environment variable name), named in the error
            when the key cannot be sent in an HTTP header.
        cache: the reply cache (:class:`spear_metrics.core.judge_cache.JudgeCache`); ``None``: none.
        max_reply_bytes: the largest reply body accepted (bytes, default :data:`MAX_REPLY_BYTES`).
        prices: a :class:`spear_metrics.core.usage.PriceTable` that :meth:`report` prices the usage with.

    Raises:
        ValueError: no ``base_url`` or ``model``; a key that cannot be sent in an HTTP header
            (non-ASCII or control characters: :func:`spear_metrics.core.net.key_problem`).

    The key never appears in messages, errors or :meth:`describe`. What every call received is
    tallied (:meth:`report`): requests sent, replies from the cache, the returned model ids and
    ``system_fingerprint`` s, and the usage billed (every reply that reached this client, the
    malformed ones that were retried included).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        temperature: float | None = 0.0,
        seed: int | None = 0,
        max_retries: int = 3,
        timeout: float = 60.0,
        *,
        backoff_s: float = 0.5,
        max_wait_s: float = 120.0,
        key_source: str = "api_key",
        cache: Any = None,
        max_reply_bytes: int = MAX_REPLY_BYTES,
        prices: Any = None,
    ):
        if not base_url or not str(base_url).strip():
            raise ValueError("Judge needs a base_url (OpenAI-compatible API root, e.g. http://host:8000/v1)")
        if not model or not str(model).strip():
            raise ValueError("Judge needs a model name")
        self.base_url = str(base_url).rstrip("/")
        self.model = str(model)
        self.temperature = None if temperature is None else float(temperature)
        self.seed = seed
        self.max_retries = max(0, int(max_retries))
        self.timeout = float(timeout)
        self.backoff_s = max(0.0, float(backoff_s))
        self.max_wait_s = max(0.0, float(max_wait_s))
        self.max_reply_bytes = max(1, int(max_reply_bytes))
        self.cache = cache
        self.prices = prices
        self._retry = RetryPolicy(max_tries=1 + self.max_retries, base_delay_s=self.backoff_s,
                                  max_delay_s=self.max_wait_s, jitter=False)
        self._api_key = api_key if api_key is not None else (os.environ.get("OPENAI_API_KEY") or None)
        register_secret(self._api_key)  # masked wherever it would appear (spear_metrics.core.secrets.mask_secrets)
        if self._api_key:
            why = key_problem(self._api_key.strip())
            if why:  # every request would fail the same way: a whole-run problem, named, never quoted
                raise ValueError(f"the judge API key ({key_source if api_key is not None else 'OPENAI_API_KEY'}) {why}")
            self._api_key = self._api_key.strip()
        self._client = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self.usage = UsageTally()
        self._counts = {"calls": 0, "answers": 0, "requests": 0, "from_cache": 0}
        self._returned: dict[str, int] = {}
        self._fingerprints: dict[str, int] = {}

    def describe(self) -> str:
        """``"<model> @ <base_url>"`` for provenance (no key)."""
        return f"{self.model} @ {self.base_url}"

    # ------------------------------------------------------------------ transport

    def _io_loop(self) -> asyncio.AbstractEventLoop:
        """The event loop (one daemon thread) every request of this judge runs on, from any thread."""
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                t = threading.Thread(target=loop.run_forever, name="spear-judge-io", daemon=True)
                t.start()
                self._loop, self._thread = loop, t
            return self._loop

    def _aclient(self):
        if self._client is None:  # created on the I/O loop (httpx.AsyncClient is bound to one loop)
            import httpx

            headers = {"Content-Type": "application/json"}
            if self._api_key:
                headers["Authorization"] = f"Bearer {self._api_key}"
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout), headers=headers)
        return self._client

    def close(self) -> None:
        """Close the HTTP connection pool and stop the I/O thread."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None:
            return

        async def shut() -> None:
            if self._client is not None:
                client, self._client = self._client, None
                await client.aclose()

        try:
            asyncio.run_coroutine_threadsafe(shut(), loop).result(timeout=10)
        except Exception:  # noqa: BLE001 - closing what may already be broken
            pass
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=10)
        if not loop.is_running():
            loop.close()

    def __enter__(self) -> "Judge":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _body(self, messages: list[dict], extra_body: dict[str, Any] | None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.seed is not None:
            body["seed"] = int(self.seed)
        body.update(extra_body or {})
        return body

    async def _post(self, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        """POST ``body``; ``(status, headers, body bytes)`` read within the total time limit and
        the size limit (error bodies: at most :data:`MAX_ERROR_BYTES`, the rest dropped)."""
        url = f"{self.base_url}/chat/completions"
        async with asyncio.timeout(self.timeout):
            async with self._aclient().stream("POST", url, json=body) as r:
                limit = self.max_reply_bytes if r.status_code < 400 else MAX_ERROR_BYTES
                declared = r.headers.get("Content-Length")
                if r.status_code < 400 and declared and declared.isdigit() and int(declared) > limit:
                    raise JudgeError(f"reply of {int(declared)} bytes refused (larger than the {limit}-byte limit of a "
                                     f"judge reply)")
                buf = bytearray()
                async for chunk in r.aiter_bytes():
                    buf += chunk
                    if len(buf) > limit:
                        if r.status_code >= 400:  # enough to say why
                            del buf[limit:]
                            break
                        raise JudgeError(f"reply refused: more than the {limit}-byte limit of a judge reply arrived")
                return r.status_code, dict(r.headers), bytes(buf)

    def request(self, messages: list[dict], extra_body: dict[str, Any] | None = None) -> Reply:
        """One chat-completions request (no cache, no retry): the first choice's text with the
        returned model id, ``system_fingerprint`` and usage (tallied, see :meth:`report`).

        Raises:
            JudgeError: network error, the total time limit passed (``timeout``), a reply larger
                than ``max_reply_bytes``, an HTTP error status, or a response without content.
                ``JudgeError.fatal`` is True when a retry cannot help (not
                :func:`~spear_metrics.core.net.retryable_status`); ``body`` holds the error
                response's text, ``status`` its status and ``retry_after`` the seconds of its
                ``Retry-After`` header.
        """
        import httpx

        body = self._body(messages, extra_body)
        with self._lock:
            self._counts["requests"] += 1
        fut = asyncio.run_coroutine_threadsafe(self._post(body), self._io_loop())
        try:  # the coroutine ends at its own limit; the margin only guards against a stopped I/O thread
            status, headers, data = fut.result(timeout=self.timeout + 30.0)
        except JudgeError:
            raise
        except (TimeoutError, asyncio.TimeoutError, concurrent.futures.TimeoutError):
            fut.cancel()
            raise JudgeError(f"no complete reply from {self.base_url} within the {self.timeout:g} s total time limit "
                             "of a judge request") from None
        except (httpx.HTTPError, OSError, ValueError) as e:  # network, TLS, a URL httpx refuses...
            raise JudgeError(f"request to {self.base_url} failed: {type(e).__name__}: "
                             f"{mask_secrets(' '.join(str(e).split()))[:200]}") from None
        except BaseException:
            fut.cancel()
            raise
        text = data.decode("utf-8", errors="replace")
        if status >= 400:  # a body may echo the key ("Incorrect API key provided: ..."): masked whole, then cut
            err = JudgeError(f"HTTP {status} from {self.base_url}/chat/completions: "
                             f"{mask_secrets(' '.join(text.split()))[:200]}")
            err.status = status
            err.fatal = not retryable_status(status)
            err.body = mask_secrets(text)
            err.retry_after = parse_retry_after({k.lower(): v for k, v in headers.items()}.get("retry-after"))
            raise err
        try:
            obj = json.loads(text)
            content = obj["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError, RecursionError):
            raise JudgeError(f"response is not a chat completion: {mask_secrets(' '.join(text.split()))[:200]}") from None
        usage = normalize_usage(obj.get("usage"))
        returned = obj.get("model") if isinstance(obj.get("model"), str) else None
        fp = obj.get("system_fingerprint") if isinstance(obj.get("system_fingerprint"), str) else None
        self.usage.add(returned or self.model, usage)  # billed, whatever the parser says of it
        if not isinstance(content, str):
            raise JudgeError("chat completion has no text content")
        return Reply(content, returned, fp, usage)

    def complete(self, messages: list[dict], extra_body: dict[str, Any] | None = None) -> str:
        """One chat-completions request; returns the first choice's message content
        (:meth:`request` without the reply's metadata).

        Args:
            messages: the chat messages.
            extra_body: more request fields (e.g. ``response_format``, ``max_completion_tokens``).

        Raises:
            JudgeError: as :meth:`request`.
        """
        return self.request(messages, extra_body).content

    def _sleep_before(self, k: int, retry_after: float | None) -> float:
        """Seconds to sleep before retry ``k`` (1-based): ``backoff_s * 2**(k-1)``, or the
        server's ``Retry-After``, capped at ``max_wait_s`` (:class:`~spear_metrics.core.net.RetryPolicy`)."""
        return self._retry.delay(k - 1, retry_after)

    def _answered(self, reply: Reply) -> None:
        with self._lock:
            self._counts["answers"] += 1
            if reply.cached:
                self._counts["from_cache"] += 1
            if reply.model:
                self._returned[reply.model] = self._returned.get(reply.model, 0) + 1
            if reply.system_fingerprint:
                self._fingerprints[reply.system_fingerprint] = self._fingerprints.get(reply.system_fingerprint, 0) + 1

    def tally(self, reply: Optional[Reply]) -> None:
        """Count one call made outside :meth:`ask` (a caller with its own retry rule over
        :meth:`request`, e.g. FDB v1.5's seed-stepping behaviour judge) in :meth:`report`: one call,
        and, when ``reply`` is the reply that answered it, its answer (from the cache or not,
        returned model id, ``system_fingerprint``)."""
        with self._lock:
            self._counts["calls"] += 1
        if reply is not None:
            self._answered(reply)

    def ask(self, messages: list[dict], parse: Callable[[str], T], *, extra_body: dict[str, Any] | None = None,
            count_call: bool = True) -> JudgeAnswer[T]:
        """Ask, and parse the reply with ``parse`` (which raises ``ValueError`` on a reply it
        refuses); answered from the reply cache when it holds this exact request and ``parse``
        accepts the stored reply, else retried as the module says (and the accepted reply stored:
        a refused, unparseable or failed reply never is).

        An HTTP 400 that names a field of ``extra_body`` is retried without it, as SPEAR's stance
        client does: ``max_completion_tokens`` becomes ``max_tokens``, ``response_format`` is
        dropped. Any other HTTP status that :func:`~spear_metrics.core.net.retryable_status`
        does not retry is not retried.

        Args:
            messages: the chat messages (text, or lists of content parts).
            parse: reply text -> value; ``ValueError`` = malformed (retried).
            extra_body: more request fields (see :meth:`complete`).
            count_call: count this call in :meth:`report`'s ``calls``; ``False`` for one attempt of
                a caller's own retry rule, which counts its call once (:meth:`tally`).

        Returns:
            :class:`JudgeAnswer` (``value``, ``reply``, ``attempts``, and the :class:`Reply`
            ``meta``: returned model, ``system_fingerprint``, usage, ``cached``).

        Raises:
            JudgeError: one line: the last reason and how many attempts were made; ``kind`` says
                whether the last attempt had a (malformed) reply, ``attempts`` holds them all,
                ``status``/``fatal`` those of the last HTTP error.
        """
        extra = dict(extra_body or {})
        if count_call:
            with self._lock:
                self._counts["calls"] += 1
        key = material = None
        if self.cache is not None and self.cache.mode != "off":
            from spear_metrics.core.judge_cache import request_key

            key, material = request_key(self._body(messages, extra))
            hit = self.cache.get(key)
            if hit is not None:
                cached = Reply.from_cache(hit)
                try:
                    value = parse(cached.content)
                except ValueError:  # another parser's reply to the same question: ask the service
                    pass
                else:
                    self._answered(cached)
                    return JudgeAnswer(value, cached.content, [Attempt(cached.content)], cached)
        last = "no attempt"
        attempts: list[Attempt] = []
        kind = "no_reply"
        last_err: JudgeError | None = None
        retry_after: float | None = None
        for k in range(1 + self.max_retries):
            waited = self._sleep_before(k, retry_after) if k else 0.0
            if waited:
                time.sleep(waited)
            retry_after = None
            try:
                reply = self.request(messages, extra)
            except JudgeError as e:
                last, kind, last_err = str(e), "no_reply", e
                attempts.append(Attempt(None, last, e.status, waited))
                retry_after = e.retry_after
                if e.status == 400 and "max_completion_tokens" in e.body and "max_completion_tokens" in extra:
                    extra["max_tokens"] = extra.pop("max_completion_tokens")
                    continue
                if e.status == 400 and "response_format" in e.body and "response_format" in extra:
                    extra.pop("response_format")
                    continue
                if e.fatal:
                    break
                continue
            try:
                value = parse(reply.content)
            except ValueError as e:
                last, kind, last_err = f"malformed reply: {' '.join(str(e).split())}", "malformed", None
                attempts.append(Attempt(reply.content, last, None, waited))
                continue
            attempts.append(Attempt(reply.content, None, None, waited))
            if key is not None:
                self.cache.put(key, material, reply.to_cache())
            self._answered(reply)
            return JudgeAnswer(value, reply.content, attempts, reply)
        err = JudgeError(f"judge {self.model} gave no usable answer after {len(attempts)} attempt(s): {last}")
        err.kind = kind
        err.attempts = attempts
        if last_err is not None and kind == "no_reply":
            err.status, err.fatal, err.body = last_err.status, last_err.fatal, last_err.body
        raise err

    def ask_json(self, messages: list[dict], required_keys: Sequence[str], *, extra_body: dict[str, Any] | None = None,
                 outer_braces: bool = False) -> dict:
        """Ask and parse a JSON object holding ``required_keys`` (:func:`parse_json_reply`),
        retried as :meth:`ask` says.

        Args:
            messages: the chat messages.
            required_keys: keys the reply object must hold.
            extra_body: more request fields (see :meth:`complete`).
            outer_braces: also accept the first-``{``-to-last-``}`` span of a reply
                (see :func:`parse_json_reply`).

        Returns:
            The parsed object.

        Raises:
            JudgeError: one line: the last reason, and how many attempts were made.
        """
        return self.ask(messages, lambda text: parse_json_reply(text, required_keys, outer_braces=outer_braces),
                        extra_body=extra_body).value

    def report(self, prices: Any = None) -> dict[str, Any]:
        """What a run records of its judge calls (``summary.json`` ``judge_calls``): ``requested_model``,
        ``moving_alias`` (the reason, or ``None`` for a pinned id: :func:`moving_alias`),
        ``calls``, ``answers``, ``answers_from_cache``, ``requests`` (sent to the service),
        ``returned_models`` / ``system_fingerprints`` (value -> answers), ``cache`` (its
        counts) and ``usage`` (:meth:`spear_metrics.core.usage.UsageTally.to_json`, with costs when
        ``prices`` (default: the judge's own ``prices``) is a :class:`~spear_metrics.core.usage.PriceTable`)."""
        prices = prices if prices is not None else self.prices
        with self._lock:
            out: dict[str, Any] = {"requested_model": self.model, "moving_alias": moving_alias(self.model),
                                   "calls": self._counts["calls"], "answers": self._counts["answers"],
                                   "answers_from_cache": self._counts["from_cache"], "requests": self._counts["requests"],
                                   "returned_models": dict(sorted(self._returned.items())),
                                   "system_fingerprints": dict(sorted(self._fingerprints.items()))}
        out["cache"] = self.cache.to_json() if self.cache is not None else {"mode": "off"}
        out["usage"] = self.usage.to_json(prices)
        return out


class LocalJudge:
    """A judge run in this process: a transformers causal language model (e.g.
    ``meta-llama/Llama-3.1-8B-Instruct``) found through :func:`spear_metrics.core.models.resolve_model`
    (a local folder, the Hugging Face cache, or the Hub; ``HF_HUB_OFFLINE`` honoured), with the
    same :meth:`ask` as :class:`Judge`.

    Decoding is greedy (``do_sample=False``) with at most ``max_new_tokens`` new tokens; the
    messages go through the tokenizer's chat template (``add_generation_prompt=True``), or, for a
    tokenizer without one, are joined as ``"<role>: <content>"`` lines ending in ``"assistant:"``.
    Calls are serialised (one generation at a time; ``ask`` may be called from several threads).

    Args:
        model: local folder or Hub id of the model (its tokenizer in the same place).
        max_new_tokens: most tokens generated per reply.
        device: torch device (default: this process's,
            :func:`~spear_metrics.core.batching.device_or_default`: ``cuda:<local rank>`` under
            ``accelerate`` on GPUs, else ``cpu``).
        dtype: ``"auto"`` (the checkpoint's), ``"float32"``, ``"bfloat16"``, ``"float16"``.

    Raises (on the first call, when the model loads):
        spear_metrics.core.models.ModelUnavailableError: the model cannot be had (one line).
    """

    temperature = 0.0  # greedy; recorded like Judge.temperature

    def __init__(self, model: str, *, max_new_tokens: int = 512, device: str | None = None, dtype: str = "auto"):
        if not model or not str(model).strip():
            raise ValueError("LocalJudge needs a model (local folder or Hub id)")
        if int(max_new_tokens) < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        self.model = str(model)
        self.max_new_tokens = int(max_new_tokens)
        self.device = device
        self.dtype = dtype
        self._loaded: tuple[Any, Any] | None = None
        self._lock = threading.Lock()

    def describe(self) -> str:
        """``"<model> (local, greedy, max_new_tokens=N)"`` for provenance."""
        return f"{self.model} (local, greedy, max_new_tokens={self.max_new_tokens})"

    def _load(self) -> tuple[Any, Any]:
        if self._loaded is None:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            from spear_metrics.core.models import ModelUnavailableError, resolve_model

            path = resolve_model(self.model, purpose="LLM judge")
            try:
                tok = AutoTokenizer.from_pretrained(str(path))
                dtype = "auto" if self.dtype == "auto" else getattr(torch, self.dtype)
                lm = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
            except Exception as e:
                raise ModelUnavailableError(f"LLM judge model {self.model!r} cannot be loaded: {type(e).__name__}: "
                                            f"{' '.join(str(e).split())[:200]}") from None
            from spear_metrics.core.batching import device_or_default

            # this process's device: under accelerate each rank its own GPU (a bare "cuda" put every rank on GPU 0)
            self._loaded = (tok, lm.to(device_or_default(self.device)).eval())
        return self._loaded

    def complete(self, messages: list[dict], extra_body: dict[str, Any] | None = None) -> str:
        """The model's greedy reply to ``messages`` (text contents only).

        Raises:
            JudgeError: a message content that is not text, or generation failed.
            spear_metrics.core.models.ModelUnavailableError: the model cannot be loaded.
        """
        import torch

        for m in messages:
            if not isinstance(m.get("content"), str):
                raise JudgeError("the local judge takes text messages only")
        with self._lock:
            tok, lm = self._load()
            if getattr(tok, "chat_template", None):
                ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                              return_dict=True)
                input_ids = ids["input_ids"]
            else:
                text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
                input_ids = tok(text, return_tensors="pt")["input_ids"]
            input_ids = input_ids.to(lm.device)
            pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
            try:
                with torch.inference_mode():
                    out = lm.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                                      max_new_tokens=self.max_new_tokens, pad_token_id=pad)
            except Exception as e:
                raise JudgeError(f"local judge {self.model} failed to generate: {type(e).__name__}: "
                                 f"{' '.join(str(e).split())[:200]}") from None
            return tok.decode(out[0, input_ids.shape[1]:], skip_special_tokens=True)

    def ask(self, messages: list[dict], parse: Callable[[str], T], *, extra_body: dict[str, Any] | None = None,
            count_call: bool = True) -> JudgeAnswer[T]:
        """One greedy reply parsed with ``parse`` (no retry: the same input gives the same reply;
        no cache, no tally: ``count_call`` is :meth:`Judge.ask`'s, accepted and unused).

        Raises:
            JudgeError: generation failed, or ``parse`` refused the reply (``kind="malformed"``).
        """
        reply = self.complete(messages)
        try:
            value = parse(reply)
        except ValueError as e:
            err = JudgeError(f"local judge {self.model} gave no usable answer: malformed reply: {' '.join(str(e).split())}")
            err.kind = "malformed"
            err.attempts = [Attempt(reply, f"malformed reply: {e}")]
            raise err from None
        return JudgeAnswer(value, reply, [Attempt(reply)])

    def close(self) -> None:
        """Free the model."""
        self._loaded = None


# --------------------------------------------------------------------------- one configuration for every benchmark


@dataclass
class JudgeConfig:
    """Everything a judging command needs to build its judge, the same names for every benchmark
    (the command-line options ``--judge-*``, ``--price-table``:
    :func:`spear_metrics.commands.judge_options.add_judge_options`; SPEAR's stances take them as
    ``-o judge_*=`` options).

    Attributes:
        url: OpenAI-compatible API root (``None``: no judge).
        model: the model id requested.
        key_env: the environment variable holding the key (``None``: ``OPENAI_API_KEY`` when set,
            else no key; ``"none"``: never send one). Keys come from the environment only.
        timeout_s: the total time limit of one request (s).
        retries: retries after the first request.
        seed: seed sent with each request (``None``: none sent).
        concurrency: judge calls in flight at once.
        cache: reply cache mode (``readwrite``, ``read``, ``off``).
        require_pinned: refuse a model id that is a moving alias (:func:`moving_alias`).
        price_table: a JSON price table (:class:`spear_metrics.core.usage.PriceTable`), or ``None``.
        temperature: sampling temperature (``None``: the server's default).
        backoff_s: first retry's sleep (doubled each retry), s.
    """

    url: Optional[str] = None
    model: Optional[str] = None
    key_env: Optional[str] = None
    timeout_s: float = 60.0
    retries: int = 3
    seed: Optional[int] = None
    concurrency: int = 4
    cache: str = "readwrite"
    require_pinned: bool = False
    price_table: Optional[str] = None
    temperature: Optional[float] = 0.0
    backoff_s: float = 0.5

    def prices(self) -> Any:
        """The :class:`~spear_metrics.core.usage.PriceTable` of :attr:`price_table` (``None`` without one).

        Raises:
            spear_metrics.core.usage.PriceTableError: an unusable file (one line).
        """
        if not self.price_table:
            return None
        from spear_metrics.core.usage import PriceTable

        return PriceTable(self.price_table)


def judge_key(key_env: Optional[str]) -> str:
    """The key to send for ``key_env`` (:class:`JudgeConfig`); ``""`` = send none.

    Raises:
        ValueError: a variable named explicitly that is unset, or a key an HTTP header cannot carry
            (names the variable only).
    """
    from spear_metrics.core.net import env_key

    env = (key_env or "").strip()
    if env.lower() == "none":
        return ""
    if not env:
        return env_key("OPENAI_API_KEY", required=False) or ""
    try:
        return env_key(env, required=True) or ""
    except ValueError as e:
        raise ValueError(f"--judge-key-env {env}: {e}") from None


def make_judge(config: JudgeConfig, *, warn: Callable[[str], None] | None = None) -> Optional[Judge]:
    """The :class:`Judge` of ``config`` (``None`` when it names no judge), with its reply cache.

    A model id that is a moving alias (:func:`moving_alias`) is told to ``warn`` in one line, or
    refused with ``require_pinned``.

    Raises:
        ValueError: ``url`` without ``model`` (or the reverse), a key problem (:func:`judge_key`),
            an unknown cache mode, a moving alias under ``require_pinned`` (one line each: a
            whole-run problem).
        spear_metrics.core.usage.PriceTableError: an unusable price table.
    """
    if bool(config.url) != bool(config.model):
        raise ValueError("--judge-url and --judge-model go together")
    if not config.url:
        return None
    config.prices()  # an unusable table is refused before any call
    alias = moving_alias(str(config.model))
    if alias and config.require_pinned:
        raise ValueError(f"--judge-require-pinned: {alias}; give a dated model id (e.g. gpt-4o-2024-08-06)")
    if alias and warn is not None:
        warn(f"warning: judge model {alias}: its verdicts may not be reproducible (recorded in summary.json; "
             "--judge-require-pinned refuses it)")
    from spear_metrics.core.judge_cache import JudgeCache

    key = judge_key(config.key_env)
    cache = JudgeCache(config.cache, warn=warn)
    cache.check()  # an unusable folder is said (one line) before any call; the run goes on without it
    return Judge(str(config.url), str(config.model), api_key=key, temperature=config.temperature,
                 seed=None if config.seed is None else int(config.seed), max_retries=int(config.retries),
                 timeout=float(config.timeout_s), backoff_s=float(config.backoff_s),
                 key_source=(config.key_env or "OPENAI_API_KEY"), cache=cache if config.cache != "off" else None,
                 prices=config.prices())


def judge_calls_line(report: dict[str, Any]) -> str:
    """One line of :meth:`Judge.report` for the end of a command: answers, from the cache,
    requests, returned model ids, tokens and cost (:func:`spear_metrics.core.usage.usage_line`)."""
    from spear_metrics.core.usage import usage_line

    returned = ", ".join(report.get("returned_models") or {}) or "not said"
    return (f"judge {report.get('requested_model')}: {report.get('answers', 0)} answer(s), "
            f"{report.get('answers_from_cache', 0)} from the cache, {report.get('requests', 0)} request(s) sent; "
            f"service answered as {returned}; {usage_line(report.get('usage') or {})}")
