"""The fast dimensions on a split of SPEAR's test-split size, 1 and 2 processes, against a plain
upstream-style loop.

What it builds (``--workdir``, default a temporary folder; nothing is downloaded):

- 2,725 rows (994 ``improvised`` + 1,731 ``naturalistic``), the size of SPEAR's test split.
- Input clips: 16 kHz stereo, one AMI speaker per channel (pairs of the real headset channels of
  ``tests/fixtures/real/pyannote-audio__seriously_source*.wav``, as the ``DERIVED__`` fixture
  pairs them), cut to lengths drawn so that the mean is 14.85 s (3-30 s), the question being the
  last 1-5 s.
- Answers, mean 8.79 s (the human row's ``explainable_duration_s`` in the published table), 1-30 s,
  in the formats a scorer meets: 2/3 human-answer format (16 kHz stereo, the answerer's channel
  copied to both), 1/6 16 kHz mono (AMI), 1/12 44.1 kHz 24-bit stereo FLAC (``jfk.flac``),
  1/12 48 kHz mono WAV (VCTK). Question + answer average 23.65 s a row: 17.9 h for the split,
  as SPEAR's test split.
- ``answer_start_time``: 34 % of rows negative (-2.0 to -0.05 s: the human interruption rate),
  the others 0-2 s.
- A small pool of distinct clip files (``--pool`` inputs and as many answers) hard-linked under
  2,725 distinct names each (a repeated ``audio_path`` is a failed row by design). The page
  cache holds the pool: disk reads of 3.3 GB of real audio are not in these figures.

What it times, each in a fresh process:

- ``spearbench score --metrics interruptions,explainable_features`` on the whole split, 1 process
  and 2 processes (CPU form of ``accelerate launch``); a smaller run (``--small`` rows) shows
  whether peak RSS grows with the number of rows;
- two baseline loops on the same ``--sample`` evenly spaced rows, each in its own process, their
  times EXTRAPOLATED to the full split (stated as such):
  (1) "SPEAR re-statement": ``scripts/spear_reference.py`` (no project code), SPEAR's rules as
  upstream runs them, each metric its own pass over its own ``torchaudio.load``-ed audio with
  Silero's JIT ``get_speech_timestamps`` (defaults): the question's VAD twice per row (latency,
  overlap), the answer's twice (whole, and cut at the skip point), Praat pitch of the file
  (``parselmouth.Sound(path).to_pitch_ac(pitch_floor=75, pitch_ceiling=500)``);
  (2) "plain single-pass loop", a stricter baseline: each file loaded once, the same JIT VAD on the
  question, the answer and, only where ``answer_start_time`` < 0, the cut answer, the same Praat
  call.
  Each loop is timed twice, before the runs of ours and after them (the machine's load moves on a
  shared machine), and its figures are the mean of the two timings (both are printed).

Reports wall time (command start to exit: imports, model loading, process start-up included) and
the runner's scoring time (``run_info.json``), × real time (question + answer audio seconds per
wall second), the real-time factor (wall seconds per audio second), rows/s, peak RSS of each
process (``VmHWM`` polled from ``/proc``), the machine load (``/proc/loadavg``) before and after each run,
CPU seconds (user + system of every process), and checks that the per-row values of the sample
rows equal each loop's to 6 decimals (exit 1 otherwise); 1 and 2 processes must write the same
``per_sample.jsonl``.

    .venv/bin/python scripts/bench_full_split.py [--sample 48] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
REAL = REPO / "tests" / "fixtures" / "real"
SR = 16_000
N_IMPROVISED, N_NATURALISTIC = 994, 1731
MEAN_INPUT_S, MEAN_ANSWER_S = 14.85, 8.79
METRICS = "interruptions,explainable_features"
#: per-row values compared with the plain loop (those both compute)
COMPARED = ("latency_ms", "interrupted_time_ms", "interruption", "explainable_duration_s",
            "explainable_voiced_ratio", "f0_min_hz", "f0_p10_hz", "f0_p25_hz", "f0_median_hz", "f0_p75_hz",
            "f0_p90_hz", "f0_max_hz", "f0_mean_hz")


# ----------------------------------------------------------------------------------- the split

def _lengths(rng: np.random.Generator, n: int, mean: float, lo: float, hi: float) -> np.ndarray:
    """``n`` gamma(shape 3) lengths clipped to [lo, hi] whose mean is ``mean`` (scale by bisection)."""
    base = rng.gamma(3.0, 1.0, n)
    a, b = 0.01, 100.0
    for _ in range(60):
        k = (a + b) / 2
        if np.clip(base * k, lo, hi).mean() < mean:
            a = k
        else:
            b = k
    return np.clip(base * (a + b) / 2, lo, hi)


def _read(name: str) -> tuple[np.ndarray, int]:
    import soundfile as sf

    x, sr = sf.read(str(REAL / name), dtype="float32", always_2d=True)
    return x.T, sr


def build_pool(root: Path, n: int, seed: int) -> tuple[list[dict], list[dict]]:
    """Write ``n`` distinct input clips and ``n`` distinct answers under ``root/pool``."""
    import soundfile as sf

    rng = np.random.default_rng(seed)
    pool = root / "pool"
    pool.mkdir(parents=True, exist_ok=True)
    src = {i: _read(f"pyannote-audio__seriously_source{i}.wav")[0][0] for i in range(4)}
    pairs = [(3, 0), (1, 0), (3, 1), (0, 1)]  # (questioner channel, answerer channel); 2 only backchannels
    inputs = []
    for k, L in enumerate(_lengths(rng, n, MEAN_INPUT_S, 3.0, 30.0)):
        a, b = pairs[k % len(pairs)]
        start = int(rng.uniform(0, 60.0 - L) * SR)
        x = np.stack([src[a][start : start + int(L * SR)], src[b][start : start + int(L * SR)]])
        p = pool / f"q{k}.wav"
        sf.write(str(p), x.T, SR, subtype="PCM_16")
        qe = x.shape[1] / SR
        inputs.append({"path": p, "question_end_time": qe, "context_end_time": max(0.2, qe - rng.uniform(1.0, 5.0)),
                       "speakers": f"P{1000 + 2 * k}A|P{1001 + 2 * k}A", "k": k})
    mono16 = [_read("pyannote-audio__dev00.wav")[0][0], _read("pyannote-audio__sample.wav")[0][0]]
    jfk, jfk_sr = _read("faster-whisper__jfk.flac")
    vctk = [_read("speechbrain__p225_002.wav"), _read("speechbrain__p226_002.wav")]
    answers = []
    want = _lengths(rng, n, MEAN_ANSWER_S * 1.055, 1.0, 30.0)  # the 44.1/48 kHz sources are short: lift the others
    for k, L in enumerate(want):
        kind = k % 12
        if kind < 8:  # human-answer format: 16 kHz stereo, answerer's channel on both
            s = src[k % 4]
            start = int(rng.uniform(0, 60.0 - L) * SR)
            x = s[start : start + int(L * SR)]
            p = pool / f"a{k}.wav"
            sf.write(str(p), np.stack([x, x]).T, SR, subtype="PCM_16")
        elif kind < 10:  # 16 kHz mono, float32 (dev00) or PCM16 (sample)
            s = mono16[kind - 8]
            L = min(L, 29.0)
            start = int(rng.uniform(0, 30.0 - L) * SR)
            p = pool / f"a{k}.wav"
            sf.write(str(p), s[start : start + int(L * SR)], SR, subtype="FLOAT" if kind == 8 else "PCM_16")
        elif kind == 10:  # 44.1 kHz 24-bit stereo FLAC
            L = min(L, 11.0)
            start = int(rng.uniform(0, 11.0 - L) * jfk_sr)
            p = pool / f"a{k}.flac"
            sf.write(str(p), jfk[:, start : start + int(L * jfk_sr)].T, jfk_sr, subtype="PCM_24", format="FLAC")
        else:  # 48 kHz mono VCTK, whole
            x, sr = vctk[k % 2]
            p = pool / f"a{k}.wav"
            sf.write(str(p), x[0], sr, subtype="PCM_16")
        answers.append({"path": p})
    return inputs, answers


def build_split(root: Path, *, pool: int = 48, seed: int = 0, n_improvised: int = N_IMPROVISED,
                n_naturalistic: int = N_NATURALISTIC) -> Path:
    """Write ``root/metadata.csv`` and its hard-linked audio; returns the CSV's path."""
    sys.path.insert(0, str(REPO))
    from spear_datasets.schema import SpearRow, write_metadata

    inputs, answers = build_pool(root, pool, seed)
    rng = np.random.default_rng(seed + 1)
    rows = []
    n = n_improvised + n_naturalistic
    for i in range(n):
        subset = "improvised" if i < n_improvised else "naturalistic"
        q = inputs[i % len(inputs)]
        a = answers[(7 * i + 3) % len(answers)]
        p1, p2 = q["speakers"].split("|")
        stem = f"V00_S{1000 + q['k']:04d}_I{i:08d}_{p1}_{p2}_{i}"
        qrel = Path("inputs", "test", subset, "audios", f"{stem}.wav")
        arel = Path("answers", subset, f"{stem}{a['path'].suffix}")
        for rel, target in ((qrel, q["path"]), (arel, a["path"])):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            if not (root / rel).exists():
                os.link(target, root / rel)
        ast = -rng.uniform(0.05, 2.0) if rng.random() < 0.34 else rng.uniform(0.0, 2.0)
        rows.append(SpearRow(audio_path=str(qrel), answer_audio_path=str(arel), context_end_time=round(q["context_end_time"], 3),
                             question_end_time=q["question_end_time"], answer_duration=None, speakers=q["speakers"],
                             conversation_id=f"V00_S{1000 + q['k']:04d}_I{i:08d}",
                             transcript_question=f"{p2}: So what do you think? {p1}: Did you see the remote?",
                             transcript_answer=f"{p2}: Yes, I did.", answer_start_time=round(float(ast), 3)))
    return write_metadata(root / "metadata.csv", rows)


