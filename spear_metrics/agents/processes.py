"""Network sessions in several processes, and per-provider caps on sessions at once.

One event loop paces every session of a run (:func:`spear_metrics.agents.duplex.run_session`:
chunk ``k`` goes out at ``t0 + k * chunk_ms``). Past a few dozen sessions, or on a busy machine,
that loop falls behind its schedule and the wall-clock onsets (SPEAR's) carry the delay. With
``--processes N`` the sessions run in ``N`` worker processes instead, each with its own event
loop; the process that started them stays the ONE writer of the output folder:

- the parent process keeps the whole row loop (:func:`spear_metrics.agents.rows.run_concurrently`):
  it logs each row's ``started`` record, stages and decodes its input, hands the
  :class:`~spear_metrics.agents.duplex.AudioRequest` to a worker, and writes the answer and the
  row's record when the worker sends back the
  :class:`~spear_metrics.agents.duplex.SessionResult`; resume and kill semantics are those of one
  process (a worker writes nothing);
- each row goes to exactly one worker (the one with the fewest sessions in flight when the row
  starts: disjoint shards, balanced as rows end); a worker runs the session under the row's time
  limit (:func:`spear_metrics.agents.rows.time_limited`) and returns the result or the failure's
  one-line reason; what a worker runs is a unit of work (:class:`SessionJob`: a row's session;
  an FDB v2 conversation, :meth:`SessionPool.run_job`);
- a worker that ends while sessions are in flight (a crash, ``os._exit`` in an adapter, a kill)
  stops the run with :class:`~spear_metrics.agents.rows.ProcessLost`: its rows keep their
  ``started`` records (they count as process ends on resume), the other rows in flight are logged
  ``stopped``; the parent ending (``kill -9``) ends the workers (their pipe closes). A worker
  that has not answered a session :attr:`SessionPool.UNRESPONSIVE_GRACE_S` s past its limit (its
  event loop blocked, so its own limit cannot fire) is killed by the parent, with the same effect;

``--processes auto`` (:func:`auto_processes`): ``ceil(concurrency / 32)`` processes
(:data:`SESSIONS_PER_PROCESS`), at most the usable CPUs; one process (no worker) when that is 1.
During the run each worker measures its loop's lag (:class:`LoopLag`: how late a 10 ms timer
fires); under ``auto``, a worker whose lag p99 over the last second passes
:data:`LAG_BUDGET_MS` makes the pool start one more worker (up to the usable CPUs), which then
takes the rows that start next.

``--provider-limit NAME=N`` (:class:`ProviderSlots`): at most ``N`` sessions of the adapter
``NAME`` (the ``--agent`` name) at once over every process of this user on this machine that
gives the same limit (this run's workers, ``accelerate`` ranks, other runs): ``N`` lock files
under :func:`slot_dir`, each held (``flock``, released by the kernel when its process ends)
while a row's session runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import pickle
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from spear_metrics.agents.rows import ProcessLost, failure_reason, time_limited

#: ``--processes auto``: sessions per process (a loop spends about 3 ms of CPU per session-second
#: pacing 40 ms chunks, docs/performance.md: 32 sessions take about a tenth of a core)
SESSIONS_PER_PROCESS = 32
#: ``--processes auto``: a worker whose loop lag p99 (ms) over the last second passes this asks
#: for one more worker (a quarter of a 40 ms chunk: the lag adds to every wall-clock onset)
LAG_BUDGET_MS = 10.0
#: environment variable naming the folder of the provider slots' lock files (:func:`slot_dir`)
SLOT_DIR_ENV = "SPEARBENCH_PROVIDER_SLOTS"


class ProcessesError(ValueError):
    """A ``--processes`` or ``--provider-limit`` value that cannot be used (one line)."""


# --------------------------------------------------------------------------- options


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one, else ``os.cpu_count()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def parse_processes(text: str) -> int | str:
    """``--processes``: ``"auto"`` or an int >= 1.

    Raises:
        ProcessesError: anything else.
    """
    t = str(text).strip().lower()
    if t == "auto":
        return "auto"
    try:
        n = int(t)
    except ValueError:
        n = 0
    if n < 1:
        raise ProcessesError(f"--processes takes 'auto' or an integer >= 1, got {text!r}")
    return n


def auto_processes(concurrency: int, cpus: Optional[int] = None) -> int:
    """Session processes ``--processes auto`` starts with: ``ceil(concurrency / 32)``
    (:data:`SESSIONS_PER_PROCESS`), at least 1, at most ``cpus`` (default :func:`usable_cpus`)."""
    cpus = usable_cpus() if cpus is None else cpus
    return max(1, min(cpus, math.ceil(max(1, concurrency) / SESSIONS_PER_PROCESS)))


def parse_provider_limits(items: list[str] | tuple[str, ...] | None) -> dict[str, int]:
    """``--provider-limit NAME=N`` pairs -> ``{NAME: N}`` (N >= 1; a repeated NAME: the last wins).

    Raises:
        ProcessesError: an item without ``=``, an empty NAME or an N that is not an int >= 1.
    """
    from spear_metrics.core.options import OptionError, parse_pairs

    out: dict[str, int] = {}
    for item in items or ():
        try:
            ((name, value),) = parse_pairs([item], names=True).items()
            n = int(value)
        except (OptionError, ValueError):
            n = 0
        if n < 1:
            raise ProcessesError(f"--provider-limit takes NAME=N with N an integer >= 1 (e.g. openai-realtime=8), got {item!r}")
        out[name] = n
    return out


# --------------------------------------------------------------------------- provider slots


def slot_dir() -> Path:
    """The folder of the provider slots' lock files: ``$SPEARBENCH_PROVIDER_SLOTS``, else
    ``<tmp>/spearbench-<uid>/provider-slots`` (one per user and machine)."""
    env = os.environ.get(SLOT_DIR_ENV)
    if env:
        return Path(env)
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"spearbench-{uid}" / "provider-slots"


def open_slot_dir(folder: Optional[Path] = None) -> Path:
    """:func:`slot_dir` (or ``folder``), created (``0700``) when absent and checked: in the shared
    temporary folder the default ``spearbench-<uid>`` must be this user's (another user who made
    it first could hold every slot or refuse the lock files).

    Raises:
        ProcessesError: the folder cannot be made or used, or the default one is another user's
            (one line naming ``$SPEARBENCH_PROVIDER_SLOTS``).
    """
    default = folder is None and not os.environ.get(SLOT_DIR_ENV)
    folder = folder or slot_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if default and hasattr(os, "getuid"):
            for d in (folder.parent, folder):  # <tmp>/spearbench-<uid> and its provider-slots
                st = os.lstat(d)
                if st.st_uid != os.getuid() or not os.path.isdir(d) or os.path.islink(d):
                    raise PermissionError(f"{d} is not a folder of this user (uid {os.getuid()})")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError(f"{folder} cannot be written")
    except OSError as e:
        raise ProcessesError(f"--provider-limit: the slot folder {folder} cannot be used ({failure_reason(e)}); "
                             f"set ${SLOT_DIR_ENV} to a folder of yours") from None
    return folder


class ProviderSlots:
    """At most ``limit`` holders at once of provider ``name`` over every process using the same
    :func:`slot_dir`: ``limit`` lock files (``<name>.<k>.lock``), one held per holder
    (``filelock``'s ``flock``: the kernel releases it when its process ends, also on ``kill -9``).
    ``limit`` ``None``: no cap (entering is free).

    ``async with slots:`` waits for a free slot (a non-blocking try of each, every 50 ms) and holds
    it for the block.

    Raises:
        ProcessesError: the lock files' folder cannot be made or used (:func:`open_slot_dir`: one
            line naming it and ``$SPEARBENCH_PROVIDER_SLOTS``).
    """

    POLL_S = 0.05

    def __init__(self, name: str, limit: Optional[int], folder: Optional[Path] = None):
        self.name, self.limit = name, limit
        self._locks: dict[int, Any] = {}  # slot -> its lock, made when first tried (a limit of 10**9 costs nothing)
        self._held: set[int] = set()
        self._holder: dict[int, int] = {}  # id(task) -> slot held
        self.notes = 0  # "waiting for a slot" lines printed
        self._folder: Optional[Path] = None
        if limit is not None:
            self._folder = open_slot_dir(folder)  # made (0700), owner checked; ProcessesError naming it
            self._safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)

    def _lock(self, k: int) -> Any:
        if k not in self._locks:
            from filelock import FileLock

            self._locks[k] = FileLock(str(self._folder / f"{self._safe}.{k}.lock"), timeout=0, thread_local=False)
        return self._locks[k]

    def _try(self) -> Optional[int]:
        """A free slot, lowest first (so runs with different limits share the first slots), or
        ``None``. The slots are tried in order until one is free, so a try costs the slots held
        (by any process) plus one, whatever the limit."""
        from filelock import Timeout

        for k in range(self.limit or 0):
            if k in self._held:
                continue
            lock = self._lock(k)
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue
            self._held.add(k)
            return k
        return None

    #: how long a wait behind other runs lasts before it is said (s), and between two such lines
    WAIT_NOTE_S = 30.0

    async def __aenter__(self) -> "ProviderSlots":
        if self.limit is None:
            return self
        t0 = last = time.monotonic()
        while (k := self._try()) is None:
            now = time.monotonic()
            # every slot held by other runs (none by this one): queued behind them, not timed
            # (the row's time limit starts with its session), so said, once per WAIT_NOTE_S
            if not self._held and now - last >= self.WAIT_NOTE_S:
                last = now
                self.notes += 1
                print(f"waiting {now - t0:.0f} s for a --provider-limit slot of {self.name}: all {self.limit} "
                      f"are held by other runs on this machine (queued; the row's time limit starts with its "
                      f"session)", file=sys.stderr, flush=True)
            await asyncio.sleep(self.POLL_S)
        self._holder[id(asyncio.current_task())] = k
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self.limit is None:
            return
        self._release(self._holder.pop(id(asyncio.current_task())))

    def _release(self, k: int) -> None:
        self._held.discard(k)
        self._locks[k].release()


@contextlib.asynccontextmanager
async def hold_together(slots: Sequence[ProviderSlots]) -> Any:
    """One slot of each of ``slots`` (:class:`ProviderSlots`; the same one twice: two of its
    slots) held at once for the block: a unit with several sessions (an FDB v2 conversation: its
    examiner and its examinee). All are taken together or none: a partial take is released and
    tried again every :attr:`ProviderSlots.POLL_S` s, so units needing two slots of one cap never
    hold one each while waiting for the other. A cap smaller than the slots a unit needs of it
    would never be met: the caller refuses it first.
    """
    capped = [s for s in slots if s.limit is not None]
    t0 = last = time.monotonic()
    while True:
        got: list[tuple[ProviderSlots, int]] = []
        for s in capped:
            k = s._try()
            if k is None:
                break
            got.append((s, k))
        if len(got) == len(capped):
            break
        for s, k in got:
            s._release(k)
        now = time.monotonic()
        if now - last >= ProviderSlots.WAIT_NOTE_S:
            last = now
            print(f"waiting {now - t0:.0f} s for --provider-limit slots of {', '.join(s.name for s in capped)} "
                  "(queued; the unit's time limit starts with its sessions)", file=sys.stderr, flush=True)
        await asyncio.sleep(ProviderSlots.POLL_S)
    try:
        yield
    finally:
        for s, k in got:
            s._release(k)


# --------------------------------------------------------------------------- loop lag


class LoopLag:
    """How late a 10 ms timer fires on the running event loop (ms): the time a ready callback
    (a session's next chunk) waits behind the loop's other work and the OS scheduler. Kept as a
    histogram of 0.25 ms bins up to 2 s (summable over processes), the exact maximum beside it;
    :meth:`window_p99` is the p99 since its previous call."""

    PERIOD_S = 0.010
    BIN_MS = 0.25
    N_BINS = 8000

    def __init__(self) -> None:
        self.hist = np.zeros(self.N_BINS, np.int64)
        self.window = np.zeros(self.N_BINS, np.int64)
        self.max_ms = 0.0

    def add(self, ms: float) -> None:
        b = min(self.N_BINS - 1, max(0, int(ms / self.BIN_MS)))
        self.hist[b] += 1
        self.window[b] += 1
        self.max_ms = max(self.max_ms, ms)

    async def run(self) -> None:
        """Measure until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            t = loop.time()
            await asyncio.sleep(self.PERIOD_S)
            self.add(max(0.0, (loop.time() - t - self.PERIOD_S) * 1000.0))

    @classmethod
    def percentile(cls, hist: np.ndarray, q: float) -> Optional[float]:
        """The ``q``-th percentile (ms, the upper edge of its bin) of histogram ``hist``."""
        n = int(hist.sum())
        if not n:
            return None
        k = int(np.searchsorted(np.cumsum(hist), math.ceil(q / 100.0 * n)))
        return (k + 1) * cls.BIN_MS

    def window_p99(self) -> Optional[float]:
        p = self.percentile(self.window, 99)
        self.window[:] = 0
        return p

    @classmethod
    def stats(cls, hists: list[np.ndarray], maxima: list[float]) -> dict[str, Any]:
        """``{"n", "p50", "p99", "max"}`` (ms) of the pooled histograms (``None`` values without samples)."""
        h = np.sum(hists, axis=0) if hists else np.zeros(cls.N_BINS, np.int64)
        n = int(h.sum())
        return {"n": n, "p50": cls.percentile(h, 50), "p99": cls.percentile(h, 99),
                "max": max(maxima) if n else None}


# --------------------------------------------------------------------------- sessions


@dataclass
class AgentSpec:
    """How a worker builds the run's adapter: by ``name`` and ``options`` (the registry), or from
    ``pickled`` (an adapter object given to the run, or registered at runtime in this process
    only)."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    pickled: Optional[bytes] = None

    def build(self) -> Any:
        if self.pickled is not None:
            return pickle.loads(self.pickled)
        from spear_metrics.agents.registry import load_agent

        return load_agent(self.name, **self.options)


def agent_spec(name: str, options: dict[str, Any], agent: Any, built_by_name: bool) -> AgentSpec:
    """The :class:`AgentSpec` of a run's adapter ``agent``: by name when the run built it from
    ``name`` (and the name is not a runtime registration, unknown to a new process), else pickled.

    Raises:
        ProcessesError: the adapter cannot be pickled (one line: run with one process).
    """
    from spear_metrics.agents.registry import _RUNTIME

    if built_by_name and name not in _RUNTIME:
        return AgentSpec(name, dict(options))
    try:
        return AgentSpec(name, dict(options), pickle.dumps(agent))
    except Exception as e:  # noqa: BLE001 -- any pickling failure: one line
        raise ProcessesError(f"the adapter object cannot be sent to a session process ({failure_reason(e)}): "
                             "use --processes 1") from None


@dataclass
class SessionJob:
    """A row's session as a unit of work (:meth:`run`: :func:`spear_metrics.agents.duplex.run_session`
    of ``request`` with ``scfg`` on the run's adapter), sent to a session process as it is."""

    request: Any
    scfg: Any

    async def run(self, agent: Any) -> Any:
        from spear_metrics.agents.duplex import run_session

        return await run_session(agent, self.request, self.scfg)


class LocalSessions:
    """Sessions on this process's event loop (one process: today's path). :meth:`run` is the
    one session call of a row; ``slots`` the provider cap; :meth:`stats` the loop's lag."""

    def __init__(self, agent: Any, slots: Optional[ProviderSlots] = None):
        self.agent = agent
        self.slots = slots or ProviderSlots("", None)
        self.processes = 1
        self._lag = LoopLag()
        self._probe: Optional[asyncio.Task] = None

    async def __aenter__(self) -> "LocalSessions":
        self._probe = asyncio.create_task(self._lag.run())
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe

    async def run(self, request: Any, scfg: Any, limit_s: float, what: str = "", tag: Any = None) -> Any:
        """One session of ``request`` under ``limit_s`` s (:func:`time_limited`)."""
        return await run_one_session(self.agent, request, scfg, limit_s, what)

    async def run_job(self, job: Any, limit_s: float, what: str = "", tag: Any = None) -> Any:
        """``await job.run(agent)`` (a unit of work of the run: :class:`SessionJob`, an FDB v2
        conversation) under ``limit_s`` s (:func:`time_limited`)."""
        return await time_limited(job.run(self.agent), limit_s, what)

    def stats(self) -> dict[str, Any]:
        return {"session_processes": 1, "loop_lag_ms": LoopLag.stats([self._lag.hist], [self._lag.max_ms])}


class _RemoteFailure(Exception):
    """A session that failed in a worker: its one-line reason (already masked)."""


@dataclass
class _Worker:
    proc: Any
    conn: Any
    sender: Any  # one-thread executor: sends never interleave
    inflight: dict[int, tuple[asyncio.Future, Any]] = field(default_factory=dict)
    sessions: int = 0
    alive: bool = True
    bye: Optional[dict[str, Any]] = None
    window_p99: Optional[float] = None
    reader: Optional[threading.Thread] = None
    unresponsive: bool = False  # killed by the parent: no answer past a session's limit


class SessionPool:
    """``processes`` worker processes (``spawn``) running the sessions of this process's rows
    (see the module docstring). ``async with`` starts them (each builds the adapter from
    ``spec`` and warms it up) and ends them; :meth:`run` has the session of one row run in the
    worker with the fewest sessions in flight. ``grow_to`` > ``processes``: the ``auto`` rule
    (one more worker when one's loop lag passes ``lag_budget_ms``, up to ``grow_to``).

    Raises (from ``async with``): ProcessesError: a worker could not build the adapter (its reason).
    """

    #: s past a session's limit after which a worker that has not answered is killed (its loop is
    #: blocked: its own limit could not fire)
    UNRESPONSIVE_GRACE_S = 30.0

    def __init__(self, spec: AgentSpec, processes: int, slots: Optional[ProviderSlots] = None, *,
                 grow_to: Optional[int] = None, lag_budget_ms: float = LAG_BUDGET_MS):
        self.spec = spec
        self.processes = processes
        self.slots = slots or ProviderSlots("", None)
        self.grow_to = max(processes, grow_to or processes)
        self.lag_budget_ms = lag_budget_ms
        self.workers: list[_Worker] = []
        self._procs: list[Any] = []
        self._ids = iter(range(1 << 62))
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._growing: Optional[asyncio.Task] = None
        self._closing = False

    # ---- life cycle

    async def __aenter__(self) -> "SessionPool":
        self._loop = asyncio.get_running_loop()
        try:
            await asyncio.gather(*(self._start() for _ in range(self.processes)))
        except BaseException:
            await self._stop(force=True)
            raise
        return self

    async def __aexit__(self, exc_type: Any, *exc: Any) -> None:
        await self._stop(force=exc_type is not None)

    async def _start(self) -> None:
        import multiprocessing
        from concurrent.futures import ThreadPoolExecutor

        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=_worker_main, args=(child, self.spec), name="spearbench-sessions", daemon=True)
        proc.start()
        child.close()
        self._procs.append(proc)
        first = await asyncio.to_thread(_recv, parent)
        if first is _EOF or first[0] != "ready":
            reason = first[1] if first is not _EOF and first[0] == "fatal" else \
                f"the session process ended while starting (exit code {proc.exitcode})"
            parent.close()
            proc.join(5)
            raise ProcessesError(f"a session process could not start: {reason}")
        w = _Worker(proc, parent, ThreadPoolExecutor(max_workers=1, thread_name_prefix="spearbench-send"))
        w.reader = threading.Thread(target=self._reader, args=(w,), name="spearbench-recv", daemon=True)
        self.workers.append(w)
        w.reader.start()

    async def _stop(self, force: bool) -> None:
        self._closing = True
        if self._growing is not None and not self._growing.done():
            self._growing.cancel()
            with contextlib.suppress(BaseException):
                await self._growing
        for w in self.workers:
            if w.alive and not force:
                with contextlib.suppress(OSError, ValueError):
                    await self._loop.run_in_executor(w.sender, w.conn.send, None)  # finish, report, end
        deadline = time.monotonic() + (30.0 if not force else 0.0)
        for proc in self._procs:  # every process started, a worker still starting too
            await asyncio.to_thread(proc.join, max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.terminate()
                await asyncio.to_thread(proc.join, 5)
            if proc.is_alive():
                proc.kill()
                await asyncio.to_thread(proc.join, 5)
        for w in self.workers:
            if w.reader is not None:  # its last messages (the loop lag report) read
                await asyncio.to_thread(w.reader.join, 5)
            w.sender.shutdown(wait=False)
            with contextlib.suppress(OSError):
                w.conn.close()

    # ---- messages from a worker (its reader thread)

    def _reader(self, w: _Worker) -> None:
        while (msg := _recv(w.conn)) is not _EOF:
            kind = msg[0]
            if kind in ("ok", "failed"):
                _call_soon(self._loop, self._done, w, msg[1], kind, msg[2])
            elif kind == "lag":
                _call_soon(self._loop, self._lag, w, msg[1])
            elif kind == "bye":
                w.bye = msg[1]
        _call_soon(self._loop, self._ended, w)

    def _done(self, w: _Worker, rid: int, kind: str, payload: Any) -> None:
        fut, _ = w.inflight.pop(rid, (None, None))
        if fut is None or fut.done():
            return
        if kind == "ok":
            fut.set_result(payload)
        else:
            fut.set_exception(_RemoteFailure(payload))

    def _ended(self, w: _Worker) -> None:
        w.alive = False
        if not w.inflight:
            return
        w.proc.join(1)
        how = "was killed: it did not answer past a session's time limit (its event loop blocked)" if w.unresponsive \
            else f"ended (exit code {w.proc.exitcode})"
        lost = ProcessLost(f"a session process (pid {w.proc.pid}) {how} with "
                           f"{len(w.inflight)} session(s) in flight; rerun to resume (a row during which a process "
                           "ends twice is then failed)", tags=[tag for _, tag in w.inflight.values()])
        for fut, _ in w.inflight.values():
            if not fut.done():
                fut.set_exception(lost)
        w.inflight.clear()

    def _lag(self, w: _Worker, p99: Optional[float]) -> None:
        w.window_p99 = p99
        if (p99 is not None and p99 > self.lag_budget_ms and len(self.workers) < self.grow_to and not self._closing
                and (self._growing is None or self._growing.done())):
            self._growing = asyncio.ensure_future(self._grow())

    async def _grow(self) -> None:
        with contextlib.suppress(ProcessesError):
            await self._start()

    # ---- sessions

    async def run(self, request: Any, scfg: Any, limit_s: float, what: str = "", tag: Any = None) -> Any:
        """The session of one row (``tag``: its id, named by :class:`ProcessLost`) in the
        worker with the fewest sessions in flight; returns its
        :class:`~spear_metrics.agents.duplex.SessionResult`. The worker ends the session at
        ``limit_s`` s; a worker that has not answered :attr:`UNRESPONSIVE_GRACE_S` s after that
        (its event loop blocked) is killed.

        Raises:
            _RemoteFailure (an ``Exception``: the row fails with the worker's reason); ProcessLost
            (also for a worker killed as unresponsive).
        """
        return await self.run_job(SessionJob(request, scfg), limit_s, what, tag)

    async def run_job(self, job: Any, limit_s: float, what: str = "", tag: Any = None) -> Any:
        """:meth:`run` for any unit of work ``job`` (picklable, ``async job.run(agent)``: a
        :class:`SessionJob`, an FDB v2 conversation), run in a worker under ``limit_s`` s; what
        ``job.run`` returns comes back pickled.

        Raises:
            as :meth:`run`.
        """
        live = [w for w in self.workers if w.alive]
        if not live:
            raise ProcessLost("every session process has ended; rerun to resume", tags=[tag])
        w = min(live, key=lambda x: len(x.inflight))
        rid = next(self._ids)
        fut = self._loop.create_future()
        w.inflight[rid] = (fut, tag)
        w.sessions += 1
        try:
            await self._loop.run_in_executor(w.sender, w.conn.send, (rid, job, limit_s, what))
        except (OSError, ValueError):  # its pipe closed: the reader reports the process's end
            pass
        try:
            return await asyncio.wait_for(asyncio.shield(fut), limit_s + self.UNRESPONSIVE_GRACE_S)
        except asyncio.TimeoutError:
            # the worker's own limit did not end the session: its event loop is blocked (an
            # adapter's synchronous call). It is killed: its rows stop the run as a lost process
            # (ProcessLost, set on ``fut`` by the reader) and resume.
            if not fut.done():
                w.unresponsive = True
                w.proc.kill()
            return await fut
        except asyncio.CancelledError:
            w.inflight.pop(rid, None)
            raise

    def stats(self) -> dict[str, Any]:
        """``session_processes`` (started), ``loop_lag_ms`` (pooled over them, :class:`LoopLag`)
        and per process (``session_process_stats``): ``sessions`` run, ``cpu_s`` (its whole CPU
        time), ``startup_cpu_s`` (of that, building and warming up the adapter) and
        ``loop_cpu_s`` (its event loop's thread), in s."""
        byes = [w.bye for w in self.workers if w.bye]
        return {"session_processes": len(self.workers),
                "loop_lag_ms": LoopLag.stats([np.asarray(b["hist"]) for b in byes], [b["max_ms"] for b in byes]),
                "session_process_stats": [{"sessions": w.sessions, **{k: (w.bye or {}).get(k) for k in
                                                                       ("cpu_s", "startup_cpu_s", "loop_cpu_s")}}
                                          for w in self.workers]}


#: what :func:`_recv` returns once the other end of the pipe is closed
_EOF = object()


def _recv(conn: Any) -> Any:
    """The next message on ``conn``, or :data:`_EOF` once the other end closed it."""
    try:
        return conn.recv()
    except (EOFError, OSError):
        return _EOF


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Any, *args: Any) -> None:
    """``loop.call_soon_threadsafe``; nothing once the loop is closed (the run has ended)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)


# --------------------------------------------------------------------------- the worker


def _worker_main(conn: Any, spec: AgentSpec) -> None:
    """A session process: build the adapter, then run every session the parent sends until it
    sends ``None`` (or its pipe closes: the parent is gone, and so is this process)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it ends this process
    try:
        from spear_metrics.agents.rows import warm_up

        agent = spec.build()
        warm_up(agent)
    except BaseException as e:  # noqa: BLE001 -- told to the parent in one line
        with contextlib.suppress(Exception):
            conn.send(("fatal", failure_reason(e)))
        return
    conn.send(("ready", os.getpid()))
    asyncio.run(_serve(conn, agent, time.process_time()))


