"""An LLM judge over any OpenAI-compatible chat-completions endpoint (vLLM, TGI, llama.cpp,
OpenAI itself...), with strict JSON replies.

The judge POSTs ``{base_url}/chat/completions`` (``base_url`` as OpenAI clients take it, e.g.
``http://127.0.0.1:8000/v1``) through ``httpx``, asks for a JSON object and parses the reply
strictly: the whole reply must be one JSON object, or the reply must hold a fenced
```` ```json ... ``` ```` block holding one. A malformed reply, a reply that lacks a required key,
a network error or an HTTP error is retried; after the retries :class:`JudgeError` says why in
one line. Deterministic settings by default (``temperature=0``, ``seed=0``), as FDB's judge.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any, Sequence

from spear_metrics.core.secrets import mask_secrets, register_secret

#: HTTP statuses that will not get better on a retry (bad request, auth, unknown route/model)
_FATAL_STATUS = {400, 401, 403, 404, 405, 422}
_FENCE = re.compile(r"```(?:json|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)
_OUTER_BRACES = re.compile(r"\{.*\}", re.DOTALL)


class JudgeError(RuntimeError):
    """The judge gave no usable answer (after retries); the message is one line."""


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
        temperature: sampling temperature (0 = greedy).
        seed: sampling seed sent with each request (servers that honour it are reproducible).
        max_retries: extra attempts after the first one (so ``1 + max_retries`` requests at most).
        timeout: seconds per request (connect + read).
        backoff_s: sleep before retry ``k`` is ``backoff_s * 2**k`` seconds (0 = no sleep).

    The key never appears in messages, errors or :meth:`describe`.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        temperature: float = 0.0,
        seed: int | None = 0,
        max_retries: int = 3,
        timeout: float = 60.0,
        *,
        backoff_s: float = 0.5,
    ):
        if not base_url or not str(base_url).strip():
            raise ValueError("Judge needs a base_url (OpenAI-compatible API root, e.g. http://host:8000/v1)")
        if not model or not str(model).strip():
            raise ValueError("Judge needs a model name")
        self.base_url = str(base_url).rstrip("/")
        self.model = str(model)
        self.temperature = float(temperature)
        self.seed = seed
        self.max_retries = max(0, int(max_retries))
        self.timeout = float(timeout)
        self.backoff_s = max(0.0, float(backoff_s))
        self._api_key = api_key if api_key is not None else (os.environ.get("OPENAI_API_KEY") or None)
        register_secret(self._api_key)  # a server that echoes it back never gets it printed or written
        self._client = None

    def describe(self) -> str:
        """``"<model> @ <base_url>"`` for provenance (no key)."""
        return f"{self.model} @ {self.base_url}"

    def _http(self):
        if self._client is None:
            import httpx

            headers = {"Content-Type": "application/json"}
            if self._api_key:
                headers["Authorization"] = f"Bearer {self._api_key}"
            self._client = httpx.Client(timeout=self.timeout, headers=headers)
        return self._client

    def close(self) -> None:
        """Close the HTTP connection pool."""
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
                (no retry here; :meth:`ask_json` retries). ``JudgeError.fatal`` is True when a
                retry cannot help (400/401/403/404/405/422); ``JudgeError.body`` holds the
                error response's text.
        """
        import httpx

        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.temperature}
        if self.seed is not None:
            body["seed"] = int(self.seed)
        body.update(extra_body or {})
        try:
            r = self._http().post(f"{self.base_url}/chat/completions", json=body)
        except httpx.HTTPError as e:
            raise JudgeError(f"request to {self.base_url} failed: {type(e).__name__}: "
                             f"{mask_secrets(' '.join(str(e).split()))[:200]}") from None
        if r.status_code >= 400:
            err = JudgeError(f"HTTP {r.status_code} from {self.base_url}/chat/completions: "
                             f"{mask_secrets(' '.join(r.text.split()))[:200]}")
            err.fatal = r.status_code in _FATAL_STATUS  # type: ignore[attr-defined]
            err.body = r.text  # type: ignore[attr-defined]
            raise err
        try:
            content = r.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise JudgeError(f"response is not a chat completion: {mask_secrets(' '.join(r.text.split()))[:200]}") from None
        if not isinstance(content, str):
            raise JudgeError("chat completion has no text content")
        return content

    def ask_json(self, messages: list[dict], required_keys: Sequence[str], *, extra_body: dict[str, Any] | None = None,
                 outer_braces: bool = False) -> dict:
        """Ask and parse a JSON object holding ``required_keys``.

        Retries (up to ``max_retries`` times) on malformed replies, missing keys, network errors
        and retryable HTTP errors (429, 5xx...). An HTTP 400 that names a field of
        ``extra_body`` is retried without it, as SPEAR's stance client does:
        ``max_completion_tokens`` becomes ``max_tokens``, ``response_format`` is dropped.

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
        extra = dict(extra_body or {})
        last = "no attempt"
        attempts = 0
        for k in range(1 + self.max_retries):
            if k and self.backoff_s:
                time.sleep(self.backoff_s * 2 ** (k - 1))
            attempts += 1
            try:
                reply = self.complete(messages, extra)
            except JudgeError as e:
                last = str(e)
                text = getattr(e, "body", "") or ""
                if "HTTP 400" in last and "max_completion_tokens" in text and "max_completion_tokens" in extra:
                    extra["max_tokens"] = extra.pop("max_completion_tokens")
                    continue
                if "HTTP 400" in last and "response_format" in text and "response_format" in extra:
                    extra.pop("response_format")
                    continue
                if getattr(e, "fatal", False):
                    break
                continue
            try:
                return parse_json_reply(reply, required_keys, outer_braces=outer_braces)
            except ValueError as e:
                last = f"malformed reply: {e}"
        raise JudgeError(f"judge {self.model} gave no usable answer after {attempts} attempt(s): {last}")
