"""THE per-sample result record and its JSON Lines form.

One :class:`SampleResult` per metadata row (``row`` = position in the CSV, 0-based). Values
that do not exist are ``None`` (JSON ``null``), never 0 and never NaN.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from spear_metrics.core.secrets import mask_secrets, mask_value
from spear_datasets.files import OutputError, atomic_path, make_dirs, output_error, read_json
from spear_datasets.ownership import OutFolderError, OwnedFolder, find_open, open_folder

__all__ = ["AppendLog", "OutputError", "SampleResult", "bind_run", "bind_shard", "claim_out", "claim_shard", "hold_shard", "in_shard", "parse_shard", "clean_value", "dumps", "one_line",
           "count_process_ends", "process_ends", "read_jsonl", "read_rank_logs", "read_work_logs", "valid_record", "write_json_atomic", "write_jsonl_atomic"]

OK = "ok"
FAILED = "failed"


def clean_value(v: Any) -> Any:
    """Map NaN/inf floats (also inside lists/dicts/arrays) to ``None``, numpy scalars to Python and
    numpy arrays (e.g. a parquet list cell) to lists."""
    if getattr(v, "ndim", 0) and hasattr(v, "tolist"):
        return clean_value(v.tolist())
    if isinstance(v, dict):
        return {k: clean_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean_value(x) for x in v]
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        try:
            v = v.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


#: longest failure reason (characters) :func:`one_line` returns, before its "…"
MAX_REASON_CHARS = 300


def one_line(e: BaseException | str) -> str:
    """An exception (or text) as the one-line reason a failed row carries: whitespace collapsed,
    secrets masked (:func:`spear_metrics.core.secrets.mask_secrets`), then cut to
    :data:`MAX_REASON_CHARS` characters followed by ``"…"`` (masking first: a key cut in two would
    no longer be recognised); the exception's type name when it has no message."""
    msg = mask_secrets(" ".join(str(e).split()))
    if len(msg) > MAX_REASON_CHARS:
        msg = msg[:MAX_REASON_CHARS].rstrip() + "…"
    return msg or (type(e).__name__ if isinstance(e, BaseException) else "unknown error")


@dataclass
class SampleResult:
    """The result of one metadata row.

    Attributes:
        row: 0-based position of the row in the metadata CSV (its identity).
        audio_path: the input clip path as written in the CSV.
        answer_audio_path: the answer path as written in the CSV (``None`` when empty).
        status: ``"ok"`` or ``"failed"``.
        error: the failure reason (one line) or ``None``.
        values: per-sample metric values by key (``None`` = does not exist for this row).
        timings: seconds spent per dimension (kept in the work log, not in ``per_sample.jsonl``).
    """

    row: int
    audio_path: str
    answer_audio_path: str | None = None
    status: str = OK
    error: str | None = None
    values: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == OK

    def fail(self, reason: str) -> "SampleResult":
        """Mark failed (keeps the first reason and appends later ones)."""
        reason = one_line(reason)
        self.status = FAILED
        self.error = reason if not self.error else f"{self.error}; {reason}"
        return self

    def to_json(self, *, with_timings: bool = False) -> dict[str, Any]:
        """Flat JSON object: ``row``, ``audio_path``, ``answer_audio_path``, the values, ``status``, ``error``."""
        out: dict[str, Any] = {"row": self.row, "audio_path": self.audio_path, "answer_audio_path": self.answer_audio_path}
        out.update(clean_value(self.values))
        out["status"] = self.status
        out["error"] = self.error
        if with_timings:
            out["timings"] = clean_value(self.timings)
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "SampleResult":
        obj = dict(obj)
        base = {k: obj.pop(k, None) for k in ("row", "audio_path", "answer_audio_path", "status", "error", "timings")}
        return cls(
            row=int(base["row"]),
            audio_path=base["audio_path"] or "",
            answer_audio_path=base["answer_audio_path"],
            status=base["status"] or OK,
            error=base["error"],
            values=obj,
            timings=base["timings"] or {},
        )


