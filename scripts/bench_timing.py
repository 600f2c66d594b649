"""Speed and memory of `interruptions` + `explainable_features` against a plain upstream-style loop.

Builds N SPEAR samples from the real fixtures (input clip: the stereo AMI dialogue cut at the end of
FEE016's turn; answers: every real mono/stereo recording in tests/fixtures/real), then times

- ours: `spearbench score` (run_score, streaming batches, Silero's batched VAD backend), and
- baseline: `scripts/spear_reference.py`, a plain re-statement of SPEAR's rule with no project code:
  a per-file loop (torchaudio load + resample, `silero_vad.get_speech_timestamps` with defaults, the
  streaming JIT model, on the mixed question and on the answer cut at the skip point) plus Praat
  pitch of the answer file,

checks that both give the same latencies, and reports real-time factor (question + answer audio
seconds per wall second), samples/s, and peak RSS for N and 4N samples (each config in a fresh
process so the peaks do not mix).

    .venv/bin/python scripts/bench_timing.py [--n 24]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REAL = REPO / "tests" / "fixtures" / "real"
ANSWERS = ["faster-whisper__jfk.flac", "speechbrain__p225_002.wav", "speechbrain__p226_002.wav",
           "lhotse__ES2011a.Headset-0-40s-46s.wav", "pyannote-audio__dev00.wav", "pyannote-audio__sample.wav"]


def build(n: int, root: Path) -> Path:
    sys.path.insert(0, str(REPO / "tests"))
    from helpers import make_clips, row, write_rows

    q, _ = make_clips(REAL / "DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav", root)
    rows = []
    for i in range(n):
        p = root / f"in{i}.wav"
        if not p.exists():
            os.link(q, p)
        rows.append(row(p.name, str(REAL / ANSWERS[i % len(ANSWERS)]), [None, 0.3, -0.5][i % 3]))
    return write_rows(root / "metadata.csv", rows)


def ours(meta: Path) -> dict:
    import accelerate  # noqa: F401  (imports torch: outside the timing, as the baseline's model load)
    import silero_vad  # noqa: F401

    from spear_metrics.core.scoring import run_score

    out = meta.parent / "ours"
    t = time.perf_counter()
    run_score(meta, "interruptions,explainable_features", out, progress=False, overwrite=True)
    dt = time.perf_counter() - t
    lat = [json.loads(l).get("latency_ms") for l in (out / "per_sample.jsonl").read_text().splitlines()]
    return {"seconds": dt, "latency_ms": lat}


def baseline(meta: Path) -> dict:
    import csv

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import spear_reference as ref

    ref._vad_model()  # model load outside the timing, as ours loads torch outside it
    with open(meta, newline="") as f:
        rows = list(csv.DictReader(f))
    t = time.perf_counter()
    lat = []
    for r in rows:
        q, a = ref.resolve(meta.parent, r["audio_path"]), ref.resolve(meta.parent, r["answer_audio_path"])
        lat.append(round(ref.latency_ms(q, a, float(r["question_end_time"]), r["answer_start_time"]), 6))
        ref.f0_features(a)
    return {"seconds": time.perf_counter() - t, "latency_ms": lat}


def audio_seconds(meta: Path) -> float:
    from spear_datasets.audio import audio_info
    from spear_datasets.schema import read_metadata

    return sum(audio_info(meta.parent / r["audio_path"]).duration + audio_info(r["answer_audio_path"]).duration for r in read_metadata(meta))


def child(kind: str, n: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        meta = build(n, Path(d))
        res = (ours if kind == "ours" else baseline)(meta)
        res["audio_s"] = audio_seconds(meta)
        res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(res))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--child", nargs=2)
    a = ap.parse_args()
    if a.child:
        return child(a.child[0], int(a.child[1]))
    runs = {}
    for kind, n in [("baseline", a.n), ("ours", a.n), ("ours", 4 * a.n)]:
        out = subprocess.run([sys.executable, __file__, "--child", kind, str(n)], capture_output=True, text=True, check=True)
        runs[(kind, n)] = json.loads(out.stdout.strip().splitlines()[-1])
    b, o = runs[("baseline", a.n)], runs[("ours", a.n)]
    same = b["latency_ms"] == o["latency_ms"]
    print(f"{'config':<18}{'samples':>8}{'audio s':>9}{'wall s':>8}{'x RT':>8}{'samples/s':>10}{'peak RSS MB':>12}")
    for (kind, n), r in runs.items():
        print(f"{kind:<18}{n:>8}{r['audio_s']:>9.1f}{r['seconds']:>8.2f}{r['audio_s'] / r['seconds']:>7.0f}x{n / r['seconds']:>10.1f}{r['peak_rss_mb']:>12.0f}")
    print(f"speed-up vs baseline: {b['seconds'] / o['seconds']:.1f}x; same latencies: {same}")
    if not same:
        diff = [(i, x, y) for i, (x, y) in enumerate(zip(b["latency_ms"], o["latency_ms"])) if x != y]
        print(f"differing rows (row, baseline, ours): {diff[:10]}")


if __name__ == "__main__":
    main()
