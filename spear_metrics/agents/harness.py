"""The inference harness of ``spearbench infer``: a SPEAR split -> an agent -> a scoreable folder.

Output (``OUT``)::

    OUT/metadata.csv      SPEAR header, one row per input, in input order; answers relative to OUT;
                          inputs: absolute paths for a CSV source (clips are not copied; with
                          ``copy_inputs`` they are, as ``inputs/<clip><suffix>``), relative
                          ``inputs/<clip>.wav`` for a dataset source; every row of a source gets
                          the same path form, failed rows included (a row whose path cannot be
                          resolved at all, e.g. one escaping its data root, keeps its cell as
                          written, which escapes any root and so fails in ``score`` as well);
                          answer_start_time = onset - question_end_time (s), EMPTY for onset None;
                          a failed row keeps its input with an EMPTY answer_audio_path (the scorer
                          then fails it too instead of silently dropping it, and reports infer's
                          reason from failures.jsonl beside the metadata: "infer failed: ...").
    OUT/audio/<clip>.wav  the answers, 16 kHz, 16-bit, channels as the agent returned them
    OUT/inputs/<clip>.wav the input clips read from a dataset (their embedded bytes, unchanged)
    OUT/failures.jsonl    {"row", "audio_path", "error"} per failed row
    OUT/run_info.json     counts, agent, mode, timings, concurrency, onset rule, response-time statistics
    OUT/response_times.csv per row: answer_start_time, measured response_time_s (s, wall clock from
                          the end of the input or the request to the first answer audio), onset on
                          the wall and stream clocks and the worst send delay behind the
                          real-time schedule (network adapters), finish_reason; ``score``
                          does not read it
    OUT/.work/            resume state: run.json (fingerprint), rank-<r>.jsonl (one line per row;
                          ``r``: the accelerate rank, or the shard K of ``--shard K/N``)

Contract:

- a row is its position in the input (CSV line / dataset index); each gets exactly one record;
- per row: the answer WAV is written atomically, then its record is appended (flushed, fsynced)
  to the rank's log, so a killed run resumes without duplicates or holes; rows already done
  (and, unless ``retry_failed``, rows already failed) are skipped on a rerun;
- before its adapter call each row logs a ``started`` record (flushed); a row during which the
  process ended (``os._exit`` in the adapter, a crash, kill -9, SIGTERM) runs again on the next
  invocation, but once the process has ended during it twice (:data:`MAX_PROCESS_ENDS`) a rerun
  fails it ("the process ended during this row twice ...") instead of ending the same way
  forever (``retry_failed`` runs it again); a Ctrl-C or an unwritable folder logs the rows in
  flight as ``stopped``, which does not count;
- under ``accelerate launch`` pending rows are dealt ``rows[rank::world]``; results are keyed
  by row id; the main process merges every rank's log;
- an adapter that raises (any ``BaseException`` but ``KeyboardInterrupt``: ``SystemExit`` too),
  returns an invalid answer (:func:`validate_answer`; one ``score`` would refuse:
  :func:`check_answer_limits`) or runs past its time limit
  (``row_timeout_s``, :func:`row_time_limit`) fails its row with the reason (secrets masked); the
  run goes on. ``KeyboardInterrupt`` and an unwritable output folder stop the run (resume later);
- network adapters (:mod:`spear_metrics.agents.duplex`) run ``concurrency`` sessions at once on
  one event loop; records are written by that one thread as rows end. With ``processes`` > 1 the
  sessions run in worker processes (:mod:`spear_metrics.agents.processes`) and this process stays
  the one writer of ``OUT`` (same records, same resume); ``provider_limits`` caps the sessions of
  an adapter name at once over every process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional, Sequence, TypeVar

import numpy as np

from spear_datasets.audio import TARGET_SR, input_clip_info, load_audio, resample, write_wav
from spear_datasets.files import atomic_path
from spear_datasets.ownership import check_out_folder
from spear_datasets.schema import SpearRow, check_times_against_clip, write_metadata
from spear_metrics.agents.base import (
    onset_kind,
    AgentAnswer,
    AgentOutputError,
    GenerationConfig,
    check_answer_limits,
    validate_answer,
)
from spear_metrics.agents.duplex import is_network_agent
from spear_metrics.agents.processes import check_provider_limits, sessions_for, unused_options_note
from spear_metrics.agents.rows import (  # THE row executor; RowTimeout, SyncCaller, run_concurrently re-exported
    ProcessEnds,
    ProcessLost,
    RowJournal,
    RowTimeout,
    SyncCaller,
    run_concurrently,
    run_row,
    run_row_async,
    session_time_limit,
)
from spear_metrics.agents.sources import WORK_DIR, InferError, Source, open_source
from spear_metrics.core.batching import distributed_state
from spear_metrics.core.records import (
    replaces, AppendLog,
    claim_out,
    claim_shard,
    in_shard,
    read_jsonl,
    read_rank_logs,
    write_json_atomic,
    write_jsonl_atomic,
)

AUDIO_DIR = "audio"
#: tolerance (s) of the streaming causality check (float rounding of chunk times)
_EPS = 1e-9
T = TypeVar("T")
#: default time limit (s) of one row's adapter call (``--row-timeout-s``)
DEFAULT_ROW_TIMEOUT_S = 300.0


# --------------------------------------------------------------------------- one row


def run_agent(agent: Any, audio: np.ndarray, row: SpearRow, config: GenerationConfig) -> tuple[AgentAnswer, np.ndarray, int, Optional[float]]:
    """Drive ``agent`` on one input clip ``audio`` (``(2, n)``, 16 kHz).

    Offline: one ``respond`` call; onset as returned (``None`` allowed).
    Streaming: chunks of ``config.chunk_ms`` ms are fed to ``agent.stream(row, config)`` (an
    adapter without ``stream`` is buffered: it answers after the whole input); then
    ``config.max_wait_s`` s of zeros; then ``finish``. The onset is the adapter's own, or the end
    of the chunk at which it answered (the end of the stream after ``finish``).

    Returns ``(answer, audio (C, N) float32, sample_rate Hz, onset s or None)``.

    Raises:
        AgentOutputError: invalid answer, or (streaming) an onset before the chunk at which the
            adapter decided to speak (it cannot start speaking in the past).
        Anything the adapter raises.
    """
    if config.mode == "offline" or not callable(getattr(agent, "stream", None)):
        ans = agent.respond(audio, row, config)
        wav, sr = validate_answer(ans)
        if config.mode == "offline":
            return ans, wav, sr, None if ans.onset is None else float(ans.onset)
        decided = end = audio.shape[1] / TARGET_SR
    else:
        from spear_metrics.agents.duplex import resolve_chunk_ms

        session = agent.stream(row, config)
        hop = max(1, round(resolve_chunk_ms(agent, config.chunk_ms) * TARGET_SR / 1000.0))
        n = audio.shape[1]
        total = n + round(config.max_wait_s * TARGET_SR)
        ans = None
        for s in range(0, total, hop):
            e = min(s + hop, total)
            chunk = np.zeros((audio.shape[0], e - s), np.float32)
            if s < n:
                chunk[:, : min(e, n) - s] = audio[:, s : min(e, n)]
            ans = session.feed(chunk, s / TARGET_SR)
            if ans is not None:
                decided, end = s / TARGET_SR, e / TARGET_SR
                break
        if ans is None:
            decided = end = total / TARGET_SR
            ans = session.finish(end)
        wav, sr = validate_answer(ans)
    if ans.onset is None:
        return ans, wav, sr, end
    onset = float(ans.onset)
    if onset < decided - _EPS:
        raise AgentOutputError(f"onset {onset:.3f} s is before the audio the agent had heard when it answered ({decided:.3f} s)")
    return ans, wav, sr, onset


@dataclass
class _Prepared:
    """A row ready to run: its record so far, input clip ``(2, n)`` 16 kHz and typed row."""

    rec: dict[str, Any]
    audio: np.ndarray
    row: SpearRow


def _prepare(agent: Any, source: Source, i: int, out: Path) -> _Prepared:
    """Read row ``i``'s input clip (header checks first). Raises what the checks raise."""
    return _read_clip(agent, source, i, out, *_stage_inputs(agent, source, i, out))


