"""``gemini-live`` and ``moshi`` through ``spearbench infer`` / ``fdb-infer`` against loopback fakes of
their public protocols (tests/fakes/), on SPEAR clips cut from real recordings with known speech
ends (the clips and CSV writer of test_adapters_openai).

The fakes are clocked by the samples they receive: the stream-clock onset is checked to one input
chunk of the fake's programmed time whatever the load; wall-clock onsets only with causal lower
bounds and generous upper bounds. Each fault fails its own row with a one-line reason while the
good rows of the same run are answered; no key or token reaches a file or the console.
"""

from __future__ import annotations

import asyncio
import base64
import csv
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from fakes.gemini_fake import FakeGeminiLive, GeminiScenario, normalized
from fakes.moshi_fake import FakeMoshi, MoshiScenario
from test_adapters_openai import name, records, sources, write_csv
from spear_datasets.audio import TARGET_SR, decode, load_audio, resample
from spear_metrics.agents.base import AgentError
from spear_metrics.agents.duplex import (
    AudioRequest,
    NetworkAgentBase,
    NoAnswerError,
    OutputChunk,
    OutputSink,
    ProtocolError,
    SessionConfig,
    SessionResult,
    TextEvent,
    session_config,
)
from spear_metrics.agents.gemini_live import GeminiLiveAgent, live_url, pcm_rate
from spear_metrics.agents.moshi import (
    FRAME_SAMPLES,
    MoshiAgent,
    OpusDecoder,
    OpusEncoder,
    chat_url,
    decode_message,
    frame_levels_dbfs,
)
from spear_metrics.cli import main

KEY = "AIza-test-FAKEKEY-0123456789abcdefXYZ"
TOKEN = "moshi-gateway-token-0123456789abcdef"
CHUNK_S = 0.040
FRAME_S = 0.080


