"""``spearbench build-dataset --source SRC --out HUB_DIR [--push REPO_ID]``.

Turns an upstream SPEAR data folder (``SRC/inputs/<split>/<subset>/metadata.csv``) into the
Hub layout of ``spearbench/seamless_2t_2s_questions`` (parquet shards with embedded audio and a
dataset card); see :mod:`spear_datasets.hub`.
"""

from __future__ import annotations

import argparse
import sys

from pathlib import Path

from spear_metrics.commands import command, next_steps, number, shown_path, wrap, add_run_options


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source", required=True, help="SPEAR data folder holding inputs/<split>/<subset>/metadata.csv")
    p.add_argument("--max-shard-mb", type=number(above=0), default=500.0, help="approximate audio MB per parquet shard (> 0)")
    p.add_argument("--push", metavar="REPO_ID", default=None,
                   help="also upload the folder as this Hub dataset (token from HF_TOKEN or `hf auth login`)")
    p.add_argument("--private", action="store_true", help="create the Hub repository as private (with --push)")
    p.add_argument("--source-name", default=None, help="where the recordings come from, for the dataset card "
                   "(default: Meta's Seamless Interaction dataset when every row has Seamless ids, else unnamed)")
    p.add_argument("--license", default=None, help="Hub licence id of the recordings for the card, e.g. cc-by-4.0 "
                   "(default: cc-by-nc-4.0 for Seamless data, else unknown)")
    p.add_argument("--source-url", default=None, help="link to the source of the recordings, for the card")
    add_run_options(p, out="output folder (README.md + data/<subset>/<split>-*.parquet)",
                    overwrite="replace a dataset this command built in --out (only the files it recorded there; "
                              "docs/safety.md)")


def run(args: argparse.Namespace) -> int:
    from spear_datasets.hub import (
        SKIPPED_FILE, DataSource, HubBuildError, MetadataError, build_hub_dataset, find_sources, push_dataset,
    )

    given = args.source_name or args.license or args.source_url
    data_source = DataSource(args.source_name or "", args.license or "unknown", args.source_url) if given else None
    try:
        report = build_hub_dataset(args.source, args.out, max_shard_bytes=int(args.max_shard_mb * 1024 * 1024),
                                   overwrite=args.overwrite, progress=not args.no_progress, data_source=data_source)
    except (HubBuildError, MetadataError) as e:
        print(f"spearbench build-dataset: {e}", file=sys.stderr)
        if (Path(args.source) / "metadata.csv").is_file() and not find_sources(args.source):
            # a flat folder (e.g. the demo's data/): say where its CSV and clips go
            print(wrap(f"spearbench build-dataset: {shown_path(args.source, 'metadata.csv')} is a metadata CSV, not the "
                       "SPEAR layout: put it with its clips under SRC/inputs/<split>/<subset>/ (split dev or test, "
                       f"subset improvised or naturalistic) and pass --source SRC; `{command('spearbench', 'demo')}` "
                       "writes such a folder (DEMO_OUT/spear_data)"), file=sys.stderr)
        return 2
    for subset, per in report.counts.items():
        for split, n in per.items():
            print(f"{subset:<13} {split:<5} {n} rows")
    if report.skipped:
        print(f"skipped {len(report.skipped)} row(s); reasons in {shown_path(args.out, SKIPPED_FILE)}", file=sys.stderr)
        for s in report.skipped[:5]:
            print(f"  {s['subset']}/{s['split']} row {s['row']}: {s['reason']}", file=sys.stderr)
    print(f"wrote {shown_path(args.out)} ({report.n_rows} rows, {len(report.shards)} shard(s)); card: "
          f"{report.source.name or 'source not named'}, licence {report.source.license}")
    if report.source.license == "unknown":
        print(wrap("note: the card states no licence: give --license ID (and --source-name) before publishing"))
    if args.push:
        try:
            url = push_dataset(args.out, args.push, private=args.private or None)
        except Exception as e:  # auth / network: one line, never the token
            from spear_metrics.results.hub import safe_error

            print(f"spearbench build-dataset: push to {args.push} failed: {safe_error(e)}", file=sys.stderr)
            return 3
        print(f"pushed to {url}")
    out = shown_path(args.out)
    load = f"import datasets; print(datasets.load_dataset({out!r}, 'all', split='test'))"
    next_steps(("load it", f"{command('python')} -c \"{load}\""),
               ("run an agent on it", command("spearbench", "infer", "--agent", "cascade", "--data", out, "--out",
                                             shown_path(Path(out).parent, f"{Path(out).name}_cascade"))),
               ("see what `spearbench publish` would upload", command("spearbench", "publish", "--dataset", out,
                                                                       "--namespace", "YOUR_NAME", "--dry-run",
                                                                       shown_path(Path(out).parent, "publish_dry_run"))))
    return 0
