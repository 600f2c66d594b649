"""A SPEARBench inference run as a Slurm job array, with submitit: one array task per shard.

    python scripts/slurm/submitit_shards.py --shards 8 --partition gpu --time-min 240 -- \\
        infer --agent openai-realtime --data DATA --split test --subset all --out /shared/OUT \\
        --concurrency 64 --processes auto

Task ``K`` of the array runs ``spearbench <args> --shard K/N``: the rows whose id ``% N == K``,
logged to ``OUT/.work/rank-K.jsonl`` as each ends (``dsuperb infer``, ``fdb infer`` and
``speechrole infer`` shard their units the same way, docs/multiprocess.md) (the shards may run at the same time, on any
nodes; ``OUT`` must be on storage every node sees). A task that Slurm preempts or that reaches its
time limit is requeued by submitit (its ``checkpoint``) and resumes from that log: nothing is run
twice, nothing is lost beyond the sessions in flight. With ``--wait`` (the default) this script
then waits for the array and runs the same command once more without ``--shard``, here: it runs
any row no shard finished and writes ``OUT/metadata.csv``; with ``--no-wait`` it prints that
command. The scoring ("judge") stage then runs on any machine that has the folder
(docs/multiprocess.md).

``--executor local`` runs the tasks as local processes (submitit's ``LocalExecutor``) and
``--executor debug`` in this process, one after the other (``DebugExecutor``): the recipe without
Slurm. submitit is not a dependency of SPEARBench: ``pip install submitit`` (or the ``slurm``
extra); without it this script says so in one line and exits 2.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any, Sequence

#: the commands that take ``--shard K/N`` (docs/multiprocess.md), as their first words
SHARDED_COMMANDS = (("infer",), ("dsuperb", "infer"), ("fdb", "infer"), ("speechrole", "infer"))


def require_submitit() -> Any:
    """The ``submitit`` module; without it one line on stderr and ``SystemExit(2)``."""
    try:
        import submitit
    except ImportError:
        print("submitit_shards: submitit is not installed: pip install submitit (or pip install 'spearbench[slurm]')",
              file=sys.stderr)
        raise SystemExit(2) from None
    return submitit


class ShardTask:
    """One array task: ``spearbench <argv> --shard K/N`` in this process (``__call__`` returns its
    exit status; a whole-run problem, status 2, raises so that the task is marked failed). On
    preemption or timeout submitit calls :meth:`checkpoint`, which requeues the same shard; it
    resumes from ``OUT/.work/rank-K.jsonl``."""

    def __init__(self, argv: Sequence[str], shard: int, shards: int):
        self.argv, self.shard, self.shards = list(argv), int(shard), int(shards)

    def command(self) -> list[str]:
        return [*self.argv, "--shard", f"{self.shard}/{self.shards}"]

    def __call__(self) -> int:
        from spear_metrics.cli import main

        status = main(self.command())
        if status == 2:
            raise RuntimeError(f"spearbench {shlex.join(self.command())} exited 2 (see the task's log)")
        return status

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """What submitit requeues: the same shard (its work log holds the rows already done)."""
        submitit = require_submitit()
        return submitit.helpers.DelayedSubmission(ShardTask(self.argv, self.shard, self.shards))


def shard_tasks(argv: Sequence[str], shards: int) -> list[ShardTask]:
    """One :class:`ShardTask` per shard ``0..shards-1`` of the command ``argv``.

    Raises:
        SystemExit(2): a command that does not take ``--shard``, a ``--shard`` of its own, or ``shards`` < 1.
    """
    if not any(tuple(argv[: len(c)]) == c for c in SHARDED_COMMANDS):
        _fail(f"the command must be one of {', '.join(' '.join(c) for c in SHARDED_COMMANDS)} "
              f"(got {' '.join(argv[:2]) if argv else 'none'}): "
              "score runs on several machines with scripts/slurm/spearbench.sbatch")
    if any(a == "--shard" or a.startswith("--shard=") for a in argv):
        _fail("give the command without --shard: each task adds its own")
    if shards < 1:
        _fail(f"--shards must be >= 1, got {shards}")
    return [ShardTask(argv, k, shards) for k in range(shards)]


def _fail(msg: str) -> None:
    print(f"submitit_shards: {msg}", file=sys.stderr)
    raise SystemExit(2)


def make_executor(kind: str, folder: Path, args: argparse.Namespace) -> Any:
    """submitit's executor: ``slurm`` (``AutoExecutor``: Slurm when there is one), ``local``, ``debug``."""
    submitit = require_submitit()
    if kind == "debug":
        return submitit.DebugExecutor(folder=folder)
    if kind == "local":
        ex = submitit.LocalExecutor(folder=folder)
        ex.update_parameters(timeout_min=args.time_min)
        return ex
    ex = submitit.AutoExecutor(folder=folder)
    params: dict[str, Any] = {"timeout_min": args.time_min, "slurm_array_parallelism": args.parallel or args.shards,
                              "cpus_per_task": args.cpus, "slurm_additional_parameters": {"requeue": True}}
    if args.partition:
        params["slurm_partition"] = args.partition
    if args.gpus:
        params["gpus_per_node"] = args.gpus
    ex.update_parameters(**params)
    return ex


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ours, command = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], usage="%(prog)s [options] -- COMMAND ARGS...")
    ap.add_argument("--shards", type=int, required=True, help="array tasks (shards of the rows)")
    ap.add_argument("--executor", choices=("slurm", "local", "debug"), default="slurm")
    ap.add_argument("--logs", default="submitit_logs", help="submitit's folder (job pickles, each task's log)")
    ap.add_argument("--partition", default=None)
    ap.add_argument("--time-min", type=int, default=240, help="each task's time limit in minutes (then requeued)")
    ap.add_argument("--cpus", type=int, default=4, help="CPUs per task")
    ap.add_argument("--gpus", type=int, default=0, help="GPUs per task")
    ap.add_argument("--parallel", type=int, default=0, help="tasks at once (default: all)")
    ap.add_argument("--no-wait", dest="wait", action="store_false",
                    help="submit and return; print the command that merges the shards")
    args = ap.parse_args(ours)
    tasks = shard_tasks(command, args.shards)
    executor = make_executor(args.executor, Path(args.logs), args)
    jobs = executor.submit_array(tasks) if hasattr(executor, "submit_array") else [executor.submit(t) for t in tasks]
    from spear_metrics.commands import command as printable

    merge = printable("spearbench", *command)  # this environment's spearbench: runs as printed
    print(f"submitted {len(jobs)} shard task(s): {', '.join(str(j.job_id) for j in jobs[:4])}"
          f"{', ...' if len(jobs) > 4 else ''}; logs in {args.logs}")
    if not args.wait:
        print(f"when every task has ended, merge: {merge}")
        return 0
    failed = []
    for t, j in zip(tasks, jobs):
        try:
            j.result()
        except Exception as e:  # noqa: BLE001 -- reported, the merge still runs what is left
            failed.append(f"shard {t.shard}/{t.shards}: {' '.join(str(e).split())[:300]}")
    for f in failed:
        print(f"submitit_shards: {f}", file=sys.stderr)
    from spear_metrics.cli import main as spearbench

    print(f"merging: {merge}")
    return spearbench(command)


if __name__ == "__main__":
    sys.exit(main())
