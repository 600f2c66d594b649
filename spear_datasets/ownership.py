"""What a command owns: its output folder (``--out``), the paths it recorded as written there,
its locks, and the removal of exactly those paths (``--overwrite``). Files are written through
:func:`spear_datasets.files.atomic_path`, which records them here.
"""

from __future__ import annotations

import errno
import json
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from spear_datasets.files import _ACTIVE, _ACTIVE_LOCK, OutputError, _rel, atomic_path, make_dirs, output_error


# --------------------------------------------------------------------------- what a command owns
#
# THE rule of what an output folder (``--out``) may hold, what a command records as written
# there, and what ``--overwrite`` removes:
#
# - ``--out`` is used only when it does not exist, is an empty folder, or is a folder this
#   command wrote (it holds the work folder ``.work/`` with its owner, a run record, a manifest
#   or work logs); anything else, another command's folder included, is refused with one line
#   (exit 2), with or without ``--overwrite``;
# - every file a command writes there goes through :func:`atomic_path`, which records its path
#   (and the folders it had to create) in the manifest ``.work/written-<rank>.jsonl`` before the
#   file is written (appended, flushed and fsynced: a killed command never leaves a file it wrote
#   unrecorded), then the file's identity (size, mtime) once it is in place; a file there
#   that no run recorded, or that changed since this tool wrote it, is never replaced (one line,
#   exit 2);
# - ``--overwrite`` removes exactly the recorded paths still as this tool wrote them (folders
#   only when empty), never a folder it found; before it removes anything it checks every
#   recorded path it would remove or replace, and one that is now a link, a folder, a changed
#   file or a path leading out of the folder stops it (one line, exit 2, nothing removed:
#   :meth:`OwnedFolder.check_removable`; a folder of the user's opened with ``keep_changed``
#   leaves such a path as it is instead); never while a live process holds one of the
#   folder's locks (``.work/rank-<r>.lock``, an exclusive ``flock`` held by every process
#   writing the folder for as long as it writes; the OS drops it when the process dies, also on
#   ``kill -9``).

#: The work folder inside every output folder: run record, work logs, locks, manifest.
WORK_DIR = ".work"
#: Manifest files (one per process rank): JSON lines ``{"path": rel, "kind": "file"|"dir",
#: "id": [size, mtime_ns] | null}`` (relative to the output folder, POSIX separators;
#: the latest line of a path wins; ``id`` null: announced, not yet seen written).
MANIFEST_GLOB = "written-*.jsonl"
#: The command that owns the folder: ``{"command": "score"}`` (written when it first opens it).
OWNER_FILE = "owner.json"
_RECOGNISED = ("run.json", MANIFEST_GLOB, "rank-*.jsonl", OWNER_FILE)


class OutFolderError(OutputError):
    """An output folder that cannot be used: it holds what this tool did not write, or a live
    process writes it (one line; the CLI exits 2)."""


def is_recognised(root: str | os.PathLike) -> bool:
    """Whether ``root`` is a folder this tool wrote: its ``.work/`` holds a run record
    (``run.json``), a manifest or work logs."""
    work = Path(root) / WORK_DIR
    return work.is_dir() and any(next(work.glob(g), None) is not None for g in _RECOGNISED)


def check_out_folder(root: str | os.PathLike, flag: str = "--out") -> None:
    """THE rule of what an output folder may hold before a command writes into it: nothing there
    yet, an empty folder, or a folder this tool wrote (:func:`is_recognised`).

    Raises:
        OutFolderError: a regular file, or a folder holding anything else (named, one line).
    """
    p = Path(root)
    if not p.exists() and not p.is_symlink():
        return
    if not p.is_dir():
        raise OutFolderError(f"{flag} {p} exists and is not a folder", errno.ENOTDIR)
    if is_recognised(p):
        return
    try:
        entries = sorted(x.name for x in p.iterdir())
    except OSError as e:
        raise output_error(e, p, "read the folder") from None
    if entries:
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise OutFolderError(f"{flag} {p} holds files this tool did not write ({shown}): give a new or empty "
                             "folder (nothing in it is removed or replaced, --overwrite included)", errno.EEXIST)


