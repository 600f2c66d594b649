"""Full-Duplex-Bench v2: tasks file, live conversations between loopback Realtime fakes, and the
judge's reply parsing through a loopback judge (spear_metrics.full_duplex_v2)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from helpers import FakeChatServer
from openai_fakes import Program, RealtimeFake
from spear_datasets.audio import load_audio
from spear_metrics.agents.openai_realtime import OpenAIRealtimeAgent
from spear_metrics.full_duplex_v2.engine import ExaminerRealtimeAgent, Rules, frame_loud, run_conversations
from spear_metrics.full_duplex_v2.score import (BINS, build_judge_prompt, parse_judge_reply, score_run)
from spear_metrics.full_duplex_v2.tasks import EXAMINER_SUFFIX, load_tasks

KEY = "sk-fdb2-test-key"
RATE = 24_000
REPO = Path(__file__).resolve().parents[1]

#: a tasks file of our own in upstream's prompts_staged_200.json shape (settings as upstream's)
TASKS = {
    "version": 6,
    "settings": {"turn_limit": 2, "max_duration_sec": 20, "examiner_can_interrupt": True,
                 "examiner_is_interruptible": False, "language": "en-US"},
    "splits": {
        "Daily": {"classes": [{"id": "ordering", "name": "Ordering"}], "tasks": [
            {"id": "Daily.ordering.901", "split": "Daily", "class_id": "ordering",
             "examiner_system_prompt": "Act as a customer ordering tea.",
             "examiner_task_prompt": "T1: ask for tea. T2: say green.",
             "staged_reveal": {"T1": "Ask for tea.", "T2": "Say green.", "T3": "Give a name.", "T4": "Confirm."}}]},
        "Correction": {"classes": [], "tasks": [
            {"id": "Correction.fix.902", "split": "Correction", "class_id": "fix",
             "examiner_system_prompt": "Book a table, then change the time.",
             "examiner_task_prompt": "T1: book at six. T2: change to seven.",
             "staged_reveal": {"T1": "Book at six.", "T2": "Change to seven.", "T3": "Name.", "T4": "Confirm."}},
            {"id": "../escape", "examiner_system_prompt": "x"}]},
    },
}

#: a judge prompts file of our own in upstream's v2/eval/eval_prompts.json shape
PROMPTS = {"system_prompt": "Rate Channel B.", "turn_taking_fluency_prompt": "TT 1-5.",
           "multi_turn_instruction_following_prompt": "IF 1-5.",
           "task_specific_prompts": [{"id": "correction", "title": "Correction Handling", "prompt": "Rate corrections 1-5."}],
           "output_format_prompt": "Output Format ..."}


@pytest.fixture
def tasks_file(tmp_path) -> Path:
    p = tmp_path / "tasks.json"
    p.write_text(json.dumps(TASKS))
    return p


@pytest.fixture
def reply_24k(real_dir) -> np.ndarray:
    """The fakes' spoken turn: VCTK p225 'Ask her to bring these things...' (real speech) at 24 kHz,
    [1.0, 3.0] s: the speech (100 ms levels -40 dBFS or more from 1.0 s to 3.4 s; silence before)."""
    return load_audio(real_dir / "speechbrain__p225_002.wav", sr=RATE, channels="mix")[0][RATE: 3 * RATE]


def test_tasks_file_reads_upstream_shape_and_lists_bad_entries(tasks_file):
    tf = load_tasks(tasks_file)
    assert [t.id for t in tf.tasks] == ["Daily.ordering.901", "Correction.fix.902"]
    assert tf.settings.turn_limit == 2 and tf.settings.max_duration_sec == 20.0
    assert tf.settings.examiner_can_interrupt and not tf.settings.examiner_is_interruptible
    # run_dataset.sh + single_conversation.sh: system prompt + suffix, blank line, task prompt
    assert tf.tasks[0].examiner_instructions() == "Act as a customer ordering tea." + EXAMINER_SUFFIX + "\n\nT1: ask for tea. T2: say green."
    assert [pos for pos, _ in tf.bad] == ["Correction[1]"]
    assert tf.bad[0][1].startswith("task id must be a non-empty name usable as a folder") and "'../escape'" in tf.bad[0][1]
    assert [t.id for t in load_tasks(tasks_file, splits=["Correction"]).tasks] == ["Correction.fix.902"]


def test_hostile_tasks_and_prompts_files_are_refused_in_one_line_or_fail_their_entry(tmp_path):
    """Ids that cannot name a task folder beside the run's log (a NUL byte, 300 bytes, the log's own
    name: a folder there would make every later log write fail) are failed entries, the good task
    still runs; a tasks or prompts file nested deeper than the JSON parser's recursion limit, or a
    prompts file over its limit (sparse, never read whole), is a one-line refusal; a nested line in
    conversations.jsonl is skipped like a torn one."""
    from spear_metrics.full_duplex_v2.engine import LOG, read_log
    from spear_metrics.full_duplex_v2.score import MAX_PROMPTS_BYTES, ScoreSetupError, load_eval_prompts
    from spear_metrics.full_duplex_v2.tasks import MAX_ID_BYTES, TasksError

    good = {"id": "Daily.ok.1", "examiner_system_prompt": "Act as a customer."}
    hostile = ["a\x00b", "x" * (MAX_ID_BYTES + 1), LOG]
    p = tmp_path / "tasks.json"
    # and a split named "all": its conversations were replaced in the summary by every split's
    p.write_text(json.dumps({"splits": {"Daily": {"tasks": [good] + [{**good, "id": i} for i in hostile]},
                                        "all": {"tasks": [{**good, "id": "All.1"}]}}}))
    tf = load_tasks(p)
    assert [t.id for t in tf.tasks] == ["Daily.ok.1"]
    assert [pos for pos, _ in tf.bad] == ["Daily[1]", "Daily[2]", "Daily[3]", "all[0]"]
    assert "summary's name for all splits" in tf.bad[3][1]
    p.write_text('{"splits": ' + "[" * 100_000)
    with pytest.raises(TasksError, match="is not JSON"):
        load_tasks(p)
    # a 5000-digit number: Python's json refuses it with a plain ValueError (int()'s digit limit), not a JSONDecodeError
    p.write_text('{"settings": {"max_duration_sec": ' + "1" * 5000 + '}, "splits": {}}')
    with pytest.raises(TasksError, match="is not JSON"):
        load_tasks(p)
    from spear_datasets.sources.fdb import FDBFormatError, load_json

    with pytest.raises(FDBFormatError, match="not valid JSON"):
        load_json(p)
    p.write_text('{"splits": ' + "[" * 100_000)
    with pytest.raises(ScoreSetupError, match="cannot read the judge prompts"):
        load_eval_prompts(p)
    with open(tmp_path / "huge.json", "wb") as f:
        f.truncate(10 * 1024 ** 3)
    with pytest.raises(ScoreSetupError, match=f"over the {MAX_PROMPTS_BYTES}-byte limit"):
        load_eval_prompts(tmp_path / "huge.json")
    (tmp_path / LOG).write_text("[" * 100_000 + "\n" + json.dumps({"task_id": "t1", "status": "ok"}) + "\n")
    assert list(read_log(tmp_path)) == ["t1"]



def test_a_transcript_that_is_a_fifo_fails_its_task_instead_of_blocking(tmp_path):
    """A.json as a FIFO (no writer: open() blocks forever) or as a file over the limit: the task's
    transcripts are refused with a one-line reason, read up to the limit at most."""
    import os

    from spear_metrics.full_duplex_v2.score import MAX_TRANSCRIPT_BYTES, ensure_transcripts

    os.mkfifo(tmp_path / "A.json")
    (tmp_path / "B.json").write_text(json.dumps({"text": "", "chunks": []}))
    with pytest.raises(ValueError, match="A.json is not a regular file"):
        ensure_transcripts(tmp_path, None)
    (tmp_path / "A.json").unlink()
    with open(tmp_path / "A.json", "wb") as f:
        f.truncate(MAX_TRANSCRIPT_BYTES + 1)
    with pytest.raises(ValueError, match="over the .*-byte limit"):
        ensure_transcripts(tmp_path, None)


def _agents(url: str):
    return (lambda: ExaminerRealtimeAgent(base_url=url, api_key_env="FDB2_KEY"),
            lambda: OpenAIRealtimeAgent(base_url=url, api_key_env="FDB2_KEY"))


def _frames(x: np.ndarray, hop: int) -> np.ndarray:
    n = len(x) // hop
    return x[: n * hop].reshape(n, hop)


@pytest.mark.slow
def test_two_concurrent_conversations_relay_record_and_obey_rules(tmp_path, tasks_file, reply_24k, monkeypatch):
    """Task 1: both sides converse (replies after 0.5 s of silence): the examiner's third turn ends
    the conversation (turn_limit 2). Task 2: the examinee barges in 0.3 s into every examiner turn,
    the cap is 8 s (turn limit 50): the examiner (not interruptible) hears zeros while it speaks, B.wav keeps the
    barge-in, and the conversation stops at 8 s."""
    monkeypatch.setenv("FDB2_KEY", KEY)
    tf = load_tasks(tasks_file)
    t1, t2 = tf.tasks
    progs = {f"{t1.id}.A": Program("converse", replies=6), f"{t1.id}.B": Program("converse", replies=6),
             f"{t2.id}.A": Program("converse", replies=6), f"{t2.id}.B": Program("talk_over", replies=6)}
    fake = RealtimeFake(progs, reply_24k, KEY)
    try:
        mk_a, mk_b = _agents(fake.url)
        rules = {t1.id: Rules.from_settings(tf.settings),
                 t2.id: dataclasses.replace(Rules.from_settings(tf.settings, max_duration_s=8.0), turn_limit=50)}
        counts = asyncio.run(run_conversations(tf.tasks, tmp_path / "out", mk_a, mk_b, lambda t: rules[t.id],
                                               concurrency=2, wire_rate=RATE, tick_ms=40.0))
    finally:
        fake.close()
    assert counts["ok"] == 2 and counts["failed"] == 0
    hop = RATE * 40 // 1000
    for t in (t1, t2):
        folder = tmp_path / "out" / t.id
        a, sr_a = sf.read(folder / "A.wav", dtype="float32")
        b, sr_b = sf.read(folder / "B.wav", dtype="float32")
        c, sr_c = sf.read(folder / "combined.wav", dtype="float32")
        assert sr_a == sr_b == sr_c == RATE and a.shape == b.shape and c.shape == (len(a), 2)
        assert np.array_equal(c[:, 0], a) and np.array_equal(c[:, 1], b)  # A left, B right (upstream's mix)
        m = json.loads((folder / "manifest.json").read_text())
        assert m["examiner"]["served_model"] == "gpt-realtime-2025-08-28"  # as the service returned it
        assert m["duration_s"] == pytest.approx(len(a) / RATE)
        # both channels hold speech (the fake's real recording relayed both ways)
        assert any(frame_loud(f, -40) for f in _frames(a, hop)) and any(frame_loud(f, -40) for f in _frames(b, hop))
        # relay delay: the engine adds at most about one tick to ideal playback (generous bound: loaded machine)
        assert m["relay_delay"]["n"] > 0 and m["relay_delay"]["p99_s"] < 1.0
        # the examiner's instructions went out as upstream composes them, with no prefix
    assert json.loads((tmp_path / "out" / t1.id / "manifest.json").read_text())["end_reason"] == "turn_limit"
    m1 = json.loads((tmp_path / "out" / t1.id / "manifest.json").read_text())
    assert m1["examiner_turns"] == 2 and m1["events"][-2]["event"] == "examiner_turn_refused"
    m2 = json.loads((tmp_path / "out" / t2.id / "manifest.json").read_text())
    assert m2["end_reason"] == "max_duration" and m2["duration_s"] == pytest.approx(8.0)
    # not interruptible: what the examiner received (sample i = stream time i / 24 kHz, one hop per
    # tick) is silent wherever it was speaking, although the examinee spoke over it there
    heard = np.concatenate(fake.received[f"{t2.id}.A"]).astype(np.float32) / 32768.0
    a2, _ = sf.read(tmp_path / "out" / t2.id / "A.wav", dtype="float32")
    b2, _ = sf.read(tmp_path / "out" / t2.id / "B.wav", dtype="float32")
    fa, fb, fh = _frames(a2, hop), _frames(b2, hop), _frames(heard[: len(a2)], hop)
    overlap = [i for i in range(len(fa)) if frame_loud(fa[i], -40) and frame_loud(fb[i], -40)]
    assert overlap, "the examinee never barged in"
    assert all(not np.any(fh[i]) for i in overlap)
    log = [json.loads(x) for x in (tmp_path / "out" / "conversations.jsonl").read_text().splitlines()]
    assert sorted(r["task_id"] for r in log) == sorted([t1.id, t2.id])


@pytest.mark.slow
def test_examiner_that_may_not_interrupt_waits_for_the_examinee(tmp_path, tasks_file, reply_24k, monkeypatch):
    """The examiner fake barges in 0.3 s into each examinee turn; with ``examiner_can_interrupt``
    false its audio is held: every examiner turn after the opening one starts only after a whole
    second (the turn gap) without examinee speech, and the hold is in the events."""
    monkeypatch.setenv("FDB2_KEY", KEY)
    tf = load_tasks(tasks_file, limit=1)
    tid = tf.tasks[0].id
    fake = RealtimeFake({f"{tid}.A": Program("talk_over", replies=6), f"{tid}.B": Program("converse", replies=6)}, reply_24k, KEY)
    rules = Rules(turn_limit=50, max_duration_s=10.0, examiner_can_interrupt=False, examiner_is_interruptible=False)
    try:
        mk_a, mk_b = _agents(fake.url)
        counts = asyncio.run(run_conversations(tf.tasks, tmp_path / "out", mk_a, mk_b, lambda _: rules, wire_rate=RATE))
    finally:
        fake.close()
    assert counts["ok"] == 1
    m = json.loads((tmp_path / "out" / tid / "manifest.json").read_text())
    assert any(e["event"] == "examiner_held" for e in m["events"])
    b, _ = sf.read(tmp_path / "out" / tid / "B.wav", dtype="float32")
    hop = RATE * 40 // 1000
    fb = _frames(b, hop)
    starts = [round(e["stream_s"] / 0.04) for e in m["events"] if e["event"] == "examiner_turn_start"]
    assert len(starts) >= 2
    for k in starts[1:]:
        assert not any(frame_loud(fb[i], -40) for i in range(max(0, k - 24), k + 1))


@pytest.mark.slow
def test_conversation_with_a_moshi_protocol_examinee(tmp_path, tasks_file, reply_24k, monkeypatch):
    """The examinee is the moshi adapter against the loopback Moshi fake (Opus frames both ways,
    one output frame per input frame): the relayed examiner audio reaches it as live input, it
    answers once after the examiner's first turn (speech end + 0.4 s, heard in the decoded input),
    and its answer is recorded in B.wav and heard by the examiner."""
    from fakes.moshi_fake import FakeMoshi, MoshiScenario
    from spear_metrics.agents.moshi import MoshiAgent

    monkeypatch.setenv("FDB2_KEY", KEY)
    tf = load_tasks(tasks_file, limit=1)
    tid = tf.tasks[0].id
    fake = RealtimeFake({f"{tid}.A": Program("converse", replies=6)}, reply_24k, KEY)
    try:
        with FakeMoshi({f"{tid}.B": MoshiScenario(reply_24k, delay_s=0.4)}) as moshi:
            mk_a, _ = _agents(fake.url)
            counts = asyncio.run(run_conversations(
                tf.tasks, tmp_path / "out", mk_a, lambda: MoshiAgent(url=moshi.url("/api/chat"), handshake_timeout_s=60),
                lambda _: Rules(turn_limit=2, max_duration_s=12.0), wire_rate=RATE))
            session = moshi.sessions[0]
    finally:
        fake.close()
    assert counts["ok"] == 1, (tmp_path / "out" / "conversations.jsonl").read_text()
    m = json.loads((tmp_path / "out" / tid / "manifest.json").read_text())
    a, _ = sf.read(tmp_path / "out" / tid / "A.wav", dtype="float32")
    b, _ = sf.read(tmp_path / "out" / tid / "B.wav", dtype="float32")
    hop = RATE * 40 // 1000
    assert any(frame_loud(f, -40) for f in _frames(b, hop))  # Moshi's answer (real speech) in B.wav
    # the fake heard the examiner's first turn end where A.wav has it (its 80 ms frames vs our 40 ms ticks)
    first_end = next(e["stream_s"] for e in m["events"] if e["event"] == "examiner_turn_end")
    assert session.speech_end_s == pytest.approx(first_end, abs=0.3)
    # every whole 80 ms frame of the relayed stream was sent as live input (the last few may be in flight at close)
    assert len(a) // 1920 - 5 <= session.frames_in <= len(a) // 1920
    heard = np.concatenate(fake.received[f"{tid}.A"]).astype(np.float32) / 32768.0
    assert any(frame_loud(f, -40) for f in _frames(heard, hop))  # and the examiner heard it


@pytest.mark.slow
def test_hung_sides_are_bounded_in_time(tmp_path, tasks_file, reply_24k, monkeypatch):
    """Task 1's examinee goes silent after its session is set up: the conversation still ends at its
    cap (5 s), the examinee's channel all zeros. Task 2's examinee never confirms its session: the
    unit fails with the reason once the adapter's setup time limit (2 s) has passed."""
    monkeypatch.setenv("FDB2_KEY", KEY)
    tf = load_tasks(tasks_file)
    t1, t2 = tf.tasks
    fake = RealtimeFake({f"{t1.id}.A": Program("converse", replies=6), f"{t1.id}.B": Program("hang"),
                         f"{t2.id}.A": Program("converse", replies=6), f"{t2.id}.B": Program("hang_setup")}, reply_24k, KEY)
    try:
        mk_a, _ = _agents(fake.url)
        t = time.monotonic()
        counts = asyncio.run(run_conversations(
            tf.tasks, tmp_path / "out", mk_a,
            lambda: OpenAIRealtimeAgent(base_url=fake.url, api_key_env="FDB2_KEY", connect_timeout_s=2.0, max_tries=1),
            lambda _: Rules.from_settings(tf.settings, max_duration_s=5.0), concurrency=2, wire_rate=RATE,
            deadline_grace_s=10.0))
        wall = time.monotonic() - t
    finally:
        fake.close()
    assert counts["ok"] == 1 and counts["failed"] == 1 and wall < 5.0 + 60.0
    b, _ = sf.read(tmp_path / "out" / t1.id / "B.wav", dtype="float32")
    assert len(b) == 5 * RATE and not np.any(b)
    log = {r["task_id"]: r for r in map(json.loads, (tmp_path / "out" / "conversations.jsonl").read_text().splitlines())}
    assert log[t2.id]["status"] == "failed" and log[t2.id]["reason"].startswith("examinee could not connect")
    assert "session.updated" in log[t2.id]["reason"] and not (tmp_path / "out" / t2.id).exists()


