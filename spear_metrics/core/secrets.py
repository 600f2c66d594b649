"""THE masking of secrets: every message, log line, file and card the project writes passes
through :func:`mask_secrets`, which replaces the VALUE of every known secret by ``***``,
whatever its shape and wherever it came from.

Known secrets:

- the values of the environment variables in :data:`SECRET_ENV_VARS` (Hub tokens and the API
  keys of the judge and the API adapters), read at each call (a key set later is masked too);
- the Hub tokens ``hf auth login`` stored (huggingface_hub's ``HF_TOKEN_PATH`` file and its
  ``stored_tokens`` file, re-read when they change; read as files, no network);
- every value given to :func:`register_secret` (a ``token=`` argument, a ``secret=True``
  option such as ``judge_api_key``, an adapter's ``api_key``), for the life of the process;
- the credentials typed inside a URL (:func:`register_url_secrets`: the password of
  ``wss://user:password@host``, a token given as the user name alone, the value of a query
  parameter named like a credential such as ``?key=`` or ``&access_token=``): every string
  option (``base_url``, ``url``, ``judge_base_url``...) passes through it, so the URL is recorded
  with ``***`` in place of its credential;
- the ``extra_values`` of one call.

A value shorter than :data:`MIN_SECRET_LENGTH` characters is not masked as a substring (it
would cut ordinary words and paths; no real token or key is that short). As a last net, in
messages, text shaped like a Hub token (``hf_`` + 8 or more letters/digits) and the credential
of an echoed ``Bearer <credential>`` are masked even when their value is not known here.

Adapters that call other APIs register their keys (``register_secret(api_key)``) and pass any
text they show or write through :func:`mask_secrets`; the CLI masks everything it prints
(:func:`masked_output`).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from typing import Any, Iterable, Iterator

#: Environment variables whose values are secrets (masked wherever they appear).
SECRET_ENV_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")
#: What a secret is replaced with.
MASK = "***"
#: Shorter values are not masked as substrings (see the module docstring).
MIN_SECRET_LENGTH = 8
#: Text shaped like a Hub token, masked whatever its value (the last net, in messages).
HUB_TOKEN_SHAPE = re.compile(r"hf_[A-Za-z0-9]{8,}")
#: The credential of an ``Authorization: Bearer <credential>`` echoed in a message (masked too): it
#: ends at white space, a quote, ``,``, ``;`` or a closing bracket, which stays (``(Bearer ***)``).
BEARER_SHAPE = re.compile(r"(Bearer\s+)[^\s\"',;)\]}>]+")
#: Query parameters of a URL whose values are credentials, by name (searched case-insensitively):
#: ``key``, ``api_key``, ``apikey``, ``access_token``, ``token``, ``secret``, ``password``, ``pwd``,
#: ``auth``, ``authorization``, ``sig``, ``signature``, ``credential``...
URL_SECRET_PARAM = re.compile(r"key|token|secret|passw|pwd|auth|sig|cred", re.IGNORECASE)

_REGISTERED: set[str] = set()
_LOCK = threading.Lock()
_FILES: dict[str, tuple[tuple[int, int], tuple[str, ...]]] = {}

__all__ = ["MASK", "MIN_SECRET_LENGTH", "SECRET_ENV_VARS", "URL_SECRET_PARAM", "known_secrets", "mask_secrets",
           "mask_value", "masked_output", "register_secret", "register_url_secrets", "url_secrets"]


def register_secret(value: Any) -> None:
    """Mask ``value`` (a token or key this process was given) in everything written from now
    on. ``None``, empty and non-string values are ignored."""
    if isinstance(value, str) and value.strip():
        with _LOCK:
            _REGISTERED.add(value.strip())


def url_secrets(url: Any) -> list[str]:
    """The credentials typed inside the URL ``url``: the password of its authority
    (``scheme://user:password@host``; the user name when it comes alone, ``scheme://token@host``,
    as a token is often given) and the value of every query parameter whose name
    :data:`URL_SECRET_PARAM` matches (``?key=...``, ``&access_token=...``), each as typed and
    percent-decoded. Nothing for a value that is not a ``scheme://`` URL. The host, path and
    other parameters are not secrets (they stay readable in records and messages)."""
    from urllib.parse import unquote, unquote_plus, urlsplit

    if not isinstance(url, str) or "://" not in url:
        return []
    try:
        parts = urlsplit(url.strip())
        found = [parts.password if parts.password else parts.username]
    except ValueError:  # an unparsable authority (bad port, brackets): its user part by hand
        netloc = url.strip().split("://", 1)[1].split("/", 1)[0]
        user = netloc.rpartition("@")[0]
        found = [user.partition(":")[2] or user] if user else []
        parts = None
    query = parts.query if parts is not None else url.partition("?")[2].partition("#")[0]
    for piece in re.split(r"[&;]", query):
        name, sep, value = piece.partition("=")
        if sep and value and URL_SECRET_PARAM.search(unquote_plus(name)):
            found.append(value)
    out: list[str] = []
    for v in found:
        for form in (v, unquote(v or ""), unquote_plus(v or "")):
            if form and form not in out:
                out.append(form)
    return out


def register_url_secrets(url: Any) -> list[str]:
    """:func:`register_secret` every credential typed inside ``url`` (:func:`url_secrets`), so
    that the URL is written and shown with ``***`` in its place; returns them. Any other value
    is ignored (safe to call on every string option)."""
    found = url_secrets(url)
    for v in found:
        register_secret(v)
    return found


def _stored_hub_tokens() -> tuple[str, ...]:
    """The tokens ``hf auth login`` stored (its token file and ``stored_tokens``), re-read only
    when a file changes; none when huggingface_hub is not installed."""
    try:
        from huggingface_hub import constants
    except ImportError:
        return ()
    out: list[str] = []
    for path in (constants.HF_TOKEN_PATH, constants.HF_STORED_TOKENS_PATH):
        try:
            st = os.stat(path)
        except OSError:
            continue
        key = (st.st_mtime_ns, st.st_size)
        cached = _FILES.get(path)
        if cached is None or cached[0] != key:
            cached = (key, _read_token_file(path))
            _FILES[path] = cached
        out.extend(cached[1])
    return tuple(out)


def _read_token_file(path: str) -> tuple[str, ...]:
    """Every token-like value of a token file: the whole text of ``token``, each ``key = value``
    value of the INI file ``stored_tokens`` (tokens, refresh tokens)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return ()
    values = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("[", "#", ";")):
            continue
        values.append(line.split("=", 1)[1].strip() if "=" in line else line)
    return tuple(v for v in values if v)


