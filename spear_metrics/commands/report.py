"""``spearbench report RESULTS/ [--human HUMAN_RESULTS/] [--against OTHER/ ...] --out REPORT_DIR/``.

Writes ``REPORT_DIR/index.html`` (one self-contained page: provenance, each dimension's values
with 95 % intervals next to the human answers' and the published human row, the tests against
the human answers, distribution plots, timing evidence) and the plots as PNG files beside it
(:mod:`spear_metrics.reports.html`). A run with problems (failed rows, missing keys, a single
row, no row shared with the human answers) is reported with the problems said in words.
"""

from __future__ import annotations

import argparse
import sys

from spear_metrics.commands import (
    add_run_options, command, missing_package, next_steps, shown_path, wrap,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", metavar="RESULTS", help="the scored run (RESULTS folder or results dataset)")
    p.add_argument("--human", default=None, help="the human answers scored by the same code (RESULTS folder or results dataset)")
    p.add_argument("--against", action="append", default=[], metavar="OTHER",
                   help="another run shown beside (repeatable)")
    p.add_argument("--name", default=None, help="display name of the run (default: the results card's model name, else the agent of the infer run it scored, else the folder name)")
    add_run_options(p, out="report folder (index.html + PNG files)", progress=False,
                    bootstrap="the paired tests against the human answers", bootstrap_units=True)


def other_benchmark(run_, out) -> int | None:
    """A run (:class:`spear_metrics.reports.runs.RunData`) of another benchmark than SPEAR (the
    registry's :func:`~spear_metrics.core.registry.benchmark_of_summary`): its descriptor's report
    hook writes the page (``0``), or one line says there is none for it (``2``); ``None`` for a
    SPEAR run."""
    from spear_metrics.core.registry import DEFAULT_BENCHMARK, UnknownBenchmarkError, benchmark_of_summary

    try:
        bench = benchmark_of_summary(run_.summary)
    except UnknownBenchmarkError as e:
        print(f"spearbench report: {e}", file=sys.stderr)
        return 2
    if bench.name == DEFAULT_BENCHMARK:
        return None
    hook = bench.hook("report")
    if hook is None:
        print(f"spearbench report: a {bench.title} run has no report page (the report is SPEAR's); its summary.json "
              f"and per_sample.jsonl are the results, push-results publishes them", file=sys.stderr)
        return 2
    print(f"wrote {shown_path(hook(run_, out))}")
    return 0


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    if missing_package("report", ["scipy", "matplotlib"], "report"):
        return 2
    from spear_metrics.reports.html import build_report, load_for_report
    from spear_metrics.reports.runs import RunLoadError, load_run

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        print(f"spearbench report: --out {out} exists and is not a folder", file=sys.stderr)
        return 2
    try:
        run_ = load_run(args.results, name=args.name)
    except RunLoadError as e:
        print(f"spearbench report: {e}", file=sys.stderr)
        return 2
    refusal = other_benchmark(run_, out)
    if refusal is not None:
        return refusal
    notes = []
    human = None
    if args.human:
        human, why = load_for_report(args.human, "human answers", load_run)
        if why:
            notes.append(why)
    others = []
    for src in args.against:
        r, why = load_for_report(src, "run", load_run)
        if why:
            notes.append(why)
        else:
            others.append(r)
    path = build_report(run_, out, human=human, against=others, notes=notes, n_resamples=args.bootstrap, seed=args.seed,
                        bootstrap_unit=args.bootstrap_unit)
    for n in notes + run_.problems:
        print(wrap(f"spearbench report: note: {n}"), file=sys.stderr)
    print(f"wrote {shown_path(path)}")
    steps: list = [("open it in a browser (one self-contained file; the plots are also PNG files beside it)",
                    shown_path(path))]
    results = Path(args.results)
    if (results / "per_sample.jsonl").is_file() and out.resolve() == (results / "report").resolve():
        from spear_metrics.core.scoring import scored_metadata

        metadata = scored_metadata(results)  # the CSV the run scored, as score recorded it
        metadata_arg = shown_path(metadata) if metadata is not None and metadata.is_file() else "METADATA.csv"
        steps.append(("publish the run with this report as a results dataset (report/ is included)",
                      command("spearbench", "push-results", shown_path(results), "--local-dir",
                              shown_path(results.parent, f"{results.name}_dataset"), "--model-name", run_.name,
                              "--metadata", metadata_arg, "--with-audio")))
    next_steps(*steps)
    return 0