@pytest.mark.slow
def test_kill_9_then_resume_redoes_only_the_unfinished_conversation(tmp_path, tasks_file, reply_24k):
    """``fdb infer --version 2`` killed with SIGKILL once the first conversation is logged: the rerun
    runs only the second one (the fake counts the sessions per task) and logs each task once."""
    tf = load_tasks(tasks_file)
    progs = {f"{t.id}.{s}": Program("converse", replies=6) for t in tf.tasks for s in "AB"}
    fake = RealtimeFake(progs, reply_24k, KEY)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "spear_metrics.cli", "fdb", "infer", "--version", "2", "--tasks", str(tasks_file),
           "--agent", "openai-realtime", "-a", f"base_url={fake.url}", "-a", "api_key_env=FDB2_KEY",
           "-e", f"base_url={fake.url}", "-e", "api_key_env=FDB2_KEY", "--out", str(out), "--max-duration-s", "6"]
    env = {**os.environ, "FDB2_KEY": KEY, "PYTHONPATH": str(REPO)}
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
        log = out / "conversations.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (log.exists() and '"ok"' in log.read_text()):
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        first = [json.loads(x) for x in log.read_text().splitlines()]
        assert [(x["task_id"], x["status"]) for x in first] == [("Correction[1]", "failed"), (tf.tasks[0].id, "ok")]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO, timeout=180)
        # exit 0 as every inference command whose run recorded something (commands.run_exit_status); the
        # unreadable entry is still listed and logged
        assert r.returncode == 0 and "failed task Correction[1]" in r.stderr
    finally:
        fake.close()
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["task_id"] for x in recs] == ["Correction[1]"] + [t.id for t in tf.tasks]
    assert [x["status"] for x in recs] == ["failed", "ok", "ok"]
    # each conversation was logged started before it ran; the second twice when the kill came after its start,
    # which then counts as one end of the process (the rule of every inference loop), else none is left open
    from spear_metrics.full_duplex_v2.engine import process_ends

    starts = [r["task_id"] for r in map(json.loads, (out / ".work" / "rank-0.jsonl").read_text().splitlines())
              if r["status"] == "started"]
    assert starts.count(tf.tasks[0].id) == 1 and starts.count(tf.tasks[1].id) in (1, 2)
    assert process_ends(out).counts == ({tf.tasks[1].id: 1} if starts.count(tf.tasks[1].id) == 2 else {})
    # the finished conversation was not run again; the killed one (maybe begun) ran to its end once more
    assert fake.connections[f"{tf.tasks[0].id}.A"] == 1 and fake.connections[f"{tf.tasks[1].id}.A"] >= 1
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == [".work"]  # the run's records; no partial folder
    m = json.loads((out / tf.tasks[0].id / "manifest.json").read_text())
    # upstream's examiner settings, as recorded: model, voice, VAD mode and its turn detection
    assert (m["examiner"]["model"], m["examiner"]["voice"], m["examiner"]["vad_mode"]) == ("gpt-realtime-2025-08-28", "echo", "slow")
    assert m["examiner"]["vad"] == {"type": "server_vad", "create_response": True, "interrupt_response": True}
    assert m["tasks_sha256"] == hashlib.sha256(tasks_file.read_bytes()).hexdigest() and m["seeds"]["examiner"].startswith("none")
    # the examiner's words: its transcript deltas (the fake's "hello there" after each reply), timed on both clocks
    n_replies = len(fake.reply_starts[f"{tf.tasks[0].id}.A"])
    assert n_replies >= 1 and m["examiner"]["text"] == "hello there" * n_replies
    assert len(m["examiner"]["text_events"]) == n_replies and {"wall_s", "stream_s"} <= set(m["examiner"]["text_events"][0])
    assert all(KEY not in p.read_text(errors="replace") for p in out.rglob("*.json*"))


