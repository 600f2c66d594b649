"""Speed of the speech_quality backends on CPU: samples/s and real-time factor (audio s / wall s),
batched vs one by one, on the real fixtures (jfk 11 s, VCTK p225/p226 ~3 s).

Usage: python scripts/bench_speech_quality.py [--repeat N] [--threads N]
Model loading is timed apart; each figure is the best of ``--repeat`` runs after one warm-up.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


from spear_datasets.audio import load_audio
from spear_metrics.core.asr import load_asr
from spear_metrics.core.mos import load_mos

REAL = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "real"
CLIPS = ["faster-whisper__jfk.flac", "speechbrain__p225_002.wav", "speechbrain__p226_002.wav"]


def _best(fn, repeat):
    fn()  # warm-up
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="torch / CTranslate2 threads (0 = default)")
    args = ap.parse_args()
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
