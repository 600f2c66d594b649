"""Time the tie marks of a large Dynamic-SUPERB table (the computation of the Space's first render)
with two source trees in one run, and check that both give the same table.

The table is the synthetic one of ``scripts/bench_space_render.py`` (``--systems`` results datasets
of ``--tasks`` tasks x ``--rows`` rows, half judged, half word error rates). What is timed is the
tab's table, uncached (``spear_metrics.space.tables.benchmark_frame(..., cached=False)``: the rows
read from each dataset, every key's tie groups and rank intervals, the cells), which is what the
Space's first render of a loaded set computes (without gradio's ``postprocess``, which
``bench_space_render.py`` adds). Each tree runs in its own process (``PYTHONPATH`` = the tree);
``--before`` names a checkout of the code to compare with (e.g. ``git archive <commit> | tar -x -C
/tmp/before``), the tree holding this script is the "after". The tables of both are compared by
the SHA-256 of their CSV text: ``identical: True`` means the same marks, rank intervals and values
in every cell.

Figures are wall and CPU seconds on the machine that runs it; they depend on the machine and its
load (the script prints ``uptime`` before and after).

    .venv/bin/python scripts/bench_ties.py --before /tmp/before [--systems 180] [--tasks 200] [--rows 20] [--repeat 1]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _child(systems: int, tasks: int, rows: int) -> dict:
    """One timing in this process: the uncached Dynamic-SUPERB tab table of the synthetic datasets."""
    import importlib.util

    from spear_metrics.core.registry import benchmarks
    from spear_metrics.space import tables

    spec = importlib.util.spec_from_file_location("bench_space_render", HERE / "bench_space_render.py")
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    loaded = render.synthetic_results(systems, tasks, rows)
    tab = next(b.hook("space_tab") for b in benchmarks() if b.name == "dynamic_superb")
    w, c = time.perf_counter(), time.process_time()
    frame = tables.benchmark_frame(tab, loaded, cached=False)
    wall, cpu = time.perf_counter() - w, time.process_time() - c
    marked = sum(("★" in str(v)) or ("≈" in str(v)) for v in frame.to_numpy().ravel())
    return {"wall_s": wall, "cpu_s": cpu, "shape": list(frame.shape), "marked": int(marked),
            "sha256": hashlib.sha256(frame.to_csv(index=False).encode()).hexdigest()}


def _run(tree: Path, args: argparse.Namespace) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--systems", str(args.systems), "--tasks",
           str(args.tasks), "--rows", str(args.rows)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{tree}: exit {out.returncode}: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "load average (1 min) %.2f" % os.getloadavg()[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", type=int, default=180)
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--rows", type=int, default=20, help="rows per task")
    ap.add_argument("--before", type=Path, help="a checkout of the code to compare with (its repository root)")
    ap.add_argument("--repeat", type=int, default=1, help="timings per tree (before and after alternate)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds one timing may take")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args.systems, args.tasks, args.rows)))
        return 0
    trees = {"after": HERE.parent} | ({"before": args.before.resolve()} if args.before else {})
    print(f"{args.systems} systems x {args.tasks} tasks x {args.rows} rows; {_uptime()}")
    runs: dict[str, list[dict]] = {k: [] for k in trees}
    for _ in range(args.repeat):
        for name in sorted(trees):  # "after" then "before", alternating over the repeats
            r = _run(trees[name], args)
            runs[name].append(r)
            print(f"{name:6s} wall {r['wall_s']:8.2f} s  cpu {r['cpu_s']:8.2f} s  table {r['shape'][0]} x "
                  f"{r['shape'][1]}, {r['marked']} marked cells")
    med = {k: sorted(x["wall_s"] for x in v)[len(v) // 2] for k, v in runs.items()}
    cpu = {k: sorted(x["cpu_s"] for x in v)[len(v) // 2] for k, v in runs.items()}
    same = len({x["sha256"] for v in runs.values() for x in v}) == 1
    if "before" in med:
        print(f"before / after, median wall: {med['before'] / med['after']:.1f}x; "
              f"CPU: {cpu['before'] / cpu['after']:.1f}x")
    print(f"tables identical: {same}")
    print(_uptime())
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