def dumps(obj: dict[str, Any]) -> str:
    """One JSON line, strict (no NaN), secrets masked (every work log, results and record line)."""
    return json.dumps(mask_value(clean_value(obj)), ensure_ascii=False, allow_nan=False)


#: Longest JSON Lines line (characters) :func:`read_jsonl` parses: a record holds at most a
#: transcript of :data:`spear_datasets.schema.MAX_TEXT_CHARS` characters and its scores, far below
#: it; a longer line (a corrupted or hostile file) is skipped without being held in memory whole.
MAX_JSONL_LINE_CHARS = 16 * 2 ** 20


def _lines(f: Any, limit: int) -> Iterator[Optional[str]]:
    """The lines of text file ``f``, each at most ``limit`` characters; a longer line yields
    ``None`` (read past in pieces, never whole)."""
    while True:
        line = f.readline(limit + 1)
        if not line:
            return
        if len(line) > limit and not line.endswith("\n"):
            while line and not line.endswith("\n"):
                line = f.readline(limit)
            yield None
            continue
        yield line


def read_jsonl(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """Yield the objects of a JSON Lines file. A torn last line (killed writer), a line that is not
    a JSON object, one nested too deeply for the parser (``RecursionError``) or one longer than
    :data:`MAX_JSONL_LINE_CHARS` is skipped: in a work log its row is simply redone."""
    p = Path(path)
    if not p.exists():
        return
    with open(p, encoding="utf-8", errors="replace") as f:  # a corrupted byte spoils its line only
        for line in _lines(f, MAX_JSONL_LINE_CHARS):
            line = (line or "").strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError):
                continue  # a line cut by a kill, or not JSON: the row is simply redone
            if isinstance(obj, dict):
                yield obj


def write_jsonl_atomic(path: str | os.PathLike, objs: Iterable[dict[str, Any]]) -> Path:
    """Write JSON Lines under a temporary name, then rename (readers never see half a file).

    Raises:
        OutputError: the file cannot be written (read-only, disk full...); no temporary file is left.
    """
    p = Path(path)
    with atomic_path(p) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for o in objs:
            f.write(dumps(o) + "\n")
    return p