def _stage_inputs(agent: Any, source: Source, i: int, out: Path) -> tuple[Path, Optional[Path]]:
    """Row ``i``'s input clip and (for adapters that use it) reference answer as files; a dataset
    source writes them under ``OUT`` (the network path runs this on its writer thread)."""
    in_path = source.input_file(i, out)
    ref = source.reference_file(i, out) if getattr(agent, "uses_reference_answer", False) else None
    return in_path, ref


def _read_clip(agent: Any, source: Source, i: int, out: Path, in_path: Path, ref: Optional[Path]) -> _Prepared:
    """Header checks, then decode the input clip (reads only: safe off the event loop)."""
    entry = source.entries[i]
    rec: dict[str, Any] = {"row": i, "audio_path": os.path.relpath(in_path, out) if source.copies_inputs else str(in_path)}
    check_times_against_clip(entry.row, input_clip_info(in_path).duration)  # header checks, before decoding
    audio = load_audio(in_path, sr=TARGET_SR, channels="keep")
    row = dataclasses.replace(entry.row, audio_path=str(in_path), answer_audio_path=None if ref is None else str(ref))
    return _Prepared(rec, audio, row)


def _finish(source: Source, i: int, out: Path, rec: dict[str, Any], ans: AgentAnswer, wav: np.ndarray, sr: int,
            onset: Optional[float]) -> dict[str, Any]:
    """Check the answer against ``score``'s limits (:func:`check_answer_limits`), write the
    answer WAV and complete the record."""
    entry = source.entries[i]
    check_answer_limits(wav, sr, onset, entry.row.question_end_time)
    wav = resample(wav, sr, TARGET_SR)
    rel = f"{AUDIO_DIR}/{entry.name}"
    write_wav(out / rel, wav, TARGET_SR)
    rt = getattr(ans, "response_time_s", None)
    rec.update({
        "status": "ok",
        "answer_audio_path": rel,
        "onset": onset,
        "answer_start_time": None if onset is None else onset - entry.row.question_end_time,
        "answer_duration": wav.shape[1] / TARGET_SR,
        "text": ans.text,
        "finish_reason": ans.finish_reason,
        "response_time_s": None if rt is None or not math.isfinite(float(rt)) else float(rt),
    })
    if getattr(ans, "usage", None):  # what the service billed for this answer ({model: usage fields})
        rec["usage"] = ans.usage
    return rec


