"""``spearbench infer --processes N`` and ``--provider-limit NAME=N``
(:mod:`spear_metrics.agents.processes`) against the loopback Realtime fake (tests/openai_fakes.py),
on SPEAR clips cut from a real recording.

The sessions run in worker processes while the parent stays the one writer of the output folder,
so two processes give the rows of one process (each row once, the same answers and failures), a
``kill -9`` of the parent mid-run leaves workers that end on their own and a folder that resumes
with nothing lost or duplicated, a worker killed mid-run stops the run with a line and its rows
resume, and a provider limit of 1 holds over both processes (the fake counts the sessions open
at once). Nothing here depends on how fast the machine is: the fake is clocked by the samples it
receives and every wait has a generous bound.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from conftest import REPO
from openai_fakes import Program, RealtimeFake
from test_adapters_openai import KEY, answer_24k, answer_records, name, sources, write_csv
from spear_metrics.agents.harness import InferError, run_inference
from spear_metrics.agents.processes import (
    SESSIONS_PER_PROCESS, AgentSpec, LoopLag, ProcessesError, ProviderSlots, auto_processes, parse_processes,
    parse_provider_limits, sessions_for,
)

OPTS = ["tail_silence_s=0.5", "vad_grace_s=0.2", "max_wait_s=60", "connect_timeout_s=60"]


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("SPEARBENCH_PROVIDER_SLOTS", str(tmp_path / "slots"))  # no other run's slots


def _rows(real_dir: Path, root: Path, n: int, refused: tuple[int, ...] = ()) -> tuple[Path, dict[str, Program]]:
    ami, end = sources(real_dir)["ami"]  # 2.48 s, FEE016's turn ending at its end
    progs = {name(k): Program("refuse") if k in refused else Program("reply", at_s=end + 0.2, speech_end_s=end)
             for k in range(n)}
    return write_csv(root, [(name(k), ami) for k in range(n)]), progs


def _opts(fake: RealtimeFake) -> dict[str, str]:
    return {"base_url": fake.url, **dict(o.split("=", 1) for o in OPTS)}


def _result_set(out: Path, port: int) -> set[tuple]:
    """The run's rows as (row, status, answer file, answer duration, text, reason): what must not
    depend on the processes (the fake's port, in a refusal's reason, made neutral)."""
    return {(r["row"], r["status"], r.get("answer_audio_path"), r.get("answer_duration"), r.get("text"),
             (r.get("error") or "").replace(str(port), "PORT")) for r in answer_records(out)}


# --------------------------------------------------------------------------- the rules


def test_processes_and_provider_limit_options():
    assert parse_processes("auto") == "auto" and parse_processes("3") == 3
    for bad in ("0", "-1", "two", ""):
        with pytest.raises(ProcessesError, match="--processes"):
            parse_processes(bad)
    assert parse_provider_limits(["openai-realtime=2", "gemini-live=1", "openai-realtime=4"]) == \
        {"openai-realtime": 4, "gemini-live": 1}
    for bad in ("openai-realtime", "=2", "x=0", "x=two"):
        with pytest.raises(ProcessesError, match="NAME=N"):
            parse_provider_limits([bad])
    # auto: ceil(concurrency / 32), at least 1, at most the CPUs
    assert SESSIONS_PER_PROCESS == 32
    assert [auto_processes(c, cpus=16) for c in (1, 32, 33, 64, 256, 1000)] == [1, 1, 2, 2, 8, 16]
    assert auto_processes(256, cpus=2) == 2


def test_sessions_for_starts_no_more_processes_than_sessions_or_rows():
    agent = object()
    kw = dict(name="openai-realtime", options={}, built_by_name=True)
    assert type(sessions_for(agent, processes=4, concurrency=1, n_rows=10, **kw)).__name__ == "LocalSessions"
    assert type(sessions_for(agent, processes=4, concurrency=8, n_rows=1, **kw)).__name__ == "LocalSessions"
    assert type(sessions_for(agent, processes="auto", concurrency=32, n_rows=100, **kw)).__name__ == "LocalSessions"
    pool = sessions_for(agent, processes=4, concurrency=3, n_rows=10, **kw)
    assert pool.processes == 3 and pool.grow_to == 3 and pool.spec.pickled is None  # rebuilt by name
    with pytest.raises(ProcessesError, match="not this run's adapter 'openai-realtime'"):
        sessions_for(agent, processes=1, concurrency=2, n_rows=2, provider_limits={"openai": 2}, **kw)
    # an adapter object the worker cannot rebuild by name must be picklable
    with pytest.raises(ProcessesError, match="cannot be sent"):
        sessions_for(lambda: None, processes=2, concurrency=2, n_rows=2, name="x", options={}, built_by_name=False)


def test_provider_slot_folder_refused_in_one_line_when_not_usable(tmp_path, monkeypatch):
    """The default slot folder lies in the shared temporary folder: one made by another user is
    refused (it could hold every slot), as is a folder that cannot be made; one line naming the
    variable that chooses another, never a traceback."""
    monkeypatch.delenv("SPEARBENCH_PROVIDER_SLOTS", raising=False)
    monkeypatch.setattr("tempfile.gettempdir", lambda: str(tmp_path))
    mine = ProviderSlots("openai-realtime", 2)  # made here, this user's: used
    assert sorted(p.name for p in (tmp_path / f"spearbench-{os.getuid()}" / "provider-slots").iterdir()) == []
    assert mine._folder == tmp_path / f"spearbench-{os.getuid()}" / "provider-slots" and mine._locks == {}  # made when tried
    real_uid = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: real_uid + 1)  # the same folders seen by another user
    (tmp_path / f"spearbench-{real_uid + 1}").mkdir()
    os.chown(tmp_path / f"spearbench-{real_uid + 1}", real_uid, -1)  # made first by user real_uid
    with pytest.raises(ProcessesError, match=r"not a folder of this user.*SPEARBENCH_PROVIDER_SLOTS"):
        ProviderSlots("openai-realtime", 2)
    monkeypatch.setattr(os, "getuid", lambda: real_uid)
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(ProcessesError, match=r"slot folder .*slots cannot be used"):
        ProviderSlots("openai-realtime", 2, tmp_path / "a-file" / "slots")
    assert ProviderSlots("openai-realtime", None, tmp_path / "a-file" / "slots")._folder is None  # no cap: no folder


def test_provider_slots_admit_one_holder_at_a_time(tmp_path):
    """Two holders of a 1-slot provider: the second enters only once the first has left (the
    order of events, not their timing)."""
    events: list[str] = []

    async def main():
        a, b = ProviderSlots("p", 1, tmp_path), ProviderSlots("p", 1, tmp_path)  # two runs' views of one slot
        entered_a = asyncio.Event()

        async def first():
            async with a:
                events.append("a in")
                entered_a.set()
                await asyncio.sleep(0.3)
                events.append("a out")

        async def second():
            await entered_a.wait()
            async with b:
                events.append("b in")

        await asyncio.gather(first(), second())

    asyncio.run(main())
    assert events == ["a in", "a out", "b in"]


def test_a_huge_provider_limit_costs_the_slots_used_not_the_limit(tmp_path):
    """``--provider-limit NAME=10**12`` is a valid (if loose) cap: holding slots makes locks for
    the slots tried only (it once built one lock object per slot up front: memory and time
    without bound), and a second holder takes the next slot while the first holds slot 0."""

    async def main():
        a, b = ProviderSlots("p", 10**12, tmp_path), ProviderSlots("p", 10**12, tmp_path)
        async with a:
            async with b:
                return sorted(p.name for p in tmp_path.iterdir())

    assert asyncio.run(main()) == ["p.0.lock", "p.1.lock"]


def test_a_slot_folder_that_cannot_be_made_is_a_one_line_refusal(tmp_path):
    """``$SPEARBENCH_PROVIDER_SLOTS`` naming a file: a ProcessesError that names the folder and the
    variable (it was a bare "[Errno 17] File exists: ..." line)."""
    (tmp_path / "file").write_text("x")
    with pytest.raises(ProcessesError, match=r"--provider-limit: the slot folder .*file cannot be used .*\$SPEARBENCH_PROVIDER_SLOTS"):
        ProviderSlots("p", 1, tmp_path / "file")


def test_auto_grows_one_process_at_a_time_when_a_loop_lags():
    """The ``auto`` rule: a lag report over the budget starts one more worker (never two at once,
    never past ``grow_to``); a report within the budget starts none."""
    from spear_metrics.agents.processes import AgentSpec, SessionPool

    async def main():
        pool = SessionPool(AgentSpec("openai-realtime"), 1, grow_to=3, lag_budget_ms=10.0)
        pool._loop = asyncio.get_running_loop()
        started = []
        release = asyncio.Event()

        async def fake_start():  # stands for spawning a worker; "ready" when released
            started.append(len(started))
            await release.wait()
            pool.workers.append(SimpleNamespace())

        pool._start = fake_start
        pool.workers = [SimpleNamespace()]
        pool._lag(pool.workers[0], 4.0)  # within the budget
        await asyncio.sleep(0)
        assert started == []
        pool._lag(pool.workers[0], 25.0)
        pool._lag(pool.workers[0], 30.0)  # while one is starting: no second
        await asyncio.sleep(0)
        assert started == [0]
        release.set()
        await pool._growing
        pool._lag(pool.workers[0], 25.0)
        await asyncio.sleep(0)
        await pool._growing
        assert started == [0, 1] and len(pool.workers) == 3
        pool._lag(pool.workers[0], 99.0)  # grow_to reached
        await asyncio.sleep(0)
        assert started == [0, 1]

    asyncio.run(main())


def test_a_session_process_that_does_not_answer_past_the_limit_is_killed_and_the_run_stops():
    """A worker whose event loop is blocked (an adapter's synchronous call) cannot end its session
    at the row's limit: the parent kills it once the limit and the grace have passed, and the row
    stops the run as a lost process (it resumes), instead of the run waiting for ever. The
    worker here takes the session and never answers; its "process" ends when killed."""
    import multiprocessing
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from spear_metrics.agents.processes import SessionPool, _Worker
    from spear_metrics.agents.rows import ProcessLost

    parent, child = multiprocessing.Pipe()

    class Blocked:
        pid, exitcode, killed = 4242, None, False

        def kill(self):
            self.killed, self.exitcode = True, -9
            child.close()  # the process is gone: its end of the pipe closes

        def join(self, timeout=None):
            pass

    async def main():
        pool = SessionPool(AgentSpec("openai-realtime"), 1)
        pool.UNRESPONSIVE_GRACE_S = 0.2
        pool._loop = asyncio.get_running_loop()
        w = _Worker(Blocked(), parent, ThreadPoolExecutor(max_workers=1))
        w.reader = threading.Thread(target=pool._reader, args=(w,), daemon=True)
        pool.workers.append(w)
        w.reader.start()
        with pytest.raises(ProcessLost) as e:
            await asyncio.wait_for(pool.run("a request", None, 0.1, tag=7), 120)  # without the kill: TimeoutError
        w.sender.shutdown(wait=False)
        return e.value, w

    lost, w = asyncio.run(main())
    parent.close()
    assert w.proc.killed and not w.alive and not w.inflight
    assert lost.tags == {7} and "did not answer past a session's time limit" in str(lost)


def test_loop_lag_percentiles_from_the_histogram():
    lag = LoopLag()
    for ms in [0.1] * 98 + [5.0, 40.0]:
        lag.add(ms)
    s = LoopLag.stats([lag.hist], [lag.max_ms])
    assert s["n"] == 100 and s["p50"] == LoopLag.BIN_MS and s["max"] == 40.0
    assert 5.0 <= s["p99"] <= 5.0 + LoopLag.BIN_MS  # the 99th of 100 values, to its bin's upper edge
    assert lag.window_p99() == s["p99"] and lag.window_p99() is None  # the window restarts


# --------------------------------------------------------------------------- runs


@pytest.mark.slow
def test_two_processes_give_the_rows_of_one(real_dir, tmp_path, env):
    csv_path, progs = _rows(real_dir, tmp_path / "data", 6, refused=(4,))
    fake = RealtimeFake(progs, answer_24k(real_dir)[:24000], KEY)
    try:
        one = run_inference("openai-realtime", str(csv_path), tmp_path / "one", agent_options=_opts(fake),
                            progress=False, concurrency=4)
        fake.connections.clear()
        two = run_inference("openai-realtime", str(csv_path), tmp_path / "two", agent_options=_opts(fake),
                            progress=False, concurrency=4, processes=2)
    finally:
        fake.close()
    assert (one["session_processes"], two["session_processes"]) == (1, 2)
    assert (two["n_answered"], two["n_failed"]) == (one["n_answered"], one["n_failed"]) == (5, 1)
    assert _result_set(tmp_path / "two", fake.port) == _result_set(tmp_path / "one", fake.port)
    rows = [r["row"] for r in answer_records(tmp_path / "two")]
    assert sorted(rows) == list(range(6))  # every row once
    assert dict(fake.connections) == {name(k): 1 for k in range(6)}  # one session per row, none twice
    stats = two["session_process_stats"]
    assert len(stats) == 2 and sum(p["sessions"] for p in stats) == 6 and all(p["sessions"] for p in stats)
    assert two["loop_lag_ms"]["n"] > 0 and one["loop_lag_ms"]["n"] > 0
    assert (tmp_path / "two" / "metadata.csv").read_text() .count("\n") == 7
    failures = [json.loads(x) for x in (tmp_path / "two" / "failures.jsonl").read_text().splitlines()]
    assert [f["row"] for f in failures] == [4] and "HTTP 403" in failures[0]["error"]
    assert KEY not in (tmp_path / "two" / "failures.jsonl").read_text()


@pytest.mark.slow
def test_provider_limit_holds_over_two_processes(real_dir, tmp_path, env):
    csv_path, progs = _rows(real_dir, tmp_path / "data", 4)
    fake = RealtimeFake(progs, answer_24k(real_dir)[:24000], KEY)
    try:
        limited = run_inference("openai-realtime", str(csv_path), tmp_path / "limited", agent_options=_opts(fake),
                                progress=False, concurrency=4, processes=2, provider_limits={"openai-realtime": 1})
        limited_max = fake.max_open
        fake.max_open = 0
        free = run_inference("openai-realtime", str(csv_path), tmp_path / "free", agent_options=_opts(fake),
                             progress=False, concurrency=4, processes=2)
    finally:
        fake.close()
    assert limited["n_answered"] == free["n_answered"] == 4
    assert limited["session_processes"] == free["session_processes"] == 2
    assert limited_max == 1
    # the control: without the limit, two sessions dispatched at once to one process (2 of 4 each)
    # overlap, each lasting its paced 2.5 s of input
    assert fake.max_open >= 2


def _cli(csv_path: Path, out: Path, fake: RealtimeFake, *extra: str) -> list[str]:
    cmd = [sys.executable, "-m", "spear_metrics.cli", "infer", "--agent", "openai-realtime", "--data", str(csv_path),
           "--out", str(out), "--no-progress", "--concurrency", "2", "--processes", "2", *extra]
    for o in [f"base_url={fake.url}", *OPTS]:
        cmd += ["-a", o]
    return cmd


def _wait(cond, what: str, limit_s: float = 120.0) -> None:
    t = time.monotonic()
    while not cond():
        if time.monotonic() - t > limit_s:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def _session_processes(parent: psutil.Process) -> list[psutil.Process]:
    """The session processes among ``parent``'s children (multiprocessing's resource tracker is not one)."""
    return [c for c in parent.children() if "spawn_main" in " ".join(c.cmdline())]


def _ok_rows(out: Path) -> list[int]:
    p = out / ".work" / "rank-0.jsonl"
    if not p.is_file():
        return []
    recs = [json.loads(x) for x in p.read_text().splitlines() if x.strip()]
    return [r["row"] for r in recs if r.get("status") == "ok"]


def kill_9_mid_run(proc: subprocess.Popen, ready, what: str) -> None:
    """Wait until ``ready()`` (the run of ``proc`` mid-way, ``what`` it waits for), ``kill -9`` the
    parent ``proc`` (which runs two session processes), then wait until those processes have
    ended: they see their pipe close (nothing else ends them)."""
    try:
        _wait(lambda: ready() or proc.poll() is not None, what)
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        workers = _session_processes(psutil.Process(proc.pid))
        assert len(workers) == 2
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    _wait(lambda: not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers),
          "the session processes to end")


@pytest.mark.slow
def test_kill_9_of_the_parent_then_resume_loses_and_duplicates_nothing(real_dir, tmp_path, env):
    n = 6
    csv_path, progs = _rows(real_dir, tmp_path / "data", n)
    fake = RealtimeFake(progs, answer_24k(real_dir)[:24000], KEY)
    out = tmp_path / "out"
    run_env = dict(os.environ, PYTHONPATH=str(REPO))
    try:
        proc = subprocess.Popen(_cli(csv_path, out, fake), env=run_env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        # a row answered and another in flight (open at the fake: it cannot have its record yet)
        kill_9_mid_run(proc, lambda: _ok_rows(out) and fake.open_now >= 1, "a row in flight")
        _wait(lambda: fake.open_now == 0, "the fake's sessions to close")
        first = sorted(_ok_rows(out))
        assert 1 <= len(first) < n
        again = subprocess.run(_cli(csv_path, out, fake), env=run_env, capture_output=True, text=True, timeout=600)
    finally:
        fake.close()
    assert again.returncode == 0, again.stderr[-3000:]
    done = _ok_rows(out)
    assert sorted(done) == list(range(n)) and len(done) == n  # nothing lost, nothing answered twice
    for k in first:  # what the killed run had answered was not asked again
        assert fake.connections[name(k)] == 1
    info = json.loads((out / "run_info.json").read_text())
    assert (info["n_answered"], info["n_failed"], info["rows_resumed"]) == (n, 0, len(first))
    for line in (out / "metadata.csv").read_text().splitlines()[1:]:
        assert "audio/" in line  # every row has its answer


@pytest.mark.slow
def test_a_killed_session_process_stops_the_run_and_its_rows_resume(real_dir, tmp_path, env):
    """kill -9 of one worker: the run stops with one line; the killed worker's row keeps its open
    start (it counts as a process end), every other row in flight is logged ``stopped`` (it does
    not) or finished; the rerun answers every row once."""
    n = 4
    csv_path, progs = _rows(real_dir, tmp_path / "data", n)
    fake = RealtimeFake(progs, answer_24k(real_dir)[:24000], KEY)
    out = tmp_path / "out"
    killed: list[int] = []

    def kill_a_worker():  # once both processes have a session open (2 at once, one each)
        _wait(lambda: fake.open_now >= 2, "two sessions in flight")
        w = _session_processes(psutil.Process())
        killed.append(w[0].pid)
        os.kill(w[0].pid, signal.SIGKILL)

    import threading

    killer = threading.Thread(target=kill_a_worker, daemon=True)
    try:
        killer.start()
        with pytest.raises(InferError, match=r"a session process \(pid \d+\) ended .* rerun to resume"):
            run_inference("openai-realtime", str(csv_path), out, agent_options=_opts(fake), progress=False,
                          concurrency=2, processes=2)
        killer.join(10)
        assert len(killed) == 1
        recs = [json.loads(x) for x in (out / ".work" / "rank-0.jsonl").read_text().splitlines()]
        started = [r["row"] for r in recs if r["status"] == "started"]
        closed = {r["row"] for r in recs if r["status"] in ("ok", "failed", "stopped")}
        assert len(set(started) - closed) == 1  # only the killed process's row is left open
        assert len([r for r in recs if r["status"] == "stopped"]) <= 1
        info = run_inference("openai-realtime", str(csv_path), out, agent_options=_opts(fake), progress=False,
                             concurrency=2, processes=2)
    finally:
        fake.close()
    assert info["n_answered"] == n and info["n_failed"] == 0
    assert sorted(_ok_rows(out)) == list(range(n))


# --------------------------------------------------------------------------- the other infer commands


def _fdb_stimuli(fdb_dir: Path, root: Path) -> None:
    """Two bare FDB stimuli (FDB's own examples without their model's replies)."""
    ex = fdb_dir / "example_data"
    for task, src, task_file in (("pause_handling", "pause_handling_example", "pause.json"),
                                 ("smooth_turn_taking", "smooth_turn_taking_example", "turn_taking.json")):
        (root / task / "1").mkdir(parents=True)
        for f in ("input.wav", task_file):
            (root / task / "1" / f).write_bytes((ex / src / "1" / f).read_bytes())


@pytest.mark.slow
def test_fdb_infer_with_two_processes_writes_the_replies_of_one(fdb_dir, real_dir, tmp_path, env):
    from spear_datasets.audio import decode
    from spear_metrics.cli import main

    for name_ in ("one", "two"):
        _fdb_stimuli(fdb_dir, tmp_path / name_)
    progs = {"pause_handling_1": Program("reply", at_s=1.0, speech_end_s=0.5),
             "smooth_turn_taking_1": Program("refuse")}
    fake = RealtimeFake(progs, answer_24k(real_dir)[:12000], KEY)
    try:
        runs = {}
        for name_, extra in (("one", []), ("two", ["--processes", "2", "--provider-limit", "openai-realtime=2"])):
            status = main(["fdb", "infer", "--agent", "openai-realtime", "--root", str(tmp_path / name_), "--concurrency",
                           "2", "--no-asr", "--no-progress", "-a", f"base_url={fake.url}", *extra])
            runs[name_] = status
    finally:
        fake.close()
    assert runs == {"one": 0, "two": 0}
    for task, status in (("pause_handling", "ok"), ("smooth_turn_taking", "failed")):
        recs = {n: [r for r in (json.loads(x) for x in (tmp_path / n / task / ".spearbench-fdb-infer" / "rank-0.jsonl")
                                .read_text().splitlines()) if r["status"] in ("ok", "failed")] for n in ("one", "two")}
        assert [r["status"] for r in recs["one"]] == [r["status"] for r in recs["two"]] == [status]
        if status == "ok":  # the time-synchronous reply channel: as long as the input, in both
            lengths = {n: decode(tmp_path / n / task / "1" / "output.wav")[0].shape[1] for n in ("one", "two")}
            assert lengths["one"] == lengths["two"] == decode(tmp_path / "one" / task / "1" / "input.wav")[0].shape[1]
        else:
            assert "HTTP 403" in recs["two"][0]["error"]
    assert dict(fake.connections) == {"pause_handling_1": 2, "smooth_turn_taking_1": 2}  # once per run
    info = json.loads((tmp_path / "two" / "pause_handling" / ".spearbench-fdb-infer" / "run_info.json").read_text())
    assert info["session_processes"] == 2


@pytest.mark.slow
def test_speechrole_infer_with_two_processes_writes_the_dialogues_of_one(real_dir, tmp_path, env):
    from openai_fakes import ChatFake
    from speechrole_fixtures import make_eval_root
    from spear_datasets.audio import load_audio
    from spear_metrics.cli import main

    eval_root = make_eval_root(tmp_path, real_dir)
    answer = load_audio(real_dir / "speechbrain__p226_002.wav", sr=24_000, channels="mix")[0]
    fake = ChatFake({"Thor_single_0_0": Program("badkey")}, answer, 24_000, KEY, transcript="onions have layers")
    outs = {n: tmp_path / "model_output" / n for n in ("one", "two")}
    try:
        for n, extra in (("one", []), ("two", ["--processes", "2"])):
            assert main(["speechrole", "infer", "--agent", "openai-audio", "--test-data", str(eval_root), "--mode", "all",
                         "--out", str(outs[n]), "--no-progress", "--concurrency", "3", "-a", f"base_url={fake.url}",
                         "-a", "model=gpt-audio-test", "-a", "max_tries=1", *extra]) == 0
    finally:
        fake.close()
    for mode in ("single", "multi"):
        files = {n: sorted(p.relative_to(outs[n]).as_posix() for p in (outs[n] / f"{mode}_result").rglob("*")
                           if p.is_file()) for n in outs}
        assert files["one"] == files["two"] and files["one"]
        for rel in files["one"]:
            if "/json/" in rel or rel.endswith("failures.jsonl"):  # the dialogues' texts and paths, the failures
                assert (outs["one"] / rel).read_text() == (outs["two"] / rel).read_text().replace("/two/", "/one/")
        info = json.loads((outs["two"] / f"{mode}_result" / "run_info.json").read_text())
        assert info["session_processes"] == (2 if mode == "single" else 1)  # multi: one dialogue, one process
    assert set(fake.calls.values()) == {2}  # every turn asked once per run


def test_process_options_on_an_in_process_adapter_are_said_to_do_nothing(capsys, monkeypatch):
    """--processes / --provider-limit given for an adapter that is not a network adapter (it runs
    in this process) are named in one stderr line; for a network adapter, or when not given,
    nothing is said."""
    from spear_metrics.agents.processes import unused_options_note
    from spear_metrics.agents.registry import load_agent

    fixed = load_agent("fixed-text")
    unused_options_note(fixed, "fixed-text", 2, {"fixed-text": 1})
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--processes and --provider-limit act on network adapters only" in err
    unused_options_note(fixed, "fixed-text", 1, None)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key-0000")
    unused_options_note(load_agent("openai-realtime"), "openai-realtime", 2, None)
    assert capsys.readouterr().err == ""


def test_a_wait_behind_other_runs_slots_is_said(tmp_path, monkeypatch, capsys):
    """Every slot held by another run: the waiting run says so on stderr (it is queued, and its
    rows' time limits have not started), once per WAIT_NOTE_S; a run that waits behind its own
    sessions says nothing. Ordered by events: the holder leaves only after the line was printed."""
    monkeypatch.setattr(ProviderSlots, "WAIT_NOTE_S", 0.0)

    async def main():
        other, mine = ProviderSlots("p", 1, tmp_path), ProviderSlots("p", 1, tmp_path)
        held = asyncio.Event()

        async def other_run():
            async with other:
                held.set()
                while mine.notes == 0:  # until the waiting run has said it waits
                    await asyncio.sleep(0.01)

        async def my_run():
            await held.wait()
            async with mine:
                pass

        await asyncio.gather(other_run(), my_run())
        return other.notes, mine.notes

    other_notes, my_notes = asyncio.run(main())
    err = capsys.readouterr().err
    assert other_notes == 0 and my_notes >= 1
    assert "for a --provider-limit slot of p: all 1 are held by other runs" in err
