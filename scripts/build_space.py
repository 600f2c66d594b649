"""Assemble the leaderboard Space as a folder that runs on Hugging Face Spaces unchanged.

A Space installs ``requirements.txt`` from its own repository, and its ``app.py`` imports
``spear_metrics``: this script builds the ``spearbench`` wheel, copies ``spear_metrics/space/``
next to it and pins the wheel in ``requirements.txt`` (the same folder ``spearbench publish``
uploads: :func:`spear_metrics.publish.write_leaderboard_space`). Optionally uploads the folder
(token from ``HF_TOKEN`` / login, never printed).

    .venv/bin/python scripts/build_space.py --out build/space [--push USER/spearbench-leaderboard]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def build_space(out: Path) -> Path:
    """Write the deployable Space folder to ``out`` and return the wheel's path inside it.

    Raises:
        spear_metrics.publish.PublishError: the wheel could not be built.
    """
    from spear_datasets.ownership import open_folder
    from spear_metrics.publish import build_wheel, write_leaderboard_space

    # out: new, empty or a Space folder this script wrote (its earlier files are replaced, nothing
    # else; the record in out/.work/ is never uploaded)
    with open_folder(out, command="build-space"), tempfile.TemporaryDirectory(prefix="spearbench-wheel-") as tmp:
        wheel = build_wheel(Path(tmp), REPO)
        write_leaderboard_space(out, wheel)
    return out / wheel.name


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "build" / "space"))
    ap.add_argument("--push", metavar="REPO_ID", help="upload the folder as a Gradio Space")
    ap.add_argument("--private", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    wheel = build_space(out)
    print(f"Space folder: {out} (pins {wheel.name})")
    if args.push:
        from spear_metrics.results.hub import upload_folder

        upload_folder(out, args.push, repo_type="space", space_sdk="gradio", private=args.private,
                      commit_message="SPEARBench leaderboard Space")
        print(f"uploaded to spaces/{args.push}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
