"""Time the Space's render of a large Dynamic-SUPERB table: the first render (tie marks computed),
the next renders (tie marks and table kept per loaded set, ``spear_metrics.space.tables.MARKS``)
and the uncached path (everything recomputed on each render: `benchmark_frame(..., cached=False)`), in one run.

The table is synthetic: ``--systems`` results datasets of ``--tasks`` tasks with ``--rows`` rows
each; half the tasks are judged (``llm_classification``: per-row verdicts, so two marked columns,
the upstream key and ``judge_accuracy``), the other half word error rates (``WER`` from per-row
edits and reference tokens), plus the overall means (one more marked column per key). System
``s`` answers row ``i`` right when ``(i * 7 + s * 3) % 10 < 6 + s % 3``, which gives ties and
clear differences at once. A render is what the tab's event runs: the tab's table
(:func:`spear_metrics.space.tables.benchmark_frame`) and gradio's ``Dataframe.postprocess`` of it
(what is sent to the page). Every cached table is checked equal to the uncached one.

Figures are wall seconds on the machine that runs it; they depend on the machine and its load
(the script prints the 1-minute load average before and after).

    .venv/bin/python scripts/bench_space_render.py [--systems 180] [--tasks 200] [--rows 20] [--renders 5]
"""

from __future__ import annotations

import argparse
import os
import time


def synthetic_results(n_systems: int, n_tasks: int, n_rows: int) -> list:
    """``n_systems`` loaded Dynamic-SUPERB results datasets (``Results``) of ``n_tasks`` tasks x ``n_rows`` rows."""
    import pandas as pd

    from spear_metrics.dynamic_superb.results import BENCHMARK
    from spear_metrics.dynamic_superb.scoring import aggregate_task
    from spear_metrics.results.load import Results

    tasks_of = {f"Task{t:03d}": ("llm_classification" if t % 2 == 0 else "word_error_rate") for t in range(n_tasks)}
    out = []
    for s in range(n_systems):
        rows: list[dict] = []
        tasks = {}
        for inst, metric in tasks_of.items():
            mine = []
            for i in range(n_rows):
                right = int((i * 7 + s * 3) % 10 < 6 + s % 3)
                r = {"row": len(rows) + len(mine), "instance": inst, "file": f"{inst}_{i}", "status": "ok"}
                if metric == "llm_classification":
                    r.update(judge_accuracy=right, llm_classification=right)
                else:
                    r.update(WER_edits=1 - right + s % 2, WER_ref_tokens=10)
                mine.append(r)
            tasks[inst] = aggregate_task(metric, mine, n_rows, n_resamples=0)
            rows += mine
        overall = {}
        for key in ("judge_accuracy", "WER"):
            vals = [t[key] for t in tasks.values() if t.get(key) is not None]
            overall[key] = {"mean": sum(vals) / len(vals), "n_tasks": len(vals)}
        summary = {"benchmark": BENCHMARK, "tasks": tasks, "overall": overall, "judge": {"model": "synthetic"}}
        out.append(Results(source=f"local:sys{s:03d}", model=f"sys{s:03d}", inference_mode=None, open_weights=None,
                           summary=summary, samples=pd.DataFrame(rows)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", type=int, default=180)
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--rows", type=int, default=20, help="rows per task")
    ap.add_argument("--renders", type=int, default=5, help="renders timed after the first (cached) and uncached")
    args = ap.parse_args()
    import gradio as gr

    from spear_metrics.core.registry import benchmarks
    from spear_metrics.space import tables

    tab = next(b.hook("space_tab") for b in benchmarks() if b.name == "dynamic_superb")
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    loaded = synthetic_results(args.systems, args.tasks, args.rows)
    print(f"{args.systems} systems x {args.tasks} tasks x {args.rows} rows built in {time.perf_counter() - t0:.1f} s; "
          f"load average (1 min) {load0:.2f}")
    component = gr.Dataframe(interactive=False, wrap=True)

    def render(cached: bool):
        t = time.perf_counter()
        frame = tables.benchmark_frame(tab, loaded, cached=cached)
        component.postprocess(frame)
        return frame, time.perf_counter() - t

    tables.MARKS.clear()
    first, t_first = render(True)
    nexts = [render(True) for _ in range(args.renders)]
    uncached = [render(False) for _ in range(args.renders)]
    same = all(f.equals(first) for f, _ in nexts) and all(f.equals(first) for f, _ in uncached)
    t_next = sorted(t for _, t in nexts)[len(nexts) // 2]
    t_unc = sorted(t for _, t in uncached)[len(uncached) // 2]
    marked = sum(("★" in str(v)) or ("≈" in str(v)) for v in first.to_numpy().ravel())
    print(f"table: {first.shape[0]} rows x {first.shape[1]} columns, {marked} cells with a tie mark")
    print(f"first render (marks computed):     {t_first:8.3f} s")
    print(f"next renders (cached), median:      {t_next:8.3f} s  ({args.renders} renders)")
    print(f"uncached renders, median:           {t_unc:8.3f} s  ({args.renders} renders)")
    print(f"uncached / cached next render:      {t_unc / t_next:8.1f}x")
    print(f"computations: {tables.MARKS.computed} (1 expected); cached tables equal to the uncached: {same}")
    print(f"load average (1 min) after: {os.getloadavg()[0]:.2f}")
    return 0 if same and tables.MARKS.computed == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
