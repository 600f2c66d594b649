"""``spearbench infer --agent NAME --data DATA --split test --subset all --out OUTPUTS/``.

Runs a speech agent over a SPEAR split and writes a folder that ``spearbench score`` takes as is
(``OUTPUTS/metadata.csv``, ``audio/``, ``inputs/``, ``failures.jsonl``); see
:mod:`spear_metrics.agents.harness`. Resumable; ``accelerate launch -m spear_metrics.cli infer ...``
shards rows across processes.
"""

from __future__ import annotations

import argparse
import sys

from spear_metrics.commands import parse_options


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agent", required=True, help="adapter name (built-in: human, silence, fixed-delay, barge-in, cascade; "
                                                  "or any registered under the 'spearbench.agents' entry points)")
    p.add_argument("--agent-option", "-a", action="append", default=[], metavar="KEY=VALUE",
                   help="adapter constructor option, e.g. delay=0.7 (repeatable)")
    p.add_argument("--data", required=True, help="Hub-layout dataset folder, Hub dataset id, or SPEAR metadata CSV")
    p.add_argument("--split", default="test", help="dataset split (dev/test; ignored for a CSV)")
    p.add_argument("--subset", default="all", help="dataset config: all (default, both subsets pooled as the leaderboard), improvised or naturalistic (ignored for a CSV)")
    p.add_argument("--out", required=True, help="output folder (metadata.csv, audio/, inputs/); a rerun resumes")
    p.add_argument("--mode", choices=("offline", "streaming"), default="offline",
                   help="offline: whole question in; streaming: full-duplex simulation in --chunk-ms chunks")
    p.add_argument("--chunk-ms", type=float, default=40.0, help="streaming chunk length in ms (default 40)")
    p.add_argument("--max-wait-s", type=float, default=0.0, help="streaming: seconds of silence fed after the input")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--retry-failed", action="store_true", help="run again the rows that failed in an earlier run")
    p.add_argument("--overwrite", action="store_true", help="discard answers of another run in --out")
    p.add_argument("--list-agents", action="store_true", help="print the available agents and exit")
    p.add_argument("--no-progress", action="store_true")


def run(args: argparse.Namespace) -> int:
    from spear_datasets.schema import MetadataError
    from spear_metrics.agents.base import GenerationConfig
    from spear_metrics.agents.harness import InferError, run_inference
    from spear_metrics.agents.registry import UnknownAgentError, available_agents

    if args.list_agents:
        print("\n".join(available_agents()))
        return 0
    try:
        config = GenerationConfig(mode=args.mode, chunk_ms=args.chunk_ms, max_wait_s=args.max_wait_s, seed=args.seed)
        info = run_inference(args.agent, args.data, args.out, agent_options=parse_options(args.agent_option),
                             split=args.split, subset=args.subset, config=config, retry_failed=args.retry_failed,
                             overwrite=args.overwrite, progress=not args.no_progress)
    except (InferError, MetadataError, UnknownAgentError, ValueError, TypeError) as e:
        print(f"spearbench infer: {e}", file=sys.stderr)
        return 2
    if info is not None:
        print(f"{info['n_answered']}/{info['n_inputs']} answered, {info['n_failed']} failed -> {args.out}/metadata.csv")
        if info["n_failed"]:
            print(f"reasons in {args.out}/failures.jsonl (rerun with --retry-failed to try them again)", file=sys.stderr)
    return 0
