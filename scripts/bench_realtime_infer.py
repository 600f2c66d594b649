"""Throughput and onset accuracy of ``spearbench infer --agent openai-realtime`` with real-time pacing.

Runs ``infer`` over ``--rows`` SPEAR-shaped rows (stereo 16 kHz clips of ``--clip-s`` seconds cut from
the real AMI recording in tests/fixtures/real) against the loopback Realtime fake
(``tests/openai_fakes.py``, in a separate process so that it does not share the client's GIL), which
answers ``--delay-s`` seconds (of input samples) after each clip's end. ``--concurrency 1`` on
``--serial-rows`` rows (figures extrapolated to all rows), then ``--concurrency N`` on all rows once
per value of ``--processes`` (e.g. ``1,2``: the sessions on this process's loop, then in two session
processes, ``spearbench infer --processes 2``).
Printed (and written as JSON with ``--json``): rows/s, wall time, and the onset error against the
programmed onset (median, p90, p99, max in ms) on the wall clock (SPEAR's onset) and on the stream clock,
the response time, each session's largest send delay behind its schedule (how well the pacing held),
and the CPU cost: CPU seconds (``time.process_time`` plus the ended session processes'
``RUSAGE_CHILDREN``; the event loop's own thread with ``time.thread_time``, in each session process
when there are several) of the client and of the fake's process, in ms of CPU per session-second (a
session lasts its clip plus the 2.5 s tail), the loops' lag (``run_info.json``'s ``loop_lag_ms``) and
the 1-minute load average before and after each run. CPU seconds do not depend on the machine's load,
unlike the wall-clock figures. A warm-up run of one short row comes first (imports, resampler and
WebSocket set-up are then not counted as per-session cost).

    PYTHONPATH=$PWD python scripts/bench_realtime_infer.py --rows 64 --clip-s 8 --concurrency 64 --processes 1,2
"""

from __future__ import annotations

import argparse
import csv
import inspect
import json
import multiprocessing as mp
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
REAL = REPO / "tests" / "fixtures" / "real"
STEREO = REAL / "DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav"
KEY = "sk-bench-not-a-real-key-000000"


def _fake_process(conn, programs, answer) -> None:
    from openai_fakes import RealtimeFake

    fake = RealtimeFake(programs, answer, KEY)
    conn.send(fake.url)
    cpu0 = time.process_time()
    conn.recv()  # until told to stop
    conn.send({"replied_at": dict(fake.replied_at), "connections": dict(fake.connections),
               "cpu_s": time.process_time() - cpu0})
    fake.close()


def build_rows(root: Path, n: int, clip_s: float) -> tuple[Path, list[str]]:
    from spear_datasets.audio import TARGET_SR, load_audio, write_wav

    src = load_audio(STEREO, sr=TARGET_SR, channels="keep")
    length = round(clip_s * TARGET_SR)
    starts = np.linspace(0, src.shape[1] - length, num=max(1, min(n, 23))).astype(int)
    (root / "clips").mkdir(parents=True, exist_ok=True)
    names = []
    with open(root / "metadata.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["audio_path", "answer_audio_path", "context_end_time", "question_end_time", "answer_duration",
                    "speakers", "conversation_id", "transcript_question", "transcript_answer", "answer_start_time"])
        for k in range(n):
            name = f"V00_S0001_I00000001_P0016A_P0015_{k}.wav"
            s = starts[k % len(starts)]
            write_wav(root / "clips" / name, src[:, s : s + length], TARGET_SR)
            w.writerow([f"clips/{name}", "", "0.0", repr(length / TARGET_SR), "", "P0016A|P0015", "V00_S0001_I00000001",
                        "P0016A: q?", "", ""])
            names.append(name)
    return root / "metadata.csv", names


