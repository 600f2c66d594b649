"""``spearbench fdb score|infer``: Full-Duplex-Bench v1.0.

``fdb infer`` streams FDB's stimuli through a network adapter (:mod:`spear_metrics.commands.fdb_infer`);
``fdb score`` scores on the shared resumable runner. The older forms ``spearbench fdb score --task ...``
(scoring) and ``spearbench fdb infer`` still run, after one deprecation line on stderr.

``fdb score`` takes two inputs:

- ``--task T --root DIR --out RESULTS/``: one task folder (upstream sample-folder layout).
  Writes ``RESULTS/summary.json`` (aggregates with bootstrap 95 % intervals, counts, provenance)
  and ``RESULTS/per_sample.jsonl``; ``--compare OTHER_RESULTS/`` adds ``comparison.json`` (this run
  minus the other on the samples both scored, by the code of ``spearbench compare``).
- ``--release R --run RUN[,RUN...] --stimuli FDB_V1_ROOT --out OUT/``: runs of the public FDB v1.0
  model-outputs release (a folder or a Hub dataset id): ``OUT/<run>/summary.json`` with the
  release leaderboard's ten columns, ``OUT/<run>/per_sample.jsonl``, ``OUT/leaderboard.md``, and
  our figures printed beside FDB's own printouts ``results/<run>/*.txt`` (``OUT/<run>/vs_release.json``).

Both resume after a kill (``OUT/.work``) and shard with ``accelerate launch``. ``--compat upstream``
reads the reply as FDB's script does (no resampling before the backchannel VAD).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

from spear_datasets.sources.fdb import TASKS
from spear_metrics.full_duplex_v15.data import SUBSETS as V15_SUBSETS
from spear_metrics.commands import (
    add_deadline_option, add_run_options, command, format_value, next_steps, number, number_text, overwrite_help, read_run_info, resumed_line, shown_path, wrap,
)
from spear_metrics.commands.judge_options import add_judge_options
from spear_metrics.core.vad import BACKENDS, DEFAULT_BACKEND
from spear_metrics.core.summary import few_events


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``fdb score`` and ``fdb infer``."""
    from spear_metrics.commands import fdb_infer

    sub = p.add_subparsers(dest="fdb_command", required=True, metavar="SUBCOMMAND")
    s = sub.add_parser("score", help="score FDB v1.0 task folders or runs of its model-outputs release, or v1.5 folders",
                       description="Score Full-Duplex-Bench v1.0: one task folder (--task --root) or release runs "
                                   "(--release --run --stimuli); or v1.5: a subset folder or the v1_5 root "
                                   "(--version 1.5 --root, detected from its layout).")
    add_score_arguments(s)
    i = sub.add_parser("infer", help="stream FDB stimuli through a network adapter into output.wav/output.json",
                       description=(fdb_infer.__doc__ or "").split("\n\n")[0].strip("`"))
    fdb_infer.add_arguments(i)
    # --version 2 is routed to Full-Duplex-Bench v2 before these parsers (spear_metrics.commands.fdb_v2)
    i.add_argument("--version", dest="fdb_version", choices=("1.0", "1.5", "2"), default=None,
                   help="benchmark version (default: detected from the stimuli folder, 1.0 or 1.5); 2: live "
                        "conversations (see `spearbench fdb infer --version 2 --help`)")


def legacy_argv(argv: list[str]) -> list[str] | None:
    """The old form ``fdb --task ...`` (scoring flags right after ``fdb``) as ``fdb score ...``;
    ``None`` when ``argv`` is not that form."""
    if len(argv) > 1 and argv[0] == "fdb" and argv[1].startswith("-") and argv[1] not in ("-h", "--help"):
        return ["fdb", "score", *argv[1:]]
    return None


