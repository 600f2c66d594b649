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
  :func:`spear_metrics.agents.net.retryable_status`: 408, 409, 425, 429, 500, 502, 503, 504) is
  retried, at most ``max_retries`` times, sleeping ``backoff_s * 2**k`` before retry ``k + 1`` or,
  when the server sent ``Retry-After`` (:func:`spear_metrics.agents.net.parse_retry_after`), that
  long; never longer than ``max_wait_s`` (:class:`spear_metrics.agents.net.RetryPolicy` without
  jitter). Any other HTTP error status is not retried. After the retries :class:`JudgeError` says why in one line and
  carries every attempt (``attempts``). The key is registered for masking
  (:func:`spear_metrics.core.secrets.mask_secrets`): an error body that echoes it is stored as ``***``.
- Deterministic settings by default (``temperature=0``, ``seed=0``), as FDB's judge;
  ``temperature=None`` / ``seed=None`` leave the field out of the request (the server's default).
- One :class:`Judge` may be used from several threads at once (one pooled ``httpx.Client``).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Sequence, TypeVar

from spear_metrics.core.secrets import mask_secrets, register_secret

T = TypeVar("T")

_FENCE = re.compile(r"```(?:json|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)
_OUTER_BRACES = re.compile(r"\{.*\}", re.DOTALL)


class JudgeError(RuntimeError):
    """The judge gave no usable answer (after retries); the message is one line.

    Attributes (set where known; class defaults otherwise):
        status: the HTTP status of the last failed request (``None``: no HTTP error).
        fatal: ``True`` when a retry cannot help (any HTTP error status but those
            :func:`spear_metrics.agents.net.retryable_status` retries).
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
    """What :meth:`Judge.ask` returns: the parsed ``value``, the ``reply`` it came from and
    every ``attempt`` of the call (:class:`Attempt`; the last one gave the answer)."""

    value: T
    reply: str
    attempts: list[Attempt] = field(default_factory=list)


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
        except (json.JSONDecodeError, ValueError) as e:
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
        timeout: seconds per request (connect + read).
        backoff_s: sleep before retry ``k`` is ``backoff_s * 2**k`` seconds (0 = no sleep), or the
            server's ``Retry-After``.
        max_wait_s: longest sleep before a retry, also when ``Retry-After`` asks for more (s).
        key_source: where ``api_key`` came from (an environment variable or option name), named in
            the error when the key cannot be sent in an HTTP header.

    Raises:
        ValueError: no ``base_url`` or ``model``; a key that cannot be sent in an HTTP header
            (non-ASCII or control characters: :func:`spear_metrics.agents.net.key_problem`).

    The key never appears in messages, errors or :meth:`describe`.
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
        from spear_metrics.core.net import RetryPolicy

        self._retry = RetryPolicy(max_tries=1 + self.max_retries, base_delay_s=self.backoff_s,
                                  max_delay_s=self.max_wait_s, jitter=False)
        self._api_key = api_key if api_key is not None else (os.environ.get("OPENAI_API_KEY") or None)
        register_secret(self._api_key)  # masked wherever it would appear (spear_metrics.core.secrets.mask_secrets)
        if self._api_key:
            from spear_metrics.core.net import key_problem

            why = key_problem(self._api_key.strip())
            if why:  # every request would fail the same way: a whole-run problem, named, never quoted
                raise ValueError(f"the judge API key ({key_source if api_key is not None else 'OPENAI_API_KEY'}) {why}")
            self._api_key = self._api_key.strip()
        self._client = None
        self._lock = threading.Lock()

    def describe(self) -> str:
        """``"<model> @ <base_url>"`` for provenance (no key)."""
        return f"{self.model} @ {self.base_url}"

    def _http(self):
        with self._lock:  # one pool for every thread (httpx.Client is thread-safe)
            if self._client is None:
                import httpx

                headers = {"Content-Type": "application/json"}
                if self._api_key:
                    headers["Authorization"] = f"Bearer {self._api_key}"
                self._client = httpx.Client(timeout=self.timeout, headers=headers)
            return self._client

    def close(self) -> None:
        """Close the HTTP connection pool."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def __enter__(self) -> "Judge":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def complete(self, messages: list[dict], extra_body: dict[str, Any] | None = None) -> str:
        """One chat-completions request; returns the first choice's message content.

        Args:
            messages: the chat messages.
            extra_body: more request fields (e.g. ``response_format``, ``max_completion_tokens``).

        Raises:
            JudgeError: network error, HTTP error status, or a response without content
                (no retry here; :meth:`ask` retries). ``JudgeError.fatal`` is True when a
                retry cannot help (not :func:`~spear_metrics.agents.net.retryable_status`); ``JudgeError.body`` holds the
                error response's text, ``status`` its status and ``retry_after`` the seconds of
                its ``Retry-After`` header.
        """
        import httpx

        from spear_metrics.core.net import parse_retry_after, retryable_status

        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.seed is not None:
            body["seed"] = int(self.seed)
        body.update(extra_body or {})
        try:
            r = self._http().post(f"{self.base_url}/chat/completions", json=body)
        except httpx.HTTPError as e:
            raise JudgeError(f"request to {self.base_url} failed: {type(e).__name__}: "
                             f"{mask_secrets(' '.join(str(e).split()))[:200]}") from None
        if r.status_code >= 400:  # a body may echo the key ("Incorrect API key provided: ..."): masked whole, then cut
            err = JudgeError(f"HTTP {r.status_code} from {self.base_url}/chat/completions: "
                             f"{mask_secrets(' '.join(r.text.split()))[:200]}")
            err.status = r.status_code
            err.fatal = not retryable_status(r.status_code)
            err.body = mask_secrets(r.text)
            err.retry_after = parse_retry_after(r.headers.get("Retry-After"))
            raise err
        try:
            content = r.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise JudgeError(f"response is not a chat completion: {mask_secrets(' '.join(r.text.split()))[:200]}") from None
        if not isinstance(content, str):
            raise JudgeError("chat completion has no text content")
        return content

    def _sleep_before(self, k: int, retry_after: float | None) -> float:
        """Seconds to sleep before retry ``k`` (1-based): ``backoff_s * 2**(k-1)``, or the
        server's ``Retry-After``, capped at ``max_wait_s`` (:class:`~spear_metrics.agents.net.RetryPolicy`)."""
        return self._retry.delay(k - 1, retry_after)

    def ask(self, messages: list[dict], parse: Callable[[str], T], *, extra_body: dict[str, Any] | None = None) -> JudgeAnswer[T]:
        """Ask, and parse the reply with ``parse`` (which raises ``ValueError`` on a reply it
        refuses); retried as the module says.

        An HTTP 400 that names a field of ``extra_body`` is retried without it, as SPEAR's stance
        client does: ``max_completion_tokens`` becomes ``max_tokens``, ``response_format`` is
        dropped. Any other HTTP status that :func:`~spear_metrics.agents.net.retryable_status`
        does not retry is not retried.

        Args:
            messages: the chat messages (text, or lists of content parts).
            parse: reply text -> value; ``ValueError`` = malformed (retried).
            extra_body: more request fields (see :meth:`complete`).

        Returns:
            :class:`JudgeAnswer` (``value``, ``reply``, ``attempts``).

        Raises:
            JudgeError: one line: the last reason and how many attempts were made; ``kind`` says
                whether the last attempt had a (malformed) reply, ``attempts`` holds them all,
                ``status``/``fatal`` those of the last HTTP error.
        """
        extra = dict(extra_body or {})
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
                reply = self.complete(messages, extra)
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
                value = parse(reply)
            except ValueError as e:
                last, kind, last_err = f"malformed reply: {' '.join(str(e).split())}", "malformed", None
                attempts.append(Attempt(reply, last, None, waited))
                continue
            attempts.append(Attempt(reply, None, None, waited))
            return JudgeAnswer(value, reply, attempts)
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
        device: torch device (default ``cuda`` when available, else ``cpu``).
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
            device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
            self._loaded = (tok, lm.to(device).eval())
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

    def ask(self, messages: list[dict], parse: Callable[[str], T], *, extra_body: dict[str, Any] | None = None) -> JudgeAnswer[T]:
        """One greedy reply parsed with ``parse`` (no retry: the same input gives the same reply).

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
