"""``spearbench speechrole score``: a system's model outputs judged against the reference
speech, pairwise, by an audio LLM over an OpenAI-compatible endpoint, resumably.

One judge call is one work item of THE runner (:func:`spear_metrics.core.runner.run_resumable`,
``concurrency`` threads, each reply logged as it arrives): v1 asks one aspect per call (8 calls
per dialogue), v2 all eight in one call; ``swap_order`` adds the same calls with the reference
first. The work log of mode ``m`` is ``RESULTS/.work/<m>/``; a killed run reruns without asking
any logged call again and without losing one. A call whose replies all fail to parse after the
retries is an ``unparsed`` (``na``) pair, one that got no reply at all (network, HTTP errors) is
``not_judged``; both are failed work items, asked again only with ``retry_failed``. An HTTP
401/403/404/405 (a wrong key, model or endpoint) stops the run with one line.

Outputs in ``RESULTS/`` (see :mod:`spear_metrics.speechrole.aggregate` for the shapes):
``<mode>/<role>.json`` (the flat shape the judge script writes: ``[{"idx", "<Aspect>_results":
{"reason", "score": [a, b]}}]``), ``swapped/<mode>/<role>.json``, ``failed_dialogues.jsonl``,
``replies.jsonl`` (every attempt of every call: the reply text or the error), then
``per_sample.jsonl`` (one row per dialogue) and ``summary.json`` over every mode judged into
``RESULTS`` so far (a second mode adds to the first when both used the same judge settings).

``RESULTS`` follows the project's output-folder rule (docs/safety.md): new, empty or this
command's (a released ``test_results/<model>`` folder is refused); every file is recorded as
written and the folder's lock is held while it is written; each mode is one run bound to its
settings (``.work/<mode>/run.json``), and ``overwrite`` removes only what the earlier run of that
mode recorded (``<mode>/``, ``swapped/<mode>/``) and is unchanged.
"""

from __future__ import annotations

import functools
import json
import os
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from spear_datasets.ownership import WORK_DIR, OwnedFolder, open_folder
from spear_metrics.core.records import SampleResult, one_line, write_jsonl_atomic
from spear_metrics.speechrole.aggregate import FAILED_FILE, NOT_JUDGED, SCORED, SWAPPED_DIR, UNPARSED
from spear_metrics.speechrole.data import MODES, Case
from spear_metrics.speechrole.protocol import (
    ASPECTS,
    PROTOCOL_SOURCES,
    V2_MAX_AUDIO_S,
    audio_part,
    build_messages,
    parse_v1,
    parse_v2,
    prompt_version,
)

from spear_metrics.speechrole import VERSION  # noqa: E402  (the descriptor's; one place)
#: The owner name of a score output folder (``RESULTS/.work/owner.json``).
COMMAND = "speechrole score"
REPLIES_FILE = "replies.jsonl"
#: HTTP statuses that mean the whole run is misconfigured (key, model, endpoint): the run stops
RUN_FATAL_STATUS = {401, 403, 404, 405}
BENCHMARK = "speechrole"
ORDERS = ("benchmark", "swapped")


class JudgeRunError(RuntimeError):
    """The judging cannot go on as a whole (one line; the CLI exits 2; a rerun resumes)."""


@dataclass
class JudgeSettings:
    """What every call of a run is made with.

    Attributes:
        judge: a :class:`spear_metrics.core.judge.Judge` (model, endpoint, retries, timeout,
            temperature, seed; its key never leaves it).
        protocol: ``"v1"`` or ``"v2"`` (:mod:`spear_metrics.speechrole.protocol`).
        reference_key: the reference speech set (``role_speech_path1/2/3``).
        audio_data: ``"data-uri"`` or ``"base64"`` (:data:`~spear_metrics.speechrole.protocol.AUDIO_DATA_FORMS`).
        swap_order: also judge every call with the reference as Model A.
        concurrency: judge calls in flight at once.
        retry_failed: ask again the calls that failed (unparsed or not judged) in an earlier run.
        overwrite: discard another run's results of this mode in ``RESULTS``.
        n_resamples, seed: bootstrap of the summary.
        progress: a progress bar on stderr.
    """

    judge: Any
    protocol: str = "v1"
    reference_key: str = "role_speech_path1"
    audio_data: str = "data-uri"
    swap_order: bool = False
    concurrency: int = 4
    retry_failed: bool = False
    overwrite: bool = False
    n_resamples: int = 1000
    seed: int = 0
    progress: bool = True

    def fingerprint(self) -> dict[str, Any]:
        """What the judged values depend on (bootstrap settings do not: the summary is recomputed)."""
        j = self.judge
        return {"benchmark": BENCHMARK, "version": VERSION, "protocol": self.protocol,
                "prompt_version": prompt_version(self.protocol), "judge_model": j.model,
                "judge_temperature": j.temperature, "judge_seed": j.seed, "reference_key": self.reference_key,
                "audio_data": self.audio_data, "swap_order": bool(self.swap_order)}

    def provenance(self) -> dict[str, Any]:
        """The summary's record of the judging (no key, no credentials of the endpoint)."""
        j = self.judge
        return {**self.fingerprint(), "protocol_source": PROTOCOL_SOURCES[self.protocol],
                "judge_endpoint": public_endpoint(j.base_url), "judge_max_retries": j.max_retries,
                "judge_timeout_s": j.timeout, "judge_concurrency": int(self.concurrency)}


