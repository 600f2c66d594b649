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

_REGISTERED: set[str] = set()
_LOCK = threading.Lock()
_FILES: dict[str, tuple[tuple[int, int], tuple[str, ...]]] = {}

__all__ = ["MASK", "MIN_SECRET_LENGTH", "SECRET_ENV_VARS", "known_secrets", "mask_secrets", "mask_value",
           "masked_output", "register_secret"]


def register_secret(value: Any) -> None:
    """Mask ``value`` (a token or key this process was given) in everything written from now
    on. ``None``, empty and non-string values are ignored."""
    if isinstance(value, str) and value.strip():
        with _LOCK:
            _REGISTERED.add(value.strip())


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
