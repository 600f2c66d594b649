"""``gemini-live``: Google's Gemini Live API (``BidiGenerateContent`` over a WebSocket), full duplex.

The session (message and field names as the ``google-genai`` SDK writes and reads them:
``google/genai/live.py``, ``_live_converters.py``, ``types.py``; Google's "Live API" reference):

- ``wss://generativelanguage.googleapis.com/ws/google.ai.generativelanguage.<v1beta|v1alpha>.GenerativeService.BidiGenerateContent``,
  the API key in the ``x-goog-api-key`` header (as the SDK sends it; never in the URL);
- first message ``setup``: ``model`` (``models/<name>``), ``generationConfig``
  (``responseModalities: ["AUDIO"]``, ``speechConfig.voiceConfig.prebuiltVoiceConfig.voiceName``),
  optional ``systemInstruction``, ``realtimeInputConfig.automaticActivityDetection``
  (``disabled: true`` for push-to-talk), ``outputAudioTranscription: {}``; the server answers
  ``setupComplete``;
- push-to-talk (``vad=ptt``, default): ``realtimeInput.activityStart``, the input as 16 kHz
  16-bit mono PCM in ``realtimeInput.audio`` chunks (``{data: base64, mimeType:
  "audio/pcm;rate=16000"}``, 40 ms each, paced in real time by the harness), then
  ``realtimeInput.activityEnd`` right after the chunk holding the input's last sample;
  automatic activity detection (``vad=auto``): the input and ``tail_silence_s`` of silence,
  then ``realtimeInput.audioStreamEnd``; the server decides when the user's turn ended
  (and may answer before the input ends);
- the server streams ``serverContent.modelTurn.parts[].inlineData`` (``mimeType
  "audio/pcm;rate=24000"``, base64 16-bit PCM), ``outputTranscription.text``, ``interrupted``,
  ``generationComplete``, ``turnComplete`` (the answer is done), and may send ``goAway``
  (``timeLeft``) before closing the connection.

Onset (``onset_clock=wall``, default): the wall clock at the first ``inlineData`` minus the clock
just before the first input chunk (``activityStart`` goes out just before it), floored at 0: the
rule of SPEAR's realtime proxy (``gpt-realtime-2.py``; SPEAR has not published its Gemini proxy).
``onset_clock=stream``: seconds of input sent when the first audio arrived (after the input's end
in push-to-talk this stays at the input's length: use the wall clock there). SPEAR's answer is
every audio chunk of the session back to back. The last input chunk goes out at the start of the
span it covers, so an instant push-to-talk answer can arrive up to one chunk before the clip's
nominal end: ``answer_start_time`` (the published key) keeps that wall-clock reading, while the
project's ``response_time_s`` counts an answer that arrived after the last chunk was sent as 0,
never as an interruption (:meth:`SessionResult.response_time`).

Why ``websockets`` and not the SDK's live client (``client.aio.live.connect``): with an API key the
SDK rewrites any ``base_url`` to ``wss://`` (``BaseApiClient._websocket_base_url``), so it cannot
reach a plain ``ws://`` loopback server (the tests' fake; a local gateway), and it takes the first
server message as the answer to ``setup`` without checking it; the adapter also needs the
handshake's HTTP status and ``Retry-After`` and the close codes, which the project's network
plumbing (:mod:`spear_metrics.agents.net`) maps once for every WebSocket adapter. The messages
are the SDK's (a test compares ours with the SDK's own serialization).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import math
import os
from typing import Any, Optional
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from spear_metrics.agents.base import AgentError
from spear_metrics.agents.duplex import (
    AudioRequest,
    NetworkAgentBase,
    OutputSink,
    ProtocolError,
    SessionConfig,
    SessionResult,
)
from spear_metrics.agents.duplex import pcm16_bytes
from spear_metrics.agents.net import close_reason as _close_reason
from spear_metrics.agents.net import settle as _settle
from spear_metrics.agents.websocket import MAX_FRAME_BYTES, WebSocketConnection
from spear_metrics.core.secrets import register_url_secrets

#: rate (Hz) of the input audio the Live API takes (``audio/pcm;rate=16000``)
INPUT_RATE = 16_000
INPUT_MIME = f"audio/pcm;rate={INPUT_RATE}"
#: rate (Hz) of the Live API's output audio when its mimeType names none (documented: 24 kHz)
OUTPUT_RATE = 24_000
DEFAULT_MODEL = "gemini-2.5-flash-native-audio-preview-12-2025"
DEFAULT_BASE_URL = "wss://generativelanguage.googleapis.com"
#: environment variables tried for the key when ``api_key_env`` is not given, in this order
KEY_ENVS = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
#: URL-safe base64 -> standard (proto3 JSON accepts both for bytes fields)
_URLSAFE = str.maketrans("-_", "+/")
#: ``automaticActivityDetection`` sensitivities (``types.StartSensitivity`` / ``EndSensitivity``)
_SENSITIVITY = {"high": "HIGH", "low": "LOW"}


def live_url(base_url: str, api_version: str) -> str:
    """The ``BidiGenerateContent`` WebSocket URL under ``base_url`` (``https``/``wss`` -> ``wss``,
    ``http``/``ws`` -> ``ws``), as the SDK builds it.

    Raises:
        ValueError: another scheme.
    """
    parts = urlsplit(base_url)
    scheme = {"https": "wss", "wss": "wss", "http": "ws", "ws": "ws"}.get(parts.scheme)
    if scheme is None or not parts.netloc:
        raise ValueError(f"base_url must be a wss://, ws://, https:// or http:// URL, got {base_url!r}")
    path = parts.path.rstrip("/") + f"/ws/google.ai.generativelanguage.{api_version}.GenerativeService.BidiGenerateContent"
    return urlunsplit((scheme, parts.netloc, path, "", ""))


def pcm_rate(mime: Any) -> int:
    """The sample rate (Hz) of an ``audio/pcm[;rate=N]`` mimeType (:data:`OUTPUT_RATE` when it
    names none).

    Raises:
        ProtocolError: not ``audio/pcm``, or a rate that is not a whole number of Hz in the range
            an answer may have.
    """
    from spear_metrics.agents.base import MAX_ANSWER_SR, MIN_ANSWER_SR

    text = str(mime or "")
    kind, _, params = text.partition(";")
    if kind.strip().lower() != "audio/pcm":
        raise ProtocolError(f"output audio of mimeType {text[:60]!r}; expected audio/pcm")
    rate = OUTPUT_RATE
    for p in params.split(";"):
        k, _, v = p.partition("=")
        if k.strip().lower() == "rate":
            try:
                rate = int(v.strip())
            except ValueError:
                raise ProtocolError(f"output audio mimeType {text[:60]!r} has an unreadable rate") from None
    if not MIN_ANSWER_SR <= rate <= MAX_ANSWER_SR:
        raise ProtocolError(f"output audio mimeType {text[:60]!r} has an impossible rate ({rate} Hz)")
    return rate


#: ``profile=spear``: the session SPEAR's published Gemini rows were made with (its proxies
#: ``bin/llm_proxies/gemini-2.5-flash-native-audio-preview.py`` and ``gemini-3.1-flash-live-preview.py``
#: of ``thomasthebaud/SPEAR-benchmark-code``): this system instruction (the run's prompt, when
#: given, appended after a blank line), temperature 0.7, input and output audio transcription,
#: push-to-talk (automatic activity detection off) with ``START_OF_ACTIVITY_INTERRUPTS`` and
#: ``TURN_INCLUDES_ONLY_ACTIVITY``; ``activityEnd`` :data:`SPEAR_CHUNK_S` after the last chunk and
#: the answer's end after :data:`SPEAR_QUIET_S` of quiet (:class:`LiveConnection`).
SPEAR_INSTRUCTIONS = (
    "You are participating in a natural spoken conversation.\n"
    "The user audio is being streamed to you in real time from a file.\n"
    "Answer when it feels natural, including before the entire audio file has finished if appropriate.\n"
    "Keep responses conversational and concise."
)
SPEAR_TEMPERATURE = 0.7
#: SPEAR's proxy sleeps one 40 ms chunk after every chunk it streams, the last one included,
#: before ``activityEnd`` (``_stream_audio``: ``CHUNK_MS``): ``profile=spear`` sends it as late (s)
SPEAR_CHUNK_S = 0.040
#: after ``turnComplete`` SPEAR's proxy keeps what arrives until 1 s passes with no new audio or
#: text (``QUIET_AFTER_TURN_COMPLETE_S``), and a ``turnComplete`` before any audio does not end
#: its wait (s)
SPEAR_QUIET_S = 1.0
PROFILES = ("", "spear")


def spear_input(mono: np.ndarray, sample_rate: int) -> np.ndarray:
    """``profile=spear``: the input as SPEAR's Gemini proxies resample it (``_resample_mono_audio``):
    linear interpolation (``numpy.interp``) at ``round(n * 16000 / rate)`` evenly spaced positions
    from the first to the last sample, float32; unchanged at 16 kHz. ``mono``: ``(n,)`` float32."""
    x = np.asarray(mono, dtype=np.float32)
    if x.size == 0 or int(sample_rate) == INPUT_RATE:
        return x
    n_out = max(1, round(x.shape[0] * INPUT_RATE / int(sample_rate)))
    return np.interp(np.linspace(0, x.shape[0] - 1, num=n_out), np.arange(x.shape[0]), x).astype(np.float32)


def spear_pcm16_bytes(x: np.ndarray) -> bytes:
    """``profile=spear``: 16-bit PCM as SPEAR's Gemini proxies write it (``_read_audio_as_pcm16``):
    clipped to [-1, 1], times 32767, truncated toward zero (``astype("<i2")``), little-endian."""
    return (np.clip(np.asarray(x, dtype=np.float32), -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


def _check_profile(profile: str, vad: str) -> str:
    """``profile`` checked (``""`` or ``spear``; ``spear`` is push-to-talk, as SPEAR's proxy).

    Raises:
        ValueError: another profile, or ``spear`` with ``vad=auto``."""
    p = str(profile or "").strip().lower()
    if p not in PROFILES:
        raise ValueError(f"profile must be spear or empty, got {profile!r}")
    if p == "spear" and vad != "ptt":
        raise ValueError("profile=spear streams push-to-talk as SPEAR's proxy does: it takes vad=ptt")
    return p


def spear_profile_setup(setup: dict[str, Any], instructions: Optional[str]) -> dict[str, Any]:
    """``setup`` (a ``setup`` message body) changed to SPEAR's Gemini proxy session (see
    :data:`SPEAR_INSTRUCTIONS`); ``instructions`` (the run's prompt) is appended to SPEAR's text."""
    text = SPEAR_INSTRUCTIONS + (f"\n\n{instructions}" if instructions and instructions != "None" else "")
    setup["generationConfig"]["temperature"] = SPEAR_TEMPERATURE
    setup["systemInstruction"] = {"parts": [{"text": text}]}
    setup["inputAudioTranscription"] = {}
    setup["outputAudioTranscription"] = {}
    setup["realtimeInputConfig"] = {"automaticActivityDetection": {"disabled": True},
                                    "activityHandling": "START_OF_ACTIVITY_INTERRUPTS",
                                    "turnCoverage": "TURN_INCLUDES_ONLY_ACTIVITY"}
    return setup


class GeminiLiveAgent(NetworkAgentBase):
    """Google's Gemini Live API (BidiGenerateContent WebSocket), full duplex, push-to-talk by default.

    The input (channels mixed, 16 kHz 16-bit PCM) streams in real time in 40 ms chunks
    (``--chunk-ms``) between ``activityStart`` and ``activityEnd`` (``vad=ptt``), or with the
    server's automatic activity detection and ``tail_silence_s`` of silence after it
    (``vad=auto``, which a time-synchronous ``fdb-infer`` session needs). Onset: first output audio
    on the wall clock since the first input chunk (SPEAR's realtime-proxy rule) or on the stream
    clock (``onset_clock=stream``). The key comes from ``GEMINI_API_KEY`` (else ``GOOGLE_API_KEY``)
    or the variable ``api_key_env`` names.

    Args:
        model: Live model name (sent as ``models/<model>``).
        base_url: server root, e.g. ``wss://generativelanguage.googleapis.com`` (a ``ws://127.0.0.1:PORT`` test server).
        api_version: ``v1beta`` or ``v1alpha`` (the URL's API version).
        voice: prebuilt voice name (e.g. ``Puck``); empty: the server's default.
        instructions: system instruction text (a request's own instructions replace it); empty: none.
        vad: ``ptt`` (push-to-talk: activityStart/activityEnd around the input, automatic detection off) or ``auto``.
        vad_start_sensitivity: ``vad=auto``: ``high`` or ``low`` start-of-speech sensitivity; empty: the server's default.
        vad_end_sensitivity: ``vad=auto``: ``high`` or ``low`` end-of-speech sensitivity; empty: the server's default.
        vad_prefix_padding_ms: ``vad=auto``: speech (ms) before a start of speech is committed; negative: the server's default.
        vad_silence_ms: ``vad=auto``: silence (ms) that ends the user's speech; negative: the server's default.
        transcription: ask for the transcript of the output audio (``outputAudioTranscription``), kept as the answer's text.
        onset_clock: ``wall`` (SPEAR's proxy: s since the first input chunk) or ``stream`` (s of input sent when the first audio came).
        tail_silence_s: ``vad=auto``: seconds of silence streamed after the input (negative: 2.5, SPEAR's realtime proxy's); ``vad=ptt`` sends none.
        max_wait_s: longest wait (s) for the answer to finish after the input (SPEAR's realtime proxy: 30).
        api_key_env: environment variable holding the key (empty: GEMINI_API_KEY, else GOOGLE_API_KEY).
        connect_timeout_s: time limit (s) of the WebSocket handshake and of the wait for setupComplete.
        max_tries: tries to open a session (retries: HTTP 429/5xx on the handshake, close codes 1012/1013, network errors).
        send_row_id: send the row's identity (the clip's file name) in the ``X-Client-Request-Id`` tracing header.
        ws_compression: offer WebSocket ``permessage-deflate`` (default off, as openai-realtime: the base64 PCM chunks
            barely compress, and deflating every chunk costs CPU for nothing; openai-realtime's benchmark: about half the client's).
        profile: ``spear``: the session of SPEAR's published Gemini rows (:func:`spear_profile_setup`: SPEAR's
            system instruction, temperature 0.7, input transcription, push-to-talk); empty: the settings above only.
    """

    paced = True

    def __init__(self, model: str = DEFAULT_MODEL, base_url: str = DEFAULT_BASE_URL, api_version: str = "v1beta",
                 voice: str = "", instructions: str = "", vad: str = "ptt", vad_start_sensitivity: str = "",
                 vad_end_sensitivity: str = "", vad_prefix_padding_ms: int = -1, vad_silence_ms: int = -1,
                 transcription: bool = True, onset_clock: str = "wall", tail_silence_s: float = -1.0,
                 max_wait_s: float = 30.0, api_key_env: str = "", connect_timeout_s: float = 20.0, max_tries: int = 4,
                 send_row_id: bool = True, ws_compression: bool = False, profile: str = ""):
        from spear_metrics.agents.net import RetryPolicy

        self.profile = _check_profile(profile, vad)

        if vad not in ("ptt", "auto"):
            raise ValueError(f"vad must be ptt or auto, got {vad!r}")
        if onset_clock not in ("wall", "stream"):
            raise ValueError(f"onset_clock must be wall or stream, got {onset_clock!r}")
        for name, v in (("vad_start_sensitivity", vad_start_sensitivity), ("vad_end_sensitivity", vad_end_sensitivity)):
            if v and v.lower() not in _SENSITIVITY:
                raise ValueError(f"{name} must be high, low or empty, got {v!r}")
        if api_version not in ("v1beta", "v1alpha"):
            raise ValueError(f"api_version must be v1beta or v1alpha, got {api_version!r}")
        if not (math.isfinite(max_wait_s) and max_wait_s > 0 and connect_timeout_s > 0):
            raise ValueError("max_wait_s and connect_timeout_s must be > 0")
        if not math.isfinite(tail_silence_s):
            raise ValueError("tail_silence_s must be a number of seconds")
        if not model.strip():
            raise ValueError("model must be a model name")
        register_url_secrets(base_url)  # a key typed inside the URL is masked wherever it would appear
        self.model = model.strip()
        self.url = live_url(base_url, api_version)
        self.voice = voice.strip()
        self.instructions = instructions or None
        self.vad = vad
        aad: dict[str, Any] = {"disabled": vad == "ptt"}
        if vad == "auto":
            if vad_start_sensitivity:
                aad["startOfSpeechSensitivity"] = f"START_SENSITIVITY_{_SENSITIVITY[vad_start_sensitivity.lower()]}"
            if vad_end_sensitivity:
                aad["endOfSpeechSensitivity"] = f"END_SENSITIVITY_{_SENSITIVITY[vad_end_sensitivity.lower()]}"
            if vad_prefix_padding_ms >= 0:
                aad["prefixPaddingMs"] = int(vad_prefix_padding_ms)
            if vad_silence_ms >= 0:
                aad["silenceDurationMs"] = int(vad_silence_ms)
        self._activity_detection = aad
        self.transcription = bool(transcription)
        self.onset_clock = onset_clock
        self.tail_silence_s = 0.0 if vad == "ptt" else (2.5 if tail_silence_s < 0 else float(tail_silence_s))
        self.max_wait_s = float(max_wait_s)
        self.api_key_env = api_key_env.strip()
        self.connect_timeout_s = float(connect_timeout_s)
        self.send_row_id = bool(send_row_id)
        self.ws_compression = bool(ws_compression)
        self.retry = RetryPolicy(max_tries=int(max_tries))
        self.onset_kind = "first_audio"
        self.onset_rule = ("wall clock: monotonic time at the first output audio (inlineData) minus the time just "
                           "before the first input chunk, floored at 0 (SPEAR's realtime-proxy rule)"
                           if onset_clock == "wall" else
                           "stream clock: seconds of input sent when the first output audio (inlineData) arrived")
        self.key()  # a missing key is a whole-run error, before any row

    def key(self) -> str:
        """The API key from the environment (registered for masking).

        Raises:
            MissingKeyError: the variable (``api_key_env``, or both of :data:`KEY_ENVS`) is unset.
        """
        from spear_metrics.agents.net import MissingKeyError, api_key

        if self.api_key_env:
            return api_key(self.api_key_env)
        for env in KEY_ENVS:
            if os.environ.get(env, "").strip():
                return api_key(env)
        raise MissingKeyError(f"environment variables {' and '.join(KEY_ENVS)} are not set (one must hold the API key)")

    def setup_message(self, request: AudioRequest) -> dict[str, Any]:
        """The first client message, ``{"setup": ...}``, for ``request``."""
        gen: dict[str, Any] = {"responseModalities": ["AUDIO"]}
        if self.voice:
            gen["speechConfig"] = {"voiceConfig": {"prebuiltVoiceConfig": {"voiceName": self.voice}}}
        setup: dict[str, Any] = {"model": f"models/{self.model}" if "/" not in self.model else self.model,
                                 "generationConfig": gen,
                                 "realtimeInputConfig": {"automaticActivityDetection": dict(self._activity_detection)}}
        instr = request.instructions or self.instructions
        if instr:
            setup["systemInstruction"] = {"parts": [{"text": instr}], "role": "user"}
        if self.transcription:
            setup["outputAudioTranscription"] = {}
        if self.profile == "spear":
            spear_profile_setup(setup, request.instructions or self.instructions)
        return {"setup": setup}

    def onset(self, result: SessionResult) -> Optional[float]:
        t = result.first_audio_s if self.onset_clock == "wall" else result.first_audio_input_s
        return None if t is None else max(0.0, t)

    async def connect(self, request: AudioRequest, sink: OutputSink, config: SessionConfig) -> "LiveConnection":
        """Open a session (handshake, ``setup``, ``setupComplete``; ``activityStart`` in push-to-talk).

        Raises:
            AgentError: a request this API cannot take here (history, a second audio, text-only
                output), or push-to-talk in a time-synchronous session; NetError: refused or
                unreachable (after retries).
        """
        from spear_metrics.agents.net import with_retries

        if request.history or request.audio2 is not None:
            raise AgentError("gemini-live takes one input audio (no dialogue history, no second audio)")
        if "audio" not in request.modalities:
            raise AgentError("gemini-live answers in audio (responseModalities AUDIO); text-only output is not supported")
        if config.time_synchronous and self.vad == "ptt":
            raise AgentError("gemini-live: push-to-talk (vad=ptt) answers only after the input ends, and a "
                             "time-synchronous session ends with its input: use -a vad=auto")
        conn = LiveConnection(self, request, sink)
        await with_retries(conn.open, self.retry)
        return conn


class LiveConnection(WebSocketConnection):
    """One ``BidiGenerateContent`` session (see :class:`GeminiLiveAgent`)."""

    def __init__(self, agent: GeminiLiveAgent, request: AudioRequest, sink: OutputSink):
        from spear_datasets.audio import resample

        super().__init__(agent, request, sink)
        if agent.profile == "spear":  # SPEAR's proxies' linear resampler
            self._input = spear_input(request.mono(), request.sample_rate)
        else:
            self._input = resample(request.mono()[None, :], request.sample_rate, INPUT_RATE)[0]
        self._in = 0  # input samples taken (request rate)
        self._out = 0  # 16 kHz samples taken
        self._activity_open = False
        self._ready = asyncio.Event()
        self.go_away: Optional[str] = None  # goAway's timeLeft, when the server sent one
        self.interrupted = 0  # serverContent.interrupted seen (automatic activity detection)
        # profile=spear: SPEAR's proxy's end of input and end of answer (SPEAR_CHUNK_S, SPEAR_QUIET_S)
        self._spear = agent.profile == "spear"
        self._last_chunk_at: Optional[float] = None  # sink clock when the chunk holding the last sample went
        self._turn_done = False
        self._has_audio = False
        self._last_activity: Optional[float] = None  # sink clock of the last audio or text received
        self._quiet: Optional[asyncio.Task] = None

    def _setup_event(self) -> asyncio.Event:
        return self._ready  # set by setupComplete

    def _messages(self, raw: Any) -> tuple[dict[str, Any]]:
        return (_message(raw),)

    # ------------------------------------------------------------------ open (retried)
    async def open(self) -> None:
        """One try: WebSocket handshake, ``setup``, wait for ``setupComplete``, ``activityStart``.

        Raises:
            NetError: refused (HTTP status), unreachable, closed or timed out during the set-up.
            ProtocolError: a malformed first answer.
        """
        from spear_metrics.agents.net import REQUEST_ID_HEADER, request_id, within

        self._ready = asyncio.Event()
        self._open_error = None
        self._closing = False
        self._activity_open = False
        where = self.agent.url
        headers = {"x-goog-api-key": self.agent.key()}
        if self.agent.send_row_id and self.request.row_id:
            headers[REQUEST_ID_HEADER] = request_id(self.request.row_id)
        await self._handshake(where, where, headers, timeout_s=self.agent.connect_timeout_s, max_size=MAX_FRAME_BYTES)
        self._receiver = asyncio.create_task(self._receive())
        try:
            await self._send(self.agent.setup_message(self.request))
            await within(self.agent.connect_timeout_s, self._wait_ready(), f"setupComplete from {where}")
            if self.agent.vad == "ptt":
                await self._send({"realtimeInput": {"activityStart": {}}})
                self._activity_open = True
        except BaseException:
            await self._abort()
            raise

    async def _wait_ready(self) -> None:
        await self._ready.wait()  # set by setupComplete, or by the receiver's first error
        if self._open_error is not None:
            raise self._open_error

    # ------------------------------------------------------------------ sending
    async def _send(self, message: dict[str, Any]) -> None:
        from websockets.exceptions import ConnectionClosed

        from spear_metrics.agents.net import RETRY_CLOSE_CODES, NetError

        try:
            await self.ws.send(json.dumps(message))
        except ConnectionClosed as e:
            code, why = _close_reason(e)
            await _settle(self._receiver)
            self.sink.check()  # the receiver's reason first (what the server said before closing)
            after = f" after goAway (time left {self.go_away})" if self.go_away is not None else ""
            raise NetError(f"server closed the connection{after} ({why}) while the input was being sent",
                           retryable=code in RETRY_CLOSE_CODES and not self._ready.is_set(), status=code) from None

    async def send_audio(self, chunk: np.ndarray) -> None:
        """Send the chunk's span of the (pre-resampled) input as one ``realtimeInput.audio``; in
        push-to-talk, ``activityEnd`` right after the input's last sample, and nothing after it."""
        self._in += chunk.shape[1]
        end = round(self._in * INPUT_RATE / self.request.sample_rate)
        if self.agent.vad == "ptt":
            if not self._activity_open:
                self._out = end
                return
            end = min(end, len(self._input))
        seg = self._input[self._out:end]
        if len(seg) < end - self._out:  # the tail's silence (vad=auto)
            seg = np.concatenate([seg, np.zeros(end - self._out - len(seg), np.float32)])
        self._out = end
        if len(seg):
            data = base64.b64encode((spear_pcm16_bytes if self._spear else pcm16_bytes)(seg)).decode("ascii")
            await self._send({"realtimeInput": {"audio": {"data": data, "mimeType": INPUT_MIME}}})
        if self._activity_open and self._out >= len(self._input):
            if self._spear:  # SPEAR's proxy: activityEnd one chunk period later (end_input)
                self._last_chunk_at = self.sink.now()
                return
            await self._send({"realtimeInput": {"activityEnd": {}}})
            self._activity_open = False

    async def end_input(self) -> None:
        """Push-to-talk: ``activityEnd`` if not sent yet (``profile=spear``: :data:`SPEAR_CHUNK_S`
        after the last chunk went, as SPEAR's proxy); automatic detection: ``audioStreamEnd``."""
        self.sink.check()
        if self._activity_open:
            if self._spear and self._last_chunk_at is not None:
                wait = self._last_chunk_at + SPEAR_CHUNK_S - self.sink.now()
                if wait > 0:
                    await asyncio.sleep(wait)
            await self._send({"realtimeInput": {"activityEnd": {}}})
            self._activity_open = False
            if self._spear:  # SPEAR's quiet period counts from the end of its stream at the earliest
                self._last_activity = max(self._last_activity or 0.0, self.sink.now())
        elif self.agent.vad == "auto":
            await self._send({"realtimeInput": {"audioStreamEnd": True}})

    # ------------------------------------------------------------------ receiving
    def _lost_after_setup(self, code: Optional[int], why: str) -> None:
        from spear_metrics.agents.net import NetError

        if self.sink.is_done and code == 1000:
            return  # answered, then closed normally
        phase = "mid-answer" if self.sink.result.chunks else "before answering"
        after = f" after goAway (time left {self.go_away})" if self.go_away is not None else ""
        self.sink.fail(NetError(f"server closed the connection{after} {phase} ({why})", status=code))

    def _handle(self, msg: dict[str, Any]) -> None:
        if "setupComplete" in msg:
            self._ready.set()
        if not self._ready.is_set():
            keys = ", ".join(sorted(msg)[:4]) or "nothing"
            raise ProtocolError(f"expected setupComplete as the answer to setup, got {keys}")
        content = msg.get("serverContent")
        if content is not None:
            if not isinstance(content, dict):
                raise ProtocolError("malformed serverContent (not an object)")
            self._content(content)
        if "goAway" in msg:
            ga = msg.get("goAway")
            self.go_away = str(ga.get("timeLeft", "unknown")) if isinstance(ga, dict) else "unknown"
        if isinstance(msg.get("usageMetadata"), dict):  # the session's running totals: the last one counts
            self.sink.usage(self.agent.model, msg["usageMetadata"], cumulative=True)
        # toolCall, sessionResumptionUpdate, voice-activity signals: nothing to keep

    def _content(self, content: dict[str, Any]) -> None:
        turn = content.get("modelTurn")
        if turn is not None:
            parts = turn.get("parts", []) if isinstance(turn, dict) else None
            if not isinstance(parts, list):
                raise ProtocolError("malformed serverContent.modelTurn (no parts list)")
            for part in parts:
                blob = part.get("inlineData") if isinstance(part, dict) else None
                if blob is None:
                    continue  # text/thought parts: the transcript is the answer's text
                if not isinstance(blob, dict) or not isinstance(blob.get("data"), str):
                    raise ProtocolError("malformed inlineData (no base64 data)")
                rate = pcm_rate(blob.get("mimeType"))
                try:  # proto3 JSON bytes: standard or URL-safe base64 (the SDK itself writes URL-safe)
                    data = base64.b64decode(blob["data"].translate(_URLSAFE), validate=True)
                except (binascii.Error, ValueError):
                    raise ProtocolError("inlineData holds audio that is not valid base64") from None
                self.sink.pcm16(data, rate)
                if data:
                    self._has_audio = True
                    self._last_activity = self.sink.now()
        tr = content.get("outputTranscription")
        if isinstance(tr, dict) and isinstance(tr.get("text"), str):
            self.sink.text(tr["text"])
            if tr["text"]:
                self._last_activity = self.sink.now()
        for part in (turn.get("parts") or []) if self._spear and isinstance(turn, dict) else ():
            # SPEAR's proxies append a model turn's text parts to the answer's text after its
            # transcription, and count them as activity
            if isinstance(part, dict) and isinstance(part.get("text"), str) and part["text"]:
                self.sink.text(part["text"])
                self._last_activity = self.sink.now()
        if content.get("interrupted"):
            self.interrupted += 1
        if content.get("turnComplete"):
            if not self._spear:
                self.sink.done("stop")
            self._turn_done = True
        if self._spear and self._turn_done and self._has_audio and self._quiet is None:
            self._quiet = asyncio.get_running_loop().create_task(self._done_when_quiet())

    async def _done_when_quiet(self) -> None:
        """``profile=spear``: the answer is done once :data:`SPEAR_QUIET_S` pass with no new audio
        or text after ``turnComplete`` (SPEAR's proxy's wait)."""
        while True:
            wait = (self._last_activity or 0.0) + SPEAR_QUIET_S - self.sink.now()
            if wait <= 0:
                break
            await asyncio.sleep(wait)
        self.sink.done("stop")

    async def close(self) -> None:
        if self._quiet is not None:
            self._quiet.cancel()
        await super().close()


def _message(raw: Any) -> dict[str, Any]:
    """One server message (JSON in a text or binary frame) as a dict.

    Raises:
        ProtocolError: not JSON, or not a JSON object.
    """
    text = bytes(raw).decode("utf-8", "replace") if isinstance(raw, (bytes, bytearray)) else str(raw)
    try:
        msg = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, a number past int()'s digit limit, nested too deeply
        from spear_metrics.core.secrets import mask_secrets

        raise ProtocolError(f"malformed message from the server (not JSON): {mask_secrets(text)[:60]!r}") from None
    if not isinstance(msg, dict):
        raise ProtocolError(f"malformed message from the server (a JSON {type(msg).__name__}, not an object)")
    return msg


