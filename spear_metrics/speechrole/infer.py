"""``spearbench speechrole infer``: any adapter speaks each turn of SpeechRole-Eval's dialogues,
written in the benchmark's model-output layout (``model_output/<model>``).

Per dialogue, turn by turn: the adapter gets the turn's user speech (``user_speech_path``) with the
dialogue's system prompt and the dialogue so far, its own earlier turns included:

- a network adapter (:class:`spear_metrics.agents.duplex.NetworkAgent`) gets an
  :class:`~spear_metrics.agents.duplex.AudioRequest`: ``audio`` = the user's speech at its own
  rate, ``instructions`` = the system prompt, ``history`` = the earlier turns
  (:class:`~spear_metrics.agents.duplex.DialogueTurn`: the user's text and speech, then the
  system's own text and speech), ``row_id`` = ``<role>_<mode>_<dialogue>_<turn>``; one session
  (:func:`~spear_metrics.agents.duplex.run_session`), the answer its concatenated audio
  (:func:`~spear_metrics.agents.duplex.answer_from_session`). ``concurrency`` dialogues (lowered,
  with a note, to the adapter's ``max_concurrency``) run at once on one event loop (a dialogue's
  turns are sequential: each needs the one before); the user speech is decoded off that loop and
  every file write goes through one writer thread
  (:func:`spear_metrics.agents.rows.run_concurrently`), so no disk stalls a paced session.
- a synchronous adapter (:class:`spear_metrics.agents.base.Agent`, ``respond(audio, row, config)``)
  has no place for a system prompt or a history: it gets the user's speech as SPEAR's input form
  (16 kHz, channel 0 the user, channel 1 silent) and a :class:`SpeechRoleRow` (a ``SpearRow``
  whose ``transcript_question`` is the user's text, plus ``system_prompt`` and ``history``
  attributes an adapter written for SpeechRole may read). Dialogues run one after another, each
  turn's call on a worker thread under ``row_timeout_s``. An
  adapter that replays the reference answer (``uses_reference_answer``, e.g. ``human``) gets the
  turn's reference speech (``reference_key``) as ``answer_audio_path``: an oracle whose answers
  are the reference voices themselves.

Written (``OUT`` = ``model_output/<model>``): ``<mode>_result/audio/<role>/<role>_<d>_<t>.wav``
(the answer at its own rate, 16-bit; atomically), ``<mode>_result/json/<role>.json`` =
``{"role", "dialogue_<d>": [{"turn", "user_input": {"text"}, "model_output": {"text",
"audio_path"}}]}`` with ``audio_path`` relative to the folder two levels above ``OUT`` (the
benchmark's form, ``model_output/<model>/...``), ``<mode>_result/failures.jsonl`` (a dialogue
that failed: its reason; it is left out of the role file, and ``score`` fails it as "no
dialogue_<d>"), ``<mode>_result/run_info.json``. Resumable: every finished turn is logged
(``OUT/.work/<mode>/rank-0.jsonl``) after its WAV is written, so a rerun continues a dialogue from
its last finished turn, rebuilding the history from the written WAVs.

``OUT`` follows the project's output-folder rule (docs/safety.md): new, empty or this command's
(a system's existing outputs, e.g. a released ``model_output/<model>``, are refused); every file is
recorded as written; ``overwrite`` (another agent, options or dialogues for a mode) removes only
what the earlier run of that mode recorded under ``<mode>_result/`` and is unchanged.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from spear_datasets.schema import SpearRow
from spear_metrics.core.records import (
    replaces, AppendLog, bind_run, bind_shard, hold_run_folder, in_shard, one_line, read_work_logs, write_json_atomic,
    write_jsonl_atomic,
)
from spear_metrics.speechrole.data import EvalDialogue, read_test_data, reference_path_of, resolve_in

#: The owner name of an infer output folder (``OUT/.work/owner.json``).
COMMAND = "speechrole infer"


class InferRunError(RuntimeError):
    """The run cannot proceed as a whole (one line; the CLI exits 2; a rerun resumes)."""


@dataclass(frozen=True)
class SpeechRoleRow(SpearRow):
    """The thin request object a synchronous adapter gets for one SpeechRole turn: a
    :class:`~spear_datasets.schema.SpearRow` (``audio_path`` = the user's speech,
    ``transcript_question`` = the user's text, ``speakers`` = ``"user|<role>"``, no human answer)
    plus the dialogue's ``system_prompt`` and ``history`` (earlier turns as
    :class:`~spear_metrics.agents.duplex.DialogueTurn`, oldest first)."""

    system_prompt: str = ""
    history: tuple = ()
    turn: int = 0


@dataclass
class TurnAnswer:
    """A finished turn: the answer's text (``None``: the adapter gave none), its WAV, its audio."""

    text: Optional[str]
    wav_path: Path
    audio: np.ndarray
    sample_rate: int


