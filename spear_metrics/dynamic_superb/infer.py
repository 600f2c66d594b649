"""``spearbench dsuperb infer``: run an adapter over Dynamic-SUPERB task instances and write its
text answers in upstream's prediction layout.

Output (``PRED/``)::

    PRED/<instance>.json          {<file>: {"file", "instruction", "label"[, "label2"...], <other
                                  non-audio columns>, "sllm_response"}} for every row answered:
                                  the layout upstream's evaluator reads (one JSON object per task,
                                  keyed by the item's ``file``; ``convert_format.py`` of
                                  cyhuang-tw/speechlm_eval keys by ``file`` too)
    PRED/.work/<instance>/
        run.json                  what the answers depend on (adapter, options, data source)
        rank-0.jsonl              one record per row as it ends (the resume log; rank-K.jsonl: shard K's)
        failures.jsonl            {"row", "file", "error"} per row that got no answer
        run_info.json             counts, source, revision, agent, timings
    PRED/.work/run_info.json      every instance of the last run
    PRED/.work/owner.json, written-0.jsonl, rank-0.lock   the folder's owner, manifest and lock

A row that got no answer (bad item, audio that does not decode, adapter error, time limit) is not
in ``<instance>.json`` (upstream's file holds answers only) and is listed in ``failures.jsonl``;
``spearbench dsuperb score`` reads it and counts those rows as failed (they never disappear).

``PRED/`` follows the project's output-folder rule (docs/safety.md): new, empty or this
command's (a folder of upstream's or another system's prediction files is refused); its lock is
held while the run writes (a second run on it is refused); every file is recorded as written.
Each instance is one run bound to its settings (``.work/<instance>/run.json``): a rerun redoes
only the rows without a record (``retry_failed``: also the failed ones); another adapter,
options or data is refused unless ``overwrite``, which removes only what the earlier run of that
instance recorded (``<instance>.json``, its work folder) and is unchanged. A ``<instance>.json``
this command did not write, or that changed since, is never replaced or removed.

Network adapters (``openai-audio``...) answer ``concurrency`` rows at once on one event loop
(:func:`spear_metrics.agents.rows.run_concurrently`; lowered, with a note, to the adapter's
``max_concurrency``), each with the row's time limit; with ``processes`` their text-only
sessions run in worker processes and ``provider_limits`` caps the sessions of an adapter name
at once over every process (:mod:`spear_metrics.agents.processes`: this process stays the one
writer of ``PRED/``; one pool of processes per instance); local text adapters
(:class:`spear_metrics.agents.text.TextAgent`) answer one row at a time on a worker thread with
the same limit.

``shard`` ``(K, N)`` (``--shard K/N``) runs only the rows whose index ``% N == K``
(:func:`spear_metrics.core.records.in_shard`) of every instance, beside the other shards, which
may write ``PRED/`` at the same time (:func:`spear_metrics.core.records.hold_shard`): shard ``K``
logs to ``.work/<instance>/rank-K.jsonl`` and writes no ``<instance>.json``; a run without
``shard`` afterwards runs any row no shard finished and writes the prediction files from every
shard's log.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from pathlib import Path
from typing import Any, Callable, Optional

from spear_datasets.ownership import WORK_DIR, OutFolderError, OwnedFolder, check_out_folder
from spear_metrics.agents.processes import sessions_for
from spear_metrics.agents.rows import (
    ProcessEnds, ProcessLost, RowJournal, SyncCaller, failure_reason, join_adapter_threads, run_concurrently, run_row,
    run_row_async, session_time_limit,
)
from spear_metrics.core.records import (
    replaces, AppendLog, bind_run, bind_shard, hold_run_folder, in_shard, read_jsonl, read_work_logs, write_json_atomic,
    write_jsonl_atomic,
)
from spear_metrics.dynamic_superb.tasks import (
    InstanceError,
    TaskInstance,
    TaskRow,
    decode_cell,
    load_manifest,
    open_instance,
    select_specs,
)

#: The owner name of a prediction folder (``PRED/.work/owner.json``).
COMMAND = "dsuperb infer"
#: The work folder inside ``PRED/`` (one ``<instance>/`` per task instance).
WORK = WORK_DIR
#: Where an earlier version kept the work state (read by ``score``, never written).
LEGACY_WORK = ".spearbench-dsuperb"


class DSuperbInferError(RuntimeError):
    """The run cannot proceed as a whole (one line; the CLI exits 2)."""


def read_log(work: Path) -> dict[int, dict[str, Any]]:
    """Records of the work logs ``work/rank-<r>.jsonl`` by row: the latest wins, but an answer is
    never replaced by a later failure; torn or malformed lines are skipped (their rows are redone)."""
    out: dict[int, dict[str, Any]] = {}
    for obj in read_work_logs(work):
        row = obj.get("row")
        if not isinstance(row, int) or isinstance(row, bool) or row < 0 or obj.get("status") not in ("ok", "failed"):
            continue
        if obj["status"] == "ok" and not isinstance(obj.get("response"), str):
            continue
        prev = out.get(row)
        if replaces(prev, obj):
            out[row] = obj
    return out


def _request(inst: TaskInstance, row: TaskRow) -> Any:
    """The :class:`AudioRequest` of a row: its clip(s) decoded with every channel, its instruction.

    Raises:
        spear_datasets.audio.AudioError: audio that does not decode.
    """
    from spear_metrics.agents.duplex import AudioRequest

    wav, sr = decode_cell(inst.audio_cell(row.index, "audio"), f"{inst.spec.instance} row {row.index} audio")
    kw: dict[str, Any] = {}
    if "audio2" in row.audio:
        wav2, sr2 = decode_cell(inst.audio_cell(row.index, "audio2"), f"{inst.spec.instance} row {row.index} audio2")
        kw = dict(audio2=wav2, audio2_sample_rate=int(sr2))
    return AudioRequest(audio=wav, sample_rate=int(sr), instructions=row.instruction, modalities=("text",),
                        row_id=f"{inst.spec.instance}/{row.file}", **kw)


def _prediction_file(out: Path, instance: str) -> Path:
    return out / f"{instance}.json"


def _write_outputs(out: Path, inst: TaskInstance, recs: dict[int, dict[str, Any]], rows: list[TaskRow],
                   info: dict[str, Any]) -> dict[str, Any]:
    """``<instance>.json`` (answered rows, dataset order), ``failures.jsonl``, ``run_info.json``."""
    work = out / WORK / inst.spec.instance
    preds: dict[str, Any] = {}
    fails = []
    for r in rows:
        rec = recs.get(r.index)
        if rec is not None and rec["status"] == "ok":
            preds[r.file] = r.entry(rec["response"])
        else:
            fails.append({"row": r.index, "file": r.file,
                          "error": (rec or {}).get("error") or "no answer recorded (rerun to resume)"})
    write_json_atomic(_prediction_file(out, inst.spec.instance), preds)
    write_jsonl_atomic(work / "failures.jsonl", fails)
    stats = {"instance": inst.spec.instance, "source": inst.source, "hub_path": inst.spec.hub_path,
             "revision": inst.revision, "metric": inst.spec.metric, "n_rows": len(rows), "n_answered": len(preds),
             "n_failed": len(fails)}
    stats.update(info)
    write_json_atomic(work / "run_info.json", stats)
    return {**stats, "failures": fails}


def run_dsuperb_inference(agent_name: str, instances: list[str], out_dir: str | os.PathLike, *,
                          agent_options: Optional[dict[str, Any]] = None, agent: Any = None,
                          manifest: Optional[str | os.PathLike] = None, data_root: Optional[str | os.PathLike] = None,
                          concurrency: int = 1, row_timeout_s: float = 300.0, chunk_ms: float = 40.0,
                          limit: Optional[int] = None, retry_failed: bool = False, overwrite: bool = False,
                          progress: bool = True, prices: Any = None,
                          on_row: Optional[Callable[[dict[str, Any]], None]] = None, processes: int | str = 1,
                          provider_limits: Optional[dict[str, int]] = None,
                          shard: Optional[tuple[int, int]] = None) -> dict[str, Any]:
    """Run an adapter over task instances (see the module docstring).

    Args:
        agent_name: adapter name (registry) or ``file.py:Class``; recorded in each instance's fingerprint.
        instances: instance names of the manifest.
        out_dir: ``PRED/``.
        agent_options: the adapter's ``-a`` options; ``agent``: an adapter already built (tests).
        manifest: a CSV adding or overriding manifest rows.
        data_root: a folder of local instances (``<instance>/`` or ``<instance>.parquet``); the
            Hub is used for the others.
        concurrency: network adapters: rows answered at once (lowered to the adapter's
            ``max_concurrency``, with a note on stderr).
        row_timeout_s: one row's limit (s); a paced network adapter gets its input's duration on top.
        chunk_ms: chunk length (ms) of paced network adapters.
        limit: at most this many rows per instance (the first ones), for quick checks.
        retry_failed: run the failed rows again.
        overwrite: replace another run's answers to an instance (only what that run recorded and is unchanged).
        prices: a :class:`spear_metrics.core.usage.PriceTable` (``--price-table``) pricing ``usage``.
        processes, provider_limits: ``--processes`` and ``--provider-limit`` of a network adapter
            (:func:`spear_metrics.agents.processes.sessions_for`): the sessions in worker processes,
            this process the one writer of ``PRED/``; a row holds its provider slot from its start
            record to its answer. A local text adapter runs here (one line on stderr says so).
        shard: ``(k, n)`` (``--shard k/n``): only the rows of shard ``k`` (module docstring); the
            counts are then the shard's (``n_rows``: its rows) and ``rows_left`` is added: the rows
            of the instances no shard has finished.

    Returns:
        ``{"instances": {instance: counts..., "usage"}, "n_rows", "n_answered", "n_failed",
        "failed_instances": {instance: reason}, "elapsed_s", "usage"}``; ``usage``: the tokens the
        service billed for the rows logged (per instance and over all instances), per model
        (:func:`spear_metrics.agents.harness.usage_of_records`, priced with ``prices``; ``None``
        when no row reported usage), also in the ``run_info.json`` files.

    Raises:
        DSuperbInferError: an adapter that gives no text, a bad ``concurrency``, another run's
            answers for an instance (without ``overwrite``), ``shard`` with ``overwrite``, a
            session process that ended (rerun to resume).
        ProcessesError (a ``ValueError``): ``provider_limits`` naming only other adapters.
        ManifestError: an instance the manifest lacks.
        spear_datasets.ownership.OutFolderError: ``out_dir`` holds files this tool did not write
            (upstream's or another system's prediction files), another command's output, a
            ``<instance>.json`` this command did not write or that changed since, or is being
            written by another live process.
        spear_datasets.files.OutputError: ``out_dir`` cannot be written.
    """
    from spear_metrics.agents.duplex import is_network_agent
    from spear_metrics.agents.harness import usage_of_records
    from spear_metrics.agents.registry import load_agent
    from spear_metrics.agents.processes import check_provider_limits, unused_options_note
    from spear_metrics.agents.text import is_text_capable

    agent_options = dict(agent_options or {})
    if concurrency < 1:
        raise DSuperbInferError(f"--concurrency must be >= 1, got {concurrency}")
    if shard is not None and overwrite:
        raise DSuperbInferError("--shard does not take --overwrite (other shards may be writing the folder): give a "
                                "new --out folder, or --overwrite without --shard first")
    check_provider_limits(agent_name, provider_limits)  # a misspelt name would cap nothing
    specs = select_specs(load_manifest(manifest), list(instances))
    out = Path(out_dir)
    check_out_folder(out)  # the rule first (cheap): a folder that cannot be used costs no adapter
    built_by_name = agent is None
    if agent is None:
        agent = load_agent(agent_name, **agent_options)
    if not is_text_capable(agent):
        raise DSuperbInferError(f"agent {agent_name!r} gives no text answers: Dynamic-SUPERB needs a network adapter "
                                "(e.g. openai-audio) or a local adapter with respond_text(request)")
    network = is_network_agent(agent)
    unused_options_note(agent, agent_name, processes, provider_limits)
    sessions = functools.partial(sessions_for, agent, name=agent_name, options=agent_options,
                                 built_by_name=built_by_name, processes=processes, provider_limits=provider_limits)
    # PRED/: new, empty or this command's; each instance is one run bound to its settings (.work/<instance>/);
    # a shard holds its own lock beside the other shards' (hold_shard)
    held = hold_run_folder(out, shard, command=COMMAND)
    with held as folder:
        foreign = [_prediction_file(out, s.instance) for s in specs if _foreign(folder, _prediction_file(out, s.instance))]
        if foreign:  # never replaced or removed, --overwrite included: refused before anything runs
            raise OutFolderError(f"{foreign[0]} exists and was not written by this tool in --out {out}: move it away "
                                 "or give another folder")
        t_run = time.perf_counter()
        result: dict[str, Any] = {"instances": {}, "failed_instances": {}, "n_rows": 0, "n_answered": 0, "n_failed": 0}
        opened: list[TaskInstance] = []
        records: list[dict[str, Any]] = []
        for spec in specs:
            try:
                opened.append(open_instance(spec, data_root))
            except InstanceError as e:
                result["failed_instances"][spec.instance] = failure_reason(e)
        for inst in opened:  # every instance bound before any row runs: a conflict stops the run with nothing asked
            fp = {"agent": agent_name, "agent_options": {k: agent_options[k] for k in sorted(agent_options)},
                  "instance": inst.spec.instance, "source": inst.source, "revision": inst.revision,
                  "chunk_ms": float(chunk_ms)}
            conflict = DSuperbInferError(f"{out} holds {inst.spec.instance} answers of another infer run (other "
                                         "adapter, options or data); use another --out folder or --overwrite")
            if shard is not None:
                bind_shard(folder.work / inst.spec.instance, fp, conflict=conflict)
            else:
                bind_run(folder, folder.work / inst.spec.instance, fp, overwrite=overwrite, conflict=conflict,
                         outputs=[_prediction_file(out, inst.spec.instance).name, f"{WORK}/{inst.spec.instance}"])
        for k, inst in enumerate(opened):
            stats = _infer_instance(agent, inst, out, network=network, agent_name=agent_name, concurrency=concurrency,
                                    row_timeout_s=row_timeout_s, chunk_ms=chunk_ms, limit=limit, prices=prices,
                                    retry_failed=retry_failed, progress=progress, on_row=on_row,
                                    note=f"spearbench dsuperb infer: note: {agent_name}" if k == 0 else None,
                                    sessions=sessions, shard=shard)
            result["instances"][inst.spec.instance] = stats
            result["n_rows"] += stats["n_rows"]
            result["n_answered"] += stats["n_answered"]
            result["n_failed"] += stats["n_failed"]
            records += stats.pop("records")
        result["elapsed_s"] = time.perf_counter() - t_run
        result["usage"] = usage_of_records(records, prices)
        if shard is not None:  # the run without --shard writes the run's files from every shard's log
            result["shard"] = f"{shard[0]}/{shard[1]}"
            result["rows_left"] = sum(st["rows_left"] for st in result["instances"].values())
            return result
        write_json_atomic(out / WORK / "run_info.json", {
            "agent": agent_name, "instances": {k: {kk: vv for kk, vv in v.items() if kk != "failures"}
                                               for k, v in result["instances"].items()},
            "failed_instances": result["failed_instances"], "n_rows": result["n_rows"],
            "n_answered": result["n_answered"], "n_failed": result["n_failed"], "elapsed_s": result["elapsed_s"],
            "usage": result["usage"]})
    return result


def _foreign(folder: OwnedFolder, path: Path) -> bool:
    """A file at ``path`` that this command did not write there, or that changed since
    (:meth:`~spear_datasets.ownership.OwnedFolder.is_recorded`)."""
    return (path.exists() or path.is_symlink()) and not folder.is_recorded(path)


def _infer_instance(agent: Any, inst: TaskInstance, out: Path, *, network: bool, agent_name: str, concurrency: int,
                    row_timeout_s: float, chunk_ms: float, limit: Optional[int], retry_failed: bool, progress: bool,
                    on_row: Optional[Callable[[dict[str, Any]], None]], note: Optional[str],
                    prices: Any = None, sessions: Optional[Callable[..., Any]] = None,
                    shard: Optional[tuple[int, int]] = None) -> dict[str, Any]:
    """One bound instance: its rows without a record (and the failed ones with ``retry_failed``)
    answered and logged, then its outputs written (:func:`_write_outputs`, with the instance's
    ``usage`` priced with ``prices``); ``note``: the prefix of the line saying ``concurrency`` was
    lowered to the adapter's ``max_concurrency`` (``None``: no line). The returned counts carry
    the instance's row ``records`` (of its rows) for the run's total usage. ``sessions``: where a
    network adapter's sessions run (:func:`spear_metrics.agents.processes.sessions_for`);
    ``shard``: only its rows, logged to ``rank-K.jsonl``, no outputs written (counts of its rows,
    and ``rows_left``: the instance's rows without a record in any log)."""
    from spear_metrics.agents.harness import usage_of_records

    rows = inst.rows[: limit] if limit is not None else inst.rows
    work = out / WORK / inst.spec.instance
    recs = read_log(work)
    mine = [r for r in rows if in_shard(r.index, shard)]
    todo = [r for r in mine if r.index not in recs or (retry_failed and recs[r.index]["status"] == "failed")]
    bar = None
    if progress and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc=f"dsuperb infer {inst.spec.instance}", unit="row")
    t0 = time.perf_counter()
    ends = ProcessEnds(read_work_logs(work))
    session_info: dict[str, Any] = {}
    with AppendLog(work / f"rank-{0 if shard is None else shard[0]}.jsonl") as log:
        journal = RowJournal(log, ends)

        def record(rec: dict[str, Any]) -> None:
            log.write([rec])
            journal.finish(rec["row"])
            recs[rec["row"]] = rec
            if on_row is not None:
                on_row(rec)
            if bar is not None:
                bar.update(1)

        try:
            pending = []
            for r in todo:  # rows the checks failed never reach the adapter, nor rows that ended the process twice
                if r.error:
                    record({"row": r.index, "file": r.file, "status": "failed", "error": r.error})
                elif ends.blocked(r.index):
                    record(ends.ended_record(r.index, file=r.file))
                else:
                    pending.append(r)
            with journal.stopping():
                if network:
                    try:
                        concurrency = asyncio.run(_run_network(agent, inst, pending, record, journal.start,
                                                               concurrency=concurrency, row_timeout_s=row_timeout_s,
                                                               chunk_ms=chunk_ms, note=note, sessions=sessions,
                                                               info=session_info))
                    except ProcessLost as e:  # its rows resume (one process end each), the others: stopped
                        raise DSuperbInferError(str(e)) from None
                else:
                    _run_local(agent, inst, pending, record, journal.start, row_timeout_s=row_timeout_s)
        finally:
            if bar is not None:
                bar.close()
    if shard is not None:  # its rows' counts; the run without --shard writes the outputs
        recs = read_log(work)  # every shard's records so far
        done = [recs[r.index] for r in mine if r.index in recs]
        failed = [{"row": r.index, "file": r.file, "error": recs[r.index].get("error")} for r in mine
                  if r.index in recs and recs[r.index]["status"] == "failed"]
        return {"instance": inst.spec.instance, "n_rows": len(mine), "n_answered": len(done) - len(failed),
                "n_failed": len(failed), "failures": failed, "n_new": len(todo), **session_info,
                "rows_left": sum(1 for r in rows if r.index not in recs), "usage": usage_of_records(done, prices),
                "records": done}
    done = [recs[r.index] for r in rows if r.index in recs]
    stats = _write_outputs(out, inst, recs, rows, {
        "agent": agent_name, "elapsed_s": time.perf_counter() - t0, "n_new": len(todo),
        "concurrency": concurrency if network else 1, "row_timeout_s": row_timeout_s, **session_info,
        "usage": usage_of_records(done, prices)})
    return {**stats, "records": done}


