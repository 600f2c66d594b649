"""``--processes``, ``--provider-limit`` and ``--shard`` of ``dsuperb infer``, ``fdb infer``
(v1.0/v1.5 and ``--version 2``) and ``speechrole infer`` (docs/multiprocess.md), on loopback
servers and real recordings.

Two session processes give the rows of one (keyed by row: same answers, same failures, every row
asked once); a ``kill -9`` of the parent mid-run, then the same command, loses and duplicates
nothing; shards ``0/2`` and ``1/2`` run every unit exactly once and the run without ``--shard``
merges them into the files of a one-process run; a ``--provider-limit`` naming another adapter
(a misspelt name) is refused in one line, exit 2. No assertion depends on the machine's speed:
servers answer from what they are sent, and every wait has a generous bound.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import REPO
from dsuperb_fixtures import CLS, REG, build_instances
from helpers import FakeChatServer
from test_infer_processes import kill_9_mid_run
from spear_metrics.cli import main
from spear_metrics.dynamic_superb.infer import WORK, DSuperbInferError, run_dsuperb_inference

HOLD = "Which speaker sexes are heard in this meeting? List them."  # CLS row 4's instruction


@pytest.fixture(scope="module")
def data(tmp_path_factory, real_dir):
    return build_instances(real_dir, tmp_path_factory.mktemp("scaleout") / "data")


@pytest.fixture
def slots(monkeypatch, tmp_path):
    monkeypatch.setenv("SPEARBENCH_PROVIDER_SLOTS", str(tmp_path / "slots"))  # no other run's slots


def _by_input(body: dict) -> tuple[int, str]:
    """The fake's answer: a text that depends only on what the row sent (its instruction and
    audio), so two runs must give each row the same answer; REG's rows are refused (HTTP 400)."""
    parts = body["messages"][-1]["content"]
    if parts[0]["text"].startswith("Rate the fluency"):
        return 400, "refused by the test server"
    return 200, "heard " + hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]


def _opts(url: str) -> dict[str, str]:
    return {"base_url": url, "model": "omni", "api_key_env": "none", "system_prompt": "none", "max_tries": "1"}


def _cli_opts(url: str) -> list[str]:
    return [x for k, v in _opts(url).items() for x in ("-a", f"{k}={v}")]


def _log(out: Path, instance: str) -> list[dict]:
    return [json.loads(x) for p in sorted((out / WORK / instance).glob("rank-*.jsonl"))
            for x in p.read_text().splitlines() if x.strip()]


def _finished(out: Path, instance: str) -> list[int]:
    """The rows with an ok or failed record, each as often as it has one."""
    return [r["row"] for r in _log(out, instance) if r.get("status") in ("ok", "failed")]


# --------------------------------------------------------------------------- dsuperb infer --processes


@pytest.mark.slow
def test_dsuperb_two_processes_give_the_rows_of_one(data, tmp_path, slots):
    with FakeChatServer(_by_input) as srv:
        runs = {n: run_dsuperb_inference("openai-audio", [CLS, REG], tmp_path / n, data_root=data, progress=False,
                                         agent_options=_opts(srv.url), concurrency=4, processes=p,
                                         provider_limits={"openai-audio": 3})
                for n, p in (("one", 1), ("two", 2))}
        asked = [_header(h) for h in srv.headers]
    for inst in (CLS, REG):
        one, two = runs["one"]["instances"][inst], runs["two"]["instances"][inst]
        assert (one["session_processes"], two["session_processes"]) == (1, 2)
        assert sum(p["sessions"] for p in two["session_process_stats"]) == 5
        # the same rows, keyed by row: answers (CLS: 5 answered) and failures (REG: 5 refused)
        for name in (f"{inst}.json", f"{WORK}/{inst}/failures.jsonl"):
            assert (tmp_path / "one" / name).read_text() == (tmp_path / "two" / name).read_text()
        assert sorted(_finished(tmp_path / "two", inst)) == list(range(5))
    assert (runs["two"]["n_answered"], runs["two"]["n_failed"]) == (runs["one"]["n_answered"], runs["one"]["n_failed"]) \
        == (5, 5)
    assert len(asked) == 20 and len(set(asked)) == 10  # every row asked once per run