# ----------------------------------------------------------------------------- judging


def test_judge_prompt_follows_upstreams_sections():
    ta = {"text": "hi I want tea", "chunks": []}
    tb = {"text": "sure", "chunks": [{"text": "sure", "timestamp": [1.234, 1.5]}]}
    p = build_judge_prompt(PROMPTS, "Correction", {"T1": "a", "T2": "b", "T3": "c", "T4": "d"}, ta, tb)
    heads = [s.split("\n")[0] for s in p.split("\n\n")]
    assert heads[:5] == ["SYSTEM INSTRUCTION:", "TURN-TAKING FLUENCY RUBRIC:", "MULTI-TURN INSTRUCTION-FOLLOWING RUBRIC:",
                         "TASK-SPECIFIC RUBRIC:", "OUTPUT FORMAT:"]
    assert "[1.23, 1.50]: sure" in p and "T4: d" in p
    assert "TASK-SPECIFIC RUBRIC" not in build_judge_prompt(PROMPTS, "Daily", {}, ta, tb)  # none for Daily


def test_reply_parsing_strict_on_upstreams_format():
    # upstream's own example reply (v2/eval_results/Daily/Daily.ordering.001.json, first two events)
    j = parse_judge_reply('```json\n{"Turn-taking event and score": [[[8.08, 29.68], 1, 1], [[30.0, 40.96], 4, 3]], '
                          '"Task-specific score": 2}\n```')
    assert j.events == [(8.08, 29.68, 1, 1), (30.0, 40.96, 4, 3)] and j.task_score == 2 and not j.failed_events
    # the output-format prompt's literal shape; an out-of-range and a non-number score fail their events only
    j = parse_judge_reply('{"Turn-taking event and score": [\n [1.0, 2.0]: 5, 4,\n [3, 4]: 6, 2,\n [5, 6]: x, 1\n],\n'
                          '"Task-specific score": 3}')
    assert j.events == [(1.0, 2.0, 5, 4)] and j.task_score == 3
    assert [why for _, why in j.failed_events] == ["turn-taking score 6 is outside 1-5", "turn-taking score 'x' is not a number"]
    j = parse_judge_reply('{"Turn-taking event and score": [[[1, 2], 3, 3.5]]}')
    assert j.events == [] and j.failed_events[0][1] == "instruction-following score 3.5 is not an integer"
    assert j.task_score is None and j.task_score_reason == "reply lacks 'Task-specific score'"
    for garbage in ("I cannot rate this.", '{"scores": []}', "[1, 2]", ""):
        with pytest.raises(ValueError):
            parse_judge_reply(garbage)


