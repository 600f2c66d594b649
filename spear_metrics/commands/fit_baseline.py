"""``spearbench fit-baseline --model-run DEV_MODEL/ --human-run DEV_HUMAN/``: fit SPEAR's
distributional baselines (stage 1: one 1-D linear discriminant per feature; stage 2: the
correlation clusters) on the dev answers of a model and of the humans, both scored with the
``distributional`` dimension, and store them as a small JSON file in the model's dev results
folder (default ``DEV_MODEL/distributional_baseline.json``).

The test run then uses it: ``spearbench score ... --metrics distributional -o
baseline=DEV_MODEL/distributional_baseline.json -o human_run=TEST_HUMAN/`` (its
``summary.json`` records the file's name and sha256). Same dev runs, same bytes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

BASELINE_FILE = "distributional_baseline.json"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from spear_metrics.commands import number, add_run_options
    from spear_metrics.distributional.baseline import DEFAULT_IGNORED, MIN_VALID, THRESHOLD

    p.add_argument("--model-run", required=True, help="the model's dev run (results folder scored with distributional)")
    p.add_argument("--human-run", required=True, help="the human answers' dev run (results folder scored with distributional)")
    add_run_options(p, out=f"baseline JSON to write (default MODEL_RUN/{BASELINE_FILE})", out_required=False,
                    progress=False)
    p.add_argument("--ignore-features", default=",".join(DEFAULT_IGNORED),
                   help=f"comma list of features left out (default upstream's: {','.join(DEFAULT_IGNORED)}; '' = none)")
    p.add_argument("--threshold", type=number(above=0, maximum=0.999), default=THRESHOLD,
                   help=f"stage 2: |Spearman rho| at which features cluster (default {THRESHOLD}, upstream's)")
    p.add_argument("--min-valid", type=number(integer=True, minimum=2), default=MIN_VALID,
                   help=f"stage 2: values (and 2 distinct ones) a feature needs on each side (default {MIN_VALID})")


def _run_rows(source: str, what: str):
    """The ``ok`` rows of a scored run and its provenance; ``ValueError`` (one line) when it is no
    run scored with ``distributional``."""
    import hashlib

    from spear_metrics.commands import command
    from spear_metrics.distributional.features import FEATURE_KEYS
    from spear_metrics.reports.runs import RunLoadError, load_run

    d = Path(source)
    if not (d / "per_sample.jsonl").is_file():
        raise ValueError(f"--{what} {source}: no per_sample.jsonl (a results folder of `spearbench score`)")
    try:
        run = load_run(d)
    except RunLoadError as e:
        raise ValueError(f"--{what} {source}: {e}") from None
    if "distributional" not in (run.summary.get("metrics") or []) and not any(
            k in r for r in run.ok_rows for k in FEATURE_KEYS):
        raise ValueError(f"--{what} {source}: not scored with the distributional dimension "
                         f"({command('spearbench', 'score', '--metrics', 'distributional')} ...)")
    if not run.ok_rows:
        raise ValueError(f"--{what} {source}: no scored row")
    summary = d / "summary.json"
    prov = {"run": d.resolve().name, "n_ok": len(run.ok_rows),
            "summary_sha256": hashlib.sha256(summary.read_bytes()).hexdigest() if summary.is_file() else None,
            "options": (run.summary.get("options") or {}).get("distributional")}
    return run.ok_rows, prov


def run(args: argparse.Namespace) -> int:
    from spear_metrics.commands import missing_package

    if missing_package("fit-baseline", ["sklearn", "scipy", "pandas"], "score"):
        return 2
    from spear_metrics.distributional.baseline import BaselineError, fit_baseline, write_baseline

    try:
        model_rows, model_prov = _run_rows(args.model_run, "model-run")
        human_rows, human_prov = _run_rows(args.human_run, "human-run")
        ignore = [f.strip() for f in (args.ignore_features or "").split(",") if f.strip()]
        baseline = fit_baseline(human_rows, model_rows, ignore=ignore, threshold=float(args.threshold),
                                min_valid=int(args.min_valid), provenance={"model_run": model_prov, "human_run": human_prov})
    except (ValueError, BaselineError) as e:
        print(f"spearbench fit-baseline: {e}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path(args.model_run) / BASELINE_FILE
    write_baseline(out, baseline)
    from spear_metrics.distributional.baseline import MIN_VALID

    for name, t in baseline["tables"].items():
        if min(t["n_human_dev"], t["n_model_dev"]) < MIN_VALID:
            print(f"spearbench fit-baseline: warning: table {name} is fitted on {t['n_human_dev']} human and "
                  f"{t['n_model_dev']} model dev answers (fewer than {MIN_VALID} on a side): its discriminants "
                  "and clusters are noise; fit on the whole dev split", file=sys.stderr)
        s2 = t.get("stage2")
        print(f"table {name}: {len(t['features'])} features fitted on {t['n_human_dev']} human and {t['n_model_dev']} "
              f"model dev answers, {len(t['skipped'])} skipped"
              + (f"; {len(s2['clusters'])} clusters at |rho| >= {s2['threshold_abs_rho']}" if s2 else "; no stage-2 clusters"))
    print(f"wrote {out}; score the test answers with -o baseline={out} -o human_run=TEST_HUMAN_RUN")
    return 0