def _header(headers: dict) -> str:
    return next(v for k, v in headers.items() if k.lower() == "x-client-request-id")


@pytest.mark.slow
def test_dsuperb_kill_9_of_the_parent_then_resume_loses_and_duplicates_nothing(data, tmp_path, slots):
    """CLS row 4's request is held by the server: the parent is killed while its four other rows
    are logged and row 4 is in flight in a session process; the rerun asks row 4 only."""
    release, held = threading.Event(), threading.Event()

    def reply(body):
        if body["messages"][-1]["content"][0]["text"] == HOLD and not release.is_set():
            held.set()
            release.wait(120)
            return 500, "the run was killed"
        return _by_input(body)

    out = tmp_path / "pred"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with FakeChatServer(reply) as srv:
        cmd = [sys.executable, "-m", "spear_metrics.cli", "dsuperb", "infer", "--agent", "openai-audio", "--tasks", CLS,
               "--data", str(data), "--out", str(out), "--no-progress", "--concurrency", "2", "--processes", "2",
               *_cli_opts(srv.url)]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            kill_9_mid_run(proc, lambda: held.is_set() and len(_finished(out, CLS)) == 4,
                           "four rows logged and row 4 in flight")
        finally:
            release.set()
        first = sorted(_finished(out, CLS))
        assert first == [0, 1, 2, 3] and not (out / f"{CLS}.json").exists()
        again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        asked = [_header(h) for h in srv.headers]
    assert again.returncode == 0, again.stderr[-3000:]
    assert sorted(_finished(out, CLS)) == [0, 1, 2, 3, 4]  # nothing lost, nothing logged twice
    assert len(json.loads((out / f"{CLS}.json").read_text())) == 5
    assert len(asked) == 6 and sorted(set(asked)) == sorted(asked[:5])  # only the held row asked again
    assert asked.count(f"{CLS}/ami_dialogue") == 2


# --------------------------------------------------------------------------- shards


def test_shard_partition_is_by_unit_id():
    from spear_metrics.core.records import in_shard, parse_shard

    assert parse_shard("1/2") == (1, 2)
    for bad in ("2/2", "-1/2", "1", "a/b", "0/0"):
        with pytest.raises(ValueError, match="--shard takes K/N"):
            parse_shard(bad)
    assert [i for i in range(7) if in_shard(i, (1, 3))] == [1, 4]  # a row id: id % N
    keys = [f"pause_handling/{i}" for i in range(50)] + [f"Thor_single_{i}" for i in range(50)]
    for n in (2, 3):
        owners = [[k for k in range(n) if in_shard(key, (k, n))] for key in keys]
        assert all(len(o) == 1 for o in owners)  # every unit in exactly one shard
    assert in_shard("pause_handling/1", None)


def test_dsuperb_shards_run_every_row_once_and_merge_into_the_one_process_files(data, tmp_path):
    from test_dsuperb import Scripted

    run_dsuperb_inference("scripted", [CLS, REG], tmp_path / "one", agent=Scripted(), data_root=data, progress=False)
    out = tmp_path / "sharded"
    agents = [Scripted(), Scripted()]
    for k in (0, 1):
        info = run_dsuperb_inference("scripted", [CLS, REG], out, agent=agents[k], data_root=data, progress=False,
                                     shard=(k, 2))
        assert info["shard"] == f"{k}/2" and info["n_rows"] == (6 if k == 0 else 4)  # rows 0,2,4 / 1,3 of each
        assert info["rows_left"] == (4 if k == 0 else 0)
        assert not (out / f"{CLS}.json").exists()  # a shard writes no prediction file
    for inst in (CLS, REG):
        assert sorted(_finished(out, inst)) == list(range(5))  # every row once over the two shards
        for k in (0, 1):
            rows = [json.loads(x)["row"] for x in (out / WORK / inst / f"rank-{k}.jsonl").read_text().splitlines()
                    if json.loads(x)["status"] != "started"]
            assert rows and all(r % 2 == k for r in rows)
    asked = [r.row_id for a in agents for r in a.requests]
    assert len(asked) == len(set(asked)) == 10
    merger = Scripted()
    merged = run_dsuperb_inference("scripted", [CLS, REG], out, agent=merger, data_root=data, progress=False)
    assert merger.requests == [] and merged["n_answered"] == 10  # the merge runs nothing: every row has its record
    for inst in (CLS, REG):
        assert (out / f"{inst}.json").read_text() == (tmp_path / "one" / f"{inst}.json").read_text()
    with pytest.raises(DSuperbInferError, match="--shard does not take --overwrite"):
        run_dsuperb_inference("scripted", [CLS], out, agent=Scripted(), data_root=data, progress=False, shard=(0, 2),
                              overwrite=True)