def add_score_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``spearbench fdb score``."""
    p.add_argument("--version", dest="fdb_version", choices=("1.0", "1.5", "2"), default=None,
                   help="benchmark version (default: 1.5 when --root holds v1.5 samples - input.wav, clean_input.wav, "
                        "metadata.json - else 1.0); 2: live conversations (see `spearbench fdb score --version 2 --help`)")
    p.add_argument("--task", choices=tuple(dict.fromkeys((*TASKS, *V15_SUBSETS))),
                   help="FDB v1.0 task of the --root folder, or the v1.5 subset (default: every subset under --root)")
    p.add_argument("--root", help="task folder holding one sub-folder per sample (upstream layout)")
    p.add_argument("--release", metavar="FOLDER_OR_HUB_ID",
                   help="FDB v1.0 model-outputs release: a folder or a Hub dataset id, e.g. MagicLuke/fdb-v1-outputs-v1 "
                        "(only the files of --run are downloaded; HF_HUB_OFFLINE=1 uses the cache)")
    add_deadline_option(p, "the --release Hub download")
    p.add_argument("--run", help="release run(s) to score, comma-separated")
    p.add_argument("--stimuli", help="FDB v1.0 data root holding <category>/<id>/input.wav and the task files")
    p.add_argument("--reference", default=None,
                   help="backchannel: FDB's human distribution icc_gt_distribution.json (CC BY-NC, not shipped)")
    # the judge: the shared judge options (v1.0's relevance judge: seed 0, as FDB; v1.5's behaviour judge: seed 1,
    # then + 1 per request, as FDB v1.5)
    add_judge_options(p, seed=None, concurrency=1, model_help="judge model id (FDB's code used gpt-4-turbo for v1.0's relevance, "
                                                "gpt-4o-2024-08-06 for v1.5's behaviour)")
    for a in p._actions:
        if "--judge-seed" in a.option_strings:
            a.help = "seed sent to the judge (default as FDB: 0 for v1.0; v1.5 starts at 1, + 1 per retry)"
        elif "--judge-retries" in a.option_strings:
            a.help += "; v1.5: each retry with the next seed, as FDB v1.5"
        elif "--judge-concurrency" in a.option_strings:
            a.help = ("judge calls in flight at once (the samples' reading, ASR and VAD still run one at a time; "
                      "only the judge's calls overlap)")
    p.add_argument("--mos", default="dnsmos", help="v1.5: offline MOS backend for the project's MOS keys beside the "
                   "unsupported UTMOSv2 (spear_metrics.core.mos: dnsmos, distillmos; 'none' for no MOS)")
    p.add_argument("--asr", default="embedded", help="ASR backend for task-folder samples without output.json (spear_metrics.core.asr)")
    p.add_argument("--vad-backend", default=DEFAULT_BACKEND, choices=BACKENDS,
                   help="Silero VAD front end for backchannel (spear_metrics.core.vad; batched decides as upstream's "
                        "call; jit = upstream's exact call)")
    p.add_argument("--compat", default="none", choices=("none", "upstream"),
                   help="upstream: read the reply as FDB's scripts do (its samples as 16 kHz, no resampling) to "
                        "reproduce their figures; default: the correct reading (resampled to 16 kHz)")
    p.add_argument("--compare", default=None, metavar="OTHER_RESULTS",
                   help="--task only: results folder of another system on the same task: paired bootstrap of this minus that")
    p.add_argument("--batch-size", type=number(integer=True, minimum=1), default=16,
                   help="samples per logged batch (>= 1; a kill loses at most one)")
    add_run_options(p, out="results folder (a rerun resumes)",
                    retry_failed="score again the samples that failed in an earlier run",
                    overwrite=overwrite_help("fdb score"), bootstrap="the 95%% intervals")


def compare_fdb_runs(results_a: list[dict[str, Any]], results_b: list[dict[str, Any]], task: str, *,
                     n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Paired comparison of two systems' per-sample rows (``per_sample.jsonl`` objects) of one task:
    the implementation ``spearbench compare`` uses (:func:`spear_metrics.core.stats.compare_runs`),
    samples matched by ``id``, only rows ``ok`` in both, the task's keys, no subsets.
    ``keys[<key>]`` holds ``n``, ``mean_a``, ``mean_b``, ``diff`` (this run minus the other),
    ``diff_ci95``, ``p_value``, ``wilcoxon_p``, ``d_z`` and the unpaired tests."""
    from spear_metrics.core.stats import compare_runs
    from spear_metrics.full_duplex.definition import TASK_KEYS

    out: dict[str, Any] = {"task": task, "difference": "this run minus the other run", "matching": "sample id"}
    out.update(compare_runs(results_a, results_b, match=lambda r: str(r.get("id")), keys=TASK_KEYS[task],
                            n_resamples=n_resamples, seed=seed))
    return out


