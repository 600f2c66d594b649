"""Paths as they may leave the machine: results datasets and the Space never carry an absolute
local path (``/home/<user>/...``), in a path column, an error text, a note or a model name.

:func:`public_path` turns one path into its public form; :func:`public_text` does it for every
absolute path inside a text; :func:`public_value` walks JSON-like values (the summary).
"""

from __future__ import annotations

import os
import re
from pathlib import PurePosixPath
from typing import Any, Iterable

#: Folder names of the SPEAR layout that start the public tail of a path outside every root
#: (``.../inputs/test/improvised/audios/x.wav`` -> ``inputs/test/improvised/audios/x.wav``).
ANCHORS = ("inputs", "improvised", "naturalistic")
#: An absolute POSIX path inside a text: ``/`` + at least one character that is not a
#: separator of prose, not preceded by a path or word character (so ``a/b`` and URLs stay) nor
#: by ``%`` (a key name such as ``WER_%/CER_%`` is not a path).
_ABS_IN_TEXT = re.compile(r"(?<![\w./~:%-])/(?:[^\s'\"`,;()\[\]{}<>|*?]+)")


def _roots(roots: Iterable[str | os.PathLike | None]) -> list[PurePosixPath]:
    out = []
    for r in roots:
        if r:
            out.append(PurePosixPath(os.path.normpath(os.path.abspath(str(r)))))
    return sorted(out, key=lambda p: -len(p.parts))  # the deepest root first


def public_path(value: str | None, roots: Iterable[str | os.PathLike | None] = ()) -> str | None:
    """The public form of a path: relative paths as written (``./`` dropped, ``..`` collapsed),
    an absolute path inside one of ``roots`` relative to it, any other absolute path reduced to
    its tail from the last SPEAR folder (:data:`ANCHORS`) or else to its file name.

    Never returns an absolute path; ``None``/empty stays as it is.
    """
    if value is None:
        return None
    s = str(value).strip()
    if not s:
        return str(value)
    p = PurePosixPath(s.replace("\\", "/"))
    if not p.is_absolute():
        parts = [x for x in PurePosixPath(os.path.normpath(str(p))).parts if x not in ("..",)]
        return str(PurePosixPath(*parts)) if parts else p.name
    p = PurePosixPath(os.path.normpath(str(p)))
    for root in _roots(roots):
        if p == root:
            return "."
        if root in p.parents:
            return str(p.relative_to(root))
    parts = p.parts[1:]
    idx = [i for i, part in enumerate(parts) if part in ANCHORS]
    if idx:
        start = idx[0] if parts[idx[0]] == "inputs" else idx[-1]
        return str(PurePosixPath(*parts[start:]))
    return p.name or "."


def public_text(text: str | None, roots: Iterable[str | os.PathLike | None] = ()) -> str | None:
    """``text`` with every absolute path in it replaced by :func:`public_path`."""
    if not text:
        return text
    roots = list(roots)
    return _ABS_IN_TEXT.sub(lambda m: public_path(m.group(0), roots) or "", str(text))


def public_value(value: Any, roots: Iterable[str | os.PathLike | None] = ()) -> Any:
    """A JSON-like value (dicts, lists, strings, numbers) with :func:`public_text` applied to
    every string, keys included."""
    roots = list(roots)
    if isinstance(value, str):
        return public_text(value, roots)
    if isinstance(value, dict):
        return {public_text(k, roots) if isinstance(k, str) else k: public_value(v, roots) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [public_value(v, roots) for v in value]
    return value