def split_facts(meta: Path) -> dict:
    import soundfile as sf

    from spear_datasets.schema import read_metadata

    rows = read_metadata(meta)
    q = [sf.info(str(meta.parent / r["audio_path"])).duration for r in rows]
    a = [sf.info(str(meta.parent / r["answer_audio_path"])).duration for r in rows]
    ast = [float(r["answer_start_time"]) for r in rows]
    return {"rows": len(rows), "audio_s": float(sum(q) + sum(a)), "hours": (sum(q) + sum(a)) / 3600,
            "mean_input_s": float(np.mean(q)), "mean_answer_s": float(np.mean(a)),
            "negative_onset_share": float(np.mean(np.asarray(ast) < 0)),
            "distinct_files": len({os.stat(meta.parent / r["audio_path"]).st_ino for r in rows})
            + len({os.stat(meta.parent / r["answer_audio_path"]).st_ino for r in rows})}


# ------------------------------------------------------------------------------ measurement

def _loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" ")[0:3].__str__()


def _tree(pid: int) -> list[int]:
    import psutil

    try:
        p = psutil.Process(pid)
        return [pid] + [c.pid for c in p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _hwm_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _cmd_name(pid: int) -> str:
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        return " ".join(a.decode(errors="replace") for a in args[:4])
    except OSError:
        return "?"


def timed(cmd: list[str], env: dict, started: Path | None = None) -> dict:
    """Run ``cmd``; wall seconds and each process's peak RSS (MB, ``VmHWM`` polled every 50 ms);
    with ``started``, also the seconds until that file appears (the run's start-up)."""
    import resource

    load = _loadavg()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    epoch0 = time.time()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peaks: dict[int, float] = {}
    names: dict[int, str] = {}
    startup = None
    while p.poll() is None:
        if started is not None and startup is None and started.exists():
            startup = time.perf_counter() - t0
        for pid in _tree(p.pid):
            v = _hwm_mb(pid)
            if v is not None and v >= peaks.get(pid, 0.0):
                peaks[pid] = v
                names.setdefault(pid, _cmd_name(pid))
        time.sleep(0.05)
    out, err = p.communicate()
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    if p.returncode != 0:
        raise SystemExit(f"command failed ({p.returncode}): {' '.join(cmd)}\n{err[-3000:]}")
    procs = [{"pid": pid, "cmd": names[pid], "peak_rss_mb": round(v, 1)} for pid, v in peaks.items()
             if "python" in names[pid] or "spearbench" in names[pid] or "accelerate" in names[pid]]
    return {"wall_s": wall, "cpu_s": cpu, "load_before": load, "load_after": _loadavg(), "processes": procs, "stdout": out,
            "startup_s": startup,
            "epoch0": epoch0}


def score_cmd(meta: Path, out: Path, nproc: int) -> list[str]:
    bin_ = Path(sys.executable).parent
    cmd = [str(bin_ / "spearbench"), "score", "--metadata", str(meta), "--metrics", METRICS, "--out", str(out),
           "--no-progress", "--overwrite"]
    if nproc > 1:
        cmd = [str(bin_ / "accelerate"), "launch", "--multi_gpu", "--num_processes", str(nproc), "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29547", *cmd]
    return cmd


def run_ours(meta: Path, out: Path, nproc: int, env: dict) -> dict:
    r = timed(score_cmd(meta, out, nproc), dict(env, ACCELERATE_USE_CPU="true") if nproc > 1 else env,
              started=out / ".work" / "run.json")
    info = json.loads((out / "run_info.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    work = out / ".work"
    ranks = sorted(work.glob("rank-*.jsonl"))
    # where the wall time beyond the scoring went: start-up (command start to the work folder's
    # run.json), the ranks' last log writes (a gap = a rank idle while another finishes), the
    # summary (merge, intervals, writing) and the exit after run_info.json
    r.update(scoring_s=info["elapsed_s"], n_processes=summary["n_processes"], n_scored=summary["n_scored"],
             n_failed=summary["n_failed"],
             rank_done_s=[round(f.stat().st_mtime - r["epoch0"], 2) for f in ranks],
             summary_written_s=round((out / "summary.json").stat().st_mtime - r["epoch0"], 2),
             exit_after_run_info_s=round(r["wall_s"] - ((out / "run_info.json").stat().st_mtime - r["epoch0"]), 2))
    r.pop("stdout")
    r.pop("epoch0")
    return r


def spear_loop(meta: Path, rows: list[int], out_json: Path) -> None:
    """SPEAR's rules as upstream runs them (``scripts/spear_reference.py``, no project code: each
    metric its own pass that loads and VADs its own audio) on ``rows``, in this process."""
    import spear_reference as ref

    from spear_datasets.schema import read_metadata

    raw = read_metadata(meta)
    ref.vad(ref.load_mono_16k(str(meta.parent / raw[0]["audio_path"])))  # model load + first call outside the timing
    out = {}
    t0, c0 = time.perf_counter(), time.process_time()
    for i in rows:
        r = raw[i]
        q, a = ref.resolve(meta.parent, r["audio_path"]), ref.resolve(meta.parent, r["answer_audio_path"])
        qe, ce = float(r["question_end_time"]), float(r["context_end_time"])
        lat = ref.latency_ms(q, a, qe, r["answer_start_time"])
        it = ref.interruption(q, a, ce, qe, r["answer_start_time"])
        f0 = ref.f0_features(a)
        out[i] = {"latency_ms": lat, "interrupted_time_ms": it["interrupted_time_ms"], "interruption": bool(it["interruption"]),
                  "explainable_duration_s": f0.get("total_duration_s"), "explainable_voiced_ratio": f0.get("voiced_ratio"),
                  **{ours: f0.get(theirs) for ours, theirs in REFERENCE_KEYS.items()}}
    _write_loop(out_json, out, t0, c0)


#: scripts/spear_reference.py F0 keys -> the project's per-sample keys
REFERENCE_KEYS = {"f0_min_hz": "f0_min_raw", "f0_p10_hz": "f0_p10", "f0_p25_hz": "f0_p25", "f0_median_hz": "f0_median_raw",
                  "f0_p75_hz": "f0_p75", "f0_p90_hz": "f0_p90", "f0_max_hz": "f0_max_raw", "f0_mean_hz": "f0_mean_raw"}


def single_pass_loop(meta: Path, rows: list[int], out_json: Path) -> None:
    """A leaner plain loop (stricter baseline): per row each file loaded once with
    ``torchaudio.load``, the answer resampled once with ``torchaudio.functional.resample``,
    Silero's JIT ``get_speech_timestamps`` (defaults) on the question and the answer and, only
    where ``answer_start_time`` < 0, on the answer cut at the skip point; Praat pitch of the
    file (``parselmouth.Sound(path).to_pitch_ac(pitch_floor=75, pitch_ceiling=500)``). Arithmetic: the project's pure
    functions (microseconds)."""
    import parselmouth
    import torch
    import torchaudio
    import torchaudio.functional as taf
    from silero_vad import get_speech_timestamps, load_silero_vad

    from spear_datasets.schema import parse_row, read_metadata
    from spear_metrics.core.pitch import PitchTrack
    from spear_metrics.interruptions.definition import interrupted_time_s, latency_s

    raw = read_metadata(meta)
    model = load_silero_vad()
    torchaudio.load(str(meta.parent / raw[0]["audio_path"]))  # first-call set-up outside the timing

    def vad(w: torch.Tensor) -> list[tuple[float, float]]:
        ts = get_speech_timestamps(w, model, return_seconds=True) if w.numel() else []
        return [(float(t["start"]), float(t["end"])) for t in ts]

    out = {}
    t0, c0 = time.perf_counter(), time.process_time()
    with torch.no_grad():
        for i in rows:
            r = parse_row(raw[i])
            q, _ = torchaudio.load(str(meta.parent / r.audio_path))
            a, asr = torchaudio.load(str(meta.parent / r.answer_audio_path))
            a = a.mean(dim=0, keepdim=True)
            if asr != SR:
                a = taf.resample(a, asr, SR)
            a = a[0]
            qs, as_ = vad(q.mean(dim=0)), vad(a)
            skip = max(0.0, -r.answer_start_time)
            cut = vad(a[int(round(skip * SR)):]) if skip > 0 else as_
            lat = latency_s(qs, cut, r.question_end_time, r.answer_start_time)
            it = interrupted_time_s(qs, as_, r.context_end_time, r.question_end_time, r.answer_start_time)
            snd = parselmouth.Sound(str(meta.parent / r.answer_audio_path))
            pitch = snd.to_pitch_ac(pitch_floor=75.0, pitch_ceiling=500.0)
            track = PitchTrack(np.asarray(pitch.selected_array["frequency"], dtype=np.float64), float(pitch.time_step))
            out[i] = {"latency_ms": 1000.0 * lat, "interrupted_time_ms": None if it is None else 1000.0 * it,
                      "interruption": None if it is None else bool(it > 0), "explainable_duration_s": snd.get_total_duration(),
                      "explainable_voiced_ratio": track.voiced_ratio, **track.stats()}
    _write_loop(out_json, out, t0, c0)


def _write_loop(out_json: Path, out: dict, t0: float, c0: float) -> None:
    import resource

    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    out_json.write_text(json.dumps({"seconds": dt, "cpu_s": cpu, "values": out,
                                    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def _time_loop(fn: str, meta: Path, rows: list[int], root: Path, env: dict, when: str) -> dict:
    """One timing of the baseline loop ``fn`` (a function of this module) on ``rows``, in a fresh
    process: its JSON (seconds, CPU seconds, values, peak RSS) plus the load before and after."""
    res = root / f"{fn}_{when}.json"
    code = (f"import sys; sys.path.insert(0, {str(REPO / 'scripts')!r}); import bench_full_split as b; "
            f"from pathlib import Path; b.{fn}(Path({str(meta)!r}), {rows!r}, Path({str(res)!r}))")
    load = _loadavg()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    out = json.loads(res.read_text())
    out.update(when=when, load_before=load, load_after=_loadavg())
    print(json.dumps({"loop": fn, "when": when, "seconds": round(out["seconds"], 2), "cpu_s": round(out["cpu_s"], 2),
                      "load_before": load, "load_after": out["load_after"]}), flush=True)
    return out


#: baselines timed on the sample rows: label -> function of this module
LOOPS = {"SPEAR re-statement (upstream loop)": "spear_loop", "plain single-pass loop": "single_pass_loop"}


def _same(a, b) -> bool:
    """Equal as the project writes values: floats to 6 decimals (ms, s, Hz), the rest exactly."""
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return round(a, 6) == round(float(b), 6)
    if isinstance(b, float) and isinstance(a, (int, float)) and not isinstance(a, bool):
        return round(b, 6) == round(float(a), 6)
    return a == b


def compare(ours_dir: Path, loop: dict) -> list[str]:
    """Rows and keys where the loop's values differ from ours (``per_sample.jsonl``)."""
    per = {}
    for line in (ours_dir / "per_sample.jsonl").read_text().splitlines():
        o = json.loads(line)
        per[o["row"]] = o
    diffs = []
    for i, v in loop["values"].items():
        o = per[int(i)]
        for k in COMPARED:
            if k in v and not _same(v[k], o.get(k)):
                diffs.append(f"row {i} {k}: loop {v[k]!r} ours {o.get(k)!r}")
    return diffs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", default=None, help="build the split here (kept); default: a temporary folder")
    ap.add_argument("--pool", type=int, default=48, help="distinct input clips (and answers) behind the hard links")
    ap.add_argument("--sample", type=int, default=48, help="rows timed with each baseline loop (evenly spaced)")
    ap.add_argument("--small", type=int, default=272, help="rows of the small 1-process run (RSS vs rows)")
    ap.add_argument("--rows", type=int, default=None, help="scale the split down to this many rows (testing only)")
    ap.add_argument("--skip", default="", help="comma list of runs to skip: one,two,small,plain")
    ap.add_argument("--json", default=None, help="write all figures here")
    ap.add_argument("--code", default=str(REPO), help="checkout whose spearbench code is timed (default: this one), "
                    "e.g. another worktree for a before/after comparison")
    a = ap.parse_args()

    tmp = None
    if a.workdir:
        root = Path(a.workdir)
        if root.exists():
            shutil.rmtree(root)
    else:
        tmp = tempfile.mkdtemp(prefix="spear_full_split_")
        root = Path(tmp)
    try:
        return _main(a, root)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def _main(a: argparse.Namespace, root: Path) -> int:
    n_imp, n_nat = N_IMPROVISED, N_NATURALISTIC
    if a.rows:
        n_imp = round(a.rows * N_IMPROVISED / (N_IMPROVISED + N_NATURALISTIC))
        n_nat = a.rows - n_imp
    t = time.perf_counter()
    meta = build_split(root / "split", pool=a.pool, n_improvised=n_imp, n_naturalistic=n_nat)
    facts = split_facts(meta)
    facts["build_s"] = time.perf_counter() - t
    print(f"split: {facts['rows']} rows, {facts['hours']:.2f} h of question + answer audio (input {facts['mean_input_s']:.2f} s, "
          f"answer {facts['mean_answer_s']:.2f} s on average), {100 * facts['negative_onset_share']:.0f} % negative onsets, "
          f"{facts['distinct_files']} distinct files hard-linked; built in {facts['build_s']:.1f} s", flush=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(a.code).resolve()), str(REPO)]),
               HF_HUB_OFFLINE="1")
    skip = set(filter(None, a.skip.split(",")))
    runs: dict[str, dict] = {}
    n = facts["rows"]
    if "small" not in skip and a.small and a.small < n:
        small_meta = meta.parent / "small.csv"
        lines = meta.read_text().splitlines()
        small_meta.write_text("\n".join(lines[: a.small + 1]) + "\n")
        sub = split_facts(small_meta)
        r = run_ours(small_meta, root / "out_small", 1, env)
        runs["ours, 1 process, small"] = {**r, "rows": sub["rows"], "audio_s": sub["audio_s"]}
        print(json.dumps({"run": "ours, 1 process, small", **runs["ours, 1 process, small"]}), flush=True)
    loop_runs: dict[str, list[dict]] = {}
    sample_rows: list[int] = []
    sample_audio = 0.0
    if "plain" not in skip:
        from spear_datasets.schema import read_metadata
        import soundfile as sf

        raw = read_metadata(meta)
        step = max(1, n // a.sample)
        sample_rows = list(range(0, n, step))[: a.sample]
        sample_audio = sum(sf.info(str(meta.parent / raw[i]["audio_path"])).duration
                           + sf.info(str(meta.parent / raw[i]["answer_audio_path"])).duration for i in sample_rows)
        for label, fn in LOOPS.items():  # before our runs; again after them (the load moves)
            loop_runs.setdefault(label, []).append(_time_loop(fn, meta, sample_rows, root, env, "before"))
    for nproc in (1, 2):
        if ("one" if nproc == 1 else "two") in skip:
            continue
        r = run_ours(meta, root / f"out_{nproc}", nproc, env)
        runs[f"ours, {nproc} process{'es' if nproc > 1 else ''}"] = {**r, "rows": n, "audio_s": facts["audio_s"]}
        print(json.dumps({"run": f"ours {nproc}", **r}), flush=True)
    loops: dict[str, dict] = {}
    if "plain" not in skip:
        for label, fn in LOOPS.items():
            loop_runs[label].append(_time_loop(fn, meta, sample_rows, root, env, "after"))
            both = loop_runs[label]
            lp = dict(both[-1], seconds=sum(x["seconds"] for x in both) / len(both),
                      cpu_s=sum(x["cpu_s"] for x in both) / len(both))
            for x in both[:-1]:
                if x["values"] != both[-1]["values"]:
                    raise SystemExit(f"{label}: the loop's values differ between its two timings")
            loops[label] = lp
            per_row, cpu_row = lp["seconds"] / len(sample_rows), lp["cpu_s"] / len(sample_rows)
            runs[label] = {"wall_s": per_row * n, "scoring_s": per_row * n, "cpu_s": cpu_row * n, "rows": n,
                           "audio_s": facts["audio_s"], "load_before": both[0]["load_before"],
                           "load_after": both[-1]["load_after"], "measured_rows": len(sample_rows),
                           "measured_s": lp["seconds"], "measured_x_real_time": sample_audio / lp["seconds"],
                           "timings": [{k: x[k] for k in ("when", "seconds", "cpu_s", "load_before", "load_after")}
                                       for x in both],
                           "processes": [{"cmd": label, "peak_rss_mb": round(max(x["peak_rss_mb"] for x in both), 1)}]}
            print(json.dumps({"run": label, **{k: v for k, v in runs[label].items() if k != "processes"}}), flush=True)
    print()
    print(f"{'run':<34}{'rows':>6}{'wall s':>9}{'scoring s':>10}{'CPU s':>8}{'x RT':>8}{'RTF':>9}{'rows/s':>8}  peak RSS MB  "
          "load before -> after")
    for name, r in runs.items():
        rss = ", ".join(f"{p['peak_rss_mb']:.0f}" for p in r["processes"] if "accelerate launch" not in p["cmd"])
        print(f"{name:<34}{r['rows']:>6}{r['wall_s']:>9.1f}{r['scoring_s']:>10.1f}{r['cpu_s']:>8.1f}{r['audio_s'] / r['wall_s']:>7.0f}x"
              f"{r['wall_s'] / r['audio_s']:>9.5f}{r['rows'] / r['wall_s']:>8.1f}  {rss:<12} {r['load_before']} -> "
              f"{r.get('load_after')}")
    launcher = [p for r in runs.values() for p in r["processes"] if "accelerate launch" in p["cmd"]]
    if launcher:
        print(f"(the accelerate launcher process itself: peak RSS {launcher[0]['peak_rss_mb']:.0f} MB)")
    for name, r in runs.items():
        if r.get("rank_done_s"):
            start = "?" if r.get("startup_s") is None else f"{r['startup_s']:.1f}"
            print(f"{name}: s from the command's start: work folder claimed {start}, ranks' last batch "
                  f"{', '.join(f'{t:.1f}' for t in r['rank_done_s'])}, summary written {r['summary_written_s']:.1f}, "
                  f"exit {r['wall_s']:.1f} ({r['exit_after_run_info_s']:.1f} after run_info.json)")
    rc = 0
    for label, lp in loops.items():
        lr = runs[label]
        print(f"\n{label}: measured on {lr['measured_rows']} evenly spaced rows in {lr['measured_s']:.1f} s "
              f"({lr['measured_x_real_time']:.0f}x real time; the mean of "
              + ", ".join(f"{t['seconds']:.1f} s {t['when']} ours" for t in lr["timings"])
              + f"), EXTRAPOLATED to {n} rows")
        for name in ("ours, 1 process", "ours, 2 processes"):
            if name not in runs:
                continue
            o = runs[name]
            print(f"  {name}: {lr['wall_s'] / o['wall_s']:.1f}x faster (wall, start-up included), "
                  f"{lr['wall_s'] / o['scoring_s']:.1f}x (scoring time), {lr['cpu_s'] / o['cpu_s']:.1f}x less CPU")
            diffs = compare(root / f"out_{1 if '1 process' in name else 2}", lp)
            print(f"  same per-row values on the {len(lp['values'])} sample rows ({len(COMPARED)} keys, 6 decimals): "
                  f"{'yes' if not diffs else 'NO'}")
            for d in diffs[:10]:
                print("    " + d)
            rc = rc or (1 if diffs else 0)
    if "ours, 1 process" in runs and "ours, 2 processes" in runs:
        n1, n2 = runs["ours, 1 process"], runs["ours, 2 processes"]
        same = (root / "out_1" / "per_sample.jsonl").read_text() == (root / "out_2" / "per_sample.jsonl").read_text()
        print(f"2 processes vs 1: {n1['wall_s'] / n2['wall_s']:.2f}x; identical per_sample.jsonl: {same}")
        rc = rc or (0 if same else 1)
    if a.json:
        Path(a.json).write_text(json.dumps({"split": facts, "runs": runs}, indent=1))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
