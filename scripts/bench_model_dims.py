"""Throughput of the model-based dimensions on CPU: samples/s per dimension, batched vs
unbatched, 1 vs 2 processes (``ACCELERATE_USE_CPU=true accelerate launch --multi_gpu``).

Uses TINY RANDOM models of the real architectures (tests/model_fixtures.py) unless real ones
are swapped in by editing ``models`` below: the figures then measure the
pipeline (audio decoding, VAD, feature extraction, batching, gather), not the reference
models' compute. Times are the runner's scoring time (``run_info.json`` ``elapsed_s``, max
over ranks): process start-up is excluded, model loading (lazy, on the first batch) included.

    .venv/bin/python scripts/bench_model_dims.py --rows 20
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20, help="metadata rows (the 5-row fixture pattern repeated)")
    ap.add_argument("--dims", default="language_dialect,emotions,turn_taking")
    args = ap.parse_args()

    from conftest import STEREO_DIALOGUE
    from model_fixtures import five_rows, tiny_models

    root = Path(tempfile.mkdtemp(prefix="bench_model_dims_"))
    models = tiny_models(root / "models")
    data = root / "data"
    data.mkdir()
    md5 = five_rows(STEREO_DIALOGUE, data)
    lines = md5.read_text().splitlines()
    header, body = lines[0], lines[1:]
    rows = []
    for i in range(args.rows):  # distinct input clip names (duplicates would be failed rows)
        k = i % len(body)
        src = data / f"q{k}.wav"
        dst = data / f"q{k}_{i}.wav"
        if not dst.exists():
            os.link(src, dst)
        rows.append(body[k].replace(f"q{k}.wav", dst.name, 1))
    md = data / "bench.csv"
    md.write_text("\n".join([header, *rows]) + "\n")

    bin_ = Path(sys.executable).parent
    env = dict(os.environ, ACCELERATE_USE_CPU="true", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), HF_HUB_OFFLINE="1")
    results = []
    for dim in args.dims.split(","):
        for label, batch, mbs, nproc in [("unbatched", 1, 1, 1), ("batched", 16, 8, 1), ("batched", 16, 8, 2)]:
            out = root / f"out_{dim}_{label}_{nproc}"
            cmd = [str(bin_ / "spearbench"), "score", "--metadata", str(md), "--metrics", dim, "--out", str(out),
                   "--batch-size", str(batch), "--no-progress", "-o", f"model_batch_size={mbs}", "-o", f"vap_batch_size={mbs}"]
            for k, v in models.items():
                cmd += ["-o", f"{k}={v}"]
            if nproc > 1:
                cmd = [str(bin_ / "accelerate"), "launch", "--multi_gpu", "--num_processes", str(nproc), "--num_machines", "1",
                       "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29531", *cmd]
            p = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if p.returncode != 0:
                print(p.stderr[-2000:], file=sys.stderr)
                return 1
            info = json.loads((out / "run_info.json").read_text())
            sps = args.rows / info["elapsed_s"]
            results.append({"dimension": dim, "mode": label, "processes": nproc, "rows": args.rows,
                            "elapsed_s": round(info["elapsed_s"], 2), "samples_per_s": round(sps, 2)})
            print(json.dumps(results[-1]), flush=True)
    print("\n| dimension | mode | processes | samples/s |\n|---|---|---|---|")
    for r in results:
        print(f"| {r['dimension']} | {r['mode']} | {r['processes']} | {r['samples_per_s']} |")
    print(f"\n(tiny random models; CPU: {os.cpu_count()} cores visible, OMP_NUM_THREADS={env['OMP_NUM_THREADS']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
