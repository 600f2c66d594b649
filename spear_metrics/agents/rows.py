"""THE row executor of every inference loop (SPEAR ``infer``, ``fdb infer``, ``speechrole infer``,
``dsuperb infer``): what a row's time limit is, how an adapter call is held to it, which errors
fail one row and which stop the run, the one-line failure reason, the "process ended twice on
this row" rule, and the concurrent loop of network sessions.

- :class:`SyncCaller`: a synchronous adapter's calls on one worker thread, each with a time limit.
- :func:`time_limited`: an async adapter call (a network session) under a row's deadline
  (:func:`spear_metrics.agents.net.row_deadline`: retries never sleep past it); past it,
  :class:`RowTimeout` (``timed out after N s``).
- :func:`session_time_limit`: the limit of one paced session: ``row_timeout_s`` plus the input's
  duration and tail silence (the real-time stream is not the adapter's slowness).
- :func:`fails_row` / :func:`failure_reason`: whether an exception fails its row (everything but
  ``KeyboardInterrupt`` and an unwritable output folder) and its one-line reason (secrets masked).
- :func:`run_row` / :func:`run_row_async`: a row's body -> its record (``status`` ``ok`` or
  ``failed`` with ``error``, ``elapsed_s``), fatal errors re-raised.
- :class:`ProcessEnds`: the rows whose starts never finished (``os._exit`` in an adapter, a
  crash, a kill): a row that ended the process :data:`~spear_metrics.core.records.MAX_PROCESS_ENDS`
  times is failed with the reason instead of being run again (a rerun would end the same way).
- :func:`run_concurrently`: network rows, ``concurrency`` sessions at once on one event loop,
  every file write on one writer thread, ``concurrency`` lowered to the adapter's ``max_concurrency``.
  The sessions themselves may run in worker processes (:mod:`spear_metrics.agents.processes`);
  one that ends with sessions in flight raises :class:`ProcessLost`, which stops the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Awaitable, Callable, Hashable, Iterable, Optional, Sequence, TypeVar

from spear_datasets.audio import AudioError
from spear_datasets.files import OutputError
from spear_datasets.schema import RowError
from spear_metrics.agents.base import AgentError, AgentOutputError
from spear_metrics.core.records import FAILED, MAX_PROCESS_ENDS, OK, STARTED, STOPPED, count_process_ends, one_line

T = TypeVar("T")


class RowTimeout(Exception):
    """A row ran past its time limit (``timed out after N s``)."""


class ProcessLost(Exception):
    """A session process (:mod:`spear_metrics.agents.processes`) ended with sessions in flight:
    the run stops (a rerun resumes). ``tags``: the rows whose sessions it was running (their
    ``started`` records stay open: they count as process ends); :meth:`RowJournal.stopping` logs
    the other rows in flight ``stopped``."""

    def __init__(self, message: str, tags: Iterable[Hashable] = ()):
        super().__init__(message)
        self.tags = set(tags)


class AdapterExit(Exception):
    """An adapter raised a ``BaseException`` that is not ``KeyboardInterrupt`` (``SystemExit``,
    ``GeneratorExit``, a custom one): carried as an ``Exception`` so only its row fails."""

    def __init__(self, exc: BaseException):
        super().__init__(f"{type(exc).__name__}: {one_line(exc) if str(exc) else 'raised by the adapter'}")


def fails_row(e: BaseException) -> bool:
    """Whether ``e`` fails its row (``True``) or stops the run (``KeyboardInterrupt``, an output
    folder that cannot be written, a session process that ended (:class:`ProcessLost`): a rerun
    resumes)."""
    return not isinstance(e, (KeyboardInterrupt, OutputError, ProcessLost))


def failure_reason(e: BaseException) -> str:
    """THE one-line reason of a failed row, secrets masked
    (:func:`spear_metrics.core.records.one_line`); an unexpected exception type is named
    (``TypeError: ...``), the project's own errors (adapters', audio, row, time-limit, a
    benchmark's data errors) are not."""
    msg = one_line(e)
    own = type(e).__module__.split(".")[0] in ("spear_metrics", "spear_datasets")  # the project's errors say it all
    if own or isinstance(e, (AgentError, AgentOutputError, AudioError, RowError, RowTimeout, AdapterExit)) \
            or msg == type(e).__name__:
        return msg
    return f"{type(e).__name__}: {msg}"


