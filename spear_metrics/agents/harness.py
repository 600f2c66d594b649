"""The inference harness of ``spearbench infer``: a SPEAR split -> an agent -> a scoreable folder.

Output (``OUT``)::

    OUT/metadata.csv      SPEAR header, one row per input, in input order; answers relative to OUT;
                          inputs: absolute paths for a CSV source (clips are not copied), relative
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
    OUT/run_info.json     counts, agent, mode, timings
    OUT/.work/            resume state: run.json (fingerprint), rank-<r>.jsonl (one line per row)

Contract:

- a row is its position in the input (CSV line / dataset index); each gets exactly one record;
- per row: the answer WAV is written atomically, then its record is appended (flushed, fsynced)
  to the rank's log, so a killed run resumes without duplicates or holes; rows already done
  (and, unless ``retry_failed``, rows already failed) are skipped on a rerun;
- under ``accelerate launch`` pending rows are dealt ``rows[rank::world]``; results are keyed
  by row id; the main process merges every rank's log;
- an adapter that raises, or returns an invalid answer (:func:`validate_answer`), fails its
  row with the reason; the run goes on. ``KeyboardInterrupt`` and other ``BaseException`` s
  stop the run (resume later).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from spear_datasets.audio import TARGET_SR, AudioError, input_clip_info, load_audio, resample, write_wav
from spear_datasets.files import OutputError, active_folder, atomic_path, check_out_folder
from spear_datasets.schema import (
    RowError,
    SpearRow,
    check_times_against_clip,
    parse_row,
    read_metadata,
    resolve_path,
    write_metadata,
)
from spear_metrics.agents.base import AgentAnswer, AgentError, AgentOutputError, GenerationConfig, validate_answer
from spear_metrics.core.batching import distributed_state
from spear_metrics.core.records import AppendLog, claim_out, one_line, read_rank_logs, write_json_atomic, write_jsonl_atomic

WORK_DIR = ".work"
AUDIO_DIR = "audio"
INPUTS_DIR = "inputs"
#: tolerance (s) of the streaming causality check (float rounding of chunk times)
_EPS = 1e-9


class InferError(RuntimeError):
    """The run cannot proceed as a whole (one-line reason; the CLI exits non-zero)."""


# --------------------------------------------------------------------------- sources


@dataclass
class _Entry:
    """One input of a source: its typed row (or why it cannot be run) and its output name."""

    row: Optional[SpearRow]
    audio_cell: str
    name: str
    error: Optional[str] = None
    #: the earlier row this one repeats (``duplicate of row N``), else ``None``
    duplicate_of: Optional[int] = None


class Source:
    """Rows of a SPEAR split, whatever they come from. Subclasses fill :attr:`entries` and
    implement :meth:`input_file` / :meth:`reference_file`."""

    description: str = ""
    entries: list[_Entry]
    #: True when input clips are written under OUT/inputs (their metadata path is relative)
    copies_inputs: bool = False

    def input_file(self, i: int, out: Path) -> Path:
        raise NotImplementedError

    def reference_file(self, i: int, out: Path) -> Optional[Path]:
        raise NotImplementedError

    def fingerprint(self) -> dict[str, Any]:
        return {"data": self.description}

    def failed_audio_path(self, i: int, out: Path) -> str:
        """The ``audio_path`` written to ``OUT/metadata.csv`` for row ``i`` that failed before its
        input was read: the same path form as the rows that ran. Default: the cell as written."""
        return self.entries[i].audio_cell

    def _name_entries(self, rows: list[tuple[Optional[SpearRow], str, Optional[str], str]]) -> None:
        """``(row, audio_cell, error, identity)`` -> entries with unique output names; a repeated
        identity (same input clip) fails as ``duplicate of row N``."""
        seen_id: dict[str, int] = {}
        seen_name: set[str] = set()
        self.entries = []
        for i, (row, cell, err, ident) in enumerate(rows):
            dup = None
            if err is None and ident in seen_id:
                dup = seen_id[ident]
                err = f"duplicate of row {dup} (same audio_path)"
            elif err is None:
                seen_id[ident] = i
            stem = Path(cell).stem or f"row{i:06d}"
            name = f"{stem}.wav"
            if name in seen_name:
                name = f"{stem}__row{i}.wav"
            seen_name.add(name)
            self.entries.append(_Entry(row=row if err is None else None, audio_cell=cell, name=name, error=err,
                                       duplicate_of=dup))


def _reason(e: BaseException) -> str:
    """One-line reason; an unexpected exception type is named, the harness's own are not."""
    msg = one_line(e)
    if isinstance(e, (AgentError, AgentOutputError, AudioError, RowError)) or msg == type(e).__name__:
        return msg
    return f"{type(e).__name__}: {msg}"


