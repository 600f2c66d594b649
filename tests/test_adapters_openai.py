"""``openai-realtime`` and ``openai-audio`` through ``spearbench infer`` against loopback fakes of the
public protocols (tests/openai_fakes.py), on SPEAR clips cut from real recordings with known
speech ends.

The Realtime fake is clocked by the samples it receives, so the stream-clock onset is exact up to
one 40 ms chunk whatever the load; wall-clock quantities are checked with causal lower bounds and
generous upper bounds only. Faults each fail their own row with their reason while the good rows
of the same run are answered; keys never reach a file.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from openai_fakes import ChatFake, Program, RealtimeFake
from spear_datasets.audio import TARGET_SR, decode, load_audio, resample, write_wav
from spear_metrics.agents.harness import run_inference
from spear_metrics.cli import main

KEY = "sk-test-FAKEKEY-0123456789abcdef"
CHUNK_S = 0.040
STEREO = "DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav"
ES = "lhotse__ES2011a.Headset-0-40s-46s.wav"
HEADER = ["audio_path", "answer_audio_path", "context_end_time", "question_end_time", "answer_duration", "speakers",
          "conversation_id", "transcript_question", "transcript_answer", "answer_start_time"]


@pytest.fixture
def key_env(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


def sources(real_dir: Path) -> dict[str, tuple[np.ndarray, float]]:
    """Stereo 16 kHz clips ending at a question end, with where their speech ends (s):
    ``es``: ES2011a headset [1.0, 4.6] s on channel 0 (utterance 'YOU CAN CALL ME ABBIE' ends at
    4.36 s in the recording's annotation -> 3.36 s in the clip), channel 1 silent;
    ``ami``: the AMI pair [13.0, 15.48] s, FEE016's turn ending at 15.48 s (the RTTM) -> 2.48 s."""
    es = load_audio(real_dir / ES, sr=TARGET_SR, channels="keep")[0]
    es_clip = np.stack([es[16000:73600], np.zeros(57600, np.float32)])
    ami = load_audio(real_dir / STEREO, sr=TARGET_SR, channels="keep")[:, 13 * 16000: round(15.48 * 16000)]
    return {"es": (es_clip, 3.36), "ami": (ami, 2.48)}


def answer_24k(real_dir: Path) -> np.ndarray:
    """The fakes' spoken answer: VCTK p225 'Ask her to bring these things...' (real speech) at 24 kHz."""
    return load_audio(real_dir / "speechbrain__p225_002.wav", sr=24_000, channels="mix")[0]


def write_csv(root: Path, rows: list[tuple[str, np.ndarray]]) -> Path:
    """A SPEAR metadata CSV of ``(name, clip)`` rows (clips written beside it)."""
    (root / "clips").mkdir(parents=True, exist_ok=True)
    with open(root / "metadata.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        for name, clip in rows:
            write_wav(root / "clips" / name, clip, TARGET_SR)
            w.writerow([f"clips/{name}", "", "0.0", repr(clip.shape[1] / TARGET_SR), "", "P0016A|P0015",
                        "V00_S0001_I00000001", "P0016A: a question?", "", ""])
    return root / "metadata.csv"


def name(k: int) -> str:
    return f"V00_S0001_I00000001_P0016A_P0015_{k}.wav"


def records(out: Path) -> dict[str, dict]:
    return {Path(r["audio_path"]).name: r for r in answer_records(out)}


def answer_records(out: Path) -> list[dict]:
    """The rows' ok/failed records of the work log (not its started/stopped marks)."""
    recs = [json.loads(x) for x in (out / ".work" / "rank-0.jsonl").read_text().splitlines()]
    return [r for r in recs if r["status"] in ("ok", "failed")]


def no_key_in(folder: Path) -> None:
    for p in folder.rglob("*"):
        if p.is_file():
            assert KEY.encode() not in p.read_bytes(), f"the key leaked into {p}"


def chunk_end_at_or_after(t: float) -> float:
    """The end of the 40 ms input chunk that holds input time ``t`` (the fake fires on that chunk)."""
    return math.ceil(round(t * 24000) / 960) * 960 / 24000


# max_wait_s/connect_timeout_s: limits no loaded machine reaches (every fake answers or closes);
# the one row about max_wait_s (a server that never answers) runs alone under SILENT_WAIT
REALTIME_OPTS = ["tail_silence_s=1.0", "vad_grace_s=0.3", "max_wait_s=60", "connect_timeout_s=60", "max_tries=4"]
SILENT_WAIT = "max_wait_s=1.5"


def test_realtime_onsets_barge_in_and_faults_in_one_run(real_dir, tmp_path, key_env):
    src = sources(real_dir)
    es, es_end = src["es"]
    ami, ami_end = src["ami"]
    plan = [  # (clip, program)
        ("es", Program("reply", at_s=es_end + 0.6, speech_end_s=es_end)),
        ("ami", Program("reply", at_s=ami_end + 0.3, speech_end_s=ami_end)),
        ("es", Program("barge", at_s=es_end - 1.5, speech_end_s=es_end)),  # answers while the question goes on
        ("es", Program("force", speech_end_s=es_end)),  # the VAD never closes: commit + response.create forced
        ("ami", Program("busy", at_s=ami_end + 0.3, speech_end_s=ami_end, busy_n=2)),  # 429 twice, then answers
        ("ami", Program("busy", busy_n=None)),  # 429 forever
        ("ami", Program("refuse")),  # 403 on the handshake: no retry
        ("ami", Program("drop", at_s=ami_end + 0.3, speech_end_s=ami_end)),
        ("ami", Program("malformed", at_s=1.0, speech_end_s=ami_end)),
        ("ami", Program("silent", speech_end_s=ami_end)),
        ("ami", Program("wrong_rate")),
        ("ami", Program("bad_audio", at_s=1.0, speech_end_s=ami_end)),
        ("ami", Program("echo_key", at_s=1.0, speech_end_s=ami_end)),
        ("ami", Program("try_later", at_s=ami_end + 0.3, speech_end_s=ami_end)),  # close 1013 once, then answers
        ("ami", Program("error_event", at_s=1.0, speech_end_s=ami_end)),
    ]
    clips = {"es": es, "ami": ami}
    silent = [9]  # the server that never answers: alone, under a short max_wait_s (same outcome at any load)
    main_rows = [k for k in range(len(plan)) if k not in silent]
    csv_path = write_csv(tmp_path / "data", [(name(k), clips[plan[k][0]]) for k in main_rows])
    silent_csv = write_csv(tmp_path / "data_silent", [(name(k), clips[plan[k][0]]) for k in silent])
    answer = answer_24k(real_dir)
    fake = RealtimeFake({name(k): p for k, (_, p) in enumerate(plan)}, answer, KEY, transcript="ask her to bring")
    out, out_silent = tmp_path / "out", tmp_path / "out_silent"
    try:
        # exit 1: a run where rows failed and none was answered
        for data, dest, rows, extra, rc in ((csv_path, out, main_rows, [], 0), (silent_csv, out_silent, silent, [SILENT_WAIT], 1)):
            args = ["infer", "--agent", "openai-realtime", "--data", str(data), "--out", str(dest), "--no-progress",
                    "--concurrency", str(len(rows)), "-a", f"base_url={fake.url}", "-a", "model=gpt-realtime-test"]
            for o in REALTIME_OPTS + extra:
                args += ["-a", o]
            assert main(args) == rc
    finally:
        fake.close()
    assert fake.errors == []  # every client event held the openai SDK's RealtimeClientEvent type
    recs = records(out)
    failures = {Path(f["audio_path"]).name: f["error"] for d in (out, out_silent)
                for f in map(json.loads, (d / "failures.jsonl").read_text().splitlines())}
    expect_fail = {
        5: "gave up after 4 tries", 6: "HTTP 403", 7: "closed the connection mid-answer (code 1011",
        8: "malformed event", 9: "no answer audio before max_wait_s", 10: "16000 Hz", 11: "not valid base64",
        12: "invalid_api_key", 14: "server error event (server_error)",
    }
    assert set(failures) == {name(k) for k in expect_fail}
    for k, why in expect_fail.items():
        assert why in failures[name(k)], (k, failures[name(k)])
    assert "HTTP 429" in failures[name(5)] and "***" in failures[name(12)] and KEY not in failures[name(12)]
    assert fake.connections[name(5)] == 4 and fake.connections[name(6)] == 1  # retried / refused at once
    assert fake.connections[name(4)] == 3 and fake.connections[name(13)] == 2
    assert name(3) in fake.forced and "input_audio_buffer.commit" in fake.events[name(3)]

    meta = {Path(r["audio_path"]).name: r for r in csv.DictReader(open(out / "metadata.csv"))}
    for k in (0, 1, 2, 4, 13):
        clip, prog = plan[k]
        r = recs[name(k)]
        q_end = clips[clip].shape[1] / TARGET_SR
        # stream clock: the reply fired on the chunk holding at_s; stamped before another chunk went out
        assert prog.at_s - 1e-9 <= r["onset_stream_s"] <= prog.at_s + CHUNK_S + 1e-6, (k, r["onset_stream_s"])
        assert r["onset_stream_s"] == pytest.approx(chunk_end_at_or_after(prog.at_s), abs=CHUNK_S + 1e-6)
        assert fake.replied_at[name(k)] == round(chunk_end_at_or_after(prog.at_s) * 24000)
        # wall clock (SPEAR's onset): not before that chunk's scheduled send time; generous upper bound
        assert prog.at_s - CHUNK_S <= r["onset_wall_s"] <= prog.at_s + 5.0
        assert r["onset"] == r["onset_wall_s"]
        assert float(meta[name(k)]["answer_start_time"]) == pytest.approx(r["onset_wall_s"] - q_end, abs=1e-6)
        # response time: first audio minus the end of input (>= the clip's nominal end)
        assert -q_end < r["response_time_s"] <= r["onset_wall_s"] - q_end + 1e-9
        assert r["text"] == "ask her to bring" and r["finish_reason"] == "stop"
        wav, sr = decode(out / r["answer_audio_path"])
        assert sr == TARGET_SR and wav.shape[1] == pytest.approx(answer.size * 2 / 3, abs=2)
        assert float(meta[name(k)]["answer_duration"]) == pytest.approx(answer.size / 24000, abs=1e-3)
    # the barge-in started while the question was still going on
    assert float(meta[name(2)]["answer_start_time"]) < 0 and recs[name(2)]["onset_stream_s"] < 3.6
    assert recs[name(2)]["response_time_s"] < 0
    # the forced reply came after the whole input and its tail had been sent
    assert recs[name(3)]["onset_stream_s"] == pytest.approx(3.6 + 1.0, abs=1e-9)
    assert recs[name(3)]["onset_wall_s"] >= 3.6 + 1.0 - CHUNK_S + 0.3
    # run_info and the per-row timing file
    info = json.loads((out / "run_info.json").read_text())
    assert info["concurrency"] == len(main_rows) and info["response_time_s"]["n"] == 6 and "wall clock" in info["onset_rule"]
    assert info["onset_kind"] == "first_audio"
    # silence_pad_ms: the output's first audible sample (Silero VAD, ms times) after its first byte; the
    # fake's output is the answer clip itself, so it is the clip's own first speech
    from spear_metrics.core.vad import speech_segments

    lead_ms = 1000 * speech_segments(resample(answer[None], 24_000, TARGET_SR)[0], time_resolution=3)[0][0]
    assert lead_ms > 0 and recs[name(0)]["silence_pad_ms"] == pytest.approx(lead_ms, abs=32.0)  # one Silero frame (16-bit rounding)
    assert info["silence_pad_ms"]["n"] == 6
    assert info["send_lag_max_s"]["n"] == 6 and all(r["send_lag_max_s"] >= 0 for r in recs.values() if r["status"] == "ok")
    rt = {Path(r["audio_path"]).name: r for r in csv.DictReader(open(out / "response_times.csv"))}
    assert float(rt[name(0)]["response_time_s"]) == pytest.approx(recs[name(0)]["response_time_s"], abs=1e-6)
    assert rt[name(5)]["status"] == "failed" and rt[name(5)]["response_time_s"] == ""
    assert "response_time_s" not in open(out / "metadata.csv").readline()  # SPEAR's schema unchanged
    no_key_in(out)
    no_key_in(out_silent)


def test_realtime_text_only_session_ends_on_response_done(real_dir, key_env):
    """A text-only session (``output_modalities: ["text"]``, what ``dsuperb infer`` asks) ends on the
    ``response.done`` after its text: finish reason ``stop``, not ``max_wait`` (it would wait the
    whole max_wait_s for audio that never comes); the text is the answer; no audio."""
    import asyncio

    from spear_metrics.agents.duplex import AudioRequest, run_session, session_config
    from spear_metrics.agents.openai_realtime import OpenAIRealtimeAgent

    ami, end = sources(real_dir)["ami"]
    fake = RealtimeFake({name(0): Program("reply", at_s=end + 0.2, speech_end_s=end)}, answer_24k(real_dir)[:2400], KEY,
                        transcript="a dog barking")
    try:
        agent = OpenAIRealtimeAgent(base_url=fake.url, model="gpt-realtime-test", tail_silence_s=1.0, vad_grace_s=0.3,
                                    max_wait_s=60)
        request = AudioRequest(audio=ami, sample_rate=TARGET_SR, modalities=("text",), row_id=name(0))
        result = asyncio.run(run_session(agent, request, session_config(agent)))
    finally:
        fake.close()
    assert fake.errors == [] and fake.text_only[name(0)]
    assert result.finish_reason == "stop" and result.text == "a dog barking" and result.chunks == []


def test_realtime_resume_after_kill_redoes_only_missing_rows(real_dir, tmp_path, key_env):
    ami, end = sources(real_dir)["ami"]
    progs = {name(k): Program("reply", at_s=end + 0.2, speech_end_s=end) for k in range(3)}
    csv_path = write_csv(tmp_path / "data", [(name(k), ami) for k in range(3)])
    fake = RealtimeFake(progs, answer_24k(real_dir)[:24000], KEY)
    out = tmp_path / "out"
    opts = {"base_url": fake.url, "tail_silence_s": "0.5", "vad_grace_s": "0.2", "max_wait_s": "60"}

    def kill(rec):
        raise KeyboardInterrupt  # stands for a kill after the first row was logged

    try:
        with pytest.raises(KeyboardInterrupt):
            run_inference("openai-realtime", str(csv_path), out, agent_options=opts, progress=False, on_row=kill)
        first = answer_records(out)
        assert len(first) == 1 and first[0]["status"] == "ok"
        info = run_inference("openai-realtime", str(csv_path), out, agent_options=opts, progress=False, concurrency=2)
    finally:
        fake.close()
    assert info["rows_run_this_time"] == 2 and info["n_answered"] == 3
    done_first = Path(first[0]["audio_path"]).name
    assert fake.connections[done_first] == 1  # not redone
    assert set(fake.extensions.values()) == {None}  # no permessage-deflate offered (as the openai SDK's client)
    logged = [r["row"] for r in answer_records(out)]
    assert sorted(logged) == [0, 1, 2]
    no_key_in(out)


def test_openai_audio_request_answers_and_faults(real_dir, tmp_path, key_env):
    ami, _ = sources(real_dir)["ami"]
    kinds = ["ok", "busy", "busy_always", "e500_once", "badkey", "malformed", "wrong_rate", "bad_audio", "drop",
             "text_only"]
    progs = {name(k): Program("busy", busy_n=None if kind == "busy_always" else 2) if kind.startswith("busy")
             else Program(kind) for k, kind in enumerate(kinds)}
    csv_path = write_csv(tmp_path / "data", [(name(k), ami) for k in range(len(kinds))])
    answer = answer_24k(real_dir)
    fake = ChatFake(progs, answer, 24_000, KEY, transcript="ask her")
    out = tmp_path / "out"
    # no row here is about timing: a request limit no loaded machine reaches
    try:
        assert main(["infer", "--agent", "openai-audio", "--data", str(csv_path), "--out", str(out), "--no-progress",
                     "--concurrency", "8", "-a", f"base_url={fake.url}", "-a", "model=gpt-audio-test",
                     "-a", "timeout_s=60", "-a", "max_tries=3", "-a", "max_wait_s=120"]) == 0
    finally:
        fake.close()
    recs = records(out)
    failures = {Path(f["audio_path"]).name: f["error"] for f in map(json.loads, (out / "failures.jsonl").read_text().splitlines())}
    expect = {2: "gave up after 3 tries", 4: "HTTP 401", 5: "malformed response", 6: "2000 Hz", 7: "cannot be decoded",
              8: "cannot reach", 9: "finished without answer audio"}
    assert set(failures) == {name(k) for k in expect}
    for k, why in expect.items():
        assert why in failures[name(k)], (k, failures[name(k)])
    assert "HTTP 429" in failures[name(2)] and "***" in failures[name(4)]
    assert fake.calls[name(1)] == 3 and fake.calls[name(2)] == 3 and fake.calls[name(3)] == 2 and fake.calls[name(4)] == 1
    meta = {Path(r["audio_path"]).name: r for r in csv.DictReader(open(out / "metadata.csv"))}
    for k in (0, 1, 3):
        r = recs[name(k)]
        assert meta[name(k)]["answer_start_time"] == ""  # half-duplex: placed at the question end, never 0.0
        assert r["onset"] is None and 0 < r["response_time_s"] < 20 and r["text"] == "ask her"
        wav, sr = decode(out / r["answer_audio_path"])
        assert wav.shape[1] == pytest.approx(answer.size * 2 / 3, abs=2)
    # what the server heard: SPEAR's GPT-audio request, the clip as one 16 kHz channel (the channel mean)
    body = fake.bodies[name(0)]
    assert body["model"] == "gpt-audio-test" and body["modalities"] == ["text", "audio"]
    assert body["audio"] == {"voice": "alloy", "format": "wav"} and body["temperature"] == 0.7
    assert body["messages"][0] == {"role": "system",
                                   "content": "You are a helpful assistant that can understand and respond to speech."}
    part = body["messages"][1]["content"][0]
    assert part["type"] == "input_audio" and part["input_audio"]["format"] == "wav"
    import base64
    import io

    heard, sr = sf.read(io.BytesIO(base64.b64decode(part["input_audio"]["data"])), dtype="float32")
    assert sr == 16000 and heard.ndim == 1 and heard.size == ami.shape[1]
    assert np.abs(heard - ami.mean(axis=0)).max() <= 1.0 / 32767 + 1e-6
    no_key_in(out)


def test_openai_audio_request_time_limit(real_dir, tmp_path, key_env):
    """A server that does not answer until it closes: each try is cut at timeout_s, then the row fails
    with the limit named (the fake answers nothing in time whatever the load)."""
    ami, _ = sources(real_dir)["ami"]
    csv_path = write_csv(tmp_path / "data", [(name(0), ami)])
    fake = ChatFake({name(0): Program("slow")}, answer_24k(real_dir), 24_000, KEY)
    out = tmp_path / "out"
    try:
        code = main(["infer", "--agent", "openai-audio", "--data", str(csv_path), "--out", str(out), "--no-progress",
                     "-a", f"base_url={fake.url}", "-a", "timeout_s=0.5", "-a", "max_tries=2", "-a", "max_wait_s=60"])
        calls = fake.calls[name(0)]
    finally:
        fake.close()
    assert code == 1  # no row answered
    failure = json.loads((out / "failures.jsonl").read_text().splitlines()[0])
    assert "did not answer within 0.5 s" in failure["error"] and calls == 2
    no_key_in(out)


def test_openai_audio_streamed_answer(real_dir, tmp_path, key_env):
    ami, _ = sources(real_dir)["ami"]
    csv_path = write_csv(tmp_path / "data", [(name(0), ami)])
    answer = answer_24k(real_dir)
    fake = ChatFake({name(0): Program("stream")}, answer, 24_000, KEY, transcript="ask her")
    out = tmp_path / "out"
    try:
        info = run_inference("openai-audio", str(csv_path), out, progress=False,
                             agent_options={"base_url": fake.url, "stream": "true"})
    finally:
        fake.close()
    assert info["n_answered"] == 1
    r = records(out)[name(0)]
    assert fake.bodies[name(0)]["stream"] is True and fake.bodies[name(0)]["audio"]["format"] == "pcm16"
    wav, _ = decode(out / r["answer_audio_path"])
    ref = resample(answer[None, :], 24000, 16000)[0]
    # the deltas, joined in order (16-bit quantisation and clipping of the peaks aside)
    assert wav.shape[1] == ref.size and np.median(np.abs(wav[0] - ref)) < 1e-4
    assert np.corrcoef(wav[0], ref)[0, 1] > 0.999
    assert r["text"] == "ask her" and 0 < r["response_time_s"] < 20


def test_adapter_exits_and_time_limits_fail_their_rows(real_dir, tmp_path):
    """SystemExit fails its row only; a sync adapter stuck past --row-timeout-s fails with the time."""
    import threading

    from spear_metrics.agents import AgentAnswer

    ami, _ = sources(real_dir)["ami"]
    csv_path = write_csv(tmp_path / "data", [(name(k), ami) for k in range(3)])
    release = threading.Event()

    class Moody:
        def respond(self, audio, row, config):
            k = int(Path(row.audio_path).stem.rsplit("_", 1)[1])
            if k == 0:
                raise SystemExit(3)
            if k == 1:
                release.wait(60)  # stuck until the test ends
            return AgentAnswer(np.zeros((1, 1600), np.float32), 16000, None, None, "stop")

    out = tmp_path / "out"
    try:  # a limit the quick rows never reach under any load
        info = run_inference("moody", str(csv_path), out, agent=Moody(), progress=False, row_timeout_s=5.0)
    finally:
        release.set()
    assert info["n_answered"] == 1 and info["n_failed"] == 2
    failures = {Path(f["audio_path"]).name: f["error"] for f in map(json.loads, (out / "failures.jsonl").read_text().splitlines())}
    assert failures[name(0)] == "SystemExit: 3" and failures[name(1)] == "timed out after 5 s"


def test_realtime_waits_for_an_answer_created_after_an_earlier_one_ended(real_dir, tmp_path, key_env):
    """A barge-in reply ends while the question goes on; the VAD then closes the turn and the server
    creates a second response whose audio starts only with the last chunk of the tail: the session
    waits for that answer instead of ending with the first one (both are kept, back to back)."""
    ami, end = sources(real_dir)["ami"]  # 2.48 s, the speech ends with the clip
    tail = 1.5
    total = round((ami.shape[1] + round(tail * TARGET_SR)) * 24000 / TARGET_SR) / 24000  # input + tail, 24 kHz samples
    csv_path = write_csv(tmp_path / "data", [(name(0), ami)])
    fake = RealtimeFake({name(0): Program("late", at_s=1.0, speech_end_s=end, late_s=total)},
                        answer_24k(real_dir)[:12000], KEY)  # 0.5 s answers
    out = tmp_path / "out"
    try:
        info = run_inference("openai-realtime", str(csv_path), out, progress=False,
                             agent_options={"base_url": fake.url, "tail_silence_s": str(tail), "vad_grace_s": "0.3",
                                            "max_wait_s": "60"})
    finally:
        fake.close()
    assert info["n_answered"] == 1
    r = records(out)[name(0)]
    assert r["onset_stream_s"] == pytest.approx(chunk_end_at_or_after(1.0), abs=1e-9)  # the first answer's onset
    assert r["answer_duration"] == pytest.approx(2 * 0.5, abs=1e-3)  # both answers' audio
    assert r["text"] == "hello therehello there" and r["finish_reason"] == "stop"
    assert fake.events[name(0)].count("input_audio_buffer.commit") == 0  # the VAD closed the turn: nothing forced


def test_realtime_close_after_a_receiver_error_does_not_wait_for_the_close_timeout(monkeypatch):
    """A malformed event stops the receiver while the server goes on sending (64 more events, more
    than websockets' default 16-frame queue). The connection is closed before the receiver is
    cancelled and its queue is unbounded, so the client keeps reading the socket and the closing
    handshake completes with the server's own close frame. Checked structurally, not by time: the
    client received that close frame (with a bounded queue the socket stops being read after 16
    frames, the close frame is never read and the close ends by its timeout, code 1006)."""
    import asyncio

    from fakes.server import LoopbackServer
    from spear_metrics.agents.duplex import AudioRequest, ProtocolError, run_session, session_config
    from spear_metrics.agents.openai_realtime import OpenAIRealtimeAgent, RealtimeConnection

    flooded = []

    async def handler(ws):
        async for msg in ws:
            ev = json.loads(msg)
            if ev["type"] == "session.update":
                await ws.send(json.dumps({"type": "session.updated", "session": ev["session"]}))
            elif ev["type"] == "input_audio_buffer.append" and not flooded:
                flooded.append(True)
                await ws.send("this is not json {")
                for _ in range(64):
                    await ws.send(json.dumps({"type": "input_audio_buffer.speech_started"}))

    closed = []
    abort = RealtimeConnection._abort

    async def spy(self):
        ws = self.ws
        await abort(self)
        if ws is not None:
            closed.append(ws)

    monkeypatch.setattr(RealtimeConnection, "_abort", spy)
    with LoopbackServer(handler, session_timeout_s=20) as srv:
        agent = OpenAIRealtimeAgent(base_url=srv.url("/v1/realtime"), api_key_env="none", tail_silence_s=0.0,
                                    connect_timeout_s=60, max_tries=1)
        request = AudioRequest(audio=np.zeros((1, 16_000), np.float32), sample_rate=16_000, row_id="flood")
        with pytest.raises(ProtocolError, match="malformed event"):
            asyncio.run(run_session(agent, request, session_config(agent)))
    assert flooded and len(closed) == 1
    ws = closed[0]
    assert ws.protocol.close_rcvd is not None and ws.protocol.close_rcvd.code == 1000  # the server's close frame was read
    assert ws.close_code == 1000
