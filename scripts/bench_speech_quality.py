"""Speed of the speech_quality backends on CPU: samples/s and real-time factor (audio s / wall s),
batched vs one by one, on the real fixtures (jfk 11 s, VCTK p225/p226 ~3 s); with ``--compare``,
the embedded profile's models (Whisper base + DNSMOS + DistillMOS) as the dimension runs them,
one model after the other on the libraries' default threads (``cpu_lanes=1``) against side by
side on one thread each (the default on CPU), interleaved in one run on the same answers, model
loading included; with ``--profile``, what bounds the embedded profile: each model alone on one
thread, its CPU seconds per answer audio second, and the real-time factor their arithmetic allows
on the machine's cores.

Usage:
    python scripts/bench_speech_quality.py [--repeat N] [--threads N]
    python scripts/bench_speech_quality.py --compare [--rows 12] [--rounds 2] [--lanes 0] [--paths both|default]
    python scripts/bench_speech_quality.py --profile [--rows 12] [--cores 0]

``--compare`` and ``--profile`` cut ``--rows`` answers from ``tests/fixtures/real``, their
lengths drawn as SPEAR's human answers (``--lengths spear``: mean 8.8 s, 1-30 s, as
``scripts/bench_full_split.py``) or 3, 5, 8, 12, 4, 20 s in turn (``--lengths fixed``). The
number of windows the MOS models read depends on the length (DNSMOS tiles an answer under 9.01 s
to at least 9.01 s and reads a window every second). ``--compare`` times per round a fresh
dimension of each kind (models loaded anew: the per-process cache is cleared) over them in
batches of 16, as the runner calls ``score_batch``; it prints answer audio seconds per wall
second of each, their ratio, the largest MOS difference and whether the texts are the same, and
the load average (``--paths default``: the default path alone, one timing per round). The figures
depend on the machine and its load; the ratio of two runs in the same process less so.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from spear_datasets.audio import load_audio
from spear_metrics.core.asr import load_asr
from spear_metrics.core.mos import load_mos

REAL = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "real"
CLIPS = ["faster-whisper__jfk.flac", "speechbrain__p225_002.wav", "speechbrain__p226_002.wav"]
#: recordings the compared answers are cut from, and the answer lengths (s) taken in turn
SOURCES = ["pyannote-audio__seriously_source0.wav", "pyannote-audio__dev00.wav", "pyannote-audio__seriously_source1.wav",
           "pyannote-audio__sample.wav", "pyannote-audio__seriously_source2.wav", "faster-whisper__jfk.flac",
           "pyannote-audio__seriously_source3.wav", "lhotse__ES2011a.Headset-0-40s-46s.wav"]
LENGTHS_S = [3.0, 5.0, 8.0, 12.0, 4.0, 20.0]


def _best(fn, repeat):
    fn()  # warm-up
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts)


def answer_lengths(n_rows: int, lengths: str = "spear", seed: int = 0) -> list[float]:
    """Answer lengths (s): ``"spear"`` draws them as ``scripts/bench_full_split.py`` draws its
    answers (gamma of shape 3 clipped to 1-30 s, mean 8.79 s: the human answers of the published
    table), ``"fixed"`` takes :data:`LENGTHS_S` in turn. How long an answer is decides how many
    windows DNSMOS and DistillMOS read (:func:`windows`)."""
    if lengths == "fixed":
        return [LENGTHS_S[k % len(LENGTHS_S)] for k in range(n_rows)]
    from bench_full_split import MEAN_ANSWER_S, _lengths

    return [float(x) for x in _lengths(np.random.default_rng(seed), n_rows, MEAN_ANSWER_S, 1.0, 30.0)]


def answers(n_rows: int, lengths: str = "spear") -> list[np.ndarray]:
    """``n_rows`` 16 kHz mono answers cut from :data:`SOURCES` (lengths from :func:`answer_lengths`,
    each from the next source, at an offset that moves on by 7 s per use of a source; a source
    shorter than the length gives all it has)."""
    sources = [load_audio(REAL / c, sr=16000, channels="mix")[0] for c in SOURCES]
    out, used = [], [0] * len(sources)
    for k, length in enumerate(answer_lengths(n_rows, lengths)):
        j = k % len(sources)
        w = sources[j]
        n = min(int(length * 16000), w.size)
        start = (used[j] * 7 * 16000) % max(1, w.size - n + 1)
        used[j] += 1
        out.append(np.ascontiguousarray(w[start : start + n]))
    return out


def windows(n_samples: int) -> tuple[int, int]:
    """``(DNSMOS windows, DistillMOS windows)`` of a 16 kHz answer of ``n_samples``: speechmos
    tiles an answer shorter than 9.01 s to at least 9.01 s (doubling it), then reads a 9.01 s
    window every second; DistillMOS reads 7.68 s windows, hops of at most 1 s."""
    from spear_metrics.core.mos import DistillMOS

    if not n_samples:
        return 0, 0
    n, window = n_samples, int(9.01 * 16000)
    while n < window:
        n *= 2
    hops = int(np.floor(n / 16000) - 9.01) + 1  # speechmos' count; it skips a window cut short by the end
    dns = sum(1 for k in range(hops) if min(n, int((k + 9.01) * 16000)) - int(k * 16000) >= window)
    return dns, len(DistillMOS.windows(n_samples))


def _dimension_run(waves: list[np.ndarray], lanes: int) -> tuple[float, dict[int, list], dict[str, list]]:
    """Wall seconds of a fresh embedded speech_quality (models loaded anew) over ``waves`` in
    batches of 16, and its MOS values and texts (:meth:`SpeechQuality._run_models`)."""
    from spear_metrics.speech_quality import definition

    definition._SHARED_BACKENDS.clear()
    t = time.perf_counter()
    dim = definition.SpeechQuality(cpu_lanes=lanes, device="cpu")
    mos: dict[str, list] = {}
    texts: dict[str, list] = {}
    for k in range(0, len(waves), 16):
        m, h = dim._run_models(waves[k : k + 16])
        for b in dim.moss:
            mos.setdefault(b.name, []).extend(m[id(b)])
        for label, v in h.items():
            texts.setdefault(label, []).extend(v)
    return time.perf_counter() - t, mos, texts


def compare(n_rows: int, rounds: int, lanes: int, lengths: str = "spear", paths: str = "both") -> None:
    from spear_metrics.speech_quality.definition import cpu_lanes

    waves = answers(n_rows, lengths)
    audio_s = sum(w.size for w in waves) / 16000
    print(f"{len(waves)} answers, {audio_s:.1f} s of audio (mean {audio_s / len(waves):.1f} s); "
          f"{len(os.sched_getaffinity(0))} usable cores; new path: {cpu_lanes(lanes)} lanes")
    print(f"{'round':>5s} {'path':10s} {'wall_s':>7s} {'x real time':>11s} {'load avg (1 min)':>16s}")
    walls: dict[str, list[float]] = {"old": [], "new": []}
    results = {}
    for r in range(rounds):
        order = (("old", 1), ("new", lanes)) if r % 2 == 0 else (("new", lanes), ("old", 1))
        for path, n in order if paths == "both" else (("new", lanes),):
            wall, mos, texts = _dimension_run(waves, n)
            walls[path].append(wall)
            results[path] = (mos, texts)
            print(f"{r + 1:5d} {path:10s} {wall:7.1f} {audio_s / wall:11.2f} {os.getloadavg()[0]:16.2f}", flush=True)
    if paths != "both":
        print(f"default path: {audio_s * len(walls['new']) / sum(walls['new']):.2f}x real time over {len(walls['new'])} "
              f"round(s); load average (1, 5, 15 min) at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return
    (m_old, t_old), (m_new, t_new) = results["old"], results["new"]
    diff = max((abs(a[k] - b[k]) for name in m_old for a, b in zip(m_old[name], m_new[name]) for k in a
                if a[k] is not None), default=0.0)
    same_text = t_old == t_new
    ratio = sum(walls["old"]) / sum(walls["new"])
    print(f"old / new wall time (sum over rounds): {ratio:.2f}x; per round: "
          + ", ".join(f"{o / n:.2f}x" for o, n in zip(walls["old"], walls["new"])))
    print(f"largest MOS difference: {diff:.2e}; texts identical: {same_text}; load average "
          f"(1, 5, 15 min) at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


def profile(n_rows: int, lengths: str = "spear", cores: int = 0) -> None:
    """What bounds the embedded profile on CPU: each model alone on one thread (loaded first, not
    timed) over the same answers, its CPU seconds per answer audio second, and the real-time
    factor the models' arithmetic allows on ``cores`` cores (0 = the usable ones) if every core
    computed all the time: audio seconds / (CPU seconds of all models / cores)."""
    from spear_metrics.speech_quality.definition import cpu_lanes

    cores = cpu_lanes(cores)
    waves = answers(n_rows, lengths)
    audio_s = sum(w.size for w in waves) / 16000
    n_win = [windows(w.size) for w in waves]
    print(f"{len(waves)} answers, {audio_s:.1f} s of audio (mean {audio_s / len(waves):.1f} s); DNSMOS windows "
          f"{sum(d for d, _ in n_win)} (9.01 s each), DistillMOS windows {sum(m for _, m in n_win)} (7.68 s each), "
          f"Whisper windows {len(waves)} (30 s each, padded); one thread per model; load average "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    total = 0.0
    for label, backend, run in [
        ("Whisper base (CTranslate2 int8)", load_asr("embedded", cpu_threads=1, device="cpu"), lambda b: b.transcribe(waves)),
        ("DNSMOS (ONNX Runtime)", load_mos("dnsmos", threads=1), lambda b: b.score(waves)),
        ("DistillMOS (torch)", load_mos("distillmos", device="cpu"), lambda b: b.score(waves)),
    ]:
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            backend.load()
            run(backend)  # first call outside the timing (allocations, kernels chosen)
            t, c = time.perf_counter(), time.process_time()
            run(backend)
            wall, cpu = time.perf_counter() - t, time.process_time() - c
        finally:
            torch.set_num_threads(threads)
        total += cpu
        print(f"{label:34s} CPU {cpu:7.1f} s  wall {wall:7.1f} s  CPU s per audio s {cpu / audio_s:6.3f}", flush=True)
    print(f"all three: CPU s per audio s {total / audio_s:.3f}: at most {audio_s / (total / cores):.2f}x real time on "
          f"{cores} cores busy all the time (model loading and decoding not counted); load average at the end "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="torch / CTranslate2 threads (0 = default)")
    ap.add_argument("--compare", action="store_true", help="the dimension's two CPU paths, interleaved (see above)")
    ap.add_argument("--rows", type=int, default=12, help="--compare: answers")
    ap.add_argument("--rounds", type=int, default=2, help="--compare: rounds (each times both paths)")
    ap.add_argument("--lanes", type=int, default=0, help="--compare: lanes of the new path (0 = usable cores)")
    ap.add_argument("--lengths", choices=("spear", "fixed"), default="spear",
                    help="--compare/--profile: answer lengths drawn as SPEAR's (mean 8.8 s) or 3, 5, 8, 12, 4, 20 s in turn")
    ap.add_argument("--paths", choices=("both", "default"), default="both",
                    help="--compare: both CPU paths interleaved, or the default path alone")
    ap.add_argument("--profile", action="store_true", help="each model alone on one thread: what bounds the profile")
    ap.add_argument("--cores", type=int, default=0, help="--profile: cores of the bound (0 = usable cores)")
    args = ap.parse_args()
    if args.compare:
        compare(args.rows, args.rounds, args.lanes, args.lengths, args.paths)
        return
    if args.profile:
        profile(args.rows, args.lengths, args.cores)
        return
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    waves = [load_audio(REAL / c, sr=16000, channels="mix")[0] for c in CLIPS]
    audio_s = sum(len(w) for w in waves) / 16000
    print(f"{len(waves)} clips, {audio_s:.1f} s of audio")
    print(f"{'backend':32s} {'mode':10s} {'load_s':>7s} {'wall_s':>7s} {'samples/s':>9s} {'RTF(x)':>7s}")
    for label, make, run in [
        ("asr embedded (whisper base)", lambda: load_asr("embedded", cpu_threads=args.threads), lambda b, ws: b.transcribe(ws)),
        ("asr embedded:tiny.en", lambda: load_asr("embedded", model="embedded:tiny.en", cpu_threads=args.threads), lambda b, ws: b.transcribe(ws)),
        ("mos dnsmos", lambda: load_mos("dnsmos", threads=args.threads), lambda b, ws: b.score(ws)),
        ("mos distillmos", lambda: load_mos("distillmos", device="cpu"), lambda b, ws: b.score(ws)),
    ]:
        b = make()
        t = time.perf_counter()
        b.load()
        load_s = time.perf_counter() - t
        for mode, fn in [("batched", lambda: run(b, waves)), ("1-by-1", lambda: [run(b, [w]) for w in waves])]:
            wall = _best(fn, args.repeat)
            print(f"{label:32s} {mode:10s} {load_s:7.2f} {wall:7.2f} {len(waves) / wall:9.2f} {audio_s / wall:7.2f}")
    print("RTF(x) = seconds of audio per wall second (higher is faster). MOS backends score one wave at a time by "
          "design (padding shifts UTMOS/DistillMOS), so batched == 1-by-1 for them.")


if __name__ == "__main__":
    main()