def answer_path(out: Path, mode: str, role: str, dialogue: int, turn: int) -> Path:
    """``OUT/<mode>_result/audio/<role>/<role>_<d>_<t>.wav`` (the benchmark's names)."""
    return out / f"{mode}_result" / "audio" / role / f"{role}_{dialogue}_{turn}.wav"


def benchmark_path(out: Path, path: Path) -> str:
    """``path`` as the benchmark writes ``audio_path``: relative to the folder two levels above
    ``OUT`` (``model_output/<model>/...``), POSIX separators."""
    base = Path(os.path.abspath(out)).parent.parent
    return Path(os.path.relpath(os.path.abspath(path), base)).as_posix()


def _history_turns(d: EvalDialogue, done: Sequence[TurnAnswer], user_audio: Sequence[tuple[np.ndarray, int]]):
    from spear_metrics.agents.duplex import DialogueTurn

    turns = []
    for t, ans in enumerate(done):
        wav, sr = user_audio[t]
        turns.append(DialogueTurn("user", text=d.users[t], audio=wav, sample_rate=sr))
        turns.append(DialogueTurn("assistant", text=ans.text, audio=ans.audio, sample_rate=ans.sample_rate))
    return tuple(turns)


async def _network_turn(agent: Any, d: EvalDialogue, t: int, wav: np.ndarray, sr: int, history: tuple, *,
                        chunk_ms: float, row_timeout_s: float, sessions: Any = None):
    from spear_metrics.agents.duplex import AudioRequest, session_answer, session_config
    from spear_metrics.agents.processes import run_one_session
    from spear_metrics.agents.rows import session_time_limit

    request = AudioRequest(audio=wav, sample_rate=sr, instructions=d.system_prompt, history=history,
                           row_id=f"{d.role}_{d.mode}_{d.index}_{t}")
    scfg = session_config(agent, chunk_ms=chunk_ms)
    limit = session_time_limit(scfg, request.duration_s, row_timeout_s)
    result = await run_one_session(agent, request, scfg, limit, f"turn {t} ", sessions=sessions, tag=d.key)
    return session_answer(agent, result)  # the adapter's rule (e.g. moshi: its speech only); the onset is unused


def _sync_turn(agent: Any, d: EvalDialogue, t: int, user_path: Path, history: tuple, config: Any,
               reference: Optional[Path]):
    from spear_datasets.audio import TARGET_SR, load_audio

    mono = load_audio(user_path, sr=TARGET_SR, channels="mix")[0]
    audio = np.stack([mono, np.zeros_like(mono)])
    ref = str(reference) if reference is not None and getattr(agent, "uses_reference_answer", False) else None
    row = SpeechRoleRow(audio_path=str(user_path), answer_audio_path=ref, context_end_time=0.0,
                        question_end_time=mono.size / TARGET_SR, speakers=f"user|{d.role}",
                        conversation_id=f"{d.role}_{d.mode}_{d.index}", transcript_question=f"user: {d.users[t]}",
                        system_prompt=d.system_prompt, history=history, turn=t)
    return agent.respond(audio, row, config)