class OwnedFolder:
    """One command's output folder: its locks, its manifest of written paths, and the removal of
    exactly those paths (see the rule above). Use :meth:`open` / :meth:`close` (or ``with``).

    Args:
        root: the output folder.
        command: the command that owns the folder (``"score"``, ``"infer"``...): a folder another
            command wrote is refused (``.work/owner.json``), so one never removes the other's files.
        rank: this process's rank (its lock ``rank-<rank>.lock`` and manifest ``written-<rank>.jsonl``).
        activity: the verb of the "held by another live process" message (``"scored"``, ``"written"``).
        flag: the option naming the folder in messages (``--out``, ``--local-dir``...).
        work_name: the name of the work folder inside ``root`` (default :data:`WORK_DIR`); a command
            that writes into a folder of the user's (``fdb-infer``: replies beside FDB's stimuli)
            keeps its own there and opens the folder with ``open(check=False)``.
        keep_changed: a folder of the user's (``fdb-infer``'s task folders), judged file by file:
            :meth:`remove_recorded` leaves a recorded path that is no longer as this tool wrote it
            (the command then keeps that sample and names it) instead of refusing the whole removal
            (:meth:`check_removable`, the rule for an output folder of the tool's own).
    """

    def __init__(self, root: str | os.PathLike, *, command: str, rank: int = 0, activity: str = "written",
                 flag: str = "--out", work_name: str = WORK_DIR, keep_changed: bool = False):
        self.root = Path(root)
        self.command = command
        self.work = self.root / work_name
        self.rank = int(rank)
        self.activity = activity
        self.flag = flag
        self.keep_changed = bool(keep_changed)
        self.root_depth = len(Path(os.path.abspath(self.root)).parts)
        self._entries: dict[str, tuple[str, list | None]] | None = None
        self._manifest = None
        self._lock = None
        self._marks: list = []
        self._depth = 0
        self._mutex = threading.RLock()

    # ---------------------------------------------------------------- scope

    def open(self, *, check: bool = True) -> "OwnedFolder":
        """Check the folder (:func:`check_out_folder` and the owner, skipped with ``check=False``:
        a secondary rank after the main process claimed it, or a folder of the user's that the
        command writes a few recorded files into, the rest of it never touched), take this rank's
        lock, create the work folder and this rank's manifest (so a killed command leaves a folder
        recognised as this tool's), and route the writes under ``root`` to the manifest.

        Raises:
            OutFolderError: refused folder, or this rank's lock held by another live process.
        """
        if check:
            check_out_folder(self.root, self.flag)
            self._check_owner()
        make_dirs(self.work)
        self._take_lock()
        try:
            if check:
                self._check_owner()  # again, now that no live process can be writing it
                owner = self.work / OWNER_FILE
                if not owner.is_file():
                    with atomic_path(owner) as tmp:
                        tmp.write_text(json.dumps({"command": self.command}) + "\n", encoding="utf-8")
            self._open_manifest()
        except BaseException:
            self._release_lock()
            raise
        with _ACTIVE_LOCK:
            _ACTIVE.append(self)
        return self

    def close(self) -> None:
        """Stop recording, close the manifest and release the lock."""
        with _ACTIVE_LOCK:
            if self in _ACTIVE:
                _ACTIVE.remove(self)
        if self._manifest is not None:
            try:
                self._manifest.close()
            except OSError:
                pass
            self._manifest = None
        self._release_lock()

    def __enter__(self) -> "OwnedFolder":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_owner(self) -> None:
        """Refuse a folder another command of this tool wrote (a folder without ``owner.json``,
        from a version that wrote none, counts as this command's)."""
        try:
            owner = json.loads((self.work / OWNER_FILE).read_text(encoding="utf-8")).get("command")
        except (OSError, ValueError, AttributeError):
            return
        if owner and owner != self.command:
            raise OutFolderError(f"{self.flag} {self.root} holds the output of `spearbench {owner}`, not of "
                                 f"`spearbench {self.command}`: give another folder (nothing there is removed)",
                                 errno.EEXIST)

    # ---------------------------------------------------------------- locks

    def _lock_path(self, rank: int) -> Path:
        return self.work / f"rank-{rank}.lock"

    def _busy(self, rank: int) -> OutFolderError:
        return OutFolderError(f"{self.root} is being {self.activity} by another live process (rank {rank}'s lock is "
                              "held): wait for it to finish or stop it, then rerun", errno.EBUSY)

    def _take_lock(self) -> None:
        self._lock = self._lock_file(self._lock_path(self.rank), lambda: self._busy(self.rank))

    @staticmethod
    def _lock_file(path: Path, busy) -> object:
        """``path`` opened and locked (exclusive) for this process; ``busy()`` raised when another
        live process holds it, OutputError when it cannot be opened."""
        try:
            f = open(path, "a+")
        except OSError as e:
            raise output_error(e, path) from None
        if not _try_lock(f):
            f.close()
            raise busy()
        return f

    def _release_lock(self) -> None:
        for f in self._marks:  # the lock files held beside the rank's (hold_lock_file)
            f.close()
        self._marks = []
        if self._lock is not None:
            self._lock.close()  # releases the flock
            self._lock = None

    def live_ranks(self) -> list[int]:
        """Ranks other than this one whose lock a live process holds now."""
        live = []
        for p in sorted(self.work.glob("rank-*.lock")):
            try:
                r = int(p.stem.split("-", 1)[1])
            except ValueError:
                continue
            if r != self.rank and _held(p):
                live.append(r)
        return live

    def hold_lock_file(self, name: str) -> None:
        """Hold the lock file ``.work/<name>`` (exclusive) until :meth:`close`: a mark other
        processes test with :meth:`lock_file_held` (e.g. ``shard-<k>.lock``: the rank lock
        ``k`` is a shard's, :func:`spear_metrics.core.records.claim_shard`).

        Raises:
            OutFolderError: another live process holds it. OutputError: it cannot be opened.
        """
        self._marks.append(self._lock_file(self.work / name, lambda: OutFolderError(
            f"{self.root} is being {self.activity} by another live process ({name} is held)", errno.EBUSY)))

    def lock_file_held(self, name: str) -> bool:
        """Whether a live process holds the lock file ``.work/<name>`` now (:meth:`hold_lock_file`)."""
        return _held(self.work / name)

    def refuse_if_live(self) -> None:
        """Raises :class:`OutFolderError` when another live process holds any lock of the folder."""
        live = self.live_ranks()
        if live:
            raise self._busy(live[0])

    # ---------------------------------------------------------------- manifest

    def _manifest_path(self) -> Path:
        return self.work / f"written-{self.rank}.jsonl"

    def _open_manifest(self) -> None:
        path = self._manifest_path()
        try:
            self._manifest = open(path, "a", encoding="utf-8")
        except OSError as e:
            raise output_error(e, path) from None

    def _append(self, objs: list[dict]) -> None:
        if self._manifest is None:
            raise OutFolderError(f"{self.flag} {self.root} is not open for writing")
        try:
            for o in objs:
                self._manifest.write(json.dumps(o, ensure_ascii=False) + "\n")
            self._manifest.flush()
            os.fsync(self._manifest.fileno())
        except OSError as e:
            raise output_error(e, self._manifest_path()) from None
        for o in objs:
            self._entries[o["path"]] = (o["kind"], o.get("id"))

    def entries(self) -> dict[str, tuple[str, list | None]]:
        """Every recorded path (all ranks' manifests): relative POSIX path -> ``(kind, identity)``,
        the identity (size, mtime in ns) of the file as this tool last wrote it, ``None``
        when the write was announced but not seen through (a kill in between)."""
        with self._mutex:
            if self._entries is None:
                self._entries = _read_manifest_entries(self.work)
            return dict(self._entries)

    def recorded(self) -> set[str]:
        """Every recorded path (relative, POSIX)."""
        return set(self.entries())

    def _ours(self, rel: str, entry: tuple[str, list | None] | None) -> bool:
        """A recorded path still holding what this tool wrote there (a file changed or replaced
        by someone since is theirs now)."""
        if entry is None:
            return False
        kind, ident = entry
        if kind != "file" or ident is None:
            return True
        return _identity(self.root / rel) in (None, ident)

    def is_recorded(self, path: str | os.PathLike) -> bool:
        """Whether ``path`` was written by this tool here and is unchanged since."""
        rel = _rel(self.root, Path(path))
        return rel is not None and self._ours(rel, self.entries().get(rel))

    def record(self, path: str | os.PathLike, *, kind: str = "file") -> None:
        """Record ``path`` (a file, or a folder with ``kind="dir"``) and the folders between
        ``root`` and it that do not exist yet, before they are written.

        Raises:
            OutFolderError: ``path`` exists and is not this tool's (never recorded, or changed
                since this tool wrote it), or lies outside the folder.
        """
        p = Path(path)
        rel = _rel(self.root, p)
        if rel is None:
            raise OutFolderError(f"{p} is outside {self.flag} {self.root}")
        work = self.work.name
        if rel == "" or rel == work or (rel.startswith(work + "/") and rel.count("/") == 1):
            return  # the folder itself, and its work folder's run record, logs, locks, manifests: known by name
        with self._mutex:
            done = self.entries()
            if kind == "dir":
                if rel in done or p.is_dir():
                    return  # a folder that is there already is not this run's to remove
            elif rel in done and self._ours(rel, done[rel]):
                if done[rel][1] is not None:  # rewritten: its identity is unknown until the write is seen through
                    self._append([{"path": rel, "kind": "file", "id": None}])
                return
            elif p.exists() or p.is_symlink():
                raise OutFolderError(f"{p} exists and was not written by this tool in {self.flag} {self.root}: "
                                     "move it away or give another folder", errno.EEXIST)
            lines = []
            parts = rel.split("/")
            for i in range(1, len(parts)):  # folders this write creates
                d = "/".join(parts[:i])
                if d not in done and not (self.root / d).exists():
                    lines.append({"path": d, "kind": "dir"})
            lines.append({"path": rel, "kind": kind, **({"id": None} if kind == "file" else {})})
            self._append(lines)

    def written(self, path: str | os.PathLike) -> None:
        """Record the identity of a file just written at a recorded path (after its rename)."""
        rel = _rel(self.root, Path(path))
        if not rel or rel not in self.entries():
            return
        ident = _identity(self.root / rel)
        if ident is not None:
            with self._mutex:
                self._append([{"path": rel, "kind": "file", "id": ident}])

    def record_existing(self, path: str | os.PathLike) -> None:
        """Record a file that is already there as this tool's (an output of the same run written by
        a version that kept no manifest). Use for nothing else."""
        rel = _rel(self.root, Path(path))
        if not rel or rel in self.entries():
            return
        self._append([{"path": rel, "kind": "file", "id": _identity(self.root / rel)}])

    def remove_file(self, path: str | os.PathLike) -> bool:
        """Remove one file this tool wrote here, when it is still as written (:meth:`is_recorded`;
        its record stays: the path may be written again). Returns whether it was removed; a
        file that is not this tool's, or a path whose real location has left the folder, stays."""
        p = Path(path)
        if not self.is_recorded(p):
            return False
        parent = os.path.realpath(p.parent)
        real_root = os.path.realpath(self.root)
        if parent != real_root and not parent.startswith(real_root.rstrip(os.sep) + os.sep):
            return False
        try:
            if p.is_symlink() or p.is_file():
                p.unlink()
                return True
        except OSError as e:
            raise output_error(e, p, "remove") from None
        return False

    def check_removable(self, unders: Iterable[str | None] = (None,)) -> None:
        """Check, before anything is removed, every path :meth:`remove_recorded` would remove for
        each of ``unders`` (``None``: the whole folder, with the work logs and run record of the
        work folder; else a relative folder or file), and so replace when the run writes again:
        each recorded file must be absent or still the regular file this tool wrote (same size and
        modification time), each recorded folder absent or a real folder, and each path's real
        location inside the folder. Nothing is checked with ``keep_changed`` (such a path is left
        as it is there).

        Raises:
            OutFolderError: one line naming the first path that is now a link, a folder where a
                file was written (or anything but a folder where a folder was), a file changed
                since this tool wrote it, or a path leading out of the folder; nothing was removed.
        """
        if self.keep_changed:
            return
        real_root = os.path.realpath(self.root)
        prefixes = [None if u is None else Path(u).as_posix().strip("/") for u in unders]
        entries = self.entries()
        checks: list[tuple[Path, str, list | None]] = []
        for rel, (kind, ident) in sorted(entries.items()):
            if any(q is None or rel == q or rel.startswith(q + "/") for q in prefixes):
                checks.append((self.root / rel, kind, ident))
        if None in prefixes:  # the work folder's own records, removed by name
            for log in [*sorted(self.work.glob("rank-*.jsonl")), self.work / "run.json"]:
                checks.append((log, "file", None))
        for target, kind, ident in checks:
            if not (target.exists() or target.is_symlink()):
                continue
            parent = os.path.realpath(target.parent)
            if parent != real_root and not parent.startswith(real_root.rstrip(os.sep) + os.sep):
                why = "leads out of the folder (a link is in its path)"
            elif target.is_symlink():
                why = "is now a link"
            elif kind == "dir":
                why = None if target.is_dir() else "is no longer a folder"
            elif not target.is_file():
                why = "is now a folder" if target.is_dir() else "is no longer a regular file"
            elif ident is not None and _identity(target) != ident:
                why = "changed since this tool wrote it"
            else:
                why = None
            if why is not None:
                raise OutFolderError(f"{target} exists and was not written by this tool in {self.flag} {self.root} "
                                     f"({why}): --overwrite removed nothing; move it away or give another folder",
                                     errno.EEXIST)

    def remove_recorded(self, under: str | None = None) -> int:
        """Remove every recorded path (or those at or below the relative folder ``under``):
        files still as this tool wrote them, then recorded folders that are empty, deepest first;
        work logs and the run record too when ``under`` is ``None``. First every such path is
        checked (:meth:`check_removable`): one that is now a link, a folder, a changed file or a
        path leading out of the folder stops the removal before anything is removed. In a folder
        opened with ``keep_changed`` such a path is left as it is instead (someone else's now).
        Locks are kept (a process waiting on one must keep seeing the same file). Returns how
        many paths were removed.

        Raises:
            OutFolderError: another live process holds a lock of the folder, or a recorded path is
                no longer as this tool wrote it (:meth:`check_removable`).
        """
        self.refuse_if_live()
        real_root = os.path.realpath(self.root)
        prefix = None if under is None else Path(under).as_posix().strip("/")
        with self._mutex:
            self.check_removable([prefix])
            entries = self.entries()
            n = 0
            dirs = []
            for rel, entry in entries.items():
                if prefix is not None and rel != prefix and not rel.startswith(prefix + "/"):
                    continue
                if entry[0] == "dir":
                    dirs.append(rel)
                    continue
                target = self.root / rel
                parent = os.path.realpath(target.parent)
                if parent != real_root and not parent.startswith(real_root.rstrip(os.sep) + os.sep):
                    continue
                if not self._ours(rel, entry):
                    continue
                try:
                    if target.is_symlink() or target.is_file():
                        target.unlink()
                        n += 1
                except OSError:
                    pass
            for rel in sorted(dirs, key=lambda r: -r.count("/")):
                target = self.root / rel
                try:
                    if target.is_dir() and not target.is_symlink():
                        target.rmdir()  # only when empty: what someone else put there stays
                        n += 1
                except OSError:
                    pass
            if prefix is None:
                for log in [*self.work.glob("rank-*.jsonl"), self.work / "run.json"]:
                    log.unlink(missing_ok=True)
                kept = {}
            else:
                kept = {r: e for r, e in entries.items() if not (r == prefix or r.startswith(prefix + "/"))}
            self._rewrite_manifests(kept)
        return n

    def _rewrite_manifests(self, kept: dict[str, tuple[str, list | None]]) -> None:
        """Keep only ``kept`` in the manifests (one file for this rank, replaced atomically)."""
        for m in self.work.glob(MANIFEST_GLOB):
            if m != self._manifest_path():
                m.unlink(missing_ok=True)
        text = "".join(json.dumps({"path": r, "kind": k, **({"id": i} if k == "file" else {})}, ensure_ascii=False)
                       + "\n" for r, (k, i) in kept.items())
        if self._manifest is not None:
            self._manifest.close()
            self._manifest = None
        path = self._manifest_path()
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
        self._open_manifest()
        self._entries = dict(kept)


