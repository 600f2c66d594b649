"""``spearbench dsuperb``: Dynamic-SUPERB Phase-2 in SPEARBench.

- ``dsuperb tasks [--manifest CSV]``: the task instances known (manifest), their metric, and
  whether SPEARBench computes a value for it;
- ``dsuperb infer --agent NAME --tasks T1,T2 --out PRED/``: an adapter's text answers to each
  instance's ``test`` split, in upstream's prediction layout (``PRED/<instance>.json``);
  resumable, concurrent for network adapters (:mod:`spear_metrics.dynamic_superb.infer`);
- ``dsuperb score --pred PRED/ --out RESULTS/ --judge-url URL --judge-model NAME`` (or
  ``--judge-local MODEL``): each task's metric with a bootstrap interval and ``na_rate``,
  per-category and overall means, upstream's submission file
  (:mod:`spear_metrics.dynamic_superb.scoring`).

Keys: the judge's API key is read from the environment variable ``--judge-key-env``
(default ``OPENAI_API_KEY`` when set) only; it is never written or printed. The judge options are
the shared ones (:mod:`spear_metrics.commands.judge_options`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
import sys

from spear_metrics.commands.judge_options import add_judge_options, judge_config_from_args
from spear_metrics.commands import (
    add_price_table_option, add_process_options, add_run_options, add_shard_option, command, CONSOLE_WIDTH, next_steps, number, number_text, parse_options, price_table_of,
    print_failures, print_usage, run_exit_status, shown_path, wrap,
)


def _tasks_arg(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="dsuperb_command", required=True, metavar="{tasks,infer,score}")
    t = sub.add_parser("tasks", help="list the task instances of the manifest and their metrics",
                       description="list the task instances of the manifest and their metrics")
    t.add_argument("--manifest", default=None, help="CSV adding or overriding instances (instance,metric[,hub_path,revision,category])")

    i = sub.add_parser("infer", help="run an adapter over task instances into upstream's prediction files",
                       description="run an adapter over task instances into PRED/<instance>.json (upstream's layout)")
    i.add_argument("--agent", required=True, help="adapter: openai-audio (any OpenAI-compatible server), a local "
                                                  "text adapter (file.py:Class with respond_text), fixed-text...")
    i.add_argument("--agent-option", "-a", action="append", default=[], metavar="KEY=VALUE",
                   help="adapter constructor option (repeatable), e.g. base_url=http://127.0.0.1:8000/v1")
    i.add_argument("--tasks", required=True, help="comma-separated instance names (dsuperb tasks lists them)")
    i.add_argument("--data", default=None, help="folder of local instances: <instance>/ (save_to_disk or Hub layout) or "
                                                "<instance>.parquet; others are loaded from the Hub at their revision")
    i.add_argument("--manifest", default=None, help="CSV adding or overriding instances")
    i.add_argument("--concurrency", type=number(integer=True, minimum=1), default=1,
                   help="network adapters: rows answered at once (default 1)")
    add_process_options(i)
    add_shard_option(i, units="rows", merge="writes PRED/<instance>.json (and runs any row no shard finished)")
    i.add_argument("--row-timeout-s", type=number(above=0), default=300.0, help="one row's time limit, s (default 300)")
    i.add_argument("--chunk-ms", type=number(above=0), default=40.0, help="paced network adapters: chunk length, ms")
    i.add_argument("--limit", type=number(integer=True, minimum=1), default=None, help="at most N rows per instance")
    add_price_table_option(i, where="PRED/.work/run_info.json (and each instance's)")
    add_run_options(i, out="prediction folder PRED/ (a rerun resumes)", retry_failed="run again the rows that failed before",
                    overwrite="replace another run's answers to the instances given: removes only what that run "
                              "recorded and is unchanged (docs/safety.md); refused while a live process writes --out")

    s = sub.add_parser("score", help="score prediction files: metric per task, intervals, N/A rates, submission file",
                       description="score PRED/<instance>.json files task by task")
    s.add_argument("--pred", required=True, help="prediction folder (dsuperb infer's, or upstream-shaped files)")
    s.add_argument("--tasks", default=None, help="comma-separated instances to score (default: every PRED/*.json)")
    s.add_argument("--manifest", default=None, help="CSV adding or overriding instances (an instance's metric)")
    add_judge_options(s, timeout_s=60.0, retries=3, seed=None, concurrency=4,
                      model_help="judge model id (the paper: gpt-4o; the evaluator's open default: "
                                 "meta-llama/Llama-3.1-8B-Instruct)")
    s.add_argument("--judge-local", default=None, metavar="MODEL",
                   help="a transformers causal LM as judge (local folder or Hub id), greedy, 512 new tokens")
    s.add_argument("--judge-device", default=None, help="--judge-local: torch device (default: this process's, "
                   "cuda:<local rank> under accelerate on GPUs, else cpu)")
    s.add_argument("--judge-prompts", default="project,upstream",
                   help="prompts a judged row is asked with: upstream (published key llm_classification, upstream's "
                        "prompt) and/or project (judge_accuracy); default both (two judge calls a row)")
    s.add_argument("--seen-tasks", default=None, help="comma-separated instances the model was trained on "
                                                      "(the submission file's seen; others: false)")
    add_run_options(s, out="results folder (a rerun resumes)",
                    retry_failed="score again the rows that failed (e.g. judge errors)",
                    overwrite="replace another run's results in --out: removes only what that run recorded and is "
                              "unchanged (docs/safety.md); refused while a live process writes --out",
                    bootstrap="the per-task 95%% intervals")


def run(args: argparse.Namespace) -> int:
    return {"tasks": _run_tasks, "infer": _run_infer, "score": _run_score}[args.dsuperb_command](args)


def _err(text: str) -> int:
    from spear_metrics.core.secrets import mask_secrets

    print(f"spearbench dsuperb: {mask_secrets(' '.join(str(text).split()))}", file=sys.stderr)
    return 2


def _run_tasks(args: argparse.Namespace) -> int:
    from spear_metrics.dynamic_superb.metrics import PROJECT_METRICS
    from spear_metrics.dynamic_superb.tasks import ManifestError, load_manifest

    try:
        specs = load_manifest(args.manifest)
    except ManifestError as e:
        return _err(str(e))
    lines = ["instance\tmetric\tproject_key\tcategory\thub_path\trevision"]
    for name, spec in sorted(specs.items()):
        key = PROJECT_METRICS[spec.metric].key if spec.metric in PROJECT_METRICS else "-"
        lines.append(f"{name}\t{spec.metric}\t{key}\t{spec.category}\t{spec.hub_path}\t{spec.revision or '-'}")
    try:
        print("\n".join(lines), flush=True)
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    from spear_metrics.dynamic_superb.metrics import UPSTREAM_READABLE

    n_sup = sum(1 for s in specs.values() if s.metric in PROJECT_METRICS)
    n_pub = {m: sum(1 for s in specs.values() if s.metric == m) for m in sorted(UPSTREAM_READABLE)}
    n_pub = {m: n for m, n in n_pub.items() if n}
    print(f"{len(specs)} instances; {n_sup} with a SPEARBench value (project keys); published keys computed by "
          f"upstream's public per-row rules: {', '.join(f'{m} ({n})' for m, n in n_pub.items())}; other published keys "
          f"({len(specs) - sum(n_pub.values())} instances): unsupported (their function bodies are not public)",
          file=sys.stderr)
    return 0


def _run_infer(args: argparse.Namespace) -> int:
    from spear_datasets.files import OutputError
    from spear_metrics.agents.base import AgentError
    from spear_metrics.agents.registry import UnknownAgentError
    from spear_metrics.agents.processes import parse_provider_limits
    from spear_metrics.core.options import OptionError
    from spear_metrics.dynamic_superb.infer import WORK, DSuperbInferError, run_dsuperb_inference
    from spear_metrics.dynamic_superb.tasks import ManifestError

    try:
        prices = price_table_of(args)  # refused before any call (a PriceTableError is a ValueError)
        info = run_dsuperb_inference(args.agent, _tasks_arg(args.tasks), args.out,
                                     agent_options=parse_options(args.agent_option), manifest=args.manifest,
                                     data_root=args.data, concurrency=int(args.concurrency),
                                     row_timeout_s=float(args.row_timeout_s), chunk_ms=float(args.chunk_ms),
                                     limit=None if args.limit is None else int(args.limit),
                                     retry_failed=args.retry_failed, overwrite=args.overwrite,
                                     progress=not args.no_progress, prices=prices, processes=args.processes,
                                     provider_limits=parse_provider_limits(args.provider_limit), shard=args.shard)
    except (DSuperbInferError, ManifestError, UnknownAgentError, OptionError, AgentError, OutputError, ValueError,
            TypeError) as e:
        return _err(str(e))
    if "shard" in info:
        for name, why in info["failed_instances"].items():
            print(f"spearbench dsuperb: {name}: not run: {why}", file=sys.stderr)
        print(f"shard {info['shard']}: {info['n_answered']}/{info['n_rows']} of its rows answered, {info['n_failed']} "
              f"failed; {info['rows_left']} row(s) of the run have no record yet")
        print(wrap("when every shard has ended: the same command without --shard writes PRED/<instance>.json (and runs "
                   "any row no shard finished)"))
        return 2 if info["failed_instances"] else run_exit_status(info["n_answered"], info["n_failed"])
    for name, st in info["instances"].items():
        print(f"{name}: {st['n_answered']}/{st['n_rows']} answered, {st['n_failed']} failed -> "
              f"{shown_path(args.out, name + '.json')}")
        if st["n_failed"]:
            print_failures([(f"{f['row']} ({f['file']})", f["error"]) for f in st["failures"]],
                           f"{shown_path(args.out, WORK, name, 'failures.jsonl')} (rerun with --retry-failed)",
                           total=st["n_failed"])
    print_usage(info.get("usage"))  # billed for the answers (run_info.json; priced with --price-table)
    for name, why in info["failed_instances"].items():
        print(f"spearbench dsuperb: {name}: not run: {why}", file=sys.stderr)
    if not info["instances"]:  # nothing was loaded: there is nothing to score
        return _err("no instance could be loaded (see the reasons above); nothing to score")
    next_steps(("score the answers (add --judge-url URL --judge-model NAME for the judge-scored instances)",
                command("spearbench", "dsuperb", "score", "--pred", shown_path(args.out), "--out",
                        shown_path(Path(shown_path(args.out)).parent, f"{Path(shown_path(args.out)).name}_results"))))
    if info["failed_instances"]:
        return 2  # an instance that cannot be loaded is no row's fault
    return run_exit_status(sum(st["n_answered"] for st in info["instances"].values()),
                           sum(st["n_failed"] for st in info["instances"].values()))


def _make_judge(args: argparse.Namespace):
    """The judge of ``score`` (``None`` without one): the shared judge options
    (:mod:`spear_metrics.commands.judge_options`) or ``--judge-local``; keys from the environment only."""
    from spear_metrics.commands.judge_options import judge_config_from_args, warn_line
    from spear_metrics.core.judge import LocalJudge, make_judge

    if args.judge_local and (args.judge_url or args.judge_model):
        raise ValueError("give either --judge-local MODEL or --judge-url with --judge-model, not both")
    if args.judge_local:
        return LocalJudge(args.judge_local, max_new_tokens=512, device=args.judge_device)
    return make_judge(judge_config_from_args(args, temperature=0.0), warn=warn_line)


def _fmt(v) -> str:
    """A value of the task table: 4 decimals (:func:`spear_metrics.commands.number_text`)."""
    return number_text(v, 4)


def _run_score(args: argparse.Namespace) -> int:
    from spear_datasets.files import OutputError
    from spear_metrics.core.models import ModelUnavailableError
    from spear_metrics.dynamic_superb.scoring import DSuperbScoreError, score_predictions, task_line
    from spear_metrics.dynamic_superb.tasks import ManifestError

    from spear_metrics.core.usage import PriceTableError

    try:
        judge = _make_judge(args)
        prices = judge_config_from_args(args).prices()
    except (ValueError, PriceTableError) as e:
        return _err(str(e))
    try:
        summary = score_predictions(args.pred, args.out, judge=judge, manifest=args.manifest, prices=prices,
                                    tasks=_tasks_arg(args.tasks) or None, judge_concurrency=int(args.judge_concurrency),
                                    n_resamples=int(args.bootstrap), seed=int(args.seed),
                                    seen=_tasks_arg(args.seen_tasks), retry_failed=args.retry_failed,
                                    overwrite=args.overwrite, progress=not args.no_progress,
                                    judge_prompts=_tasks_arg(args.judge_prompts))
    except (DSuperbScoreError, ManifestError, ModelUnavailableError, OutputError) as e:
        return _err(str(e))
    finally:
        if judge is not None:
            judge.close()
    if not summary:
        return 0
    print(f"{'instance':<48} {'key':<15} {'value':>8} {'ci95':>19} {'n':>5} {'na_rate':>8}")
    for name, t in summary["tasks"].items():
        line = task_line(name, t)
        ci = f"[{line['ci95_lo']:.4f}, {line['ci95_hi']:.4f}]" if line["ci95_lo"] is not None else "-"
        row = (f"{name:<48} {line['key'] or '-':<15} {_fmt(line['value']):>8} {ci:>19} {_fmt(line['n']):>5} "
               f"{_fmt(line['na_rate']):>8}")
        if line["value"] is None and len(row) + len(line["note"] or "") + 4 > CONSOLE_WIDTH:
            row += "\n" + wrap(f"  ({line['note']})", indent="   ")  # the reason on its own line(s), within 120
        elif line["value"] is None:
            row += f"  ({line['note']})"
        print(row)
    for cat, means in summary["categories"].items():
        for key, m in means.items():
            print(f"category {cat}: mean {key} {m['mean']:.4f} over {m['n_tasks']} task(s)")
    for key, m in summary["overall"].items():
        ci = m.get("ci95")
        print(f"overall: mean {key} {m['mean']:.4f} over {m['n_tasks']} task(s)"
              + (f", 95% CI [{ci[0]:.4f}, {ci[1]:.4f}] by instance" if ci else ""))
    if summary.get("judge_calls"):
        from spear_metrics.core.judge import judge_calls_line

        print(judge_calls_line(summary["judge_calls"]))
    print(f"{summary['n_scored']}/{summary['n_samples']} rows scored, {summary['n_failed']} failed; judge "
          f"{summary['judge'].get('model') or 'none'} ({summary['judge']['prompt_version']}) -> {shown_path(args.out)}")
    if summary["n_failed"]:
        from spear_metrics.core.records import read_jsonl
        from pathlib import Path

        fails = [(f"{r['instance']}/{r['file']}", r["error"]) for r in read_jsonl(Path(args.out) / "per_sample.jsonl")
                 if r.get("status") != "ok"]
        print_failures(fails, f"{shown_path(args.out, 'per_sample.jsonl')} (status failed; rerun with --retry-failed)",
                       total=summary["n_failed"])
    next_steps(("the scores in Dynamic-SUPERB's score-submission format, and the table above as CSV",
                command("cat", shown_path(args.out, "submission.json"), shown_path(args.out, "tasks.csv"))))
    return 0