@pytest.mark.slow
def test_transcripts_by_the_packaged_whisper_with_word_times(tmp_path, real_dir):
    """A.json/B.json in upstream's shape from the packaged Whisper: the JFK recording on the examiner
    channel, VCTK p225 on the examinee's (their known words, in order, with times inside the clips);
    the ASR model recorded; an existing file is read, not redone."""
    from spear_metrics.core.asr import load_asr

    from spear_metrics.full_duplex_v2.score import ensure_transcripts

    x = load_audio(real_dir / "faster-whisper__jfk.flac", sr=RATE, channels="mix")[0]
    folder = tmp_path / "Daily.x.001"
    folder.mkdir()
    sf.write(folder / "A.wav", x, RATE, subtype="PCM_16")
    sf.write(folder / "B.wav", load_audio(real_dir / "speechbrain__p225_002.wav", sr=RATE, channels="mix")[0], RATE,
             subtype="PCM_16")
    asr = load_asr("embedded")
    ta, tb = ensure_transcripts(folder, asr)
    words = [c["text"].strip(",.").lower() for c in ta["chunks"]]
    assert "ask not what your country can do for you" in " ".join(words)
    assert all(0 <= c["timestamp"][0] <= c["timestamp"][1] <= len(x) / RATE + 0.5 for c in ta["chunks"])
    assert "ask her to bring these things" in " ".join(c["text"].strip(",.").lower() for c in tb["chunks"])
    assert ta["asr_model"] == tb["asr_model"] == asr.describe() and ta["word_timestamps"] is True
    assert json.loads((folder / "A.json").read_text()) == ta
    assert ensure_transcripts(folder, None) == (ta, tb)  # read back, no ASR needed


