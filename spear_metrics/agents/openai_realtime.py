"""``openai-realtime``: the OpenAI Realtime API over a WebSocket (``websockets``), full duplex.

The session follows SPEAR's GPT-realtime proxy (``inference_help_code/bin/llm_proxies/gpt-realtime-2.py``
in ``thomasthebaud/SPEAR-benchmark-website``):

- ``session.update`` with SPEAR's instructions (+ the row's instruction), PCM16 24 kHz in and out,
  server VAD (threshold 0.5, prefix padding 300 ms, silence 500 ms, ``create_response`` and
  ``interrupt_response`` on), voice ``alloy``; the stream starts once ``session.updated`` came back;
- the input clip mixed to one channel (mean of the channels, as SPEAR's ``np.mean``), resampled to
  24 kHz and sent in 40 ms ``input_audio_buffer.append`` chunks paced in real time by the harness
  (:func:`spear_metrics.agents.duplex.run_session`), then 2.5 s of silence;
- if the server VAD saw speech start but never closed the turn within ``vad_grace_s`` (3 s) after
  the tail, ``input_audio_buffer.commit`` + ``response.create`` are forced;
- output audio from ``response.output_audio.delta`` (older name ``response.audio.delta``; both are
  taken), text from the transcript/text deltas; the server may answer, stop and answer again while
  the input still streams (barge-in): everything is kept; the session ends when no response is
  active any more after answer audio came (``response.done``; a ``response.created`` after that
  reopens the wait), or ``max_wait_s`` after the tail; a text-only session (``output_modalities:
  ["text"]``, what ``dsuperb infer`` asks) ends on the ``response.done`` that follows its text.

Onset (SPEAR's rule, ``onset_clock=wall``): the monotonic clock at the first output-audio delta
minus the clock just before the first input chunk, in s from the start of the clip (the clip ends
at the question end, so ``answer_start_time`` = onset - clip length). Differences from SPEAR's proxy:
the schedule is absolute (SPEAR sleeps 40 ms after each send, so its stream runs slower than real
time by the send time of every chunk, which inflates its onsets on long clips); ``onset_clock=stream``
gives the stream clock instead (seconds of input sent when the first audio arrived). Resampling to
24 kHz uses the project's resampler (soxr HQ) where SPEAR interpolates linearly.

Why ``websockets`` and not the SDK's realtime client: the adapter needs the handshake status and
``Retry-After`` of a refused connection and the close code of a dropped one (1013 = try later), and
must run against a loopback ``ws://`` server in tests; plain ``websockets`` gives both directly.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any, Optional
from urllib.parse import quote, urlsplit

import numpy as np

from spear_metrics.agents.base import AgentError
from spear_metrics.agents.duplex import AudioRequest, NetworkAgentBase, OutputSink, ProtocolError, SessionConfig, SessionResult
from spear_metrics.agents.duplex import LiveInput, pcm16_bytes
from spear_metrics.agents.openai_audio import optional_text
from spear_metrics.agents.websocket import MAX_FRAME_BYTES, WebSocketConnection
from spear_metrics.agents.net import (
    REQUEST_ID_HEADER,
    RETRY_CLOSE_CODES,
    NetError,
    RetryPolicy,
    api_key,
    close_reason as _close_reason,
    mask_secrets,
    request_id,
    with_retries,
    within,
)
from spear_metrics.core.secrets import register_url_secrets

#: PCM rate (Hz) of the session's input and output audio (SPEAR's TARGET_RATE)
REALTIME_RATE = 24_000
#: SPEAR's realtime proxy's session instructions (a row's instruction is appended after a blank line)
SPEAR_INSTRUCTIONS = (
    "You are participating in a natural spoken conversation.\n"
    "The user audio is being streamed to you in real time from a file.\n"
    "Answer when it feels natural, including before the entire audio file has finished if appropriate.\n"
    "Keep responses conversational and concise.\n"
    "If the user continues speaking or interrupts, stop focusing on the old response and respond to the latest user speech."
)
AUDIO_DELTA_EVENTS = ("response.output_audio.delta", "response.audio.delta")
TEXT_DELTA_EVENTS = ("response.output_audio_transcript.delta", "response.audio_transcript.delta",
                     "response.output_text.delta", "response.text.delta")
#: events after which SPEAR's proxy stops waiting for the server VAD to close the turn
_TURN_EVENTS = ("input_audio_buffer.speech_stopped", "input_audio_buffer.committed")


def input_pcm(request: AudioRequest) -> bytes:
    """The request's input as the session sends it: channel mean, 24 kHz, 16-bit PCM bytes."""
    from spear_datasets.audio import resample

    return pcm16_bytes(resample(request.mono()[None, :], request.sample_rate, REALTIME_RATE)[0])


