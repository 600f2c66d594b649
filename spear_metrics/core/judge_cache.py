"""The judge's reply cache: content-addressed, shared by every run and benchmark on the machine.

A judge request is fully determined by what is sent (:func:`request_key`): the endpoint kind
(``chat.completions``), the requested model id, the exact messages (audio and other ``data:``
payloads by their sha256, so the key material stays small), the decoding parameters
(temperature, ``max_tokens``, ``response_format``...) and the seed. Not in the key: the server's
address, the key, time limits, retries. The same question asked by another run, another folder or
another benchmark is answered from the cache and costs nothing.

- Folder: ``$SPEARBENCH_JUDGE_CACHE`` when set, else the user cache folder
  (``platformdirs.user_cache_dir("spearbench")/judge``, e.g. ``~/.cache/spearbench/judge``).
  One file per entry: ``<key[:2]>/<key>.json``.
- Modes (``--judge-cache``): ``readwrite`` (default of the commands), ``read`` (use entries, write
  none), ``off``.
- Writes are atomic (a temporary file in the same folder, fsynced, then ``os.replace``), so
  several processes may write the same entry at once: the last rename wins and every reader sees a
  whole entry. An entry that does not read back whole (not JSON, another format, another key, a
  checksum that does not match its reply, a reply of another shape) is ignored, never trusted, and rewritten by the next
  answer.
- Only replies the caller's parser accepted are stored (a malformed reply is never cached).
- A folder that cannot be used (``$SPEARBENCH_JUDGE_CACHE`` read-only, under a file, not
  creatable; in ``readwrite`` mode: not writable) is said in one line on stderr, once per cache
  (= once per run), and the run goes on without the cache (no entry read or written; recorded
  as ``unusable`` in the summary's ``cache``). A write that fails later (disk full) is said the
  same way and ends the caching for the run; one that concerns its entry only (a folder where the
  entry file goes) is counted in ``write_errors`` and the other entries are written.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import os
import stat
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Optional

__all__ = ["CACHE_ENV", "CACHE_MODES", "JudgeCache", "default_cache_dir", "request_key"]

#: the environment variable that moves the cache folder
CACHE_ENV = "SPEARBENCH_JUDGE_CACHE"
#: ``--judge-cache`` values
CACHE_MODES = ("readwrite", "read", "off")
#: the entry format written (and the only one read)
FORMAT = "spearbench-judge-cache/1"
#: the largest entry file read back (bytes); a larger one is ignored
MAX_ENTRY_BYTES = 16 * 1024 * 1024
#: payloads longer than this (characters) enter the key material by their sha256
_HASH_OVER = 256


def default_cache_dir() -> Path:
    """``$SPEARBENCH_JUDGE_CACHE``, else ``platformdirs.user_cache_dir("spearbench")/judge``."""
    env = os.environ.get(CACHE_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("spearbench")) / "judge"


def _sha(text: str | bytes) -> str:
    return hashlib.sha256(text.encode("utf-8") if isinstance(text, str) else text).hexdigest()


def _hashed(obj: Any) -> Any:
    """``obj`` with audio payloads (``input_audio.data``) and long ``data:`` URIs replaced by
    ``{"sha256": ...}`` of their decoded bytes (base64 text of the same bytes hashes the same)."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k == "data" and isinstance(v, str) and len(v) > _HASH_OVER:
                out[k] = {"sha256": _payload_sha(v)}
            else:
                out[k] = _hashed(v)
        return out
    if isinstance(obj, list):
        return [_hashed(v) for v in obj]
    if isinstance(obj, str) and obj.startswith("data:") and len(obj) > _HASH_OVER and ";base64," in obj[:200]:
        head, _, payload = obj.partition(",")
        return {"data_uri": head, "sha256": _payload_sha(payload)}
    return obj


def _payload_sha(b64: str) -> str:
    text = b64.split(",", 1)[1] if b64.startswith("data:") and "," in b64[:200] else b64
    try:
        return _sha(base64.b64decode(text, validate=True))
    except ValueError:
        return _sha(text)


