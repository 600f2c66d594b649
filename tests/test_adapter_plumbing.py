"""The pieces under the network adapters, on hand-computed inputs: retries and backoff (a recorded
sleep, no clock), Retry-After, key masking, the playback buffer of FDB replies, the sink's clocks."""

from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest

from spear_metrics.agents.duplex import (
    NetworkAgentBase,
    OutputChunk,
    OutputSink,
    ProtocolError,
    SessionResult,
    frame_synchronous_timeline,
    playback_timeline,
    reply_timeline,
)
from spear_metrics.agents.net import (
    MissingKeyError,
    NetError,
    RetryPolicy,
    api_key,
    http_error,
    mask_secrets,
    parse_retry_after,
    row_deadline,
    with_retries,
)


def run(coro):
    return asyncio.run(coro)


def test_retries_honour_retry_after_then_back_off_with_jitter_and_stop():
    slept: list[float] = []

    async def sleep(s):
        slept.append(s)

    answers = [http_error(429, "slow down", {"Retry-After": "7"}), http_error(503, "busy", {}),
               http_error(502, "", {}), "ok"]

    async def call():
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    assert run(with_retries(call, RetryPolicy(max_tries=4, base_delay_s=0.5), rng=random.Random(0), sleep=sleep)) == "ok"
    assert slept[0] == 7.0  # the server's Retry-After, as given
    assert 0.0 <= slept[1] <= 1.0 and 0.0 <= slept[2] <= 2.0  # full jitter under 0.5 * 2**k
    # non-retryable: at once, one try
    calls = []

    async def refused():
        calls.append(1)
        raise http_error(401, "bad key", {})

    with pytest.raises(NetError, match="HTTP 401"):
        run(with_retries(refused, RetryPolicy(max_tries=5), sleep=sleep))
    assert len(calls) == 1
    # always 429: gives up after max_tries with the last reason kept
    calls.clear()

    async def busy():
        calls.append(1)
        raise http_error(429, "rate limited", {"Retry-After": "0"})

    with pytest.raises(NetError, match=r"gave up after 3 tries: server answered HTTP 429: rate limited"):
        run(with_retries(busy, RetryPolicy(max_tries=3), sleep=sleep))
    assert len(calls) == 3


def test_a_retry_after_beyond_the_row_time_limit_fails_at_once_naming_the_429():
    """Sleeping past the row's limit would only end as "timed out after N s": the reason must
    say the server rate-limited the row, at once, without the sleep."""
    slept: list[float] = []
    calls: list[int] = []

    async def sleep(s):
        slept.append(s)

    def limited(after: str):
        async def call():
            calls.append(1)
            if len(calls) == 1:
                raise http_error(429, "slow down", {"Retry-After": after})
            return "ok"
        return call

    async def in_row(call, limit_s=44.0):
        async with row_deadline(limit_s):
            return await with_retries(call, RetryPolicy(max_tries=4, max_delay_s=30.0), sleep=sleep)

    with pytest.raises(NetError, match=r"^rate limited \(HTTP 429, Retry-After 86400 s beyond the row time limit\): "
                                       r"server answered HTTP 429: slow down$"):
        run(in_row(limited("86400")))
    assert calls == [1] and slept == []
    calls.clear()
    assert run(in_row(limited("7"))) == "ok" and slept == [7.0]  # within the limit: waited as asked
    calls.clear()
    slept.clear()
    assert run(with_retries(limited("86400"), RetryPolicy(max_tries=4, max_delay_s=30.0), sleep=sleep)) == "ok"
    assert slept == [30.0]  # outside a row: the policy's cap, as before


def test_retry_after_forms_and_caps():
    assert parse_retry_after("2.5") == 2.5 and parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412480.0 - 30) == pytest.approx(30.0)
    assert RetryPolicy(max_delay_s=10).delay(0, 3600.0, random.Random(0)) == 10.0
    assert http_error(404, "").retryable is False and http_error(500, "").retryable is True


