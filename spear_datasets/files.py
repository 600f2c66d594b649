"""Writing output files: atomically, leaving nothing half-written behind, and failing with one line.

Every file SPEARBench writes (results, work logs, answer WAVs, metadata, dataset shards) goes
through :func:`atomic_path` / :func:`make_dirs` / :func:`output_error`, so that a read-only
filesystem, a full disk, an ``--out`` under a regular file or a permission problem end the
command with one line naming the path (:class:`OutputError`, exit 2), never a traceback, and
never leave a ``.<name>.tmp`` file behind.
"""

from __future__ import annotations

import errno
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


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


def make_dirs(path: str | os.PathLike) -> Path:
    """``mkdir -p path``.

    Raises:
        OutputError: the folder cannot be created (read-only, a file in the way...).
    """
    p = Path(path)
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
    make_dirs(p.parent)
    tmp = p.with_name(f".{p.name}.tmp{tmp_suffix}")
    try:
        yield tmp
        os.replace(tmp, p)
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