# --------------------------------------------------------------------------- refusals


def test_a_misspelt_provider_limit_is_refused_in_one_line(data, tmp_path, capsys):
    code = main(["dsuperb", "infer", "--agent", "fixed-text", "-a", "text=x", "--tasks", CLS, "--data", str(data),
                 "--out", str(tmp_path / "pred"), "--no-progress", "--provider-limit", "fixed-txt=2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "--provider-limit names fixed-txt, not this run's adapter 'fixed-text'" in err[0]
    assert not (tmp_path / "pred").exists()  # refused before anything was written


def test_speechrole_shards_run_every_dialogue_once_and_merge_into_the_one_process_files(tmp_path, real_dir):
    from speechrole_fixtures import make_eval_root
    from test_speechrole_infer import CountingAgent
    from spear_metrics.core.records import in_shard
    from spear_metrics.speechrole.infer import run_speechrole_inference

    eval_root = make_eval_root(tmp_path, real_dir)
    one, out = tmp_path / "a" / "model_output" / "sys", tmp_path / "b" / "model_output" / "sys"
    for mode in ("single", "multi"):
        run_speechrole_inference("counting", eval_root, mode, one, agent=CountingAgent(), progress=False)
        agents = [CountingAgent(), CountingAgent()]
        for k in (0, 1):
            info = run_speechrole_inference("counting", eval_root, mode, out, agent=agents[k], progress=False,
                                            shard=(k, 2))
            assert info["shard"] == f"{k}/2" and info["n_failed"] == 0
            # the agent sees <role>_<mode>_<d>; the dialogue's id (its unit) is <mode>/<role>/<d>
            assert all(in_shard("{1}/{0}/{2}".format(*key.split("_")), (k, 2)) for key, *_ in agents[k].calls)
            assert not (out / f"{mode}_result" / "json").exists()  # a shard writes no role file
        keys = [key for a in agents for key, turn, *_ in a.calls if turn == 0]
        assert len(keys) == len(set(keys)) == (3 if mode == "single" else 1)  # every dialogue once
        assert info["dialogues_left"] == 0
        merger = CountingAgent()
        merged = run_speechrole_inference("counting", eval_root, mode, out, agent=merger, progress=False)
        assert merger.calls == [] and merged["n_answered"] == len(keys)
        for rel in sorted(p.relative_to(one).as_posix() for p in (one / f"{mode}_result").rglob("*")
                          if p.is_file() and p.name != "run_info.json"):
            assert (out / rel).read_bytes() == (one / rel).read_bytes(), rel


@pytest.mark.slow
def test_fdb_shards_run_every_sample_once_and_the_merge_writes_the_task_files(fdb_dir, real_dir, tmp_path, slots,
                                                                               monkeypatch, capsys):
    from openai_fakes import Program, RealtimeFake
    from test_adapters_openai import KEY, answer_24k

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    ex = fdb_dir / "example_data"
    root = tmp_path / "fdb"
    samples = []
    for task, src, task_file in (("pause_handling", "pause_handling_example", "pause.json"),
                                 ("smooth_turn_taking", "smooth_turn_taking_example", "turn_taking.json")):
        for sid in ("1", "2", "3"):
            (root / task / sid).mkdir(parents=True)
            for f in ("input.wav", task_file):
                (root / task / sid / f).write_bytes((ex / src / "1" / f).read_bytes())
            samples.append(f"{task}/{sid}")
    progs = {s.replace("/", "_"): Program("reply", at_s=1.0, speech_end_s=0.5) for s in samples}
    fake = RealtimeFake(progs, answer_24k(real_dir)[:12000], KEY)
    base = ["fdb", "infer", "--agent", "openai-realtime", "--root", str(root), "--concurrency", "2", "--no-asr",
            "--no-progress", "-a", f"base_url={fake.url}"]
    try:
        codes = [main([*base, "--shard", f"{k}/2"]) for k in (0, 1)]
        by_shard = {k: sorted(f"{t}/{json.loads(x)['sample']}" for t in ("pause_handling", "smooth_turn_taking")
                              if (root / t / ".spearbench-fdb-infer" / f"rank-{k}.jsonl").is_file()
                              for x in (root / t / ".spearbench-fdb-infer" / f"rank-{k}.jsonl").read_text().splitlines()
                              if json.loads(x)["status"] == "ok") for k in (0, 1)}
        assert not (root / "pause_handling" / ".spearbench-fdb-infer" / "run_info.json").exists()
        assert main(base) == 0  # the merge: nothing left to run, the task folders' files written
    finally:
        fake.close()
    assert codes == [0, 0]
    assert sorted(by_shard[0] + by_shard[1]) == sorted(samples)  # every sample in exactly one shard
    assert dict(fake.connections) == {s.replace("/", "_"): 1 for s in samples}  # each asked once, the merge none
    for t in ("pause_handling", "smooth_turn_taking"):
        info = json.loads((root / t / ".spearbench-fdb-infer" / "run_info.json").read_text())
        assert (info["n_samples"], info["n_done"], info["n_written"], info["n_failed"]) == (6, 6, 0, 0)
        assert (root / t / ".spearbench-fdb-infer" / "failures.jsonl").read_text() == ""
        for sid in ("1", "2", "3"):
            assert (root / t / sid / "output.wav").is_file()
    assert "shard 1/2:" in capsys.readouterr().out


# --------------------------------------------------------------------------- fdb infer --version 2


def _v2_cmd(tasks_file: Path, url: str, out: Path, *extra: str) -> list[str]:
    return ["fdb", "infer", "--version", "2", "--tasks", str(tasks_file), "--agent", "openai-realtime",
            "-a", f"base_url={url}", "-a", "api_key_env=FDB2_KEY", "-e", f"base_url={url}", "-e", "api_key_env=FDB2_KEY",
            "--out", str(out), "--max-duration-s", "3", *extra]


@pytest.fixture
def v2_tasks(tmp_path, monkeypatch):
    from test_fdb_v2 import KEY, TASKS

    monkeypatch.setenv("FDB2_KEY", KEY)
    p = tmp_path / "tasks.json"
    p.write_text(json.dumps(TASKS))  # two conversations and one unreadable entry ("../escape")
    return p


def test_fdb_v2_refuses_a_cap_that_can_cap_nothing_or_never_be_met(v2_tasks, tmp_path, capsys):
    for extra, said in ((["--provider-limit", "openai-realtim=2"], "--provider-limit names openai-realtim, not this "
                                                                   "run's adapter 'openai-realtime'"),
                        (["--provider-limit", "openai-realtime=1"], "a conversation holds two sessions of openai-realtime")):
        assert main(_v2_cmd(v2_tasks, "ws://127.0.0.1:9/v1", tmp_path / "out", *extra)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0], err
    assert not (tmp_path / "out").exists()  # refused before anything was written


@pytest.mark.slow
def test_fdb_v2_provider_limit_counts_the_examiner_and_the_examinee(v2_tasks, tmp_path, slots):
    """Both sides are openai-realtime: a cap of 2 lets one conversation (two sessions) run at a
    time although --concurrency is 2; without it the two conversations overlap (4 sessions)."""
    from openai_fakes import Program, RealtimeFake
    from test_fdb_v2 import KEY

    speech, ids = _speech_24k(), V2_IDS
    fake = RealtimeFake({f"{t}.{s}": Program("converse", replies=6) for t in ids for s in "AB"}, speech, KEY)
    try:
        assert main(_v2_cmd(v2_tasks, fake.url, tmp_path / "capped", "--concurrency", "2",
                            "--provider-limit", "openai-realtime=2")) == 0
        capped = fake.max_open
        fake.max_open = 0
        assert main(_v2_cmd(v2_tasks, fake.url, tmp_path / "free", "--concurrency", "2")) == 0
    finally:
        fake.close()
    assert capped == 2 and fake.max_open == 4


@pytest.mark.slow
def test_fdb_v2_shards_run_every_conversation_once_and_the_merge_logs_them_all(v2_tasks, tmp_path, capsys):
    from openai_fakes import Program, RealtimeFake
    from test_fdb_v2 import KEY

    speech, ids = _speech_24k(), V2_IDS
    fake = RealtimeFake({f"{t}.{s}": Program("converse", replies=6) for t in ids for s in "AB"}, speech, KEY)
    out = tmp_path / "out"
    try:
        codes = [main(_v2_cmd(v2_tasks, fake.url, out, "--shard", f"{k}/2")) for k in (0, 1)]
        logs = {k: [r["task_id"] for r in map(json.loads, (out / ".work" / f"rank-{k}.jsonl").read_text().splitlines())
                    if r["status"] in ("ok", "failed")]  # beside each conversation's started record
                for k in (0, 1) if (out / ".work" / f"rank-{k}.jsonl").is_file()}
        assert not (out / "conversations.jsonl").exists()
        assert main(_v2_cmd(v2_tasks, fake.url, out)) == 0  # the merge: nothing left to run
    finally:
        fake.close()
    assert codes == [0, 0]
    units = [t for k in logs for t in logs[k]]
    assert sorted(units) == sorted([*ids, "Correction[1]"])  # every unit (the unreadable entry too) in one shard, once
    assert dict(fake.connections) == {f"{t}.{s}": 1 for t in ids for s in "AB"}  # each conversation once
    merged = [json.loads(x) for x in (out / "conversations.jsonl").read_text().splitlines()]
    assert sorted(r["task_id"] for r in merged) == sorted(units)  # the shards' records, copied once
    # a copy ends no start a second time (the shard's own record did): a later start still counts
    assert all(r["ends_starts"] == 0 for r in merged)
    for t in ids:
        assert (out / t / "manifest.json").is_file()


def test_a_limit_naming_either_adapter_of_two_is_taken():
    from spear_metrics.agents.processes import ProcessesError, check_provider_limits

    check_provider_limits(["openai-realtime", "moshi"], {"moshi": 1})  # the examinee's cap alone: taken
    with pytest.raises(ProcessesError, match="not this run's adapters 'openai-realtime' and 'moshi'"):
        check_provider_limits(["openai-realtime", "moshi"], {"mosh": 1})


def _speech_24k():
    from spear_datasets.audio import load_audio

    return load_audio(REPO / "tests" / "fixtures" / "real" / "speechbrain__p225_002.wav",
                      sr=24_000, channels="mix")[0][24_000: 72_000]


V2_IDS = ("Daily.ordering.901", "Correction.fix.902")


def _v2_log(out: Path) -> list[dict]:
    p = out / "conversations.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.is_file() else []


@pytest.mark.slow
def test_fdb_v2_two_processes_give_the_conversations_of_one(v2_tasks, tmp_path, slots, capsys):
    """Each conversation runs whole in one of two session processes; the parent writes the same
    units (status, end reason, capped duration, the unreadable entry failed) and folders."""
    from openai_fakes import Program, RealtimeFake
    from test_fdb_v2 import KEY

    fake = RealtimeFake({f"{t}.{s}": Program("converse", replies=6) for t in V2_IDS for s in "AB"}, _speech_24k(), KEY)
    try:
        for name, n in (("one", "1"), ("two", "2")):
            assert main(_v2_cmd(v2_tasks, fake.url, tmp_path / name, "--concurrency", "2", "--processes", n)) == 0
            printed = capsys.readouterr().out
            counts = json.loads(next(x for x in printed.splitlines() if x.startswith("counts: "))[len("counts: "):])
            assert "next: transcribe and judge" in printed and " fdb score --version 2 --tasks " in printed
            assert counts["session_processes"] == int(n) and counts["ok"] == 2
            if n == "2":
                assert sorted(p["sessions"] for p in counts["session_process_stats"]) == [1, 1]
    finally:
        fake.close()

    def units(out: Path) -> dict:
        return {r["task_id"]: (r["status"], r.get("end_reason"), r.get("duration_s"), r.get("reason")) for r in _v2_log(out)}

    assert units(tmp_path / "two") == units(tmp_path / "one")
    assert sorted(units(tmp_path / "one")) == sorted([*V2_IDS, "Correction[1]"])
    assert units(tmp_path / "one")["Daily.ordering.901"][:3] == ("ok", "max_duration", 3.0)
    assert dict(fake.connections) == {f"{t}.{s}": 2 for t in V2_IDS for s in "AB"}  # once per run
    for t in V2_IDS:
        for f in ("A.wav", "B.wav", "combined.wav", "manifest.json"):
            assert (tmp_path / "two" / t / f).is_file()


@pytest.mark.slow
def test_fdb_v2_kill_9_of_the_parent_with_two_processes_then_resume(v2_tasks, tmp_path, slots):
    """Both conversations in flight, one in each session process: kill -9 of the parent ends
    both processes; the rerun runs them again and logs each unit once."""
    from openai_fakes import Program, RealtimeFake
    from test_fdb_v2 import KEY

    fake = RealtimeFake({f"{t}.{s}": Program("converse", replies=6) for t in V2_IDS for s in "AB"}, _speech_24k(), KEY)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "spear_metrics.cli", *_v2_cmd(v2_tasks, fake.url, out, "--concurrency", "2",
                                                              "--processes", "2")]
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        kill_9_mid_run(proc, lambda: fake.open_now >= 4, "both conversations in flight")
        assert [r["task_id"] for r in _v2_log(out)] == ["Correction[1]"]  # the unreadable entry only
        again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    finally:
        fake.close()
    assert again.returncode == 0, again.stderr[-3000:]
    log = _v2_log(out)
    assert sorted(r["task_id"] for r in log) == sorted([*V2_IDS, "Correction[1]"])  # each unit once
    assert all(r["status"] == "ok" for r in log if r["task_id"] in V2_IDS)
    assert dict(fake.connections) == {f"{t}.{s}": 2 for t in V2_IDS for s in "AB"}  # killed once, run once more


#: an examiner whose conversation ends its process: SIGKILL (no exception, no cleanup, as a segfault
#: or an OOM kill) as it connects for Daily.ordering.901, unless FDB2_FIXED is set
EXITING_EXAMINER = '''
import os
import signal

from spear_metrics.full_duplex_v2.engine import ExaminerRealtimeAgent


class ExitingExaminer(ExaminerRealtimeAgent):
    async def connect(self, request, sink, config):
        if request.row_id == "Daily.ordering.901.A" and not os.environ.get("FDB2_FIXED"):
            os.kill(os.getpid(), signal.SIGKILL)
        return await super().connect(request, sink, config)
'''

ENDED_TWICE = "the process ended during this row twice (os._exit, a crash or a kill); --retry-failed runs it again"


@pytest.mark.slow
@pytest.mark.parametrize("processes", ["1", "2"])
def test_fdb_v2_a_conversation_that_ends_the_process_is_failed_on_the_second_rerun(v2_tasks, tmp_path, slots,
                                                                                    processes):
    """The rule of every inference loop (rows.ProcessEnds): Daily's examiner kills its process (the
    ``fdb infer`` process itself with one process, its session process with two); each of the first
    two runs ends there (counted from its ``started`` record), the third logs it failed with the
    reason and runs the other conversation, the fourth runs nothing, ``--retry-failed`` runs it
    again. The conversation in flight beside it in another session process is logged ``stopped``:
    it never counts, so it is never failed."""
    from openai_fakes import Program, RealtimeFake
    from spear_metrics.full_duplex_v2.engine import process_ends
    from test_fdb_v2 import KEY

    exits = tmp_path / "exits.py"
    exits.write_text(EXITING_EXAMINER)
    fake = RealtimeFake({f"{t}.{s}": Program("converse", replies=6) for t in V2_IDS for s in "AB"}, _speech_24k(), KEY)
    out = tmp_path / "out"
    daily, corr = V2_IDS

    def run(*extra: str, **env: str) -> subprocess.CompletedProcess:
        cmd = _v2_cmd(v2_tasks, fake.url, out, "--examiner", f"{exits}:ExitingExaminer", "--concurrency", processes,
                      "--processes", processes, *extra)
        return subprocess.run([sys.executable, "-m", "spear_metrics.cli", *cmd], capture_output=True, text=True,
                              timeout=300, env=dict(os.environ, PYTHONPATH=str(REPO), **env))

    try:
        for n in (1, 2):
            r = run()
            if processes == "1":  # the fdb infer process itself was killed
                assert r.returncode == -9, r.stderr[-3000:]
            else:  # its session process: the run stops in one line, exit 2
                assert r.returncode == 2 and "ended (exit code -9) with 1 session(s) in flight" in r.stderr, r.stderr[-3000:]
            assert daily not in {x["task_id"] for x in _v2_log(out)}
            ends = process_ends(out)
            assert (ends.ends(daily), ends.ends(corr)) == (n, 0)  # the one beside it: stopped or finished, not counted
        third = run()
        log3 = _v2_log(out)
        fourth = run()
        log4 = _v2_log(out)
        fixed = run("--retry-failed", FDB2_FIXED="1")
    finally:
        fake.close()
    assert third.returncode == 0, third.stderr[-3000:]
    last = {x["task_id"]: x for x in log3}
    assert (last[daily]["status"], last[daily]["reason"], last[daily]["ends_starts"]) == ("failed", ENDED_TWICE, 2)
    assert f"{daily}: failed: {ENDED_TWICE}" in third.stderr
    assert last[corr]["status"] == "ok" and [x["task_id"] for x in log3].count(corr) == 1  # the other, run and logged once
    assert fourth.returncode == 0 and log4 == log3  # a plain rerun: nothing run, nothing logged
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    final = _v2_log(out)
    assert final[:len(log3)] == log3 and [(x["task_id"], x["status"]) for x in final[len(log3):]] == [(daily, "ok")]
    assert (out / daily / "manifest.json").is_file() and process_ends(out).counts == {}
    assert fake.connections[f"{daily}.A"] == 1  # the examiner reached the server only in the --retry-failed run
    if processes == "1":
        assert fake.connections[f"{corr}.A"] == 1  # never started before Daily's ends (one at a time)


@pytest.mark.slow
def test_fdb_v2_ctrl_c_logs_the_conversations_in_flight_stopped_not_counted(v2_tasks, tmp_path, slots):
    """Ctrl-C (SIGINT: asyncio.run cancels the run's coroutine) with both conversations in flight:
    each has its ``started`` and ``stopped`` record, so neither counts as a process end (two such
    stops would otherwise fail it); the rerun runs what was not logged and logs each once."""
    import signal
    import time

    from openai_fakes import Program, RealtimeFake
    from spear_metrics.core.records import read_jsonl
    from spear_metrics.full_duplex_v2.engine import process_ends
    from test_fdb_v2 import KEY

    fake = RealtimeFake({f"{t}.{s}": Program("converse", replies=6) for t in V2_IDS for s in "AB"}, _speech_24k(), KEY)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "spear_metrics.cli", *_v2_cmd(v2_tasks, fake.url, out, "--concurrency", "2")]

    def own_group() -> None:  # SIGINT at its default (Python then raises KeyboardInterrupt)
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    try:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=own_group)
        try:
            deadline = time.monotonic() + 120
            while fake.open_now < 4:  # both conversations' two sessions open
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
                time.sleep(0.05)
            os.killpg(proc.pid, signal.SIGINT)
            printed = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        journal = [(r["task_id"], r["status"]) for r in read_jsonl(out / ".work" / "rank-0.jsonl")]
        finished = {r["task_id"] for r in _v2_log(out)} - {"Correction[1]"}
        for t in V2_IDS:  # stopped; or, on a loaded machine, the Ctrl-C came as its stream had ended: logged ok
            want = ["started"] if t in finished else ["started", "stopped"]
            assert [s for i, s in journal if i == t] == want, (journal, _v2_log(out), printed)
        assert process_ends(out).counts == {}  # a stop is no process end
        again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    finally:
        fake.close()
    assert again.returncode == 0, again.stderr[-3000:]
    assert sorted((r["task_id"], r["status"]) for r in _v2_log(out)) == sorted(
        [("Correction[1]", "failed")] + [(t, "ok") for t in V2_IDS])
    assert process_ends(out).counts == {}


