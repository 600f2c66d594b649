"""``moshi``: a full-duplex server speaking Kyutai's Moshi WebSocket protocol (``/api/chat``),
used by Moshi, PersonaPlex and their fine-tunes.

The protocol (Kyutai's ``moshi/moshi/server.py`` and ``client.py``; the Rust ``moshi-backend``'s
``stream_both.rs``; Full-Duplex-Bench's ``v1_v1.5/model_inference/moshi/inference.py``):

- binary WebSocket messages, first byte = kind: ``0x00`` handshake (the server's first message:
  the Python server sends the byte alone, the Rust backend adds 8 bytes: protocol and model
  versions), ``0x01`` audio (Ogg-Opus pages, 24 kHz mono, both ways), ``0x02`` a UTF-8 text token
  (server to client), ``0x03`` control, ``0x04`` metadata (JSON), ``0x05`` error (text),
  ``0x06`` ping (Rust backend);
- the client streams its microphone as 80 ms frames (1920 samples at 24 kHz; Mimi's frame rate
  is 12.5 Hz) in real time; the server answers every input frame with one output frame (after
  its first frame or two), so the reply channel runs continuously, silence included;
- Kyutai's Rust backend reads sampling settings from the URL's query (``text_temperature``,
  ``text_topk``, ``audio_temperature``, ``audio_topk``, ``text_seed``, ``audio_seed``,
  ``pad_mult``, ``repetition_penalty``, ``repetition_penalty_context``: ``SessionConfigReq``);
  Kyutai's Python server ignores the query; PersonaPlex's server (NVIDIA's fork of it) requires
  ``text_prompt`` (its role prompt) and ``voice_prompt`` (a voice file name) and takes ``seed``,
  and sends its handshake only after it has run those prompts through the model. The Python
  servers serve one session at a time (a lock held for the whole connection; the handshake waits
  for it): run one row at a time per server.

Onset. Moshi's output audio never stops (silence frames too), so "first output audio" would be
the second frame of every session; the onset is the first output frame that carries the answer:

- ``onset=audio`` (default): the first 80 ms output frame whose RMS level reaches
  ``speech_dbfs`` (-40 dBFS);
- ``onset=text``: the first text token (Moshi writes its inner monologue a little ahead of its
  speech; the Python server sends no padding tokens), i.e. the frame of that step;
- ``onset=first``: whichever of the two comes first.

Its time is the stream clock (``onset_clock=stream``, default: seconds of input sent when the
frame arrived) or the wall clock (``onset_clock=wall``: seconds since the first input chunk, the
clock of SPEAR's realtime proxy). For SPEAR (``spearbench infer``) the adapter reports output
from the onset frame on and leaves out the silence after the last frame at or above
``speech_dbfs`` (the answer is the system's speech, gaps inside it kept); a session without any
such frame (or token, for ``onset=text``) has no answer and fails its row, as SPEAR's realtime
proxy fails a session without answer audio. In a time-synchronous session (``spearbench
fdb-infer``) every output frame is reported as it arrives: the reply channel, silence included.
Full-Duplex-Bench's own client writes one frame of zeros and then the decoded frames back to back
(output frame ``j`` at ``(j + 1) * 80 ms``, whatever its arrival time); ``fdb-infer`` plays each
frame at its arrival instead (``playback_timeline``), which adds the server's real latency.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any, Optional
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import numpy as np

from spear_metrics.agents.base import AgentError
from spear_metrics.agents.duplex import (
    AudioRequest,
    NetworkAgentBase,
    NoAnswerError,
    OutputSink,
    ProtocolError,
    SessionConfig,
    SessionResult,
)
from spear_metrics.agents.gemini_live import _settle
from spear_metrics.agents.openai_realtime import _close_reason

#: Moshi's audio rate (Hz) both ways (Mimi)
MOSHI_SAMPLE_RATE = 24_000
#: one Mimi frame: 80 ms at 24 kHz
FRAME_SAMPLES = 1_920
FRAME_S = FRAME_SAMPLES / MOSHI_SAMPLE_RATE
#: message kinds (first byte of every binary message)
KIND_HANDSHAKE, KIND_AUDIO, KIND_TEXT, KIND_CONTROL, KIND_METADATA, KIND_ERROR, KIND_PING = range(7)
KIND_NAMES = {KIND_HANDSHAKE: "handshake", KIND_AUDIO: "audio", KIND_TEXT: "text", KIND_CONTROL: "control",
              KIND_METADATA: "metadata", KIND_ERROR: "error", KIND_PING: "ping"}
#: query parameters Kyutai's Rust backend reads (SessionConfigReq in rust/moshi-backend/src/stream_both.rs)
SESSION_QUERY_KEYS = ("text_temperature", "text_topk", "audio_temperature", "audio_topk", "text_seed", "audio_seed",
                      "pad_mult", "repetition_penalty", "repetition_penalty_context")


def encode_message(kind: int, payload: bytes = b"") -> bytes:
    """One protocol message: the kind byte followed by ``payload``."""
    return bytes([kind]) + bytes(payload)


def decode_message(data: Any) -> tuple[int, bytes]:
    """``(kind, payload)`` of a received WebSocket message.

    Raises:
        ProtocolError: a text frame, an empty message or an unknown kind byte.
    """
    if isinstance(data, str):
        raise ProtocolError(f"malformed message from the server: a text frame ({data[:40]!r}); the protocol is binary")
    data = bytes(data)
    if not data:
        raise ProtocolError("malformed message from the server: empty message")
    if data[0] not in KIND_NAMES:
        raise ProtocolError(f"malformed message from the server: unknown kind byte 0x{data[0]:02x}")
    return data[0], data[1:]


class OpusEncoder:
    """80 ms frames -> Ogg-Opus bytes (``sphn.OpusStreamWriter`` at 24 kHz, as Kyutai's client)."""

    def __init__(self, sample_rate: int = MOSHI_SAMPLE_RATE):
        import sphn

        self._writer = sphn.OpusStreamWriter(sample_rate)

    def encode(self, frame: np.ndarray) -> bytes:
        """``frame`` ``(1920,)`` float32 in [-1, 1] -> the Ogg pages it completes (may be ``b""``).

        Raises:
            ValueError: a frame of another length (Opus takes 2.5-60 ms frames only).
        """
        if frame.shape != (FRAME_SAMPLES,):
            raise ValueError(f"an Opus frame must be ({FRAME_SAMPLES},) samples, got {frame.shape}")
        return bytes(self._writer.append_pcm(np.ascontiguousarray(frame, dtype=np.float32)))


class OpusDecoder:
    """Ogg-Opus bytes -> 24 kHz mono float32 (``sphn.OpusStreamReader``)."""

    def __init__(self, sample_rate: int = MOSHI_SAMPLE_RATE):
        import sphn

        self._reader = sphn.OpusStreamReader(sample_rate)

    def decode(self, data: bytes) -> np.ndarray:
        """The samples ``(m,)`` that ``data`` completes (``m`` may be 0: pages are buffered).

        Raises:
            ProtocolError: bytes that are not an Ogg-Opus stream (sphn reports it on this call or
                the next one).
        """
        try:
            return np.asarray(self._reader.append_bytes(bytes(data)), dtype=np.float32).reshape(-1)
        except ValueError as e:
            raise ProtocolError(f"undecodable Ogg-Opus audio from the server: {str(e)[:80]}") from None


def frame_levels_dbfs(audio: np.ndarray, frame: int = FRAME_SAMPLES) -> np.ndarray:
    """RMS level (dBFS, full scale = 1.0) of each whole ``frame``-sample frame of ``audio`` ``(n,)``
    (a last partial frame is dropped); digital silence is ``-inf``."""
    n = len(audio) // frame
    if n == 0:
        return np.zeros(0)
    x = np.asarray(audio[: n * frame], dtype=np.float64).reshape(n, frame)
    rms = np.sqrt((x * x).mean(axis=1))
    with np.errstate(divide="ignore"):
        return 20.0 * np.log10(rms)


def chat_url(url: str, params: dict[str, Any]) -> str:
    """``url`` with ``params`` (``None`` values skipped) added to its query; a ``host:port`` or
    ``http(s)://host:port`` without a path gets ``/api/chat``, as Kyutai's and FDB's clients do.

    Raises:
        ValueError: a scheme other than ws, wss, http, https.
    """
    if "://" not in url:
        url = f"ws://{url}"
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    if scheme not in ("ws", "wss"):
        raise ValueError(f"url must be ws://, wss://, http:// or https://, got {url!r}")
    path = parts.path if parts.path not in ("", "/") else "/api/chat"
    query = parse_qsl(parts.query, keep_blank_values=True)
    query += [(k, str(v)) for k, v in params.items() if v is not None]
    return urlunsplit((scheme, parts.netloc, path, urlencode(query), ""))


class MoshiAgent(NetworkAgentBase):
    """Full-duplex server speaking Kyutai's Moshi protocol (Moshi, PersonaPlex, fine-tunes): 24 kHz Ogg-Opus both ways over a WebSocket.

    The input (channels mixed, resampled to 24 kHz) streams in real time as 80 ms Opus frames,
    then ``tail_silence_s`` of silence during which the system can answer. Onset: the first 80 ms
    output frame at or above ``speech_dbfs`` (``onset=audio``), the first text token
    (``onset=text``) or whichever comes first (``onset=first``), on the clock ``onset_clock``;
    SPEAR's answer runs from there to the last such frame. No key by default (``api_key_env``
    names a variable whose value is sent as ``Authorization: Bearer``, for a gateway).

    Args:
        url: the server's WebSocket, e.g. ``ws://127.0.0.1:8998/api/chat`` (``host:port`` alone gets ``/api/chat``).
        onset: ``audio`` (first frame >= speech_dbfs), ``text`` (first text token) or ``first``.
        speech_dbfs: RMS level (dBFS) from which an 80 ms output frame counts as speech.
        onset_clock: ``stream`` (s of input sent when the onset frame arrived) or ``wall`` (s since the first input chunk, SPEAR's realtime proxy's clock).
        tail_silence_s: seconds of silence streamed after the input: the window for the answer.
        text_temperature: sampling temperature of the text stream (query parameter; Rust backend only).
        text_topk: top-k of the text stream (query parameter; Rust backend only).
        audio_temperature: sampling temperature of the audio tokens (query parameter; Rust backend only).
        audio_topk: top-k of the audio tokens (query parameter; Rust backend only).
        seed: random seed (query parameters ``seed``, PersonaPlex; ``text_seed`` and ``audio_seed``, Rust backend).
        text_prompt: PersonaPlex's role prompt (query parameter ``text_prompt``; its server requires one).
        voice_prompt: PersonaPlex's voice file name, e.g. ``NATF2.pt`` (query parameter ``voice_prompt``).
        handshake_timeout_s: longest wait (s) for the connection and the server's 0x00 handshake (a busy Python server holds new sessions until the current one ends).
        drain_s: longest wait (s) after the last input frame for the output frames still in flight.
        api_key_env: environment variable whose value is sent as a Bearer token (empty: none).
        max_tries: tries to open a session (retries: refused/reset connections, HTTP 429/5xx, close codes 1012/1013).
        send_row_id: send the row's identity (the clip's file name) in the ``X-Client-Request-Id`` tracing header.
    """

    paced = True

    def __init__(self, url: str = "ws://127.0.0.1:8998/api/chat", onset: str = "audio", speech_dbfs: float = -40.0,
                 onset_clock: str = "stream", tail_silence_s: float = 10.0, text_temperature: Optional[float] = None,
                 text_topk: Optional[int] = None, audio_temperature: Optional[float] = None,
                 audio_topk: Optional[int] = None, seed: Optional[int] = None, text_prompt: Optional[str] = None,
                 voice_prompt: Optional[str] = None, handshake_timeout_s: float = 60.0,
                 drain_s: float = 2.0, api_key_env: str = "", max_tries: int = 3,
                 send_row_id: bool = True):
        from spear_metrics.agents.net import RetryPolicy, api_key

        if onset not in ("audio", "text", "first"):
            raise ValueError(f"onset must be audio, text or first, got {onset!r}")
        if onset_clock not in ("stream", "wall"):
            raise ValueError(f"onset_clock must be stream or wall, got {onset_clock!r}")
        if not math.isfinite(speech_dbfs) or speech_dbfs >= 0:
            raise ValueError(f"speech_dbfs must be a level below 0 dBFS, got {speech_dbfs}")
        for name, v in (("tail_silence_s", tail_silence_s), ("drain_s", drain_s)):
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be >= 0 s, got {v}")
        if not handshake_timeout_s > 0:
            raise ValueError("handshake_timeout_s must be > 0")
        params = {"text_temperature": text_temperature, "text_topk": text_topk,
                  "audio_temperature": audio_temperature, "audio_topk": audio_topk,
                  "seed": seed, "text_seed": seed, "audio_seed": seed, "text_prompt": text_prompt,
                  "voice_prompt": voice_prompt}
        self.url = chat_url(url, params)
        self.onset_mode = onset
        self.speech_dbfs = float(speech_dbfs)
        self.onset_clock = onset_clock
        self.tail_silence_s = float(tail_silence_s)
        self.max_wait_s = float(drain_s)
        self.handshake_timeout_s = float(handshake_timeout_s)
        self.send_row_id = bool(send_row_id)
        self.api_key_env = api_key_env or ""
        self.retry = RetryPolicy(max_tries=int(max_tries))
        what = {"audio": f"the first 80 ms output frame at or above {self.speech_dbfs:g} dBFS RMS",
                "text": "the first text token", "first": f"the first text token or output frame at or above "
                f"{self.speech_dbfs:g} dBFS, whichever comes first"}[onset]
        clock = {"stream": "stream clock (s of input sent when it arrived)",
                 "wall": "wall clock (s since the first input chunk)"}[onset_clock]
        self.onset_rule = f"{what}, on the {clock}"
        if self.api_key_env:
            api_key(self.api_key_env)

    # ------------------------------------------------------------------ session
    async def connect(self, request: AudioRequest, sink: OutputSink, config: SessionConfig) -> "MoshiConnection":
        """Open a session (WebSocket + the server's 0x00 handshake), with retries.

        Raises:
            AgentError: a second audio in the request; NetError: the server refused or could not
                be reached (after retries), or its handshake did not come in time.
        """
        from spear_metrics.agents.net import with_retries

        if request.audio2 is not None:
            raise AgentError("moshi takes one input audio (audio2 is not supported)")
        conn = MoshiConnection(self, request, sink, synchronous=config.time_synchronous)
        await with_retries(conn.open, self.retry)
        return conn

    def onset(self, result: SessionResult) -> Optional[float]:
        """The answer's onset in s from the input start: the first reported output frame (see the
        module docstring) on :attr:`onset_clock`."""
        t = result.first_audio_s if self.onset_clock == "wall" else result.first_audio_input_s
        return None if t is None else max(0.0, t)


class MoshiConnection:
    """One Moshi-protocol session (see :class:`MoshiAgent`)."""

    def __init__(self, agent: MoshiAgent, request: AudioRequest, sink: OutputSink, *, synchronous: bool = False):
        from spear_datasets.audio import resample

        self.agent, self.request, self.sink = agent, request, sink
        self._input = resample(request.mono()[None, :], request.sample_rate, MOSHI_SAMPLE_RATE)[0]
        self._in = 0  # input samples taken (request rate)
        self._buf: list[np.ndarray] = []  # 24 kHz samples not yet making a whole frame
        self._buffered = 0
        self._taken = 0  # 24 kHz samples taken from the input (or the tail's zeros)
        self.frames_sent = 0
        self.samples_received = 0
        self.ws: Any = None
        self._receiver: Optional[asyncio.Task] = None
        self._closing = False
        self._encoder = OpusEncoder()
        self._decoder = OpusDecoder()
        # output side: every frame as it arrives (time-synchronous, FDB), or whole frames judged and
        # reported from the onset frame on (SPEAR)
        self._synchronous = bool(synchronous)
        self._out_pending = np.zeros(0, np.float32)  # decoded samples short of a whole frame
        self._started = False  # the onset frame has been reported
        self._last: Optional[np.ndarray] = None  # the latest frame before the onset (a token's step)
        self._held: list[np.ndarray] = []  # silent frames after the onset, reported if speech follows

    async def open(self) -> None:
        """WebSocket handshake, then the server's 0x00 message (one try; :func:`with_retries` retries).

        Raises:
            NetError: refused (HTTP status), unreachable, closed or timed out before the handshake;
                ProtocolError: a first message other than the handshake; an error message (0x05).
        """
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

        from spear_metrics.agents.net import (REQUEST_ID_HEADER, RETRY_CLOSE_CODES, NetError, api_key, http_error,
                                              mask_secrets, request_id, within)

        self._closing = False
        headers = {}
        if self.agent.api_key_env:
            headers["Authorization"] = f"Bearer {api_key(self.agent.api_key_env)}"
        if self.agent.send_row_id and self.request.row_id:
            headers[REQUEST_ID_HEADER] = request_id(self.request.row_id)
        where = urlsplit(self.agent.url)._replace(query="").geturl()
        try:
            self.ws = await within(self.agent.handshake_timeout_s,
                                   connect(self.agent.url, additional_headers=headers, max_size=None,
                                           open_timeout=None, ping_interval=None, close_timeout=2, max_queue=None),
                                   f"WebSocket handshake with {where}")
        except InvalidStatus as e:
            r = e.response
            body = r.body.decode("utf-8", "replace") if isinstance(r.body, bytes) else ""
            raise http_error(r.status_code, body, dict(r.headers.raw_items()), what=f"{where} (WebSocket handshake)") from None
        except (OSError, InvalidHandshake) as e:
            raise NetError(f"cannot open a WebSocket to {where}: {type(e).__name__}: {mask_secrets(str(e))[:160]}",
                           retryable=isinstance(e, OSError)) from None
        try:
            first = await within(self.agent.handshake_timeout_s, self.ws.recv(), f"the 0x00 handshake from {where}")
            kind, payload = decode_message(first)
            if kind == KIND_ERROR:
                raise NetError(f"server error before the handshake: {mask_secrets(payload.decode('utf-8', 'replace'))[:160]}")
            if kind != KIND_HANDSHAKE:
                raise ProtocolError(f"expected the 0x00 handshake first, got a {KIND_NAMES[kind]} message")
        except ConnectionClosed as e:
            await self._abort()
            code = getattr(getattr(e, "rcvd", None), "code", None)
            raise NetError(f"server closed the connection before the handshake ({_close_text(e)})",
                           retryable=code in RETRY_CLOSE_CODES, status=code) from None
        except BaseException:
            await self._abort()
            raise
        self._receiver = asyncio.create_task(self._receive())

    # ------------------------------------------------------------------ sending
    async def send_audio(self, chunk: np.ndarray) -> None:
        """Take the chunk's span of the (pre-resampled) input, send every whole 80 ms frame."""
        self._in += chunk.shape[1]
        end = round(self._in * MOSHI_SAMPLE_RATE / self.request.sample_rate)
        seg = self._input[self._taken:end]
        if len(seg) < end - self._taken:
            seg = np.concatenate([seg, np.zeros(end - self._taken - len(seg), np.float32)])
        self._taken = end
        self._buf.append(seg)
        self._buffered += len(seg)
        if self._buffered < FRAME_SAMPLES:
            return
        data = np.concatenate(self._buf)
        n = len(data) // FRAME_SAMPLES * FRAME_SAMPLES
        self._buf, self._buffered = [data[n:]], len(data) - n
        for i in range(0, n, FRAME_SAMPLES):
            await self._send(encode_message(KIND_AUDIO, self._encoder.encode(data[i:i + FRAME_SAMPLES])))
            self.frames_sent += 1

    async def _send(self, msg: bytes) -> None:
        from websockets.exceptions import ConnectionClosed

        from spear_metrics.agents.net import NetError

        if len(msg) <= 1:
            return
        try:
            await self.ws.send(msg)
        except ConnectionClosed as e:
            await _settle(self._receiver)
            self.sink.check()  # the receiver's reason first (what the server said before closing)
            raise NetError(f"server closed the connection while the input was being sent ({_close_text(e)})") from None

    async def end_input(self) -> None:
        """Send the last partial frame (zero-padded, as FDB's client), then wait up to ``drain_s``
        for the output frames still in flight (one per input frame, less the server's first one
        or two); the session is then done (the server answers only while it hears input).

        Raises:
            NoAnswerError: (SPEAR) no output at all, or no onset (the system stayed silent).
        """
        if self._buffered:
            rest = np.concatenate(self._buf)
            frame = np.concatenate([rest, np.zeros(FRAME_SAMPLES - len(rest), np.float32)])
            self._buf, self._buffered = [], 0
            await self._send(encode_message(KIND_AUDIO, self._encoder.encode(frame)))
            self.frames_sent += 1
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.agent.max_wait_s
        want = (self.frames_sent - 2) * FRAME_SAMPLES
        while self.samples_received < want and loop.time() < deadline:
            self.sink.check()
            await asyncio.sleep(0.02)
        self.sink.check()
        if not self._synchronous and not self._started:
            if self.samples_received == 0:
                raise NoAnswerError("the server sent no output audio")
            what = {"audio": f"no output frame at or above {self.agent.speech_dbfs:g} dBFS",
                    "text": "no text token", "first": f"no text token and no output frame at or above "
                    f"{self.agent.speech_dbfs:g} dBFS"}[self.agent.onset_mode]
            raise NoAnswerError(f"the system stayed silent ({what})")
        self.sink.done("stop")

    async def close(self) -> None:
        await self._abort()
        if self._receiver is not None:
            try:
                await self._receiver
            except BaseException:
                pass

    async def _abort(self) -> None:
        """Close the WebSocket, then stop the receiver (which ignores what still arrives). The
        connection's queue is unbounded (``max_queue=None``): with 16 unread frames queued (a
        receiver stopped by an error) websockets would stop reading the socket, and the close
        would wait its whole ``close_timeout`` for the server's close frame."""
        self._closing = True
        if self.ws is not None:
            try:
                await asyncio.wait_for(self.ws.close(), 2)
            except BaseException:
                pass
        if self._receiver is not None:
            self._receiver.cancel()
        self.ws = None

    # ------------------------------------------------------------------ receiving
    async def _receive(self) -> None:
        from websockets.exceptions import ConnectionClosed

        from spear_metrics.agents.net import mask_secrets

        try:
            async for msg in self.ws:
                if not self._closing:
                    self._handle(msg)
            if not self._closing:
                self._lost(self.ws.close_code if self.ws is not None else None,
                           f"code {self.ws.close_code}" if self.ws is not None and self.ws.close_code else "closed")
        except ConnectionClosed as e:
            if not self._closing:
                self._lost(getattr(getattr(e, "rcvd", None), "code", None), _close_text(e))
        except asyncio.CancelledError:
            raise
        except AgentError as e:
            self.sink.fail(e)
        except Exception as e:  # a bug in a handler must not hang the session
            self.sink.fail(ProtocolError(f"cannot handle a server message: {type(e).__name__}: {mask_secrets(str(e))[:120]}"))

    def _lost(self, code: Optional[int], why: str) -> None:
        from spear_metrics.agents.net import NetError

        if self.sink.is_done:
            return
        phase = "mid-answer" if self.sink.result.chunks else "before answering"
        self.sink.fail(NetError(f"server closed the connection {phase} ({why})", status=code))

    def _handle(self, msg: Any) -> None:
        kind, payload = decode_message(msg)
        if kind == KIND_AUDIO:
            pcm = self._decoder.decode(payload)
            if pcm.size:
                self.samples_received += pcm.size
                self._frames(pcm)
        elif kind == KIND_TEXT:
            try:
                text = payload.decode("utf-8")
            except UnicodeDecodeError:
                raise ProtocolError("malformed text message from the server (not UTF-8)") from None
            if text:
                if not self._started and self.agent.onset_mode in ("text", "first") and not self._synchronous:
                    self._start(self._last if self._last is not None else np.zeros(FRAME_SAMPLES, np.float32))
                self.sink.text(text)
        elif kind == KIND_ERROR:
            from spear_metrics.agents.net import NetError, mask_secrets

            raise NetError(f"server error: {mask_secrets(payload.decode('utf-8', 'replace'))[:160]}")
        elif kind == KIND_HANDSHAKE:
            raise ProtocolError("a second handshake from the server mid-session")
        # control, metadata and ping messages carry nothing a benchmark needs

    def _frames(self, pcm: np.ndarray) -> None:
        """Judge each whole 80 ms output frame: report it, hold it or drop it (module docstring)."""
        if self._synchronous:  # FDB: the whole reply channel, as it arrives
            self.sink.audio(pcm, MOSHI_SAMPLE_RATE)
            return
        data = np.concatenate([self._out_pending, pcm]) if self._out_pending.size else pcm
        n = len(data) // FRAME_SAMPLES * FRAME_SAMPLES
        self._out_pending = data[n:]
        for i in range(0, n, FRAME_SAMPLES):
            frame = data[i:i + FRAME_SAMPLES]
            voiced = frame_levels_dbfs(frame)[0] >= self.agent.speech_dbfs
            if not self._started:
                if voiced and self.agent.onset_mode in ("audio", "first"):
                    self._start(frame)
                else:
                    self._last = frame
            elif voiced:
                for held in self._held:
                    self.sink.audio(held, MOSHI_SAMPLE_RATE)
                self._held = []
                self.sink.audio(frame, MOSHI_SAMPLE_RATE)
            else:
                self._held.append(frame)

    def _start(self, frame: np.ndarray) -> None:
        """The onset: ``frame`` is the answer's first (the sink stamps both clocks now)."""
        self._started = True
        self._last = None
        self.sink.audio(frame, MOSHI_SAMPLE_RATE)


def _close_text(e: BaseException) -> str:
    """How a connection closed, in words (the project's one reading of a close frame)."""
    return _close_reason(e)[1]