def _input_path(source: Source, i: int, out: Path) -> str:
    """Row ``i``'s ``audio_path`` as its record states it (the staged copy, or the source's path)."""
    try:
        p = source.input_file(i, out)
        return os.path.relpath(p, out) if source.copies_inputs else str(p)
    except Exception:
        return source.failed_audio_path(i, out)


def _infer_row(agent: Any, source: Source, i: int, out: Path, config: GenerationConfig, *,
               caller: Optional[SyncCaller] = None, row_timeout_s: Optional[float] = None) -> dict[str, Any]:
    """Run one row with a synchronous adapter; returns its log record (``status`` ``ok`` or
    ``failed`` with ``error``). With ``caller``, the adapter runs on its worker thread under
    ``row_timeout_s``.

    Raises:
        KeyboardInterrupt, OutputError: the run stops (a rerun resumes).
    """
    def body(rec: dict[str, Any]) -> None:
        prep = _prepare(agent, source, i, out)
        rec.update(prep.rec)
        call = lambda: run_agent(agent, prep.audio, prep.row, config)  # noqa: E731
        if caller is not None and row_timeout_s is not None:
            ans, wav, sr, onset = caller.call(call, row_timeout_s)
        else:
            ans, wav, sr, onset = call()
        _finish(source, i, out, rec, ans, wav, sr, onset)

    return run_row({"row": i, "audio_path": source.entries[i].audio_cell}, body)


def row_time_limit(agent: Any, input_s: float, config: GenerationConfig, row_timeout_s: float) -> float:
    """The time limit (s) of one row: ``row_timeout_s``; for a paced network adapter, plus the
    input's duration and its tail silence (the real-time stream is not the adapter's slowness)."""
    from spear_metrics.agents.duplex import session_config

    if is_network_agent(agent):
        return session_time_limit(session_config(agent, chunk_ms=config.chunk_ms), input_s, row_timeout_s)
    return row_timeout_s


async def _infer_row_network(agent: Any, source: Source, i: int, out: Path, config: GenerationConfig,
                             row_timeout_s: float, writer: Any, sessions: Any = None) -> dict[str, Any]:
    """Run one row with a network adapter (:mod:`spear_metrics.agents.duplex`): one session,
    the row's time limit (:func:`row_time_limit`), SPEAR's answer from the session.

    Records, beside the usual keys: ``response_time_s`` (wall clock, end of input or request sent
    -> first answer audio), ``onset_wall_s`` and ``onset_stream_s`` (the answer's first audio, by
    the adapter's :meth:`~spear_metrics.agents.duplex.NetworkAgentBase.answer` rule, on the wall
    clock since the first chunk and on the stream clock), ``send_lag_max_s`` (the latest a
    chunk went out behind its schedule), the server's lag and reply frames
    (:func:`server_lag_record`), ``silence_pad_ms`` (:func:`silence_pad_ms`), ``finish_reason``.

    Nothing slow runs on the event loop (it paces every session): files are written by ``writer``
    (one thread for every write of the run), the input is decoded and the answer resampled on
    worker threads. ``sessions`` runs the session
    (:class:`~spear_metrics.agents.processes.LocalSessions` by default: on this loop; a
    :class:`~spear_metrics.agents.processes.SessionPool`: in a worker process).

    Raises:
        KeyboardInterrupt, OutputError, and the cancellation of this task.
    """
    from spear_metrics.agents.duplex import AudioRequest, SessionAnswer, session_answer, session_config
    from spear_metrics.agents.processes import run_one_session

    loop = asyncio.get_running_loop()

    async def body(rec: dict[str, Any]) -> None:
        staged = await loop.run_in_executor(writer, _stage_inputs, agent, source, i, out)
        prep = await asyncio.to_thread(_read_clip, agent, source, i, out, *staged)
        rec.update(prep.rec)
        request = AudioRequest(audio=prep.audio, sample_rate=TARGET_SR, row_id=source.entries[i].name)
        scfg = session_config(agent, chunk_ms=config.chunk_ms)
        limit = row_time_limit(agent, request.duration_s, config, row_timeout_s)
        result = await run_one_session(agent, request, scfg, limit, sessions=sessions, tag=i)
        rec["send_lag_max_s"] = result.send_lag_max_s
        rec["send_lag_max_at_s"] = result.send_lag_max_at_s
        rec.update(server_lag_record(agent, result))
        rec["silence_pad_ms"] = await asyncio.to_thread(silence_pad_ms, result)
        ans = session_answer(agent, result)  # the adapter's rule (default: all output back to back)
        first = (ans.first_audio_s, ans.first_audio_input_s) if isinstance(ans, SessionAnswer) else (
            result.first_audio_s, result.first_audio_input_s)
        rec["onset_wall_s"], rec["onset_stream_s"] = first
        wav, sr = validate_answer(ans)
        onset = None if ans.onset is None else float(ans.onset)
        await loop.run_in_executor(writer, _finish, source, i, out, rec, ans, wav, sr, onset)

    return await run_row_async({"row": i, "audio_path": source.entries[i].audio_cell}, body)