@pytest.mark.slow
def test_fdb_v2_a_shard_fails_a_conversation_that_ended_its_process_twice_and_the_merge_keeps_it_failed(
        v2_tasks, tmp_path, slots):
    """``--shard K/2`` (K: Daily's shard) logs its ``started`` records beside its units in
    ``.work/rank-K.jsonl``: its third run fails Daily with the reason; the run without ``--shard``
    copies that record (ending no start twice) and runs only what no shard ran; ``--retry-failed``
    runs Daily again."""
    from openai_fakes import Program, RealtimeFake
    from spear_metrics.core.records import in_shard, read_jsonl
    from spear_metrics.full_duplex_v2.engine import process_ends
    from test_fdb_v2 import KEY

    exits = tmp_path / "exits.py"
    exits.write_text(EXITING_EXAMINER)
    fake = RealtimeFake({f"{t}.{s}": Program("converse", replies=6) for t in V2_IDS for s in "AB"}, _speech_24k(), KEY)
    out = tmp_path / "out"
    daily, corr = V2_IDS
    k = 0 if in_shard(daily, (0, 2)) else 1
    assert not in_shard(corr, (k, 2))  # the tasks' ids fall in different shards (crc32)

    def run(*extra: str, **env: str) -> subprocess.CompletedProcess:
        cmd = _v2_cmd(v2_tasks, fake.url, out, "--examiner", f"{exits}:ExitingExaminer", *extra)
        return subprocess.run([sys.executable, "-m", "spear_metrics.cli", *cmd], capture_output=True, text=True,
                              timeout=300, env=dict(os.environ, PYTHONPATH=str(REPO), **env))

    def shard_units() -> list[tuple[str, str]]:
        return [(r["task_id"], r["status"]) for r in read_jsonl(out / ".work" / f"rank-{k}.jsonl")]

    try:
        assert [run("--shard", f"{k}/2").returncode for _ in range(2)] == [-9, -9]
        assert [u for u in shard_units() if u[0] == daily] == [(daily, "started")] * 2
        third = run("--shard", f"{k}/2")
        merge = run()
        merged = _v2_log(out)
        fixed = run("--retry-failed", FDB2_FIXED="1")
    finally:
        fake.close()
    # exit 1: the shard's one conversation failed, none ok (as every inference command)
    assert third.returncode == 1 and [u for u in shard_units() if u[0] == daily][-1] == (daily, "failed")
    assert merge.returncode == 0, merge.stderr[-3000:]
    last = {r["task_id"]: r for r in merged}
    assert (last[daily]["status"], last[daily]["reason"], last[daily]["ends_starts"]) == ("failed", ENDED_TWICE, 0)
    assert last[corr]["status"] == "ok" and f"{daily}: " not in merge.stderr  # Daily not run by the merge
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert [(r["task_id"], r["status"]) for r in _v2_log(out)[len(merged):]] == [(daily, "ok")]
    assert process_ends(out).counts == {} and fake.connections[f"{daily}.A"] == 1 and fake.connections[f"{corr}.A"] == 1