def run_once(csv_path: Path, names: list[str], out: Path, concurrency: int, clip_s: float, delay_s: float,
             processes: int = 1) -> dict:
    from openai_fakes import Program

    from spear_datasets.audio import load_audio
    from spear_metrics.agents.harness import run_inference
    from spear_metrics.agents.openai_realtime import OpenAIRealtimeAgent

    at = clip_s + delay_s
    programs = {n: Program("reply", at_s=at, speech_end_s=clip_s) for n in names}
    answer = load_audio(REAL / "speechbrain__p225_002.wav", sr=24_000, channels="mix")[0][:24000]
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_fake_process, args=(child, programs, answer), daemon=True)
    proc.start()
    url = parent.recv()
    os.environ["OPENAI_API_KEY"] = KEY
    load_before = os.getloadavg()[0]
    try:
        t0 = time.perf_counter()
        cpu0, loop0, kids0 = time.process_time(), time.thread_time(), _children_cpu()
        info = run_inference("openai-realtime", str(csv_path), out, progress=False, concurrency=concurrency,
                             agent_options={"base_url": url, "max_wait_s": "10"}, processes=processes)
        wall = time.perf_counter() - t0
        # the session processes have ended (joined) by now; the fake's process is joined below
        cpu = time.process_time() - cpu0 + _children_cpu() - kids0
        loop_cpu = time.thread_time() - loop0  # one process: the loop runs on this thread
        procs = info.get("session_process_stats") or []
        startup_cpu = sum(p["startup_cpu_s"] or 0.0 for p in procs)  # spawning, importing, building the adapter
        if procs:
            loop_cpu = sum(p["loop_cpu_s"] or 0.0 for p in procs)
    finally:
        parent.send("stop")
        fake_info = parent.recv()
        proc.join(10)
    recs = [json.loads(x) for x in (out / ".work" / "rank-0.jsonl").read_text().splitlines()]
    ok = [r for r in recs if r.get("status") == "ok"]
    wall_err = np.array([(r["onset_wall_s"] - at) * 1000 for r in ok])
    stream_err = np.array([(r["onset_stream_s"] - at) * 1000 for r in ok])
    rt = np.array([r["response_time_s"] * 1000 for r in ok])
    lag = np.array([r["send_lag_max_s"] * 1000 for r in ok])
    lag_at = np.array([r["send_lag_max_at_s"] * 1000 for r in ok])

    tail_s = inspect.signature(OpenAIRealtimeAgent).parameters["tail_silence_s"].default
    session_s = len(names) * (clip_s + tail_s)

    def per_session_s(cpu_s: float) -> float:
        return 1000.0 * cpu_s / session_s

    def stats(v):
        return {"median_ms": float(np.median(v)), "p90_ms": float(np.percentile(v, 90)),
                "p99_ms": float(np.percentile(v, 99)), "max_ms": float(v.max()), "min_ms": float(v.min())} if v.size else None

    return {"rows": len(names), "answered": info["n_answered"], "failed": info["n_failed"], "concurrency": concurrency,
            "processes": info.get("session_processes", 1), "loop_lag_ms": info.get("loop_lag_ms"),
            "wall_s": wall, "rows_per_s": len(names) / wall, "onset_error_wall": stats(wall_err),
            "onset_error_stream": stats(stream_err), "response_time": stats(rt), "send_lag_max": stats(lag),
            "send_lag_max_at_stream_time": stats(lag_at),
            "fake_connections": sum(fake_info["connections"].values()), "client_cpu_s": cpu,
            "session_process_startup_cpu_s": startup_cpu,
            "client_loop_thread_cpu_s": loop_cpu, "fake_server_cpu_s": fake_info["cpu_s"],
            "session_seconds": session_s,
            "cpu_ms_per_session_s": {"client_process": per_session_s(cpu),
                                     "client_processes_without_startup": per_session_s(cpu - startup_cpu),
                                     "client_loop_thread": per_session_s(loop_cpu),
                                     "fake_server_process": per_session_s(fake_info["cpu_s"])},
            "load_average_1min_before": load_before, "load_average_1min_after": os.getloadavg()[0]}


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's ended and reaped children."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--clip-s", type=float, default=8.0)
    ap.add_argument("--delay-s", type=float, default=0.5, help="programmed reply delay after the clip's end (s, < 2.5)")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--processes", default="1", help="comma-separated session process counts, one run each (e.g. 1,2)")
    ap.add_argument("--serial-rows", type=int, default=3, help="rows run at --concurrency 1 (0: skip)")
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        warm = Path(tmp) / "warm-up"  # imports and first-use set-up, not counted below
        wcsv, wnames = build_rows(warm / "data", 1, 1.0)
        run_once(wcsv, wnames, warm / "out", 1, 1.0, args.delay_s)
        csv_path, names = build_rows(Path(tmp) / "data", args.rows, args.clip_s)
        res = {"clip_s": args.clip_s, "delay_s": args.delay_s}
        if args.serial_rows:
            sub = Path(tmp) / "serial"
            sub.mkdir()
            scsv, snames = build_rows(sub / "data", args.serial_rows, args.clip_s)
            r1 = run_once(scsv, snames, sub / "out", 1, args.clip_s, args.delay_s)
            r1["extrapolated_wall_s_for_all_rows"] = r1["wall_s"] / r1["rows"] * args.rows
            res["concurrency_1"] = r1
        for procs in [int(x) for x in args.processes.split(",") if x.strip()]:
            res[f"concurrency_{args.concurrency}_processes_{procs}"] = run_once(
                csv_path, names, Path(tmp) / f"out_p{procs}", args.concurrency, args.clip_s, args.delay_s, procs)
    print(json.dumps(res, indent=2))
    for k, r in res.items():
        if isinstance(r, dict) and "cpu_ms_per_session_s" in r:
            c = r["cpu_ms_per_session_s"]
            print(f"{k}: CPU per session-second: client process(es) {c['client_process']:.2f} ms "
                  f"({c['client_processes_without_startup']:.2f} ms without the session processes' start-up), "
                  f"event-loop thread(s) {c['client_loop_thread']:.2f} ms, fake server {c['fake_server_process']:.2f} ms "
                  f"({r['rows']} sessions, {r['session_seconds']:.0f} session-seconds)", file=sys.stderr)
            e = r["onset_error_wall"] or {}
            print(f"{k}: wall-clock onset error median {e.get('median_ms', float('nan')):+.1f} ms, p90 "
                  f"{e.get('p90_ms', float('nan')):+.1f}, p99 {e.get('p99_ms', float('nan')):+.1f}, max "
                  f"{e.get('max_ms', float('nan')):+.1f}; load {r['load_average_1min_before']:.2f} -> "
                  f"{r['load_average_1min_after']:.2f}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
