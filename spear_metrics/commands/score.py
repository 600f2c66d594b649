"""``spearbench score --metadata M.csv --metrics a,b --out RESULTS/``."""

from __future__ import annotations

import argparse
import sys

from spear_metrics.commands import SHOWN_FAILURES, add_bootstrap_arguments, format_value, number, parse_options, print_failures


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metadata", required=True, help="SPEAR metadata CSV with answer_audio_path filled")
    p.add_argument("--metrics", required=True, help="comma-separated dimensions, e.g. interruptions,explainable_features")
    p.add_argument("--out", required=True, help="results folder (summary.json, per_sample.jsonl); a rerun resumes")
    p.add_argument("--option", "-o", action="append", default=[], metavar="KEY=VALUE",
                   help="dimension option, e.g. vad_time_resolution=3 (repeatable; an unknown key is refused "
                        "with the valid ones; the options in effect are recorded in summary.json)")
    p.add_argument("--inputs", default=None, help="the benchmark's input metadata: inputs without an answer are reported")
    p.add_argument("--batch-size", type=number(integer=True, minimum=1), default=16, help="samples per batch (>= 1, default 16)")
    add_bootstrap_arguments(p, "every <key>_ci95 in summary.json")
    p.add_argument("--retry-failed", action="store_true", help="score again the rows that failed in an earlier run")
    p.add_argument("--overwrite", action="store_true", help="replace another run in --out: removes only the files runs of `score` recorded there (docs/safety.md); refused while a live process writes it")
    p.add_argument("--no-progress", action="store_true")


def run(args: argparse.Namespace) -> int:
    from spear_datasets.schema import MetadataError
    from spear_metrics.core.dimension import OptionError
    from spear_metrics.core.models import ModelUnavailableError
    from spear_metrics.core.registry import UnknownDimensionError
    from spear_metrics.core.runner import RunError, run_score

    try:
        summary = run_score(args.metadata, args.metrics, args.out, options=parse_options(args.option),
                            batch_size=args.batch_size, retry_failed=args.retry_failed, overwrite=args.overwrite,
                            progress=not args.no_progress, inputs_metadata=args.inputs,
                            n_resamples=args.bootstrap, seed=args.seed)
    except (MetadataError, UnknownDimensionError, OptionError, ModelUnavailableError, RunError, ImportError) as e:
        print(f"spearbench score: {e}", file=sys.stderr)
        return 2
    if summary is not None:
        print_summary(summary)
        _show_failures(args.out)
        print(f"wrote {args.out}/summary.json and per_sample.jsonl")
    return 0


def print_summary(summary: dict) -> None:
    """Every number of the summary, one per line, with its 95 % interval and n when it has them;
    a null one with its reason."""
    from spear_metrics.core.registry import dimension_class

    owner = {}
    for name in summary.get("metrics", []):
        for k in dimension_class(name).keys:
            owner[k.name] = name
    keys = [k for k, v in summary.items() if (isinstance(v, (int, float)) or v is None)
            and not (k.endswith(("_n", "_ci95")) and k.rsplit("_", 1)[0] in summary)]
    width = max(len(k) for k in keys)
    for k in keys:
        line = f"{k:<{width}}  {format_value(summary, k, owner.get(k))}"
        if f"{k}_n" in summary and summary.get(k) is not None:
            ci = summary.get(f"{k}_ci95")
            line = f"{line:<{width + 12}}  95% CI {'-' if ci is None else f'[{ci[0]:.3f}, {ci[1]:.3f}]'}  n={summary[f'{k}_n']}"
        print(line)


def _show_failures(out: str) -> None:
    """The first failed rows of ``out/per_sample.jsonl`` with their reasons, and where the rest are."""
    from pathlib import Path

    from spear_metrics.core.records import read_jsonl

    path = Path(out) / "per_sample.jsonl"
    if not path.is_file():
        return
    failed = [(f"{o.get('row')} ({o.get('audio_path')})", o.get("error")) for o in read_jsonl(path) if o.get("status") == "failed"]
    print_failures(failed[:SHOWN_FAILURES], str(path), total=len(failed))
