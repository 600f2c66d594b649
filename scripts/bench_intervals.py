"""Time the intervals of summary.json (``Dimension.summarize``: every aggregate recomputed on
each bootstrap resample) at the size of the SPEAR test split.

The per-row values of a scored run (``RESULTS/per_sample.jsonl`` + the metadata CSV it scored)
are repeated up to ``--rows`` rows (default 2725, the pooled test split), then each dimension of
the run summarizes them with ``--bootstrap`` resamples. Prints seconds per dimension.

    .venv/bin/python scripts/bench_intervals.py --results demo_out/results/human \
        --metadata demo_out/data/metadata.csv [--rows 2725] [--bootstrap 1000]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", required=True)
    ap.add_argument("--metadata", required=True)
    ap.add_argument("--rows", type=int, default=2725)
    ap.add_argument("--bootstrap", type=int, default=1000)
    args = ap.parse_args()
    from spear_datasets.schema import parse_row, read_metadata
    from spear_metrics.core.registry import load_dimension

    summary = json.loads((Path(args.results) / "summary.json").read_text())
    rows = [json.loads(l) for l in (Path(args.results) / "per_sample.jsonl").read_text().splitlines() if l.strip()]
    meta = [parse_row(r) for r in read_metadata(args.metadata)]
    ok = [(meta[r["row"]], r) for r in rows if r["status"] == "ok"]
    reps = -(-args.rows // len(ok))
    ok = (ok * reps)[: args.rows]
    m, v = [a for a, _ in ok], [b for _, b in ok]
    opts = summary.get("options") or {}
    total = 0.0
    for name in summary["metrics"]:
        dim = load_dimension(name, **opts)
        t0 = time.perf_counter()
        out = dim.summarize(m, v, n_resamples=args.bootstrap, seed=0)
        dt = time.perf_counter() - t0
        total += dt
        n_ci = sum(1 for k in out if k.endswith("_ci95") and out[k] is not None)
        print(f"{name:<22} {dt:7.2f} s  ({n_ci} intervals, {len(v)} rows, {args.bootstrap} resamples)")
    print(f"{'total':<22} {total:7.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