def public_endpoint(url: str) -> str:
    """``url`` without user info, query or fragment (where a key could hide)."""
    u = urllib.parse.urlsplit(str(url))
    host = u.hostname or ""
    if u.port:
        host += f":{u.port}"
    return urllib.parse.urlunsplit((u.scheme, host, u.path, "", ""))


@dataclass
class Unit:
    """One judge call: ``row`` (its id in the mode's run), the dialogue, the order
    (``"benchmark"``: system first; ``"swapped"``: reference first), the aspect (v1) or ``None`` (v2)."""

    row: int
    case: Case
    order: str
    aspect: str | None

    @property
    def key(self) -> str:
        return f"{self.case.dialogue.key}/{self.order}/{self.aspect or 'all'}"


def make_units(cases: Sequence[Case], protocol: str, swap_order: bool) -> list[Unit]:
    """The calls of the judgeable cases, dialogue by dialogue (a dialogue's calls adjacent, so
    its encoded audio is reused from the cache)."""
    units: list[Unit] = []
    aspects: list[str | None] = list(ASPECTS) if protocol == "v1" else [None]
    for c in cases:
        if not c.ok:
            continue
        for order in ORDERS[: 2 if swap_order else 1]:
            for a in aspects:
                units.append(Unit(len(units), c, order, a))
    return units


@functools.lru_cache(maxsize=64)
def encoded_wav(path: str, protocol: str) -> bytes:
    """The WAV bytes a call sends for ``path``.

    v1 sends the file's own bytes (``open(path, "rb").read()``, as the script); a file that is
    not a RIFF/WAVE file is decoded (:func:`spear_datasets.audio.decode`) and sent as 16-bit PCM
    WAV at its own rate and channels (the script would send other bytes labelled ``wav``).
    v2 sends the first :data:`~spear_metrics.speechrole.protocol.V2_MAX_AUDIO_S` s as a 16-bit
    PCM WAV (the script cuts with pydub and exports WAV at the source's sample width).

    Raises:
        spear_datasets.audio.AudioError: the file cannot be read or decoded.
    """
    from spear_datasets.audio import AudioError, decode

    if protocol == "v1":
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise AudioError(f"cannot read audio {path}: {e.strerror or e}") from None
        if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
            return data
    wav, sr = decode(path)
    if protocol == "v2":
        wav = wav[:, : int(round(V2_MAX_AUDIO_S * sr))]
    return wav_bytes(wav, sr)


def wav_bytes(wav, sr: int) -> bytes:
    """``(channels, samples)`` float audio as the bytes of a 16-bit PCM WAV file
    (:func:`spear_datasets.audio.wav_bytes`)."""
    from spear_datasets.audio import wav_bytes as encode

    return encode(wav, sr)


@functools.lru_cache(maxsize=64)
def _part(path: str, protocol: str, audio_data: str) -> dict[str, Any]:
    return audio_part(encoded_wav(path, protocol), audio_data)


def unit_messages(unit: Unit, settings: JudgeSettings) -> list[dict[str, Any]]:
    """The messages of one call (:func:`spear_metrics.speechrole.protocol.build_messages`).

    Raises:
        spear_datasets.audio.AudioError: an audio file cannot be read.
    """
    c, p = unit.case, settings.protocol
    system = [_part(str(f), p, settings.audio_data) for f in c.system_audio]
    reference = [_part(str(f), p, settings.audio_data) for f in c.reference_audio]
    a, b = (system, reference) if unit.order == "benchmark" else (reference, system)
    return build_messages(p, system_prompt=c.dialogue.system_prompt, users=c.dialogue.users, role=c.role_name,
                          audio_a=a, audio_b=b, aspect=unit.aspect)


