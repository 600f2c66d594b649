"""Loopback fakes of OpenAI's public protocols, on 127.0.0.1 port 0, each in its own thread.

- :class:`RealtimeFake`: the Realtime WebSocket event set (``session.update`` -> ``session.updated``,
  ``input_audio_buffer.append``, server-VAD events, ``response.created``,
  ``response.output_audio.delta``, transcript deltas, ``response.done``, ``error``), CLOCKED BY THE
  SAMPLES IT RECEIVES: a reply starts when the input received reaches a programmed time (the
  clip's known speech end plus a delay, in input-sample time), never by its own clock.
- :class:`ChatFake`: ``POST /v1/chat/completions`` with audio in and out (JSON or Server-Sent Events).

The Realtime fake validates every event it receives against the ``openai`` SDK's client-event
type (``openai.types.realtime.RealtimeClientEvent``; a mismatch is kept in :attr:`RealtimeFake.errors`)
and builds every event it sends as the SDK's server-event type (``RealtimeServerEvent``), dumped as
the SDK dumps it; only the deliberately malformed faults bypass it. A session asking for text only
(``output_modalities: ["text"]``) gets ``response.output_text.delta`` and no audio.

Each request names its row in the ``X-Client-Request-Id`` header (the adapters send the clip's
name); the fake looks up that row's program (kind + times). Faults are programs too: refused
handshakes, ``429`` + ``Retry-After``, a dropped connection mid-answer, malformed events, no answer,
audio of the wrong rate, undecodable audio, an error event echoing the key.
"""

from __future__ import annotations

import asyncio
import base64
import io
import itertools
import json
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

import numpy as np

RATE = 24_000  # Realtime PCM rate


#: the usage each fake reports per answer (Chat Completions' and the Realtime API's shapes)
CHAT_USAGE = {"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70,
              "prompt_tokens_details": {"audio_tokens": 40, "cached_tokens": 0},
              "completion_tokens_details": {"audio_tokens": 15}}
REALTIME_USAGE = {"total_tokens": 300, "input_tokens": 200, "output_tokens": 100,
                  "input_token_details": {"audio_tokens": 150, "text_tokens": 50, "cached_tokens": 0},
                  "output_token_details": {"audio_tokens": 80, "text_tokens": 20}}


def _adapters():
    from openai.types.realtime import RealtimeClientEvent, RealtimeServerEvent
    from pydantic import TypeAdapter

    return TypeAdapter(RealtimeClientEvent), TypeAdapter(RealtimeServerEvent)


@dataclass
class Program:
    """What the fake does for one row.

    kind: reply | barge | late | force | silent | drop | malformed | bad_audio | error_event | echo_key |
          wrong_rate | refuse | busy | try_later (realtime); ok | stream | busy | e500_once | badkey |
          malformed | wrong_rate | bad_audio | slow | drop | text_only (chat).
          ``late``: a first reply at ``at_s`` (a barge-in), then a second response created with the
          VAD's speech_stopped whose audio starts only when ``late_s`` s of input were received.
    at_s: input time (s of samples received) at which the reply starts (realtime).
    speech_end_s: where the input's speech ends (s); the VAD's speech_stopped comes 0.5 s later.
    busy_n: how many requests/handshakes get 429 first (``None``: all).
    late_s: ``late``: input time (s) at which the second response's audio starts.
    """

    kind: str = "reply"
    at_s: float = 0.0
    speech_end_s: float = 0.0
    busy_n: Optional[int] = 1
    late_s: float = 0.0
    #: ``converse`` / ``talk_over`` / ``hang`` / ``hang_setup`` (a live conversation, FDB v2): replies are clocked by the
    #: decoded audio received: a ``response.create`` gets reply 1 at once (the examiner opening);
    #: then each time the input had speech (20 ms frames at or above -40 dBFS) followed by
    #: ``gap_s`` of silence, the next reply, at most ``replies`` in all. ``talk_over``: the reply starts
    #: ``barge_s`` after the input's speech starts (over it). ``hang``: after ``session.updated``
    #: the fake sends nothing more (it reads on); ``hang_setup``: not even ``session.updated``.
    replies: int = 0
    gap_s: float = 0.5
    barge_s: float = 0.3
    served_model: str = "gpt-realtime-2025-08-28"