def write_json_atomic(path: str | os.PathLike, obj: dict[str, Any]) -> Path:
    """Write one JSON document atomically (strict: NaN/inf become ``null``; secrets masked).

    Raises:
        OutputError: as :func:`write_jsonl_atomic`.
    """
    p = Path(path)
    text = json.dumps(mask_value(clean_value(obj)), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    with atomic_path(p) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return p


class AppendLog:
    """An append-only JSON Lines work log, flushed and fsynced after each batch of records.

    Used by the runner so a killed run loses at most the batch in flight.

    Raises:
        OutputError: the log cannot be opened or written (the run stops; a rerun resumes).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        make_dirs(self.path.parent)
        try:
            self._f = open(self.path, "a", encoding="utf-8")
        except OSError as e:
            raise output_error(e, self.path) from None

    def write(self, objs: Iterable[dict[str, Any]]) -> None:
        try:
            for o in objs:
                self._f.write(dumps(o) + "\n")
            self._f.flush()
            os.fsync(self._f.fileno())
        except OSError as e:
            raise output_error(e, self.path) from None

    def close(self) -> None:
        try:
            self._f.close()
        except OSError:  # the write that failed already said why
            pass

    def __enter__(self) -> "AppendLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@contextlib.contextmanager
def claim_out(out: str | os.PathLike, fingerprint: dict[str, Any], *, overwrite: bool, conflict: Exception,
              command: str, state: Any = None, activity: str = "written",
              adopt: Iterable[str] = ()) -> Iterator[OwnedFolder]:
    """Own the output folder ``out`` of a resumable run bound to ``fingerprint`` for the duration
    of the ``with`` block (see the rule in :mod:`spear_datasets.files`).

    On the main process: ``out`` must be new, empty or this ``command``'s
    (:func:`spear_datasets.ownership.check_out_folder`); its rank-0 lock is taken and no other live
    process may hold any of its locks; the same fingerprint (``out/.work/run.json``, secrets
    masked) resumes; another one (or work logs without a run record) raises ``conflict``, or with
    ``overwrite`` removes exactly what earlier runs recorded as written
    (:meth:`~spear_datasets.ownership.OwnedFolder.remove_recorded`) before the new record is written,
    after checking every one of those paths: one that is now a link, a folder or a changed file
    stops it before anything is removed.
    ``adopt``: output names (relative) an earlier version of this tool wrote without a manifest;
    they are adopted when the fingerprint matches (a resume), and such a folder is never
    overwritten (nothing of it was recorded, so nothing of it may be removed).
    The other processes then take their own rank's lock. Every file written under ``out``
    meanwhile is recorded; the locks are held until the block ends.

    Raises:
        ``conflict``; spear_datasets.ownership.OutFolderError: a folder holding what this tool did
            not write, another command's folder, an older version's folder to overwrite, a
            recorded path to overwrite that is no longer as this tool wrote it, or a live process
            writing it (raised on every process under ``accelerate``), this process's own run
            among them (a second claim while a run of this process holds the folder).
    """
    rank = 0 if state is None else state.process_index
    main = state is None or state.is_main_process
    world = 1 if state is None else state.num_processes
    opened = find_open(out, command=command, rank=rank)  # the command holds it already (writes more around it)
    if opened is not None and getattr(opened, "claimed_by_run", False):
        # held for a run of this process (another thread, or a call from inside that run): a second
        # run would do its rows again; the lock cannot tell, it is this process's own
        raise OutFolderError(f"{out} is being {activity} by another run of this process: wait for it to finish, "
                             "then rerun", errno.EBUSY)
    folder = opened or OwnedFolder(out, command=command, rank=rank, activity=activity)
    error: BaseException | None = None
    if main:
        try:
            if opened is None:
                folder.open()
            try:
                _claim(folder, fingerprint, overwrite=overwrite, conflict=conflict, adopt=adopt)
            except BaseException:
                if opened is None:
                    folder.close()
                raise
        except Exception as e:  # told to the other processes below, then raised here
            error = e
    if world > 1:  # every process learns whether the claim and each rank's lock went through
        from accelerate.utils import gather_object

        msgs = gather_object([None if error is None else one_line(error)])
        if msgs[0] is not None and error is None:
            error = OutFolderError(f"the main process could not claim {out}: {msgs[0]}")
        if error is None and not main and opened is None:
            try:
                folder.open(check=False)
            except Exception as e:
                error = e
        msgs = gather_object([None if error is None else f"rank {rank}: {one_line(error)}"])
        if error is None and any(msgs):
            if opened is None:
                folder.close()
            error = OutFolderError(next(m for m in msgs if m))
    if error is not None:
        raise error
    folder.claimed_by_run = True
    try:
        yield folder
    finally:
        folder.claimed_by_run = False
        if opened is None:
            folder.close()


def parse_shard(text: str) -> tuple[int, int]:
    """``--shard K/N`` -> ``(K, N)`` with ``0 <= K < N`` (THE parser of every inference command's
    ``--shard``).

    Raises:
        ValueError: anything else (one line).
    """
    k, sep, n = str(text).strip().partition("/")
    try:
        pair = (int(k), int(n)) if sep else None
    except ValueError:
        pair = None
    if pair is None or not 0 <= pair[0] < pair[1]:
        raise ValueError(f"--shard takes K/N with 0 <= K < N (e.g. 0/8), got {text!r}")
    return pair


def in_shard(unit: int | str, shard: tuple[int, int] | None) -> bool:
    """Whether the unit of id ``unit`` belongs to shard ``(k, n)`` (``None``: no shards, every
    unit does): an int id (a row's position) when ``unit % n == k``, a string id (a sample, a
    dialogue, a task) when ``crc32(utf-8 bytes) % n == k``. Deterministic (no process's hash
    seed), so the shards of one run, started anywhere at any time, partition its units: each
    unit is in exactly one shard."""
    if shard is None:
        return True
    k, n = shard
    if isinstance(unit, bool) or not isinstance(unit, (int, str)):
        raise TypeError(f"a unit id is an int or a str, got {type(unit).__name__}")
    if isinstance(unit, int):
        return unit % n == k
    import zlib

    return zlib.crc32(unit.encode("utf-8")) % n == k


@contextlib.contextmanager
def hold_shard(out: str | os.PathLike, *, shard: int, command: str, activity: str = "written",
               settle_s: float = 2.0, check: bool = True, of: Optional[int] = None,
               **folder_kw: Any) -> Iterator[OwnedFolder]:
    """Hold shard ``shard``'s place in the output folder ``out`` for the ``with`` block, beside the
    other shards of the same run, which may be writing ``out`` at the same time from other
    processes or machines (the tasks of a job array): unlike a run of the whole folder, other
    live ranks are not refused.

    ``out`` must be new, empty or this ``command``'s (:func:`spear_datasets.ownership.check_out_folder`;
    not checked with ``check=False``: a folder of the user's, e.g. FDB's task folders); the lock
    ``rank-<shard>.lock`` is taken (refused while a live process holds it: the same shard running
    twice) and the folder's writes are recorded in ``written-<shard>.jsonl``. A shard marks itself
    (``shard-<shard>.lock``, held beside its rank lock); a live rank lock without that mark is a
    run of the whole folder (without shards, or ``accelerate``'s ranks), which runs every unit, so
    the shard is refused while it lives. A shard that finds the folder being set up by another (its
    work folder without a record yet) looks again for up to ``settle_s`` s. ``folder_kw``: the
    :class:`~spear_datasets.ownership.OwnedFolder` options (``flag``, ``work_name``...).

    With ``of`` (the ``N`` of ``K/N``) the shard also holds ``shard-<K>-of-<N>.lock`` and is
    refused while a shard of another ``N`` lives: ``0/2`` and ``1/3`` both hold unit 4 (a unit id
    selects one shard per ``N`` only), and two live shards would both run it. Shards of another
    ``N`` that have ended are no conflict (the units they finished have records and are not run
    again).

    Raises:
        spear_datasets.ownership.OutFolderError: a folder holding what this tool did not write,
            another command's folder, this shard's lock held by a live process, a live run of
            the whole folder, or (``of``) a live shard of another shard count.
    """
    import errno
    import time

    folder = OwnedFolder(out, command=command, rank=int(shard), activity=activity, **folder_kw)
    deadline = time.monotonic() + settle_s
    while True:
        try:
            folder.open(check=check)
            break
        except OutFolderError:
            # another shard may have created OUT/.work a moment ago, its run record not yet written
            if not folder.work.is_dir() or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    try:
        # this rank lock is a shard's; a rank lock held without its mark is a run of the whole
        # folder (infer without --shard, accelerate's ranks): it runs these rows too, so refused
        folder.hold_lock_file(f"shard-{int(shard)}.lock")
        if of is not None:
            folder.hold_lock_file(f"shard-{int(shard)}-of-{int(of)}.lock")
            for p in sorted(folder.work.glob("shard-*-of-*.lock")):
                other = p.stem.rpartition("-of-")[2]
                if other != str(int(of)) and folder.lock_file_held(p.name):
                    raise OutFolderError(f"{out} is being {activity} by a live shard of another shard count "
                                         f"({p.stem.removeprefix('shard-').replace('-of-', '/')}, this one "
                                         f"{int(shard)}/{int(of)}): both would run the rows their ids share; give "
                                         "every shard of a run the same N, or wait for that one to end", errno.EBUSY)
        deadline = time.monotonic() + settle_s
        while True:
            whole = [r for r in folder.live_ranks() if not folder.lock_file_held(f"shard-{r}.lock")]
            if not whole:
                break
            if time.monotonic() > deadline:  # a shard marks itself just after taking its rank lock
                raise OutFolderError(f"{out} is being {activity} by a live run of the whole folder (rank {whole[0]}'s "
                                     "lock is held, not by a shard): wait for it to finish or stop it, then rerun",
                                     errno.EBUSY)
            time.sleep(0.1)
        yield folder
    finally:
        folder.close()


def hold_run_folder(out: str | os.PathLike, shard: Optional[tuple[int, int]], **folder_kw: Any) -> Any:
    """The ``with`` block's hold on the output folder ``out`` of a run (``shard`` ``None``:
    :func:`spear_datasets.ownership.open_folder`) or of its shard ``(K, N)`` (``--shard K/N``:
    :func:`hold_shard` with ``of=N``, so a live shard of another ``N`` is refused).
    ``folder_kw``: the folder options both take (``command``, ``flag``, ``work_name``...).

    Raises:
        spear_datasets.ownership.OutFolderError: see :func:`hold_shard` and ``open_folder``.
    """
    if shard is None:
        return open_folder(out, **folder_kw)
    return hold_shard(out, shard=shard[0], of=shard[1], **folder_kw)


def bind_shard(work: str | os.PathLike, fingerprint: dict[str, Any], *, conflict: Exception) -> None:
    """Bind a shard (:func:`hold_shard`) to the run of ``fingerprint`` whose records live in
    ``work``: its run record ``work/run.json`` must hold ``fingerprint`` (secrets masked), and is
    written when absent (every shard writes the same). There is no overwrite.

    Raises:
        ``conflict``: a run record of another run, or work logs without a run record.
    """
    fp = mask_value(json.loads(json.dumps(fingerprint, default=str)))  # as run.json holds it (no secret)
    work = Path(work)
    path = work / "run.json"
    if path.exists():
        if _read_json(path) != fp:
            raise conflict
    elif work.is_dir() and any(work.glob("rank-*.jsonl")):  # logs without their run record: something else's
        raise conflict
    else:
        write_json_atomic(path, fp)


@contextlib.contextmanager
def claim_shard(out: str | os.PathLike, fingerprint: dict[str, Any], *, shard: int, conflict: Exception,
                command: str, activity: str = "written", settle_s: float = 2.0,
                of: Optional[int] = None) -> Iterator[OwnedFolder]:
    """Own shard ``shard`` (of ``of`` shards) of a resumable run in ``out`` for the ``with`` block
    (:func:`hold_shard`), the run bound to ``fingerprint`` in ``out/.work/run.json``
    (:func:`bind_shard`): a folder of another run raises ``conflict``.

    Raises:
        ``conflict``; spear_datasets.ownership.OutFolderError: see :func:`hold_shard`.
    """
    with hold_shard(out, shard=shard, command=command, activity=activity, settle_s=settle_s, of=of) as folder:
        bind_shard(folder.work, fingerprint, conflict=conflict)
        yield folder


def bind_run(folder: OwnedFolder, work: str | os.PathLike, fingerprint: dict[str, Any], *, overwrite: bool,
             conflict: Exception, outputs: Iterable[str] | None = None, adopt: Iterable[str] = ()) -> None:
    """Bind one resumable run inside an output folder this process holds open (lock taken) to
    ``fingerprint`` (``work/run.json``, secrets masked), on the main process.

    The same fingerprint resumes; another one (or work logs without a run record) raises
    ``conflict``, or with ``overwrite`` first removes what earlier runs recorded as written
    (:meth:`~spear_datasets.ownership.OwnedFolder.remove_recorded`): everything when ``outputs`` is
    ``None`` (the folder holds one run: :func:`claim_out`), else only the recorded paths at or
    below each relative folder or file of ``outputs`` and the run record and work logs of
    ``work`` (a folder holding one run per part, e.g. SpeechRole's modes, ``work`` =
    ``.work/<mode>``), nothing else. Refused while another live process holds a lock of the
    folder, and, before anything is removed, when any of those paths is no longer as this tool
    wrote it (a link, a folder, a changed file:
    :meth:`~spear_datasets.ownership.OwnedFolder.check_removable`).

    ``adopt``: output names (relative) an earlier version of this tool wrote without a manifest;
    adopted when the fingerprint matches (a resume). Such a folder is never overwritten (nothing
    of it was recorded, so nothing of it may be removed).

    Raises:
        ``conflict``; spear_datasets.ownership.OutFolderError: a live process writes the folder, an
            older version's outputs to overwrite, or a path to remove that is no longer as this
            tool wrote it.
    """
    fp = mask_value(json.loads(json.dumps(fingerprint, default=str)))  # as run.json holds it (no secret)
    work = Path(work)
    path = work / "run.json"
    folder.refuse_if_live()
    # an unreadable run.json is another run's too, and so are work logs without one (run.json is
    # written before any log: logs alone were left by something else, or it was deleted)
    orphan_logs = not path.exists() and work.is_dir() and any(work.glob("rank-*.jsonl"))
    if orphan_logs or (path.exists() and _read_json(path) != fp):
        if not overwrite:
            raise conflict
        legacy = [n for n in adopt if (folder.root / n).exists()] if not folder.recorded() else []
        if legacy:  # its outputs were never recorded: nothing of it may be removed, so it cannot be replaced
            raise OutFolderError(f"{folder.root} holds outputs of an older version of this tool that kept no record of "
                                 f"its files ({legacy[0]}...): nothing of them is replaced; move them away or give "
                                 "a new folder")
        outputs = None if outputs is None else list(outputs)
        # every path the overwrite removes or replaces is checked before any of them is removed
        folder.check_removable([None] if outputs is None else outputs)
        if outputs is None:
            folder.remove_recorded()
        else:
            for p in [path, *work.glob("rank-*.jsonl")]:  # this run's own records: removed by name below
                if p.is_symlink() or (p.exists() and not p.is_file()):
                    raise OutFolderError(f"{p} exists and was not written by this tool in {folder.flag} {folder.root} "
                                         "(is now a link or a folder): --overwrite removed nothing; move it away or "
                                         "give another folder")
            for rel in outputs:
                folder.remove_recorded(under=rel)
            for p in [path, *work.glob("rank-*.jsonl")]:  # this run's own records, by name
                p.unlink(missing_ok=True)
    elif path.exists() and not folder.recorded():
        # the same run, written by a version that kept no manifest: its own outputs are adopted
        for name in adopt:
            if (folder.root / name).is_file():
                folder.record_existing(folder.root / name)
    write_json_atomic(path, fp)


def _claim(folder: OwnedFolder, fingerprint: dict[str, Any], *, overwrite: bool, conflict: Exception,
           adopt: Iterable[str]) -> None:
    """The fingerprint step of :func:`claim_out` (main process, lock held): the whole folder is one run."""
    bind_run(folder, folder.work, fingerprint, overwrite=overwrite, conflict=conflict, adopt=adopt)


#: ``run_info.json`` / ``run.json`` files larger than this are not read (a run's record is a few KB)
MAX_RUN_INFO_BYTES = 16 * 2 ** 20


def _read_json(path: Path) -> Any:
    """The JSON of a run record (:func:`spear_datasets.files.read_json`, at most
    :data:`MAX_RUN_INFO_BYTES`); ``None`` when missing, unreadable, too large or not JSON."""
    try:
        return read_json(path, MAX_RUN_INFO_BYTES)
    except (OSError, ValueError):
        return None


def read_run_info(folder: Any) -> dict[str, Any]:
    """``FOLDER/run_info.json`` (timings, ``rows_resumed``, the onset rule...) as written by the last
    run; ``{}`` when it is missing, unreadable, not an object or over :data:`MAX_RUN_INFO_BYTES`."""
    obj = _read_json(Path(str(folder)) / "run_info.json")
    return obj if isinstance(obj, dict) else {}


def valid_record(obj: dict[str, Any]) -> bool:
    """A work-log record the resume logic can trust: ``row`` an ``int`` >= 0 (not a bool, not
    ``"x"``, not ``1.5``) and ``status`` ``"ok"`` or ``"failed"``. Anything else (an edited or
    corrupted line) is ignored, and its row is simply scored again."""
    row = obj.get("row")
    return isinstance(row, int) and not isinstance(row, bool) and row >= 0 and obj.get("status") in (OK, FAILED)


#: work-log status of a row whose adapter call is about to start (written, flushed, before the call)
STARTED = "started"
#: work-log status of a row stopped by the user (Ctrl-C) during its call: that start does not count
STOPPED = "stopped"
#: how many times a row may end the whole process before a rerun fails it instead of running it again
MAX_PROCESS_ENDS = 2


def count_process_ends(records: Iterable[dict[str, Any]], key: str = "row") -> dict[Any, int]:
    """Per row (``obj[key]``: an int, a sample id...), how many of its starts never finished:
    its :data:`STARTED` records minus its finishing ones (``ok``, ``failed``, :data:`STOPPED`; a
    failed record may end several starts at once: its ``ends_starts``; a later record of a finished
    row, e.g. its transcript, ends none: ``ends_starts`` 0). Rows with none are absent. The rule of :class:`spear_metrics.agents.rows.ProcessEnds`."""
    n: dict[Any, int] = {}
    for obj in records:
        k = obj.get(key)
        if k is None or isinstance(k, (bool, float, list, dict)) or (isinstance(k, int) and k < 0):
            continue
        status = obj.get("status")
        if status == STARTED:
            n[k] = n.get(k, 0) + 1
        elif status in (OK, FAILED, STOPPED):
            e = obj.get("ends_starts", 1)
            n[k] = n.get(k, 0) - (e if isinstance(e, int) and not isinstance(e, bool) and e >= 0 else 1)
    return {r: c for r, c in n.items() if c > 0}


def process_ends(work: str | os.PathLike) -> dict[int, int]:
    """Per row, how many of its starts never finished: the process ended during the row
    (``os._exit`` by an adapter, a crash, kill -9, SIGTERM), over every ``work/rank-<r>.jsonl``
    (:func:`count_process_ends` of the records whose ``row`` is an int)."""
    records = (obj for log in sorted(Path(work).glob("rank-*.jsonl")) for obj in read_jsonl(log)
               if isinstance(obj.get("row"), int))
    return count_process_ends(records)


def replaces(prev: Optional[dict[str, Any]], new: dict[str, Any]) -> bool:
    """THE rule of a unit's records read in log order: whether ``new`` (read after ``prev``, the
    record kept so far, ``None`` when there is none) replaces it. The latest record wins, but an
    ``ok`` is never replaced by a failure: the logs are read in a fixed order (the shards' logs,
    then the run without ``--shard``'s), not in the order the runs happened, and a unit finished by
    one run stays finished whatever another logged about it."""
    return prev is None or new.get("status") == "ok" or prev.get("status") != "ok"


def read_work_logs(work: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """Every record of the work logs ``work/rank-<r>.jsonl`` (:func:`read_jsonl`: torn lines
    skipped), log by log: the shards' logs (``--shard K/N`` logs to ``rank-K.jsonl``) first and
    ``rank-0.jsonl``, the log of a run without ``--shard``, last, so that a reader keeping the
    latest record of a unit takes what the run without ``--shard`` did after the shards (a failed
    unit it ran again) over what a shard logged before."""
    logs = sorted(Path(work).glob("rank-*.jsonl"), key=lambda p: (p.name == "rank-0.jsonl", p.name))
    for log in logs:
        yield from read_jsonl(log)


def read_rank_logs(work: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """The valid records (:func:`valid_record`) of every ``work/rank-<r>.jsonl`` work log, in
    file order; torn and malformed lines are skipped (their rows are redone)."""
    for log in sorted(Path(work).glob("rank-*.jsonl")):
        for obj in read_jsonl(log):
            if valid_record(obj):
                yield obj
