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
  for it): the adapter declares ``max_concurrency=1`` (the harness lowers ``--concurrency`` to
  it); raise it for a server that batches sessions.

Onset. Moshi's output audio never stops (silence frames too), so "first output audio" would be
the second frame of every session; the onset is the first output frame that carries the answer:

- ``onset=audio`` (default): the first 80 ms output frame whose RMS level reaches
  ``speech_dbfs`` (-40 dBFS);
- ``onset=text``: the first text token (Moshi writes its inner monologue a little ahead of its
  speech; the Python server sends no padding tokens), i.e. the frame of that step;
- ``onset=first``: whichever of the two comes first.

The frame rule (one for SPEAR and Full-Duplex-Bench). Kyutai's server runs one model step per
80 ms input frame; ``LMGen`` holds back the first ``lead_frames`` steps (its acoustic delay: one
step for Moshi, ``max(delays)`` in ``moshi/models/lm.py``), so output frame ``j`` (the ``j``-th
80 ms frame of the decoded reply, counted from the session's first output sample) is the
server's reply to input frame ``j + lead_frames``. It is placed at that input frame's start,
``(j + lead_frames) * 80 ms`` of the input: the moment the client sends that frame (the client
sends each frame at the start of its span, as Full-Duplex-Bench's client and SPEAR's realtime
proxy do) and the layout of Full-Duplex-Bench's own Moshi client (one frame of zeros, then the
frames back to back). The onset's time is that place (``onset_clock=frame``, default): the
model's decision, free of the server's compute time and of transport lag, so a server slower than
real time gives the same onset as a fast one. ``onset_clock=stream`` (seconds of input sent when
the frame arrived) and ``onset_clock=wall`` (seconds since the first input chunk, the clock of
SPEAR's realtime proxy) keep the arrival-time readings; both include the server's lag.

Lag and completeness. Each output frame's arrival is compared with the sending of the input
frame that produced it; the largest delay of a session is ``server_lag_max_s`` (a real-time
server's is its compute time per frame plus transport; a server slower than real time builds up
a backlog and the lag grows through the session). A row whose ``server_lag_max_s`` passes
``server_lag_bound_s`` (1 s) is flagged (``response_times.csv``, ``run_info.json``, the
console). After the last input frame the adapter waits for every output frame the input asks
for (one per input frame sent, less ``lead_frames``): as long as frames keep coming (no gap of
``drain_s``) and at most ``drain_s`` plus twice the length of the stream sent; the frames received and expected
are counted per session, and ``fdb-infer`` notes a reply with frames missing. The adapter reports every output frame as it arrives, silence
included (the session keeps the whole reply channel with its timing); SPEAR's answer
(:meth:`MoshiAgent.answer`, ``spearbench infer``) is the output from the onset frame to the last
frame at or above ``speech_dbfs`` (the system's speech, gaps inside it kept); a session without
any such frame (or token, for ``onset=text``) has no answer and fails its row, as SPEAR's
realtime proxy fails a session without answer audio. Once the answer has begun and
``end_silence_s`` (2 s) of output frames below ``speech_dbfs`` have followed its last loud frame
after the whole input was sent, the adapter reports the answer complete and the session stops
its tail silence there (SPEAR; ``end_silence_s=0`` streams the whole tail); a time-synchronous
session (FDB) always streams to the input's end.
SPEAR's ``transcript_answer`` is the text of the tokens that came with the answer's frames (from
its onset frame to its last loud frame), not every token of the session.
``fdb-infer`` lays the reply channel out by the same frame rule (``timeline =
"frame_synchronous"``): ``lead_frames`` frames of zeros and then the decoded frames back to back
(output frame ``j`` at ``(j + lead_frames) * 80 ms``, whatever its arrival time), frame for frame with the
input; the last partial input frame is sent zero-padded and the frames still in flight are
drained (see above) before the channel is cut to the input's length.
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
    LiveInput,
    NetworkAgentBase,
    NoAnswerError,
    OutputSink,
    ProtocolError,
    SessionAnswer,
    SessionConfig,
    SessionResult,
)
from spear_metrics.agents.net import close_reason as _close_reason
from spear_metrics.agents.net import settle as _settle
from spear_metrics.agents.websocket import MAX_FRAME_BYTES, WebSocketConnection
from spear_metrics.core.secrets import register_url_secrets

#: Moshi's audio rate (Hz) both ways (Mimi)
MOSHI_SAMPLE_RATE = 24_000
#: one Mimi frame: 80 ms at 24 kHz
FRAME_SAMPLES = 1_920
FRAME_S = FRAME_SAMPLES / MOSHI_SAMPLE_RATE
#: message kinds (first byte of every binary message)
KIND_HANDSHAKE, KIND_AUDIO, KIND_TEXT, KIND_CONTROL, KIND_METADATA, KIND_ERROR, KIND_PING = range(7)
KIND_NAMES = {KIND_HANDSHAKE: "handshake", KIND_AUDIO: "audio", KIND_TEXT: "text", KIND_CONTROL: "control",
              KIND_METADATA: "metadata", KIND_ERROR: "error", KIND_PING: "ping"}


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
    """Ogg-Opus bytes -> 24 kHz mono float32 (``sphn.OpusStreamReader``), clipped to [-1, 1].

    Opus is a lossy transform codec: a full-scale signal decodes with peaks up to about 1 % past
    full scale (1.0085 on the fixture speech). A player clips them; so does this decoder, so that
    the answer is valid agent audio (``agents.base.answer_samples`` refuses float samples beyond
    full scale)."""

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
            pcm = np.asarray(self._reader.append_bytes(bytes(data)), dtype=np.float32).reshape(-1)
        except ValueError as e:
            raise ProtocolError(f"undecodable Ogg-Opus audio from the server: {str(e)[:80]}") from None
        return np.clip(pcm, -1.0, 1.0, out=pcm)


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
        onset_clock: ``frame`` (the frame rule: ``(j + lead_frames) * 80 ms`` for output frame ``j``, free of server lag), ``stream`` (s of input sent when the onset frame arrived) or ``wall`` (s since the first input chunk, SPEAR's realtime proxy's clock).
        tail_silence_s: seconds of silence streamed after the input: the window for the answer.
        text_temperature: sampling temperature of the text stream (query parameter; Rust backend only).
        text_topk: top-k of the text stream (query parameter; Rust backend only).
        audio_temperature: sampling temperature of the audio tokens (query parameter; Rust backend only).
        audio_topk: top-k of the audio tokens (query parameter; Rust backend only).
        seed: random seed (query parameters ``seed``, PersonaPlex; ``text_seed`` and ``audio_seed``, Rust backend).
        text_prompt: PersonaPlex's role prompt (query parameter ``text_prompt``; its server requires one).
        voice_prompt: PersonaPlex's voice file name, e.g. ``NATF2.pt`` (query parameter ``voice_prompt``).
        handshake_timeout_s: longest wait (s) for the connection and the server's 0x00 handshake (a busy Python server holds new sessions until the current one ends).
        drain_s: after the last input frame, the longest gap (s) between output frames while frames are still missing (the whole wait is at most ``drain_s`` plus twice the length of the stream sent).
        lead_frames: input frames the server answers before its first output frame (Kyutai's Python server: 1, LMGen's acoustic delay).
        server_lag_bound_s: a session whose output frames arrive more than this (s) after the input frames that produced them is flagged.
        end_silence_s: SPEAR: seconds of output below speech_dbfs after the answer's last loud frame, once the input was sent, that end the tail silence early (0: always stream the whole tail).
        api_key_env: environment variable whose value is sent as a Bearer token (empty: none).
        max_tries: tries to open a session (retries: refused/reset connections, HTTP 429/5xx, close codes 1012/1013).
        send_row_id: send the row's identity (the clip's file name) in the ``X-Client-Request-Id`` tracing header.
        max_concurrency: sessions the server serves at once (``--concurrency`` is lowered to it); Kyutai's Python servers serve one; raise it for a server that batches sessions.
        ws_compression: offer WebSocket ``permessage-deflate`` (default off, as openai-realtime: the Opus frames
            barely compress, and deflating every chunk costs CPU for nothing; openai-realtime's benchmark: about half the client's).
    """

    paced = True
    #: the native input chunk (ms): one Mimi frame, as Kyutai's and FDB's clients send them
    chunk_ms = 80.0
    live_input = True
    #: FDB's reply channel as FDB's Moshi client writes it: one frame of zeros, then every output frame back to back
    timeline = "frame_synchronous"
    timeline_lead_s = FRAME_S

    def __init__(self, url: str = "ws://127.0.0.1:8998/api/chat", onset: str = "audio", speech_dbfs: float = -40.0,
                 onset_clock: str = "frame", tail_silence_s: float = 10.0, text_temperature: Optional[float] = None,
                 text_topk: Optional[int] = None, audio_temperature: Optional[float] = None,
                 audio_topk: Optional[int] = None, seed: Optional[int] = None, text_prompt: Optional[str] = None,
                 voice_prompt: Optional[str] = None, handshake_timeout_s: float = 60.0,
                 drain_s: float = 2.0, end_silence_s: float = 2.0, api_key_env: str = "", max_tries: int = 3,
                 send_row_id: bool = True, max_concurrency: int = 1, ws_compression: bool = False,
                 lead_frames: int = 1, server_lag_bound_s: float = 1.0):
        from spear_metrics.agents.net import RetryPolicy, api_key

        if onset not in ("audio", "text", "first"):
            raise ValueError(f"onset must be audio, text or first, got {onset!r}")
        if onset_clock not in ("frame", "stream", "wall"):
            raise ValueError(f"onset_clock must be frame, stream or wall, got {onset_clock!r}")
        if int(lead_frames) < 0:
            raise ValueError(f"lead_frames must be >= 0, got {lead_frames}")
        if not (math.isfinite(server_lag_bound_s) and server_lag_bound_s > 0):
            raise ValueError(f"server_lag_bound_s must be > 0 s, got {server_lag_bound_s}")
        if not math.isfinite(speech_dbfs) or speech_dbfs >= 0:
            raise ValueError(f"speech_dbfs must be a level below 0 dBFS, got {speech_dbfs}")
        for name, v in (("tail_silence_s", tail_silence_s), ("drain_s", drain_s), ("end_silence_s", end_silence_s)):
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be >= 0 s, got {v}")
        if not handshake_timeout_s > 0:
            raise ValueError("handshake_timeout_s must be > 0")
        if int(max_concurrency) < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        params = {"text_temperature": text_temperature, "text_topk": text_topk,
                  "audio_temperature": audio_temperature, "audio_topk": audio_topk,
                  "seed": seed, "text_seed": seed, "audio_seed": seed, "text_prompt": text_prompt,
                  "voice_prompt": voice_prompt}
        register_url_secrets(url)  # a key typed inside the URL is masked wherever it would appear
        self.url = chat_url(url, params)
        self.onset_mode = onset
        self.speech_dbfs = float(speech_dbfs)
        self.onset_clock = onset_clock
        self.tail_silence_s = float(tail_silence_s)
        self.max_wait_s = float(drain_s)
        self.end_silence_s = float(end_silence_s)
        self.handshake_timeout_s = float(handshake_timeout_s)
        self.send_row_id = bool(send_row_id)
        self.ws_compression = bool(ws_compression)
        self.api_key_env = api_key_env or ""
        self.retry = RetryPolicy(max_tries=int(max_tries))
        self.max_concurrency = int(max_concurrency)
        self.lead_frames = int(lead_frames)
        self.timeline_lead_s = self.lead_frames * FRAME_S  # the frame rule, for fdb-infer's reply channel
        self.server_lag_bound_s = float(server_lag_bound_s)
        what = {"audio": f"the first 80 ms output frame at or above {self.speech_dbfs:g} dBFS RMS",
                "text": "the first text token", "first": f"the first text token or output frame at or above "
                f"{self.speech_dbfs:g} dBFS, whichever comes first"}[onset]
        clock = {"frame": f"frame clock (output frame j at (j + {self.lead_frames}) x 80 ms, free of server lag)",
                 "stream": "stream clock (s of input sent when it arrived)",
                 "wall": "wall clock (s since the first input chunk)"}[onset_clock]
        self.onset_rule = f"{what}, on the {clock}"
        self.onset_kind = "frame" if onset_clock == "frame" else "first_audio"
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
        """The answer's onset in s from the input start (see :meth:`answer`) on :attr:`onset_clock`;
        ``None`` when the session holds no answer."""
        try:
            return self.answer(result).onset
        except NoAnswerError:
            return None

    def answer(self, result: SessionResult) -> SessionAnswer:
        """SPEAR's answer from the session's output timeline (every 80 ms frame, as it arrived):
        from the onset frame (``onset=audio``: the first frame at or above :attr:`speech_dbfs`;
        ``text``: the frame of the first text token, i.e. the last whole frame received before
        it, or frame 0 when none had come; ``first``: whichever comes first) to the last frame at
        or above :attr:`speech_dbfs` after it. The onset's time on :attr:`onset_clock`: ``frame``
        (default): ``(j + lead_frames) * 80 ms`` for onset frame ``j`` (the module's frame rule);
        ``stream``/``wall``: the arrival of the chunk completing that frame (or of the token),
        floored at 0. ``response_time_s`` is the onset's arrival on the wall clock minus the end
        of the input. The answer's text is the tokens of its frames (onset frame to last loud
        frame; a token belongs to the frame it followed).

        Raises:
            NoAnswerError: no output audio at all, or no onset (the system stayed silent).
        """
        if not result.chunks:
            raise NoAnswerError("the server sent no output audio")
        x = np.concatenate([c.audio.mean(axis=0) for c in result.chunks])
        ends = np.cumsum([c.audio.shape[1] for c in result.chunks])  # output samples received after each chunk
        voiced = np.flatnonzero(frame_levels_dbfs(x) >= self.speech_dbfs)
        token_frames = [token_frame(ends, ev.after_chunks) for ev in result.text_events]
        found = []  # (arrival order, first frame, wall clock, stream clock)
        if self.onset_mode in ("audio", "first") and voiced.size:
            c = int(np.searchsorted(ends, (voiced[0] + 1) * FRAME_SAMPLES))  # the chunk completing that frame
            found.append((c, int(voiced[0]), result.chunks[c].received_s, result.chunks[c].input_sent_s))
        if self.onset_mode in ("text", "first") and result.text_events:
            ev = result.text_events[0]
            found.append((ev.after_chunks - 0.5, token_frames[0], ev.received_s, ev.input_sent_s))
        if not found:
            what = {"audio": f"no output frame at or above {self.speech_dbfs:g} dBFS",
                    "text": "no text token", "first": f"no text token and no output frame at or above "
                    f"{self.speech_dbfs:g} dBFS"}[self.onset_mode]
            raise NoAnswerError(f"the system stayed silent ({what})")
        _, start, wall, stream = min(found)
        after = voiced[voiced >= start]
        end = int(after[-1]) if after.size else start
        t = {"frame": (start + self.lead_frames) * FRAME_S, "wall": wall, "stream": stream}[self.onset_clock]
        text = "".join(ev.text for ev, j in zip(result.text_events, token_frames) if start <= j <= end).strip()
        return SessionAnswer(audio=x[start * FRAME_SAMPLES:(end + 1) * FRAME_SAMPLES][None, :],
                             sample_rate=MOSHI_SAMPLE_RATE, onset=max(0.0, t), text=text or None,
                             finish_reason=result.finish_reason,
                             response_time_s=result.response_time(wall),
                             first_audio_s=wall, first_audio_input_s=stream)


def token_frame(ends: np.ndarray, after_chunks: int) -> int:
    """The output frame a text token belongs to: the last whole 80 ms frame received before it
    (Kyutai's server sends each step's audio, then its token), 0 when none had come.

    Args:
        ends: output samples received after each chunk (cumulative, ``(n_chunks,)``).
        after_chunks: output chunks received before the token (:attr:`TextEvent.after_chunks`).
    """
    whole = int(ends[after_chunks - 1]) // FRAME_SAMPLES if after_chunks else 0
    return max(whole - 1, 0)


class MoshiConnection(WebSocketConnection):
    """One Moshi-protocol session (see :class:`MoshiAgent`); its receiver starts after the 0x00
    handshake, so a receiver error or a lost connection always fails the sink."""

    def __init__(self, agent: MoshiAgent, request: AudioRequest, sink: OutputSink, *, synchronous: bool = False):
        from spear_datasets.audio import resample

        super().__init__(agent, request, sink)
        self._live = LiveInput(request.sample_rate, MOSHI_SAMPLE_RATE) if request.live else None
        self._input = None if request.live else resample(request.mono()[None, :], request.sample_rate, MOSHI_SAMPLE_RATE)[0]
        self._in = 0  # input samples taken (request rate)
        self._buf: list[np.ndarray] = []  # 24 kHz samples not yet making a whole frame
        self._buffered = 0
        self._taken = 0  # 24 kHz samples taken from the input (or the tail's zeros)
        self.frames_sent = 0
        self.samples_received = 0
        self._sent_at: list[float] = []  # wall clock (s after t0) at which each input frame went out
        self._frames_out = 0  # whole output frames judged so far
        self._encoder = OpusEncoder()
        self._decoder = OpusDecoder()
        # output side: every decoded chunk is reported as it arrives (SPEAR's answer is picked out of
        # it afterwards, MoshiAgent.answer); whole 80 ms frames are judged on the way to know whether
        # the answer has begun
        self._synchronous = bool(synchronous)
        self._out_pending = np.zeros(0, np.float32)  # decoded samples short of a whole frame
        self._answering = False  # an onset frame (or token) has arrived, by the agent's onset rule
        self._quiet = 0  # whole frames below speech_dbfs since the last loud frame (or token) of the answer

    async def open(self) -> None:
        """WebSocket handshake, then the server's 0x00 message (one try; :func:`with_retries` retries).

        Raises:
            NetError: refused (HTTP status), unreachable, closed or timed out before the handshake;
                ProtocolError: a first message other than the handshake; an error message (0x05).
        """
        from websockets.exceptions import ConnectionClosed

        from spear_metrics.agents.net import (REQUEST_ID_HEADER, RETRY_CLOSE_CODES, NetError, api_key, mask_secrets,
                                              request_id, within)

        self._closing = False
        headers = {}
        if self.agent.api_key_env:
            headers["Authorization"] = f"Bearer {api_key(self.agent.api_key_env)}"
        if self.agent.send_row_id and self.request.row_id:
            headers[REQUEST_ID_HEADER] = request_id(self.request.row_id)
        where = urlsplit(self.agent.url)._replace(query="").geturl()
        await self._handshake(self.agent.url, where, headers, timeout_s=self.agent.handshake_timeout_s, max_size=MAX_FRAME_BYTES)
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
        """Take the chunk's span of the (pre-resampled) input (a live request: the chunk itself),
        send every whole 80 ms frame."""
        if self._live is not None:
            seg = self._live.take(chunk)
        else:
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
            await self._send_frame(data[i:i + FRAME_SAMPLES])

    async def _send_frame(self, frame: np.ndarray) -> None:
        self._sent_at.append(self.sink.now())
        await self._send(encode_message(KIND_AUDIO, self._encoder.encode(frame)))
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
        """Send the last partial frame (zero-padded, as FDB's client), then wait for the output
        frames still in flight: one per input frame sent, less ``lead_frames`` (the server answers
        only while it hears input). The wait lasts while frames keep coming (no gap longer than
        ``drain_s``), at most ``drain_s`` plus twice the length of the stream sent (a server up to
        three times slower than real time); the frames received and expected are recorded on the session's result.
        Whether the session holds an answer is :meth:`MoshiAgent.answer`'s to say."""
        if self._buffered:
            rest = np.concatenate(self._buf)
            frame = np.concatenate([rest, np.zeros(FRAME_SAMPLES - len(rest), np.float32)])
            self._buf, self._buffered = [], 0
            await self._send_frame(frame)
        loop = asyncio.get_running_loop()
        gap = self.agent.max_wait_s
        cap = loop.time() + gap + 2 * self.frames_sent * FRAME_S  # a server up to 3x slower than real time
        expected = max(self.frames_sent - self.agent.lead_frames, 0)
        self.sink.result.frames_expected = expected
        self.sink.result.frames_received = self.samples_received // FRAME_SAMPLES
        quiet_from = loop.time()
        seen = self.samples_received
        while self.samples_received < expected * FRAME_SAMPLES:
            self.sink.check()
            now = loop.time()
            if self.samples_received != seen:
                seen, quiet_from = self.samples_received, now
            if now >= cap or now - quiet_from >= gap:
                break
            await asyncio.sleep(0.02)
        self.sink.check()
        self.sink.done("stop")

    # ------------------------------------------------------------------ receiving
    def _lost_after_setup(self, code: Optional[int], why: str) -> None:
        from spear_metrics.agents.net import NetError

        if self.sink.is_done:
            return
        phase = "mid-answer" if self._answering else "before answering"
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
                if self.agent.onset_mode in ("text", "first"):
                    self._answering, self._quiet = True, 0
                self.sink.text(text)
        elif kind == KIND_ERROR:
            from spear_metrics.agents.net import NetError, mask_secrets

            raise NetError(f"server error: {mask_secrets(payload.decode('utf-8', 'replace'))[:160]}")
        elif kind == KIND_HANDSHAKE:
            raise ProtocolError("a second handshake from the server mid-session")
        # control, metadata and ping messages carry nothing a benchmark needs

    def _frames(self, pcm: np.ndarray) -> None:
        """Report the decoded samples as they arrived; judge each whole 80 ms frame on the way:
        has the answer begun, and (SPEAR) is it complete (``end_silence_s`` of quiet frames after
        it, the input all sent)?"""
        self.sink.audio(pcm, MOSHI_SAMPLE_RATE)
        data = np.concatenate([self._out_pending, pcm]) if self._out_pending.size else pcm
        n = len(data) // FRAME_SAMPLES * FRAME_SAMPLES
        self._out_pending = data[n:]
        if not n:
            return
        # each whole output frame j against the sending of input frame j + lead_frames (its producer)
        now, result = self.sink.now(), self.sink.result
        for j in range(self._frames_out, self._frames_out + n // FRAME_SAMPLES):
            k = j + self.agent.lead_frames
            if k < len(self._sent_at):
                lag = now - self._sent_at[k]
                if result.server_lag_max_s is None or lag > result.server_lag_max_s:
                    result.server_lag_max_s = lag
        self._frames_out += n // FRAME_SAMPLES
        result.frames_received = self._frames_out
        for loud in frame_levels_dbfs(data[:n]) >= self.agent.speech_dbfs:
            if loud and self.agent.onset_mode in ("audio", "first"):
                self._answering = True
            if self._answering:
                self._quiet = 0 if loud else self._quiet + 1
        if (self._answering and not self._synchronous and self.agent.end_silence_s > 0
                and self._quiet * FRAME_S >= self.agent.end_silence_s - 1e-9
                and self.sink.input_sent_s >= self.request.duration_s):
            self.sink.answer_complete()


def _close_text(e: BaseException) -> str:
    """How a connection closed, in words (the project's one reading of a close frame)."""
    return _close_reason(e)[1]