def judge_unit(unit: Unit, settings: JudgeSettings) -> SampleResult:
    """Make one call; its :class:`SampleResult` (``values``: the dialogue's identity, ``kind``
    (``scored``/``unparsed``/``not_judged``), ``results`` ``{aspect: {"reason", "score"}}`` when
    scored, ``attempts``); failed unless scored.

    Raises:
        JudgeRunError: HTTP 401/403/404/405 (a whole-run problem).
    """
    from spear_datasets.audio import AudioError
    from spear_metrics.core.judge import JudgeError

    d = unit.case.dialogue
    rec = SampleResult(row=unit.row, audio_path=unit.key)
    rec.values = {"mode": d.mode, "role": d.role, "dialogue": d.index, "order": unit.order, "aspect": unit.aspect}
    try:
        messages = unit_messages(unit, settings)
    except AudioError as e:
        rec.values.update(kind=NOT_JUDGED, attempts=[])
        return rec.fail(f"audio: {e}")

    def parse(reply: str) -> dict[str, dict[str, Any]]:
        return {unit.aspect: parse_v1(reply)} if settings.protocol == "v1" else parse_v2(reply)

    try:
        ans = settings.judge.ask(messages, parse)
    except JudgeError as e:
        if e.kind == "no_reply" and e.status in RUN_FATAL_STATUS:
            raise JudgeRunError(f"the judge refused the request: {one_line(e)} (check --judge-url, --judge-model "
                                "and the key's environment variable); rerun to resume") from None
        rec.values.update(kind=UNPARSED if e.kind == "malformed" else NOT_JUDGED,
                          attempts=[a.to_json() for a in e.attempts])
        return rec.fail(str(e))
    rec.values.update(kind=SCORED, results=ans.value, attempts=[a.to_json() for a in ans.attempts])
    meta = getattr(ans, "meta", None)
    if meta is not None:  # what the service answered with (Judge.report sums them per run)
        rec.values.update(judge_returned_model=meta.model, judge_system_fingerprint=meta.system_fingerprint,
                          judge_cached=meta.cached)
    return rec


# ----------------------------------------------------------------------------- outputs


def _result_objects(results: Sequence[SampleResult], units: Sequence[Unit], protocol: str) -> dict:
    """``{(order, role): {idx: dialogue object}}`` in the judge script's flat shape."""
    out: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for u, r in zip(units, results):
        d = u.case.dialogue
        obj = out.setdefault((u.order, d.role), {}).setdefault(d.index, {"idx": d.index})
        aspects = [u.aspect] if protocol == "v1" else list(ASPECTS)
        v = r.values
        for a in aspects:
            got = (v.get("results") or {}).get(a) if v.get("kind") == SCORED else None
            if got is not None:
                obj[f"{a}_results"] = {"reason": got.get("reason", ""), "score": list(got["score"])}
            else:
                last = next((t.get("reply") for t in reversed(v.get("attempts") or []) if t.get("reply")), None)
                obj[f"{a}_results"] = {"reason": (last or "").strip(), "score": None, "error": r.error,
                                       "status": v.get("kind") or NOT_JUDGED}
    for objs in out.values():  # aspect keys in the script's order
        for i, o in list(objs.items()):
            objs[i] = {"idx": o["idx"], **{f"{a}_results": o[f"{a}_results"] for a in ASPECTS if f"{a}_results" in o}}
    return out


def _mode_dirs(mode: str) -> list[str]:
    """The folders (relative to ``RESULTS``) holding ``mode``'s judge result files."""
    return [mode, f"{SWAPPED_DIR}/{mode}"]


def foreign_results(folder: OwnedFolder, mode: str) -> list[str]:
    """Result files under ``RESULTS/<mode>/`` and ``RESULTS/swapped/<mode>/`` that this command did
    not write, or that changed since (:meth:`~spear_datasets.ownership.OwnedFolder.is_recorded`): never
    touched, and never read into this folder's summary."""
    found = [p for d in _mode_dirs(mode) if (folder.root / d).is_dir() for p in sorted((folder.root / d).glob("*.json"))]
    return [p.relative_to(folder.root).as_posix() for p in found if not folder.is_recorded(p)]


