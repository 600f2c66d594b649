"""Size limits and total deadlines on everything a network session receives, and the messages
that name the real cause (issue: "nothing a server, judge or file sends can hang a run, exhaust
memory, crash it or enter a mean silently"). Every server here is a loopback fake on 127.0.0.1."""

from __future__ import annotations

import asyncio
from http import HTTPStatus

import numpy as np
import pytest

from spear_datasets.audio import MAX_DURATION_S
from spear_datasets.schema import MAX_TEXT_CHARS
from spear_metrics.agents.base import AgentError
from spear_metrics.agents.duplex import AudioRequest, OutputSink, ProtocolError, run_session, session_config
from spear_metrics.agents.websocket import MAX_FRAME_BYTES


def _zeros(n: int) -> np.ndarray:
    """``n`` float32 zeros without allocating them (a zero-stride view): a sink keeps views as they are."""
    return np.broadcast_to(np.zeros(1, np.float32), (n,))


def test_sink_refuses_output_audio_past_the_answer_limit_as_it_arrives():
    """3,600 s (the longest answer ``score`` reads) is the limit of a session's output audio: the
    chunk that would pass it is refused when it arrives (a ProtocolError fails the row), not
    buffered until the session ends. At 4 kHz: 3 chunks of 1,000 s are kept, the 4th (4,000 s in
    all) is refused; a 16-bit PCM chunk is refused from its byte count, before it is decoded."""
    sr = 4_000
    sink = OutputSink(16_000)
    sink.start()
    for _ in range(3):
        sink.audio(_zeros(1_000 * sr), sr)
    with pytest.raises(ProtocolError, match=f"more than {MAX_DURATION_S:g} s of output audio"):
        sink.audio(_zeros(1_000 * sr), sr)
    assert sum(c.audio.shape[1] for c in sink.result.chunks) == 3_000 * sr  # the refused chunk was not kept
    sink.audio(_zeros(600 * sr), sr)  # 3,600 s exactly: within the limit
    with pytest.raises(ProtocolError, match="of output audio"):
        sink.pcm16(b"\x00\x00" * 2, sr)  # two more samples: past it


def test_sink_refuses_output_text_past_the_transcript_limit():
    sink = OutputSink(16_000)
    sink.start()
    sink.text("a" * MAX_TEXT_CHARS)
    with pytest.raises(ProtocolError, match=f"more than {MAX_TEXT_CHARS} characters"):
        sink.text("b")
    assert len(sink.finished().text) == MAX_TEXT_CHARS


@pytest.fixture
def moshi_key(monkeypatch):
    monkeypatch.setenv("MOSHI_TOKEN", "tok-limits-0123456789")


def _moshi(url: str):
    from spear_metrics.agents.moshi import MoshiAgent

    return MoshiAgent(url=url, max_tries=1, handshake_timeout_s=60)


def test_moshi_frame_over_the_limit_is_refused_and_named(moshi_key):
    """The Moshi socket takes frames of at most MAX_FRAME_BYTES (it took any size); a bigger one
    fails the row with the client's own reason, not "server closed the connection"."""
    from fakes.server import LoopbackServer

    async def handler(ws):
        await ws.send(b"\x00")  # Moshi's handshake byte
        await ws.send(b"\x01" + bytes(MAX_FRAME_BYTES + 16))  # one audio frame over the limit
        await asyncio.sleep(30)

    with LoopbackServer(handler, session_timeout_s=60) as srv:
        agent = _moshi(srv.url("/api/chat"))
        request = AudioRequest(audio=np.zeros((1, 16_000), np.float32), sample_rate=16_000, row_id="big")
        with pytest.raises(AgentError) as e:
            asyncio.run(run_session(agent, request, session_config(agent)))
    msg = str(e.value)
    assert f"over the {MAX_FRAME_BYTES} byte limit" in msg and "refused by the client" in msg
    assert "server closed" not in msg


def test_refused_handshake_names_the_servers_reason(moshi_key):
    """websockets returns a refused handshake's body as a bytearray: the reason the server gave
    reaches the row's error beside the status."""
    from fakes.server import LoopbackServer

    async def handler(ws):
        await ws.close()

    def refuse(conn, request):
        return conn.respond(HTTPStatus.UNAUTHORIZED, "invalid token: this key has expired\n")

    with LoopbackServer(handler, process_request=refuse, session_timeout_s=20) as srv:
        agent = _moshi(srv.url("/api/chat"))
        request = AudioRequest(audio=np.zeros((1, 16_000), np.float32), sample_rate=16_000, row_id="401")
        with pytest.raises(AgentError, match="HTTP 401: invalid token: this key has expired"):
            asyncio.run(run_session(agent, request, session_config(agent)))


