"""``spearbench speechrole infer``: adapters speak SpeechRole-Eval's dialogues turn by turn into
the benchmark's model-output layout: the reference oracle (``human``, synchronous), the
``openai-audio`` network adapter against a loopback Chat Completions server (system prompt and
history in the request), resumption inside a dialogue, and ``score`` reading what was written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from helpers import FakeChatServer
from openai_fakes import ChatFake, Program
from speechrole_fixtures import DIALOGUES, SHREK_PROMPT, PositionBiasedJudge, make_eval_root
from spear_datasets.audio import TARGET_SR, decode, load_audio
from spear_metrics.agents.base import AgentAnswer
from spear_metrics.cli import main
from spear_metrics.speechrole.infer import run_speechrole_inference

KEY = "sk-test-SPEECHROLE-0123456789"


@pytest.fixture()
def eval_root(tmp_path, real_dir) -> Path:
    return make_eval_root(tmp_path, real_dir)


def test_reference_oracle_writes_the_layout_that_score_reads(eval_root, real_dir):
    out = eval_root / "model_output" / "oracle"
    assert main(["speechrole", "infer", "--agent", "human", "--test-data", str(eval_root), "--mode", "single,multi",
                 "--out", str(out), "--no-progress"]) == 0
    shrek = json.loads((out / "multi_result" / "json" / "Shrek.json").read_text())
    assert shrek["role"] == "Shrek" and list(shrek) == ["role", "dialogue_0"]
    turn1 = shrek["dialogue_0"][1]
    assert turn1 == {"turn": 1, "user_input": {"text": "Then what about parfaits?"},
                     "model_output": {"text": "", "audio_path": "model_output/oracle/multi_result/audio/Shrek/Shrek_0_1.wav"}}
    # the oracle's answer is the turn's reference speech (role_speech_path1), at 16 kHz
    wav, sr = decode(out / "multi_result" / "audio" / "Shrek" / "Shrek_0_1.wav")
    ref = load_audio(real_dir / DIALOGUES[("multi", "Shrek", 0)][1][1], sr=TARGET_SR, channels="keep")
    assert sr == TARGET_SR and wav.shape == ref.shape
    # the same samples up to 16-bit quantisation (and the clipping of resampled peaks past full scale)
    assert np.median(np.abs(wav - ref)) < 1e-4 and np.corrcoef(wav[0], ref[0])[0, 1] > 0.9999
    assert json.loads((out / "single_result" / "run_info.json").read_text())["n_answered"] == 3
    # score takes the folder as written: every dialogue passes the check and is judged
    with FakeChatServer(PositionBiasedJudge(eval_root)) as srv:
        assert main(["speechrole", "score", "--outputs", str(out), "--test-data", str(eval_root), "--mode", "all",
                     "--judge-url", srv.url, "--judge-model", "j", "--out", str(eval_root / "R"), "--no-progress",
                     "--bootstrap", "0", "--judge-backoff-s", "0"]) == 0
    s = json.loads((eval_root / "R" / "summary.json").read_text())
    assert (s["n_samples"], s["n_failed"]) == (4, 0) and len(srv.requests) == 4 * 8


def test_network_adapter_gets_system_prompt_and_history(eval_root, real_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    answer = load_audio(real_dir / "speechbrain__p226_002.wav", sr=24_000, channels="mix")[0]
    fake = ChatFake({"Thor_single_0_0": Program("badkey")}, answer, 24_000, KEY, transcript="onions have layers")
    out = tmp_path / "model_output" / "gpt"
    try:
        assert main(["speechrole", "infer", "--agent", "openai-audio", "--test-data", str(eval_root), "--mode", "all",
                     "--out", str(out), "--no-progress", "--concurrency", "3", "-a", f"base_url={fake.url}",
                     "-a", "model=gpt-audio-test", "-a", "max_tries=1"]) == 0
    finally:
        fake.close()
    # turn 1 of the multi dialogue: the system prompt, then turn 0 (user text + speech, the system's own text)
    body = fake.bodies["Shrek_multi_0_1"]
    msgs = body["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[1]["content"][0] == {"type": "text", "text": "Are onions like ogres?"}
    assert msgs[1]["content"][1]["type"] == "input_audio"
    assert msgs[2]["content"] == "onions have layers"
    assert msgs[3]["content"][0] == {"type": "text", "text": SHREK_PROMPT}
    assert fake.calls["Shrek_multi_0_0"] == 1 and fake.calls["Shrek_multi_0_1"] == 1
    failures = [json.loads(x) for x in (out / "single_result" / "failures.jsonl").read_text().splitlines()]
    assert len(failures) == 1 and failures[0]["dialogue"] == "single/Thor/0" and "HTTP 401" in failures[0]["error"]
    assert KEY not in failures[0]["error"] and "***" in failures[0]["error"]
    assert not (out / "single_result" / "json" / "Thor.json").exists()
    shrek = json.loads((out / "single_result" / "json" / "Shrek.json").read_text())
    assert shrek["dialogue_1"][0]["model_output"]["text"] == "onions have layers"
    wav, sr = decode(out / "single_result" / "audio" / "Shrek" / "Shrek_1_0.wav")
    assert sr == 24_000 and wav.shape[1] == answer.size
    for f in out.rglob("*"):
        if f.is_file() and f.suffix in (".json", ".jsonl"):
            assert KEY not in f.read_text()


class CountingAgent:
    """A synchronous adapter that answers with a tone whose length is the turn number + 1 s, and
    stops the run (KeyboardInterrupt, as a kill) at turn 1 of the multi dialogue once."""

    def __init__(self, stop_at: tuple[str, int] | None = None):
        self.stop_at = stop_at
        self.calls: list[tuple[str, int, int, str]] = []

    def respond(self, audio, row, config):
        key = row.conversation_id
        self.calls.append((key, row.turn, len(row.history), row.system_prompt.split("\n")[0]))
        if self.stop_at == (key, row.turn):
            self.stop_at = None
            raise KeyboardInterrupt
        n = (row.turn + 1) * TARGET_SR
        return AgentAnswer(audio=0.1 * np.sin(np.arange(n) / 10.0).astype(np.float32), sample_rate=TARGET_SR,
                           text=f"turn {row.turn}")


def test_resume_inside_a_dialogue_keeps_the_finished_turns(eval_root, tmp_path):
    out = tmp_path / "model_output" / "counting"
    agent = CountingAgent(stop_at=("Shrek_multi_0", 1))
    with pytest.raises(KeyboardInterrupt):
        run_speechrole_inference("counting", eval_root, "multi", out, agent=agent, progress=False)
    assert agent.calls == [("Shrek_multi_0", 0, 0, "I want you to act like Shrek."),
                           ("Shrek_multi_0", 1, 2, "I want you to act like Shrek.")]
    assert (out / "multi_result" / "audio" / "Shrek" / "Shrek_0_0.wav").is_file()
    agent.calls.clear()
    info = run_speechrole_inference("counting", eval_root, "multi", out, agent=agent, progress=False)
    # turn 0 is not asked again; turn 1 gets it back in its history (user + assistant turns)
    assert agent.calls == [("Shrek_multi_0", 1, 2, "I want you to act like Shrek.")]
    assert info["n_answered"] == 1 and info["n_turns"] == 1
    d = json.loads((out / "multi_result" / "json" / "Shrek.json").read_text())["dialogue_0"]
    assert [t["model_output"]["text"] for t in d] == ["turn 0", "turn 1"]
    assert decode(out / "multi_result" / "audio" / "Shrek" / "Shrek_0_1.wav")[0].shape[1] == 2 * TARGET_SR
    # another adapter in the same folder is refused; a rerun of the same one does nothing
    assert run_speechrole_inference("counting", eval_root, "multi", out, agent=agent, progress=False)["n_turns"] == 0
    from spear_metrics.speechrole.infer import InferRunError

    with pytest.raises(InferRunError, match="another infer run"):
        run_speechrole_inference("other", eval_root, "multi", out, agent=agent, progress=False)


def test_a_stuck_synchronous_adapter_fails_its_dialogue_within_the_time_limit(eval_root, tmp_path):
    """A synchronous adapter that never returns on one turn: that dialogue fails with the time
    limit, the other dialogues are answered (the run does not hang)."""
    import threading

    release = threading.Event()

    class Stuck(CountingAgent):
        def respond(self, audio, row, config):
            if row.conversation_id == "Thor_single_0":
                release.wait(60)  # stuck (released when the test ends)
            return super().respond(audio, row, config)

    out = tmp_path / "model_output" / "stuck"
    try:
        info = run_speechrole_inference("stuck", eval_root, "single", out, agent=Stuck(), progress=False,
                                        row_timeout_s=5.0)  # a limit the quick turns never reach
    finally:
        release.set()
    assert info["n_dialogues"] == 3 and info["n_answered"] == 2 and info["n_failed"] == 1
    assert info["failures"] == [("single/Thor/0", "turn 0 timed out after 5 s")]
    assert json.loads((out / "single_result" / "json" / "Shrek.json").read_text())["dialogue_1"][0]["model_output"] == {
        "text": "turn 0", "audio_path": "model_output/stuck/single_result/audio/Shrek/Shrek_1_0.wav"}


def test_concurrency_is_lowered_to_the_adapters_max_concurrency(eval_root, tmp_path, capsys):
    """A network adapter that serves one session at a time (``max_concurrency = 1``): ``--concurrency
    3`` runs one dialogue at a time, says so in one line and records the sessions it ran at once."""
    from helpers import OneSessionAtATime

    agent = OneSessionAtATime()
    out = tmp_path / "model_output" / "one"
    info = run_speechrole_inference("one-at-a-time", eval_root, "single", out, agent=agent, concurrency=3,
                                    progress=False)
    assert info["n_failed"] == 0 and info["n_turns"] == agent.sessions == 3  # 3 one-turn dialogues
    assert agent.most_open == 1 and info["concurrency"] == 1
    assert json.loads((out / "single_result" / "run_info.json").read_text())["concurrency"] == 1
    note = [x for x in capsys.readouterr().err.splitlines() if "note:" in x]
    assert note == ["spearbench speechrole infer: note: one-at-a-time: --concurrency 3 lowered to 1: the adapter serves "
                    "at most 1 session at a time (its max_concurrency)"]
