"""Measure the FDB v2 conversation engine: N conversations at once between loopback Realtime fakes.

The fakes (``tests/openai_fakes.py`` ``RealtimeFake``, program ``converse``: a real recording as every
turn, replies clocked by the audio received) run in a child process, so the CPU measured is the
engine's (this process: relay, both adapters' WebSocket clients, recording, writing the files).

Prints JSON: per conversation its duration, end reason, turns, wall time and relay delay; pooled
relay delay median / p99 (s); wall time per conversation (s); CPU seconds per conversation-second.
Machine-dependent figures: run on the machine you want to know about.

    python scripts/bench_fdb_v2.py --conversations 2 --max-duration-s 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-bench-fdb2"


def _serve(ids: list[str], q) -> None:
    sys.path.insert(0, str(REPO / "tests"))
    from openai_fakes import Program, RealtimeFake
    from spear_datasets.audio import load_audio

    turn = load_audio(REPO / "tests/fixtures/real/speechbrain__p225_002.wav", sr=24000, channels="mix")[0][24000:72000]
    fake = RealtimeFake({f"{i}.{s}": Program("converse", replies=50) for i in ids for s in "AB"}, turn, KEY)
    q.put(fake.url)
    import threading

    threading.Event().wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conversations", type=int, default=2)
    ap.add_argument("--max-duration-s", type=float, default=30.0)
    ap.add_argument("--turn-limit", type=int, default=5)
    ap.add_argument("--tick-ms", type=float, default=40.0)
    args = ap.parse_args()
    from spear_metrics.agents.openai_realtime import OpenAIRealtimeAgent
    from spear_metrics.full_duplex_v2.engine import ExaminerRealtimeAgent, Rules, run_conversations
    from spear_metrics.full_duplex_v2.tasks import Task

    tasks = [Task(f"Daily.bench.{i:03d}", "Daily", "bench", "Act as a customer.", "T1: order.", {"T1": "order"})
             for i in range(args.conversations)]
    q = mp.get_context("spawn").Queue()
    proc = mp.get_context("spawn").Process(target=_serve, args=([t.id for t in tasks], q), daemon=True)
    proc.start()
    url = q.get(timeout=60)
    os.environ["FDB2_BENCH_KEY"] = KEY
    rules = Rules(turn_limit=args.turn_limit, max_duration_s=args.max_duration_s)
    with tempfile.TemporaryDirectory() as out:
        counts = asyncio.run(run_conversations(
            tasks, out, lambda: ExaminerRealtimeAgent(base_url=url, api_key_env="FDB2_BENCH_KEY"),
            lambda: OpenAIRealtimeAgent(base_url=url, api_key_env="FDB2_BENCH_KEY"), lambda _: rules,
            concurrency=args.conversations, tick_ms=args.tick_ms))
        mans = [json.loads((Path(out) / t.id / "manifest.json").read_text()) for t in tasks if (Path(out) / t.id).exists()]
    proc.terminate()
    delays = np.concatenate([np.asarray(m["relay_delays_s"]) for m in mans]) if mans else np.zeros(0)
    conv_s = sum(m["duration_s"] for m in mans)
    print(json.dumps({
        "conversations": [{k: m[k] for k in ("task_id", "duration_s", "end_reason", "examiner_turns", "wall_s",
                                               "relay_delay", "send_lag_max_s")} for m in mans],
        "ok": counts["ok"], "failed": counts["failed"],
        "relay_delay_median_s": round(float(np.median(delays)), 4) if delays.size else None,
        "relay_delay_p99_s": round(float(np.percentile(delays, 99)), 4) if delays.size else None,
        "wall_s_per_conversation": round(float(np.mean([m["wall_s"] for m in mans])), 3) if mans else None,
        "run_wall_s": counts["wall_s"], "cpu_s": counts["cpu_s"], "conversation_s": round(conv_s, 3),
        "cpu_s_per_conversation_s": round(counts["cpu_s"] / conv_s, 4) if conv_s else None,
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