def _value(summary: dict, key: str) -> str:
    """A summary value; a null one as ``- (why)`` (its ``<key>_note``)."""
    return _fmt(summary[key]) if summary.get(key) is not None else format_value(summary, key)


def _fmt(v: Any) -> str:
    """A value of the FDB printout: 4 decimals (:func:`spear_metrics.commands.number_text`)."""
    return number_text(v, 4)


def _is_v15(root: str) -> bool:
    from spear_metrics.full_duplex_v15.data import is_v15_folder

    return is_v15_folder(root)


def _fail(msg: str) -> int:
    print(f"spearbench fdb score: {msg}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    """``fdb infer`` or ``fdb score`` (:func:`run_score`)."""
    if getattr(args, "fdb_command", "score") == "infer":
        from spear_metrics.commands import fdb_infer

        return fdb_infer.run(args)
    return run_score(args)


def run_score(args: argparse.Namespace) -> int:
    from spear_datasets.sources.fdb import FDBFormatError, read_reference_distribution
    from spear_metrics.core.runner import RunError
    from spear_metrics.full_duplex.runs import ScoringSetup

    if args.fdb_version == "2":  # routed to FDB v2's own parsers before this one (commands.fdb_v2.route_argv)
        return _fail(f"--version 2 could not be routed to Full-Duplex-Bench v2 ({command('spearbench', 'fdb2', 'score', '--help')})")

    if args.fdb_version == "1.5" or (args.fdb_version is None and args.root and not args.release and _is_v15(args.root)):
        from spear_metrics.full_duplex_v15.cli import run_v15

        return run_v15(args)
    if args.task is not None and args.task not in TASKS:
        return _fail(f"--task {args.task} is a v1.5 subset; pass --version 1.5 with a v1.5 folder")
    if args.mos != "dnsmos":
        return _fail("--mos is a v1.5 option (v1.0 scores no MOS); pass --version 1.5 with a v1.5 folder")
    if args.judge_seed is None:
        args.judge_seed = 0
    if args.release is not None or args.run is not None or args.stimuli is not None:
        if args.task is not None or args.root is not None:
            return _fail("give either --task/--root (a task folder) or --release/--run/--stimuli (a release), not both")
        if not (args.release and args.run and args.stimuli):
            return _fail("--release, --run and --stimuli go together")
        if args.compare:
            return _fail("--compare is for --task folders")
    elif not (args.task and args.root):
        return _fail("give --task and --root (a task folder), or --release, --run and --stimuli (a release)")
    if bool(args.judge_url) != bool(args.judge_model):
        return _fail("--judge-url and --judge-model go together")
    if args.batch_size < 1:
        return _fail("--batch-size must be at least 1")
    reference = None
    if args.reference:
        try:
            reference = read_reference_distribution(args.reference)
        except FDBFormatError as e:
            return _fail(f"--reference: {e}")
    try:
        inputs = _release_inputs(args) if args.release else _task_inputs(args)
    except _Refused as e:
        return _fail(str(e))
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        return _fail(f"--out {out} exists and is not a folder")
    judge = None
    if args.judge_url and (args.release or args.task == "user_interruption"):
        from spear_metrics.commands.judge_options import judge_config_from_args, warn_line
        from spear_metrics.core.judge import make_judge
        from spear_metrics.core.usage import PriceTableError

        try:
            judge = make_judge(judge_config_from_args(args), warn=warn_line)
        except (ValueError, PriceTableError) as e:  # a key that cannot be sent, an alias refused...: one line, exit 2
            return _fail(str(e))
    setup = ScoringSetup(reference=reference, reference_path=args.reference, judge=judge, asr_name=args.asr,
                         vad_backend=args.vad_backend, compat=None if args.compat == "none" else args.compat,
                         batch_size=args.batch_size, n_resamples=args.bootstrap, seed=args.seed,
                         retry_failed=args.retry_failed, overwrite=args.overwrite, progress=not args.no_progress,
                         concurrency=int(args.judge_concurrency))
    from spear_datasets.files import OutputError
    from spear_datasets.ownership import open_folder
    from spear_metrics.core.batching import distributed_state

    try:
        # --out: new, empty or fdb's own (one lock and one record of written files, shared with
        # the scoring run of a task folder; release runs get a folder of their own inside)
        with open_folder(out, command="fdb", activity="scored") if distributed_state().is_main_process \
                else contextlib.nullcontext():
            if args.release:
                return _run_release(args, setup, *inputs)
            return _run_task(args, setup, *inputs)
    except (RunError, FDBFormatError, OutputError) as e:
        return _fail(str(e))
    except OSError as e:
        return _fail(f"--out {out}: cannot write results ({' '.join(str(e).split())})")
    finally:
        if judge is not None:
            judge.close()


class _Refused(Exception):
    """An input the command cannot run on (one line; exit 2)."""


def _task_inputs(args: argparse.Namespace) -> tuple[list, list | None]:
    from spear_datasets.sources.fdb import list_samples
    from spear_metrics.core.records import read_jsonl

    try:
        samples = list_samples(args.root, args.task)
    except (FileNotFoundError, ValueError) as e:
        raise _Refused(str(e)) from None
    if not samples:
        raise _Refused(f"no sample folders in {args.root}")
    other = None
    if args.compare:
        other_path = Path(args.compare) / "per_sample.jsonl"
        if not other_path.is_file():
            raise _Refused(f"--compare: no per_sample.jsonl in {args.compare}")
        try:
            other = list(read_jsonl(other_path))
        except (OSError, UnicodeDecodeError) as e:
            raise _Refused(f"--compare: cannot read {other_path} ({' '.join(str(e).split())})") from None
        tasks = {r.get("task") for r in other if r.get("task")}
        if tasks and tasks != {args.task}:
            raise _Refused(f"--compare: {args.compare} scored task(s) {sorted(tasks)}, not {args.task}")
    return samples, other


def _release_inputs(args: argparse.Namespace) -> tuple[Path, list[str]]:
    from spear_datasets.sources.fdb import FDBFormatError, ReleaseUnavailableError, fetch_release, safe_name

    try:
        runs = list(dict.fromkeys(safe_name(r.strip(), "--run") for r in args.run.split(",") if r.strip()))
    except FDBFormatError as e:
        raise _Refused(str(e)) from None
    if not runs:
        raise _Refused("--run names no run")
    if not Path(args.stimuli).is_dir():
        raise _Refused(f"--stimuli {args.stimuli}: not a folder")
    try:
        release = fetch_release(args.release, runs, deadline_s=float(args.deadline_s))
    except ReleaseUnavailableError as e:
        raise _Refused(str(e)) from None
    missing = [r for r in runs if not (release / "metadata" / f"{r}.jsonl").is_file()]
    if missing:
        raise _Refused(f"--release {args.release}: no metadata/<run>.jsonl for run(s) {', '.join(missing)}")
    return release, runs


def _run_task(args: argparse.Namespace, setup, samples: list, other: list | None) -> int:
    from spear_metrics.core.records import write_json_atomic
    from spear_metrics.full_duplex.definition import TASK_KEYS
    from spear_metrics.full_duplex.runs import score_task_folder

    done = score_task_folder(args.task, samples, args.root, args.out, setup)
    if done is None:  # not the main process
        return 0
    summary, results = done
    out = Path(args.out)
    for k in TASK_KEYS[args.task]:
        print(f"{k:<22} {_value(summary, k)}  95% CI {_fmt(summary.get(k + '_ci95'))}  (n={summary.get(k + '_n')}) "
              f"{few_events(summary, k)}".rstrip())
    print(f"{'samples':<22} {summary['n_samples']} ({summary['n_scored']} scored, {summary['n_failed']} failed)")
    if summary.get("judge_calls"):
        from spear_metrics.core.judge import judge_calls_line

        print(wrap(judge_calls_line(summary["judge_calls"])))
    for r in results:
        if not r.ok:
            print(f"  failed {r.values.get('id')}: {r.error}", file=sys.stderr)
    if other is not None:
        comp = compare_fdb_runs([r.to_json() for r in results], other, args.task, n_resamples=args.bootstrap, seed=args.seed)
        comp["other"] = str(Path(args.compare).resolve())
        write_json_atomic(out / "comparison.json", comp)
        for note in comp["notes"]:
            print(f"compare: {note}")
        for k, c in comp["keys"].items():
            print(f"diff {k:<17} {_fmt(c['diff'])}  95% CI {_fmt(c['diff_ci95'])}  p={_fmt(c['p_value'])}  (pairs={c['n']})")
        for caution in dict.fromkeys(c.get("caution") for c in comp["keys"].values() if c.get("caution")):
            print(wrap(f"compare: {caution}"))
    resumed = resumed_line(read_run_info(out).get("rows_resumed", 0), summary["n_samples"], shown_path(out, ".work"),
                           "samples")
    if resumed:
        print(wrap(resumed))
    print(f"wrote {shown_path(out, 'summary.json')} and per_sample.jsonl" + (" and comparison.json" if other is not None else ""))
    if other is None:
        next_steps(("compare with another system scored on the same task folder (samples paired by id)",
                    command("spearbench", "fdb", "score", "--task", args.task, "--root", shown_path(args.root), "--out",
                            shown_path(out), "--compare", "OTHER_RESULTS")))
    else:
        next_steps(("the comparison in full (per key: intervals, the Wilcoxon p-value, the small-sample cautions)",
                    command("cat", shown_path(out, "comparison.json"))))
    return 0


def _run_release(args: argparse.Namespace, setup, release: Path, runs: list[str]) -> int:
    from spear_datasets.ownership import open_folder
    from spear_metrics.full_duplex.runs import score_release_run, write_leaderboard
    from spear_metrics.core.batching import distributed_state

    out = Path(args.out)
    main = distributed_state().is_main_process
    for run in runs:
        # the run's folder is held across its scoring and its vs_release.json (one lock, one record)
        with open_folder(out / run, command="fdb", activity="scored") if main else contextlib.nullcontext():
            done = score_release_run(release, run, Path(args.stimuli), out, setup)
            if done is not None:
                _report_release_run(out, release, run, *done)
    if main:
        board = write_leaderboard(out)
        print(f"wrote {shown_path(out, '<run>', 'summary.json')}, per_sample.jsonl" + (f" and {shown_path(board)}" if board else ""))
        next_steps(("each run's scores beside the release's own numbers",
                    command("cat", shown_path(out, runs[0], "vs_release.json")) if runs else
                    command("ls", shown_path(out))))
    return 0


def _report_release_run(out: Path, release: Path, run: str, summary: dict, results: list) -> None:
    """Print one scored release run and write its ``vs_release.json`` (when the release has printouts)."""
    from spear_metrics.core.records import write_json_atomic
    from spear_metrics.full_duplex.printout import compare_with_printouts, format_comparison
    from spear_metrics.full_duplex.runs import RELEASE_COLUMNS

    print(f"run {run} ({summary.get('label') or summary.get('model') or '-'}; reading: {summary['compat']}): "
          f"{summary['n_samples']} rows, {summary['n_scored']} scored, {summary['n_failed']} failed")
    resumed = resumed_line(read_run_info(out / run).get("rows_resumed", 0), summary["n_samples"],
                           shown_path(out, run, ".work"))
    if resumed:
        print(wrap(f"  {resumed}"))
    for k in RELEASE_COLUMNS:
        print(f"  {k:<24} {_value(summary, k)}  95% CI {_fmt(summary.get(k + '_ci95'))}  (n={summary.get(k + '_n')}) "
              f"{few_events(summary, k, rate=RELEASE_COLUMNS[k][1] == 'tor')}".rstrip())
    for r in results:
        if not r.ok:
            print(f"  failed {r.values.get('stimulus') or r.row}: {r.error}", file=sys.stderr)
    if (release / "results" / run).is_dir():
        comp = compare_with_printouts(release, run, summary, results)
        write_json_atomic(out / run / "vs_release.json", comp)
        print("\n".join(format_comparison(comp)))