def test_score_run_through_a_loopback_judge(tmp_path, tasks_file):
    """Two conversations with transcripts: task 1's judge replies garbage every time (a failed unit
    with its reason), task 2's reply has one out-of-range event; the means, the bins and the
    resumption are computed by hand."""
    tf = load_tasks(tasks_file)
    root = tmp_path / "conv"
    for t in tf.tasks:
        (root / t.id).mkdir(parents=True)
        (root / t.id / "manifest.json").write_text("{}")
        for ch in "AB":
            (root / t.id / f"{ch}.json").write_text(json.dumps({"text": "hello", "chunks": [
                {"text": "hello", "timestamp": [0.5, 0.9]}]}))
    prompts = tmp_path / "eval_prompts.json"
    prompts.write_text(json.dumps(PROMPTS))
    good = ('{"Turn-taking event and score": [[[10, 20], 4, 2], [[14, 16], 2, 4], [[30, 31], 9, 9]], '
            '"Task-specific score": 5}')

    def reply(body):
        text = body["messages"][0]["content"]
        return (200, good) if "Rate corrections" in text else (200, "no JSON here")

    from spear_metrics.core.judge import Judge

    with FakeChatServer(reply) as srv:
        judge = Judge(srv.url, "judge-2025-01-01", api_key="", temperature=0.2, max_retries=1, backoff_s=0)
        s = score_run(root, tf.tasks, prompts, judge, tmp_path / "res", n_resamples=0, concurrency=2)
        n_requests = len(srv.requests)
        s2 = score_run(root, tf.tasks, prompts, judge, tmp_path / "res", n_resamples=0)
        assert len(srv.requests) == n_requests == 3  # 2 tries of the garbage task + 1; the rerun asks nothing
        # an edited or foreign log line (an ok record without a reply, or with one that does not parse)
        # is ignored like a torn line (it was a KeyError / a whole-run refusal): the earlier whole
        # record stands, nothing is asked again
        with open(tmp_path / "res" / "judgements.jsonl", "a") as f:
            f.write(json.dumps({"task_id": tf.tasks[1].id, "status": "ok"}) + "\n")
            f.write(json.dumps({"task_id": tf.tasks[1].id, "status": "ok", "reply": "garbage"}) + "\n")
        s3 = score_run(root, tf.tasks, prompts, judge, tmp_path / "res", n_resamples=0)
        assert len(srv.requests) == 3 and s3["per_task"] == s["per_task"]
    assert srv.requests[0]["temperature"] == 0.2
    assert [f["task_id"] for f in s["failed"]] == [tf.tasks[0].id] and "malformed reply" in s["failed"][0]["reason"]
    row = s["per_task"][0]
    # upstream's keys count the out-of-range event (scoring/score.py has no range check): (4 + 2 + 9) / 3
    assert row["n_events"] == 3 and row["avg_turn_taking"] == 5.0 and row["avg_instruction_following"] == 5.0
    assert row["avg_task_specific"] == 5.0 and row["n_files"] == 1
    # the project's strict keys leave it out: (4 + 2) / 2
    assert row["strict_n_events"] == 2 and row["n_failed_events"] == 1
    assert row["strict_avg_turn_taking"] == 3.0 and row["strict_avg_instruction_following"] == 3.0
    # bins: [10, 20] overlaps 0-15 by 5 s and 15-30 by 5 s; [14, 16] overlaps each by 1 s; [30, 31] is 30-45's only
    assert row["TT[0-15]"] == pytest.approx((4 * 5 + 2 * 1) / 6) and row["IF[15-30]"] == pytest.approx((2 * 5 + 4 * 1) / 6)
    assert row["TT[30-45]"] == 9.0 and row["TT[45-60]"] is None and len(BINS) == 8
    assert s["splits"]["Correction"]["avg_turn_taking"]["mean"] == 5.0 and s2["per_task"] == s["per_task"]
    assert s["splits"]["Correction"]["strict_avg_turn_taking"]["mean"] == 3.0


def _one_transcribed_conversation(tmp_path: Path) -> Path:
    """``tmp_path/conv/<the Correction task>/`` with its transcripts (``A.json``/``B.json``) and the
    judge prompts file ``tmp_path/eval_prompts.json`` (returned)."""
    folder = tmp_path / "conv" / "Correction.fix.902"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text("{}")
    for ch in "AB":
        (folder / f"{ch}.json").write_text(json.dumps({"text": "hi", "chunks": [{"text": "hi", "timestamp": [0.1, 0.4]}]}))
    prompts = tmp_path / "eval_prompts.json"
    prompts.write_text(json.dumps(PROMPTS))
    return prompts