def silence_pad_ms(result: Any) -> Optional[float]:
    """The silence a system streams before it speaks (ms): the first audible sample of a session's
    output (the first speech segment of Silero VAD, :func:`spear_metrics.core.vad.speech_segments`,
    millisecond times, on the output back to back at 16 kHz) minus its first audio byte. ``None``
    without output audio, without speech in it, or when the VAD cannot run (a note-free key: the
    row is not failed for it)."""
    if not result.chunks:
        return None
    try:
        from spear_metrics.core.vad import speech_segments

        audio, sr = result.concatenated()
        x = resample(audio.mean(axis=0, keepdims=True), sr, TARGET_SR)[0]
        segs = speech_segments(np.clip(x, -1.0, 1.0), time_resolution=3)
    except Exception:  # noqa: BLE001 -- a measurement beside the row, never its failure
        return None
    return 1000.0 * segs[0][0] if segs else None


def server_lag_record(agent: Any, result: Any) -> dict[str, Any]:
    """The per-row keys of a frame-synchronous session's timing (empty for other adapters):
    ``server_lag_max_s`` (s: the latest an output frame arrived after the input frame that
    produced it, :attr:`~spear_metrics.agents.duplex.SessionResult.server_lag_max_s`),
    ``server_lag_flagged`` (it passed the adapter's ``server_lag_bound_s``), ``frames_received``
    and ``frames_expected`` (whole output frames)."""
    if result.server_lag_max_s is None and result.frames_expected is None:
        return {}
    bound = getattr(agent, "server_lag_bound_s", None)
    lag = result.server_lag_max_s
    return {"server_lag_max_s": lag, "server_lag_flagged": bool(bound is not None and lag is not None and lag > bound),
            "frames_received": result.frames_received, "frames_expected": result.frames_expected}



# --------------------------------------------------------------------------- the run


def _read_logs(work: Path) -> dict[int, dict[str, Any]]:
    done: dict[int, dict[str, Any]] = {}
    for obj in read_rank_logs(work):  # valid records only (an int row >= 0, a known status)
        if obj.get("status") != "ok" or isinstance(obj.get("answer_audio_path"), str):
            prev = done.get(obj["row"])
            # the latest record of a row wins, but an ok answer is never replaced by a failure
            if replaces(prev, obj):
                done[obj["row"]] = obj
    return done