@pytest.fixture
def keys(monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.setenv("MOSHI_TOKEN", TOKEN)


def p225_24k(real_dir: Path) -> np.ndarray:
    """The fakes' spoken answer: VCTK p225 'Ask her to bring these things...' (real speech), 24 kHz."""
    return load_audio(real_dir / "speechbrain__p225_002.wav", sr=24_000, channels="mix")[0]


def voiced_part(x: np.ndarray, dbfs: float = -30.0) -> np.ndarray:
    """``x`` from its first to its last 80 ms frame at or above ``dbfs`` (the recording's room tone cut)."""
    v = np.flatnonzero(frame_levels_dbfs(x) >= dbfs)
    return x[v[0] * FRAME_SAMPLES:(v[-1] + 1) * FRAME_SAMPLES]


def failures(out: Path) -> dict[str, str]:
    return {Path(f["audio_path"]).name: f["error"] for f in map(json.loads, (out / "failures.jsonl").read_text().splitlines())}


def secrets_absent(folder: Path, *secrets: str) -> None:
    for p in folder.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            for s in secrets:
                assert s.encode() not in data, f"a secret leaked into {p}"


def first_at_or_after(t: float, step: float) -> float:
    """The end of the ``step``-long input block holding input time ``t`` (a fake fires on it)."""
    return math.ceil(round(t * 48_000) / round(step * 48_000)) * step


# --------------------------------------------------------------------------- protocol pieces


def test_gemini_messages_are_the_sdks(keys):
    """The setup and realtimeInput messages carry the fields google-genai's live client writes (its
    own converters, names normalised to lowerCamelCase as the server's proto3 JSON parser reads them)."""
    pytest.importorskip("google.genai", reason="google-genai (the dev extra) is needed to compare with the SDK")
    from google.genai import Client, _common, types
    from google.genai import _live_converters as conv
    from google.genai import _transformers as t
    from google.genai.live import _t_live_connect_config

    agent = GeminiLiveAgent(model="gemini-2.5-flash-native-audio-preview-12-2025", voice="Puck", instructions="Be brief.",
                            vad="auto", vad_start_sensitivity="high", vad_end_sensitivity="low",
                            vad_prefix_padding_ms=40, vad_silence_ms=300)
    ours = agent.setup_message(AudioRequest(audio=np.zeros((2, 160), np.float32), sample_rate=16_000))
    client = Client(api_key=KEY)
    cfg = types.LiveConnectConfig(
        response_modalities=["AUDIO"], system_instruction="Be brief.", output_audio_transcription=types.AudioTranscriptionConfig(),
        speech_config=types.SpeechConfig(voice_config=types.VoiceConfig(prebuilt_voice_config=types.PrebuiltVoiceConfig(voice_name="Puck"))),
        realtime_input_config=types.RealtimeInputConfig(automatic_activity_detection=types.AutomaticActivityDetection(
            disabled=False, start_of_speech_sensitivity="START_SENSITIVITY_HIGH", end_of_speech_sensitivity="END_SENSITIVITY_LOW",
            prefix_padding_ms=40, silence_duration_ms=300)))
    model = t.t_model(client._api_client, agent.model)
    params = asyncio.run(_t_live_connect_config(client._api_client, cfg))
    sdk = _common.convert_to_dict(conv._LiveConnectParameters_to_mldev(
        api_client=client._api_client, from_object=types.LiveConnectParameters(model=model, config=params).model_dump(exclude_none=True)))
    del sdk["config"]
    assert normalized(ours) == normalized(sdk)
    # push-to-talk: automatic detection off, nothing else in it
    ptt = GeminiLiveAgent().setup_message(AudioRequest(audio=np.zeros((2, 160), np.float32), sample_rate=16_000))
    assert ptt["setup"]["realtimeInputConfig"] == {"automaticActivityDetection": {"disabled": True}}
    # realtimeInput payloads: the SDK's send_realtime_input serialisation
    for kw, ours_rt in [({"activity_start": {}}, {"activityStart": {}}), ({"activity_end": {}}, {"activityEnd": {}}),
                        ({"audio_stream_end": True}, {"audioStreamEnd": True}),
                        ({"audio": types.Blob(data=b"\x01\x00\xff\x7f", mime_type="audio/pcm;rate=16000")},
                         {"audio": {"data": "AQD/fw==", "mimeType": "audio/pcm;rate=16000"}})]:
        p = types.LiveSendRealtimeInputParameters.model_validate(kw)
        got = normalized(_common.encode_unserializable_types(
            _common.convert_to_dict(conv._LiveSendRealtimeInputParameters_to_mldev(from_object=p))))
        if "audio" in got:  # bytes: the SDK writes URL-safe base64, we write standard (proto3 JSON takes both)
            assert base64.urlsafe_b64decode(got["audio"].pop("data")) == base64.b64decode(ours_rt["audio"].pop("data"))
        assert got == ours_rt
    # the SDK's URL for the same base and version
    assert live_url("https://generativelanguage.googleapis.com", "v1beta") == (
        "wss://generativelanguage.googleapis.com/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent")


@pytest.mark.parametrize("compression", [False, True])
def test_live_websockets_offer_compression_only_when_asked(keys, compression):
    """gemini-live and moshi open their WebSocket without permessage-deflate, as openai-realtime does
    (audio barely compresses, deflating every chunk costs the client CPU); ``ws_compression=true``
    offers it. Checked on the extensions header the loopback server received in each handshake (the
    server then closes the session: the row fails)."""
    from fakes.server import LoopbackServer
    from spear_metrics.agents.duplex import run_session

    offered = []

    async def handler(ws):
        offered.append(ws.request.headers.get("Sec-WebSocket-Extensions"))
        await ws.close(1008, "refused after the handshake")

    with LoopbackServer(handler, session_timeout_s=20) as srv:
        agents = [GeminiLiveAgent(base_url=srv.url(""), max_tries=1, connect_timeout_s=60, ws_compression=compression),
                  MoshiAgent(url=srv.url("/api/chat"), max_tries=1, handshake_timeout_s=60, ws_compression=compression)]
        for agent in agents:
            request = AudioRequest(audio=np.zeros((1, 16_000), np.float32), sample_rate=16_000, row_id="ext")
            with pytest.raises(AgentError):
                asyncio.run(run_session(agent, request, session_config(agent)))
    assert len(offered) == 2
    for ext in offered:
        assert ("permessage-deflate" in ext) if compression else ext is None


def test_gemini_output_mime_types():
    assert pcm_rate("audio/pcm;rate=24000") == 24_000 and pcm_rate("audio/pcm; rate=16000") == 16_000
    assert pcm_rate("audio/pcm") == 24_000  # the documented output rate when none is named
    for bad in ("audio/wav", "audio/pcm;rate=abc", "audio/pcm;rate=0", None):
        with pytest.raises(ProtocolError):
            pcm_rate(bad)


def test_moshi_messages_and_urls():
    assert decode_message(b"\x00") == (0, b"") and decode_message(b"\x00" + bytes(8)) == (0, bytes(8))  # Python / Rust
    assert decode_message(b"\x02 hello") == (2, b" hello")
    for bad in (b"", b"\x09abc", "text frame"):
        with pytest.raises(ProtocolError):
            decode_message(bad)
    # the adapter's native chunk: one 80 ms frame unless the user names another (honoured)
    assert session_config(MoshiAgent(), chunk_ms=None).chunk_ms == 80.0
    assert session_config(MoshiAgent(), chunk_ms=40).chunk_ms == 40.0
    assert session_config(NetworkAgentBase()).chunk_ms == 40.0  # no native chunk: 40 ms
    assert chat_url("127.0.0.1:8998", {}) == "ws://127.0.0.1:8998/api/chat"
    assert chat_url("https://host.example/", {"text_seed": 3, "text_topk": None}) == "wss://host.example/api/chat?text_seed=3"
    assert chat_url("ws://h:1/api/chat?worker_auth_id=a", {"audio_seed": 1}) == "ws://h:1/api/chat?worker_auth_id=a&audio_seed=1"


def test_opus_round_trip_keeps_real_speech(real_dir):
    """80 ms frames of real speech through sphn's Ogg-Opus writer and reader (both ways of the
    protocol): the same number of frames back, in order, at the same rate and level. Opus is a
    perceptual codec, so the waveform comes back close, not equal: after its fixed delay (the
    pre-skip, ~154 samples at 24 kHz) the correlation measured 0.95 (p225), 0.90 (p226) and 0.86
    (the AMI stereo pair mixed, with its room noise); a dropped, repeated or reordered frame, a wrong
    rate or a lost channel would bring it near 0. The 80 ms level envelope follows within a few dB."""
    from scipy.signal import correlate

    for clip in ("speechbrain__p225_002.wav", "speechbrain__p226_002.wav",
                 "DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav"):
        x = load_audio(real_dir / clip, sr=24_000, channels="mix")[0][: 24_000 * 6]
        x = x[: len(x) // FRAME_SAMPLES * FRAME_SAMPLES]
        enc, dec = OpusEncoder(), OpusDecoder()
        y = np.concatenate([dec.decode(enc.encode(x[i:i + FRAME_SAMPLES])) for i in range(0, len(x), FRAME_SAMPLES)])
        assert len(y) == len(x)  # one decoded frame per frame sent
        xc = correlate(y, x, mode="full", method="fft")[len(x) - 1:len(x) + 400]  # lags 0..400
        best = int(np.argmax(xc))
        assert 140 <= best <= 160, best  # Opus's pre-skip: 312 samples at 48 kHz
        corr = np.corrcoef(y[best:], x[: len(x) - best])[0, 1]
        assert corr > 0.85, (clip, corr)
        lx, ly = frame_levels_dbfs(x[: len(x) - best]), frame_levels_dbfs(y[best:])
        assert np.corrcoef(lx, ly)[0, 1] > 0.98
    with pytest.raises(ProtocolError):
        d = OpusDecoder()
        d.decode(b"this is not an Ogg page")
        d.decode(OpusEncoder().encode(np.zeros(FRAME_SAMPLES, np.float32)))


# --------------------------------------------------------------------------- gemini-live


# limits no loaded machine reaches (every fake answers or closes); the row about max_wait_s (a
# server that never answers) runs alone under a short one: the same outcome at any load
GEMINI_OPTS = ["tail_silence_s=1.0", "max_wait_s=60", "connect_timeout_s=60", "max_tries=2"]


def _run(agent: str, csv_path: Path, out: Path, opts: list[str], *, chunk_ms: float | None, n: int, rc: int = 0) -> None:
    """``infer`` with ``opts`` as ``-a`` options; ``rc``: the exit status expected (1: rows failed, none answered)."""
    args = ["infer", "--agent", agent, "--data", str(csv_path), "--out", str(out), "--no-progress", "--concurrency", str(n)]
    if chunk_ms is not None:  # None: the adapter's own chunk
        args += ["--chunk-ms", str(chunk_ms)]
    for o in opts:
        args += ["-a", o]
    assert main(args) == rc


def test_gemini_live_auto_vad_onsets_barge_in_and_faults_in_one_run(real_dir, tmp_path, keys, capsys):
    src = sources(real_dir)
    clips = {k: v[0] for k, v in src.items()}
    es_end, ami_end = src["es"][1], src["ami"][1]
    answer = p225_24k(real_dir)
    plan = [
        ("es", GeminiScenario(answer, KEY, delay_s=0.5, speech_end_s=es_end)),  # answers 0.5 s after the speech
        ("ami", GeminiScenario(answer, KEY, delay_s=0.3, speech_end_s=ami_end)),
        ("es", GeminiScenario(answer, KEY, barge_in_s=2.0, speech_end_s=es_end)),  # barges in mid-question
        ("ami", GeminiScenario(answer, KEY, fault="refuse")),
        ("ami", GeminiScenario(answer, KEY, speech_end_s=ami_end, fault="drop")),
        ("ami", GeminiScenario(answer, KEY, speech_end_s=ami_end, fault="malformed")),
        ("ami", GeminiScenario(answer, KEY, speech_end_s=ami_end, fault="mute")),
        ("ami", GeminiScenario(answer, KEY, speech_end_s=ami_end, fault="bad_rate")),
        ("ami", GeminiScenario(answer, KEY, speech_end_s=ami_end, fault="goaway")),
        ("ami", GeminiScenario(answer, KEY, fault="echo_key")),
    ]
    mute = [6]  # never answers: alone, under a short max_wait_s
    main_rows = [k for k in range(len(plan)) if k not in mute]
    csv_path = write_csv(tmp_path / "data", [(name(k), clips[plan[k][0]]) for k in main_rows])
    mute_csv = write_csv(tmp_path / "data_mute", [(name(k), clips[plan[k][0]]) for k in mute])
    out, out_mute = tmp_path / "out", tmp_path / "out_mute"
    with FakeGeminiLive({name(k): p for k, (_, p) in enumerate(plan)}) as fake:
        _run("gemini-live", csv_path, out, [f"base_url={fake.url('')}", "vad=auto", *GEMINI_OPTS], chunk_ms=40,
             n=len(main_rows))
        _run("gemini-live", mute_csv, out_mute, [f"base_url={fake.url('')}", "vad=auto", *GEMINI_OPTS, "max_wait_s=1.5"],
             chunk_ms=40, n=len(mute), rc=1)
    assert fake.errors == []
    recs, fails, logs = records(out), {**failures(out), **failures(out_mute)}, fake.by_row()
    expect = {3: "answered HTTP 403", 4: "closed the connection mid-answer (the connection was lost without a close frame)",
              5: "malformed message from the server (not JSON)", 6: "no answer audio before max_wait_s ran out",
              7: "output audio changed format mid-session (16000 Hz x 1 ch after 24000 Hz x 1 ch)",
              8: "closed the connection after goAway (time left 0s) before answering (code 1000)",
              9: "during the session set-up (code 1008 (API key not valid: ***))"}
    assert set(fails) == {name(k) for k in expect}
    for k, why in expect.items():
        assert why in fails[name(k)] and "\n" not in fails[name(k)], (k, fails[name(k)])
    assert fake.connections[name(3)] == 1 and fake.connections[name(9)] == 1  # 403 / 1008: no retry
    meta = {Path(r["audio_path"]).name: r for r in csv.DictReader(open(out / "metadata.csv"))}
    # the fake's 16-bit PCM, resampled to 16 kHz and clipped to full scale as the answer WAV is written
    expected_pcm = np.clip(resample(np.round(np.clip(answer, -1, 1) * 32767)[None] / 32768, 24_000, TARGET_SR)[0], -1, 1)
    for k, at in ((0, es_end + 0.5), (1, ami_end + 0.3), (2, 2.0)):
        clip = clips[plan[k][0]]
        r, log = recs[name(k)], logs[name(k)]
        fired = first_at_or_after(at, CHUNK_S)
        assert log.answer_input_s == pytest.approx(fired, abs=1e-9)  # the fake's own clock: received samples
        # stream clock: not before the chunk that made the fake answer, at most one chunk after it
        assert fired - 1e-9 <= r["onset_stream_s"] <= fired + CHUNK_S + 1e-6, (k, r["onset_stream_s"], fired)
        # wall clock (SPEAR's onset): causal lower bound (that chunk went out at the start of its span), generous upper
        assert fired - CHUNK_S - 1e-6 <= r["onset_wall_s"] <= fired + 5.0 and r["onset"] == r["onset_wall_s"]
        q_end = clip.shape[1] / TARGET_SR
        assert float(meta[name(k)]["answer_start_time"]) == pytest.approx(r["onset"] - q_end, abs=1e-6)
        assert r["text"] == "Sure, I think so." and r["finish_reason"] == "stop"
        wav, sr = decode(out / r["answer_audio_path"])
        assert sr == TARGET_SR and abs(wav.shape[1] - len(expected_pcm)) <= 2
        assert np.abs(wav[0, 100:-100] - expected_pcm[100:-100]).max() < 2e-4
        # the wire: setup, 16 kHz PCM16 chunks of 40 ms (the last may be shorter), then audioStreamEnd
        assert log.setup["model"] == "models/gemini-2.5-flash-native-audio-preview-12-2025"
        assert log.setup["realtimeInputConfig"]["automaticActivityDetection"] == {"disabled": False}
        assert log.setup["generationConfig"]["responseModalities"] == ["AUDIO"]
        assert log.mime_types == {"audio/pcm;rate=16000"} and set(log.chunk_samples[:-1]) == {640}
        assert log.headers["x-goog-api-key"] == KEY and KEY not in log.path + log.query
        assert log.headers["x-client-request-id"] == name(k)
    assert float(meta[name(2)]["answer_start_time"]) < 0 and recs[name(2)]["response_time_s"] < 0  # a barge-in
    assert recs[name(0)]["onset_stream_s"] > clips["es"].shape[1] / TARGET_SR  # answered in the tail silence
    assert logs[name(0)].events[-1] == "audioStreamEnd"
    assert logs[name(0)].samples_in == clips["es"].shape[1] + 16_000  # the input and 1 s of tail silence
    info = json.loads((out / "run_info.json").read_text())
    assert info["n_answered"] == 3 and "wall clock" in info["onset_rule"]
    secrets_absent(out, KEY)
    secrets_absent(out_mute, KEY)
    seen = capsys.readouterr()
    assert KEY not in seen.out + seen.err


def test_gemini_live_push_to_talk(real_dir, tmp_path, keys):
    """SPEAR's form (default): activityStart, the input, activityEnd right after its last sample,
    no tail; the fake answers ``delay_s`` (wall clock) after activityEnd."""
    src = sources(real_dir)
    clips = {k: v[0] for k, v in src.items()}
    answer = p225_24k(real_dir)
    plan = [("es", GeminiScenario(answer, KEY, delay_s=0.6)), ("ami", GeminiScenario(answer, KEY, delay_s=0.2))]
    csv_path = write_csv(tmp_path / "data", [(name(k), clips[c]) for k, (c, _) in enumerate(plan)])
    out = tmp_path / "out"
    with FakeGeminiLive({name(k): p for k, (_, p) in enumerate(plan)}) as fake:
        _run("gemini-live", csv_path, out, [f"base_url={fake.url('')}", "voice=Puck", "max_wait_s=60"], chunk_ms=40, n=2)
    assert fake.errors == [] and not failures(out)
    recs, logs = records(out), fake.by_row()
    for k, (c, sc) in enumerate(plan):
        n = clips[c].shape[1]
        r, log = recs[name(k)], logs[name(k)]
        assert log.setup["realtimeInputConfig"] == {"automaticActivityDetection": {"disabled": True}}
        assert log.setup["generationConfig"]["speechConfig"] == {"voiceConfig": {"prebuiltVoiceConfig": {"voiceName": "Puck"}}}
        assert log.events[0] == "activityStart" and log.events[-1] == "activityEnd"
        assert set(log.events[1:-1]) == {"audio"} and log.samples_in == n  # the input exactly, no tail
        # the last chunk (and activityEnd after it) went out at the start of its span: causal lower bound
        last_send = (math.ceil(n / 640) - 1) * CHUNK_S
        assert last_send + sc.delay_s - 1e-6 <= r["onset_wall_s"] <= n / TARGET_SR + sc.delay_s + 5.0
        assert r["onset"] == r["onset_wall_s"] and r["onset_stream_s"] == pytest.approx(n / TARGET_SR, abs=1e-9)
        assert r["response_time_s"] == pytest.approx(r["onset_wall_s"] - n / TARGET_SR, abs=1e-6)


def test_an_answer_after_the_last_chunk_is_never_an_interruption_and_audio_before_the_input_fails():
    """A paced chunk goes out at the start of its span: the clip's last chunk (3.56-3.60 s) is sent at
    3.56 s. A push-to-talk answer at 3.58 s came after the system heard the whole input:
    ``response_time_s`` is 0, not -0.02 (the project's key; ``answer_start_time`` keeps the wall
    clock). One at 3.50 s, before that chunk went out, is an interruption (-0.10 s). Audio a server
    sends before the input starts answers none of it: the row fails, it is not stamped onset 0."""
    r = SessionResult(input_end_s=3.6, last_input_sent_s=3.56)
    assert r.response_time(3.58) == 0.0 and r.response_time(3.65) == pytest.approx(0.05)
    assert r.response_time(3.50) == pytest.approx(-0.10)
    r.first_audio_s = 3.58
    assert r.response_time_s == 0.0
    assert SessionResult(input_end_s=3.6).response_time(3.58) == pytest.approx(-0.02)  # never sent: no floor
    sink = OutputSink(16_000)
    with pytest.raises(ProtocolError, match="before the input started"):
        sink.audio(np.full(480, 0.1, np.float32), 24_000)
    sink.start()
    sink.audio(np.full(480, 0.1, np.float32), 24_000)
    assert len(sink.result.chunks) == 1


def test_gemini_live_settings_refused_up_front(monkeypatch, real_dir):
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    from spear_metrics.agents.net import MissingKeyError

    with pytest.raises(MissingKeyError, match="GEMINI_API_KEY and GOOGLE_API_KEY"):
        GeminiLiveAgent()
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    agent = GeminiLiveAgent()  # the SDK's other variable is taken too
    assert agent.key() == KEY and agent.tail_silence_s == 0.0
    # push-to-talk cannot answer within a time-synchronous (fdb-infer) session: one clear reason
    req = AudioRequest(audio=np.zeros((1, 1600), np.float32), sample_rate=16_000)
    with pytest.raises(AgentError, match="use -a vad=auto"):
        asyncio.run(agent.connect(req, OutputSink(16_000), SessionConfig(time_synchronous=True)))
    for bad in ({"vad": "push"}, {"onset_clock": "frames"}, {"base_url": "ftp://x"}, {"api_version": "v2"}):
        with pytest.raises(ValueError):
            GeminiLiveAgent(**bad)


# --------------------------------------------------------------------------- moshi


# limits no loaded machine reaches (every fake answers or closes); the rows about them run alone
# under short ones (MOSHI_SILENT): a server that never sends its handshake, one that never sends audio
MOSHI_OPTS = ["tail_silence_s=3.0", "handshake_timeout_s=60", "max_tries=2", "drain_s=30", "api_key_env=MOSHI_TOKEN",
              "seed=7", "text_prompt=You enjoy having a good conversation.", "max_concurrency=16"]  # the fake serves many
MOSHI_SILENT = {4: ["handshake_timeout_s=1.5"], 8: ["drain_s=1.0"]}  # row -> its short limit


def _timeline(levels: list[bool], chunk: int = 960) -> SessionResult:
    """A Moshi session's output timeline: 80 ms frames, loud (a 220 Hz tone at 0.1, about -23 dBFS)
    or digital silence, delivered in ``chunk``-sample pieces, piece ``k`` arriving at wall 0.5 + 0.04 k
    s and stream 0.04 k s; the input ended at wall 0.4 s."""
    t = np.arange(FRAME_SAMPLES) / 24_000
    x = np.concatenate([0.1 * np.sin(2 * np.pi * 220 * t) if loud else np.zeros(FRAME_SAMPLES) for loud in levels])
    chunks = [OutputChunk(x[a:a + chunk][None, :].astype(np.float32), 24_000, 0.5 + 0.04 * k, 0.04 * k)
              for k, a in enumerate(range(0, len(x), chunk))]
    return SessionResult(chunks=chunks, input_end_s=0.4)


def test_moshi_answer_rule_on_a_hand_built_timeline():
    """SPEAR's answer is picked out of the whole timeline (every frame, silence included): from the
    onset frame to the last loud frame. Frames 3, 4 and 6 are loud; the pieces are half frames, so
    frame 3 is completed by piece 7 (wall 0.78 s, stream 0.28 s). The default clock is the frame
    rule: output frame j at (j + 1) x 80 ms, so frame 3 at 0.32 s whatever its arrival."""
    levels = [False, False, False, True, True, False, True, False, False, False]
    r = _timeline(levels)
    x = np.concatenate([c.audio[0] for c in r.chunks])
    a = MoshiAgent().answer(r)  # onset=audio, frame clock
    assert a.onset == pytest.approx(0.32) and (a.first_audio_s, a.first_audio_input_s) == (pytest.approx(0.78), pytest.approx(0.28))
    assert a.response_time_s == pytest.approx(0.78 - 0.4) and a.sample_rate == 24_000
    assert np.array_equal(a.audio[0], x[3 * FRAME_SAMPLES:7 * FRAME_SAMPLES])  # frames 3-6: the gap at 5 kept, 7-9 cut
    assert MoshiAgent(onset_clock="wall").answer(r).onset == pytest.approx(0.78)
    assert MoshiAgent(onset_clock="stream").answer(r).onset == pytest.approx(0.28)
    assert MoshiAgent(onset_clock="frame", lead_frames=2).answer(r).onset == pytest.approx(0.40)
    # a token after piece 5 (2.5 frames in): the answer starts at the last whole frame before it, frame 1
    r.text_events.append(TextEvent(" Sure", 0.70, 0.20, after_chunks=5))
    for mode in ("text", "first"):
        a = MoshiAgent(onset=mode).answer(r)
        assert a.onset == pytest.approx(0.16) and np.array_equal(a.audio[0], x[1 * FRAME_SAMPLES:7 * FRAME_SAMPLES])
        assert a.text == "Sure"  # the token of frame 1, inside the answer (frames 1-6)
        assert MoshiAgent(onset=mode, onset_clock="stream").answer(r).onset == pytest.approx(0.20)
    # the same token after piece 9: the loud frame 3 (completed by piece 7) came first
    r.text_events[0] = TextEvent(" Sure", 0.86, 0.36, after_chunks=9)
    a = MoshiAgent(onset="first").answer(r)
    assert a.onset == pytest.approx(0.32) and np.array_equal(a.audio[0], x[3 * FRAME_SAMPLES:7 * FRAME_SAMPLES])
    with pytest.raises(NoAnswerError, match=r"stayed silent \(no output frame at or above -40 dBFS\)"):
        MoshiAgent().answer(_timeline([False] * 6))
    with pytest.raises(NoAnswerError, match="the server sent no output audio"):
        MoshiAgent().answer(SessionResult())
    assert MoshiAgent().onset(_timeline([False] * 6)) is None


def test_moshi_onsets_barge_in_and_faults_in_one_run(real_dir, tmp_path, keys, capsys):
    src = sources(real_dir)
    clips = {k: v[0] for k, v in src.items()}
    es_end, ami_end = src["es"][1], src["ami"][1]
    answer = voiced_part(p225_24k(real_dir))
    plan = [
        ("es", MoshiScenario(answer, delay_s=0.5, speech_end_s=es_end)),  # answers in the tail silence
        ("ami", MoshiScenario(answer, delay_s=0.3, speech_end_s=ami_end)),
        ("es", MoshiScenario(answer, barge_in_s=2.0)),  # barges in mid-question
        ("ami", MoshiScenario(answer, fault="refuse")),
        ("ami", MoshiScenario(answer, fault="no_handshake")),
        ("ami", MoshiScenario(answer, speech_end_s=ami_end, delay_s=0.1, fault="drop")),
        ("ami", MoshiScenario(answer, speech_end_s=ami_end, delay_s=0.1, fault="malformed")),
        ("ami", MoshiScenario(answer, speech_end_s=ami_end, delay_s=0.1, fault="error")),
        ("ami", MoshiScenario(answer, fault="mute")),
        ("ami", MoshiScenario(answer, fault="silent")),
    ]
    main_rows = [k for k in range(len(plan)) if k not in MOSHI_SILENT]
    csv_path = write_csv(tmp_path / "data", [(name(k), clips[plan[k][0]]) for k in main_rows])
    out = tmp_path / "out"
    with FakeMoshi({name(k): p for k, (_, p) in enumerate(plan)}) as fake:
        _run("moshi", csv_path, out, [f"url={fake.url('/api/chat')}", *MOSHI_OPTS], chunk_ms=None, n=len(main_rows))
        for k, short in MOSHI_SILENT.items():
            one = write_csv(tmp_path / f"data_{k}", [(name(k), clips[plan[k][0]])])
            _run("moshi", one, tmp_path / f"out_{k}", [f"url={fake.url('/api/chat')}", *MOSHI_OPTS, *short], chunk_ms=None, n=1, rc=1)
    assert fake.errors == []
    fails = failures(out)
    for k in MOSHI_SILENT:
        fails.update(failures(tmp_path / f"out_{k}"))
    recs, logs = records(out), fake.by_row()
    expect = {3: "answered HTTP 403", 4: "gave up after 2 tries: the 0x00 handshake from",
              5: "closed the connection mid-answer (the connection was lost without a close frame)",
              6: "undecodable Ogg-Opus audio from the server", 7: "server error: model overloaded (Bearer ***",
              8: "the server sent no output audio",
              9: "the system stayed silent (no output frame at or above -40 dBFS)"}
    assert set(fails) == {name(k) for k in expect}
    for k, why in expect.items():
        assert why in fails[name(k)] and "\n" not in fails[name(k)], (k, fails[name(k)])
    assert fake.connections[name(3)] == 1 and fake.connections[name(4)] == 2  # 403 at once; a silent server retried
    meta = {Path(r["audio_path"]).name: r for r in csv.DictReader(open(out / "metadata.csv"))}
    ref = resample(answer[None], 24_000, TARGET_SR)[0]
    for k, at in ((0, es_end + 0.5), (1, ami_end + 0.3), (2, 2.0)):
        clip = clips[plan[k][0]]
        r, log = recs[name(k)], logs[name(k)]
        fired = first_at_or_after(at, FRAME_S)  # the fake decides on whole 80 ms frames received
        assert log.answer_input_s == pytest.approx(fired, abs=1e-9)
        assert fired - 1e-9 <= r["onset_stream_s"] <= fired + FRAME_S + 1e-6, (k, r["onset_stream_s"], fired)
        assert fired - FRAME_S - 1e-6 <= r["onset_wall_s"] <= fired + 5.0
        # moshi's default clock, the frame rule: output frame j at (j + 1) x 80 ms (the first loud frame
        # is the fake's answer frame or the next, by the speech's first 80 ms)
        at = (log.answer_frame + 1) * FRAME_S
        assert r["onset"] == pytest.approx(at, abs=1e-9) or r["onset"] == pytest.approx(at + FRAME_S, abs=1e-9)
        assert r["frames_received"] == r["frames_expected"] == log.frames_out
        q_end = clip.shape[1] / TARGET_SR
        assert float(meta[name(k)]["answer_start_time"]) == pytest.approx(r["onset"] - q_end, abs=1e-6)
        assert r["text"] == "Sure, I think so."
        # the answer: from its first to its last voiced frame, the fake's speech through Opus both ways
        wav, sr = decode(out / r["answer_audio_path"])
        assert abs(wav.shape[1] - len(ref)) <= 2 * FRAME_SAMPLES * 2 // 3
        m = min(wav.shape[1], len(ref)) - 400
        corr = max(np.corrcoef(wav[0, lag:lag + m], ref[:m])[0, 1] for lag in range(0, 300))
        assert corr > 0.9, (k, corr)
        assert log.path == "/api/chat" and log.query == "seed=7&text_seed=7&audio_seed=7&text_prompt=You+enjoy+having+a+good+conversation."
        assert log.headers["authorization"] == f"Bearer {TOKEN}" and log.headers["x-client-request-id"] == name(k)
    assert float(meta[name(2)]["answer_start_time"]) < 0 and recs[name(2)]["response_time_s"] < 0
    assert recs[name(0)]["onset_stream_s"] > clips["es"].shape[1] / TARGET_SR
    # the client sent whole 80 ms frames: the input and the tail, the last one zero-padded
    es_n24 = round(clips["es"].shape[1] * 1.5) + round(3.0 * 24_000)
    assert logs[name(0)].frames_in == math.ceil(es_n24 / FRAME_SAMPLES)
    info = json.loads((out / "run_info.json").read_text())
    assert info["chunk_ms"] == 80.0  # no --chunk-ms: moshi's own frame
    assert info["concurrency"] == len(main_rows)  # under the raised max_concurrency: as asked
    secrets_absent(out, KEY, TOKEN)
    for k in MOSHI_SILENT:
        secrets_absent(tmp_path / f"out_{k}", KEY, TOKEN)
    seen = capsys.readouterr()
    assert TOKEN not in seen.out + seen.err


def test_moshi_ends_its_tail_once_the_answer_is_complete(real_dir, tmp_path, keys):
    """SPEAR: the default 10 s tail stops once 2 s (end_silence_s) of quiet output frames followed the
    answer's last loud frame; checked by the input frames the fake received (its own count): at least
    up to the 25th quiet frame after the answer (one frame of Opus alignment either way), fewer than
    the whole tail. The answer is the fake's speech, as with the whole tail."""
    ami, ami_end = sources(real_dir)["ami"]
    answer = voiced_part(p225_24k(real_dir))[: 15 * FRAME_SAMPLES]  # 1.2 s of speech
    csv_path = write_csv(tmp_path / "data", [(name(0), ami)])
    out = tmp_path / "out"
    with FakeMoshi({name(0): MoshiScenario(answer, delay_s=0.3, speech_end_s=ami_end)}) as fake:
        _run("moshi", csv_path, out, [f"url={fake.url('/api/chat')}", "handshake_timeout_s=60", "drain_s=30"],
             chunk_ms=None, n=1)
    assert fake.errors == [] and not failures(out)
    (log,) = fake.sessions
    whole = math.ceil((round(ami.shape[1] * 1.5) + 10 * 24_000) / FRAME_SAMPLES)  # the input and the 10 s tail
    last_loud_out = log.answer_frame + len(answer) // FRAME_SAMPLES - 1  # output frame j answers input frame j + 1
    assert last_loud_out + 1 + 25 - 1 <= log.frames_in < whole - 25, (log.frames_in, last_loud_out, whole)
    r = records(out)[name(0)]
    wav, _ = decode(out / r["answer_audio_path"])
    ref = resample(answer[None], 24_000, TARGET_SR)[0]
    assert abs(wav.shape[1] - len(ref)) <= 2 * FRAME_SAMPLES * 2 // 3
    m = min(wav.shape[1], len(ref)) - 400
    assert max(np.corrcoef(wav[0, lag:lag + m], ref[:m])[0, 1] for lag in range(0, 300)) > 0.9


def test_moshi_fdb_infer_writes_the_reply_channel(fdb_dir, real_dir, tmp_path, keys, capsys):
    """``fdb-infer --agent moshi``: the session lasts the stimulus; the reply channel is laid out as FDB's
    own Moshi client writes it: one 80 ms frame of zeros, then every output frame back to back, silence
    included (FDB's pause-handling stimulus, the fake answering 0.4 s after the end of the speech it hears,
    each output frame three input frames late: placed by arrival it would sit two frames later)."""
    root = tmp_path / "fdb"
    shutil.copytree(fdb_dir / "example_data" / "pause_handling_example", root / "pause_handling")
    stim = root / "pause_handling" / "1" / "input.wav"
    (root / "pause_handling" / "1" / "output.wav").unlink()
    (root / "pause_handling" / "1" / "output.json").unlink()
    answer = voiced_part(p225_24k(real_dir))
    with FakeMoshi({}, default=MoshiScenario(answer, delay_s=0.4, lag_frames=3)) as fake:
        assert main(["fdb", "infer", "--agent", "moshi", "--root", str(root), "--no-asr", "--no-progress", "--concurrency", "4",
                     "-a", f"url={fake.url('/api/chat')}", "-a", "handshake_timeout_s=60"]) == 0
    assert fake.errors == []
    info = json.loads((root / "pause_handling" / ".spearbench-fdb-infer" / "run_info.json").read_text())
    assert info["chunk_ms"] == 80.0 and info["concurrency"] == 1  # moshi's own frame; one session at a time
    note = [x for x in capsys.readouterr().err.splitlines() if "note:" in x]
    # a server three frames late answers two frames fewer than Kyutai's (lead_frames=1): a reply that is
    # not complete, said per sample and on the console
    assert note == ["spearbench fdb infer: note: moshi: --concurrency 4 lowered to 1: the adapter serves at most 1 "
                    "session at a time (its max_concurrency)",
                    "spearbench fdb infer: note: 1 reply channel(s) are missing output frames (the server fell behind "
                    "or stopped early; see the note of each sample in each task folder's .spearbench-fdb-infer/rank-0.jsonl)"]
    assert info["n_incomplete"] == 1
    (log,) = fake.sessions
    (rec,) = [r for r in map(json.loads, (root / "pause_handling" / ".spearbench-fdb-infer" / "rank-0.jsonl").read_text().splitlines())
              if r.get("status") in ("ok", "failed")]  # the row journal also logs each start
    assert rec["status"] == "ok" and (rec["frames_received"], rec["frames_expected"]) == (log.frames_out, log.frames_in - 1)
    assert rec["note"] == (f"reply incomplete: {log.frames_out} of {log.frames_in - 1} output frames arrived; "
                           "the rest of the reply channel is silence")
    x, sr_in = decode(stim)
    y, sr = decode(root / "pause_handling" / "1" / "output.wav")
    assert sr == sr_in and y.shape[1] == x.shape[1]  # time-synchronous with the stimulus
    frame = round(FRAME_S * sr)
    levels = frame_levels_dbfs(y[0], frame)
    voiced = np.flatnonzero(levels >= -40)
    assert log.answer_input_s is not None and voiced.size
    # frame for frame: output frame j is at (j + 1) x 80 ms whatever its arrival time, so the fake's first
    # answer frame lands exactly there (no load can move it); before it one frame of zeros, then faint noise
    assert voiced[0] == log.answer_frame + 1
    assert np.isneginf(levels[0]) and levels[1: voiced[0] - 1].max() < -55
    # every input frame went out (the last one zero-padded, as FDB's client does), each answered by the fake
    assert log.frames_in == math.ceil(round(x.shape[1] * 24_000 / sr_in) / FRAME_SAMPLES)
    assert log.frames_out == log.frames_in - 3
    assert info["timeline"] == "frame_synchronous"


def _spear_gemini_setup_restated(model: str, instruction: str, temp: float = 0.7) -> dict:
    """SPEAR's Gemini proxy session (``bin/llm_proxies/gemini-*.py`` ``_configure_session`` and
    ``get_reply_with_audio`` of thomasthebaud/SPEAR-benchmark-code), re-stated from reading it."""
    default = ("You are participating in a natural spoken conversation.\n"
               "The user audio is being streamed to you in real time from a file.\n"
               "Answer when it feels natural, including before the entire audio file has finished if appropriate.\n"
               "Keep responses conversational and concise.")
    text = f"{default}\n\n{instruction}" if instruction and instruction != "None" else default
    return {"setup": {"model": f"models/{model}",
                      "generationConfig": {"responseModalities": ["AUDIO"], "temperature": temp},
                      "systemInstruction": {"parts": [{"text": text}]},
                      "inputAudioTranscription": {}, "outputAudioTranscription": {},
                      "realtimeInputConfig": {"automaticActivityDetection": {"disabled": True},
                                              "activityHandling": "START_OF_ACTIVITY_INTERRUPTS",
                                              "turnCoverage": "TURN_INCLUDES_ONLY_ACTIVITY"}}}


@pytest.mark.parametrize("instruction", ["", "Answer in English."])
def test_gemini_spear_profile_is_spears_proxy_session(keys, instruction):
    """-a profile=spear: the setup message equals SPEAR's proxy's, field for field, with and
    without a run prompt; vad=auto is refused with it; the default profile is unchanged."""
    req = AudioRequest(audio=np.zeros((2, 160), np.float32), sample_rate=16_000, instructions=instruction or None)
    for model in ("gemini-2.5-flash-native-audio-preview-12-2025", "gemini-3.1-flash-live-preview"):
        got = GeminiLiveAgent(model=model, profile="spear").setup_message(req)
        assert got == _spear_gemini_setup_restated(model, instruction)
    with pytest.raises(ValueError, match="vad=ptt"):
        GeminiLiveAgent(profile="spear", vad="auto")
    plain = GeminiLiveAgent().setup_message(req)["setup"]
    assert "temperature" not in plain["generationConfig"] and "inputAudioTranscription" not in plain


@pytest.mark.parametrize("fault", ["turn_first", "late_audio"])
def test_gemini_spear_profile_ends_the_answer_as_spears_proxy(keys, real_dir, fault):
    """-a profile=spear ends the answer as SPEAR's Gemini proxy (``get_reply_with_audio``): a
    ``turnComplete`` before any audio does not end the wait, and after ``turnComplete`` what
    arrives until 1 s of quiet belongs to the answer (turn_first: the whole answer, not nothing;
    late_audio: the answer plus the chunk sent after turnComplete); a model turn's text part joins
    the answer's text after that message's transcription. ``activityEnd`` comes after the last
    audio chunk, once (SPEAR's proxy: one 40 ms chunk period after it)."""
    from fakes.gemini_fake import FakeGeminiLive, GeminiScenario
    from spear_metrics.agents.duplex import run_session

    answer = p225_24k(real_dir)[: 24_000]  # 1 s of real speech
    sc = GeminiScenario(answer, KEY, delay_s=0.0, chunk_s=0.1, fault=fault, text_part="(thinking) ")
    clip = load_audio(real_dir / "speechbrain__p225_002.wav", sr=16_000, channels="mix")[0][: 8_000]
    with FakeGeminiLive({}, sc) as fake:
        agent = GeminiLiveAgent(base_url=fake.url(""), profile="spear", max_tries=1, connect_timeout_s=60)
        req = AudioRequest(audio=clip[None, :], sample_rate=16_000, row_id="spear")
        res = asyncio.run(run_session(agent, req, session_config(agent, chunk_ms=40)))
    assert fake.errors == []
    got = sum(c.audio.shape[-1] for c in res.chunks)
    extra = 2_400 if fault == "late_audio" else 0  # the late chunk: 0.1 s at 24 kHz
    assert got == len(answer) + extra and res.finish_reason == "stop"
    # the answer's text as SPEAR's proxy joins it: each message's transcription, then its text parts
    assert res.text == "Sure, (thinking) I think so."
    (log,) = fake.sessions
    assert log.events[0] == "activityStart" and log.events[-1] == "activityEnd" and log.events.count("activityEnd") == 1
    assert log.samples_in == len(clip)


@pytest.mark.parametrize("name", ["speechbrain__p225_002.wav", "faster-whisper__stereo_diarization.wav"])
def test_gemini_spear_profile_sends_the_pcm_of_spears_proxy(real_dir, name):
    """-a profile=spear turns the input into the bytes SPEAR's Gemini proxies stream
    (``_read_audio_as_pcm16``, re-stated here from reading it): soundfile float32, channels
    averaged, linear interpolation to 16 kHz (48 kHz VCTK), clipped, x 32767 truncated to int16
    (a 16 kHz stereo clip: no resampling, only the mix and the truncation)."""
    import soundfile as sf

    from spear_metrics.agents.gemini_live import spear_input, spear_pcm16_bytes

    audio, sr = sf.read(real_dir / name, dtype="float32", always_2d=True)

    def upstream_pcm16(samples: np.ndarray, rate: int) -> bytes:
        x = np.mean(samples, axis=1).astype(np.float32, copy=False)
        if x.size and rate != 16_000:
            n = max(1, round(x.shape[0] * 16_000 / rate))
            x = np.interp(np.linspace(0, x.shape[0] - 1, num=n), np.arange(x.shape[0]), x).astype(np.float32)
        return (np.clip(x, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()

    req = AudioRequest(audio=np.ascontiguousarray(audio.T), sample_rate=sr)
    ours = spear_pcm16_bytes(spear_input(req.mono(), sr))
    assert ours == upstream_pcm16(audio, sr)
    assert len(ours) == 2 * round(audio.shape[0] * 16_000 / sr)