def test_score_command_pins_or_warns_about_the_judge_id(tmp_path, tasks_file, capsys, monkeypatch):
    """``spearbench fdb score --version 2``: upstream's judge id of ``v2/.env.example``
    (``gemini-2.5-flash``, an undated alias) is warned about and recorded; refused under
    --judge-require-pinned (exit 2, no call)."""
    from spear_metrics.cli import main

    monkeypatch.setenv("SPEARBENCH_JUDGE_CACHE", str(tmp_path / "cache"))
    prompts = _one_transcribed_conversation(tmp_path)
    reply = '{"Turn-taking event and score": [[[0.1, 0.4], 5, 4]], "Task-specific score": 4}'
    with FakeChatServer([(200, reply)]) as srv:
        base = ["fdb", "score", "--version", "2", "--tasks", str(tasks_file), "--split", "Correction", "--root",
                str(tmp_path / "conv"), "--eval-prompts", str(prompts), "--judge-url", srv.url, "--judge-model",
                "gemini-2.5-flash", "--judge-key-env", "none", "--judge-cache", "off", "--bootstrap", "0"]
        assert main(base + ["--out", str(tmp_path / "pinned"), "--judge-require-pinned"]) == 2
        assert srv.requests == []
        assert "--judge-require-pinned" in capsys.readouterr().err
        assert main(base + ["--out", str(tmp_path / "res")]) == 0
    cap = capsys.readouterr()
    assert "warning: judge model" in cap.err
    # the console: each split's means with their n, the judge's calls, what was written, and a next step that runs
    lines = cap.out.splitlines()
    assert lines[0].split() == ["split", "conversations", "avg_turn_taking", "avg_instruction_following",
                                "avg_task_specific"]
    assert lines[1].split() == ["Correction", "1", "5.000", "(n=1)", "4.000", "(n=1)", "4.000", "(n=1)"]
    assert any(ln.startswith("judge gemini-2.5-flash: 1 answer(s), 0 from the cache, 1 request(s) sent") for ln in lines)
    assert f"wrote {tmp_path / 'res' / 'summary.json'} and per_sample.jsonl (each judge reply: judgements.jsonl)" in lines
    push = shlex.split(lines[-1])
    assert push[1:4] == ["push-results", str(tmp_path / "res"), "--local-dir"] and main(push[1:]) == 0
    assert "Full-Duplex-Bench v2 tab" in capsys.readouterr().out
    s = json.loads((tmp_path / "res" / "summary.json").read_text())
    assert s["benchmark"] == "full_duplex_v2" and s["per_task"][0]["avg_turn_taking"] == 5.0
    assert s["provenance"]["judge_moving_alias"] and s["provenance"]["judge_temperature"] == 0.2
    assert s["judge_calls"]["requested_model"] == "gemini-2.5-flash"


def test_a_side_flooding_audio_fails_its_conversation(tmp_path, tasks_file, reply_24k, monkeypatch):
    """An examiner whose one reply is 70 s of audio, sent at once, in a conversation capped at 5 s:
    more than cap + 60 s buffered ahead of playback fails the unit with its reason."""
    monkeypatch.setenv("FDB2_KEY", KEY)
    tf = load_tasks(tasks_file, limit=1)
    tid = tf.tasks[0].id
    flood = np.tile(reply_24k, 35)  # 35 x 2 s
    fake = RealtimeFake({f"{tid}.A": Program("converse", replies=1), f"{tid}.B": Program("converse", replies=1)}, flood, KEY)
    try:
        mk_a, mk_b = _agents(fake.url)
        counts = asyncio.run(run_conversations(tf.tasks, tmp_path / "out", mk_a, mk_b,
                                               lambda _: Rules(max_duration_s=5.0), wire_rate=RATE))
    finally:
        fake.close()
    rec = json.loads((tmp_path / "out" / "conversations.jsonl").read_text())
    assert counts["failed"] == 1 and rec["status"] == "failed"
    m = re.fullmatch(r"the examiner sent (\d+) s of audio ahead of the conversation \(limit 65 s\)", rec["reason"])
    assert m and 65 <= int(m.group(1)) <= 70  # checked each tick: somewhere between the limit and all 70 s
    assert not (tmp_path / "out" / tid).exists()