class OpenAIRealtimeAgent(NetworkAgentBase):
    """OpenAI Realtime API over a WebSocket, full duplex, with SPEAR's GPT-realtime session settings.

    The input streams in real time (40 ms chunks by default, ``--chunk-ms``), then ``tail_silence_s``
    of silence; onset = first output audio on the wall clock since the first chunk (SPEAR's
    rule) or on the stream clock (``onset_clock=stream``). The key is read from the environment
    variable ``api_key_env``.

    Args:
        model: model name (``?model=`` of the URL).
        base_url: WebSocket endpoint, e.g. ``wss://api.openai.com/v1/realtime`` or ``ws://127.0.0.1:PORT/v1/realtime``.
        voice: output voice.
        instructions: text appended to SPEAR's session instructions (after a blank line).
        vad_threshold: server VAD threshold (SPEAR: 0.5).
        prefix_padding_ms: server VAD prefix padding in ms (SPEAR: 300).
        silence_duration_ms: server VAD silence that closes a turn, ms (SPEAR: 500).
        tail_silence_s: seconds of silence streamed after the input (SPEAR: 2.5).
        vad_grace_s: seconds to wait after the tail for the VAD to close the turn before forcing a response (SPEAR: 3).
        max_wait_s: longest wait (s) for the answer to finish after the tail (SPEAR: 30).
        onset_clock: ``wall`` (SPEAR's proxy) or ``stream`` (seconds of input sent when the first audio came).
        api_key_env: environment variable holding the key (``none``: no key, e.g. a local server).
        connect_timeout_s: time limit (s) of the handshake and of the wait for ``session.updated``.
        max_tries: tries to open a session (retries: HTTP 429/5xx on the handshake, close codes 1012/1013, network errors).
        send_row_id: send the row's identity (the clip's file name) in the ``X-Client-Request-Id`` tracing header.
        ws_compression: offer WebSocket ``permessage-deflate`` (default off, as the ``openai`` SDK's own
            realtime client: base64 PCM barely compresses, and deflating every 40 ms chunk was most of the
            client's CPU per session).
    """

    paced = True
    live_input = True

    def __init__(self, model: str = "gpt-realtime", base_url: str = "wss://api.openai.com/v1/realtime",
                 voice: str = "alloy", instructions: Optional[str] = None, vad_threshold: float = 0.5,
                 prefix_padding_ms: int = 300, silence_duration_ms: int = 500, tail_silence_s: float = 2.5,
                 vad_grace_s: float = 3.0, max_wait_s: float = 30.0, onset_clock: str = "wall",
                 api_key_env: Optional[str] = "OPENAI_API_KEY", connect_timeout_s: float = 20.0, max_tries: int = 4,
                 send_row_id: bool = True, ws_compression: bool = False):
        if onset_clock not in ("wall", "stream"):
            raise ValueError(f"onset_clock must be wall or stream, got {onset_clock!r}")
        if urlsplit(base_url).scheme not in ("ws", "wss"):
            raise ValueError(f"base_url must be a ws:// or wss:// URL, got {base_url!r}")
        for name, v in (("tail_silence_s", tail_silence_s), ("vad_grace_s", vad_grace_s)):
            if not v >= 0:
                raise ValueError(f"{name} must be >= 0")
        if not (max_wait_s > 0 and connect_timeout_s > 0):
            raise ValueError("max_wait_s and connect_timeout_s must be > 0")
        register_url_secrets(base_url)  # a key typed inside the URL is masked wherever it would appear
        self.model = model
        self.base_url = base_url
        self.voice = voice
        self.instructions = optional_text(instructions)
        self.vad = {"type": "server_vad", "threshold": float(vad_threshold), "prefix_padding_ms": int(prefix_padding_ms),
                    "silence_duration_ms": int(silence_duration_ms), "create_response": True, "interrupt_response": True}
        self.tail_silence_s = float(tail_silence_s)
        self.vad_grace_s = float(vad_grace_s)
        self.max_wait_s = float(max_wait_s)
        self.onset_clock = onset_clock
        self.onset_kind = "first_audio"
        self.onset_rule = ("wall clock: monotonic time at the first output-audio delta minus the time just before the "
                           "first input chunk (SPEAR's GPT-realtime proxy)" if onset_clock == "wall" else
                           "stream clock: seconds of input sent when the first output-audio delta arrived")
        self.api_key_env = optional_text(api_key_env)
        self.connect_timeout_s = float(connect_timeout_s)
        self.retry = RetryPolicy(max_tries=int(max_tries))
        self.send_row_id = bool(send_row_id)
        self.ws_compression = bool(ws_compression)
        if self.api_key_env:
            api_key(self.api_key_env)

    @property
    def url(self) -> str:
        sep = "&" if "?" in self.base_url else "?"
        return f"{self.base_url}{sep}model={quote(self.model)}"

    def session_update(self, request: AudioRequest) -> dict[str, Any]:
        """The ``session.update`` event for ``request`` (SPEAR's settings)."""
        instr = SPEAR_INSTRUCTIONS
        extra = request.instructions or self.instructions
        if extra:
            instr = f"{SPEAR_INSTRUCTIONS}\n\n{extra}"
        session: dict[str, Any] = {
            "type": "realtime",
            "instructions": instr,
            "audio": {
                "input": {"format": {"type": "audio/pcm", "rate": REALTIME_RATE}, "turn_detection": dict(self.vad)},
                "output": {"format": {"type": "audio/pcm", "rate": REALTIME_RATE}, "voice": self.voice},
            },
        }
        if "audio" not in request.modalities:
            session["output_modalities"] = ["text"]
        return {"type": "session.update", "session": session}

    def onset(self, result: SessionResult) -> Optional[float]:
        t = result.first_audio_s if self.onset_clock == "wall" else result.first_audio_input_s
        return None if t is None else max(0.0, t)

    def warm_up(self) -> None:
        """Import the WebSocket client and the resampler now (before any session is paced)."""
        import soxr  # noqa: F401
        import websockets.asyncio.client  # noqa: F401

    async def connect(self, request: AudioRequest, sink: OutputSink, config: SessionConfig) -> "RealtimeConnection":
        if request.audio2 is not None:
            raise AgentError("openai-realtime takes one input audio (audio2 is not supported)")
        # resampling off the loop that paces the sessions; a live request is encoded chunk by chunk
        pcm = b"" if request.live else await asyncio.to_thread(input_pcm, request)
        conn = RealtimeConnection(self, request, sink, pcm)
        await with_retries(conn.open, self.retry)
        return conn