class SyncCaller:
    """Runs a synchronous adapter's calls on one daemon worker thread with a time limit.

    The worker is kept between calls (an adapter's thread-local state stays valid); a call that
    runs past its limit fails its row with ``timed out after N s`` and its thread is abandoned
    (a fresh worker takes the next call; the abandoned one cannot keep the process alive).
    ``KeyboardInterrupt`` raised by the adapter is re-raised in the caller's thread.
    """

    #: the worker threads' name (:func:`join_adapter_threads`)
    THREAD_NAME = "spearbench-adapter"

    def __init__(self) -> None:
        self._queue: Any = None

    def _start(self) -> None:
        import queue
        import threading

        q: Any = queue.Queue()

        def work() -> None:
            while True:
                item = q.get()
                if item is None:
                    return
                fn, fut = item
                if not fut.set_running_or_notify_cancel():
                    continue
                try:
                    fut.set_result(fn())
                except BaseException as e:  # handed to the caller's thread, which decides
                    fut.set_exception(e)

        threading.Thread(target=work, name=self.THREAD_NAME, daemon=True).start()
        self._queue = q

    def call(self, fn: Callable[[], Any], timeout_s: float) -> Any:
        """``fn()`` on the worker; raises :class:`RowTimeout` after ``timeout_s`` s, else what
        ``fn`` returns or raises."""
        import concurrent.futures

        if self._queue is None:
            self._start()
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._queue.put((fn, fut))
        try:
            return fut.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            self._queue.put(None)  # let the stuck worker end when (if) its call returns
            self._queue = None
            raise RowTimeout(f"timed out after {timeout_s:g} s") from None

    def close(self) -> None:
        if self._queue is not None:
            self._queue.put(None)
            self._queue = None


def join_adapter_threads(timeout_s: float = 5.0) -> None:
    """Wait (bounded) for the adapter workers :meth:`SyncCaller.close` released to end: a model
    whose native threads are still parked in one at interpreter exit may abort the process after
    its work is done (``terminate called without an active exception``). A thread stuck in an
    abandoned call is not waited for beyond ``timeout_s``."""
    import threading

    for t in threading.enumerate():
        if t.name == SyncCaller.THREAD_NAME and t is not threading.current_thread():
            t.join(timeout_s)


async def guarded(coro: Any) -> Any:
    """``await coro`` with a ``BaseException`` other than ``KeyboardInterrupt``/cancellation
    turned into :class:`AdapterExit` (asyncio would otherwise let ``SystemExit`` stop the loop)."""
    try:
        return await coro
    except (KeyboardInterrupt, asyncio.CancelledError):
        raise
    except Exception:
        raise
    except BaseException as e:
        raise AdapterExit(e) from None


async def time_limited(coro: Any, limit_s: float, what: str = "") -> Any:
    """``await coro`` (an adapter's call: a network session) under a deadline of ``limit_s`` s
    (:func:`spear_metrics.agents.net.row_deadline`: its retries never sleep past it), guarded
    (:func:`guarded`).

    Raises:
        RowTimeout: ``"<what>timed out after N s"`` (``what``: e.g. ``"turn 2 "``).
    """
    from spear_metrics.agents.net import row_deadline

    try:
        async with row_deadline(limit_s):
            return await guarded(coro)
    except TimeoutError:
        raise RowTimeout(f"{what}timed out after {limit_s:g} s") from None