class CsvSource(Source):
    """A SPEAR metadata CSV; input paths resolve with :func:`resolve_path` and are written to the
    output metadata as absolute paths (the clips are not copied)."""

    def __init__(self, csv_path: str | os.PathLike):
        self.path = Path(csv_path).resolve()
        self.description = str(self.path)
        raw = read_metadata(self.path, required=("audio_path", "context_end_time", "question_end_time"))
        self._inputs: dict[int, Path] = {}
        self._refs: dict[int, Optional[Path]] = {}
        self._resolved: dict[int, Path] = {}  # every row whose audio_path resolves, failed ones too
        rows = []
        for i, cells in enumerate(raw):
            cell = str(cells.get("audio_path") or "")
            try:
                self._resolved[i] = resolve_path(cell.strip(), self.path.parent)
            except RowError:
                pass
            try:
                row = parse_row(cells, require_answer=False)
                p = resolve_path(row.audio_path, self.path.parent)
                self._inputs[i] = p
                self._refs[i] = resolve_path(row.answer_audio_path, self.path.parent) if row.answer_audio_path else None
                rows.append((row, cell, None, str(p)))
            except RowError as e:
                rows.append((None, cell, str(e), f"#{i}"))
        self._name_entries(rows)

    def fingerprint(self) -> dict[str, Any]:
        return {"data": self.description, "data_sha256": hashlib.sha256(self.path.read_bytes()).hexdigest()}

    def input_file(self, i: int, out: Path) -> Path:
        return self._inputs[i]

    def reference_file(self, i: int, out: Path) -> Optional[Path]:
        return self._refs.get(i)

    def failed_audio_path(self, i: int, out: Path) -> str:
        """The absolute resolved path, like the rows that ran; the cell as written when it does not
        resolve (empty, NUL byte, or escaping its data root: it escapes OUT's root too, so ``score``
        fails it for the same reason and never reads it)."""
        p = self._resolved.get(i)
        return str(p) if p is not None else self.entries[i].audio_cell


class DatasetSource(Source):
    """A Hub-layout dataset (local folder from ``build-dataset`` or a Hub id) loaded with
    ``datasets.load_dataset(data, subset, split)``; audio is read as the embedded file bytes
    (``Audio(decode=False)``), never through ``["array"]`` (which may mix channels)."""

    copies_inputs = True

    def __init__(self, data: str, split: str, subset: str):
        from datasets import Audio, load_dataset

        try:
            ds = load_dataset(data, subset, split=split)
        except Exception as e:  # missing config/split, no such repo, offline...
            raise InferError(f"cannot load dataset {data!r} (config {subset!r}, split {split!r}): {_reason(e)}") from None
        if "audio" not in ds.column_names:
            raise InferError(f"dataset {data!r} has no 'audio' column")
        ds = ds.cast_column("audio", Audio(decode=False))
        if "answer_audio" in ds.column_names:
            ds = ds.cast_column("answer_audio", Audio(decode=False))
        self.ds = ds
        self.description = f"{os.path.abspath(data) if os.path.isdir(data) else data}::{subset}/{split}"
        meta_cols = [c for c in ds.column_names if c not in ("audio", "answer_audio")]
        table = ds.select_columns(meta_cols).to_list()
        rows = []
        for i, cells in enumerate(table):
            cell = str(cells.get("audio_path") or "") or f"row{i:06d}.wav"
            try:
                cells = dict(cells, audio_path=cell)
                rows.append((parse_row(cells, require_answer=False), cell, None, cell))
            except RowError as e:
                rows.append((None, cell, str(e), f"#{i}"))
        self._name_entries(rows)

    def _write(self, value: Optional[dict], dest: Path) -> Optional[Path]:
        if not value or not value.get("bytes"):
            if value and value.get("path") and os.path.isfile(value["path"]):
                return Path(value["path"])
            return None
        data = value["bytes"]
        owner = active_folder(dest)
        if dest.is_file() and dest.stat().st_size == len(data) and (owner is None or owner.is_recorded(dest)):
            return dest  # copied by an earlier invocation of this run
        with atomic_path(dest, tmp_suffix=str(os.getpid())) as tmp:
            tmp.write_bytes(data)
        return dest

    def input_file(self, i: int, out: Path) -> Path:
        p = self._write(self.ds[i]["audio"], out / INPUTS_DIR / self.entries[i].name)
        if p is None:
            raise AudioError(f"dataset row {i} has no input audio")
        return p

    def failed_audio_path(self, i: int, out: Path) -> str:
        """A duplicate row names the copied input of the row it repeats (``inputs/<clip>.wav``, the
        form of the rows that ran); any other failed row keeps its dataset cell (no clip was copied)."""
        dup = self.entries[i].duplicate_of
        if dup is not None:
            return f"{INPUTS_DIR}/{self.entries[dup].name}"
        return self.entries[i].audio_cell

    def reference_file(self, i: int, out: Path) -> Optional[Path]:
        if "answer_audio" not in self.ds.column_names:
            return None
        return self._write(self.ds[i]["answer_audio"], out / WORK_DIR / "reference" / self.entries[i].name)