async def _serve(conn: Any, agent: Any, startup_cpu_s: float) -> None:
    import queue

    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue = asyncio.Queue()
    outbox: queue.Queue = queue.Queue()

    def receive() -> None:
        while True:
            msg = _recv(conn)
            if msg is _EOF:
                os._exit(0)  # the parent is gone (killed): nobody takes the results
            loop.call_soon_threadsafe(inbox.put_nowait, msg)
            if msg is None:  # the parent's "finish"
                return

    def send() -> None:  # pickling and pipe writes off the loop that paces the sessions
        while (item := outbox.get()) is not None:
            try:
                conn.send(item)
            except (OSError, ValueError):
                os._exit(0)

    threading.Thread(target=receive, daemon=True).start()
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    lag = LoopLag()
    probe = asyncio.create_task(lag.run())
    cpu0 = time.thread_time()

    async def report() -> None:
        while True:
            await asyncio.sleep(1.0)
            outbox.put(("lag", lag.window_p99()))

    async def one(rid: int, job: Any, limit_s: float, what: str) -> None:
        try:
            out = ("ok", rid, await time_limited(job.run(agent), limit_s, what))
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # noqa: BLE001 -- the row fails with the reason, this process goes on
            out = ("failed", rid, failure_reason(e))
        outbox.put(out)

    reporter = asyncio.create_task(report())
    tasks: set[asyncio.Task] = set()
    while (msg := await inbox.get()) is not None:
        t = asyncio.create_task(one(*msg))
        tasks.add(t)
        t.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)
    for t in (probe, reporter):
        t.cancel()
    outbox.put(("bye", {"hist": lag.hist.tolist(), "max_ms": lag.max_ms, "loop_cpu_s": time.thread_time() - cpu0,
                        "cpu_s": time.process_time(), "startup_cpu_s": startup_cpu_s}))
    outbox.put(None)
    await asyncio.to_thread(sender.join, 30)


