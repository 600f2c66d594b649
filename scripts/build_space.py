"""Assemble the leaderboard Space as a folder that runs on Hugging Face Spaces unchanged.

A Space installs ``requirements.txt`` from its own repository, and ``space/app.py`` imports
``spear_metrics.results``: this script builds the ``spearbench`` wheel (``pip wheel --no-deps``),
copies ``space/`` next to it and pins the wheel in ``requirements.txt``. Optionally uploads the
folder with ``huggingface_hub`` (token from ``HF_TOKEN`` / login, never printed).

    .venv/bin/python scripts/build_space.py --out build/space [--push USER/spearbench-leaderboard]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def build_space(out: Path) -> Path:
    """Write the deployable Space folder to ``out`` and return the wheel's path inside it.

    Raises:
        subprocess.CalledProcessError: the wheel could not be built.
    """
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(REPO / "space", out, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)], check=True)
    (wheel,) = out.glob("spearbench-*.whl")
    lines = [l for l in (out / "requirements.txt").read_text().splitlines() if l.strip() and not l.lstrip().startswith("#")]
    (out / "requirements.txt").write_text("\n".join([f"./{wheel.name}", *lines]) + "\n")
    return wheel


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
        from huggingface_hub import HfApi

        api = HfApi()
        api.create_repo(args.push, repo_type="space", space_sdk="gradio", private=args.private, exist_ok=True)
        api.upload_folder(folder_path=str(out), repo_id=args.push, repo_type="space")
        print(f"uploaded to spaces/{args.push}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
