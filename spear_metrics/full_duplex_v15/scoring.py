"""Full-Duplex-Bench v1.5 per sample, per subset and overall, on THE resumable runner.

Per sample (:class:`V15Scorer`): the four word-timed transcripts, timing (:mod:`.timing`), the
behaviour tag (:mod:`.behaviour`), the before/after features (:mod:`.features`). Per subset
(:func:`summarize_subset`): the tag distribution with intervals over samples, the features'
trimmed means, the latencies and the significance tests (:mod:`.significance`). A run
(:func:`score_v15`) scores every sample of one subset folder or of a v1.5 root resumably
(``OUT/.work``; kill -9 and rerun: nothing lost or scored twice) and writes
``OUT/per_sample.jsonl``, ``OUT/summary.json`` (overall) and, for a root, ``OUT/<subset>/summary.json``.

Transcripts: a sample's own ``<name>.json`` (``input``, ``clean_input``, ``output``,
``clean_output``) when present, else the project's ASR of ``<name>.wav`` (channels averaged,
16 kHz, word timestamps, no cropping: upstream's ``asr.py`` ``--task default``). Upstream's ASR is
NVIDIA ``parakeet-tdt-0.6b-v2`` through NeMo, which does not load here (NeMo is not a dependency
and its weights are not on PyPI); the ASR used is recorded per sample (``asr_source``) and in the
summary's ``models``.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from spear_datasets.sources.fdb import FDBFormatError, read_output_json
from spear_metrics.core.records import SampleResult, claim_out, write_jsonl_atomic
from spear_metrics.core.runner import WORK_DIR, RunError, run_resumable
from spear_metrics.core.summary import build_summary, write_summary
from spear_metrics.core.vad import DEFAULT_BACKEND
from spear_metrics.full_duplex_v15 import behaviour as bh
from spear_metrics.full_duplex_v15 import features as ft
from spear_metrics.full_duplex_v15 import significance as sg
from spear_metrics.full_duplex_v15.data import V15Sample, detect_layout, list_samples, read_metadata
from spear_metrics.full_duplex_v15.timing import read_16k, sample_timing

from spear_metrics.full_duplex_v15 import VERSION  # noqa: E402

METRIC = "full_duplex_v15"
PROTOCOL = "Full-Duplex-Bench v1.5"
TRANSCRIPTS = ("input", "clean_input", "output", "clean_output")
#: upstream names the ASR model here (get_transcript/asr.py); it cannot be loaded in this toolkit
UPSTREAM_ASR = "nvidia/parakeet-tdt-0.6b-v2 (NeMo)"


class V15InputError(ValueError):
    """A sample cannot be scored (one line)."""


def transcript_dict(tr: Any) -> dict[str, Any]:
    """An ASR backend's ``Transcript`` or an :class:`OutputTranscript` as upstream's JSON shape
    ``{"text", "chunks": [{"text", "timestamp": [s, e]}]}``."""
    if hasattr(tr, "chunks"):
        return {"text": tr.text, "chunks": [{"text": c.text, "timestamp": [c.start, c.end]} for c in tr.chunks]}
    return {"text": str(tr.text or "").strip(),
            "chunks": [{"text": str(w.text).strip(), "timestamp": [w.start, w.end]} for w in (tr.words or [])]}


def transcribe_file(path: str | os.PathLike, backend: Any) -> dict[str, Any]:
    """Upstream's ``asr.py`` (``--task default``) with ``backend``: the whole file, channels
    averaged, word timestamps; digital silence has no words (Whisper would invent some).

    Raises:
        spear_datasets.audio.AudioError: missing/undecodable file; the backend's errors.
    """
    wave = read_16k(path)
    if wave.size == 0 or not np.any(wave):
        return {"text": "", "chunks": []}
    return transcript_dict(backend.transcribe([wave.astype(np.float32)], sr=16000, word_timestamps=True)[0])


def _chunks(d: dict[str, Any]):
    from spear_datasets.sources.fdb import parse_chunks

    return parse_chunks(d.get("chunks", []), "transcript")


@dataclass
class V15Scorer:
    """Scores one v1.5 sample folder.

    Args:
        judge: a :class:`.behaviour.BehaviourJudge`; ``None``: no behaviour tag (null, noted).
        asr: an ASR backend (``transcribe(waves, sr, word_timestamps=True)``); ``None``:
            ``spear_metrics.core.asr.load_asr(asr_name)`` on first need.
        mos: a MOS backend for the project's MOS keys (``None``: ``load_mos(mos_name)`` on first
            need; ``mos_name=None``: no MOS key).
        vad_backend: Silero front end (:mod:`spear_metrics.core.vad`).
    """

    judge: Any = None
    asr: Any = None
    asr_name: str = "embedded"
    mos: Any = None
    mos_name: str | None = "dnsmos"
    vad_backend: str = DEFAULT_BACKEND
    _lock: Any = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    def _asr(self):
        if self.asr is None:
            from spear_metrics.core.asr import load_asr

            self.asr = load_asr(self.asr_name)
        return self.asr

    def _mos(self):
        if self.mos is None and self.mos_name:
            from spear_metrics.core.mos import load_mos

            self.mos = load_mos(self.mos_name)
        return self.mos

    def transcript(self, sample: V15Sample, name: str) -> tuple[dict[str, Any], str]:
        """``(transcript, source)`` of ``<name>.wav``: its ``<name>.json`` (source ``"<name>.json"``)
        or the ASR (source: the backend's name).

        Raises:
            FDBFormatError: a malformed ``<name>.json``; AudioError: a missing/bad ``<name>.wav``.
        """
        js = sample.path(f"{name}.json")
        if js.is_file():
            return transcript_dict(read_output_json(js)), js.name
        backend = self._asr()
        return transcribe_file(sample.path(f"{name}.wav"), backend), str(getattr(backend, "name", "asr"))

    def score(self, sample: V15Sample) -> dict[str, Any]:
        """Per-sample values (see the docs page). Raises (one line) when the sample cannot be
        scored: a missing/bad ``metadata.json``, ``input.wav`` or ``output.wav``, an overlap window
        that starts at or after the end of ``input.wav``, an ``output.wav`` that ends before the
        window starts, a judge that gave no usable tag within its bounds.

        Thread-safe: several threads may score samples at once (``--judge-concurrency``); reading,
        ASR, VAD and MOS run one sample at a time (under the scorer's lock), only the behaviour
        judge's calls overlap."""
        with self._lock:
            v, trs, have_clean, meta = self._measure(sample)
        if self.judge is not None and have_clean:
            msgs = bh.messages(trs["clean_input"], trs["input"], trs["clean_output"], trs["output"])
            verdict = self.judge.ask(msgs)
            v["judge_attempts"] = len(verdict.attempts)
            if verdict.tags is None:
                raise V15InputError(verdict.error or "judge gave no usable behaviour tag")
            v.update(behaviour=verdict.tags, behaviour_tag=verdict.tags[0] if verdict.tags else None,
                     judge_seed=verdict.seed, judge_reply=verdict.reply)
        elif self.judge is not None:
            v["behaviour_note"] = "no clean_output.wav: upstream judges only samples with all four transcripts"
        with self._lock:
            out_wav = read_16k(sample.path("output.wav"))
            clean_wav = read_16k(sample.path("clean_output.wav")) if have_clean else None
            v["general"] = ft.split_features(out_wav, _chunks(trs["output"]), meta.overlap_end_s, clean_wav,
                                             _chunks(trs["clean_output"]) if have_clean else None, mos=self._mos(),
                                             vad_backend=self.vad_backend)
        return v

    def _measure(self, sample: V15Sample) -> tuple[dict[str, Any], dict[str, dict[str, Any]], bool, Any]:
        """:meth:`score`'s timing and transcripts: ``(values, transcripts, have_clean, metadata)``."""
        meta = read_metadata(sample.path("metadata.json"))
        for name in ("input.wav", "output.wav"):
            if not sample.path(name).is_file():
                raise V15InputError(f"{name} missing: {sample.path(name)}" +
                                    (" (run spearbench fdb infer on the folder first)" if name == "output.wav" else ""))
        overlap = (meta.overlap_start_s, meta.overlap_end_s)
        from spear_datasets.audio import audio_info

        in_s, out_s = audio_info(sample.path("input.wav")).duration, audio_info(sample.path("output.wav")).duration
        window = f"[{overlap[0]:g}, {overlap[1]:g}] s"
        if overlap[0] >= in_s:  # nothing to measure: the post-overlap features would be those of no audio
            raise V15InputError(f"metadata.json: overlap window {window} starts at or after the end of input.wav "
                                f"({in_s:.3f} s)")
        if out_s <= overlap[0]:
            raise V15InputError(f"output.wav ({out_s:.3f} s) ends before the overlap window {window} starts: not "
                                f"time-synchronous with input.wav ({in_s:.3f} s)")
        v: dict[str, Any] = {"id": sample.id, "subset": sample.subset, "overlap": list(overlap)}
        v.update(sample_timing(sample.path("input.wav"), sample.path("output.wav"), overlap, backend=self.vad_backend))
        have_clean = sample.path("clean_output.wav").is_file()
        trs: dict[str, dict[str, Any]] = {}
        sources: dict[str, str] = {}
        for name in TRANSCRIPTS:
            if name == "clean_output" and not have_clean:
                continue
            trs[name], sources[name] = self.transcript(sample, name)
        v["transcripts"] = trs
        v["asr_source"] = sources
        # behaviour: upstream judges only samples holding all four transcripts
        v.update(behaviour=None, behaviour_tag=None, judge_seed=None, judge_reply=None, judge_attempts=0)
        return v, trs, have_clean, meta

    def score_one(self, sample: V15Sample, row: int) -> SampleResult:
        """:meth:`score` as a :class:`SampleResult`; a bad sample is a failed result with its reason."""
        from spear_datasets.audio import AudioError
        from spear_metrics.core.models import ModelUnavailableError

        base = {"id": sample.id, "subset": sample.subset}
        r = SampleResult(row=row, audio_path=str(sample.path("input.wav")),
                         answer_audio_path=str(sample.path("output.wav")), values=dict(base))
        try:
            r.values = {**base, **self.score(sample)}
        except ModelUnavailableError:
            raise  # a whole-run problem: the runner stops with its one line
        except Exception as e:
            msg = " ".join(str(e).split()) or type(e).__name__
            r.fail(msg if isinstance(e, (V15InputError, FDBFormatError, AudioError)) else f"{type(e).__name__}: {msg}")
        return r


# ----------------------------------------------------------------------------- aggregation


def _mean(xs: Sequence[float]) -> float | None:
    return float(np.mean(xs)) if xs else None


def _with_interval(out: dict[str, Any], name: str, values: Sequence[Any], stat, n_resamples: int, seed: int) -> None:
    """``out[name]`` = ``stat(values)``, ``<name>_n`` and ``<name>_ci95`` (percentile bootstrap over
    samples of the same statistic: :func:`spear_metrics.core.stats.aggregate_intervals`)."""
    from spear_metrics.core.stats import aggregate_intervals

    vals = list(values)
    out[name] = stat(vals)
    out[f"{name}_n"] = sum(1 for v in vals if v is not None and not (isinstance(v, float) and np.isnan(v)))
    out[f"{name}_ci95"] = aggregate_intervals(lambda idx: {name: stat([vals[i] for i in idx])}, len(vals), [name],
                                              n_resamples=n_resamples, seed=seed)[name] if n_resamples > 0 else None


def _ratio(tag: str):
    def stat(tag_lists: Sequence[Sequence[str]]) -> float | None:
        counts = bh.tag_counts(tag_lists)
        total = sum(counts.values())
        return counts.get(tag, 0) / total if total else None
    return stat


def aggregate(values: Sequence[dict[str, Any]], *, n_resamples: int = 1000, seed: int = 0,
              mos_keys: Sequence[str] = ()) -> dict[str, Any]:
    """Aggregates of the scored samples of one subset (or all): the tag shares, upstream's printed
    ratios, the latencies' means, the features' trimmed means (``pre_``/``post_``: upstream;
    ``clean_``: the project's) and the significance tests (:mod:`.significance`), each number with
    ``_n`` and a bootstrap ``_ci95`` over samples."""
    out: dict[str, Any] = {}
    judged = [v["behaviour"] for v in values if v.get("behaviour")]
    for tag in bh.TAGS:
        _with_interval(out, tag, judged, _ratio(tag), n_resamples, seed)
    out["n_judged"] = len(judged)
    out["behaviour_ratios_upstream"] = bh.upstream_ratios(judged)
    for k in ("stop_latency_s", "response_latency_s"):
        xs = [v.get(k) for v in values]
        _with_interval(out, k, [x for x in xs if x is not None], _mean, n_resamples, seed)
    feats = [v.get("general") or {} for v in values]
    for side in ft.SIDES:
        for k in (*ft.FEATURE_KEYS, *mos_keys):
            name = f"{side}_{k}"
            if k == "utmosv2":
                out[name], out[f"{name}_n"], out[f"{name}_ci95"] = None, 0, None
                out[f"{name}_note"] = ft.UTMOSV2_UNSUPPORTED
                continue
            xs = [(f.get(side) or {}).get(k) for f in feats]
            _with_interval(out, name, [x for x in xs if x is not None], ft.trimmed_mean, n_resamples, seed)
    rows = [{"id": v.get("id"), "behaviour": v.get("behaviour"), "general": v.get("general")} for v in values]
    out["significance"] = sg.run_tests(rows, sg.UPSTREAM_METRICS)
    if mos_keys:
        out["significance_project_mos"] = sg.run_tests(rows, tuple(mos_keys))
    return out


#: the keys printed per subset (the console table and the docs)
HEADLINE = ("C_RESPOND", "C_RESUME", "C_UNCERTAIN_HANDLING", "C_UNKNOWN", "stop_latency_s", "response_latency_s",
            "pre_wpm", "post_wpm", "clean_wpm", "pre_mean_pitch", "post_mean_pitch", "pre_mean_intensity",
            "post_mean_intensity")


def summarize(results: Sequence[SampleResult], *, setup: "V15Setup", subset: str | None, n_processes: int = 1,
              extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """``summary.json`` of one subset (``subset``) or of all scored samples (``None``)."""
    ok = [r.values for r in results if r.ok]
    mos_keys = tuple(getattr(setup.scorer.mos, "keys", ()) or ()) if setup.scorer.mos_name else ()
    if setup.scorer.mos_name and not mos_keys:
        from spear_metrics.core.mos import load_mos

        mos_keys = tuple(load_mos(setup.scorer.mos_name).keys)
    agg = aggregate(ok, n_resamples=setup.n_resamples, seed=setup.seed, mos_keys=mos_keys)
    models: dict[str, str] = {"vad": f"silero-vad ({setup.scorer.vad_backend}; library defaults for timing, "
                                      "threshold 0.5 / 60 ms / 50 ms for trimming)",
                              "pitch_intensity": "Praat via parselmouth (to_pitch 0.01 s, 50-600 Hz; to_intensity 0.01 s)"}
    srcs = sorted({s for v in ok for s in (v.get("asr_source") or {}).values()})
    if srcs:
        models["asr"] = ", ".join(srcs) + f" (upstream: {UPSTREAM_ASR}, not loadable here)"
    notes: dict[str, Any] = {}
    if setup.judge is not None:
        models["behaviour"] = setup.judge.describe()
        notes["judge_prompt_sha256"] = bh.PROMPT_SHA256  # the system message: upstream's behavior.txt, as pinned
        if hasattr(setup.judge.judge, "report"):  # requests, cached answers, returned model ids, usage
            notes["judge_calls"] = setup.judge.judge.report()
    else:
        notes["behaviour_note"] = "no judge configured (--judge-url/--judge-model): behaviour tags not computed"
    if mos_keys:
        models["mos"] = f"{setup.scorer.mos_name} (project key; not UTMOSv2)"
    info = {"benchmark": METRIC, "protocol": PROTOCOL, "subset": subset, "utmosv2_note": ft.UTMOSV2_UNSUPPORTED,
            "bootstrap": {"n_resamples": setup.n_resamples, "seed": setup.seed, "method": "percentile",
                          "confidence": 0.95}, **notes, **(extra or {})}
    return build_summary(aggregates=agg, results=results, metrics=[METRIC], versions={METRIC: VERSION}, models=models,
                         n_processes=n_processes, extra=info)


# ----------------------------------------------------------------------------- a run


@dataclass
class V15Setup:
    """What every sample of a run is scored with, and the run's settings."""

    scorer: V15Scorer = field(default_factory=V15Scorer)
    judge: Any = None
    n_resamples: int = 1000
    seed: int = 0
    batch_size: int = 4
    #: judge calls in flight at once (``--judge-concurrency``; with a judge, rows are scored by
    #: that many threads, each logged as it finishes)
    concurrency: int = 1
    retry_failed: bool = False
    overwrite: bool = False
    progress: bool = True

    def fingerprint(self) -> dict[str, Any]:
        j = self.judge
        return {"version": VERSION, "asr": self.scorer.asr_name if self.scorer.asr is None else
                str(getattr(self.scorer.asr, "name", "asr")), "mos": self.scorer.mos_name,
                "vad_backend": self.scorer.vad_backend, "judge": None if j is None else j.describe()}


@dataclass
class _Item:
    row: int
    sample: V15Sample


def collect(root: str | os.PathLike, task: str | None = None) -> tuple[str, list[V15Sample]]:
    """``(layout, samples)`` of a v1.5 folder: a subset folder (``task`` names its subset; default
    the folder's name) or a root of subset folders (``task`` picks one).

    Raises:
        RunError: not a v1.5 folder, or ``task`` names no subset folder under the root.
    """
    found = detect_layout(root)
    if found is None:
        raise RunError(f"{root}: no FDB v1.5 sample folders (<id>/input.wav, clean_input.wav, metadata.json)")
    layout, dirs = found
    if layout == "root" and task:
        dirs = [d for d in dirs if d.name == task]
        if not dirs:
            raise RunError(f"{root}: no subset folder {task!r} (found: {', '.join(d.name for d in found[1])})")
        layout = "subset"
    samples: list[V15Sample] = []
    for d in dirs:
        samples += list_samples(d, task if layout == "subset" and task else d.name)
    return layout, samples


def score_v15(root: str | os.PathLike, out: str | os.PathLike, setup: V15Setup, *, task: str | None = None
              ) -> tuple[dict[str, Any], dict[str, dict[str, Any]], list[SampleResult]] | None:
    """Score a v1.5 folder into ``out`` (resumable): ``(overall summary, {subset: summary}, results)``
    on the main process, ``None`` on the others.

    Raises:
        RunError: not a v1.5 folder; ``out`` holds another run (use ``overwrite``).
    """
    from spear_metrics.core.runner import run_distributed_state

    out = Path(out)
    layout, samples = collect(root, task)
    items = [_Item(i, s) for i, s in enumerate(samples)]
    fp = {"mode": "v1.5", "root": str(Path(root).resolve()), "task": task, "samples": [s.key for s in samples],
          **setup.fingerprint()}
    subsets = list(dict.fromkeys(s.subset for s in samples))
    conflict = RunError(f"{out} holds results of another run (other samples or options); use a new --out folder "
                        "or --overwrite")
    adopt = ("summary.json", "per_sample.jsonl", "run_info.json", *(f"{s}/summary.json" for s in subsets))
    with claim_out(out, fp, overwrite=setup.overwrite, conflict=conflict, command="fdb", state=run_distributed_state(),
                   activity="scored", adopt=adopt):
        outcome = run_resumable(items, lambda batch: [setup.scorer.score_one(it.sample, it.row) for it in batch],
                                out / WORK_DIR, n_rows=len(items), batch_size=setup.batch_size,
                                retry_failed=setup.retry_failed,
                                progress_desc="fdb v1.5" if setup.progress else None,
                                concurrency=max(1, int(setup.concurrency)) if setup.judge is not None else 1)
        if outcome is None:
            return None
        results = outcome.results
        per_subset = {}
        for sub in subsets:
            rs = [r for r in results if r.values.get("subset") == sub]
            per_subset[sub] = summarize(rs, setup=setup, subset=sub, n_processes=outcome.n_processes)
            if layout == "root":
                write_summary(out / sub, per_subset[sub])
        overall = summarize(results, setup=setup, subset=subsets[0] if layout == "subset" and len(subsets) == 1 else None,
                            n_processes=outcome.n_processes,
                            extra={"root": str(Path(root).resolve()), "subsets": {s: {k: per_subset[s].get(k) for k in
                                                                                      (*HEADLINE, "n_samples", "n_scored",
                                                                                       "n_failed")} for s in subsets}})
        write_jsonl_atomic(out / "per_sample.jsonl", (r.to_json() for r in results))
        write_summary(out, overall)
        from spear_metrics.core.records import write_json_atomic

        write_json_atomic(out / "run_info.json", {"elapsed_s": outcome.elapsed_s, "rows_scored_this_run": len(outcome.new),
                                                  "rows_resumed": outcome.n_resumed, "n_processes": outcome.n_processes})
        return overall, per_subset, results


def format_table(per_subset: dict[str, dict[str, Any]]) -> list[str]:
    """The console table: one line per headline key, one column per subset (``value [lo, hi]``,
    and ``(few events: n = N)`` after a tag share from fewer than 10 units,
    :func:`spear_metrics.core.summary.few_events`)."""
    subs = list(per_subset)

    from spear_metrics.core.summary import few_events, interval_text

    def cell(s: dict[str, Any], k: str) -> str:
        if k.startswith("n_"):
            return str(s.get(k))
        return " ".join(x for x in (interval_text(s.get(k), s.get(f"{k}_ci95")), few_events(s, k)) if x)

    keys = (*HEADLINE, "n_scored", "n_failed")
    cells = {k: [cell(per_subset[s], k) for s in subs] for k in keys}
    w = max(24, *(len(c) for c in subs), *(len(c) for row in cells.values() for c in row))
    lines = [f"{'key':<22} " + " ".join(f"{s:<{w}}" for s in subs).rstrip()]
    for k in keys:
        lines.append(f"{k:<22} " + " ".join(f"{c:<{w}}" for c in cells[k]).rstrip())
    for s in subs:
        for t in (per_subset[s].get("significance") or {}).get("tests", []):
            lines.append(f"[{s}] {sg.conclusion(t)} p_adj={t['p_adj']:.3f}" + (f" ({t['note']})" if t.get("note") else ""))
    return lines