def write_outputs(folder: OwnedFolder, mode: str, cases: Sequence[Case], units: Sequence[Unit],
                  results: Sequence[SampleResult], protocol: str) -> None:
    """Write the mode's result files, its failed dialogues and every reply (module docstring) into
    the open folder. Result files this command wrote earlier for this mode that this run does not
    write again (a role no longer judged) are removed when unchanged; no other file is."""
    from spear_metrics.core.records import read_jsonl

    out = folder.root
    new: list[str] = []
    for (order, role), objs in sorted(_result_objects(results, units, protocol).items()):
        path = (out / mode if order == "benchmark" else out / SWAPPED_DIR / mode) / f"{role}.json"
        write_json_atomic_list(path, [objs[i] for i in sorted(objs)])
        new.append(path.relative_to(out).as_posix())
    dirs = tuple(d + "/" for d in _mode_dirs(mode))
    for rel in sorted(r for r in folder.recorded() if r.startswith(dirs) and r.endswith(".json")):
        if rel not in new:
            folder.remove_file(out / rel)
    others = [o for o in read_jsonl(out / FAILED_FILE) if o.get("mode") != mode]
    mine = [{"mode": mode, "role": c.dialogue.role, "dialogue": c.dialogue.index if c.dialogue.index >= 0 else None,
             "error": c.error} for c in cases if not c.ok]
    write_jsonl_atomic(out / FAILED_FILE, others + mine)
    replies = [o for o in read_jsonl(out / REPLIES_FILE) if o.get("mode") != mode]
    for u, r in zip(units, results):
        for k, a in enumerate(r.values.get("attempts") or []):
            replies.append({"mode": mode, "role": u.case.dialogue.role, "dialogue": u.case.dialogue.index,
                            "order": u.order, "aspect": u.aspect, "attempt": k + 1, **a})
    write_jsonl_atomic(out / REPLIES_FILE, replies)


def write_json_atomic_list(path: Path, data: list) -> None:
    """A JSON list written as the judge script writes it (``indent=4, ensure_ascii=False``), atomically."""
    from spear_datasets.files import atomic_path

    text = json.dumps(data, indent=4, ensure_ascii=False, allow_nan=False)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


# ----------------------------------------------------------------------------- one mode


@dataclass
class ModeOutcome:
    """What judging one mode gave: the cases, the calls and their results, counts."""

    mode: str
    cases: list[Case]
    units: list[Unit]
    results: list[SampleResult]
    n_resumed: int = 0
    n_new: int = 0
    unknown_roles: list[str] = field(default_factory=list)


def judge_mode(cases: Sequence[Case], mode: str, out: str | os.PathLike, settings: JudgeSettings, *,
               inputs: dict[str, Any], unknown: Sequence[str] = ()) -> ModeOutcome:
    """Judge the checked ``cases`` of one mode into ``out`` (resumable; see the module docstring).
    ``out`` is opened under the output-folder rule for the call (or the folder this process holds
    open already: the CLI holds it across modes and the summary).

    Args:
        inputs: what identifies the inputs (test data, outputs folder, roles) in the fingerprint.

    Raises:
        JudgeRunError: ``out`` holds this mode judged from other inputs or settings (use
            ``overwrite``), another mode of ``out`` was judged with other settings, result files
            this command did not write, or a whole-run judge error.
        spear_datasets.ownership.OutFolderError: ``out`` holds files this tool did not write, another
            command's output, or is being written by another live process.
    """
    with open_folder(out, command=COMMAND, activity="scored") as folder:
        return _judge_mode(folder, cases, mode, settings, inputs=inputs, unknown=unknown)


