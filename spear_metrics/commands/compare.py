"""``spearbench compare RESULTS_A/ RESULTS_B/ [--out DIR]``: two runs on the same inputs, A minus B.

Two SPEAR runs (a run of another benchmark is refused in one line, exit 2: its input file names do
not name its samples). Rows are paired by input clip file name (as SPEAR's reports pair them); for every numeric
per-sample key both runs share: n pairs, both means, the mean difference with a paired
bootstrap 95 % interval and p-value (conversations resampled by default, ``--bootstrap-unit``;
Holm-adjusted over the keys), the Wilcoxon signed-rank p-value, d_z, and the unpaired
tests of SPEAR's reports (Welch, Mann-Whitney U, Cliff's delta) pooled and per subset
(:func:`spear_metrics.core.stats.compare_runs`). Prints a table; with ``--out`` writes
``DIR/comparison.json``. Runs that share no row are reported as "not comparable" (n = 0).
"""

from __future__ import annotations

import argparse
import sys

from spear_metrics.commands import command, missing_package, next_steps, shown_path, add_run_options


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("results_a", metavar="RESULTS_A", help="scored run folder or results dataset (folder or Hub id)")
    p.add_argument("results_b", metavar="RESULTS_B", help="the run it is compared with (difference = A - B)")
    add_run_options(p, out="folder for comparison.json", out_required=False, progress=False,
                    bootstrap="the paired differences", bootstrap_units=True)
    p.add_argument("--columns", default=None, metavar="COL,COL",
                   help="table columns to print, in order (default all, wrapped to 120 characters): n, mean_a, mean_b, "
                        "diff, diff_ci95, p_value, p_value_holm, wilcoxon_p, d_z, welch_p, mannwhitney_p, cliffs_delta "
                        "(comparison.json always holds every field)")


def _not_spear(source: str, run_) -> str | None:
    """Why a run cannot be compared here (one line), or ``None`` for a SPEAR run: rows are paired by
    input clip name (:func:`spear_metrics.reports.runs.input_id`), which names no sample of the other
    benchmarks (every FDB sample's input is ``<id>/input.wav``, every v2 conversation's ``<id>/A.wav``:
    all their rows would pair as one)."""
    from spear_metrics.core.registry import DEFAULT_BENCHMARK, UnknownBenchmarkError, benchmark_of_summary

    try:
        bench = benchmark_of_summary(run_.summary)
    except UnknownBenchmarkError as e:
        return str(e)
    if bench.name == DEFAULT_BENCHMARK:
        return None
    other = " (Full-Duplex-Bench v1.0 runs: spearbench fdb score --compare OTHER_RESULTS/, samples paired by id)" \
        if bench.name == "full_duplex" else ""
    return (f"{source} is a {bench.title} run: compare pairs SPEAR runs by input clip name, which does not name "
            f"that benchmark's samples{other}")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    if missing_package("compare", ["scipy"], "report"):
        return 2
    from spear_metrics.core.records import write_json_atomic
    from spear_metrics.reports.runs import COMPARISON_COLUMNS, RunLoadError, compare, comparison_table, load_run

    columns = [c.strip() for c in args.columns.split(",") if c.strip()] if args.columns else None
    unknown = [c for c in columns or [] if c not in COMPARISON_COLUMNS]
    if unknown:
        print(f"spearbench compare: --columns: unknown {', '.join(unknown)}; valid: {', '.join(COMPARISON_COLUMNS)}",
              file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else None
    if out is not None and out.exists() and not out.is_dir():
        print(f"spearbench compare: --out {out} exists and is not a folder", file=sys.stderr)
        return 2
    if out is not None:
        from spear_datasets.files import OutputError
        from spear_datasets.ownership import check_out_folder

        try:
            check_out_folder(out)  # the rule first: nothing is computed for a folder that cannot be used
        except OutputError as e:
            print(f"spearbench compare: {e}", file=sys.stderr)
            return 2
    try:
        a, b = load_run(args.results_a), load_run(args.results_b)
    except RunLoadError as e:
        print(f"spearbench compare: {e}", file=sys.stderr)
        return 2
    for src, r in ((args.results_a, a), (args.results_b, b)):
        refusal = _not_spear(src, r)
        if refusal:
            print(f"spearbench compare: {refusal}", file=sys.stderr)
            return 2
    comp = compare(a, b, n_resamples=args.bootstrap, seed=args.seed, unit=args.bootstrap_unit)
    print(comparison_table(comp, columns))
    if out is not None:
        from spear_datasets.ownership import open_folder

        with open_folder(out, command="compare"):  # new, empty or compare's own (docs/safety.md)
            write_json_atomic(out / "comparison.json", comp)
        print(f"wrote {shown_path(out, 'comparison.json')}")
    flag = "--human" if b.name.lower() == "human" else "--against"
    next_steps(("the same comparison as an HTML report, with plots",
                command("spearbench", "report", shown_path(args.results_a), flag, shown_path(args.results_b), "--out",
                        shown_path(out or args.results_a, "report"))))
    return 0