def run_inference(
    agent_name: str,
    data: str,
    out_dir: str | os.PathLike,
    *,
    agent_options: Optional[dict[str, Any]] = None,
    split: str = "test",
    subset: str = "improvised",
    config: Optional[GenerationConfig] = None,
    retry_failed: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    agent: Any = None,
    on_row: Optional[Callable[[dict[str, Any]], None]] = None,
    concurrency: int = 1,
    row_timeout_s: float = DEFAULT_ROW_TIMEOUT_S,
    prices: Any = None,
    processes: int | str = 1,
    provider_limits: Optional[dict[str, int]] = None,
    shard: Optional[tuple[int, int]] = None,
    copy_inputs: bool = False,
) -> Optional[dict[str, Any]]:
    """Run ``agent_name`` over a SPEAR split into ``out_dir`` (see module docstring).

    Args:
        agent_name: registry / entry-point name (also recorded in the fingerprint).
        data: SPEAR metadata CSV, Hub-layout dataset folder, or Hub dataset id.
        agent_options: constructor keyword arguments of the adapter.
        split, subset: dataset split and config (ignored for a CSV).
        config: :class:`GenerationConfig` (mode, chunk_ms, ...).
        agent: an already-built adapter to use instead of building ``agent_name`` (tests, notebooks).
        on_row: called with each new row record (after it is logged).
        concurrency: sessions run at once for a network adapter (:mod:`spear_metrics.agents.duplex`),
            all on one event loop, each paced on its own schedule; other adapters run one row at a time.
        row_timeout_s: time limit (s) of one row's adapter call (:func:`row_time_limit`); a row past it
            fails with ``timed out after N s``.
        prices: a :class:`spear_metrics.core.usage.PriceTable` (``--price-table``): the usage in
            ``run_info.json`` is priced with it (``usage.cost``, ``currency``, ``cost_note``).
        processes: network adapters: processes running the sessions (``--processes``; an int or
            ``"auto"``, :func:`spear_metrics.agents.processes.sessions_for`); 1: this process only.
        provider_limits: ``{agent name: N}`` (``--provider-limit``): at most N sessions of that
            adapter at once over every process of this machine
            (:class:`spear_metrics.agents.processes.ProviderSlots`).
        shard: ``(k, n)`` (``--shard k/n``): run only the rows whose id ``% n == k`` not done yet,
            beside the other shards, which may run at the same time from other processes or
            machines (a job array; :func:`spear_metrics.core.records.claim_shard`), logging to
            ``.work/rank-<k>.jsonl``; no ``metadata.csv``: a run without ``shard`` afterwards runs
            what no shard finished and writes it. Returns the shard's counts (``shard``,
            ``rows_run_this_time``, ``n_answered``, ``n_failed`` of its rows, ``rows_left``: rows of
            every shard without a record).
        copy_inputs: a CSV source's clips are copied into ``OUT/inputs`` and named relative to
            ``OUT`` (as a dataset source's always are): the folder holds everything ``score``
            reads, wherever it is moved (``--copy-inputs``).

    Returns the run info on the main process (``None`` on the others).

    Raises:
        InferError: ``out_dir`` holds another run (use ``overwrite``), a dataset that cannot be
            loaded, or rows left without an answer record (a rank died: rerun to resume).
        spear_datasets.ownership.OutFolderError: ``out_dir`` holds files this tool did not write, the
            output of another command, or is being written by a live process (one line).
        MetadataError: an unusable CSV. UnknownAgentError: no adapter of that name.
        spear_metrics.agents.processes.ProcessesError: ``provider_limits`` that name only other
            adapters (any adapter, checked before anything runs).
    """
    from spear_metrics.agents.registry import load_agent

    config = config or GenerationConfig()
    agent_options = dict(agent_options or {})
    out = Path(out_dir)
    if Path(data).exists() and (out.resolve() / "metadata.csv") in {Path(data).resolve(), Path(data).resolve() / "metadata.csv"}:
        raise InferError(f"--out {out} would overwrite the input metadata {data}: choose another folder")
    if concurrency < 1:
        raise InferError(f"--concurrency must be >= 1, got {concurrency}")
    if not (row_timeout_s > 0 and math.isfinite(row_timeout_s)):
        raise InferError(f"--row-timeout-s must be > 0, got {row_timeout_s}")
    if processes != "auto" and (not isinstance(processes, int) or processes < 1):
        raise InferError(f"--processes must be 'auto' or >= 1, got {processes!r}")
    check_provider_limits(agent_name, provider_limits)  # every adapter: a misspelt name is refused, not ignored
    if shard is not None:
        k, n = shard
        if not (isinstance(k, int) and isinstance(n, int) and 0 <= k < n):
            raise InferError(f"--shard must be K/N with 0 <= K < N, got {k}/{n}")
        if overwrite:
            raise InferError("--shard does not take --overwrite (other shards may be writing the folder): "
                             "give a new --out folder, or --overwrite without --shard first")
    check_out_folder(out)  # the rule first (cheap): a folder that cannot be used costs no loading
    state = distributed_state()
    if shard is not None and state.num_processes > 1:
        raise InferError("--shard runs one process: not under a launch of several (accelerate launch)")
    source = open_source(data, split=split, subset=subset, copy_inputs=copy_inputs)
    built_by_name = agent is None
    if agent is None:
        agent = load_agent(agent_name, **agent_options)
    unused_options_note(agent, agent_name, processes, provider_limits)
    if config.chunk_ms is None:  # the adapter's own chunk (e.g. moshi's 80 ms frame), else 40 ms
        from spear_metrics.agents.duplex import resolve_chunk_ms

        config = dataclasses.replace(config, chunk_ms=resolve_chunk_ms(agent))
    fp = {**source.fingerprint(), "split": split, "subset": subset, "agent": agent_name,
          "agent_options": {k: agent_options[k] for k in sorted(agent_options)},
          "config": dataclasses.asdict(config)}
    conflict = InferError(f"{out} holds answers of another run (other data, agent, options or config); use a new "
                          "--out folder or --overwrite")
    # --out: new, empty or infer's own; --overwrite removes exactly what earlier runs recorded
    # (answers, copied inputs, metadata.csv...), never a folder it found; refused while live
    claim = claim_shard(out, fp, shard=shard[0], of=shard[1], conflict=conflict, command="infer") if shard is not None else \
        claim_out(out, fp, overwrite=overwrite, conflict=conflict, command="infer", state=state,
                  adopt=("metadata.csv", "failures.jsonl", "run_info.json", RESPONSE_TIMES))
    with claim:
        sessions = functools.partial(sessions_for, agent, name=agent_name, options=agent_options,
                                     built_by_name=built_by_name, processes=processes,
                                     provider_limits=provider_limits)
        return _infer_claimed(agent, agent_name, source, out, config, state, retry_failed=retry_failed,
                              progress=progress, on_row=on_row, concurrency=concurrency, row_timeout_s=row_timeout_s,
                              prices=prices, sessions=sessions, shard=shard)


