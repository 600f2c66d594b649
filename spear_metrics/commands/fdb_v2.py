"""``spearbench fdb2 infer|score``: Full-Duplex-Bench v2 (also reached as ``spearbench fdb infer|score
--version 2``, ``fdb-infer --version 2`` and ``fdb --version 2``).

- ``fdb2 infer --tasks TASKS.json --agent NAME [-a K=V...] [--examiner openai-realtime
  -e K=V...] --out DIR [--concurrency N] [--examiner-mode slow|fast] [--max-duration-s S]``: one
  live conversation per task into ``DIR/<task id>/`` (``A.wav``, ``B.wav``, ``combined.wav``,
  ``manifest.json``), logged in ``DIR/conversations.jsonl``; resumable
  (:mod:`spear_metrics.full_duplex_v2.engine`); ``--processes N|auto`` runs each conversation
  whole in a session process, ``--provider-limit NAME=N`` caps the examiner's and the examinee's
  sessions by adapter name, ``--shard K/N`` runs one shard of the tasks (docs/multiprocess.md).
- ``fdb2 score --tasks TASKS.json --root DIR --eval-prompts eval_prompts.json --out RESULTS
  --judge-url URL --judge-model ID``: ASR, the judge, upstream's aggregates
  (:mod:`spear_metrics.full_duplex_v2.score`), ``RESULTS/summary.json``.

The ``fdb`` command group (Full-Duplex-Bench v1.0) routes here, through :mod:`spear_metrics.cli`,
when its arguments hold ``--version 2``; v1.0's own parsers are untouched.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
from typing import Any

from spear_metrics.commands import (
    add_process_options, add_run_options, add_shard_option, number, overwrite_help, parse_options, run_exit_status,
)



def wanted(argv: list[str]) -> tuple[str, list[str]] | None:
    """``(mode, rest)`` when ``argv`` asks for v2: ``fdb infer|score ... --version 2``,
    ``fdb-infer ... --version 2`` (infer) or ``fdb ... --version 2`` (score); ``rest`` the
    arguments after the command (and its ``infer``/``score`` word); else ``None``."""
    if not argv or argv[0] not in ("fdb", "fdb-infer"):
        return None
    if not any((a == "--version" and i + 1 < len(argv) and argv[i + 1] == "2") or a == "--version=2"
               for i, a in enumerate(argv)):
        return None
    if argv[0] == "fdb" and len(argv) > 1 and argv[1] in ("infer", "score"):
        return argv[1], argv[2:]
    return ("infer" if argv[0] == "fdb-infer" else "score"), argv[1:]


def route_argv(argv: list[str]):
    """``(who, run)`` for :mod:`spear_metrics.cli` when ``argv`` asks for v2 (:func:`wanted`):
    ``run()`` parses the arguments with v2's own parsers and runs; else ``None``."""
    v2 = wanted(argv)
    if not v2:
        return None
    return f"spearbench fdb {v2[0]} --version 2", lambda: main(*v2)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--version", choices=("2",), default="2", help="Full-Duplex-Bench version (2)")
    p.add_argument("--tasks", required=True, help="tasks file in upstream's v2/prompts_staged_200.json shape")
    p.add_argument("--split", action="append", default=None, help="only this split (repeatable)")
    p.add_argument("--limit", type=number(integer=True, minimum=1), default=None, help="first N tasks only")


INFER_HELP = "Full-Duplex-Bench v2: live conversations between an examiner and an adapter"
SCORE_HELP = "Full-Duplex-Bench v2: ASR, upstream's judge prompts and aggregates"