@pytest.mark.slow
def test_http_answer_over_the_response_limit_fails_its_row_once(real_dir, tmp_path, monkeypatch):
    """An HTTP adapter's response body is cut as it arrives at MAX_RESPONSE_BYTES (the SDK read
    any size whole): with the limit set to 50 kB, a real answer WAV (about 100 kB per 2 s at
    24 kHz) fails its row with the limit named, without a retry (the same request would get the
    same body); the next row's small answer is unaffected."""
    import json

    import spear_metrics.agents.net as net
    from openai_fakes import ChatFake, Program
    from spear_metrics.cli import main
    from test_adapters_openai import KEY, answer_24k, name, sources, write_csv

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setattr(net, "MAX_RESPONSE_BYTES", 50_000)
    ami, _ = sources(real_dir)["ami"]
    answer = answer_24k(real_dir)
    assert answer.size * 2 > 2 * 50_000  # the WAV (16-bit) is over the limit by construction
    csv_path = write_csv(tmp_path / "data", [(name(0), ami), (name(1), ami)])
    fake = ChatFake({name(0): Program("ok"), name(1): Program("text_only")}, answer, 24_000, KEY)
    out = tmp_path / "out"
    try:
        main(["infer", "--agent", "openai-audio", "--data", str(csv_path), "--out", str(out), "--no-progress",
              "-a", f"base_url={fake.url}", "-a", "timeout_s=60", "-a", "max_tries=3", "-a", "max_wait_s=120"])
        calls = dict(fake.calls)
    finally:
        fake.close()
    failures = {f["row"]: f["error"] for f in map(json.loads, (out / "failures.jsonl").read_text().splitlines())}
    assert "more than 50000 bytes" in failures[0] and calls[name(0)] == 1
    assert "more than 50000 bytes" not in failures.get(1, "")  # a small body passes


def test_hub_fetch_has_a_total_deadline(monkeypatch):
    """A Hub fetch that never ends (huggingface_hub's timeouts are per read) is cut at the total
    deadline with a one-line ResultsError naming it."""
    import threading

    import huggingface_hub

    import spear_metrics.results.load as load
    from spear_metrics.results.validate import ResultsError

    release = threading.Event()
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: release.wait(60))
    monkeypatch.setattr(load, "HUB_DEADLINE_S", 0.2)
    try:
        with pytest.raises(ResultsError, match="took longer than 0.2 s"):
            load.load_hub_results("someone/slow-results")
    finally:
        release.set()


def test_space_sources_are_bounded_per_call_and_in_memory(monkeypatch):
    """One request naming 30 Hub ids fetches at most MAX_NEW_PER_CALL of them (the rest refused
    with the reason), and the Hub datasets kept loaded never pass MAX_CACHED_HUB (least recently
    used evicted); the fetches are counted on a stand-in for the Hub loader."""
    import spear_metrics.results.load as load

    fetched = []

    def fake_hub(repo_id):
        fetched.append(repo_id)
        return object()

    monkeypatch.setattr(load, "load_hub_results", fake_hub)
    policy = load.SourcePolicy()
    ids = [f"someone/results-{k}" for k in range(30)]
    ok, errors = policy.load_many(ids)
    assert len(ok) == load.MAX_NEW_PER_CALL == len(fetched)
    assert len(errors) == 30 - load.MAX_NEW_PER_CALL
    assert all(f"at most {load.MAX_NEW_PER_CALL} new Hub datasets per request" in e for e in errors)
    for k in range(0, 30, load.MAX_NEW_PER_CALL):
        policy.load_many(ids[k:k + load.MAX_NEW_PER_CALL])
    assert len(policy._cache) == load.MAX_CACHED_HUB
    assert set(policy._cache) == set(ids[-load.MAX_CACHED_HUB:])  # the most recently used
    n = len(fetched)
    policy.load_many(ids[-2:])  # cached: nothing fetched again
    assert len(fetched) == n


def test_bounded_http_client_refuses_a_compressed_body_and_counts_bytes_as_they_arrive():
    """The bounded client asks for uncompressed bodies; a server that gzips anyway (a gzip bomb:
    a small body that decodes to 30 MB) is refused at the headers, and a plain body over the limit is
    refused once the limit is passed. Small plain bodies pass."""
    import gzip
    from http.server import BaseHTTPRequestHandler

    from helpers import LoopbackHTTP
    from spear_metrics.agents.net import ResponseTooLarge, bounded_http_client

    bomb = gzip.compress(b" " * (30 * 2 ** 20), compresslevel=1)
    asked = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            asked.append(self.headers.get("Accept-Encoding"))
            body, extra = {"/bomb": (bomb, [("Content-Encoding", "gzip")]), "/big": (b"x" * 200_000, []),
                           "/small": (b"ok", [])}[self.path]
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            for k, v in extra:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

    class Server(LoopbackHTTP):
        def __init__(self):
            self._serve(Handler)

    async def get(url, path):
        async with bounded_http_client(timeout_s=30, max_bytes=100_000, where="fake") as client:
            return (await client.get(url + path)).content

    with Server() as srv:
        assert asyncio.run(get(srv.url, "/small")) == b"ok"
        with pytest.raises(ResponseTooLarge, match="compressed response"):
            asyncio.run(get(srv.url, "/bomb"))
        with pytest.raises(ResponseTooLarge, match="more than 100000 bytes"):
            asyncio.run(get(srv.url, "/big"))
    assert set(asked) == {"identity"}