def _infer_claimed(agent: Any, agent_name: str, source: Source, out: Path, config: GenerationConfig, state: Any, *,
                   retry_failed: bool, progress: bool, on_row: Optional[Callable[[dict[str, Any]], None]],
                   concurrency: int, row_timeout_s: float, prices: Any = None,
                   sessions: Optional[Callable[..., Any]] = None,
                   shard: Optional[tuple[int, int]] = None) -> Optional[dict[str, Any]]:
    """:func:`run_inference` once its ``--out`` is claimed (locks held, writes recorded)."""
    rank, world = shard if shard is not None else (state.process_index, state.num_processes)
    work = out / WORK_DIR
    done = _read_logs(work)

    def is_done(i: int) -> bool:
        rec = done.get(i)
        if rec is None:
            return False
        if rec.get("status") == "ok":
            return (out / rec["answer_audio_path"]).is_file()
        return not retry_failed

    runnable = [i for i, e in enumerate(source.entries) if e.error is None]
    pending = [i for i in runnable if not is_done(i)]
    # accelerate's ranks run at once: the pending rows dealt round-robin; shards (a job array) may
    # start at different times, so theirs are fixed by row id, whatever is pending when each starts
    mine = [i for i in pending if in_shard(i, shard)] if shard is not None else pending[rank::world]
    # rows during which the process ended MAX_PROCESS_ENDS times (os._exit in the adapter, a crash,
    # kills): failed with the reason instead of run again (a rerun would end the same way forever)
    ends = ProcessEnds(obj for log in sorted(work.glob("rank-*.jsonl")) for obj in read_jsonl(log))
    ended = [i for i in mine if ends.blocked(i)]
    to_run = [i for i in mine if not ends.blocked(i)]
    bar = None
    if progress and state.is_main_process and mine:
        from tqdm.auto import tqdm

        where = f" (shard {rank}/{world})" if shard is not None else (f" (rank 0 of {world})" if world > 1 else "")
        bar = tqdm(total=len(mine), desc=f"infer {agent_name}{where}", unit="clip")
    network = is_network_agent(agent)
    session_info: dict[str, Any] = {}
    t0 = time.perf_counter()
    try:
        with AppendLog(work / f"rank-{rank}.jsonl") as log:
            journal = RowJournal(log, ends)
            started = journal.start  # flushed before the adapter runs: a process end is seen on resume

            def logged(rec: dict[str, Any]) -> None:
                log.write([rec])
                journal.finish(rec["row"])
                if on_row is not None:
                    on_row(rec)
                if bar is not None:
                    bar.update(1)

            for i in ended:
                logged(ends.ended_record(i, audio_path=_input_path(source, i, out)))
            with journal.stopping():  # stopped by the user or the disk: the rows in flight simply resume
                if network:
                    # lowered to a server's max_concurrency (Kyutai's Python Moshi server: one), noted once
                    concurrency = asyncio.run(_run_network_rows(
                        agent, source, to_run, out, config, concurrency, row_timeout_s, logged, started,
                        note=f"spearbench infer: note: {agent_name}" if state.is_main_process else None,
                        sessions=sessions, info=session_info))
                else:
                    caller = SyncCaller()
                    try:
                        for i in to_run:
                            started(i)
                            logged(_infer_row(agent, source, i, out, config, caller=caller, row_timeout_s=row_timeout_s))
                    finally:
                        caller.close()
    except ProcessLost as e:  # the rows it was running resume (and count a process end)
        raise InferError(str(e)) from None
    finally:
        if bar is not None:
            bar.close()
    elapsed = time.perf_counter() - t0
    state.wait_for_everyone()
    if shard is not None:
        done = _read_logs(work)
        status = [done[i].get("status") for i in mine if i in done]
        return {"shard": f"{rank}/{world}", "rows_run_this_time": len(mine), "n_answered": status.count("ok"),
                "n_failed": status.count("failed"), "n_inputs": len(source.entries),
                "rows_left": sum(1 for i in runnable if not is_done(i))}
    if not state.is_main_process:
        return None
    return finalize(source, out, agent_name=agent_name, config=config, elapsed_s=elapsed, n_new=len(pending), world=world,
                    extra={"concurrency": concurrency if network else 1, "row_timeout_s": row_timeout_s,
                           **({"chunk_ms": config.chunk_ms} if network else {}),
                           **session_info,
                           "onset_rule": getattr(agent, "onset_rule", None),
                           "onset_kind": onset_kind(agent),
                           **({"server_lag_bound_s": agent.server_lag_bound_s}
                              if getattr(agent, "server_lag_bound_s", None) is not None else {})},
                    n_resumed=len(runnable) - len(pending), prices=prices)


