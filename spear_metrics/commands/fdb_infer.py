"""``spearbench fdb infer --agent NAME --root FDB_DIR [--tasks T1,T2] [--concurrency N]``.

Streams each Full-Duplex-Bench stimulus ``<task>/<id>/input.wav`` in real time through a network
adapter and writes ``output.wav`` (time-synchronous reply, same length as the input) and
``output.json`` (word-timed ASR, the transcription ``spearbench fdb`` itself would run) beside it,
so that ``spearbench fdb score --task T --root FDB_DIR/<task>`` scores the folder as is. A v1.5 sample
folder (``input.wav``, ``clean_input.wav``, ``metadata.json``) is run twice, into ``output.wav`` and
``clean_output.wav`` (+ their transcripts), each half a resumable unit. Resumable.
Every file it writes is recorded; a sample holding an output.wav/output.json it did not write is
left alone, ``--overwrite`` included (which replaces only the replies an earlier fdb-infer run
wrote and that are unchanged). See :mod:`spear_metrics.full_duplex.infer` and docs/safety.md.
``spearbench fdb infer`` is the deprecated name of the same command.
"""

from __future__ import annotations

import argparse
import sys

from spear_metrics.commands import (
    add_price_table_option, add_process_options, add_run_options, add_shard_option, number, parse_options, price_table_of, print_failures, print_usage, run_exit_status, SHOWN_FAILURES, shown_path,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agent", required=True, help="streaming network adapter, e.g. openai-realtime (infer --list-agents)")
    p.add_argument("--agent-option", "-a", action="append", default=[], metavar="KEY=VALUE",
                   help="adapter constructor option (repeatable), e.g. base_url=ws://127.0.0.1:8000/v1/realtime")
    p.add_argument("--root", required=True, help="an FDB task folder (<id>/input.wav; v1.5: also clean_input.wav and metadata.json, both run) "
                        "or a folder of task folders")
    p.add_argument("--tasks", default=None, help="comma-separated task folder names under --root (default: all)")
    p.add_argument("--chunk-ms", type=number(above=0), default=None,
                   help="input chunk length in ms (default: the adapter's own, e.g. 80 for moshi, else 40)")
    p.add_argument("--concurrency", type=number(integer=True, minimum=1), default=1,
                   help="sessions at once, each paced in real time on its own schedule (default 1)")
    add_process_options(p)
    add_shard_option(p, units="samples", merge="writes each task folder's failures.jsonl and run_info.json (and runs "
                     "any sample no shard finished)")
    p.add_argument("--row-timeout-s", type=number(above=0), default=300.0,
                   help="a sample's time limit beyond its input's duration, s (default 300)")
    p.add_argument("--asr", default="embedded",
                   help="ASR backend for output.json (spear_metrics.core.asr; the one spearbench fdb uses by default)")
    p.add_argument("--no-asr", action="store_true",
                   help="write output.wav only (spearbench fdb then transcribes at scoring time); for an ASR model "
                        "that cannot be loaded here")
    p.add_argument("--output-sr", type=number(integer=True, minimum=4000), default=None,
                   help="rate of output.wav in Hz (default: the input's; FDB's own scripts assume 16000)")
    add_price_table_option(p, where="each task folder's .spearbench-fdb-infer/run_info.json")
    add_run_options(p, retry_failed="run again the samples that failed before",
                    overwrite="run other settings (agent, options, chunk size) in task folders an earlier fdb infer run "
                              "wrote: its recorded, unchanged output.wav/output.json are replaced; files fdb infer did "
                              "not write (another system's replies) are never touched")


def run(args: argparse.Namespace) -> int:
    from spear_datasets.files import OutputError
    from spear_metrics.agents.base import AgentError
    from spear_metrics.agents.registry import UnknownAgentError
    from spear_metrics.core.models import ModelUnavailableError
    from spear_metrics.core.options import OptionError
    from spear_metrics.core.secrets import mask_secrets
    from spear_metrics.agents.processes import parse_provider_limits
    from spear_metrics.full_duplex.infer import WORK, FDBInferError, run_fdb_inference

    version = getattr(args, "fdb_version", None)  # `fdb infer --version 1.0|1.5` (2 is routed before this parser)
    if version in ("1.0", "1.5"):
        from spear_metrics.full_duplex_v15.data import is_v15_folder

        found = "1.5" if is_v15_folder(args.root) else "1.0"
        if found != version:
            print(f"spearbench fdb infer: --version {version}, but --root {args.root} holds "
                  f"{'v1.5 samples (input.wav, clean_input.wav, metadata.json)' if found == '1.5' else 'no v1.5 samples'}",
                  file=sys.stderr)
            return 2
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()] if args.tasks else None
    try:
        prices = price_table_of(args)  # refused before any call
        info = run_fdb_inference(args.agent, args.root, tasks=tasks, agent_options=parse_options(args.agent_option),
                                 chunk_ms=args.chunk_ms, concurrency=int(args.concurrency),
                                 row_timeout_s=float(args.row_timeout_s), asr=None if args.no_asr else args.asr,
                                 output_sr=None if args.output_sr is None else int(args.output_sr),
                                 overwrite=args.overwrite, retry_failed=args.retry_failed, progress=not args.no_progress,
                                 processes=args.processes, provider_limits=parse_provider_limits(args.provider_limit),
                                 prices=prices, shard=args.shard)
    except (FDBInferError, OutputError, UnknownAgentError, OptionError, ModelUnavailableError, AgentError, ValueError,
            TypeError) as e:  # PriceTableError is a ValueError
        print(f"spearbench fdb infer: {mask_secrets(' '.join(str(e).split()))}", file=sys.stderr)
        return 2
    if "shard" in info:
        print(f"shard {info['shard']}: {info['n_done']}/{info['n_samples']} of its samples have a reply "
              f"({info['n_written']} this run), {info['n_kept']} kept, {info['n_failed']} failed; "
              f"{info['samples_left']} sample(s) of the task folders have no reply yet")
        print("when every shard has ended: the same command without --shard writes each task folder's failures.jsonl "
              "and run_info.json (and runs any sample no shard finished)")
        return run_exit_status(info["n_done"], info["n_failed"])
    print(f"{info['n_done']}/{info['n_samples']} replies written ({info['n_written']} this run), "
          f"{info['n_kept']} kept, {info['n_failed']} failed -> {args.root}")
    print_usage(info.get("usage"))  # billed for the replies in these folders (run_info.json; priced with --price-table)
    if info.get("n_incomplete"):
        print(f"spearbench fdb infer: note: {info['n_incomplete']} reply channel(s) are missing output frames (the "
              "server fell behind or stopped early; see the note of each sample in "
              "each task folder's .spearbench-fdb-infer/rank-0.jsonl)", file=sys.stderr)
    if info.get("n_server_lag_flagged"):
        print(f"spearbench fdb infer: note: {info['n_server_lag_flagged']} session(s) had output frames arrive later "
              "than the adapter's server_lag_bound_s after the input frames that produced them (server_lag_max_s in "
              "the work log); a frame-synchronous reply channel places every frame by its index, lag or not",
              file=sys.stderr)
    if info["n_kept"]:
        shown = ", ".join(info["kept"][:5]) + (", ..." if info["n_kept"] > 5 else "")
        print(f"  {info['n_kept']} sample(s) hold an output.wav/output.json fdb-infer did not write, left as they are "
              f"({shown}): move those files away to run this system on them", file=sys.stderr)
    if info["n_failed"]:
        tasks_failed = sorted({f["sample"].split("/", 1)[0] for f in info["failures"]})  # samples are <task>/<id>
        logs = ", ".join(shown_path(args.root, t, WORK, "failures.jsonl") for t in tasks_failed)
        print_failures([(f["sample"], f["error"]) for f in info["failures"][:SHOWN_FAILURES]],
                       f"{logs} (rerun with --retry-failed)", total=info["n_failed"], what="sample")
    return run_exit_status(info["n_done"], info["n_failed"])