def known_secrets(extra_values: Iterable[Any] = ()) -> list[str]:
    """Every secret value known now (see the module docstring), longest first (so a secret that
    contains another is masked whole), each at least :data:`MIN_SECRET_LENGTH` long."""
    values = {os.environ.get(k, "").strip() for k in SECRET_ENV_VARS}
    with _LOCK:
        values.update(_REGISTERED)
    values.update(_stored_hub_tokens())
    values.update(str(v).strip() for v in extra_values if isinstance(v, str))
    return sorted((v for v in values if len(v) >= MIN_SECRET_LENGTH), key=lambda v: (-len(v), v))


def mask_secrets(text: Any, extra_values: Iterable[Any] = (), *, shapes: bool = True) -> Any:
    """``text`` with every known secret value (:func:`known_secrets`, plus ``extra_values``)
    replaced by :data:`MASK`; with ``shapes`` (messages: the default) Hub-token-shaped text too
    (:data:`HUB_TOKEN_SHAPE`; files pass ``shapes=False``: a path may hold such a run of
    letters). Non-string values (``None``, numbers) are returned unchanged."""
    if not isinstance(text, str) or not text:
        return text
    return _mask(text, known_secrets(extra_values), shapes)


def _mask(text: str, secrets: list[str], shapes: bool) -> str:
    for v in secrets:
        if v in text:
            text = text.replace(v, MASK)
    if not shapes:
        return text
    return BEARER_SHAPE.sub(lambda m: m.group(1) + MASK, HUB_TOKEN_SHAPE.sub(MASK, text))


def mask_value(value: Any, extra_values: Iterable[Any] = (), *, shapes: bool = False) -> Any:
    """A JSON-like value (dicts, lists, strings) with :func:`mask_secrets` applied to every
    string, keys included (``shapes`` off by default: values are data)."""
    secrets = known_secrets(extra_values)

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return _mask(v, secrets, shapes) if v else v
        if isinstance(v, dict):
            return {walk(k) if isinstance(k, str) else k: walk(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [walk(x) for x in v]
        return v

    return walk(value)


class _MaskingStream:
    """A text stream that masks secrets in everything written to it (one ``write`` at a time)."""

    def __init__(self, inner: Any):
        self._inner = inner

    def write(self, s: str) -> int:
        self._inner.write(mask_secrets(s))
        return len(s)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding...
        return getattr(self._inner, name)


@contextlib.contextmanager
def masked_output() -> Iterator[None]:
    """Mask secrets in everything written to ``sys.stdout`` and ``sys.stderr`` (prints, progress
    bars, warnings, log handlers created meanwhile) until the block ends."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _MaskingStream(out), _MaskingStream(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
