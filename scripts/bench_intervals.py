"""Time the intervals of summary.json (``Dimension.summarize``: every aggregate recomputed on
each bootstrap resample) at the size of the SPEAR test split, before and after
``Dimension.resampled_aggregate``.

The per-row values of a scored run (``RESULTS/per_sample.jsonl`` + the metadata CSV it scored)
are repeated up to ``--rows`` rows (default 2725, the pooled test split), then each dimension of
the run summarizes them with ``--bootstrap`` resamples twice: through the generic recompute
(``Dimension.resampled_aggregate`` of the base class: ``aggregate`` on the resampled lists of
rows, the path before the dimension's own resampler) and through the dimension's own
``resampled_aggregate`` (per-row inputs read once into arrays). Prints seconds per dimension
for both, and whether the two summaries (every ``_ci95`` included) are identical.

``--questioners N`` spreads the repeated rows over N questioners (copy k of the run's rows
answers questioner ``Q<k mod N>``; 0 = keep the run's own), so the groups of
``explainable_normalized_f0_std_avg`` have the sizes of a split with many questioners instead of
a few groups of hundreds of repeated rows.

    .venv/bin/python scripts/bench_intervals.py --results demo_out/results/human \
        --metadata demo_out/data/metadata.csv [--rows 2725] [--bootstrap 1000] [--questioners 0]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", required=True)
    ap.add_argument("--metadata", required=True)
    ap.add_argument("--rows", type=int, default=2725)
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--questioners", type=int, default=0)
    args = ap.parse_args()
    from spear_datasets.schema import parse_row, read_metadata
    from spear_metrics.core.dimension import Dimension
    from spear_metrics.core.registry import load_dimension

    summary = json.loads((Path(args.results) / "summary.json").read_text())
    rows = [json.loads(l) for l in (Path(args.results) / "per_sample.jsonl").read_text().splitlines() if l.strip()]
    meta = [parse_row(r) for r in read_metadata(args.metadata)]
    ok = [(meta[r["row"]], r) for r in rows if r["status"] == "ok"]
    n_ok = len(ok)
    ok = (ok * -(-args.rows // n_ok))[: args.rows]
    m, v = [a for a, _ in ok], [b for _, b in ok]
    if args.questioners > 0:  # copy k = i // n_ok of the run's rows answers Q<k mod N>
        m = [replace(r, transcript_question=f"{r.transcript_question} Q{(i // n_ok) % args.questioners}: ?")
             for i, r in enumerate(m)]
    total = {"generic": 0.0, "resampled": 0.0}
    print(f"{len(v)} rows, {args.bootstrap} resamples; seconds of summarize per dimension")
    print(f"{'dimension':<22} {'generic':>8} {'resampled':>10} {'speed-up':>9}  intervals  same summary")
    for name in summary["metrics"]:
        dim = load_dimension(name, **(summary.get("options") or {}).get(name, {}))
        took, outs = {}, {}
        for path in ("generic", "resampled"):
            if path == "generic":  # the base class's recompute, as summarize ran before
                dim.resampled_aggregate = lambda rs, vs, d=dim: Dimension.resampled_aggregate(d, rs, vs)
            else:
                del dim.resampled_aggregate
            t0 = time.perf_counter()
            outs[path] = dim.summarize(m, v, n_resamples=args.bootstrap, seed=0)
            took[path] = time.perf_counter() - t0
            total[path] += took[path]
        n_ci = sum(1 for k in outs["resampled"] if k.endswith("_ci95") and outs["resampled"][k] is not None)
        same = "yes" if outs["generic"] == outs["resampled"] else "NO"
        print(f"{name:<22} {took['generic']:8.2f} {took['resampled']:10.2f} {took['generic'] / took['resampled']:8.1f}x"
              f"  {n_ci:9d}  {same}")
    print(f"{'total':<22} {total['generic']:8.2f} {total['resampled']:10.2f} {total['generic'] / total['resampled']:8.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