def test_keys_come_from_the_environment_and_never_show(monkeypatch):
    monkeypatch.delenv("SPEARBENCH_TEST_KEY", raising=False)
    with pytest.raises(MissingKeyError, match="SPEARBENCH_TEST_KEY is not set"):
        api_key("SPEARBENCH_TEST_KEY")
    monkeypatch.setenv("SPEARBENCH_TEST_KEY", "sk-live-abcdefghijklmnop")
    assert api_key("SPEARBENCH_TEST_KEY") == "sk-live-abcdefghijklmnop"
    e = NetError("server said: Incorrect API key provided: sk-live-abcdefghijklmnop.")
    assert "sk-live" not in str(e) and "***" in str(e)
    assert mask_secrets("Authorization: Bearer tok_987654321") == "Authorization: Bearer ***"
    # the token ends where a bracket closes: the bracket stays (a server echoing the header in parentheses)
    assert mask_secrets("model overloaded (Bearer tok_987654321)") == "model overloaded (Bearer ***)"
    assert mask_secrets("[Bearer tok_1], {Bearer tok_2} <Bearer tok_3>") == "[Bearer ***], {Bearer ***} <Bearer ***>"
    assert mask_secrets("'Bearer tok_4'; x") == "'Bearer ***'; x"


def _chunk(value: float, n: int, received_s: float, sr: int = 1000) -> OutputChunk:
    return OutputChunk(np.full((1, n), value, np.float32), sr, received_s, received_s)


def test_playback_buffer_places_chunks_at_arrival_or_behind_the_one_playing():
    # 1 kHz for easy counting: chunk A (100 samples) arrives at 0.20 s, B at 0.25 s (while A plays:
    # queued to 0.30 s), C at 0.60 s (after a gap: played on arrival), D at 0.95 s (cut at the end).
    r = SessionResult(chunks=[_chunk(0.1, 100, 0.20), _chunk(0.2, 100, 0.25), _chunk(0.3, 100, 0.60),
                              _chunk(0.4, 100, 0.95)])
    y = playback_timeline(r, 1000, 1000)
    assert y.shape == (1000,)
    assert not y[:200].any() and (y[200:300] == np.float32(0.1)).all() and (y[300:400] == np.float32(0.2)).all()
    assert not y[400:600].any() and (y[600:700] == np.float32(0.3)).all()
    assert not y[700:950].any() and (y[950:] == np.float32(0.4)).all()
    assert not playback_timeline(SessionResult(), 50, 1000).any()  # no reply: silence of the input's length


def test_frame_synchronous_timeline_ignores_arrival_times():
    # FDB's Moshi rule: the same chunks back to back from the lead (80 ms), whatever their arrival:
    # A at 80-180 ms, B at 180-280, C at 280-380, D at 380-480 (the gaps of the playback buffer gone)
    r = SessionResult(chunks=[_chunk(0.1, 100, 0.20), _chunk(0.2, 100, 0.25), _chunk(0.3, 100, 0.60),
                              _chunk(0.4, 100, 0.95)])
    y = frame_synchronous_timeline(r, 1000, 1000, lead_s=0.08)
    assert not y[:80].any() and (y[80:180] == np.float32(0.1)).all() and (y[180:280] == np.float32(0.2)).all()
    assert (y[280:380] == np.float32(0.3)).all() and (y[380:480] == np.float32(0.4)).all() and not y[480:].any()
    assert np.array_equal(frame_synchronous_timeline(r, 300, 1000, lead_s=0.08), y[:300])  # cut at the input's end
    # the adapter picks its rule
    agent = NetworkAgentBase()
    assert np.array_equal(reply_timeline(agent, r, 1000, 1000), playback_timeline(r, 1000, 1000))
    agent.timeline, agent.timeline_lead_s = "frame_synchronous", 0.08
    assert np.array_equal(reply_timeline(agent, r, 1000, 1000), y)
    agent.timeline = "whenever"
    with pytest.raises(ValueError, match="unknown timeline rule"):
        reply_timeline(agent, r, 1000, 1000)


def test_sink_stamps_both_clocks_and_refuses_a_format_change():
    t = [100.0]
    sink = OutputSink(16000, clock=lambda: t[0])
    sink.start()
    sink.sent(16000)  # 1 s of input sent
    t[0] = 101.25
    sink.pcm16(np.array([1000, -1000], "<i2").tobytes(), 24000)
    r = sink.result
    assert r.first_audio_s == pytest.approx(1.25) and r.first_audio_input_s == 1.0
    assert r.chunks[0].audio[0, 0] == pytest.approx(1000 / 32768)
    # text is stamped like audio: both clocks, and its place among the audio chunks
    sink.sent(8000)
    t[0] = 101.75
    sink.text("Sure")
    sink.text("")  # an empty delta is no event
    (ev,) = r.text_events
    assert (ev.text, ev.received_s, ev.input_sent_s, ev.after_chunks) == ("Sure", pytest.approx(1.75), 1.5, 1)
    assert sink.finished().text == "Sure"
    with pytest.raises(ProtocolError, match="odd length"):
        sink.pcm16(b"\x00\x01\x02", 24000)
    with pytest.raises(ProtocolError, match="changed format"):
        sink.audio(np.zeros(10, np.float32), 16000)


