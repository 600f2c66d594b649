"""``spearbench push-results RESULTS/ --repo-id USER/NAME``: publish a scored run as a results dataset.

Writes the dataset described in :mod:`spear_metrics.results` (per-sample parquet, summary.json,
dataset card; answer audio with ``--with-audio``) and uploads it to the Hub, or only writes it
to ``--local-dir``. Before anything is written the run is checked: rows exactly ``0..n-1``,
counts that match them, and a summary equal to what its rows give
(:mod:`spear_metrics.results.validate`); an edited run is refused with one line (exit 2).
Audio is embedded only for rows that ``per_sample.jsonl`` scored ``ok`` and whose file decodes
as audio (paths resolved under the same root rules as ``score``); every other row gets a null
audio cell. A row that failed scoring never stops the run from being published. No absolute
local path is published. The Hub token comes from ``HF_TOKEN`` or ``hf auth login``; it is
never printed or written.
"""

from __future__ import annotations

import argparse
import sys

from spear_metrics.commands import command, next_steps, shown_path
from spear_metrics.results import INFERENCE_MODES, SPLITS


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``push-results``."""
    p.add_argument("results", help="scored run folder (summary.json + per_sample.jsonl)")
    p.add_argument("--repo-id", default=None, help="Hub dataset USER/NAME to create or update")
    p.add_argument("--private", action="store_true", help="create the Hub dataset private")
    p.add_argument("--model-name", default=None, help="leaderboard name of the model (default: NAME of --repo-id)")
    p.add_argument("--inference-mode", choices=INFERENCE_MODES, default=None)
    p.add_argument("--open-weights", action=argparse.BooleanOptionalAction, default=None,
                   help="the model's weights are public (--no-open-weights: they are not; default: not given)")
    p.add_argument("--split", choices=SPLITS, default="test", help="split the run scored (leaderboard: test)")
    p.add_argument("--metadata", default=None,
                   help="the metadata CSV the run scored (adds transcripts, times, subset; needed to check "
                        "explainable_normalized_f0_std_avg, which groups answers by questioner)")
    p.add_argument("--with-audio", action="store_true", help="embed the answer audio of rows scored ok (needs --metadata; a FDB v1.5 run: "
                        "output.wav and clean_output.wav of each sample folder)")
    p.add_argument("--with-inputs", action="store_true",
                   help="embed the input clips of rows scored ok too (both speakers; mind the data licence; needs --metadata; "
                        "a FDB v1.5 run: input.wav and clean_input.wav of each sample folder)")
    p.add_argument("--local-dir", default=None,
                   help="write the dataset to this folder; without --repo-id nothing is uploaded")


def run(args: argparse.Namespace) -> int:
    """Write and/or upload; exit 2 with a one-line message on invalid input."""
    from spear_metrics.results import ResultsError, push_results, write_results_dataset
    from spear_metrics.results.hub import safe_error

    if not args.repo_id and not args.local_dir:
        print("spearbench push-results: give --repo-id USER/NAME and/or --local-dir DIR", file=sys.stderr)
        return 2
    model_name = args.model_name or (args.repo_id.split("/", 1)[-1] if args.repo_id else None)
    opts = dict(model_name=model_name, inference_mode=args.inference_mode, open_weights=args.open_weights,
                split=args.split, metadata=args.metadata, with_audio=args.with_audio, with_inputs=args.with_inputs)
    try:
        shown = []
        if args.local_dir:
            out = write_results_dataset(args.results, args.local_dir, **opts)
            print(f"wrote results dataset {shown_path(out)} (load with datasets.load_dataset({str(out)!r}))")
            shown.append(shown_path(out))
        if args.repo_id:
            url = push_results(args.results, args.repo_id, private=args.private, **opts)
            print(f"pushed {args.repo_id}: {url}")
            shown.append(args.repo_id)
        next_steps((f"see it on the leaderboard Space, here ({_space_hint(args.results)})",
                    command("python", "-m", "spear_metrics.space", "--results", *shown)))
    except ResultsError as e:
        print(f"spearbench push-results: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # network / auth errors from huggingface_hub: one line, no token
        what = "upload failed" if args.repo_id else "cannot write the results dataset"
        print(f"spearbench push-results: {what}: {safe_error(e)}", file=sys.stderr)
        return 2  # one line, exit 2: a whole-run problem
    return 0


def _space_hint(results: str) -> str:
    """Where the Space shows the run: a SPEAR run in the leaderboard, whose plots compare it with
    the human answers' results dataset; another benchmark's run in that benchmark's own tab."""
    from pathlib import Path

    from spear_metrics.core.registry import DEFAULT_BENCHMARK, UnknownBenchmarkError, benchmark_of_summary
    from spear_metrics.results.validate import ResultsError, read_summary_file

    try:  # bounded, as every summary.json read (a FIFO or a huge file is refused, never hangs the hint)
        bench = benchmark_of_summary(read_summary_file(Path(results) / "summary.json"))
    except (ResultsError, UnknownBenchmarkError):
        bench = None
    if bench is None or bench.name == DEFAULT_BENCHMARK:
        return "add the human answers' results dataset for the plots"
    return f"its {bench.title} tab"