def session_time_limit(scfg: Any, input_s: float, row_timeout_s: float, *, tail: bool = True) -> float:
    """The time limit (s) of one session with config ``scfg``
    (:func:`spear_metrics.agents.duplex.session_config`): ``row_timeout_s``; for a paced session,
    plus the input's duration ``input_s`` and (``tail``) its tail silence."""
    if getattr(scfg, "paced", False):
        return row_timeout_s + input_s + (float(scfg.tail_silence_s) if tail else 0.0)
    return row_timeout_s


def run_row(record: dict[str, Any], body: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    """Run one row's ``body(record)`` (which fills ``record`` and may set ``status``); returns
    ``record`` with ``status`` (``ok`` unless the body set it), or ``failed`` and ``error``
    (:func:`failure_reason`), and ``elapsed_s``.

    Raises:
        KeyboardInterrupt, OutputError: the run stops (a rerun resumes).
    """
    t0 = time.perf_counter()
    try:
        body(record)
        record.setdefault("status", OK)
    except BaseException as e:  # the row fails, the run goes on; a kill or an unwritable folder stops it
        if not fails_row(e):
            raise
        record.update(status=FAILED, error=failure_reason(e))
    record["elapsed_s"] = time.perf_counter() - t0
    return record


async def run_row_async(record: dict[str, Any], body: Callable[[dict[str, Any]], Awaitable[Any]]) -> dict[str, Any]:
    """:func:`run_row` for an async ``body``; a session cancelled by someone else than this run
    fails its row, the cancellation of this run is raised."""
    t0 = time.perf_counter()
    try:
        await body(record)
        record.setdefault("status", OK)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # the run is being stopped
        record.update(status=FAILED, error=failure_reason(AgentError("the adapter's session was cancelled")))
    except BaseException as e:
        if not fails_row(e):
            raise
        record.update(status=FAILED, error=failure_reason(e))
    record["elapsed_s"] = time.perf_counter() - t0
    return record


class ProcessEnds:
    """The "process ended twice on this row" rule over a work log whose rows are keyed by
    ``key`` (``"row"``, ``"sample"``...): per row, its :data:`~spear_metrics.core.records.STARTED`
    records minus its finishing ones (``ok``, ``failed``, ``stopped``; a failed record may end
    several starts: its ``ends_starts``).

    A loop writes :meth:`started` (flushed) before a row's adapter call, and on resume fails the
    rows :meth:`blocked` says ended the process too often, with :meth:`ended_record`.
    """

    def __init__(self, records: Iterable[dict[str, Any]], key: str = "row"):
        self.key = key
        self.counts = count_process_ends(records, key)

    def ends(self, k: Hashable) -> int:
        """How many of row ``k``'s starts never finished."""
        return max(0, self.counts.get(k, 0))

    def blocked(self, k: Hashable) -> bool:
        """Whether row ``k`` ended the process :data:`MAX_PROCESS_ENDS` times or more."""
        return self.ends(k) >= MAX_PROCESS_ENDS

    def started(self, k: Hashable, **extra: Any) -> dict[str, Any]:
        """The record to write (flushed) before row ``k``'s adapter call."""
        return {self.key: k, **extra, "status": STARTED}

    def ended_record(self, k: Hashable, **extra: Any) -> dict[str, Any]:
        """The failed record of row ``k`` that ended the process :meth:`ends` times (its
        ``ends_starts``: a later ``--retry-failed`` run starts counting afresh)."""
        n = self.ends(k)
        times = "twice" if n == 2 else f"{n} times"
        return {self.key: k, **extra, "status": FAILED, "ends_starts": n,
                "error": f"the process ended during this row {times} (os._exit, a crash or a kill); "
                         "--retry-failed runs it again"}


class RowJournal:
    """A loop's work-log bookkeeping of :class:`ProcessEnds`: :meth:`start` writes (flushed) the
    started record of a row before its adapter call and remembers it in flight, :meth:`finish`
    forgets it (its own finishing record is the loop's), and :meth:`stopping` writes ``stopped``
    for the rows in flight when the run is stopped (Ctrl-C, an unwritable folder, a session process
    that ended: those starts do not count as process ends, but for the rows that process was
    running).

    Args:
        log: the work log (:class:`spear_metrics.core.records.AppendLog` or anything with
            ``write(list_of_records)``).
        ends: the rule over that log's earlier records.
        extra: keys every started/stopped record carries (e.g. ``kind="dialogue"``).
    """

    def __init__(self, log: Any, ends: ProcessEnds, **extra: Any):
        self.log, self.ends, self.extra = log, ends, extra
        self.in_flight: set = set()

    def start(self, k: Hashable) -> None:
        self.log.write([self.ends.started(k, **self.extra)])
        self.in_flight.add(k)

    def finish(self, k: Hashable) -> None:
        self.in_flight.discard(k)

    @contextlib.contextmanager
    def stopping(self):
        """Around the loop: on ``KeyboardInterrupt``, :class:`OutputError` or
        :class:`ProcessLost`, the rows in flight are logged ``stopped`` (when the log can still be
        written; not the rows of the process that ended), and the error raised. Inside a
        coroutine, the cancellation of the run (Ctrl-C under ``asyncio.run`` cancels its main
        task) is such a stop too."""
        try:
            yield self
        except (KeyboardInterrupt, OutputError, ProcessLost, asyncio.CancelledError) as e:
            lost = e.tags if isinstance(e, ProcessLost) else set()
            try:
                self.log.write([{self.ends.key: k, **self.extra, "status": STOPPED}
                                for k in sorted(self.in_flight - lost, key=str)])
            except OutputError:
                pass
            raise


async def run_concurrently(agent: Any, items: Sequence[T], concurrency: int,
                           one: Callable[[T, Any], Awaitable[None]], *, note: Optional[str]) -> int:
    """THE loop of network runs (``infer``, ``fdb infer``, ``speechrole infer``, ``dsuperb
    infer``): ``await one(item, writer)`` for every item, ``concurrency`` at a time on the running
    event loop (each session paced on its own schedule by
    :func:`spear_metrics.agents.duplex.run_session`).

    ``concurrency`` is lowered to the adapter's ``max_concurrency`` when it declares a smaller one
    (:func:`~spear_metrics.agents.duplex.clamp_concurrency`), with the line ``"<note>: <why>"`` on
    stderr (``note``: e.g. ``"spearbench infer: note: moshi"``; ``None``: no line, for a process
    that is not the main one or a later call of the same run). Returns the sessions run at once
    (what a run records as its ``concurrency``), also when ``items`` is empty.

    ``writer`` is a one-thread executor (``loop.run_in_executor(writer, fn, ...)``) through which
    ``one`` makes every file write of the run, in order and off the loop (a disk that stalls, or an
    fsync of a work log, never delays a session's chunks). The adapter's ``warm_up()`` (imports, if
    it has one) runs before any session starts. ``one`` turns a bad item into a failed record; what
    it raises (``KeyboardInterrupt``, :class:`~spear_datasets.files.OutputError`...) cancels the other
    sessions and is raised as is, after the writes already queued are done.
    """
    from concurrent.futures import ThreadPoolExecutor

    from spear_metrics.agents.duplex import clamp_concurrency

    concurrency, why = clamp_concurrency(agent, int(concurrency))
    if why and note is not None:
        import sys

        print(f"{note}: {why}", file=sys.stderr)
    if not items:
        return concurrency
    pending = iter(items)
    writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spearbench-writer")
    warm_up(agent)

    async def worker() -> None:
        for item in pending:
            await one(item, writer)

    try:
        async with asyncio.TaskGroup() as tg:
            for _ in range(min(concurrency, len(items))):
                tg.create_task(worker())
    except BaseExceptionGroup as eg:  # the first error that stopped the group, as it was raised
        raise eg.exceptions[0] from None
    finally:
        writer.shutdown(wait=True)
    return concurrency


def warm_up(agent: Any) -> None:
    """Import what the sessions will import, before any session's clock starts (a first import
    inside the loop would stall every paced session at once)."""
    warm = getattr(agent, "warm_up", None)
    if callable(warm):
        warm()