def open_source(data: str, *, split: str = "test", subset: str = "improvised") -> Source:
    """A SPEAR metadata CSV (``*.csv``), a Hub-layout dataset folder, or a Hub dataset id.

    Raises:
        MetadataError: an unusable CSV. InferError: a dataset that cannot be loaded.
    """
    if str(data).lower().endswith(".csv"):
        return CsvSource(data)
    return DatasetSource(str(data), split, subset)


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
        session = agent.stream(row, config)
        hop = max(1, round(config.chunk_ms * TARGET_SR / 1000.0))
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


def _infer_row(agent: Any, source: Source, i: int, out: Path, config: GenerationConfig) -> dict[str, Any]:
    """Run one row; returns its log record (``status`` ``ok`` or ``failed`` with ``error``)."""
    entry = source.entries[i]
    rec: dict[str, Any] = {"row": i, "audio_path": entry.audio_cell}
    t0 = time.perf_counter()
    try:
        in_path = source.input_file(i, out)
        rec["audio_path"] = os.path.relpath(in_path, out) if source.copies_inputs else str(in_path)
        check_times_against_clip(entry.row, input_clip_info(in_path).duration)  # header checks, before decoding
        audio = load_audio(in_path, sr=TARGET_SR, channels="keep")
        ref = source.reference_file(i, out) if getattr(agent, "uses_reference_answer", False) else None
        row = dataclasses.replace(entry.row, audio_path=str(in_path), answer_audio_path=None if ref is None else str(ref))
        ans, wav, sr, onset = run_agent(agent, audio, row, config)
        wav = resample(wav, sr, TARGET_SR)
        rel = f"{AUDIO_DIR}/{entry.name}"
        write_wav(out / rel, wav, TARGET_SR)
        rec.update({
            "status": "ok",
            "answer_audio_path": rel,
            "onset": onset,
            "answer_start_time": None if onset is None else onset - entry.row.question_end_time,
            "answer_duration": wav.shape[1] / TARGET_SR,
            "text": ans.text,
            "finish_reason": ans.finish_reason,
        })
    except OutputError:  # read-only / full output folder: no row's fault, the run stops (a rerun resumes)
        raise
    except Exception as e:  # the row fails, the run goes on
        rec.update({"status": "failed", "error": _reason(e)})
    rec["elapsed_s"] = time.perf_counter() - t0
    return rec


# --------------------------------------------------------------------------- the run


