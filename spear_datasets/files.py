"""Writing output files: atomically, leaving nothing half-written behind, failing with one line,
and recorded in the manifest of the output folder that holds them (the folder a command owns:
:class:`spear_datasets.ownership.OwnedFolder`, the rule there).

Every file SPEARBench writes (results, work logs, answer WAVs, metadata, dataset shards) goes
through :func:`atomic_path` / :func:`make_dirs` / :func:`output_error`, so that a read-only
filesystem, a full disk, an ``--out`` under a regular file or a permission problem end the
command with one line naming the path (:class:`OutputError`, exit 2), never a traceback, and
never leave a ``.<name>.tmp`` file behind.

Reading an input file within a size limit is here too (:func:`read_limited`, :func:`read_json`):
every JSON file a command reads (tasks, prompts, transcripts, price tables, run records, model
outputs) goes through them, so a huge file, a pipe or a device never hangs a run or fills memory.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


class OutputError(OSError):
    """An output file or folder cannot be written (one line naming the path and the cause).

    An ``OSError`` (callers that catch those keep working) whose ``str`` is the one line;
    ``errno`` is the operating system's error number (``errno.EROFS``, ``errno.ENOSPC``...).
    """

    def __init__(self, message: str, errno_: int | None = None):
        super().__init__(message)
        self.errno = errno_


def output_error(e: OSError, path: str | os.PathLike, what: str = "write") -> OutputError:
    """The :class:`OutputError` for ``e`` raised while writing ``path``: one line, with the
    cause in words (a regular file where a folder is needed is named)."""
    p = Path(path)
    cause = e.strerror or " ".join(str(e).split()) or type(e).__name__
    if e.errno in (errno.ENOTDIR, errno.EEXIST):
        blocker = next((a for a in (p, *p.parents) if a.exists() and not a.is_dir()), None)
        if blocker is not None:
            cause = f"{blocker} is a file, not a folder"
    return OutputError(f"cannot {what} {p}: {cause}", e.errno)


class ReadLimitError(OSError, ValueError):
    """A file :func:`read_limited` refuses: not a regular file (``errno.EINVAL``) or over its size
    limit (``errno.EFBIG``). Both an ``OSError`` and a ``ValueError``, so that a caller catching
    either sees it; ``str()`` is the one-line reason, naming the path."""

    def __str__(self) -> str:
        return str(self.strerror)


def read_limited(path: str | os.PathLike, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path`` (a symlink followed), at most ``max_bytes`` of them.

    A FIFO (whose plain ``open`` blocks until a writer comes, forever if none does), a device
    (``/dev/zero`` never ends) or a folder is refused at once, and no more than ``max_bytes + 1``
    bytes are ever held in memory.

    Raises:
        ReadLimitError: not a regular file (``<path> is not a regular file``) or over the limit
            (``<path> is over the N-byte limit``); an ``OSError`` and a ``ValueError``.
        OSError: missing or unreadable.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # non-blocking: a FIFO opens at once
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ReadLimitError(errno.EINVAL, f"{path} is not a regular file (a pipe, socket, device or folder)")
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        data = f.read(int(max_bytes) + 1)
    if len(data) > max_bytes:
        raise ReadLimitError(errno.EFBIG, f"{path} is over the {int(max_bytes)}-byte limit")
    return data


def parse_json(raw: bytes) -> Any:
    """The JSON value of the UTF-8 bytes ``raw`` (a file's, as :func:`read_limited` read them).

    Raises:
        ValueError: not UTF-8 JSON; its message is the reason in one line of at most 200
            characters (bad UTF-8 or JSON, a number past ``int()``'s digit limit, nesting past the
            parser's depth: json raises ``RecursionError`` there, given as this ``ValueError``).
    """
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise ValueError(" ".join(str(e).split())[:200]) from None


def read_json(path: str | os.PathLike, max_bytes: int) -> Any:
    """The JSON value of the UTF-8 file ``path`` (:func:`read_limited`: at most ``max_bytes``).

    Raises:
        ValueError: as :func:`read_limited`, or not UTF-8 JSON (one line; nested past the
            parser's depth included). OSError: missing or unreadable.
    """
    raw = read_limited(path, max_bytes)
    try:
        return parse_json(raw)
    except ValueError as e:
        raise ValueError(f"{Path(path).name} is not JSON ({e})") from None


def make_dirs(path: str | os.PathLike) -> Path:
    """``mkdir -p path``.

    Raises:
        OutputError: the folder cannot be created (read-only, a file in the way...).
    """
    p = Path(path)
    if not p.is_dir():
        record_write(p, kind="dir")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise output_error(e, p, "create the folder") from None
    if not p.is_dir():
        raise OutputError(f"cannot create the folder {p}: a file is in the way", errno.ENOTDIR)
    return p


@contextmanager
def atomic_path(path: str | os.PathLike, *, tmp_suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path`` (``.<name>.tmp<suffix>``) to write; on success it
    replaces ``path`` in one rename, on any error it is removed.

    Raises:
        OutputError: an ``OSError`` while creating the folder, writing or renaming.
    """
    p = Path(path)
    record_write(p)  # into the manifest of the output folder holding it, before anything is written
    make_dirs(p.parent)
    tmp = p.with_name(f".{p.name}.tmp{tmp_suffix}")
    try:
        yield tmp
        os.replace(tmp, p)
        owner = active_folder(p)
        if owner is not None:
            owner.written(p)  # the file's identity as written: changed later, it is someone else's
    except BaseException as e:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        if isinstance(e, OutputError):
            raise
        if isinstance(e, OSError):
            raise output_error(e, p) from None
        raise


# --------------------------------------------------------------------------- the open output folders
#
# The output folders open in this process (:meth:`spear_datasets.ownership.OwnedFolder.open`), which
# :func:`atomic_path` and :func:`make_dirs` record their writes in.

_ACTIVE: list[Any] = []  # spear_datasets.ownership.OwnedFolder objects (it imports this module)
_ACTIVE_LOCK = threading.RLock()


def _rel(root: Path, path: Path) -> str | None:
    """``path`` relative to ``root`` (lexically, both made absolute), POSIX; ``None`` outside."""
    r = os.path.normpath(os.path.abspath(root))
    p = os.path.normpath(os.path.abspath(path))
    if p == r:
        return ""
    if not p.startswith(r.rstrip(os.sep) + os.sep):
        return None
    return Path(os.path.relpath(p, r)).as_posix()


def active_folder(path: str | os.PathLike) -> Any:
    """The deepest output folder open in this process
    (:meth:`spear_datasets.ownership.OwnedFolder.open`) that holds ``path``, or ``None``."""
    with _ACTIVE_LOCK:
        best, depth = None, -1
        for f in _ACTIVE:
            rel = _rel(f.root, Path(path))
            if rel is not None and f.root_depth > depth:
                best, depth = f, f.root_depth
        return best


def record_write(path: str | os.PathLike, kind: str = "file") -> None:
    """Record ``path`` in the manifest of the open output folder holding it (nothing when none
    is open: a caller's own folder, e.g. a temporary one). Called by :func:`atomic_path` and
    :func:`make_dirs` before they write; writers that do not go through them call it first.

    Raises:
        spear_datasets.ownership.OutFolderError: ``path`` exists and no run of this tool recorded it.
    """
    f = active_folder(path)
    if f is not None:
        f.record(path, kind=kind)