async def run_one_session(agent: Any, request: Any, scfg: Any, limit_s: float, what: str = "", *,
                          sessions: Any = None, tag: Any = None) -> Any:
    """THE session call of a row under its limit (:func:`time_limited`): on this loop, or through
    ``sessions`` (:class:`LocalSessions` / :class:`SessionPool`, ``tag`` the row's id)."""
    if sessions is None:
        from spear_metrics.agents.duplex import run_session

        return await time_limited(run_session(agent, request, scfg), limit_s, what)
    return await sessions.run(request, scfg, limit_s, what, tag=tag)


def check_provider_limits(name: str | Sequence[str], provider_limits: Optional[dict[str, int]]) -> None:
    """Refuse ``--provider-limit`` pairs that name only other adapters than the run's ``name``
    (a misspelt name would cap nothing), whatever the adapter (``infer`` checks before it starts).
    ``name``: the run's adapter, or its adapters (FDB v2: examiner and examinee; one of them
    named suffices).

    Raises:
        ProcessesError: one line naming the limits given and the run's adapter(s).
    """
    names = [name] if isinstance(name, str) else list(dict.fromkeys(name))
    if provider_limits and not any(n in provider_limits for n in names):
        which = f"adapter {names[0]!r}" if len(names) == 1 else \
            "adapters " + " and ".join(repr(n) for n in names)
        raise ProcessesError(f"--provider-limit names {', '.join(sorted(provider_limits))}, not this run's {which}: "
                             f"give --provider-limit {names[0]}=N")