def test_playback_buffer_resamples_back_to_back_chunks_as_one_signal(real_dir):
    """Real speech (VCTK p225) at 24 kHz arriving as 100 ms deltas faster than real time plays back
    to back from its first arrival: the 16 kHz reply channel is the whole answer resampled once
    (no filter transients at the 100 ms boundaries), placed at that arrival; a later delta after a
    gap starts a new run at its own arrival."""
    from spear_datasets.audio import load_audio, resample

    x = load_audio(real_dir / "speechbrain__p225_002.wav", sr=24_000, channels="mix")[0]
    chunks = [OutputChunk(x[None, a : a + 2400], 24_000, 0.5, 0.0) for a in range(0, x.size, 2400)]
    gap_at = 0.5 + x.size / 24_000 + 1.0  # a second answer 1 s after the first one ended
    chunks.append(OutputChunk(x[None, :2400], 24_000, gap_at, 0.0))
    n = round((gap_at + 0.5) * 16_000)
    y = playback_timeline(SessionResult(chunks=chunks), n, 16_000)
    whole = resample(x[None, :], 24_000, 16_000)[0]
    np.testing.assert_array_equal(y[8000 : 8000 + whole.size], whole)
    assert not y[:8000].any()
    start = round(gap_at * 16_000)
    assert not y[8000 + whole.size : start].any()
    np.testing.assert_array_equal(y[start : start + 1600], resample(x[None, :2400], 24_000, 16_000)[0])


def test_onset_rules_are_declared_recorded_and_marked(monkeypatch):
    """Every adapter states how it places its answer (``onset_kind``); the results card says it, and
    a comparison of runs with different rules carries a note naming them and their row counts."""
    from spear_metrics.agents.cascade import CascadeAgent
    from spear_metrics.agents.moshi import MoshiAgent
    from spear_metrics.agents.openai_audio import OpenAIAudioAgent
    from spear_metrics.agents.qwen_omni import QwenOmniAgent
    from spear_metrics.agents.reference import FixedDelayAgent, HumanAgent
    from spear_metrics.core.onset import ONSET_KINDS, mixed_onset_note, onset_kind
    from spear_metrics.results.write import card_text

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert onset_kind(MoshiAgent()) == "frame" and onset_kind(MoshiAgent(onset_clock="wall")) == "first_audio"
    assert onset_kind(OpenAIAudioAgent()) == "question_end" and onset_kind(QwenOmniAgent) == "first_text_token"
    assert onset_kind(CascadeAgent()) == "question_end" and onset_kind(CascadeAgent(think_s=0.5)) == "fixed_delay"
    assert onset_kind(HumanAgent()) == "reference" and onset_kind(FixedDelayAgent()) == "fixed_delay"
    assert onset_kind(object()) == "unstated" and set(ONSET_KINDS) >= {"first_audio", "frame", "question_end"}
    assert mixed_onset_note(["frame", "frame"]) is None
    assert mixed_onset_note(["question_end", "first_audio", "question_end"]) == (
        "onset rules differ: first_audio (1), question_end (2): answer_start_time, latency_ms and the "
        "interruption keys are not comparable across them")
    card = card_text({"onset_kind": "frame", "metrics": []}, model_name="m", inference_mode="streaming",
                     open_weights=True, split="test", n_rows=1, audio_cols=())
    assert "- onset rule (`answer_start_time`, `latency_ms`): `frame`: full duplex, frame-synchronous" in card
    assert "onset_kind: frame" in card


@pytest.mark.parametrize("rate", [0, -24000, "24k", 10 ** 9])
def test_an_output_rate_a_server_cannot_mean_is_a_protocol_error(rate):
    """A server that labels its audio 0 Hz (a Gemini mimeType "audio/pcm;rate=0") divided the
    audio's length by zero (ZeroDivisionError, not the session's one-line ProtocolError); a
    negative or absurd rate reached the resampler. Each is a ProtocolError naming the rate."""
    sink = OutputSink(16000, live=True)
    with pytest.raises(ProtocolError, match="output audio at"):
        sink.audio(np.full(480, 0.1, np.float32), rate)
    with pytest.raises(ProtocolError, match="output audio at"):
        sink.pcm16(b"\x00\x01" * 480, rate)
    sink.audio(np.full(480, 0.1, np.float32), 24000)  # a real rate still goes through
    assert sink.result.chunks[0].sample_rate == 24000
