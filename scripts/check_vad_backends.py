"""The three Silero VAD backends of ``spear_metrics.core.vad`` against upstream's streaming call.

    .venv/bin/python scripts/check_vad_backends.py [--audio DIR ...] [--json out.json]

Signals: every fixture recording under ``tests/fixtures`` (real speech and Full-Duplex-Bench's
examples), each channel and the channel mix, resampled to 16 kHz with torchaudio as the
dimensions read them; ``--audio DIR`` adds every audio file of DIR (e.g. the pool of
``scripts/bench_full_split.py --workdir W``: ``W/split/pool``). For ``batched`` and ``sequence``
against ``jit`` (``silero_vad.get_speech_timestamps`` with ``load_silero_vad()``, upstream's call)
it prints the largest per-frame probability difference, the frames whose probability is
bit-identical, how many signals get the same segments with the library defaults at 0.1 s and
1 ms resolution and with the turn-taking settings (min speech 100 ms, min silence 50 ms, in
samples), and each backend's CPU time per audio second (one torch thread, models loaded first), of
its probabilities alone and of ``speech_timestamps`` with the defaults (for ``batched``, with the
exactness guard's recompute: what a run pays).
It also runs the exactness guard's recompute (``exact_probabilities``) on every signal and counts
its frames bit-identical to upstream's call. Exit 1 when a segment list or a recomputed bit differs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
AUDIO = {".wav", ".flac", ".mp3", ".ogg"}
SETTINGS = {
    "defaults, 0.1 s": dict(return_seconds=True, time_resolution=1),
    "defaults, 1 ms": dict(return_seconds=True, time_resolution=3),
    "turn-taking (100/50 ms, samples)": dict(threshold=0.5, min_speech_duration_ms=100, min_silence_duration_ms=50),
}


def signals(folders: list[Path]):
    """``(name, 16 kHz mono float32)`` for each channel and the mix of every audio file."""
    from spear_datasets.audio import convert, decode

    for folder in folders:
        for path in sorted(p for p in folder.rglob("*") if p.suffix.lower() in AUDIO):
            wav, sr = decode(path)
            views = [("mix", "mix")] + ([(f"ch{c}", c) for c in range(wav.shape[0])] if wav.shape[0] > 1 else [])
            for label, channels in views:
                x = convert(wav, sr, sr=16000, channels=channels, resampler="torchaudio", path=path)[0]
                yield f"{path.relative_to(folder)}:{label}", np.ascontiguousarray(x, dtype=np.float32)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--audio", action="append", default=[], help="another folder of audio files (recursive)")
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args()

    import torch

    from spear_metrics.core import vad

    folders = [FIXTURES] + [Path(a) for a in args.audio]
    torch.set_num_threads(1)
    for b in vad.BACKENDS:  # load every model before timing
        vad.speech_probabilities(np.zeros(16000, np.float32), backend=b)
    torch.set_num_threads(1)

    others = [b for b in vad.BACKENDS if b != "jit"]
    seconds = {b: 0.0 for b in vad.BACKENDS}
    call_seconds = {b: 0.0 for b in vad.BACKENDS}  # speech_timestamps with the defaults: what a run pays
    worst = {b: 0.0 for b in others}
    identical = {b: 0 for b in others}
    same = {b: {s: 0 for s in SETTINGS} for b in others}
    differ: list[str] = []
    n_signals = n_frames = exact_same = 0
    audio_s = 0.0
    for name, x in signals(folders):
        n_signals += 1
        audio_s += len(x) / 16000
        probs = {}
        for b in vad.BACKENDS:
            t = time.process_time()
            probs[b] = np.asarray(vad.speech_probabilities(x, backend=b), dtype=np.float64)
            seconds[b] += time.process_time() - t
        n_frames += len(probs["jit"])
        exact = vad._model("batched").exact_probabilities(x, len(probs["jit"]))  # the guard's recompute
        exact_same += int(np.sum(exact.astype(np.float64) == probs["jit"]))
        if not np.array_equal(exact.astype(np.float64), probs["jit"]):
            differ.append(f"exact_probabilities: {name}")
        for b in vad.BACKENDS:
            t = time.process_time()
            vad.speech_timestamps(x, backend=b, **SETTINGS["defaults, 0.1 s"])
            call_seconds[b] += time.process_time() - t
        ref = {s: vad.speech_timestamps(x, backend="jit", **kw) for s, kw in SETTINGS.items()}
        for b in others:
            worst[b] = max(worst[b], float(np.abs(probs[b] - probs["jit"]).max(initial=0.0)))
            identical[b] += int(np.sum(probs[b].astype(np.float32) == probs["jit"].astype(np.float32)))
            for s, kw in SETTINGS.items():
                if vad.speech_timestamps(x, backend=b, **kw) == ref[s]:
                    same[b][s] += 1
                else:
                    differ.append(f"{b} / {s}: {name}")

    print(f"{n_signals} signals, {audio_s:.1f} s of 16 kHz audio, {n_frames} frames of 32 ms")
    for b in others:
        print(f"{b:9s} max |p - p_jit| {worst[b]:.2e}; bit-identical frames {identical[b] / max(1, n_frames):.1%}; "
              + "; ".join(f"same segments ({s}) {same[b][s]}/{n_signals}" for s in SETTINGS))
    print(f"exact_probabilities (the guard's recompute): {exact_same} of {n_frames} frames bit-identical to upstream's call")
    print("CPU ms per audio second (one torch thread): "
          + ", ".join(f"{b} {1000 * seconds[b] / max(audio_s, 1e-9):.2f}" for b in vad.BACKENDS))
    print("CPU ms per audio second of speech_timestamps (defaults; batched: with its exactness guard): "
          + ", ".join(f"{b} {1000 * call_seconds[b] / max(audio_s, 1e-9):.2f}" for b in vad.BACKENDS))
    for line in differ:
        print("DIFFERENT SEGMENTS:", line)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "n_signals": n_signals, "audio_s": audio_s, "n_frames": n_frames, "max_abs_prob_diff": worst,
            "bit_identical_frames": {b: identical[b] / max(1, n_frames) for b in others}, "same_segments": same,
            "exact_recompute_identical_frames": exact_same,
            "cpu_ms_per_audio_s": {b: 1000 * seconds[b] / max(audio_s, 1e-9) for b in vad.BACKENDS},
            "cpu_ms_per_audio_s_speech_timestamps": {b: 1000 * call_seconds[b] / max(audio_s, 1e-9) for b in vad.BACKENDS},
            "different": differ,
        }, indent=2))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