def run_speechrole_inference(agent_name: str, test_data: str | os.PathLike, mode: str, out: str | os.PathLike, *,
                             agent_options: Optional[dict[str, Any]] = None, agent: Any = None,
                             roles: Optional[Sequence[str]] = None, concurrency: int = 1, chunk_ms: float = 40.0,
                             seed: int = 0, row_timeout_s: float = 300.0, retry_failed: bool = False,
                             reference_key: str = "role_speech_path1",
                             overwrite: bool = False, progress: bool = True, prices: Any = None,
                             on_turn: Optional[Callable[[dict[str, Any]], None]] = None, processes: int | str = 1,
                             provider_limits: Optional[dict[str, int]] = None,
                             shard: Optional[tuple[int, int]] = None) -> dict[str, Any]:
    """Run an adapter over the dialogues of ``mode`` (see the module docstring).

    Args:
        agent_name: adapter name (registry, ``file.py:Class``, ``module:Class``).
        test_data: a local test-data folder (:func:`spear_metrics.speechrole.data.test_data_dir`).
        agent: an already-built adapter (tests); else ``load_agent(agent_name, **agent_options)``.
        concurrency: dialogues at once (network adapters); lowered to the adapter's
            ``max_concurrency``, with a note on stderr.
        row_timeout_s: a turn's limit (s; a paced adapter's input duration is added); a turn past it
            fails its dialogue with ``timed out after N s`` (a synchronous adapter's call runs on a
            worker thread, abandoned when stuck).
        reference_key: the reference speech set an oracle adapter (``uses_reference_answer``) replays.
        prices: a :class:`spear_metrics.core.usage.PriceTable` (``--price-table``) pricing ``usage``.
        on_turn: called with each finished turn's record (tests).
        processes, provider_limits: ``--processes`` and ``--provider-limit`` of a network adapter
            (:func:`spear_metrics.agents.processes.sessions_for`): the sessions in worker
            processes, this process the one writer of ``out``; a dialogue holds its provider slot
            from its start record to its last turn.
        shard: ``(k, n)`` (``--shard k/n``): only the dialogues of shard ``k``
            (:func:`spear_metrics.core.records.in_shard` of the dialogue's key), beside the other
            shards, which may write ``out`` at the same time
            (:func:`spear_metrics.core.records.hold_shard`); logged to ``.work/<mode>/rank-k.jsonl``,
            no role files written: a run without ``shard`` afterwards runs any dialogue no shard
            finished and writes them from every shard's log. The counts are then the shard's
            (``n_dialogues``: its dialogues), with ``dialogues_left`` (the mode's dialogues no
            shard has finished) and ``shard``.

    Returns:
        ``{"n_dialogues", "n_answered" (dialogues with every turn), "n_turns" (turns written),
        "n_failed", "failures": [(key, reason)], "elapsed_s", "usage"}``; ``usage``: the tokens the
        service billed for every turn written in this mode, per model
        (:func:`spear_metrics.agents.harness.usage_of_records`, priced with ``prices``; ``None``
        when no turn reported usage), also in ``run_info.json``.

    Raises:
        InferRunError: ``out`` holds another run's answers (without ``overwrite``), ``concurrency`` < 1,
            ``shard`` with ``overwrite``, or a session process ended (rerun to resume).
        spear_datasets.ownership.OutFolderError: ``out`` holds files this tool did not write, another
            command's output, or is being written by another live process.
        spear_metrics.agents.registry.UnknownAgentError, OptionError: the adapter cannot be built.
    """
    from spear_datasets.audio import AudioError, decode, write_wav
    from spear_metrics.agents.base import GenerationConfig, check_answer_limits, validate_answer
    from spear_metrics.agents.duplex import clamp_concurrency, is_network_agent
    from spear_metrics.agents.processes import sessions_for, unused_options_note
    from spear_metrics.agents.harness import usage_of_records
    from spear_metrics.agents.rows import (
        ProcessEnds, ProcessLost, RowJournal, RowTimeout, SyncCaller, failure_reason, fails_row, run_concurrently,
    )
    from spear_metrics.agents.registry import load_agent

    if concurrency < 1:
        raise InferRunError(f"--concurrency must be >= 1, got {concurrency}")
    if shard is not None and overwrite:
        raise InferRunError("--shard does not take --overwrite (other shards may be writing the folder): give a new "
                            "--out folder, or --overwrite without --shard first")
    options = dict(agent_options or {})
    built_by_name = agent is None
    if agent is None:
        agent = load_agent(agent_name, **options)
    network = is_network_agent(agent)
    unused_options_note(agent, agent_name, processes, provider_limits)
    out = Path(out)
    dialogues = read_test_data(test_data, mode, roles=roles)
    fp = {"agent": agent_name, "agent_options": {k: str(options[k]) for k in sorted(options)}, "mode": mode,
          "reference_key": reference_key if getattr(agent, "uses_reference_answer", False) else None,
          "chunk_ms": float(chunk_ms), "seed": int(seed), "test_data": str(Path(test_data).resolve()),
          "dialogues": [d.key for d in dialogues]}
    # OUT: new, empty or this command's; each mode is one run bound to its settings (.work/<mode>/);
    # a shard holds its own lock beside the other shards' (hold_shard)
    held = hold_run_folder(out, shard, command=COMMAND)
    with held as folder:
        work = folder.work / mode
        conflict = InferRunError(f"{out} holds {mode} answers of another infer run (other agent, options or "
                                 "dialogues); use another --out folder or --overwrite")
        if shard is not None:
            bind_shard(work, fp, conflict=conflict)
        else:
            bind_run(folder, work, fp, overwrite=overwrite, outputs=[f"{mode}_result"], conflict=conflict)

        turns_done: dict[str, dict[int, dict[str, Any]]] = {}
        status: dict[str, dict[str, Any]] = {}
        for obj in read_work_logs(work):
            key = obj.get("dialogue")
            if not isinstance(key, str):
                continue
            if obj.get("kind") == "turn" and isinstance(obj.get("turn"), int):
                turns_done.setdefault(key, {})[obj["turn"]] = obj
            elif obj.get("kind") == "dialogue" and obj.get("status") in ("ok", "failed"):
                # the latest wins, never an ok by a failure: a shard's log is read before rank-0.jsonl, the log of
                # the run without --shard, whichever ran last
                if replaces(status.get(key), obj):
                    status[key] = obj
        config = GenerationConfig(mode="offline", chunk_ms=float(chunk_ms), seed=int(seed))
        ends = ProcessEnds((o for o in read_work_logs(work) if o.get("kind") == "dialogue"), key="dialogue")

        mine = [d for d in dialogues if in_shard(d.key, shard)]
        todo = [d for d in mine if not (d.key in status and (status[d.key]["status"] == "ok" or not retry_failed))]
        log = AppendLog(work / f"rank-{0 if shard is None else shard[0]}.jsonl")
        journal = RowJournal(log, ends, kind="dialogue")
        bar = None
        if progress and todo:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(todo), desc=f"speechrole infer {mode}", unit="dialogue")
        n_new_turns = 0
        t0 = time.perf_counter()

        def finish(d: EvalDialogue, error: Optional[str]) -> None:
            rec = {"kind": "dialogue", "dialogue": d.key, "status": "failed" if error else "ok", "error": error}
            log.write([rec])
            journal.finish(d.key)
            status[d.key] = rec
            if bar is not None:
                bar.update(1)

        def write_turn(d: EvalDialogue, t: int, ans: Any) -> TurnAnswer:
            nonlocal n_new_turns
            wav, sr = validate_answer(ans)
            check_answer_limits(wav, sr, None, 0.0)  # the answer WAV is read back through the loader's limits
            path = answer_path(out, mode, d.role, d.index, t)
            write_wav(path, wav, sr)
            rec = {"kind": "turn", "dialogue": d.key, "turn": t, "text": ans.text, "audio": benchmark_path(out, path),
                   "sample_rate": sr, "response_time_s": getattr(ans, "response_time_s", None)}
            if getattr(ans, "usage", None):  # what the service billed for this turn ({model: usage fields})
                rec["usage"] = ans.usage
            log.write([rec])
            turns_done.setdefault(d.key, {})[t] = rec
            n_new_turns += 1
            if on_turn is not None:
                on_turn(rec)
            return TurnAnswer(ans.text, path, wav, sr)

        def prepare(d: EvalDialogue) -> tuple[list[Path], list[tuple[np.ndarray, int]], list[TurnAnswer], list]:
            """The user speech of every turn (decoded), the turns already finished, the reference paths."""
            if d.error:
                raise ValueError(d.error)
            paths, audio, refs = [], [], []
            for t, turn in enumerate(d.turns):
                refs.append(resolve_in(reference_path_of(turn, reference_key), [d.root], f"turn {t} reference")
                            if getattr(agent, "uses_reference_answer", False) else None)
                p = resolve_in(turn.get("user_speech_path"), [d.root], f"turn {t} user speech")
                try:
                    audio.append(decode(p))
                except AudioError as e:
                    raise ValueError(f"turn {t} user speech: {one_line(e)}") from None
                paths.append(p)
            done: list[TurnAnswer] = []
            for t in range(len(d.turns)):
                rec = turns_done.get(d.key, {}).get(t)
                path = answer_path(out, mode, d.role, d.index, t)
                if rec is None or not path.is_file():
                    break
                try:
                    wav, sr = decode(path)
                except AudioError:
                    break
                done.append(TurnAnswer(rec.get("text"), path, wav, sr))
            return paths, audio, done, refs

        try:
            for d in [d for d in todo if ends.blocked(d.key)]:  # ended the process twice: failed, not run again
                rec = ends.ended_record(d.key, kind="dialogue")
                log.write([rec])
                status[d.key] = rec
                if bar is not None:
                    bar.update(1)
            session_info: dict[str, Any] = {}
            todo = [d for d in todo if not ends.blocked(d.key)]
            with journal.stopping():  # Ctrl-C or an unwritable folder: the dialogues in flight simply resume
                if network:
                    pool = sessions_for(agent, name=agent_name, options=options, built_by_name=built_by_name,
                                        processes=processes, concurrency=clamp_concurrency(agent, int(concurrency))[0],
                                        n_rows=len(todo), provider_limits=provider_limits)

                    async def one(d: EvalDialogue, writer: Any) -> None:
                        """A dialogue's turns in order; decoding off the loop, every write on ``writer``."""
                        loop = asyncio.get_running_loop()
                        async with pool.slots:  # --provider-limit: from its start record to its last turn
                            await loop.run_in_executor(writer, journal.start, d.key)
                            try:
                                paths, audio, done, _ = await asyncio.to_thread(prepare, d)
                                for t in range(len(done), len(d.turns)):
                                    ans = await _network_turn(agent, d, t, *audio[t], _history_turns(d, done, audio),
                                                              chunk_ms=chunk_ms, row_timeout_s=row_timeout_s,
                                                              sessions=pool)
                                    done.append(await loop.run_in_executor(writer, write_turn, d, t, ans))
                                error = None
                            except asyncio.CancelledError:
                                raise
                            except BaseException as e:
                                if not fails_row(e):
                                    raise
                                error = failure_reason(e)
                        await loop.run_in_executor(writer, finish, d, error)

                    async def run_all() -> int:
                        async with pool:
                            return await run_concurrently(agent, todo, concurrency, one,
                                                          note=f"spearbench speechrole infer: note: {agent_name}")

                    # lowered to the adapter's max_concurrency (with a note), also when nothing is left to run
                    try:
                        concurrency = asyncio.run(run_all())
                    except ProcessLost as e:  # its dialogues resume (one process end each), the others: stopped
                        raise InferRunError(str(e)) from None
                    if todo:
                        session_info.update(pool.stats())  # session_processes, loop_lag_ms
                else:
                    caller = SyncCaller()  # each turn under row_timeout_s: a stuck adapter fails its dialogue, not the run
                    try:
                        for d in todo:
                            journal.start(d.key)
                            try:
                                paths, audio, done, refs = prepare(d)
                                for t in range(len(done), len(d.turns)):
                                    history = _history_turns(d, done, audio)
                                    try:
                                        ans = caller.call(functools.partial(_sync_turn, agent, d, t, paths[t], history,
                                                                            config, refs[t]), row_timeout_s)
                                    except RowTimeout as e:
                                        raise RowTimeout(f"turn {t} {e}") from None
                                    done.append(write_turn(d, t, ans))
                                finish(d, None)
                            except BaseException as e:
                                if not fails_row(e):
                                    raise
                                finish(d, failure_reason(e))
                    finally:
                        caller.close()
        finally:
            log.close()
            if bar is not None:
                bar.close()

        if shard is not None:  # its dialogues' counts; the run without --shard writes the role files
            fails = [(d.key, status[d.key].get("error")) for d in mine
                     if status.get(d.key, {}).get("status") == "failed"]
            return {"shard": f"{shard[0]}/{shard[1]}", "agent": agent_name, "mode": mode, "n_dialogues": len(mine),
                    "n_answered": sum(1 for d in mine if status.get(d.key, {}).get("status") == "ok"),
                    "n_turns": n_new_turns, "n_failed": len(fails), "failures": fails,
                    "dialogues_left": sum(1 for d in dialogues if d.key not in status),
                    "elapsed_s": time.perf_counter() - t0, **session_info,
                    "usage": usage_of_records([r for d in mine for r in turns_done.get(d.key, {}).values()], prices)}
        # the role files, from every finished dialogue (this run's and earlier ones')
        by_role: dict[str, dict[str, Any]] = {}
        failures = []
        for d in dialogues:
            st = status.get(d.key)
            if st is None or st["status"] != "ok":
                if st is not None:
                    failures.append((d.key, st.get("error")))
                continue
            turns = turns_done.get(d.key, {})
            by_role.setdefault(d.role, {"role": d.role})[f"dialogue_{d.index}"] = [
                {"turn": t, "user_input": {"text": d.users[t]},
                 "model_output": {"text": turns[t].get("text") or "", "audio_path": turns[t]["audio"]}}
                for t in range(len(d.turns))]
        result_dir = out / f"{mode}_result"
        for role, data in sorted(by_role.items()):
            write_json_atomic(result_dir / "json" / f"{role}.json", data)
        write_jsonl_atomic(result_dir / "failures.jsonl", [{"dialogue": k, "error": e} for k, e in failures])
        info = {"agent": agent_name, "network_adapter": network, "mode": mode, "n_dialogues": len(dialogues),
                "n_answered": sum(1 for d in dialogues if status.get(d.key, {}).get("status") == "ok"),
                "n_turns": n_new_turns, "n_failed": len(failures), "elapsed_s": time.perf_counter() - t0,
                "concurrency": concurrency if network else 1, **session_info,
                "usage": usage_of_records([r for turns in turns_done.values() for r in turns.values()], prices),
                "request": ("AudioRequest: user speech + instructions (system prompt) + history" if network else
                            "respond(audio, SpeechRoleRow): user speech (16 kHz, channel 0) + row.system_prompt/history")}
        write_json_atomic(result_dir / "run_info.json", info)
        return {**info, "failures": failures}