def _judge_mode(folder: OwnedFolder, cases: Sequence[Case], mode: str, settings: JudgeSettings, *,
                inputs: dict[str, Any], unknown: Sequence[str]) -> ModeOutcome:
    """:func:`judge_mode` in its open folder."""
    from spear_metrics.core.records import bind_run
    from spear_metrics.core.runner import RunError, run_resumable

    out = folder.root
    foreign = foreign_results(folder, mode)
    if foreign:
        raise JudgeRunError(f"{out} holds judge results this command did not write ({foreign[0]}"
                            f"{f' and {len(foreign) - 1} more' if len(foreign) > 1 else ''}); judge into another --out folder")
    fp = {**settings.fingerprint(), "mode": mode, **inputs,
          "calls": [u.key for u in make_units(cases, settings.protocol, settings.swap_order)]}
    judge_fp = settings.fingerprint()
    for m in MODES:
        run_json = out / WORK_DIR / m / "run.json"
        if m != mode and run_json.is_file():
            try:
                other = json.loads(run_json.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                other = None
            if not isinstance(other, dict) or {k: other.get(k) for k in judge_fp} != judge_fp:
                raise JudgeRunError(f"{out} holds {m} results judged with other settings (judge, protocol, reference "
                                    "set or order); judge into another --out folder")
    units = make_units(cases, settings.protocol, settings.swap_order)
    work = folder.work / mode
    # bound even with nothing to call (a rerun with other inputs must not mix)
    bind_run(folder, work, fp, overwrite=settings.overwrite, outputs=_mode_dirs(mode),
             conflict=JudgeRunError(f"{out} holds {mode} results of other inputs or settings; use another --out "
                                    "folder or --overwrite"))
    if not units:
        results: list[SampleResult] = []
        n_resumed = n_new = 0
    else:
        try:
            outcome = run_resumable(
                units, lambda batch: [judge_unit(u, settings) for u in batch], work, n_rows=len(units),
                batch_size=1, retry_failed=settings.retry_failed,
                progress_desc=f"speechrole {mode} judge calls" if settings.progress else None,
                concurrency=max(1, int(settings.concurrency)), state=_single_process())
        except RunError as e:
            raise JudgeRunError(str(e)) from None
        results, n_resumed, n_new = outcome.results, outcome.n_resumed, len(outcome.new)
    write_outputs(folder, mode, cases, units, results, settings.protocol)
    return ModeOutcome(mode, list(cases), units, results, n_resumed, n_new, list(unknown))


def _single_process():
    """The runner's process state for a judge run: one process (the calls are network-bound;
    ``concurrency`` threads share them), whatever ``accelerate`` would say."""
    from types import SimpleNamespace

    return SimpleNamespace(process_index=0, num_processes=1, is_main_process=True, wait_for_everyone=lambda: None)


# ----------------------------------------------------------------------------- summary


def summarize_folder(out: str | os.PathLike, *, n_resamples: int = 1000, seed: int = 0,
                     provenance: dict[str, Any] | None = None, extra: dict[str, Any] | None = None,
                     results_dir: str | os.PathLike | None = None,
                     command: str = COMMAND) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Read the judge results under ``results_dir`` (default ``out``), aggregate them
    (:func:`spear_metrics.speechrole.aggregate.aggregate_rows`) and write ``out/per_sample.jsonl``
    and ``out/summary.json`` (THE summary writer). Returns ``(summary, rows)``.

    ``out`` is opened under the output-folder rule as ``command``'s (``"speechrole score"``, or
    ``"speechrole summarize"`` for a summary of results elsewhere), or is the folder this process
    holds open already.

    Raises:
        spear_metrics.speechrole.aggregate.JudgeResultsError: no results to read.
        spear_datasets.ownership.OutFolderError: ``out`` cannot be used (see :func:`judge_mode`).
    """
    with open_folder(out, command=command, activity="scored" if command == COMMAND else "written"):
        return _summarize(Path(out), n_resamples=n_resamples, seed=seed, provenance=provenance, extra=extra,
                          results_dir=results_dir)


def _summarize(out: Path, *, n_resamples: int, seed: int, provenance: dict[str, Any] | None,
               extra: dict[str, Any] | None,
               results_dir: str | os.PathLike | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """:func:`summarize_folder` in its open folder."""
    from spear_metrics.core.stats import CONFIDENCE
    from spear_metrics.core.summary import build_summary, write_summary
    from spear_metrics.speechrole.aggregate import aggregate_rows, read_judge_results

    rows, info = read_judge_results(results_dir or out)
    aggregates = aggregate_rows(rows, n_resamples=n_resamples, seed=seed)
    stand_ins = [SampleResult(row=r["row"], audio_path="", status=r["status"], error=r.get("error")) for r in rows]
    prov = dict(provenance or {})
    options = {k: prov[k] for k in ("protocol", "reference_key", "audio_data", "swap_order") if k in prov}
    summary = build_summary(
        aggregates=aggregates, results=stand_ins, metrics=[BENCHMARK], versions={BENCHMARK: VERSION},
        models={"judge": prov.get("judge_model") or "not recorded in the result files"},
        options={BENCHMARK: options},
        extra={"benchmark": BENCHMARK, "unit": "dialogue", "modes": info["modes"], "swapped": info["swapped"],
               "result_shapes": info["shapes"], "read_problems": info["problems"],
               "bootstrap": {"n_resamples": int(n_resamples), "seed": int(seed), "method": "percentile",
                             "confidence": CONFIDENCE, "unit": "dialogue"},
               **prov, **(extra or {})})
    write_jsonl_atomic(out / "per_sample.jsonl", rows)
    write_summary(out, summary)
    return summary, rows