async def _run_network_rows(agent: Any, source: Source, rows: list[int], out: Path, config: GenerationConfig,
                            concurrency: int, row_timeout_s: float, logged: Callable[[dict[str, Any]], None],
                            started: Callable[[int], None] = lambda i: None, *, note: Optional[str],
                            sessions: Optional[Callable[..., Any]] = None,
                            info: Optional[dict[str, Any]] = None) -> int:
    """Rows of a network adapter, ``concurrency`` sessions at a time on this event loop
    (:func:`run_concurrently`, which lowers it to the adapter's ``max_concurrency`` with a
    ``note`` line and returns the sessions run at once); each record is logged as soon as its row
    ends. Every file write of the run (inputs staged, answers, work-log records) happens on the one
    writer thread, in order, so the loop that paces the sessions never waits for a disk. An
    unwritable output folder stops every session (a rerun resumes).

    ``sessions(concurrency=, n_rows=)`` makes where the sessions run
    (:func:`spear_metrics.agents.processes.sessions_for`: this loop, or worker processes; default
    this loop); a row holds its provider slot from its ``started`` record to its answer. ``info``
    receives the session processes and their loop lag (``session_processes``, ``loop_lag_ms``)."""
    from spear_metrics.agents.duplex import clamp_concurrency
    from spear_metrics.agents.processes import LocalSessions

    loop = asyncio.get_running_loop()
    pool = sessions(concurrency=clamp_concurrency(agent, int(concurrency))[0], n_rows=len(rows)) \
        if sessions is not None and rows else LocalSessions(agent)

    async def one(i: int, writer: Any) -> None:
        async with pool.slots:
            await loop.run_in_executor(writer, started, i)
            rec = await _infer_row_network(agent, source, i, out, config, row_timeout_s, writer, sessions=pool)
        await loop.run_in_executor(writer, logged, rec)

    async with pool:
        n = await run_concurrently(agent, rows, concurrency, one, note=note)
    if info is not None and rows:
        info.update(pool.stats())
    return n