def request_key(body: dict[str, Any], *, endpoint: str = "chat.completions") -> tuple[str, dict[str, Any]]:
    """``(key, material)``: the sha256 (hex) of the canonical JSON of ``material`` = ``{"endpoint",
    "request"}``, where ``request`` is the request body (model, messages, decoding parameters,
    seed) with audio payloads by their sha256 (module docstring)."""
    material = {"endpoint": endpoint, "request": _hashed(body)}
    canon = json.dumps(material, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return _sha(canon), material


def _whole_reply(reply: Any) -> bool:
    """Whether an entry's ``reply`` has the shape :meth:`JudgeCache.put` stores (what
    ``spear_metrics.core.judge.Reply.to_cache`` gives): ``content`` text, ``model`` and
    ``system_fingerprint`` text or null, ``usage`` null or token counts (integers in ``0 ..``
    :data:`spear_metrics.core.usage.MAX_TOKEN_COUNT`). An entry whose checksum matches but whose
    fields do not (written by another tool, or edited and re-checksummed) is not read."""
    from spear_metrics.core.usage import MAX_TOKEN_COUNT

    if not isinstance(reply, dict) or not isinstance(reply.get("content"), str):
        return False
    if any(reply.get(k) is not None and not isinstance(reply[k], str) for k in ("model", "system_fingerprint")):
        return False
    usage = reply.get("usage")
    return usage is None or (isinstance(usage, dict) and all(
        isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_TOKEN_COUNT for v in usage.values()))


def _reply_check(reply: dict[str, Any]) -> str:
    return _sha(json.dumps(reply, sort_keys=True, separators=(",", ":"), ensure_ascii=False))


class JudgeCache:
    """The reply cache (module docstring).

    Args:
        mode: ``readwrite``, ``read`` or ``off``.
        folder: where entries live (default :func:`default_cache_dir`).
        warn: where the one line about an unusable folder goes (default: stderr).

    Raises:
        ValueError: an unknown ``mode``.

    Counters (thread-safe): ``hits``, ``misses``, ``writes``, ``corrupt`` (entries ignored),
    ``write_errors``. ``unusable``: why the folder is not used (``None`` while it is).
    """

    def __init__(self, mode: str = "readwrite", folder: str | os.PathLike | None = None,
                 warn: Optional[Callable[[str], None]] = None):
        if mode not in CACHE_MODES:
            raise ValueError(f"--judge-cache must be one of {', '.join(CACHE_MODES)}, got {mode!r}")
        self.mode = mode
        self.folder = Path(folder) if folder is not None else default_cache_dir()
        self._lock = threading.Lock()
        self.hits = self.misses = self.writes = self.corrupt = self.write_errors = 0
        self.last_write_error: Optional[str] = None
        self.unusable: Optional[str] = None
        self._checked = mode == "off"
        self._warn = warn

    def _give_up(self, why: str) -> None:
        """No cache from now on, said in one line (once)."""
        with self._lock:
            if self.unusable is not None:
                return
            self.unusable = why
        where = f"${CACHE_ENV} ({self.folder})" if os.environ.get(CACHE_ENV, "").strip() else str(self.folder)
        line = f"warning: judge cache {where} cannot be used ({why}): this run goes on without caching"
        if self._warn is not None:
            self._warn(line)
        else:
            import sys

            print(line, file=sys.stderr)

    def check(self) -> bool:
        """``True`` when the folder can be used in this mode: it is (or can be made) a folder and, in
        ``readwrite`` mode, a file can be written in it. Else the one line is said and the cache
        is off for the run (module docstring). Asked once (at the first :meth:`get` / :meth:`put`
        or before, by :func:`spear_metrics.core.judge.make_judge`)."""
        if self._checked:
            return self.unusable is None and self.mode != "off"
        self._checked = True
        try:
            if self.mode == "readwrite":
                self.folder.mkdir(parents=True, exist_ok=True)
                fd, probe = tempfile.mkstemp(prefix=".probe.", suffix=".tmp", dir=self.folder)
                os.close(fd)
                os.unlink(probe)
            elif self.folder.exists():  # read: a folder not there yet has no entries (every ask a miss)
                with os.scandir(self.folder):  # not a folder, or one that cannot be read
                    pass
        except OSError as e:
            self._give_up(_reason(e))
            return False
        return True

    def _entry_only(self, e: OSError) -> bool:
        """Whether a failed write concerns its entry only: not an error of the whole device (disk or
        quota full, read-only, no permission, I/O) and the folder still takes a file."""
        if e.errno in _FOLDER_ERRNOS:
            return False
        try:
            fd, probe = tempfile.mkstemp(prefix=".probe.", suffix=".tmp", dir=self.folder)
            os.close(fd)
            os.unlink(probe)
        except OSError:
            return False
        return True

    def _bump(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    def path(self, key: str) -> Path:
        """The entry file of ``key``."""
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> Optional[dict[str, Any]]:
        """The stored reply of ``key`` (``{"content", "model", "system_fingerprint", "usage"}``), or
        ``None``: mode ``off``, no entry, or an entry that does not read back whole (counted in
        ``corrupt``; it will be rewritten)."""
        if self.mode == "off" or not self.check():
            return None
        p = self.path(key)
        try:
            st = p.stat()
            if not stat.S_ISREG(st.st_mode):  # a FIFO would block the read, a device never end it
                raise ValueError("entry is not a regular file")
            if st.st_size > MAX_ENTRY_BYTES:
                raise ValueError("entry too large")
            obj = json.loads(p.read_text(encoding="utf-8"))
            reply = obj["reply"]
            if obj.get("format") != FORMAT or obj.get("key") != key or not _whole_reply(reply) \
                    or obj.get("check") != _reply_check(reply):
                raise ValueError("not a whole entry")
        except (FileNotFoundError, NotADirectoryError):  # no entry (NotADirectory: a file where its folder would be)
            self._bump("misses")
            return None
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, RecursionError):
            # RecursionError: JSON nested too deeply for the parser
            self._bump("corrupt")
            self._bump("misses")
            return None
        self._bump("hits")
        return reply

    def put(self, key: str, material: dict[str, Any], reply: dict[str, Any]) -> None:
        """Store ``reply`` under ``key`` atomically (mode ``readwrite`` only). A write that fails
        (disk full, read-only folder) is counted in ``write_errors``, never raised: the answer
        stands without its cache entry."""
        if self.mode != "readwrite" or not self.check():
            return
        entry = {"format": FORMAT, "key": key, "request": material, "reply": reply, "check": _reply_check(reply)}
        p = self.path(key)
        tmp = None
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=p.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(entry, f, ensure_ascii=False, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, p)
            tmp = None
            self._bump("writes")
        except (OSError, ValueError, TypeError) as e:
            self._bump("write_errors")
            self.last_write_error = _reason(e)
            if isinstance(e, OSError) and not self._entry_only(e):  # the folder stopped taking entries
                self._give_up(self.last_write_error)
            # else: this entry only (a folder where its file goes): counted, the others are written
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass

    def to_json(self) -> dict[str, Any]:
        """What a summary records of the cache: mode, where the folder came from (never the path: it
        names the user), counts."""
        with self._lock:
            out = {"mode": self.mode, "folder": f"${CACHE_ENV}" if os.environ.get(CACHE_ENV, "").strip() else
                   "user cache folder", "hits": self.hits, "misses": self.misses,
                   "writes": self.writes, "corrupt_entries_ignored": self.corrupt}
            public = (lambda text: text.replace(str(self.folder), f"${CACHE_ENV}" if os.environ.get(
                CACHE_ENV, "").strip() else "<user cache folder>"))  # the path names the user
            if self.write_errors:
                out.update(write_errors=self.write_errors, last_write_error=public(self.last_write_error or ""))
            if self.unusable is not None:
                out["unusable"] = public(self.unusable)
        return out


#: write errors that say the whole folder takes no more entries (disk or quota full, read-only,
#: no permission, an I/O error): the cache is off for the rest of the run (:meth:`JudgeCache._entry_only`)
_FOLDER_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO})


def _reason(e: BaseException) -> str:
    """One line of an error: its type, then its message as a failed row carries it
    (:func:`spear_metrics.core.records.one_line`: secrets masked, length capped)."""
    from spear_metrics.core.records import one_line

    return f"{type(e).__name__}: {one_line(e)}"