def pcm16(x: np.ndarray) -> bytes:
    return np.round(np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()


class _Thread:
    """An asyncio loop in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 10.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class RealtimeFake:
    """The Realtime WebSocket fake (see the module docstring). ``answer`` is the reply audio
    (float mono at 24 kHz), sent in 100 ms deltas; ``key`` the API key it accepts."""

    def __init__(self, programs: dict[str, Program], answer: np.ndarray, key: str, transcript: str = "hello there"):
        self.programs = programs
        self.answer = pcm16(answer)
        self.key = key
        self.transcript = transcript
        self.connections: Counter = Counter()
        self.replied_at: dict[str, int] = {}  # row -> samples (24 kHz) received when the reply went out
        self.forced: set[str] = set()
        self.events: dict[str, list[str]] = defaultdict(list)
        self.extensions: dict[str, Optional[str]] = {}  # row -> the Sec-WebSocket-Extensions the client offered
        self.received: dict[str, list[np.ndarray]] = defaultdict(list)  # converse: decoded input (int16) per row
        self.reply_starts: dict[str, list[int]] = defaultdict(list)  # converse: input samples received at each reply
        self.errors: list[str] = []  # client events the SDK's type refused
        self.text_only: dict[str, bool] = {}  # row -> the session asked for text only
        self.open_now = 0  # sessions open at this moment (handshake done, handler not yet ended)
        self.max_open = 0  # the most sessions that were open at once
        self._client_events, self._server_events = _adapters()
        self._ids = itertools.count()
        self._t = _Thread()
        self.port = self._t.run(self._start())

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime"

    async def _start(self) -> int:
        from websockets.asyncio.server import serve

        self.server = await serve(self._handler, "127.0.0.1", 0, process_request=self._check, max_size=2 ** 24)
        return self.server.sockets[0].getsockname()[1]

    def close(self) -> None:
        async def stop():
            self.server.close()
            await self.server.wait_closed()

        try:
            self._t.run(stop())
        finally:
            self._t.stop()

    def _check(self, connection, request):
        rid = request.headers.get("X-Client-Request-Id", "")
        self.connections[rid] += 1
        self.extensions[rid] = request.headers.get("Sec-WebSocket-Extensions")
        prog = self.programs.get(rid, Program())
        if request.headers.get("Authorization") != f"Bearer {self.key}":
            return connection.respond(401, "bad key\n")
        if prog.kind == "refuse":
            return connection.respond(403, "this model is not available to you\n")
        if prog.kind == "busy" and (prog.busy_n is None or self.connections[rid] <= prog.busy_n):
            resp = connection.respond(429, "slow down\n")
            resp.headers["Retry-After"] = "0"
            return resp
        return None

    async def _send(self, ws, event: dict) -> None:
        """Send ``event`` built as the SDK's server-event type (an ``event_id`` added), as the SDK dumps it."""
        model = self._server_events.validate_python({"event_id": f"event_{next(self._ids)}", **event})
        await ws.send(json.dumps(model.model_dump(mode="json", exclude_unset=True)))

    async def _reply(self, ws, rid: str, prog: Program, samples: int, response_id: Optional[str] = None) -> None:
        """Send a response (``response.created``, 100 ms audio deltas, the transcript, ``response.done``);
        with ``response_id`` its ``response.created`` was sent earlier."""
        if response_id is None:
            self.replied_at[rid] = samples
        if prog.kind == "malformed":
            await ws.send("this is not json {")
            return
        if prog.kind == "error_event":
            await self._send(ws, {"type": "error", "error": {"type": "server_error", "code": "server_error",
                                                               "message": "The server had an error"}})
            return
        if prog.kind == "echo_key":
            await self._send(ws, {"type": "error", "error": {"type": "invalid_request_error", "code": "invalid_api_key",
                                                               "message": f"Incorrect API key provided: {self.key}"}})
            return
        rid_resp = response_id or f"resp_{rid}_{samples}"
        if response_id is None:
            await self._send(ws, {"type": "response.created", "response": {"id": rid_resp, "status": "in_progress"}})
        part = {"item_id": f"item_{rid_resp}", "output_index": 0, "content_index": 0, "response_id": rid_resp}
        if self.text_only.get(rid):
            await self._send(ws, {"type": "response.output_text.delta", "delta": self.transcript, **part})
            await self._send(ws, {"type": "response.done", "response": {"id": rid_resp, "status": "completed"}})
            return
        step = RATE // 10 * 2  # 100 ms of 16-bit samples
        for k, a in enumerate(range(0, len(self.answer), step)):
            if prog.kind == "bad_audio":
                await self._send(ws, {"type": "response.output_audio.delta", "delta": "@@not base64@@", **part})
                return
            await self._send(ws, {"type": "response.output_audio.delta",
                                  "delta": base64.b64encode(self.answer[a : a + step]).decode(), **part})
            if prog.kind == "drop" and k == 1:
                await ws.close(1011, "internal error")
                return
        await self._send(ws, {"type": "response.output_audio_transcript.delta", "delta": self.transcript, **part})
        await self._send(ws, {"type": "response.done", "response": {"id": rid_resp, "status": "completed",
                                                                      "usage": REALTIME_USAGE}})

    async def _handler(self, ws) -> None:
        self.open_now += 1  # the fake's loop is one thread: no lock needed
        self.max_open = max(self.max_open, self.open_now)
        try:
            await self._session(ws)
        finally:
            self.open_now -= 1

    async def _session(self, ws) -> None:
        from websockets.exceptions import ConnectionClosed

        rid = ws.request.headers.get("X-Client-Request-Id", "")
        prog = self.programs.get(rid, Program())
        if prog.kind in ("converse", "talk_over", "hang", "hang_setup"):
            return await self._converse(ws, rid, prog)
        samples = 0
        started = stopped = replied = False
        late: Optional[str] = None  # ``late``: the second response, created but not yet spoken
        try:
            async for msg in ws:
                ev = json.loads(msg)
                t = ev["type"]
                self.events[rid].append(t)
                try:
                    self._client_events.validate_python(ev)
                except ValueError as e:
                    self.errors.append(f"{rid}: {t}: {str(e)[:300]}")
                if t == "session.update":
                    if prog.kind == "try_later" and self.connections[rid] == 1:
                        await ws.close(1013, "try again later")
                        return
                    session = json.loads(json.dumps(ev["session"]))
                    self.text_only[rid] = session.get("output_modalities") == ["text"]
                    if prog.kind == "wrong_rate":  # a fault the SDK's type refuses (its PCM rate is 24000 only): sent raw
                        session["audio"]["output"]["format"]["rate"] = 16000
                        await ws.send(json.dumps({"type": "session.updated", "event_id": "event_raw", "session": session}))
                    else:
                        await self._send(ws, {"type": "session.updated", "session": session})
                elif t == "input_audio_buffer.append":
                    a = ev["audio"]  # 16-bit samples counted from the base64 length (no decoding: a light fake)
                    samples += (len(a) // 4 * 3 - (len(a) - len(a.rstrip("=")))) // 2
                    if not started:
                        started = True
                        await self._send(ws, {"type": "input_audio_buffer.speech_started", "audio_start_ms": 0,
                                              "item_id": f"item_in_{rid}"})
                    if (prog.kind != "force" and not stopped and samples >= (prog.speech_end_s + 0.5) * RATE):
                        stopped = True
                        await self._send(ws, {"type": "input_audio_buffer.speech_stopped", "item_id": f"item_in_{rid}",
                                              "audio_end_ms": round(samples * 1000 / RATE)})
                        await self._send(ws, {"type": "input_audio_buffer.committed", "item_id": f"item_in_{rid}"})
                        if prog.kind == "late":
                            late = f"resp_{rid}_late"
                            await self._send(ws, {"type": "response.created",
                                                  "response": {"id": late, "status": "in_progress"}})
                    if late and samples >= round(prog.late_s * RATE):
                        await self._reply(ws, rid, prog, samples, response_id=late)
                        late = ""
                    if (not replied and prog.kind not in ("silent", "force") and samples >= round(prog.at_s * RATE)):
                        replied = True
                        await self._reply(ws, rid, prog, samples)
                elif t == "response.create" and prog.kind == "force" and not replied:
                    replied = True
                    self.forced.add(rid)
                    await self._reply(ws, rid, prog, samples)
        except ConnectionClosed:
            pass


    async def _converse(self, ws, rid: str, prog: Program) -> None:
        """A conversational side (see :class:`Program`): replies clocked by the decoded input."""
        from websockets.exceptions import ConnectionClosed

        frame = RATE // 50  # 20 ms
        samples = 0
        pending = np.zeros(0, np.int16)
        speech_start: Optional[int] = None  # input sample where the current speech began
        last_speech: Optional[int] = None
        n_replies = 0
        replying: Optional[asyncio.Task] = None

        async def reply() -> None:
            nonlocal n_replies
            n_replies += 1
            self.reply_starts[rid].append(samples)
            await self._reply(ws, rid, prog, samples)

        def start_reply() -> None:
            nonlocal replying
            if n_replies < prog.replies and (replying is None or replying.done()):
                replying = asyncio.ensure_future(reply())

        try:
            await ws.send(json.dumps({"type": "session.created", "session": {"model": prog.served_model}}))
            async for msg in ws:
                ev = json.loads(msg)
                t = ev["type"]
                self.events[rid].append(t)
                if t == "session.update":
                    session = json.loads(json.dumps(ev["session"]))
                    session["model"] = prog.served_model
                    if prog.kind != "hang_setup":
                        await ws.send(json.dumps({"type": "session.updated", "session": session}))
                    if prog.kind in ("hang", "hang_setup"):
                        async for _ in ws:  # reads on, never answers again
                            pass
                        return
                elif t == "response.create":
                    start_reply()
                elif t == "input_audio_buffer.append":
                    x = np.frombuffer(base64.b64decode(ev["audio"]), "<i2")
                    self.received[rid].append(x)
                    pending = np.concatenate([pending, x])
                    while pending.size >= frame:
                        f, pending = pending[:frame], pending[frame:]
                        samples += frame
                        rms = float(np.sqrt(np.mean((f.astype(np.float64) / 32768.0) ** 2)))
                        if rms > 0 and 20 * np.log10(rms) >= -40:
                            if last_speech is None or samples - last_speech > prog.gap_s * RATE:
                                speech_start = samples
                            last_speech = samples
                            if prog.kind == "talk_over" and speech_start is not None and samples - speech_start >= prog.barge_s * RATE:
                                speech_start = None
                                start_reply()
                        elif (prog.kind == "converse" and last_speech is not None
                              and samples - last_speech >= prog.gap_s * RATE):
                            last_speech = None
                            start_reply()
        except ConnectionClosed:
            pass
        finally:
            if replying is not None:
                replying.cancel()


class ChatFake:
    """``POST /v1/chat/completions`` fake. ``answer`` float mono at ``answer_sr`` Hz."""

    def __init__(self, programs: dict[str, Program], answer: np.ndarray, answer_sr: int, key: str,
                 transcript: str = "hello there"):
        import soundfile as sf

        self.programs, self.key, self.transcript = programs, key, transcript
        buf = io.BytesIO()
        sf.write(buf, answer, answer_sr, subtype="PCM_16", format="WAV")
        self.wav = buf.getvalue()
        buf = io.BytesIO()
        sf.write(buf, answer, 2000, subtype="PCM_16", format="WAV")  # a rate below any real one
        self.wav_2k = buf.getvalue()
        self.pcm24 = pcm16(answer)  # treated as 24 kHz by the stream scenario
        self.calls: Counter = Counter()
        self.bodies: dict[str, dict] = {}
        self.released = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def _send(self, status: int, body: bytes, ctype="application/json", headers=()):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                rid = self.headers.get("X-Client-Request-Id", "")
                fake.calls[rid] += 1
                fake.bodies[rid] = body
                prog = fake.programs.get(rid, Program("ok"))
                if self.path != "/v1/chat/completions":
                    return self._send(404, b'{"error": {"message": "no such route"}}')
                if self.headers.get("Authorization") != f"Bearer {fake.key}":
                    return self._send(401, b'{"error": {"message": "bad key"}}')
                k = prog.kind
                if k == "badkey":
                    msg = json.dumps({"error": {"message": f"Incorrect API key provided: {fake.key}",
                                                "type": "invalid_request_error", "code": "invalid_api_key"}})
                    return self._send(401, msg.encode())
                if k == "busy" and (prog.busy_n is None or fake.calls[rid] <= prog.busy_n):
                    return self._send(429, b'{"error": {"message": "Rate limit reached"}}', headers=[("Retry-After", "0")])
                if k == "e500_once" and fake.calls[rid] == 1:
                    return self._send(500, b'{"error": {"message": "internal"}}')
                if k == "malformed":
                    return self._send(200, b"this is not json {")
                if k == "slow":  # no answer until the fake closes (30 s at most): any timeout cuts it short
                    fake.released.wait(30.0)
                if k == "drop":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "100000")
                    self.end_headers()
                    self.wfile.write(b'{"id": "x", "choices": [')
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if k == "stream" or body.get("stream"):
                    return self._stream()
                if k == "wrong_rate":
                    data = fake.wav_2k
                elif k == "bad_audio":
                    data = b"\x00\x01garbage" * 100
                else:
                    data = fake.wav
                audio = None if k == "text_only" else {"id": "audio_1", "data": base64.b64encode(data).decode(),
                                                       "expires_at": 0, "transcript": fake.transcript}
                msg = {"role": "assistant", "content": "text only" if k == "text_only" else None, "audio": audio}
                resp = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body.get("model"),
                        "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}], "usage": CHAT_USAGE}
                return self._send(200, json.dumps(resp).encode())

            def _stream(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                step = RATE // 10 * 2

                def event(obj):
                    self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
                    self.wfile.flush()

                base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m"}
                for a in range(0, len(fake.pcm24), step):
                    delta = {"audio": {"id": "audio_1", "data": base64.b64encode(fake.pcm24[a : a + step]).decode()}}
                    event({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
                event({**base, "choices": [{"index": 0, "delta": {"audio": {"transcript": fake.transcript}},
                                            "finish_reason": "stop"}]})
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        self.released.set()
        self.httpd.shutdown()
        self.httpd.server_close()