def finalize(source: Source, out: Path, *, agent_name: str, config: GenerationConfig, elapsed_s: float = 0.0,
             n_new: int = 0, world: int = 1, extra: Optional[dict[str, Any]] = None, n_resumed: int = 0,
             prices: Any = None) -> dict[str, Any]:
    """Merge the work logs into ``metadata.csv``, ``failures.jsonl`` and ``run_info.json``, after
    checking that every input has exactly one answer record (and its file).

    Failed rows stay in ``metadata.csv`` with an empty ``answer_audio_path``; why infer failed
    each one is in ``failures.jsonl`` (``{"row", "audio_path", "error"}``, ``row`` = the
    metadata.csv row), never in a metadata column; ``score`` reads it and reports
    ``infer failed: <reason>`` for those rows. ``prices`` (a
    :class:`~spear_metrics.core.usage.PriceTable`) prices ``run_info.json``'s ``usage``.

    Raises:
        InferError: rows without a record, an ``ok`` record whose answer file is missing, or two
            rows sharing an answer file.
    """
    done = _read_logs(out / WORK_DIR)
    records: list[dict[str, Any]] = []
    missing: list[int] = []
    for i, e in enumerate(source.entries):
        if e.error is not None:
            records.append({"row": i, "audio_path": source.failed_audio_path(i, out), "status": "failed",
                            "error": e.error})
        elif i in done:
            records.append(done[i])
        else:
            missing.append(i)
    if missing:
        raise InferError(f"rows {missing[:10]} have no answer record; rerun to resume")
    answers = [r["answer_audio_path"] for r in records if r.get("status") == "ok"]
    lost = [a for a in answers if not (out / a).is_file()]
    if lost:
        raise InferError(f"answer files missing: {lost[:5]}; rerun to redo them")
    if len(set(answers)) != len(answers):
        raise InferError("two rows share an answer file")
    rows = []
    for r in records:
        e = source.entries[r["row"]]
        base = e.row
        if r.get("status") == "ok":
            rows.append(dataclasses.replace(base, audio_path=r["audio_path"], answer_audio_path=r["answer_audio_path"],
                                            answer_duration=r["answer_duration"], answer_start_time=r["answer_start_time"],
                                            transcript_answer=r.get("text") or ""))
        elif base is not None:
            rows.append(dataclasses.replace(base, audio_path=r["audio_path"], answer_audio_path=None,
                                            answer_duration=None, answer_start_time=None, transcript_answer=""))
        else:  # the input row itself was invalid: keep what we know so the row is not lost
            rows.append({"audio_path": r["audio_path"]})
    write_metadata(out / "metadata.csv", rows)
    failures = [{"row": r["row"], "audio_path": r["audio_path"], "error": r.get("error")} for r in records if r.get("status") != "ok"]
    write_jsonl_atomic(out / "failures.jsonl", failures)
    info = {
        "agent": agent_name,
        "data": source.description,
        "mode": config.mode,
        "chunk_ms": config.chunk_ms if config.mode == "streaming" else None,
        "n_inputs": len(records),
        "n_answered": len(answers),
        "n_failed": len(failures),
        "n_onset_none": sum(1 for r in records if r.get("status") == "ok" and r.get("onset") is None),
        "rows_run_this_time": n_new,
        "rows_resumed": n_resumed,  # rows an earlier invocation had already answered (or failed)
        "n_processes": world,
        "elapsed_s": elapsed_s,
        **(extra or {}),
        "response_time_s": response_time_stats(records),
        "send_lag_max_s": response_time_stats(records, key="send_lag_max_s"),
        "usage": usage_of_records(records, prices),
        "server_lag_max_s": response_time_stats(records, key="server_lag_max_s"),
        "n_server_lag_flagged": sum(1 for r in records if r.get("server_lag_flagged")),
        "n_reply_incomplete": sum(1 for r in records if r.get("status") == "ok" and isinstance(r.get("frames_expected"), int)
                                  and (r.get("frames_received") or 0) < r["frames_expected"]),
        "silence_pad_ms": response_time_stats(records, key="silence_pad_ms"),
    }
    write_response_times(out / RESPONSE_TIMES, records)
    write_json_atomic(out / "run_info.json", info)
    return info


def usage_of_records(records: list[dict[str, Any]], prices: Any = None) -> dict[str, Any] | None:
    """The tokens the service billed over ``records`` (their ``usage``: ``{model: usage fields}``),
    summed per model (:meth:`spear_metrics.core.usage.UsageTally.to_json`, priced with ``prices``,
    a :class:`~spear_metrics.core.usage.PriceTable`, when given); ``None`` when no answer
    reported usage (the adapter or the service does not)."""
    from spear_metrics.core.usage import Usage, UsageTally

    tally = UsageTally()
    seen = False
    for r in records:
        for model, u in (r.get("usage") or {}).items():
            if isinstance(u, dict):
                tally.add(str(model), Usage(**{k: int(v) for k, v in u.items() if k in Usage.__dataclass_fields__}))
                seen = True
    return tally.to_json(prices) if seen else None


def response_time_stats(records: list[dict[str, Any]], key: str = "response_time_s") -> dict[str, Any]:
    """``{"n", "mean", "median", "p90", "min", "max"}`` (s) of the answered rows' ``key``
    (``response_time_s``; ``send_lag_max_s``: how far behind its schedule each paced session fell
    at worst) (``None`` values when no row has one)."""
    v = np.array([r[key] for r in records if r.get("status") == "ok"
                  and isinstance(r.get(key), (int, float))], dtype=float)
    if not v.size:
        return {"n": 0, "mean": None, "median": None, "p90": None, "min": None, "max": None}
    return {"n": int(v.size), "mean": float(v.mean()), "median": float(np.median(v)),
            "p90": float(np.percentile(v, 90)), "min": float(v.min()), "max": float(v.max())}


#: per-row timing file beside metadata.csv (``score`` does not read it)
RESPONSE_TIMES = "response_times.csv"
RESPONSE_TIME_COLUMNS = ("row", "audio_path", "status", "answer_start_time", "response_time_s", "onset_wall_s",
                         "onset_stream_s", "send_lag_max_s", "server_lag_max_s", "server_lag_flagged", "silence_pad_ms",
                         "frames_received", "frames_expected", "finish_reason")


def write_response_times(path: Path, records: list[dict[str, Any]]) -> None:
    """``OUT/response_times.csv``: one line per row (:data:`RESPONSE_TIME_COLUMNS`; seconds;
    EMPTY where not measured), written atomically."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(RESPONSE_TIME_COLUMNS)
    for r in records:
        w.writerow(["" if r.get(c) is None else (f"{r[c]:.6f}" if isinstance(r.get(c), float) else r[c])
                    for c in RESPONSE_TIME_COLUMNS])
    with atomic_path(path) as tmp:
        tmp.write_text(buf.getvalue(), encoding="utf-8")
