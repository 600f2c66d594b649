"""``spearbench fdb --task T --root DIR --out RESULTS/``: score Full-Duplex-Bench v1.0 task folders.

Writes ``RESULTS/summary.json`` (aggregates with bootstrap 95 % intervals, counts, provenance)
and ``RESULTS/per_sample.jsonl`` (one line per sample folder, failed ones with their reason).
With ``--compare OTHER_RESULTS/`` it also writes ``RESULTS/comparison.json``: a paired bootstrap
of this run minus the other run on the samples both scored.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from spear_datasets.sources.fdb import TASKS


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", required=True, choices=TASKS, help="FDB v1.0 task of the folder")
    p.add_argument("--root", required=True, help="task folder holding one sub-folder per sample (upstream layout)")
    p.add_argument("--out", required=True, help="results folder (summary.json, per_sample.jsonl)")
    p.add_argument("--reference", default=None,
                   help="backchannel: FDB's human distribution icc_gt_distribution.json (CC BY-NC, not shipped)")
    p.add_argument("--judge-url", default=None, help="user_interruption: OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--judge-model", default=None, help="judge model name (FDB used gpt-4-turbo)")
    p.add_argument("--judge-seed", type=int, default=0, help="seed sent to the judge (default 0, as FDB)")
    p.add_argument("--asr", default="embedded", help="ASR backend for samples without output.json (spear_metrics.core.asr)")
    p.add_argument("--vad-backend", default="sequence", choices=("sequence", "jit"),
                   help="Silero VAD front end for backchannel (same probabilities; jit = upstream's exact call)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the 95%% intervals (0 = none)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--compare", default=None, metavar="OTHER_RESULTS",
                   help="results folder of another system on the same task: paired bootstrap of this minus that")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (default: a bar over samples on stderr)")


def compare_runs(results_a: list[dict[str, Any]], results_b: list[dict[str, Any]], task: str, *,
                 n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Paired comparison of two systems' per-sample rows (``per_sample.jsonl`` objects) of one task.

    Samples are matched by ``id``; only rows ``ok`` in both count. For each key of the task the
    paired bootstrap of ``a - b`` (:func:`spear_metrics.core.stats.paired_bootstrap`) over the
    samples where both values exist.
    """
    from spear_metrics.core.stats import paired_bootstrap
    from spear_metrics.full_duplex.definition import TASK_KEYS

    b_by_id = {str(r.get("id")): r for r in results_b if r.get("status") == "ok"}
    pairs = [(r, b_by_id[str(r.get("id"))]) for r in results_a if r.get("status") == "ok" and str(r.get("id")) in b_by_id]
    out: dict[str, Any] = {"task": task, "n_common_samples": len(pairs), "bootstrap": {"n_resamples": n_resamples, "seed": seed},
                           "difference": "this run minus the other run", "metrics": {}}
    for k in TASK_KEYS[task]:
        out["metrics"][k] = paired_bootstrap([a.get(k) for a, _ in pairs], [b.get(k) for _, b in pairs],
                                             n_resamples=n_resamples, seed=seed)
    return out


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4f}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def run(args: argparse.Namespace) -> int:
    from spear_datasets.sources.fdb import FDBFormatError, list_samples, read_reference_distribution
    from spear_metrics.core.records import read_jsonl, write_json_atomic, write_jsonl_atomic
    from spear_metrics.core.summary import write_summary
    from spear_metrics.full_duplex.definition import TASK_KEYS, FullDuplexScorer, score_samples, summarize

    prog = "spearbench fdb"
    try:
        samples = list_samples(args.root, args.task)
    except (FileNotFoundError, ValueError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    if not samples:
        print(f"{prog}: no sample folders in {args.root}", file=sys.stderr)
        return 2
    reference = None
    if args.reference:
        try:
            reference = read_reference_distribution(args.reference)
        except FDBFormatError as e:
            print(f"{prog}: --reference: {e}", file=sys.stderr)
            return 2
    judge = None
    if bool(args.judge_url) != bool(args.judge_model):
        print(f"{prog}: --judge-url and --judge-model go together", file=sys.stderr)
        return 2
    if args.judge_url and args.task == "user_interruption":
        from spear_metrics.core.judge import Judge

        judge = Judge(args.judge_url, args.judge_model, seed=args.judge_seed)
    other = None
    if args.compare:
        other_path = Path(args.compare) / "per_sample.jsonl"
        if not other_path.is_file():
            print(f"{prog}: --compare: no per_sample.jsonl in {args.compare}", file=sys.stderr)
            return 2
        try:
            other = list(read_jsonl(other_path))
        except (OSError, UnicodeDecodeError) as e:
            print(f"{prog}: --compare: cannot read {other_path} ({' '.join(str(e).split())})", file=sys.stderr)
            return 2
        tasks = {r.get("task") for r in other if r.get("task")}
        if tasks and tasks != {args.task}:
            print(f"{prog}: --compare: {args.compare} scored task(s) {sorted(tasks)}, not {args.task}", file=sys.stderr)
            return 2

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        print(f"{prog}: --out {out} exists and is not a folder", file=sys.stderr)
        return 2
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"{prog}: --out {out}: cannot create the folder ({' '.join(str(e).split())})", file=sys.stderr)
        return 2

    scorer = FullDuplexScorer(task=args.task, reference=reference, judge=judge, asr_name=args.asr,
                              vad_backend=args.vad_backend)
    bar = None
    if not args.no_progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(samples), desc=f"fdb {args.task}", unit="sample", file=sys.stderr)
    try:
        results = score_samples(samples, scorer, progress=bar)
    finally:
        if bar is not None:
            bar.close()
        if judge is not None:
            judge.close()
    summary = summarize(args.task, results, n_resamples=args.bootstrap, seed=args.seed, judge=judge,
                        reference_given=reference is not None, extra={"root": str(Path(args.root).resolve())})
    try:
        write_jsonl_atomic(out / "per_sample.jsonl", [r.to_json() for r in results])
        write_summary(out, summary)
    except OSError as e:
        print(f"{prog}: --out {out}: cannot write results ({' '.join(str(e).split())})", file=sys.stderr)
        return 2
    for k in TASK_KEYS[args.task]:
        print(f"{k:<22} {_fmt(summary.get(k))}  95% CI {_fmt(summary.get(k + '_ci95'))}  (n={summary.get('n_' + k)})")
    print(f"{'samples':<22} {summary['n_samples']} ({summary['n_scored']} scored, {summary['n_failed']} failed)")
    for r in results:
        if not r.ok:
            print(f"  failed {r.values.get('id')}: {r.error}", file=sys.stderr)
    if other is not None:
        comp = compare_runs([r.to_json() for r in results], other, args.task, n_resamples=args.bootstrap, seed=args.seed)
        comp["other"] = str(Path(args.compare).resolve())
        try:
            write_json_atomic(out / "comparison.json", comp)
        except OSError as e:
            print(f"{prog}: --out {out}: cannot write comparison.json ({' '.join(str(e).split())})", file=sys.stderr)
            return 2
        for k, c in comp["metrics"].items():
            print(f"diff {k:<17} {_fmt(c['diff'])}  95% CI {_fmt(c['diff_ci95'])}  p={_fmt(c['p_value'])}  (pairs={c['n_pairs']})")
    print(f"wrote {out}/summary.json and per_sample.jsonl" + (" and comparison.json" if other is not None else ""))
    return 0
