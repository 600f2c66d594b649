"""``spearbench fdb score --version 1.5 --root DIR --out OUT [--task SUBSET]``: score a v1.5 folder.

Called by :mod:`spear_metrics.commands.fdb` when ``--version 1.5`` is given or ``--root`` has the
v1.5 layout (:func:`spear_metrics.full_duplex_v15.data.is_v15_folder`). Whole-run problems: one
line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from spear_metrics.full_duplex_v15.data import SUBSETS


def _fail(msg: str) -> int:
    from spear_metrics.core.secrets import mask_secrets

    print(f"spearbench fdb: {mask_secrets(' '.join(str(msg).split()))}", file=sys.stderr)
    return 2


def run_v15(args: argparse.Namespace) -> int:
    """Score ``args.root`` as Full-Duplex-Bench v1.5 (see the module docstring)."""
    from spear_datasets.files import OutputError
    from spear_metrics.core.runner import RunError
    from spear_metrics.full_duplex_v15 import behaviour as bh
    from spear_metrics.full_duplex_v15.scoring import V15Scorer, V15Setup, format_table, score_v15

    if args.release or args.run or args.stimuli or args.compare or args.reference or args.compat != "none":
        return _fail("--release/--run/--stimuli/--compare/--reference/--compat are v1.0 options; v1.5 takes --root, "
                     "--task, --out")
    if not args.root:
        return _fail("--version 1.5 needs --root (a v1.5 subset folder or the v1_5 root)")
    if args.task is not None and args.task not in SUBSETS:
        return _fail(f"--task {args.task}: not a v1.5 subset ({', '.join(SUBSETS)})")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        return _fail(f"--out {out} exists and is not a folder")
    judge = None
    if args.judge_url:
        from spear_metrics.commands.judge_options import judge_config_from_args, warn_line
        from spear_metrics.core.judge import make_judge
        from spear_metrics.core.usage import PriceTableError

        try:  # upstream sends no temperature (the server's default); its retries are ours below (seed + 1 each)
            base = make_judge(judge_config_from_args(args, temperature=None, retries=0, seed=None), warn=warn_line)
        except (ValueError, PriceTableError) as e:
            return _fail(str(e))
        judge = bh.BehaviourJudge(base, first_seed=bh.UPSTREAM_FIRST_SEED if args.judge_seed is None else args.judge_seed,
                                  max_attempts=1 + int(args.judge_retries))
    scorer = V15Scorer(judge=judge, asr_name=args.asr, vad_backend=args.vad_backend,
                       mos_name=None if getattr(args, "mos", "dnsmos") == "none" else getattr(args, "mos", "dnsmos"))
    setup = V15Setup(scorer=scorer, judge=judge, n_resamples=args.bootstrap, seed=args.seed,
                     batch_size=min(int(args.batch_size), 4), concurrency=int(args.judge_concurrency),
                     retry_failed=args.retry_failed, overwrite=args.overwrite,
                     progress=not args.no_progress)
    try:
        done = score_v15(args.root, out, setup, task=args.task)
    except (RunError, OutputError) as e:
        return _fail(str(e))
    except OSError as e:
        return _fail(f"--out {out}: cannot write results ({' '.join(str(e).split())})")
    finally:
        if judge is not None:
            judge.judge.close()
    if done is None:
        return 0
    overall, per_subset, results = done
    print("\n".join(format_table(per_subset)))
    for r in results:
        if not r.ok:
            print(f"  failed {r.values.get('subset')}/{r.values.get('id')}: {r.error}", file=sys.stderr)
    if overall.get("behaviour_note"):
        print(overall["behaviour_note"])
    if overall.get("judge_calls"):  # answers, cache, requests, returned ids, tokens: as every judged command ends
        from spear_metrics.commands import wrap
        from spear_metrics.core.judge import judge_calls_line

        print(wrap(judge_calls_line(overall["judge_calls"])))
    print(f"wrote {out / 'summary.json'}" + (" and <subset>/summary.json" if len(per_subset) > 1 else "") +
          " and per_sample.jsonl")
    from spear_metrics.commands import command, next_steps, shown_path

    if any(not r.ok for r in results):
        print("failed samples (reasons above and in per_sample.jsonl): the same command with --retry-failed "
              "scores them again")
    next_steps(("the run's HTML page (behaviour tags, latencies, before/after tests, samples with players)",
                command("spearbench", "report", shown_path(out), "--out", shown_path(out, "report"))))
    return 0 if overall["n_scored"] or not overall["n_samples"] else 1
