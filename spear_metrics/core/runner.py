"""The resumable runner: work items -> per-sample results, resumable and sharded across
processes with ``accelerate``.

:func:`run_resumable` is the one loop (work log, resume, round-robin shards, gather by row id);
its clients bring their items and a batch-scoring callable:
:func:`spear_metrics.core.scoring.run_score` (SPEAR metadata rows scored by the dimensions) and
the benchmarks' own runners (their folders).

- every row gets exactly one :class:`SampleResult`;
- results are appended to ``OUT/.work/rank-<r>.jsonl`` after each batch (flushed + fsynced), so
  a killed run resumes where it stopped and never scores a row twice;
- under ``accelerate launch`` the pending rows are dealt round-robin (``rows[rank::world]``:
  no row repeated or dropped whatever the remainder) and results are gathered by row id on the
  main process.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from spear_metrics.core.records import AppendLog, SampleResult, one_line, read_rank_logs

WORK_DIR = ".work"


class RunError(RuntimeError):
    """The run cannot proceed as a whole (one-line reason; the CLI exits non-zero)."""


def run_distributed_state():
    """accelerate's process state (one process when not launched through ``accelerate``);
    honours ``ACCELERATE_USE_CPU`` (see :func:`spear_metrics.core.batching.distributed_state`)."""
    from spear_metrics.core.batching import distributed_state

    try:
        return distributed_state()
    except RuntimeError as e:
        raise RunError(str(e)) from None


@dataclass
class RunOutcome:
    """What :func:`run_resumable` hands back on the main process.

    Attributes:
        results: one :class:`SampleResult` per row id ``0 .. n_rows - 1``, in row order.
        new: the results scored by this invocation (every process's).
        n_resumed: rows whose result came from the work logs of an earlier invocation.
        elapsed_s: wall seconds of the scoring (the slowest process).
        n_processes: processes that shared the rows.
        mine: the items the main process scored (for its audio-seconds figure).
    """

    results: list[SampleResult]
    new: list[SampleResult]
    n_resumed: int
    elapsed_s: float
    n_processes: int
    mine: list


def run_resumable(
    items: Sequence[Any],
    score_batch: Callable[[list[Any]], list[SampleResult]],
    work: str | os.PathLike,
    *,
    n_rows: int,
    failed: dict[int, SampleResult] | None = None,
    batch_size: int = 16,
    retry_failed: bool = False,
    progress_desc: str | None = None,
    order: Callable[[Any], Any] | None = None,
    read_ahead: Callable[[list[Any]], None] | None = None,
    state: Any = None,
    trusted: Callable[[SampleResult], bool] | None = None,
    concurrency: int = 1,
) -> RunOutcome | None:
    """THE resumable, sharded loop every scored run goes through (SPEAR ``score``, FDB ``fdb``).

    Args:
        items: the work items to score, each with an int ``row`` attribute (its id, ``0 <= row
            < n_rows``; ids of ``failed`` are not among them).
        score_batch: scores a batch of items into one :class:`SampleResult` per item (same
            ``row``); a bad item is a failed result, never an exception. An exception is a
            whole-run problem (e.g. :class:`ModelUnavailableError`): it stops every process.
        work: the work folder (``rank-<r>.jsonl`` logs and ``run.json``) of an output folder
            every process holds through :func:`spear_metrics.core.records.claim_out` (which binds
            it to the run's fingerprint and holds its locks) for the whole call.
        n_rows: how many rows the run has (scored items + ``failed``).
        failed: rows already failed before scoring (bad metadata), by row id.
        batch_size: items per ``score_batch`` call; each batch is appended (fsynced) to this
            process's log, so a kill loses at most the batch in flight.
        retry_failed: score again the rows logged as failed.
        progress_desc: a tqdm bar with this label on the main process (``None``: no bar).
        order: sort key of this process's share (e.g. longest answers first for batching).
        read_ahead: prepares the NEXT batch in a background thread while a batch is scored (e.g.
            decodes its audio); once a batch is scored and its read-ahead is over, items with a
            ``release()`` method are released (nothing cached on them outlives their batch).
        state: the accelerate process state (default: :func:`spear_metrics.core.batching.distributed_state`).
        trusted: a logged record it returns ``False`` for (edited or corrupted values) is ignored
            and its row scored again.
        concurrency: ``> 1`` for network-bound work (an LLM judge): this process's items are
            scored one per ``score_batch`` call by that many threads, and each result is logged
            as soon as it is in (a kill loses only the calls in flight); ``batch_size``,
            ``order`` and ``read_ahead`` then do not apply. On the first exception the items not
            started are cancelled, the running ones are logged as they finish, then it is raised.

    Items already logged are not scored again; the pending ones are dealt round-robin
    (``pending[rank::world]``) and gathered by row id on the main process.

    Returns:
        A :class:`RunOutcome` on the main process, ``None`` on the others.

    Raises:
        RunError: a row without a result (a process died), or another process failed.
        whatever ``score_batch`` raised, on every process.
    """
    failed = dict(failed or {})
    state = state if state is not None else run_distributed_state()
    rank, world = state.process_index, state.num_processes
    work = Path(work)

    ids = {it.row for it in items}
    done: dict[int, SampleResult] = {}
    for obj in read_rank_logs(work):
        rec = SampleResult.from_json(obj)
        if trusted is not None and not trusted(rec):
            continue  # an edited or corrupted record: its row is scored again
        if rec.row in ids and (not retry_failed or rec.ok):
            # a row logged twice was retried (--retry-failed only redoes failed rows): an ok result
            # wins whichever rank's log holds it, else the latest failure
            if rec.ok or rec.row not in done or not done[rec.row].ok:
                done[rec.row] = rec
    n_resumed = len(done)
    pending = [it for it in items if it.row not in done]
    # every rank must deal from the same snapshot of the logs: none writes before all have read
    # (a fast rank's first batch would otherwise count as done on a slower one, whose share of
    # the pending rows would shift and leave rows unscored)
    state.wait_for_everyone()
    mine = pending[rank::world]
    if order is not None:
        mine.sort(key=order)

    bar = None
    if progress_desc is not None and state.is_main_process and mine:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(mine), desc=progress_desc + (f" (rank 0 of {world})" if world > 1 else ""), unit="sample")
    t0 = time.perf_counter()
    new: list[SampleResult] = []
    error: BaseException | None = None
    batches = [mine[i : i + max(1, batch_size)] for i in range(0, len(mine), max(1, batch_size))]
    reader = ThreadPoolExecutor(1, thread_name_prefix="spear-read-ahead") if read_ahead and len(batches) > 1 else None
    ahead: dict[int, Any] = {}
    try:
        with AppendLog(work / f"rank-{rank}.jsonl") as log:
            if concurrency > 1:
                _score_concurrently(mine, score_batch, int(concurrency), log, new, bar)
                batches = []
            for k, batch in enumerate(batches):
                if reader is not None and k + 1 < len(batches):
                    ahead[k + 1] = reader.submit(read_ahead, batches[k + 1])
                recs = score_batch(batch)
                if k in ahead:
                    ahead.pop(k).result()
                    for it in batch:  # after its read-ahead: nothing cached on it outlives the batch
                        if hasattr(it, "release"):
                            it.release()
                log.write(r.to_json(with_timings=True) for r in recs)
                new.extend(recs)
                if bar is not None:
                    bar.update(len(batch))
    except Exception as e:  # raised on every rank below, after the others have been told
        error = e
    finally:
        if reader is not None:
            reader.shutdown(wait=True, cancel_futures=True)
            for batch in batches:
                for it in batch:
                    if hasattr(it, "release"):
                        it.release()
        if bar is not None:
            bar.close()
    elapsed = time.perf_counter() - t0

    if world > 1:
        from accelerate.utils import gather_object

        # every rank reaches this gather, also one whose scoring raised: no rank waits forever
        gathered = gather_object([(None if error else [r.to_json(with_timings=True) for r in new],
                                   elapsed, None if error is None else f"rank {rank}: {one_line(error)}")])
        errors = [msg for _, _, msg in gathered if msg]
        if error is not None:
            raise error
        if errors:
            raise RunError(f"another process failed ({errors[0]}); rerun to resume")
        new = [SampleResult.from_json(o) for objs, _, _ in gathered for o in objs]
        elapsed = max([e for _, e, _ in gathered], default=elapsed)
    elif error is not None:
        raise error
    if not state.is_main_process:
        return None

    for r in new:
        done[r.row] = r
    merged: dict[int, SampleResult] = {**done, **failed}
    missing = [i for i in range(n_rows) if i not in merged]
    if missing:  # cannot happen unless a rank died: say so rather than average fewer rows
        raise RunError(f"rows {missing[:10]} have no result; rerun to resume")
    results = [merged[i] for i in range(n_rows)]
    value_keys = list(dict.fromkeys(k for r in results for k in r.values))
    for r in results:
        for k in value_keys:
            r.values.setdefault(k, None)
    return RunOutcome(results=results, new=new, n_resumed=n_resumed, elapsed_s=elapsed, n_processes=world, mine=mine)


def _score_concurrently(items: Sequence[Any], score_batch: Callable[[list[Any]], list[SampleResult]], threads: int,
                        log: AppendLog, new: list[SampleResult], bar: Any) -> None:
    """:func:`run_resumable`'s loop for ``concurrency > 1``: ``score_batch([item])`` on ``threads``
    threads, each result logged (fsynced) as it comes in, from this thread only.

    An exception of ``score_batch`` cancels the items not started and raises once the running ones
    are logged. ``KeyboardInterrupt`` (Ctrl-C, or raised by ``score_batch``) and a log that cannot
    be written cancel the items not started and raise as soon as the running calls return (their
    results are not logged: a rerun asks them again); no item starts after that."""
    from concurrent.futures import as_completed

    first: BaseException | None = None
    with ThreadPoolExecutor(threads, thread_name_prefix="spear-score") as pool:
        futures = [pool.submit(score_batch, [it]) for it in items]
        try:
            for fut in as_completed(futures):
                if fut.cancelled():
                    continue
                try:
                    recs = fut.result()
                except Exception as e:  # a whole-run problem: start nothing more, keep what finishes
                    if first is None:
                        first = e
                        for f in futures:
                            f.cancel()
                    continue
                log.write(r.to_json(with_timings=True) for r in recs)
                new.extend(recs)
                if bar is not None:
                    bar.update(1)
        except BaseException:  # the pool's exit would otherwise run every queued item before this is raised
            for f in futures:
                f.cancel()
            raise
    if first is not None:
        raise first