def test_infer_without_a_key_or_with_an_unwritable_out_is_a_one_line_refusal(tmp_path, tasks_file, capsys, monkeypatch):
    """No OPENAI_API_KEY for the examiner was exit 1 'unexpected error' (MissingKeyError, an
    AgentError, was not caught); an --out under a file was a traceback-class error. Both: exit 2,
    one line, before any connection."""
    from spear_metrics.cli import main

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    base = ["fdb", "infer", "--version", "2", "--tasks", str(tasks_file), "--agent", "openai-realtime"]
    assert main(base + ["--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "OPENAI_API_KEY is not set" in err[0]
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    (tmp_path / "afile").write_text("")
    assert main(base + ["--out", str(tmp_path / "afile" / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot create the folder" in err[0] and KEY not in err[0]


# ----------------------------------------------------------------------------- the output folder


def _infer_cmd(tasks_file: Path, url: str, out: Path, *extra: str) -> list[str]:
    return ["fdb", "infer", "--version", "2", "--tasks", str(tasks_file), "--limit", "1", "--agent", "openai-realtime",
            "-a", f"base_url={url}", "-a", "api_key_env=FDB2_KEY", "-e", f"base_url={url}", "-e", "api_key_env=FDB2_KEY",
            "--out", str(out), *extra]


@pytest.mark.slow
def test_out_folder_is_owned_another_run_is_refused_and_the_manifest_lists_are_capped(tmp_path, tasks_file, reply_24k,
                                                                                      capsys, monkeypatch):
    """``fdb infer --version 2 --out`` follows the output-folder rule: the run's files are recorded
    (``.work``); a rerun with other settings (another duration cap) is refused in one line and
    touches nothing, with ``--overwrite`` it replaces only what the first run wrote (a file of the
    user's in the conversation folder stays); a folder of the user's is refused. The manifest keeps
    at most MAX_MANIFEST_ENTRIES of each per-chunk list and says when the cap was hit."""
    import spear_metrics.full_duplex_v2.engine as engine
    from spear_metrics.cli import main

    monkeypatch.setenv("FDB2_KEY", KEY)
    monkeypatch.setattr(engine, "MAX_MANIFEST_ENTRIES", 5)
    tid = load_tasks(tasks_file, limit=1).tasks[0].id
    fake = RealtimeFake({f"{tid}.{s}": Program("converse", replies=6) for s in "AB"}, reply_24k, KEY)
    out = tmp_path / "out"
    try:
        assert main(_infer_cmd(tasks_file, fake.url, out, "--max-duration-s", "3")) == 0
        m = json.loads((out / tid / "manifest.json").read_text())
        recorded = {json.loads(x)["path"] for x in (out / ".work" / "written-0.jsonl").read_text().splitlines()}
        assert {f"{tid}/{n}" for n in ("A.wav", "B.wav", "combined.wav", "manifest.json")} | {"conversations.jsonl"} <= recorded
        # the caps: each per-chunk list cut at 5 entries, the cut recorded with the full count
        for side in ("examiner", "examinee"):
            chunks = m[side]["output_chunks"]
            assert len(chunks) == 5 and m[side]["output_chunks_capped"]["kept"] == 5
            assert m[side]["output_chunks_capped"]["total"] > 5
        assert len(m["relay_delays_s"]) == 5 and m["relay_delays_s_capped"]["total"] == m["relay_delay"]["n"] > 5
        # a rerun with another duration cap: refused, nothing touched, nobody connected
        (out / tid / "notes.txt").write_text("mine")
        before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
        n_conn = dict(fake.connections)
        capsys.readouterr()
        assert main(_infer_cmd(tasks_file, fake.url, out, "--max-duration-s", "2")) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "holds conversations of another run" in err[0] and "--overwrite" in err[0]
        assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == before
        assert dict(fake.connections) == n_conn
        # the same settings resume: nothing to run again
        assert main(_infer_cmd(tasks_file, fake.url, out, "--max-duration-s", "3")) == 0
        assert dict(fake.connections) == n_conn
        # --overwrite: the first run's files replaced by the new run's; the user's file stays
        assert main(_infer_cmd(tasks_file, fake.url, out, "--max-duration-s", "2", "--overwrite")) == 0
        assert json.loads((out / tid / "manifest.json").read_text())["duration_s"] == pytest.approx(2.0)
        assert (out / tid / "notes.txt").read_text() == "mine"
        recs = [json.loads(x) for x in (out / "conversations.jsonl").read_text().splitlines()]
        # the first run's log went with its files: one record per unit, this run's
        assert [(r["task_id"], r["status"]) for r in recs] == [("Correction[1]", "failed"), (tid, "ok")]
        assert recs[1]["duration_s"] == pytest.approx(2.0)
        # a folder of the user's is refused before anything is written
        mine = tmp_path / "mine"
        mine.mkdir()
        (mine / "data.txt").write_text("x")
        capsys.readouterr()
        assert main(_infer_cmd(tasks_file, fake.url, mine)) == 2
        assert "holds files this tool did not write" in capsys.readouterr().err
        assert sorted(p.name for p in mine.iterdir()) == ["data.txt"]
    finally:
        fake.close()


def test_a_second_run_while_one_writes_the_folder_is_refused(tmp_path, tasks_file, capsys, monkeypatch):
    """While a process writes ``--out`` (it holds the folder's lock, as a running ``fdb infer
    --version 2`` does), a second run into it is refused in one line before it connects anywhere;
    once that process is gone (killed: the OS drops its lock), the folder is usable again."""
    from spear_metrics.cli import main

    monkeypatch.setenv("FDB2_KEY", KEY)
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from spear_datasets.ownership import OwnedFolder; "
         f"OwnedFolder({str(out)!r}, command='fdb2-infer').open(); print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline().strip() == "held"
        unreachable = "ws://127.0.0.1:9/v1/realtime"  # never reached: the refusal comes first
        assert main(_infer_cmd(tasks_file, unreachable, out)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "live process" in err[0], err
    finally:
        holder.kill()
        holder.wait(30)
    assert not (out / "conversations.jsonl").exists()


def test_work_logs_are_read_bounded_and_only_for_the_tasks_asked(tmp_path, monkeypatch):
    """conversations.jsonl (infer) and judgements.jsonl (score) are read by the project's bounded
    work-log reader: a line over the limit is skipped (never parsed whole), as are torn lines and
    records of tasks not asked for; the last record of a task wins."""
    import spear_metrics.core.records as records
    from spear_metrics.full_duplex_v2.engine import LOG, read_log

    monkeypatch.setattr(records, "MAX_JSONL_LINE_CHARS", 1000)
    lines = [json.dumps({"task_id": "t1", "status": "failed", "reason": "x"}),
             json.dumps({"task_id": "t2", "status": "ok", "pad": "y" * 5000}),  # over the limit: skipped
             json.dumps({"task_id": "t1", "status": "ok"}),
             json.dumps({"task_id": "other", "status": "ok"}),
             json.dumps({"task_id": ["not", "a", "name"], "status": "ok"}),
             '{"task_id": "t3", "sta']  # torn by a kill
    (tmp_path / LOG).write_text("\n".join(lines))
    assert read_log(tmp_path, {"t1", "t2", "t3"}) == {"t1": {"task_id": "t1", "status": "ok"}}
    assert set(read_log(tmp_path)) == {"t1", "other"}


def _hold(folder: Path, command: str) -> subprocess.Popen:
    """A live process holding ``folder`` (its rank-0 lock, as a running command does) until killed."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from spear_datasets.ownership import OwnedFolder; "
         f"OwnedFolder({str(folder)!r}, command={command!r}).open(); print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_score_out_is_owned_other_settings_refused_same_resume_overwrite_removes_only_its_files(
        tmp_path, tasks_file, capsys, monkeypatch):
    """``fdb score --version 2 --out`` follows the output-folder rule: a second score with another
    judge model is refused in one line (exit 2, nothing touched, no judge call); the same settings
    resume with no judge call; ``--overwrite`` removes only the files earlier scores recorded (a
    file of the user's in --out stays) and judges again; a live process writing --out is refused."""
    from spear_metrics.cli import main

    prompts = _one_transcribed_conversation(tmp_path)
    out = tmp_path / "res"
    reply = '{"Turn-taking event and score": [[[0.1, 0.4], 5, 4]], "Task-specific score": 4}'

    def cmd(model: str, *extra: str) -> list[str]:
        return ["fdb", "score", "--version", "2", "--tasks", str(tasks_file), "--split", "Correction", "--root",
                str(tmp_path / "conv"), "--eval-prompts", str(prompts), "--judge-url", srv.url, "--judge-model", model,
                "--judge-key-env", "none", "--judge-cache", "off", "--bootstrap", "0", "--out", str(out), *extra]

    with FakeChatServer(lambda body: (200, reply)) as srv:
        assert main(cmd("judge-2025-01-01")) == 0 and len(srv.requests) == 1
        recorded = {json.loads(x)["path"] for x in (out / ".work" / "written-0.jsonl").read_text().splitlines()}
        assert {"judgements.jsonl", "per_sample.jsonl", "summary.json"} <= recorded
        assert json.loads((out / ".work" / "owner.json").read_text())["command"] == "fdb2-score"
        (out / "notes.txt").write_text("mine")
        # the same settings: every judgement resumed, the judge asked nothing
        assert main(cmd("judge-2025-01-01")) == 0 and len(srv.requests) == 1
        # another judge model: refused in one line, nothing touched, nothing asked
        before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
        capsys.readouterr()
        assert main(cmd("other-2025-02-02")) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "another scoring run" in err[0] and "--overwrite" in err[0], err
        assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == before and len(srv.requests) == 1
        # --overwrite: the first score's files go, the user's file stays, the new judge is asked
        assert main(cmd("other-2025-02-02", "--overwrite")) == 0 and len(srv.requests) == 2
        assert srv.requests[1]["model"] == "other-2025-02-02"
        assert (out / "notes.txt").read_text() == "mine"
        assert len((out / "judgements.jsonl").read_text().splitlines()) == 1  # the first judge's record went
        assert json.loads((out / "summary.json").read_text())["provenance"]["judge_model"] == "other-2025-02-02"
        # a live process writing --out: refused in one line before the judge is asked
        holder = _hold(out, "fdb2-score")
        try:
            capsys.readouterr()
            assert main(cmd("other-2025-02-02", "--retry-failed")) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and "live process" in err[0], err
        finally:
            holder.kill()
            holder.wait(30)
        assert len(srv.requests) == 2


class _WordsASR:
    """A stand-in ASR backend (the test is about where transcripts are written, not what they say):
    the clip's known words at fixed times."""

    def describe(self) -> str:
        return "stand-in ASR"

    def transcribe(self, waves, sr, word_timestamps=True):
        from spear_metrics.core.asr import Transcript, Word

        return [Transcript("ask her", [Word("ask", 0.2, 0.5), Word("her", 0.5, 0.7)], "stand-in") for _ in waves]


def test_transcripts_are_recorded_in_the_infer_folder_and_its_overwrite_removes_them(tmp_path, tasks_file, real_dir):
    """``A.json``/``B.json`` written by the score into a conversation folder of ``fdb infer --version
    2`` are recorded in that run's ownership record: its ``--overwrite`` removes them with the rest
    (a file of the user's stays). While a live infer writes the folder, the unit fails with one line
    (its lock is not taken away, no transcript is written, the judge is not asked); rerun with
    --retry-failed once it is gone, the unit is scored."""
    from spear_datasets.files import atomic_path
    from spear_metrics.core.judge import Judge
    from spear_metrics.core.records import claim_out
    from spear_metrics.full_duplex_v2.engine import RunConflict, log_unit, run_fingerprint, write_wav

    tf = load_tasks(tasks_file, splits=["Correction"])
    tid = tf.tasks[0].id
    root, conv = tmp_path / "conv", tmp_path / "conv" / tid
    sr = 16000
    x = load_audio(real_dir / "speechbrain__p225_002.wav", sr=sr, channels="mix")[0]
    with claim_out(root, run_fingerprint(None, [], {}), overwrite=False, conflict=RunConflict("x"), command="fdb2-infer"):
        for name in ("A.wav", "B.wav"):  # as save_conversation writes them
            with atomic_path(conv / name, tmp_suffix=".wav") as tmp:
                write_wav(tmp, x, sr)
        with atomic_path(conv / "manifest.json") as tmp:
            tmp.write_text("{}")
        log_unit(root, {"task_id": tid, "status": "ok"})
    (conv / "notes.txt").write_text("mine")
    prompts = tmp_path / "eval_prompts.json"
    prompts.write_text(json.dumps(PROMPTS))
    reply = '{"Turn-taking event and score": [[[0.2, 0.7], 4, 4]], "Task-specific score": 3}'
    with FakeChatServer(lambda body: (200, reply)) as srv:
        judge = Judge(srv.url, "judge-2025-01-01", api_key="", temperature=0.2, max_retries=0, backoff_s=0)
        holder = _hold(root, "fdb2-infer")
        try:
            s = score_run(root, tf.tasks, prompts, judge, tmp_path / "res", asr=_WordsASR(), n_resamples=0)
        finally:
            holder.kill()
            holder.wait(30)
        assert [f["task_id"] for f in s["failed"]] == [tid] and "live process" in s["failed"][0]["reason"]
        assert not (conv / "A.json").exists() and srv.requests == []
        s = score_run(root, tf.tasks, prompts, judge, tmp_path / "res", asr=_WordsASR(), n_resamples=0, retry_failed=True)
        assert s["failed"] == [] and s["per_task"][0]["avg_turn_taking"] == 4.0 and len(srv.requests) == 1
    for ch in "AB":  # upstream's name and shape
        assert json.loads((conv / f"{ch}.json").read_text())["chunks"][0] == {"text": "ask", "timestamp": [0.2, 0.5]}
    recorded = {json.loads(x)["path"] for x in (root / ".work" / "written-0.jsonl").read_text().splitlines()}
    assert {f"{tid}/A.json", f"{tid}/B.json", f"{tid}/A.wav"} <= recorded
    # infer --overwrite (another run's settings): everything it and the score recorded goes, the user's file stays
    counts = asyncio.run(run_conversations([], root, None, None, lambda t: None, overwrite=True,
                                           describe={"examinee": "another"}))
    assert counts["ok"] == 0
    assert sorted(p.name for p in conv.iterdir()) == ["notes.txt"]


def test_read_log_never_replaces_an_ok_by_an_earlier_runs_failure(tmp_path):
    """The run without --shard failed conversation ``x`` (``conversations.jsonl``), then a shard run
    with --retry-failed finished it (``.work/rank-1.jsonl``): the shards' logs are read first, so
    "the last record wins" alone would read ``x`` failed; an ok is never replaced by a failure.
    Between two failures the last read still wins (``y``: conversations.jsonl's, read last)."""
    from spear_metrics.full_duplex_v2.engine import LOG, read_log, shard_log

    (tmp_path / ".work").mkdir()
    (tmp_path / LOG).write_text(
        json.dumps({"task_id": "x", "status": "failed", "reason": "timed out"}) + "\n"
        + json.dumps({"task_id": "y", "status": "failed", "reason": "old"}) + "\n")
    (tmp_path / shard_log(1)).write_text(
        json.dumps({"task_id": "x", "status": "started"}) + "\n"
        + json.dumps({"task_id": "x", "status": "ok", "duration_s": 3.0}) + "\n"
        + json.dumps({"task_id": "y", "status": "failed", "reason": "new"}) + "\n")
    got = read_log(tmp_path)
    assert got["x"]["status"] == "ok" and got["x"]["duration_s"] == 3.0
    assert got["y"]["reason"] == "old"  # conversations.jsonl is read last: its failure is the latest read
    assert read_log(tmp_path, shards=False)["x"]["status"] == "failed"  # the whole run's own log alone
