"""``spearbench infer --agent NAME --data DATA --split test --subset all --out OUTPUTS/``.

Runs a speech agent over a SPEAR split and writes a folder that ``spearbench score`` takes as is
(``OUTPUTS/metadata.csv``, ``audio/``, ``inputs/``, ``failures.jsonl``); see
:mod:`spear_metrics.agents.harness`. Resumable; ``accelerate launch -m spear_metrics.cli infer ...``
shards rows across processes. ``--agent`` takes a registered name, ``path/to/file.py:ClassName``
or ``package.module:ClassName``.
"""

from __future__ import annotations

import argparse
import sys

from spear_metrics.commands import (
    add_price_table_option, add_process_options, add_run_options, add_shard_option, command, next_steps, number, overwrite_help, parse_options, price_table_of, print_failures, print_usage, resumed_line, run_exit_status, SHOWN_FAILURES, shown_path, wrap,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from spear_metrics.agents.registry import agent_help

    p.add_argument("--agent", help=agent_help())
    p.add_argument("--agent-option", "-a", action="append", default=[], metavar="KEY=VALUE",
                   help="adapter constructor option, e.g. delay=0.7 (repeatable; typed from the constructor's signature; "
                        "--list-agents shows each agent's)")
    p.add_argument("--data", help="Hub-layout dataset folder, Hub dataset id, or SPEAR metadata CSV")
    p.add_argument("--split", default="test", help="dataset split (dev/test; ignored for a CSV)")
    p.add_argument("--subset", default="all", help="dataset config: all (default, both subsets pooled as the leaderboard), improvised or naturalistic (ignored for a CSV)")
    p.add_argument("--mode", choices=("offline", "streaming"), default="offline",
                   help="offline: whole question in; streaming: full-duplex simulation in --chunk-ms chunks")
    p.add_argument("--chunk-ms", type=number(above=0), default=None,
                   help="streaming / network-session chunk length in ms (> 0; default: the adapter's own, e.g. 80 for "
                        "moshi, else 40)")
    p.add_argument("--max-wait-s", type=number(minimum=0), default=0.0, help="streaming: seconds of silence fed after the input")
    p.add_argument("--max-answer-s", type=number(above=0), default=30.0,
                   help="longest answer in seconds an adapter should produce (a hint; default 30)")
    p.add_argument("--seed", type=number(integer=True), default=0)
    p.add_argument("--concurrency", type=number(integer=True, minimum=1), default=1,
                   help="network adapters (openai-audio, openai-realtime...): sessions at once, each paced in real time "
                        "on its own schedule (default 1); other adapters run one row at a time")
    add_process_options(p)
    p.add_argument("--copy-inputs", action="store_true",
                   help="a CSV source: copy its input clips into OUT/inputs (a dataset source's always are), so that "
                        "OUT holds everything `score` reads and can be scored on another machine")
    add_shard_option(p, units="rows", merge="writes metadata.csv (and runs any row no shard finished)")
    p.add_argument("--row-timeout-s", type=number(above=0), default=300.0,
                   help="time limit of one row's adapter call in s (default 300; a paced network adapter gets the "
                        "input's duration and tail silence on top); a row past it fails with 'timed out after N s'")
    add_price_table_option(p)
    add_run_options(p, out="output folder (metadata.csv, audio/, inputs/); a rerun resumes", out_required=False,
                    retry_failed="run again the rows that failed in an earlier run", overwrite=overwrite_help("infer"))
    p.add_argument("--list-agents", action="store_true",
                   help="print the available agents with their description and options, and exit "
                        "(with --agent: that agent only)")


def list_agents(name: str | None = None) -> int:
    """Print each agent (or ``name`` only): its description and its options."""
    from spear_metrics.agents.registry import (
        UnknownAgentError, agent_factory, available_agents, describe_agent, python_only_options,
    )

    for agent in [name] if name else available_agents():
        try:
            desc, options = describe_agent(agent)
            python_only = python_only_options(agent_factory(agent))
        except (UnknownAgentError, ImportError) as e:  # a broken entry point is listed, not fatal
            if name:
                print(f"spearbench infer: {e}", file=sys.stderr)
                return 2
            desc, options, python_only = f"(cannot be loaded: {' '.join(str(e).split())})", (), []
        print(wrap(f"{agent}: {desc}"))
        for o in options:
            print(wrap(f"    -a {o.describe()}", indent="        "))
        if not options:
            print("    (no options)")
        if python_only:
            print(wrap(f"    (Python only, not an -a option: {', '.join(python_only)}: takes an object, "
                       "for tests and notebooks)", indent="        "))
    return 0


def run(args: argparse.Namespace) -> int:
    from spear_datasets.schema import MetadataError
    from spear_metrics.agents.base import AgentError, GenerationConfig
    from spear_metrics.agents.harness import InferError, run_inference
    from spear_metrics.agents.processes import parse_provider_limits
    from spear_metrics.agents.registry import UnknownAgentError
    from spear_metrics.core.models import ModelUnavailableError
    from spear_metrics.core.options import OptionError

    if args.list_agents:
        return list_agents(args.agent)
    missing = [f"--{k}" for k in ("agent", "data", "out") if not getattr(args, k)]
    if missing:
        print(f"spearbench infer: the following arguments are required: {', '.join(missing)} "
              "(or --list-agents alone)", file=sys.stderr)
        return 2
    from spear_metrics.core.usage import PriceTableError

    try:
        prices = price_table_of(args)  # refused before any call
    except PriceTableError as e:
        print(f"spearbench infer: {e}", file=sys.stderr)
        return 2
    try:
        config = GenerationConfig(mode=args.mode, chunk_ms=args.chunk_ms, max_wait_s=args.max_wait_s,
                                  max_answer_s=args.max_answer_s, seed=args.seed)
        info = run_inference(args.agent, args.data, args.out, agent_options=parse_options(args.agent_option),
                             split=args.split, subset=args.subset, config=config, retry_failed=args.retry_failed,
                             overwrite=args.overwrite, progress=not args.no_progress, concurrency=int(args.concurrency),
                             row_timeout_s=float(args.row_timeout_s), prices=prices, processes=args.processes,
                             provider_limits=parse_provider_limits(args.provider_limit), shard=args.shard, copy_inputs=args.copy_inputs)
    except (InferError, MetadataError, UnknownAgentError, OptionError, ModelUnavailableError, ValueError, TypeError, AgentError) as e:
        from spear_metrics.core.secrets import mask_secrets

        print(f"spearbench infer: {mask_secrets(' '.join(str(e).split()))}", file=sys.stderr)
        return 2
    if info is not None and "shard" in info:
        left = info["rows_left"]
        print(f"shard {info['shard']}: {info['rows_run_this_time']} rows run ({info['n_answered']} answered, "
              f"{info['n_failed']} failed); {left} row(s) of the run have no answer yet")
        print(wrap("when every shard has ended: the same command without --shard writes metadata.csv (and runs any "
                   "row no shard finished)"))
        return run_exit_status(info["n_answered"], info["n_failed"]) if info["rows_run_this_time"] else 0
    if info is not None:
        from pathlib import Path

        lag = (info.get("send_lag_max_s") or {}).get("max")
        if lag is not None and lag > 2 * (info.get("chunk_ms") or 40.0) / 1000.0:
            print(f"spearbench infer: note: a paced session fell {lag:.3f} s behind its real-time schedule (see "
                  f"send_lag_max_s in {shown_path(args.out, 'response_times.csv')}); its wall-clock onset includes that delay: "
                  "use a lower --concurrency, more --processes (each paces its share of the sessions; "
                  f"this run: {info.get('session_processes', 1)}) or a less loaded machine", file=sys.stderr)

        if info.get("n_reply_incomplete"):
            print(f"spearbench infer: note: {info['n_reply_incomplete']} row(s) are missing output frames at the end of "
                  "their reply (frames_received < frames_expected in "
                  f"{shown_path(args.out, 'response_times.csv')}): the server fell behind or stopped early; an answer "
                  "that ran into the missing frames is cut there", file=sys.stderr)
        if info.get("n_server_lag_flagged"):
            worst = (info.get("server_lag_max_s") or {}).get("max")
            print(f"spearbench infer: note: {info['n_server_lag_flagged']} row(s) had output frames arrive more than "
                  f"{info.get('server_lag_bound_s')} s after the input frames that produced them (worst "
                  f"{worst:.3f} s: a server slower than real time; see server_lag_max_s in "
                  f"{shown_path(args.out, 'response_times.csv')}); onsets on the frame clock (moshi's default "
                  "onset_clock) come from the frame index and do not include that lag", file=sys.stderr)
        metadata = shown_path(args.out, "metadata.csv")
        resumed = resumed_line(info.get("rows_resumed", 0), info["n_inputs"], shown_path(args.out, ".work"))
        if resumed:
            print(wrap(resumed))
        print(f"{info['n_answered']}/{info['n_inputs']} answered, {info['n_failed']} failed -> {metadata}")
        print_usage(info.get("usage"))  # what the service billed (run_info.json: usage; priced with --price-table)
        if info["n_failed"]:
            from spear_metrics.core.records import read_jsonl

            path = Path(args.out) / "failures.jsonl"
            failed = [(o.get("row"), o.get("error")) for o in read_jsonl(path)]
            print_failures(failed[:SHOWN_FAILURES], f"{shown_path(path)} (rerun with --retry-failed to try them again)",
                           total=info["n_failed"])
        silent_text = _answers_without_text(Path(args.out) / "metadata.csv")
        if silent_text:
            print(wrap(f"note: {silent_text} of {info['n_answered']} answers came with no text (AgentAnswer.text None): "
                       "their transcript_answer is empty, so speech_quality has no reference to compute WER/CER "
                       "against (no_reference_% counts them); return the text the agent speaks"))
        if info["n_answered"]:
            out = Path(args.out)
            next_steps(("score the answers (dimensions that run offline; add language_dialect,emotions,... with their models)",
                        command("spearbench", "score", "--metadata", metadata, "--metrics",
                                "interruptions,explainable_features,speech_quality", "--out",
                                shown_path(out.parent, f"{out.name or 'outputs'}_results"))))
        return run_exit_status(info["n_answered"], info["n_failed"])
    return 0


def _answers_without_text(metadata) -> int:
    """Answered rows of ``metadata`` (answer audio given) whose ``transcript_answer`` is empty."""
    from spear_datasets.schema import MetadataError, read_metadata

    try:
        rows = read_metadata(metadata)
    except (MetadataError, OSError):
        return 0
    return sum(1 for r in rows if (r.get("answer_audio_path") or "").strip() and not (r.get("transcript_answer") or "").strip())
