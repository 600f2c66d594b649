"""``spearbench fdb infer``: Full-Duplex-Bench inference through a network adapter.

Each stimulus ``<task_dir>/<id>/input.wav`` is streamed in real time through the adapter's session
(:func:`spear_metrics.agents.duplex.run_session`, time-synchronous: the session lasts the input),
as FDB's own inference scripts (``v1_v1.5/model_inference/`` of ``DanielLin94144/Full-Duplex-Bench``)
stream a stimulus and record a reply channel of the same length. Written beside the stimulus:

- ``output.wav``: the reply channel, time-synchronous with ``input.wav``, laid out by the adapter's
  timeline rule (:func:`spear_metrics.agents.duplex.reply_timeline`): ``arrival`` (default): each
  received chunk is placed at ``max(receive time, end of the previous chunk)`` on the wall clock
  since the first input chunk (a playback buffer); ``frame_synchronous`` (``moshi``, as FDB's own
  Moshi client): all output back to back from the adapter's lead (one 80 ms frame), frame for frame
  with the input, the frames still in flight when the input ends drained first; either trimmed or
  zero-padded to the input's length; mono, 16-bit, at the input's rate (or ``output_sr``);
- ``output.json``: word-timed ASR of ``output.wav`` in FDB's shape ``{"text", "chunks": [{"text",
  "timestamp": [s, e]}]}``, made by the same code ``spearbench fdb`` runs when a sample has no
  ``output.json`` (:meth:`spear_metrics.full_duplex.definition.FullDuplexScorer.transcript`, cropped at
  the interrupting turn's end for user interruption as FDB's ``asr.py``), so scoring the folder
  gives the same values either way. ``asr=None`` writes no ``output.json`` (``spearbench fdb``
  then transcribes at scoring time). An ASR model that cannot be loaded stops the run (one line:
  no sample's fault); rerun with ``--no-asr`` to write the audio only.

Full-Duplex-Bench v1.5 sample folders (``input.wav``, ``clean_input.wav``, ``metadata.json``:
:mod:`spear_metrics.full_duplex_v15.data`) are run twice, each half its own resumable unit (logged
as ``<id>`` and ``<id>/clean_``): ``input.wav`` -> ``output.wav`` and ``clean_input.wav`` ->
``clean_output.wav`` (+ ``output.json`` / ``clean_output.json``, the whole reply transcribed, as
upstream's ``asr.py --task default``), with the same session, timeline and ASR rules.

Two passes: all sessions first (``concurrency`` at once on one event loop, nothing CPU-heavy beside
them), then the ASR of the new replies. Resumable: the work folder ``<task_dir>/.spearbench-fdb-infer/``
(a hidden folder, which ``spearbench fdb`` skips) logs each sample; a rerun redoes only what is
missing.

The task folders are the user's: the command writes only ``output.wav``/``output.json`` there, under
the project's output-folder rule (:class:`spear_datasets.ownership.OwnedFolder` opened on the task folder
with this work folder: every file it writes is recorded in the manifest
``.spearbench-fdb-infer/written-0.jsonl`` with its identity, and the folder's lock is held while it
writes). A sample holding an ``output.wav`` or ``output.json`` this command did not write (another
system's reply, FDB's released example outputs) or that changed since it wrote it is left alone,
with and without ``overwrite`` (counted as kept: move those files away to run this system on it).
``overwrite`` (another agent, options or chunk size in the same task folders) first removes the
replies the earlier run recorded that are still as it wrote them; the same settings resume.
As the manifest records a reply's path before the reply is written, a run killed between writing a
reply and logging its sample finds that ``output.wav`` recorded as its own on rerun and redoes the
sample (never kept as another system's reply, also when the sample had failed before).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from spear_datasets.sources.fdb import TASK_FILES, FDBSample, folder_task, read_interrupt
from spear_datasets.ownership import OwnedFolder
from spear_metrics.agents.duplex import clamp_concurrency
from spear_metrics.agents.processes import check_provider_limits, sessions_for
from spear_metrics.agents.rows import (
    ProcessEnds, ProcessLost, RowJournal, failure_reason, run_concurrently, run_row_async, session_time_limit,
)
from spear_metrics.core.records import (
    replaces, AppendLog, bind_run, bind_shard, hold_run_folder, in_shard, read_work_logs, write_json_atomic,
    write_jsonl_atomic,
)

WORK = ".spearbench-fdb-infer"


class FDBInferError(RuntimeError):
    """The run cannot proceed as a whole (one line; the CLI exits 2)."""


@dataclass(frozen=True)
class Stimulus:
    """One input of an FDB sample folder to run: its task folder, id, task (from its files), folder
    and ``prefix``: ``""`` (``input.wav`` -> ``output.wav``) or, for the second half of a v1.5
    sample, ``"clean_"`` (``clean_input.wav`` -> ``clean_output.wav``; task ``"v1.5"``)."""

    task_dir: Path
    id: str
    task: str
    dir: Path
    prefix: str = ""

    @property
    def unit(self) -> str:
        """Its id in the work log: the sample id, ``<id>/clean_`` for a v1.5 clean half."""
        return self.id + (f"/{self.prefix}" if self.prefix else "")

    @property
    def key(self) -> str:
        return f"{self.task_dir.name}/{self.unit}"

    @property
    def input_name(self) -> str:
        return f"{self.prefix}input.wav"

    @property
    def outputs(self) -> tuple[str, str]:
        """The reply and its transcript: ``(<prefix>output.wav, <prefix>output.json)``."""
        return f"{self.prefix}output.wav", f"{self.prefix}output.json"


def find_task_dirs(root: str | os.PathLike, tasks: Optional[list[str]] = None) -> list[Path]:
    """The task folders under ``root``: ``root`` itself when its sub-folders hold ``input.wav``
    (one task folder), else its sub-folders that do (FDB's ``<category>/<id>/`` layout), limited to
    the names in ``tasks`` when given.

    Raises:
        FDBInferError: ``root`` is not a folder, a name of ``tasks`` is not there, or no task folder.
    """
    r = Path(root)
    if not r.is_dir():
        raise FDBInferError(f"--root {r} is not a folder")

    def holds_samples(d: Path) -> bool:
        return any((c / "input.wav").is_file() for c in d.iterdir() if c.is_dir() and not c.name.startswith("."))

    if holds_samples(r):
        if tasks and r.name not in tasks:
            raise FDBInferError(f"--root {r} is one task folder ({r.name}); --tasks {','.join(tasks)} does not name it")
        return [r]
    subs = sorted(d for d in r.iterdir() if d.is_dir() and not d.name.startswith(".") and holds_samples(d))
    if tasks:
        missing = [t for t in tasks if t not in {d.name for d in subs}]
        if missing:
            raise FDBInferError(f"no task folder {', '.join(missing)} with samples under {r}; found: "
                                f"{', '.join(d.name for d in subs) or 'none'}")
        subs = [d for d in subs if d.name in tasks]
    if not subs:
        raise FDBInferError(f"no FDB sample folders (<task>/<id>/input.wav) under {r}")
    return subs


def list_stimuli(task_dir: Path) -> list[Stimulus]:
    """Every sample folder of ``task_dir`` that holds an ``input.wav`` (numeric ids in numeric order).
    In a v1.5 folder (one sample folder or more with ``clean_input.wav`` and ``metadata.json``)
    every sample is run as both halves."""
    names = sorted((p.name for p in task_dir.iterdir() if p.is_dir() and not p.name.startswith(".")
                    and (p / "input.wav").is_file()),
                   key=lambda n: (0, int(n), n) if n.isdigit() else (1, 0, n))
    from spear_metrics.full_duplex_v15.data import HALVES, is_sample_dir

    out = []
    # a v1.5 folder: a sample missing clean_input.wav is still v1.5 (its clean half fails with the
    # reason), never taken for a v1.0 sample of another task
    v15_folder = any(is_sample_dir(task_dir / n) for n in names)
    for n in names:
        if v15_folder:  # v1.5: both inputs, each its own resumable unit
            out += [Stimulus(task_dir, n, "v1.5", task_dir / n, h) for h in HALVES]
            continue
        t = folder_task(task_dir / n) or "backchannel"
        out.append(Stimulus(task_dir, n, t, task_dir / n))
    return out


def read_log(work: Path) -> list[dict[str, Any]]:
    """The valid records of the work logs ``work/rank-<r>.jsonl`` (a ``sample`` id and an
    ok/failed ``status``); torn lines are skipped (their samples are redone)."""
    return [o for o in read_work_logs(work) if isinstance(o.get("sample"), str) and o.get("status") in ("ok", "failed")]


async def stream_stimulus(agent: Any, stim: Stimulus, *, chunk_ms: float, row_timeout_s: float,
                          output_sr: Optional[int], sessions: Any = None) -> tuple[np.ndarray, int, dict[str, Any]]:
    """One stimulus through ``agent``'s session: ``(reply (n,) float32, rate Hz, timing record)``;
    the session on this loop, or in a session process of ``sessions``
    (:mod:`spear_metrics.agents.processes`).

    Raises:
        spear_datasets.audio.AudioError: unreadable ``input.wav``; the adapter's errors;
        TimeoutError as ``RowTimeout``.
    """
    from spear_datasets.audio import decode
    import dataclasses

    from spear_metrics.agents.duplex import AudioRequest, reply_timeline, session_config
    from spear_metrics.agents.harness import server_lag_record
    from spear_metrics.agents.processes import run_one_session

    wav, sr = await asyncio.to_thread(decode, stim.dir / stim.input_name)  # nothing slow on the loop that paces sessions
    request = AudioRequest(audio=wav, sample_rate=sr, row_id=stim.key.replace("/", "_"))
    scfg = session_config(agent, chunk_ms=chunk_ms, time_synchronous=True)
    scfg = dataclasses.replace(scfg, tail_silence_s=0.0)
    limit = session_time_limit(scfg, request.duration_s, row_timeout_s)  # no tail silence: time-synchronous
    result = await run_one_session(agent, request, scfg, limit, sessions=sessions, tag=stim.unit)
    rate = int(output_sr or sr)
    n = round(wav.shape[1] * rate / sr)
    reply = await asyncio.to_thread(reply_timeline, agent, result, n, rate)
    timing = {"first_audio_s": result.first_audio_s, "first_audio_input_s": result.first_audio_input_s,
              "n_chunks": len(result.chunks), "text": result.text or None, **server_lag_record(agent, result)}
    if result.usage:  # what the service billed for this session ({model: usage fields})
        timing["usage"] = dict(result.usage)
    if result.frames_expected is not None and (result.frames_received or 0) < result.frames_expected:
        timing["note"] = (f"reply incomplete: {result.frames_received or 0} of {result.frames_expected} output frames "
                          "arrived; the rest of the reply channel is silence")
    return reply, rate, timing


def transcribe_reply(stim: Stimulus, backend: Any) -> dict[str, Any]:
    """``output.json`` content for the reply in ``stim``'s folder, by the scorer's own transcription
    (:meth:`FullDuplexScorer.transcript`; user interruption: from the interrupting turn's end on).

    Raises:
        FDBFormatError: a bad ``interrupt.json``; the ASR backend's errors (ModelUnavailableError...).
    """
    from spear_metrics.full_duplex.definition import FullDuplexScorer

    if stim.task == "v1.5":  # v1.5: the whole reply, as upstream's asr.py --task default
        from spear_metrics.full_duplex_v15.scoring import transcribe_file

        return transcribe_file(stim.dir / stim.outputs[0], backend)
    task = stim.task if stim.task in TASK_FILES else "backchannel"
    scorer = FullDuplexScorer(task=task, asr=backend)
    sample = FDBSample(id=stim.id, task=task, dir=stim.dir, output_asr=stim.dir / f"{WORK}-absent.json")
    offset = read_interrupt(stim.dir / "interrupt.json").end_s if task == "user_interruption" else 0.0
    tr = scorer.transcript(sample, offset)
    return {"text": tr.text, "chunks": [{"text": c.text, "timestamp": [c.start, c.end]} for c in tr.chunks]}


def run_fdb_inference(agent_name: str, root: str | os.PathLike, *, tasks: Optional[list[str]] = None,
                      agent_options: Optional[dict[str, Any]] = None, agent: Any = None, chunk_ms: Optional[float] = None,
                      concurrency: int = 1, row_timeout_s: float = 300.0, asr: Optional[str] = "embedded",
                      asr_backend: Any = None, output_sr: Optional[int] = None, overwrite: bool = False,
                      retry_failed: bool = False, progress: bool = True, prices: Any = None,
                      on_row: Optional[Callable[[dict[str, Any]], None]] = None, processes: int | str = 1,
                      provider_limits: Optional[dict[str, int]] = None,
                      shard: Optional[tuple[int, int]] = None) -> dict[str, Any]:
    """Run a network adapter over FDB stimuli (see the module docstring).

    Args:
        agent_name: adapter name (registry), recorded in each task folder's work fingerprint.
        root: a task folder, or a folder of task folders (``tasks`` picks some by name).
        agent: an already-built adapter (tests); else ``load_agent(agent_name, **agent_options)``.
        chunk_ms: input chunk length (ms); ``None``: the adapter's own (``moshi``: 80), else 40
            (:func:`spear_metrics.agents.duplex.resolve_chunk_ms`).
        concurrency: sessions at once (lowered to the adapter's ``max_concurrency``, with a note on stderr).
        row_timeout_s: a sample's limit beyond its input's duration (s).
        asr: ASR backend name for ``output.json`` (``spear_metrics.core.asr.load_asr``); ``None``: no
            ``output.json``. ``asr_backend``: an object with the backend API to use instead (tests).
        output_sr: rate of ``output.wav`` (Hz); ``None``: the input's.
        overwrite: another run's settings in the same task folders: remove the replies that run
            wrote (recorded, unchanged) first; never a file this command did not write.
        retry_failed: run again the samples that failed before.
        processes, provider_limits: ``--processes`` and ``--provider-limit``
            (:func:`spear_metrics.agents.processes.sessions_for`): the sessions in worker
            processes, this process the one writer of the task folders.
        prices: a :class:`spear_metrics.core.usage.PriceTable` (``--price-table``) pricing ``usage``.
        shard: ``(k, n)`` (``--shard k/n``): only the stimuli of shard ``k``
            (:func:`spear_metrics.core.records.in_shard` of ``<task>/<unit>``), beside the other
            shards, which may write the same task folders at the same time
            (:func:`spear_metrics.core.records.hold_shard`: each its own lock and manifest);
            logged to ``.spearbench-fdb-infer/rank-k.jsonl``, no ``failures.jsonl`` nor
            ``run_info.json`` written (a run without ``shard`` afterwards runs what no shard
            finished and writes them). The counts are then the shard's, with ``samples_left`` (the
            stimuli without a reply in any log) and ``shard``.

    Returns counts: ``n_samples``, ``n_written`` (this run), ``n_done`` (in total), ``n_kept``
    (samples holding outputs this command did not write, left alone), ``kept`` (their
    ``<task>/<id>``, at most 20), ``n_failed``, ``failures`` (``[{"sample", "error"}]``), ``elapsed_s``,
    ``usage``: the tokens the service billed for the replies logged in these task folders, per model
    (:func:`spear_metrics.agents.harness.usage_of_records`, priced with ``prices``; ``None`` when no
    session reported usage). Each task folder's ``run_info.json`` records the same.

    Raises:
        FDBInferError: no task folders, a folder holding another run's outputs (without ``overwrite``),
            an adapter that is not a network adapter, a session process that ended (rerun to resume).
        spear_datasets.ownership.OutFolderError: another live process writes a task folder, or
            ``overwrite`` over replies of an older version that kept no record of them.
        spear_metrics.core.models.ModelUnavailableError: the ASR model cannot be loaded.
    """
    from spear_metrics.agents.duplex import is_network_agent, resolve_chunk_ms
    from spear_metrics.agents.registry import load_agent

    agent_options = dict(agent_options or {})
    if shard is not None and overwrite:
        raise FDBInferError("--shard does not take --overwrite (other shards may be writing the task folders): run "
                            "--overwrite without --shard first")
    check_provider_limits(agent_name, provider_limits)  # a misspelt name would cap nothing
    built_by_name = agent is None
    if agent is None:
        agent = load_agent(agent_name, **agent_options)
    if not is_network_agent(agent):
        raise FDBInferError(f"agent {agent_name!r} is not a streaming network adapter (no async connect); "
                            "fdb-infer needs one (e.g. openai-realtime)")
    if concurrency < 1:
        raise FDBInferError(f"--concurrency must be >= 1, got {concurrency}")
    chunk_ms = resolve_chunk_ms(agent, chunk_ms)
    fp = {"agent": agent_name, "agent_options": {k: agent_options[k] for k in sorted(agent_options)},
          "chunk_ms": float(chunk_ms), "output_sr": output_sr}
    task_dirs = find_task_dirs(root, tasks)
    with contextlib.ExitStack() as held:
        folders: dict[Path, OwnedFolder] = {}
        kw = dict(command="fdb-infer", work_name=WORK, check=False, flag="--root", keep_changed=True)
        for td in task_dirs:  # each task folder: its lock held (a shard's beside the others'), every write recorded
            folders[td] = held.enter_context(hold_run_folder(td, shard, **kw))
        sessions = functools.partial(sessions_for, agent, name=agent_name, options=agent_options,
                                     built_by_name=built_by_name, processes=processes, provider_limits=provider_limits)
        try:
            return _run_claimed(agent, agent_name, task_dirs, folders, fp, chunk_ms=chunk_ms, concurrency=concurrency,
                                row_timeout_s=row_timeout_s, asr=asr, asr_backend=asr_backend, output_sr=output_sr,
                                overwrite=overwrite, retry_failed=retry_failed, progress=progress, on_row=on_row,
                                sessions=sessions, prices=prices, shard=shard)
        except ProcessLost as e:  # its samples resume (and count a process end), the others were logged stopped
            raise FDBInferError(str(e)) from None


def _logged_outputs(work: Path) -> list[str]:
    """The outputs (``<id>/output.wav``, ``<id>/output.json``) the work log of ``work`` says were
    written: an older version's replies, adopted by a resume of the same run."""
    names = []
    for obj in read_log(work):
        if obj.get("status") == "ok":
            sid, _, prefix = str(obj["sample"]).partition("/")
            names.append(f"{sid}/{prefix}output.wav")
            if obj.get("asr"):
                names.append(f"{sid}/{prefix}output.json")
    return names


def _run_claimed(agent: Any, agent_name: str, task_dirs: list[Path], folders: dict[Path, OwnedFolder],
                 fp: dict[str, Any], *, chunk_ms: float, concurrency: int, row_timeout_s: float, asr: Optional[str],
                 asr_backend: Any, output_sr: Optional[int], overwrite: bool, retry_failed: bool, progress: bool,
                 on_row: Optional[Callable[[dict[str, Any]], None]], sessions: Callable[..., Any],
                 prices: Any = None, shard: Optional[tuple[int, int]] = None) -> dict[str, Any]:
    """:func:`run_fdb_inference` once its task folders are held (locks taken, writes recorded)."""
    from spear_metrics.agents.harness import usage_of_records

    state: dict[Path, dict[str, dict[str, Any]]] = {}
    ends: dict[Path, ProcessEnds] = {}
    stimuli: list[Stimulus] = []
    for td in task_dirs:
        work = td / WORK
        conflict = FDBInferError(f"{td} holds replies of another fdb-infer run (other agent, options or chunk size); "
                                 "pass --overwrite to replace the output.wav/output.json that run wrote (nothing else)")
        if shard is not None:
            bind_shard(work, fp, conflict=conflict)
        else:
            bind_run(folders[td], work, fp, overwrite=overwrite, adopt=_logged_outputs(work), conflict=conflict)
        recs: dict[str, dict[str, Any]] = {}
        for obj in read_log(work):  # the latest record of a sample wins (an ok ASR record completes its ok reply)
            sid = str(obj["sample"])
            prev = recs.get(sid)
            if not replaces(prev, obj):
                continue  # never an ok by a failure: a shard's log is read before rank-0.jsonl, whichever ran last
            recs[sid] = {**prev, **obj} if prev and prev.get("status") == "ok" else obj
        state[td] = recs
        ends[td] = ProcessEnds(read_work_logs(work), key="sample")
        stimuli += [s for s in list_stimuli(td) if in_shard(s.key, shard)]

    def ours(s: Stimulus, name: str) -> bool:
        """``name`` in ``s``'s folder was written by this command and is unchanged since."""
        return folders[s.task_dir].is_recorded(s.dir / name)

    def foreign(s: Stimulus) -> bool:
        """``s`` holds an output this command did not write (or one changed since): never touched."""
        return any(((s.dir / n).exists() or (s.dir / n).is_symlink()) and not ours(s, n) for n in s.outputs)

    def audio_done(s: Stimulus) -> bool:
        r = state[s.task_dir].get(s.unit)
        return bool(r and r.get("status") == "ok" and (s.dir / s.outputs[0]).is_file() and ours(s, s.outputs[0]))

    kept: list[Stimulus] = []
    todo: list[Stimulus] = []
    for s in stimuli:
        r = state[s.task_dir].get(s.unit)
        if foreign(s):
            kept.append(s)
            continue
        if audio_done(s):
            continue
        # a reply of its own on disk with no ok record: a run killed between writing and logging it (redone)
        unlogged = (s.dir / s.outputs[0]).is_file() and ours(s, s.outputs[0])
        if r is not None and r.get("status") == "failed" and not retry_failed and not unlogged:
            continue
        todo.append(s)
    blocked = [s for s in todo if ends[s.task_dir].blocked(s.unit)]  # ended the process twice: failed, not rerun
    bar = None
    if progress and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc=f"fdb infer {agent_name}", unit="sample")
    rank = 0 if shard is None else shard[0]
    logs = {td: AppendLog(td / WORK / f"rank-{rank}.jsonl") for td in task_dirs}
    journals = {td: RowJournal(logs[td], ends[td]) for td in task_dirs}
    t0 = time.perf_counter()
    written = 0
    session_info: dict[str, Any] = {}
    try:
        def save(s: Stimulus, reply: np.ndarray, rate: int) -> None:
            from spear_datasets.audio import write_wav

            folders[s.task_dir].remove_file(s.dir / s.outputs[1])  # its stale transcript never sits beside a new reply
            write_wav(s.dir / s.outputs[0], reply, rate)

        def log(s: Stimulus, rec: dict[str, Any]) -> None:
            logs[s.task_dir].write([rec])
            journals[s.task_dir].finish(s.unit)
            state[s.task_dir][s.unit] = rec
            if on_row is not None:
                on_row(rec)
            if bar is not None:
                bar.update(1)

        run_now = [s for s in todo if s not in blocked]
        pool = sessions(concurrency=clamp_concurrency(agent, int(concurrency))[0], n_rows=len(run_now))

        async def one(s: Stimulus, writer: Any) -> None:
            loop = asyncio.get_running_loop()

            async def body(rec: dict[str, Any]) -> None:
                nonlocal written
                reply, rate, timing = await stream_stimulus(agent, s, chunk_ms=chunk_ms, row_timeout_s=row_timeout_s,
                                                            output_sr=output_sr, sessions=pool)
                await loop.run_in_executor(writer, save, s, reply, rate)
                rec.update(status="ok", asr=False, **timing)
                written += 1

            async with pool.slots:  # --provider-limit: from the sample's start record to its reply
                await loop.run_in_executor(writer, journals[s.task_dir].start, s.unit)
                rec = await run_row_async({"sample": s.unit, "task": s.task}, body)
            await loop.run_in_executor(writer, log, s, rec)

        async def run_all() -> int:
            async with pool:
                return await run_concurrently(agent, run_now, concurrency, one,
                                              note=f"spearbench fdb infer: note: {agent_name}")

        for s in blocked:  # a sample that ended the process twice: failed with the reason, not run again
            log(s, ends[s.task_dir].ended_record(s.unit, task=s.task))
        # lowered to the adapter's max_concurrency (with a note), also when nothing is left to run
        with contextlib.ExitStack() as stopping:
            for j in journals.values():
                stopping.enter_context(j.stopping())
            concurrency = asyncio.run(run_all())
        if run_now:
            session_info.update(pool.stats())  # session_processes, loop_lag_ms (docs/multiprocess.md)
        if bar is not None:
            bar.close()
            bar = None
        # second pass: transcripts of the replies this command wrote that have none yet
        if asr is not None or asr_backend is not None:
            backend = asr_backend
            for s in stimuli:
                r = state[s.task_dir].get(s.unit)
                if not audio_done(s) or foreign(s):  # a transcript someone else put there stays theirs
                    continue
                if r.get("asr") and (s.dir / s.outputs[1]).is_file():
                    continue
                if backend is None:
                    from spear_metrics.core.asr import load_asr

                    backend = load_asr(asr)
                try:
                    obj = transcribe_reply(s, backend)
                    write_json_atomic(s.dir / s.outputs[1], obj)
                    upd = {"sample": s.unit, "task": s.task, "status": "ok", "asr": True,
                           "asr_model": str(getattr(backend, "name", asr)), "ends_starts": 0}
                except Exception as e:
                    from spear_metrics.core.models import ModelUnavailableError

                    if isinstance(e, ModelUnavailableError):
                        raise
                    upd = {"sample": s.unit, "task": s.task, "status": "failed", "error": f"ASR: {failure_reason(e)}", "ends_starts": 0}
                    folders[s.task_dir].remove_file(s.dir / s.outputs[0])  # no reply without its transcript
                logs[s.task_dir].write([upd])
                state[s.task_dir][s.unit] = {**r, **upd}
    finally:
        if bar is not None:
            bar.close()
        for log in logs.values():
            log.close()
    failures = []
    done = 0
    units = {td: {s.unit for s in stimuli if s.task_dir == td} for td in task_dirs}  # a shard's: its own
    for td in task_dirs:
        if shard is not None:
            state[td] = {sid: r for sid, r in state[td].items() if sid in units[td]}
        fails = [{"sample": sid, "error": r.get("error")} for sid, r in sorted(state[td].items()) if r.get("status") == "failed"]
        if shard is None:  # the run without --shard writes the task folders' files from every shard's log
            write_jsonl_atomic(td / WORK / "failures.jsonl", fails)
        failures += [{"sample": f"{td.name}/{f['sample']}", "error": f["error"]} for f in fails]
        done += sum(1 for r in state[td].values() if r.get("status") == "ok")
    info = {"agent": agent_name, "n_samples": len(stimuli), "n_written": written, "n_done": done, "n_kept": len(kept),
            "kept": [s.key for s in kept[:20]], "n_failed": len(failures), "failures": failures,
            "elapsed_s": time.perf_counter() - t0, "concurrency": concurrency, "chunk_ms": chunk_ms, **session_info,
            "n_incomplete": sum(1 for td in task_dirs for r in state[td].values()
                                if r.get("status") == "ok" and str(r.get("note", "")).startswith("reply incomplete")),
            "n_server_lag_flagged": sum(1 for td in task_dirs for r in state[td].values() if r.get("server_lag_flagged")),
            "timeline": getattr(agent, "timeline", "arrival"), "asr": None if (asr is None and asr_backend is None) else
            str(getattr(asr_backend, "name", asr)),
            "usage": usage_of_records([r for td in task_dirs for r in state[td].values()], prices)}
    if shard is not None:
        ok = {td: {o["sample"] for o in read_log(td / WORK) if o["status"] == "ok"} for td in task_dirs}
        left = sum(1 for td in task_dirs for s in list_stimuli(td) if s.unit not in ok[td])
        return {**info, "shard": f"{shard[0]}/{shard[1]}", "samples_left": left}
    for td in task_dirs:
        write_json_atomic(td / WORK / "run_info.json", {k: v for k, v in info.items() if k != "failures"})
    return info
