"""``spearbench publish --dataset HUB_DIR``: the dataset, every metric Space and the leaderboard
Space to a Hub namespace (:mod:`spear_metrics.publish`).

``--dry-run OUT`` writes exactly the folders that would be uploaded (``OUT/datasets/<name>/``,
``OUT/spaces/<name>/``) and uploads nothing. The token comes from ``HF_TOKEN`` or ``hf auth
login``; it is never printed or written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``publish``."""
    p.add_argument("--dataset", required=True, help="the folder written by `spearbench build-dataset`")
    p.add_argument("--namespace", default="spearbench", help="Hub user or organisation (default: spearbench)")
    p.add_argument("--dry-run", metavar="OUT_DIR", default=None,
                   help="write the folders to OUT_DIR (datasets/<name>/, spaces/<name>/) and upload nothing")
    p.add_argument("--dataset-name", default=None,
                   help="dataset repository name (default: seamless_2t_2s_questions for SPEAR's own split, "
                        "spearbench-custom-data for any other data; the benchmark's name is refused for other data)")
    p.add_argument("--leaderboard-name", default="leaderboard", help="leaderboard Space repository name")
    p.add_argument("--metrics", default=None, help="comma-separated metric folders (default: all)")
    p.add_argument("--results", nargs="*", default=[], help="results dataset Hub ids the leaderboard shows at start")
    p.add_argument("--wheel", default=None,
                   help="the spearbench wheel the Spaces bundle (default: built from this source checkout)")
    p.add_argument("--private", action="store_true", help="create the repositories private")


def run(args: argparse.Namespace) -> int:
    """Prepare and upload (or only write with --dry-run); exit 2 with one line on bad input."""
    from spear_datasets.files import OutputError
    from spear_metrics.commands import wrap
    from spear_metrics.publish import PublishError, publish
    from spear_metrics.results.hub import safe_error

    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()] if args.metrics else None
    try:
        repos, urls = publish(dataset=Path(args.dataset), namespace=args.namespace,
                              dry_run=Path(args.dry_run) if args.dry_run else None, private=args.private,
                              wheel=Path(args.wheel) if args.wheel else None, metrics=metrics,
                              dataset_name=args.dataset_name, leaderboard=args.leaderboard_name, results=args.results,
                              warn=lambda w: print(wrap(f"spearbench publish: warning: {w}"), file=sys.stderr))
    except (PublishError, OutputError) as e:  # OutputError: the dry-run folder cannot be used or written
        print(f"spearbench publish: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # network / auth errors from huggingface_hub: one line, no token
        print(f"spearbench publish: upload failed: {safe_error(e)}", file=sys.stderr)
        return 2  # one line, exit 2: a whole-run problem
    for i, r in enumerate(repos):
        where = urls[i] if urls else r.folder
        print(f"{r.repo_type} {r.repo_id}: {where}")
    if not urls:
        from spear_metrics.commands import command, next_steps

        print("dry run: nothing uploaded; the folders above are what `spearbench publish` uploads")
        name = next((r.repo_id.split("/", 1)[1] for r in repos if r.repo_type == "dataset"), args.dataset_name)
        next_steps(("upload them (token from HF_TOKEN or `hf auth login`)",
                    command("spearbench", "publish", "--dataset", args.dataset, "--namespace", args.namespace,
                            "--dataset-name", name)))
    return 0