def sessions_for(agent: Any, *, name: str, options: dict[str, Any], built_by_name: bool, processes: int | str,
                 concurrency: int, n_rows: int, provider_limits: Optional[dict[str, int]] = None) -> Any:
    """The sessions of a run (an ``async with`` object with ``run``, ``slots`` and ``stats``):
    :class:`LocalSessions` when one process suffices, else a :class:`SessionPool`.

    Args:
        processes: ``--processes``: an int (at most ``concurrency`` and ``n_rows`` are started)
            or ``"auto"`` (:func:`auto_processes` to start with, growing on the measured loop lag
            up to :func:`usable_cpus`).
        concurrency: sessions at once (already lowered to the adapter's ``max_concurrency``).
        n_rows: rows this run will start.
        provider_limits: ``--provider-limit`` pairs; the one named ``name`` caps this run's sessions.

    Raises:
        ProcessesError: an adapter object that cannot be sent to a worker; ``provider_limits`` that
            name other adapters only (a misspelt name would cap nothing).
    """
    check_provider_limits(name, provider_limits)
    slots = ProviderSlots(name, (provider_limits or {}).get(name))
    if processes == "auto":
        n, grow_to = auto_processes(concurrency), usable_cpus()
    else:
        n, grow_to = int(processes), int(processes)
    cap = max(1, min(concurrency, n_rows))
    n, grow_to = min(n, cap), min(grow_to, cap)
    if n <= 1:
        return LocalSessions(agent, slots)
    return SessionPool(agent_spec(name, options, agent, built_by_name), n, slots, grow_to=grow_to)


def unused_options_note(agent: Any, name: str, processes: int | str, provider_limits: Optional[dict[str, int]]) -> None:
    """Say on stderr, in one line, that ``--processes`` / ``--provider-limit`` do nothing for
    ``agent`` when it is not a network adapter (an in-process model or a fixed answer runs in
    this process, one row at a time): given for such an adapter they would otherwise be ignored
    without a word."""
    import sys

    from spear_metrics.agents.duplex import is_network_agent

    given = [flag for flag, on in (("--processes", processes != 1), ("--provider-limit", bool(provider_limits))) if on]
    if given and not is_network_agent(agent):
        print(f"note: {' and '.join(given)} act on network adapters only; {name} runs in this process",
              file=sys.stderr)