def _try_lock(f) -> bool:
    """Take an exclusive lock on the open file ``f`` without waiting (``flock``; on Windows
    ``msvcrt.locking`` of its first byte); ``False`` when another process holds it. Closing the
    file releases it."""
    try:
        import fcntl
    except ImportError:  # Windows
        import msvcrt

        try:
            f.seek(0)
            msvcrt.locking(f.fileno(), msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False


def _held(path: Path) -> bool:
    """Whether a live process holds the lock file ``path`` (a file that cannot be opened counts
    as held: never taken for free)."""
    try:
        with open(path, "a+") as f:
            return not _try_lock(f)  # released when closed
    except OSError:
        return True


def _identity(path: Path) -> list | None:
    """``[size, mtime_ns]`` of a file (not following a final link); ``None`` when absent. Not the
    inode: a folder copied with its times (``cp -a``, ``rsync -a``, ``shutil.copytree``) stays
    the tool's; an edit or a replacement changes the time."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _read_manifest_entries(work: Path) -> dict[str, tuple[str, list | None]]:
    """The manifests of ``work`` merged: the last line of each path wins (its latest identity)."""
    out: dict[str, tuple[str, list | None]] = {}
    for m in sorted(work.glob(MANIFEST_GLOB)):
        try:
            lines = m.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                o = json.loads(line)
            except (ValueError, RecursionError):  # also a number past int()'s digit limit, nesting past the depth
                continue  # a line cut by a kill: its file was not written yet
            if not (isinstance(o, dict) and isinstance(o.get("path"), str) and o["path"]):
                continue
            rel = o["path"]
            if rel.startswith("/") or ".." in rel.split("/"):
                continue
            kind = "dir" if o.get("kind") == "dir" else "file"
            out[rel] = (kind, o.get("id") if isinstance(o.get("id"), list) else None)  # the latest line wins
    return out


def find_open(root: str | os.PathLike, *, command: str, rank: int = 0) -> OwnedFolder | None:
    """The folder this process has open for ``root``, ``command`` and ``rank``, if any."""
    here = os.path.normpath(os.path.abspath(root))
    with _ACTIVE_LOCK:
        return next((f for f in _ACTIVE if f.rank == rank and f.command == command
                     and os.path.normpath(os.path.abspath(f.root)) == here), None)


@contextmanager
def open_folder(root: str | os.PathLike, *, command: str, rank: int = 0, activity: str = "written",
                flag: str = "--out", check: bool = True, work_name: str = WORK_DIR,
                keep_changed: bool = False) -> Iterator[OwnedFolder]:
    """``with open_folder(out) as f:`` — :meth:`OwnedFolder.open` for the duration, or the folder
    this process already has open for ``root`` and ``rank`` (a command that writes more files
    around a library call writing the same folder: one lock, one manifest).

    Raises:
        OutFolderError: see :meth:`OwnedFolder.open`.
    """
    same = find_open(root, command=command, rank=rank)
    if same is not None:
        yield same
        return
    f = OwnedFolder(root, command=command, rank=rank, activity=activity, flag=flag, work_name=work_name,
                    keep_changed=keep_changed).open(check=check)
    try:
        yield f
    finally:
        f.close()