class RealtimeConnection(WebSocketConnection):
    """One Realtime WebSocket session (see :class:`OpenAIRealtimeAgent`)."""

    message_words = "server event"

    def __init__(self, agent: OpenAIRealtimeAgent, request: AudioRequest, sink: OutputSink, pcm: bytes):
        super().__init__(agent, request, sink)
        self._pcm = pcm
        self._live = LiveInput(request.sample_rate, REALTIME_RATE) if request.live else None
        self._in = 0  # input samples taken (request rate)
        self._out = 0  # 24 kHz samples sent
        self.seen: set[str] = set()
        self._turn = asyncio.Event()
        self._active: set[str] = set()
        self._updated = asyncio.Event()

    def _setup_event(self) -> asyncio.Event:
        return self._updated  # set by session.updated

    # ------------------------------------------------------------------ open (retried)
    async def open(self) -> None:
        self._updated = asyncio.Event()
        self._open_error: Optional[AgentError] = None
        self._turn = asyncio.Event()
        self._closing = False
        self.seen.clear()
        headers = {}
        if self.agent.api_key_env:
            headers["Authorization"] = f"Bearer {api_key(self.agent.api_key_env)}"
        if self.agent.send_row_id and self.request.row_id:
            headers[REQUEST_ID_HEADER] = request_id(self.request.row_id)
        where = self.agent.base_url
        await self._handshake(self.agent.url, where, headers, timeout_s=self.agent.connect_timeout_s, max_size=MAX_FRAME_BYTES)
        self._receiver = asyncio.create_task(self._receive())
        try:
            await self._send(self.agent.session_update(self.request))
            for turn in self.request.history:
                await self._send({"type": "conversation.item.create", "item": self._history_item(turn)})
            await within(self.agent.connect_timeout_s, self._wait_updated(), f"session.updated from {where}")
        except BaseException:
            await self._abort()
            raise

    async def _wait_updated(self) -> None:
        await self._updated.wait()  # set by session.updated, or by the receiver's first error
        if self._open_error is not None:
            raise self._open_error

    def _history_item(self, turn: Any) -> dict[str, Any]:
        from spear_datasets.audio import resample

        if turn.role == "assistant":
            if not turn.text:
                raise AgentError("an assistant history turn needs its text for the Realtime API")
            return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": turn.text}]}
        content: list[dict[str, Any]] = []
        if turn.text:
            content.append({"type": "input_text", "text": turn.text})
        if turn.audio is not None:
            a = np.asarray(turn.audio, np.float32)
            a = a[None, :] if a.ndim == 1 else a
            pcm = pcm16_bytes(resample(a.mean(axis=0, keepdims=True), int(turn.sample_rate), REALTIME_RATE)[0])
            content.append({"type": "input_audio", "audio": base64.b64encode(pcm).decode("ascii")})
        return {"type": "message", "role": "user", "content": content}

    # ------------------------------------------------------------------ sending
    async def _send(self, event: dict[str, Any]) -> None:
        await self._send_text(json.dumps(event))

    async def _send_text(self, text: str) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            await self.ws.send(text)
        except ConnectionClosed as e:
            code, why = _close_reason(e)
            self.sink.check()  # the receiver's reason first, when it has one
            raise NetError(f"server closed the connection ({why}) while the input was being sent",
                           retryable=code in RETRY_CLOSE_CODES and not self._updated.is_set(), status=code) from None

    async def send_audio(self, chunk: np.ndarray) -> None:
        if self._live is not None:
            data = pcm16_bytes(self._live.take(chunk))
            if data:
                await self._send_text('{"type": "input_audio_buffer.append", "audio": "'
                                      + base64.b64encode(data).decode("ascii") + '"}')
            return
        self._in += chunk.shape[1]
        end = round(self._in * REALTIME_RATE / self.request.sample_rate)
        a, b = 2 * self._out, 2 * end
        data = self._pcm[a:b]
        if len(data) < b - a:
            data += bytes(b - a - len(data))
        self._out = end
        if data:  # the event's JSON written directly: base64 needs no escaping (json.dumps would scan it)
            await self._send_text('{"type": "input_audio_buffer.append", "audio": "'
                                  + base64.b64encode(data).decode("ascii") + '"}')

    async def end_input(self) -> None:
        """SPEAR's end of stream: wait up to ``vad_grace_s`` for the VAD to close the turn (or a
        response to start), then force ``commit`` + ``response.create`` if speech started and
        nothing closed it."""
        try:
            await asyncio.wait_for(self._turn.wait(), timeout=self.agent.vad_grace_s)
        except asyncio.TimeoutError:
            pass
        self.sink.check()
        saw_response = any(t.startswith("response.") for t in self.seen)
        if (not saw_response and "input_audio_buffer.speech_started" in self.seen
                and not any(t in self.seen for t in _TURN_EVENTS)):
            await self._send({"type": "input_audio_buffer.commit"})
            await self._send({"type": "response.create"})

    # ------------------------------------------------------------------ receiving
    def _messages(self, raw: Any) -> list[dict[str, Any]]:
        if isinstance(raw, (bytes, bytearray)):
            raw = bytes(raw).decode("utf-8", errors="replace")
        text = raw.strip()
        if not text:
            return []
        try:
            objs = [json.loads(text)]
        except (ValueError, RecursionError):  # not JSON, a number past int()'s digit limit, nested too deeply
            try:
                objs = [json.loads(line) for line in text.splitlines() if line.strip()]
            except (ValueError, RecursionError):
                raise ProtocolError(f"malformed event from the server (not JSON): {mask_secrets(text)[:80]!r}") from None
        for o in objs:
            if not isinstance(o, dict) or not isinstance(o.get("type"), str):
                raise ProtocolError(f"malformed event from the server (no type): {mask_secrets(json.dumps(o))[:80]}")
        return objs

    def _lost_after_setup(self, code: Optional[int], why: str) -> None:
        if self.sink.is_done and code == 1000:
            return  # answered, then closed normally
        phase = "mid-answer" if self.sink.result.chunks else "before answering"
        self.sink.fail(NetError(f"server closed the connection {phase} ({why})", status=code))

    def _handle(self, ev: dict[str, Any]) -> None:
        t = ev["type"]
        self.seen.add(t)
        if t in _TURN_EVENTS or t.startswith("response."):
            self._turn.set()
        if t == "session.updated":
            self._check_session(ev.get("session"))
            if self._open_error is None:
                self._updated.set()
        elif t in AUDIO_DELTA_EVENTS:
            delta = ev.get("delta")
            if not isinstance(delta, str):
                raise ProtocolError(f"{t} without a base64 delta")
            try:
                data = base64.b64decode(delta, validate=True)
            except (ValueError, TypeError):
                raise ProtocolError(f"{t} holds audio that is not valid base64") from None
            self.sink.pcm16(data, REALTIME_RATE)
        elif t in TEXT_DELTA_EVENTS:
            d = ev.get("delta")
            if isinstance(d, str):
                self.sink.text(d)
        elif t == "response.created":
            rid = (ev.get("response") or {}).get("id")
            if rid:
                self._active.add(str(rid))
            self.sink.reopen()  # an earlier response may be done: wait for this one too
        elif t == "response.done":
            resp = ev.get("response") or {}
            self._active.discard(str(resp.get("id")))
            self.sink.usage(self.agent.model, resp.get("usage"))
            if resp.get("status") == "failed":
                details = mask_secrets(json.dumps(resp.get("status_details")))[:160] if resp.get("status_details") else ""
                raise AgentError(f"server response failed {details}".strip())
            # done once no response is active any more after the answer came: its audio, or its text
            # in a text-only session (no audio will ever come there)
            text_only = "audio" not in self.request.modalities
            if not self._active and (self.sink.result.chunks or (text_only and self.sink.result.text_events)):
                self.sink.done("stop")
        elif t == "error":
            err = ev.get("error") or {}
            msg = err.get("message") if isinstance(err, dict) else str(err)
            code = err.get("code") or err.get("type") if isinstance(err, dict) else None
            raise AgentError(f"server error event{f' ({code})' if code else ''}: {mask_secrets(str(msg or ''))[:200]}")

    def _check_session(self, session: Any) -> None:
        """Refuse a session whose output audio is not PCM at the asked rate (the deltas would be
        read at the wrong rate)."""
        if not isinstance(session, dict):
            return
        fmt = ((session.get("audio") or {}).get("output") or {}).get("format")
        if isinstance(fmt, dict):
            rate, kind = fmt.get("rate"), fmt.get("type")
            if kind not in (None, "audio/pcm") or (rate is not None and rate != REALTIME_RATE):
                raise ProtocolError(f"server's output audio is {kind} at {rate} Hz; asked audio/pcm at {REALTIME_RATE} Hz")