def _run_local(agent: Any, inst: TaskInstance, rows: list[TaskRow], record: Callable[[dict[str, Any]], None],
               started: Callable[[int], None], *, row_timeout_s: float) -> None:
    """Local text adapter: one row at a time on a worker thread with the row's time limit
    (:class:`spear_metrics.agents.rows.SyncCaller`)."""
    from spear_metrics.agents.text import local_text_answer

    caller = SyncCaller()
    try:
        for r in rows:
            def body(rec: dict[str, Any], r: TaskRow = r) -> None:
                request = _request(inst, r)
                ans = caller.call(lambda: local_text_answer(agent, request), row_timeout_s)
                rec.update(status="ok", response=ans.text, finish_reason=ans.finish_reason)

            started(r.index)
            record(run_row({"row": r.index, "file": r.file}, body))
    finally:
        caller.close()
        join_adapter_threads()


async def _run_network(agent: Any, inst: TaskInstance, rows: list[TaskRow], record: Callable[[dict[str, Any]], None],
                       started: Callable[[int], None], *, concurrency: int, row_timeout_s: float, chunk_ms: float,
                       note: Optional[str], sessions: Optional[Callable[..., Any]] = None,
                       info: Optional[dict[str, Any]] = None) -> int:
    """Network adapter: ``concurrency`` sessions at once
    (:func:`spear_metrics.agents.rows.run_concurrently`: lowered to the adapter's
    ``max_concurrency`` with a ``note`` line; returns the sessions run at once); decoding on worker
    threads, every log write on the run's one writer thread (nothing slow on the loop that paces
    the sessions). ``sessions(concurrency=, n_rows=)`` makes where the sessions run
    (:func:`spear_metrics.agents.processes.sessions_for`; default this loop); a row holds its
    provider slot from its start record to its answer; ``info`` receives the session processes
    and their loop lag (``session_processes``, ``loop_lag_ms``)."""
    from spear_metrics.agents.duplex import clamp_concurrency, session_config
    from spear_metrics.agents.processes import LocalSessions
    from spear_metrics.agents.text import network_text_answer

    loop = asyncio.get_running_loop()
    pool = sessions(concurrency=clamp_concurrency(agent, int(concurrency))[0], n_rows=len(rows)) \
        if sessions is not None and rows else LocalSessions(agent)

    async def one(r: TaskRow, writer: Any) -> None:
        async def body(rec: dict[str, Any]) -> None:
            request = await asyncio.to_thread(_request, inst, r)
            limit = session_time_limit(session_config(agent, chunk_ms=chunk_ms), request.duration_s, row_timeout_s)
            ans = await network_text_answer(agent, request, chunk_ms=chunk_ms, limit_s=limit, sessions=pool, tag=r.index)
            rec.update(status="ok", response=ans.text, finish_reason=ans.finish_reason)
            if ans.usage:  # what the service billed for this row ({model: usage fields})
                rec["usage"] = ans.usage

        async with pool.slots:  # --provider-limit: from the row's start record to its answer
            await loop.run_in_executor(writer, started, r.index)
            rec = await run_row_async({"row": r.index, "file": r.file}, body)
        await loop.run_in_executor(writer, record, rec)

    async with pool:
        n = await run_concurrently(agent, rows, concurrency, one, note=note)
    if info is not None and rows:
        info.update(pool.stats())  # session_processes, loop_lag_ms (docs/multiprocess.md)
    return n


