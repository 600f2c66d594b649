"""``spearbench score --metadata M.csv --metrics a,b --out RESULTS/``."""

from __future__ import annotations

import argparse
import sys

from spear_metrics.commands import (
    add_run_options, command, format_value, next_steps, null_reason, number, numbered_notes, overwrite_help, parse_options, print_failures, read_run_info, resumed_line, SHOWN_FAILURES, shown_path, wrap,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metadata", required=True, help="SPEAR metadata CSV with answer_audio_path filled")
    p.add_argument("--metrics", required=True, help="comma-separated dimensions, e.g. interruptions,explainable_features")
    p.add_argument("--option", "-o", action="append", default=[], metavar="KEY=VALUE",
                   help="dimension option, e.g. vad_time_resolution=3 (repeatable; an unknown key is refused "
                        "with the valid ones; the options in effect are recorded in summary.json)")
    p.add_argument("--inputs", default=None, help="the benchmark's input metadata: inputs without an answer are reported")
    p.add_argument("--batch-size", type=number(integer=True, minimum=1), default=16, help="samples per batch (>= 1, default 16)")
    add_run_options(p, out="results folder (summary.json, per_sample.jsonl); a rerun resumes",
                    retry_failed="score again the rows that failed in an earlier run", overwrite=overwrite_help("score"),
                    bootstrap="every <key>_ci95 in summary.json", bootstrap_units=True)


def run(args: argparse.Namespace) -> int:
    from spear_datasets.schema import MetadataError
    from spear_metrics.core.dimension import OptionError
    from spear_metrics.core.models import ModelUnavailableError
    from spear_metrics.core.registry import UnknownDimensionError
    from spear_metrics.core.runner import RunError
    from spear_metrics.core.scoring import run_score

    try:
        summary = run_score(args.metadata, args.metrics, args.out, options=parse_options(args.option),
                            batch_size=args.batch_size, retry_failed=args.retry_failed, overwrite=args.overwrite,
                            progress=not args.no_progress, inputs_metadata=args.inputs,
                            n_resamples=args.bootstrap, seed=args.seed, bootstrap_unit=args.bootstrap_unit)
    except (MetadataError, UnknownDimensionError, OptionError, ModelUnavailableError, RunError, ImportError) as e:
        print(f"spearbench score: {e}", file=sys.stderr)
        return 2
    if summary is not None:
        print_summary(summary)
        if (summary.get("judge_calls") or {}).get("requested_model"):
            from spear_metrics.core.judge import judge_calls_line

            print(wrap(judge_calls_line(summary["judge_calls"])))
        _show_failures(args.out)
        resumed = resumed_line(read_run_info(args.out).get("rows_resumed", 0), summary["n_samples"],
                               shown_path(args.out, ".work"))
        if resumed:
            print(wrap(resumed))
        print(f"wrote {shown_path(args.out, 'summary.json')} and per_sample.jsonl")
        print_next_steps(args.out, args.metadata, args.metrics)
    return 0


def print_next_steps(results: str, metadata: str, metrics: str) -> None:
    """What to do with a scored run: its report against the human answers, a results dataset."""
    from pathlib import Path

    out = Path(results)
    agent = read_run_info(Path(metadata).parent).get("agent")
    if agent and agent != "human":  # a system's answers: set against the human answers scored the same way
        report = (f"an HTML report against the human answers (HUMAN_RESULTS: the human answers scored the same way, "
                  f"--metrics {metrics})",
                  command("spearbench", "report", shown_path(out), "--human", "HUMAN_RESULTS", "--out",
                          shown_path(out, "report")))
    else:  # the dataset's own (human) answers: a report against themselves would say nothing
        report = ("an HTML report of these answers",
                  command("spearbench", "report", shown_path(out), "--out", shown_path(out, "report")))
    next_steps(report,
               ("a results dataset for the Space (add --repo-id USER/NAME to upload it)",
                command("spearbench", "push-results", shown_path(out), "--local-dir",
                        shown_path(out.parent, f"{out.name or 'results'}_dataset"), "--model-name", "MODEL",
                        "--metadata", shown_path(metadata), "--with-audio")))


def print_summary(summary: dict) -> None:
    """Every number of the summary, one per line, with its 95 % interval and n when it has them;
    a null one with ``(note k)``, each reason printed once below (wrapped to the console width)."""
    from spear_metrics.core.registry import dimension_class
    from spear_metrics.core.summary import few_events, interval_unit

    unit = interval_unit(summary)

    owner = {}
    for name in summary.get("metrics", []):
        for k in dimension_class(name).keys:
            owner[k.name] = name
    keys = [k for k, v in summary.items() if (isinstance(v, (int, float)) or v is None)
            and not (k.endswith(("_n", "_ci95")) and k.rsplit("_", 1)[0] in summary)]
    width = max(len(k) for k in keys)
    nulls = [k for k in keys if summary.get(k) is None]
    refs, note_lines = numbered_notes([null_reason(summary, k, owner.get(k)) for k in nulls])
    ref = dict(zip(nulls, refs))
    for k in keys:
        if k in ref:
            print(f"{k:<{width}}  - {ref[k]}")
            continue
        line = f"{k:<{width}}  {format_value(summary, k, owner.get(k))}"
        if f"{k}_n" in summary:
            ci = summary.get(f"{k}_ci95")
            line = (f"{line:<{width + 12}}  95% CI {'-' if ci is None else f'[{ci[0]:.3f}, {ci[1]:.3f}] {unit}'}  "
                    f"n={summary[f'{k}_n']} {few_events(summary, k)}").rstrip()
        print(line)
    if (summary.get("bootstrap") or {}).get("note"):
        note_lines.append(f"intervals: {summary['bootstrap']['note']}")
    for n in note_lines:
        print(wrap(n))


def _show_failures(out: str) -> None:
    """The first failed rows of ``out/per_sample.jsonl`` with their reasons, and where the rest are."""
    from pathlib import Path

    from spear_metrics.core.records import read_jsonl

    path = Path(out) / "per_sample.jsonl"
    if not path.is_file():
        return
    failed = [(f"{o.get('row')} ({o.get('audio_path')})", o.get("error")) for o in read_jsonl(path) if o.get("status") == "failed"]
    print_failures(failed[:SHOWN_FAILURES], str(path), total=len(failed))