def _read_logs(work: Path) -> dict[int, dict[str, Any]]:
    done: dict[int, dict[str, Any]] = {}
    for obj in read_rank_logs(work):  # valid records only (an int row >= 0, a known status)
        if obj.get("status") != "ok" or isinstance(obj.get("answer_audio_path"), str):
            prev = done.get(obj["row"])
            # the latest record of a row wins, but an ok answer is never replaced by a failure
            if prev is None or obj.get("status") == "ok" or prev.get("status") != "ok":
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

    Returns the run info on the main process (``None`` on the others).

    Raises:
        InferError: ``out_dir`` holds another run (use ``overwrite``), a dataset that cannot be
            loaded, or rows left without an answer record (a rank died: rerun to resume).
        spear_datasets.files.OutFolderError: ``out_dir`` holds files this tool did not write, the
            output of another command, or is being written by a live process (one line).
        MetadataError: an unusable CSV. UnknownAgentError: no adapter of that name.
    """
    from spear_metrics.agents.registry import load_agent

    config = config or GenerationConfig()
    agent_options = dict(agent_options or {})
    out = Path(out_dir)
    if Path(data).exists() and (out.resolve() / "metadata.csv") in {Path(data).resolve(), Path(data).resolve() / "metadata.csv"}:
        raise InferError(f"--out {out} would overwrite the input metadata {data}: choose another folder")
    check_out_folder(out)  # the rule first (cheap): a folder that cannot be used costs no loading
    state = distributed_state()
    source = open_source(data, split=split, subset=subset)
    if agent is None:
        agent = load_agent(agent_name, **agent_options)
    fp = {**source.fingerprint(), "split": split, "subset": subset, "agent": agent_name,
          "agent_options": {k: agent_options[k] for k in sorted(agent_options)},
          "config": dataclasses.asdict(config)}
    conflict = InferError(f"{out} holds answers of another run (other data, agent, options or config); use a new "
                          "--out folder or --overwrite")
    # --out: new, empty or infer's own; --overwrite removes exactly what earlier runs recorded
    # (answers, copied inputs, metadata.csv...), never a folder it found; refused while live
    with claim_out(out, fp, overwrite=overwrite, conflict=conflict, command="infer", state=state,
                   adopt=("metadata.csv", "failures.jsonl", "run_info.json")):
        return _infer_claimed(agent, agent_name, source, out, config, state, retry_failed=retry_failed,
                              progress=progress, on_row=on_row)


def _infer_claimed(agent: Any, agent_name: str, source: Source, out: Path, config: GenerationConfig, state: Any, *,
                   retry_failed: bool, progress: bool, on_row: Optional[Callable[[dict[str, Any]], None]]
                   ) -> Optional[dict[str, Any]]:
    """:func:`run_inference` once its ``--out`` is claimed (locks held, writes recorded)."""
    rank, world = state.process_index, state.num_processes
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
    mine = pending[rank::world]
    bar = None
    if progress and state.is_main_process and mine:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(mine), desc=f"infer {agent_name}" + (f" (rank 0 of {world})" if world > 1 else ""), unit="clip")
    t0 = time.perf_counter()
    n_new = 0
    try:
        with AppendLog(work / f"rank-{rank}.jsonl") as log:
            for i in mine:
                rec = _infer_row(agent, source, i, out, config)
                log.write([rec])
                n_new += 1
                if on_row is not None:
                    on_row(rec)
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    elapsed = time.perf_counter() - t0
    state.wait_for_everyone()
    if not state.is_main_process:
        return None
    return finalize(source, out, agent_name=agent_name, config=config, elapsed_s=elapsed, n_new=len(pending), world=world)


def finalize(source: Source, out: Path, *, agent_name: str, config: GenerationConfig, elapsed_s: float = 0.0,
             n_new: int = 0, world: int = 1) -> dict[str, Any]:
    """Merge the work logs into ``metadata.csv``, ``failures.jsonl`` and ``run_info.json``, after
    checking that every input has exactly one answer record (and its file).

    Failed rows stay in ``metadata.csv`` with an empty ``answer_audio_path``; why infer failed
    each one is in ``failures.jsonl`` (``{"row", "audio_path", "error"}``, ``row`` = the
    metadata.csv row), never in a metadata column; ``score`` reads it and reports
    ``infer failed: <reason>`` for those rows.

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
        "n_processes": world,
        "elapsed_s": elapsed_s,
    }
    write_json_atomic(out / "run_info.json", info)
    return info