def add_infer_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--agent", required=True, help="the examinee: a network adapter (infer --list-agents)")
    p.add_argument("--agent-option", "-a", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--examiner", default="openai-realtime",
                   help="the examiner: openai-realtime (upstream's session: the task's instructions, voice echo, "
                        "examiner-mode turn detection, opens the conversation) or any network adapter")
    p.add_argument("--examiner-option", "-e", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--examiner-mode", choices=("slow", "fast"), default="slow", help="upstream's examiner VAD mode")
    add_run_options(p, out="output folder (a rerun with the same settings resumes)",
                    retry_failed="run again the conversations that failed before",
                    overwrite=overwrite_help("fdb infer --version 2"), progress=False)
    p.add_argument("--concurrency", type=number(integer=True, minimum=1), default=1, help="conversations at once")
    add_process_options(p, processes_help="processes running the conversations, each conversation whole (both of its "
                                          "sessions and the relay between them) in one, each process with its own "
                                          "event loop (default 1; this process stays the one writer of --out); auto: "
                                          "ceil(concurrency / 32), at most the CPUs (docs/multiprocess.md)",
                        limit_help="at most N sessions of the adapter NAME at once over every process of this machine, "
                                   "other runs included (repeatable); the examiner (--examiner) and the examinee "
                                   "(--agent) each count against their adapter's cap: a conversation holds one slot of "
                                   "each (two of one cap when both are the same adapter) for its whole length")
    add_shard_option(p, units="conversations", merge="copies the shards' records into conversations.jsonl (and runs "
                                                     "any conversation no shard finished)")
    p.add_argument("--max-duration-s", type=number(above=0, maximum=3600), default=None,
                   help="duration cap, s (default: the tasks file's max_duration_sec; upstream's runner: 120)")
    p.add_argument("--wire-rate", type=number(integer=True, minimum=8000, maximum=96000), default=24000,
                   help="relay and recording rate, Hz (default 24000; upstream's WebRTC wire: 48000)")
    p.add_argument("--tick-ms", type=number(above=0, maximum=1000), default=40.0, help="relay tick, ms")
    p.add_argument("--examinee-prompt", default=None, help="the examinee's instructions (default: upstream's .env.example)")


def add_score_arguments(p: argparse.ArgumentParser) -> None:
    from spear_metrics.commands.judge_options import add_judge_options

    _common(p)
    p.add_argument("--root", required=True, help="the fdb2 infer output folder")
    p.add_argument("--eval-prompts", required=True,
                   help="upstream's v2/eval/eval_prompts.json (CC BY-NC 4.0, not shipped)")
    p.add_argument("--asr", default="embedded", help="ASR backend for channels without A.json/B.json")
    add_run_options(p, out="results folder (a rerun with the same settings resumes)",
                    retry_failed="judge again the tasks that failed before", overwrite=overwrite_help("fdb score --version 2"),
                    progress=False, bootstrap="the split means' 95%% intervals (over conversations)")
    add_judge_options(p, required=True, model_help="judge model id (upstream: gemini-2.5-flash in .env.example, an alias, or "
                                                   "gemini-2.5-flash-preview-09-2025; a dated id reproduces best)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``fdb2 infer`` and ``fdb2 score``."""
    sub = p.add_subparsers(dest="fdb2_command", required=True, metavar="{infer,score}")
    add_infer_arguments(sub.add_parser("infer", help=INFER_HELP, description=INFER_HELP))
    add_score_arguments(sub.add_parser("score", help=SCORE_HELP, description=SCORE_HELP))


def run(args: argparse.Namespace) -> int:
    return run_infer(args) if args.fdb2_command == "infer" else run_score(args)


def _fail(msg: str) -> int:
    from spear_metrics.core.secrets import mask_secrets

    print(f"spearbench fdb --version 2: {mask_secrets(' '.join(str(msg).split()))}", file=sys.stderr)
    return 2


def examiner_options(options: dict[str, Any]) -> dict[str, Any]:
    """``-e KEY=VALUE`` strings -> typed options of the openai-realtime examiner (the options of
    :class:`~spear_metrics.agents.openai_realtime.OpenAIRealtimeAgent`, typed by its signature).

    Raises:
        OptionError: an option it does not take, or a value of the wrong type.
    """
    from spear_metrics.agents.openai_realtime import OpenAIRealtimeAgent
    from spear_metrics.agents.registry import agent_options
    from spear_metrics.core.options import OptionError, unknown_message

    schema = {o.name: o for o in agent_options(OpenAIRealtimeAgent)[0]}
    out = {}
    for k, v in options.items():
        if k not in schema:
            raise OptionError(unknown_message(k, "examiner openai-realtime", schema))
        out[k] = schema[k].coerce(v, owner="examiner openai-realtime")
    return out


def run_infer(args: argparse.Namespace) -> int:
    from spear_metrics.agents.base import AgentError
    from spear_metrics.agents.registry import load_agent
    from spear_metrics.core.options import OptionError
    from spear_metrics.full_duplex_v2.engine import ExaminerRealtimeAgent, Rules, adapter_description, run_conversations
    from spear_metrics.agents.processes import ProviderSlots, check_provider_limits, parse_provider_limits
    from spear_metrics.full_duplex_v2.tasks import EXAMINEE_SYSTEM_PROMPT, TasksError, load_tasks

    try:
        limits = parse_provider_limits(args.provider_limit)
        check_provider_limits([args.examiner, args.agent], limits)  # a misspelt name would cap nothing
        if args.examiner == args.agent and limits.get(args.agent, 2) < 2:
            raise ValueError(f"--provider-limit {args.agent}={limits[args.agent]}: a conversation holds two sessions of "
                             f"{args.agent} (examiner and examinee); give {args.agent}=2 or more")
        slots = [ProviderSlots(args.examiner, limits.get(args.examiner)), ProviderSlots(args.agent, limits.get(args.agent))]
        if args.examiner == args.agent:
            slots = [slots[0], slots[0]]  # two slots of the one cap
    except ValueError as e:  # ProcessesError: a bad pair, a misspelt name, an unusable slot folder
        return _fail(e)
    try:
        tf = load_tasks(args.tasks, splits=args.split, limit=args.limit)
        ex_opts, ee_opts = parse_options(args.examiner_option), parse_options(args.agent_option)

        # fresh adapters per conversation; partials, so that a session process can be sent them (--processes)
        if args.examiner == "openai-realtime":
            ex_opts = examiner_options(ex_opts)
            make_examiner = functools.partial(ExaminerRealtimeAgent, vad_mode=args.examiner_mode, **ex_opts)
        else:
            make_examiner = functools.partial(load_agent, args.examiner, **ex_opts)
        make_examinee = functools.partial(load_agent, args.agent, **ee_opts)

        ex, ee = make_examiner(), make_examinee()  # options refused here: a whole-run problem
        for who, a in (("examiner", ex), ("agent", ee)):
            if not asyncio.iscoroutinefunction(getattr(a, "connect", None)) or not getattr(a, "live_input", False):
                return _fail(f"--{who} must be a network adapter that takes live input (live_input: openai-realtime, "
                             f"moshi); {type(a).__name__} is not")
    except (TasksError, OptionError, ValueError, TypeError, KeyError, AgentError) as e:  # incl. an unknown adapter, a key
        return _fail(e)
    from spear_metrics.agents.duplex import clamp_concurrency

    describe = {"examiner": adapter_description(args.examiner, ex, ex_opts), "examinee": adapter_description(args.agent, ee, ee_opts),
                "tasks_sha256": tf.sha256, "examiner_mode": args.examiner_mode}
    describe["seeds"] = {who: {k: describe[who][k] for k in ("seed", "text_seed", "audio_seed") if k in describe[who]}
                         or "none (the adapter takes no seed; the OpenAI Realtime API takes none)"
                         for who in ("examiner", "examinee")}
    concurrency = int(args.concurrency)
    for a in (ex, ee):  # a server that serves one session at a time (Kyutai's moshi.server) bounds the run
        concurrency, note = clamp_concurrency(a, concurrency)
        if note:
            print(note, file=sys.stderr)
    from pathlib import Path

    from spear_datasets.files import OutputError
    from spear_metrics.full_duplex_v2.engine import RunConflict, read_log

    def on_done(rec: dict) -> None:
        line = f"{rec['task_id']}: {rec['status']}"
        line += f" ({rec.get('end_reason')}, {rec.get('duration_s')} s)" if rec["status"] == "ok" else f": {rec.get('reason')}"
        print(line, file=sys.stderr)

    from spear_metrics.agents.processes import sessions_for
    from spear_metrics.agents.rows import ProcessLost

    # the conversations in session processes (--processes): each whole in one, built there from the partials above
    sessions = functools.partial(sessions_for, ee, name=args.agent, options=ee_opts, built_by_name=True,
                                 processes=args.processes)
    try:
        counts = asyncio.run(run_conversations(
            tf.tasks, args.out, make_examiner, make_examinee,
            lambda t: Rules.from_settings(tf.settings, max_duration_s=args.max_duration_s),
            concurrency=concurrency, retry_failed=args.retry_failed, overwrite=args.overwrite, describe=describe,
            on_done=on_done, bad=tf.bad, shard=args.shard, slots=slots, sessions=sessions, wire_rate=int(args.wire_rate),
            tick_ms=float(args.tick_ms),
            examinee_instructions=args.examinee_prompt or EXAMINEE_SYSTEM_PROMPT))
    # another run's folder, a live process writing it, an unwritable --out; a session process that ended (rerun to
    # resume: the conversations it was running were not logged), or that could not build the adapter
    except (RunConflict, OutputError, ProcessLost, ValueError) as e:
        return _fail(e)
    for pos, why in tf.bad:  # an unreadable task entry is a failed unit (logged once by the run)
        print(f"  failed task {pos}: {why}", file=sys.stderr)
    from spear_metrics.commands import command, next_steps, shown_path

    procs = counts.get("session_processes")
    print(f"fdb infer --version 2: {counts['ok']} ok, {counts['failed']} failed, {counts.get('skipped', 0)} done before; "
          f"{counts['conversation_s']:.1f} s of conversation in {counts['wall_s']:.1f} s"
          + (f" ({procs} session processes)" if procs and procs > 1 else ""))
    print("counts: " + json.dumps(counts))  # machine-readable: relay, processes, CPU (docs/full-duplex-bench-v2.md)
    if args.shard is None:
        next_steps(("transcribe and judge the conversations (upstream's eval_prompts.json; the judge through "
                    "--judge-url/--judge-model, docs/full-duplex-bench-v2.md)",
                    command("spearbench", "fdb", "score", "--version", "2", "--tasks", shown_path(args.tasks), "--root",
                            shown_path(args.out), "--eval-prompts", "EVAL_PROMPTS.json", "--out",
                            shown_path(f"{shown_path(args.out)}_results"), "--judge-url", "URL", "--judge-model", "ID")))
    # as every inference command: 1 only when nothing was recorded (failures are listed above, and logged)
    final = read_log(Path(args.out), {t.id for t in tf.tasks})  # this run's and earlier runs' units (every shard's)
    if args.shard is not None:
        from spear_metrics.core.records import in_shard

        mine = [t for t in tf.tasks if in_shard(t.id, args.shard)]
        n_ok = sum(1 for t in mine if (final.get(t.id) or {}).get("status") == "ok")
        left = sum(1 for t in tf.tasks if t.id not in final)
        print(f"shard {args.shard[0]}/{args.shard[1]}: {n_ok}/{len(mine)} of its conversations ok; {left} conversation(s) "
              "of the run have no record yet; when every shard has ended, the same command without --shard copies the "
              "shards' records into conversations.jsonl (and runs any conversation no shard finished)", file=sys.stderr)
        return run_exit_status(n_ok, len(mine) - n_ok) if mine else 0
    n_ok = sum(1 for t in tf.tasks if (final.get(t.id) or {}).get("status") == "ok")
    return run_exit_status(n_ok, len(tf.tasks) - n_ok + len(tf.bad))


def run_score(args: argparse.Namespace) -> int:
    from spear_datasets.files import OutputError
    from spear_metrics.commands.judge_options import judge_config_from_args, warn_line
    from spear_metrics.core.asr import load_asr
    from spear_metrics.core.judge import make_judge
    from spear_metrics.core.models import ModelUnavailableError
    from spear_metrics.full_duplex_v2.score import (UPSTREAM_JUDGE_MAX_TOKENS, UPSTREAM_JUDGE_TEMPERATURE, ScoreSetupError,
                                                    score_run)
    from spear_metrics.full_duplex_v2.tasks import TasksError, load_tasks

    judge = None
    try:
        tf = load_tasks(args.tasks, splits=args.split, limit=args.limit)
        judge = make_judge(judge_config_from_args(args, temperature=UPSTREAM_JUDGE_TEMPERATURE), warn=warn_line)
        asr = load_asr(args.asr)
        summary = score_run(args.root, tf.tasks, args.eval_prompts, judge, args.out, asr=asr,
                            retry_failed=args.retry_failed, overwrite=args.overwrite, n_resamples=int(args.bootstrap),
                            seed=int(args.seed), judge_kw={"max_tokens": UPSTREAM_JUDGE_MAX_TOKENS},
                            concurrency=int(args.judge_concurrency), tasks_sha256=tf.sha256)
    # the ASR model cannot be had, another run's --out (ScoreSetupError), a live process writing it or a folder of
    # the user's (OutputError)...
    except (TasksError, ScoreSetupError, ValueError, ModelUnavailableError, OutputError) as e:
        return _fail(e)
    finally:
        if judge is not None:
            judge.close()
    _print_score(summary, args.out)
    return run_exit_status(len(summary["per_task"]), len(summary["failed"]))


#: the split means the console shows (each over conversations, with its 95 % interval)
SCORE_KEYS = ("avg_turn_taking", "avg_instruction_following", "avg_task_specific")


def _print_score(summary: dict[str, Any], out: str) -> None:
    """The end of ``fdb score --version 2``, as every scoring command ends: one row per split with
    each mean, its interval and ``n``; the failed tasks; the judge's calls; what was written;
    the next step (a results dataset for the Space's Full-Duplex-Bench v2 tab)."""
    from spear_metrics.commands import command, next_steps, shown_path, text_table, wrap
    from spear_metrics.core.judge import judge_calls_line
    from spear_metrics.core.summary import interval_text

    rows = [[name, str(g["n_conversations"]),
             *(f"{interval_text(g[k]['mean'], g[k].get('ci95'))} (n={g[k].get('n')})" for k in SCORE_KEYS)]
            for name, g in summary["splits"].items()]
    print(text_table(["split", "conversations", *SCORE_KEYS], rows))
    for f in summary["failed"][:5]:
        print(f"  failed task {f['task_id']}: {f['reason']}", file=sys.stderr)
    if len(summary["failed"]) > 5:
        print(f"  ... {len(summary['failed']) - 5} more failed tasks in {shown_path(out, 'per_sample.jsonl')}",
              file=sys.stderr)
    if summary.get("judge_calls"):
        print(wrap(judge_calls_line(summary["judge_calls"])))
    print(f"wrote {shown_path(out, 'summary.json')} and per_sample.jsonl (each judge reply: judgements.jsonl)")
    next_steps(("a results dataset for the leaderboard Space's Full-Duplex-Bench v2 tab (add --repo-id USER/NAME to "
                "upload it)", command("spearbench", "push-results", shown_path(out), "--local-dir",
                                      shown_path(f"{shown_path(out)}_dataset"), "--model-name", "MODEL")))


def main(mode: str, argv: list[str]) -> int:
    """Parse ``argv`` (the arguments after the command) and run ``mode`` (``infer`` / ``score``)."""
    p = argparse.ArgumentParser(prog=f"spearbench fdb {mode} --version 2", description=INFER_HELP if mode == "infer" else SCORE_HELP)
    (add_infer_arguments if mode == "infer" else add_score_arguments)(p)
    args = p.parse_args(argv)
    return run_infer(args) if mode == "infer" else run_score(args)