def _instance_work(pred_dir: str | os.PathLike, instance: str) -> Path:
    """The work folder of ``instance`` in ``PRED/`` (``.work/<instance>/``, or where an earlier
    version kept it, ``.spearbench-dsuperb/<instance>/``, when only that one exists)."""
    work = Path(pred_dir) / WORK / instance
    legacy = Path(pred_dir) / LEGACY_WORK / instance
    return legacy if not work.is_dir() and legacy.is_dir() else work


def read_failures(pred_dir: str | os.PathLike, instance: str) -> Optional[list[dict[str, Any]]]:
    """The rows ``dsuperb infer`` could not answer for ``instance`` (``failures.jsonl`` in the work
    folder of ``PRED/``), ``None`` when the predictions were not written by it (e.g. upstream's own files)."""
    p = _instance_work(pred_dir, instance) / "failures.jsonl"
    if not p.is_file():
        return None
    return [o for o in read_jsonl(p) if isinstance(o.get("file"), str)]


def read_instance_info(pred_dir: str | os.PathLike, instance: str) -> dict[str, Any]:
    """``run_info.json`` of ``instance`` in the work folder of ``PRED/`` (``{}`` without one, or
    when unreadable, too large or not an object: :func:`spear_metrics.core.records.read_run_info`)."""
    from spear_metrics.core.records import read_run_info

    return read_run_info(_instance_work(pred_dir, instance))
