"""The adapter interface for real-time network systems, shared by every benchmark.

A network adapter (:class:`NetworkAgent`) opens one live session per input
(:meth:`NetworkAgent.connect`) and returns a :class:`DuplexConnection` the harness feeds; the
adapter's own receiver task pushes what the system sends (audio, text, "done", a fatal error)
into an :class:`OutputSink` the harness gave it. The sink stamps every event with two clocks,
so no adapter measures time itself:

- the **wall clock**: ``time.monotonic()`` minus ``t0``, the monotonic time taken just before the
  first input chunk is sent (SPEAR's realtime proxy takes the same ``t0``);
- the **stream clock**: seconds of input audio (tail silence included) the harness had sent when
  the event arrived.

:func:`run_session` drives one session: it sends the input in ``chunk_ms`` chunks, paced in real
time on an absolute schedule (chunk ``k`` is sent at ``t0 + k * chunk_s``, so lateness never
accumulates) for a *paced* (full-duplex) adapter, or all at once for a request/response adapter;
then ``tail_silence_s`` of zeros (paced too; cut short once the adapter reports its answer
complete, :meth:`OutputSink.answer_complete`); then :meth:`DuplexConnection.end_input`; then it
waits until the adapter says the output is done, or ``max_wait_s`` after the input ends. The
:class:`SessionResult` keeps the whole output timeline. From it:

- SPEAR (``spearbench infer``): the answer is the adapter's rule (:meth:`NetworkAgentBase.answer`,
  :func:`session_answer`); by default the concatenated output audio
  (:meth:`SessionResult.concatenated`), its onset the adapter's rule (:meth:`NetworkAgent.onset`,
  seconds from the start of the input clip, ``None`` for half-duplex systems) and
  ``response_time_s`` = first answer audio minus end of input (:attr:`SessionResult.response_time_s`);
- Full-Duplex-Bench (``spearbench fdb-infer``): a time-synchronous reply channel by the adapter's
  timeline rule (:func:`reply_timeline`): ``arrival`` (default, :func:`playback_timeline`): each
  received chunk is played at ``max(its receive time, end of the previous chunk)``;
  ``frame_synchronous`` (:func:`frame_synchronous_timeline`, Moshi as FDB's own client writes it):
  all output back to back from ``timeline_lead_s``; either trimmed/padded to the input's length.

Requests are benchmark-neutral (:class:`AudioRequest`): input audio ``(C, n)`` + rate, optional
instructions (system prompt), dialogue history (:class:`DialogueTurn`), a second audio, the
output modalities wanted. Times are seconds; audio is ``float32`` in [-1, 1], ``(channels, samples)``.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol, runtime_checkable

import numpy as np

from spear_datasets.audio import MAX_DURATION_S, MAX_SAMPLE_RATE, MIN_SAMPLE_RATE
from spear_datasets.schema import MAX_TEXT_CHARS
from spear_metrics.agents.base import AgentAnswer, AgentError

#: what a request may ask for
MODALITIES = ("text", "audio")
#: input chunk (ms) of a session when neither the user nor the adapter names one (SPEAR's realtime proxy's)
DEFAULT_CHUNK_MS = 40.0
#: how a time-synchronous reply channel is laid out (:func:`reply_timeline`)
TIMELINES = ("arrival", "frame_synchronous")


class ProtocolError(AgentError):
    """The system sent something the adapter cannot use: malformed JSON or event, undecodable
    audio, audio of another rate than negotiated (one line; the row fails)."""


class NoAnswerError(AgentError):
    """The session ended without answer audio (one line; the row fails)."""


@dataclass(frozen=True)
class DialogueTurn:
    """One earlier turn of a dialogue history.

    Attributes:
        role: ``"user"`` or ``"assistant"``.
        text: what was said, if known.
        audio: the turn's audio ``(C, n)`` float32 (or ``(n,)``), if any; ``sample_rate`` its rate (Hz).
    """

    role: str
    text: Optional[str] = None
    audio: Optional[np.ndarray] = None
    sample_rate: Optional[int] = None

    def __post_init__(self) -> None:
        if self.role not in ("user", "assistant"):
            raise ValueError(f"role must be 'user' or 'assistant', got {self.role!r}")
        if self.audio is not None and not self.sample_rate:
            raise ValueError("a turn with audio needs its sample_rate")


@dataclass(frozen=True)
class AudioRequest:
    """One benchmark-neutral request to a speech system.

    Attributes:
        audio: the input ``(C, n)`` float32 at ``sample_rate`` Hz (SPEAR: 16 kHz stereo, one
            participant per channel, ending at the question end; FDB: the user channel).
        sample_rate: Hz.
        instructions: system prompt / instruction text, ``None`` for none.
        history: earlier turns, oldest first (SpeechRole-style dialogues).
        audio2: an optional second audio ``(C, n)`` (Dynamic-SUPERB pairs), at ``audio2_sample_rate``.
        modalities: output modalities wanted, a subset of ``("text", "audio")``.
        row_id: the row's identity, for messages only.
        live: ``True``: the input is not known in advance (a live conversation, FDB v2): ``audio``
            is a placeholder and the adapter encodes each chunk given to
            :meth:`DuplexConnection.send_audio` as it comes (:class:`LiveInput`).
    """

    audio: np.ndarray
    sample_rate: int
    instructions: Optional[str] = None
    history: tuple[DialogueTurn, ...] = ()
    audio2: Optional[np.ndarray] = None
    audio2_sample_rate: Optional[int] = None
    modalities: tuple[str, ...] = ("text", "audio")
    row_id: str = ""
    live: bool = False

    def __post_init__(self) -> None:
        a = np.asarray(self.audio, dtype=np.float32)
        if a.ndim == 1:
            a = a[None, :]
        if a.ndim != 2 or a.shape[1] == 0:
            raise ValueError(f"request audio must be (channels, samples) with samples > 0, got shape {np.shape(self.audio)}")
        object.__setattr__(self, "audio", a)
        if not isinstance(self.sample_rate, (int, np.integer)) or self.sample_rate <= 0:
            raise ValueError(f"sample_rate must be a positive int (Hz), got {self.sample_rate!r}")
        bad = [m for m in self.modalities if m not in MODALITIES]
        if bad or not self.modalities:
            raise ValueError(f"modalities must be a non-empty subset of {MODALITIES}, got {self.modalities!r}")
        if self.audio2 is not None and not self.audio2_sample_rate:
            raise ValueError("audio2 needs audio2_sample_rate")

    @property
    def duration_s(self) -> float:
        """Input length in seconds."""
        return self.audio.shape[1] / self.sample_rate

    def mono(self) -> np.ndarray:
        """The input as one channel ``(n,)`` float32: the mean of the channels, the mix SPEAR's
        proxies send (``ffmpeg -ac 1`` for GPT-audio, ``np.mean(axis=1)`` for GPT-realtime)."""
        return self.audio.mean(axis=0).astype(np.float32, copy=False)


@dataclass(frozen=True)
class SessionConfig:
    """How :func:`run_session` drives one session.

    Attributes:
        chunk_ms: input chunk length in ms (SPEAR's realtime proxy: 40).
        paced: ``True``: chunks are sent in real time (chunk ``k`` at ``t0 + k * chunk_ms``);
            ``False``: all at once (a request/response system).
        tail_silence_s: seconds of zeros sent after the input, paced like it (SPEAR's realtime
            proxy: 2.5 s, so that a server VAD can close the turn).
        max_wait_s: longest wait, after the input and its tail were sent, for the system to finish.
        time_synchronous: ``True`` (FDB): the session lasts exactly the input (plus its tail):
            no :meth:`DuplexConnection.end_input`, no waiting; what came by then is the output.
        drain_output: time-synchronous only: after the input, call
            :meth:`DuplexConnection.end_input` and wait (at most ``max_wait_s``) for ``done``: the
            output still in flight belongs to the reply channel (a ``frame_synchronous`` timeline,
            where output frame ``j`` has its place whenever it arrives).
    """

    chunk_ms: float = 40.0
    paced: bool = True
    tail_silence_s: float = 0.0
    max_wait_s: float = 30.0
    time_synchronous: bool = False
    drain_output: bool = False

    def __post_init__(self) -> None:
        for name in ("chunk_ms",):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be > 0, got {v}")
        for name in ("tail_silence_s", "max_wait_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be >= 0, got {v}")

    def session_seconds(self, input_s: float) -> float:
        """Longest time (s) a session of ``input_s`` seconds of input may take by this config:
        the paced input and tail (0 when not paced) plus ``max_wait_s``."""
        paced = (input_s + self.tail_silence_s) if self.paced else 0.0
        return paced + (0.0 if self.time_synchronous and not self.drain_output else self.max_wait_s)


@dataclass(frozen=True)
class OutputChunk:
    """One piece of output audio as it arrived.

    Attributes:
        audio: ``(C, m)`` float32 at ``sample_rate`` Hz.
        received_s: wall clock (s after ``t0``) when it arrived.
        input_sent_s: stream clock: seconds of input sent when it arrived.
    """

    audio: np.ndarray
    sample_rate: int
    received_s: float
    input_sent_s: float

    @property
    def duration_s(self) -> float:
        return self.audio.shape[1] / self.sample_rate


@dataclass(frozen=True)
class TextEvent:
    """One piece of output text (a text delta, a transcript delta, a token) as it arrived.

    Attributes:
        text: the delta as the system sent it.
        received_s: wall clock (s after ``t0``) when it arrived.
        input_sent_s: stream clock: seconds of input sent when it arrived.
        after_chunks: how many output audio chunks had arrived before it (its place among
            :attr:`SessionResult.chunks`, whatever the clocks' resolution).
    """

    text: str
    received_s: float
    input_sent_s: float
    after_chunks: int


@dataclass
class SessionResult:
    """Everything one session produced.

    Attributes:
        chunks: output audio in arrival order (:class:`OutputChunk`).
        text: the system's text (concatenated text/transcript deltas), ``""`` when none.
        text_events: the text deltas as they arrived, each stamped with both clocks (:class:`TextEvent`).
        input_duration_s: the input's length (s), tail silence excluded.
        input_end_s: wall clock (s after ``t0``) at which the input counts as ended: for a paced
            session the later of "its last chunk was sent" and its nominal end ``input_duration_s``
            (chunks are sent at the start of the span they cover); for a request/response session
            the moment the whole input was handed over, just before :meth:`DuplexConnection.end_input`
            (which sends the request). ``None`` when the session failed before.
        first_audio_s: wall clock (s after ``t0``) of the first non-empty output audio, ``None`` if none.
        first_audio_input_s: stream clock at that moment (s of input sent), ``None`` if none.
        finish_reason: ``"stop"`` (the system said it was done), ``"max_wait"`` (gave up waiting),
            ``"input_end"`` (time-synchronous session ended with its input), or the adapter's own word.
        started_at: ``time.monotonic()`` value of ``t0``.
        send_lag_max_s: paced sessions: the largest delay (s) of a chunk's send behind its
            scheduled time ``t0 + k * chunk_s`` (how well the pacing held; 0 when not paced);
            ``send_lag_max_at_s`` the stream time (s) of that chunk.
        answer_complete_s: wall clock (s after ``t0``) at which the adapter reported its answer
            complete (:meth:`OutputSink.answer_complete`), ``None`` if it did not.
        tail_sent_s: seconds of tail silence sent (less than ``tail_silence_s`` when the tail was
            cut short by :meth:`OutputSink.answer_complete`).
        usage: what the service billed (:meth:`OutputSink.usage`): ``{model: usage fields}``
            (:class:`spear_metrics.core.usage.Usage`), empty when it reported none.
        last_input_sent_s: wall clock (s after ``t0``) at which the chunk holding the input's last
            sample was sent (``None`` before).
        server_lag_max_s: frame-synchronous adapters (Moshi): the largest delay (s, wall clock) of
            an output frame's arrival behind the sending of the input frame that produced it (the
            server's compute and transport; ``None`` when not measured).
        frames_received: frame-synchronous adapters: output frames received (whole frames);
            ``frames_expected`` the frames the input asks for (one per input frame sent, less the
            server's lead); ``None`` when not counted.
    """

    chunks: list[OutputChunk] = field(default_factory=list)
    text: str = ""
    text_events: list[TextEvent] = field(default_factory=list)
    input_duration_s: float = 0.0
    input_end_s: Optional[float] = None
    first_audio_s: Optional[float] = None
    first_audio_input_s: Optional[float] = None
    finish_reason: str = "stop"
    started_at: float = 0.0
    send_lag_max_s: float = 0.0
    send_lag_max_at_s: float = 0.0
    answer_complete_s: Optional[float] = None
    tail_sent_s: float = 0.0
    usage: dict = field(default_factory=dict)
    server_lag_max_s: Optional[float] = None
    frames_received: Optional[int] = None
    frames_expected: Optional[int] = None
    last_input_sent_s: Optional[float] = None

    @property
    def response_time_s(self) -> Optional[float]:
        """First answer audio minus end of input, wall clock, in s (negative: the system spoke
        before the input ended); ``None`` without answer audio. See :meth:`response_time`."""
        if self.first_audio_s is None:
            return None
        return self.response_time(self.first_audio_s)

    def response_time(self, first_audio_s: float) -> Optional[float]:
        """``first_audio_s`` (wall clock) minus the end of the input, in s; ``None`` when the input
        never ended. An answer that arrived after the chunk holding the input's last sample was sent
        (:attr:`last_input_sent_s`) is never before the input's end: a paced chunk goes out at the
        start of the span it covers, so the system heard the whole input by then; the difference is
        floored at 0 there (a push-to-talk answer 20 ms after the last chunk, before the nominal end,
        is not an interruption)."""
        if self.input_end_s is None:
            return None
        d = first_audio_s - self.input_end_s
        if d < 0 and self.last_input_sent_s is not None and first_audio_s >= self.last_input_sent_s:
            return 0.0
        return d

    @property
    def sample_rate(self) -> Optional[int]:
        """The output's rate (Hz); ``None`` without audio."""
        return self.chunks[0].sample_rate if self.chunks else None

    def concatenated(self) -> tuple[np.ndarray, int]:
        """All output audio back to back: ``((C, N) float32, sample_rate)``.

        Raises:
            NoAnswerError: no output audio at all.
        """
        if not self.chunks:
            raise NoAnswerError("the system sent no answer audio")
        return np.concatenate([c.audio for c in self.chunks], axis=1), self.chunks[0].sample_rate


class LiveInput:
    """Live input chunks ``(C, m)`` float32 at ``rate_in`` Hz -> mono float32 ``(m',)`` at
    ``rate_out`` Hz, resampled as one stream (``soxr.ResampleStream``, no edge effects between
    chunks); the identity when the rates are equal. For adapters serving a live request
    (:attr:`AudioRequest.live`)."""

    def __init__(self, rate_in: int, rate_out: int):
        self.rate_in, self.rate_out = int(rate_in), int(rate_out)
        self._stream = None
        if self.rate_in != self.rate_out:
            import soxr

            self._stream = soxr.ResampleStream(self.rate_in, self.rate_out, 1, dtype="float32", quality="HQ")

    def take(self, chunk: np.ndarray) -> np.ndarray:
        a = np.asarray(chunk, dtype=np.float32)
        mono = a.mean(axis=0) if a.ndim == 2 else a
        mono = np.ascontiguousarray(mono, dtype=np.float32)
        if self._stream is None:
            return mono
        return np.asarray(self._stream.resample_chunk(mono), dtype=np.float32)


def pcm16_bytes(x: np.ndarray) -> bytes:
    """Float samples ``(n,)`` in [-1, 1] -> little-endian 16-bit PCM bytes (clipped, rounded; full
    scale 32767): what the adapters send as ``audio/pcm`` (the inverse of :meth:`OutputSink.pcm16`)."""
    return np.round(np.clip(x, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


def _output_rate(sample_rate: Any) -> int:
    """A server's output audio rate (Hz) as an int in [MIN_SAMPLE_RATE, MAX_SAMPLE_RATE].

    Raises:
        ProtocolError: any other value (0 divided the audio's length; a negative rate reached the
            resampler)."""
    try:
        sr = int(sample_rate)
    except (TypeError, ValueError, OverflowError):
        raise ProtocolError(f"output audio at a sample rate that is not a number: {sample_rate!r}") from None
    if not MIN_SAMPLE_RATE <= sr <= MAX_SAMPLE_RATE:
        raise ProtocolError(f"output audio at {sr} Hz, outside {MIN_SAMPLE_RATE}..{MAX_SAMPLE_RATE} Hz")
    return sr


class OutputSink:
    """Where an adapter's receiver puts what the system sends; the harness's stopwatch.

    The adapter calls :meth:`audio` (or :meth:`pcm16`), :meth:`text`, :meth:`done`, :meth:`reopen`
    and :meth:`fail`; it never reads the clock itself. All calls must come from the event loop's
    thread (an adapter's receiver task), as websockets/httpx/SDK callbacks do.

    Size limits, applied as the data arrives (a chunk past a limit raises :class:`ProtocolError`
    before it is kept, so a server streaming without end fails its row instead of filling memory):
    at most :data:`spear_datasets.audio.MAX_DURATION_S` s of output audio in all (the longest
    answer ``score`` reads) and at most :data:`spear_datasets.schema.MAX_TEXT_CHARS` characters
    of output text in all (the longest transcript cell a metadata CSV may hold).
    """

    def __init__(self, input_sample_rate: int, *, clock: Callable[[], float] = time.monotonic, live: bool = False):
        """``live``: a live conversation (FDB v2), where a side may speak before the relay's clock
        starts (the examiner opens): such audio is placed at the clock's start instead of failing the
        session (a benchmark input, known in advance, is never answered before it starts)."""
        self._clock = clock
        self._live = bool(live)
        self._sr_in = int(input_sample_rate)
        self._t0: Optional[float] = None
        self._sent = 0
        self.result = SessionResult()
        self._text: list[str] = []
        self._done = asyncio.Event()
        self._error: Optional[BaseException] = None
        self._out_sr: Optional[int] = None
        self._out_samples = 0  # output samples kept (per channel), for the size limit
        self._text_chars = 0

    # ---- harness side
    def start(self) -> float:
        """Take ``t0`` (just before the first chunk is sent); returns it."""
        self._t0 = self._clock()
        self.result.started_at = self._t0
        return self._t0

    def now(self) -> float:
        """Wall clock: seconds since ``t0`` (0 before :meth:`start`)."""
        return 0.0 if self._t0 is None else self._clock() - self._t0

    def sent(self, n_samples: int) -> None:
        """``n_samples`` more input samples (at the input rate) were sent."""
        self._sent += int(n_samples)

    @property
    def input_sent_s(self) -> float:
        """Stream clock: seconds of input sent so far."""
        return self._sent / self._sr_in

    def check(self) -> None:
        """Raise the error a receiver reported with :meth:`fail`, if any."""
        if self._error is not None:
            raise self._error

    @property
    def is_done(self) -> bool:
        return self._done.is_set()

    async def wait(self, timeout: float) -> bool:
        """Wait until done or failed, at most ``timeout`` s; ``True`` if done/failed in time."""
        if self._done.is_set():
            return True
        try:
            await asyncio.wait_for(self._done.wait(), timeout=max(0.0, timeout))
            return True
        except asyncio.TimeoutError:
            return False

    def finished(self) -> SessionResult:
        """The result so far (text joined)."""
        self.result.text = "".join(self._text).strip()
        return self.result

    # ---- adapter side
    def audio(self, samples: np.ndarray, sample_rate: int) -> None:
        """Output audio arrived: ``(m,)`` or ``(C, m)`` float in [-1, 1] at ``sample_rate`` Hz.
        Empty chunks are ignored. More audio after :meth:`done` reopens the session (a full-duplex
        system may start another response).

        Raises:
            ProtocolError: a rate that differs from earlier chunks', a bad shape, NaN/inf samples,
                or output audio past :data:`~spear_datasets.audio.MAX_DURATION_S` s in all.
        """
        a = np.asarray(samples, dtype=np.float32)
        a = a[None, :] if a.ndim == 1 else a
        if a.ndim != 2:
            raise ProtocolError(f"output audio chunk has shape {a.shape}")
        if a.shape[1] == 0:
            return
        if self._t0 is None and not self._live:
            raise ProtocolError("the server sent output audio before the input started: it answers no part of "
                                "this input, and its onset cannot be placed")
        if not np.isfinite(a).all():
            raise ProtocolError("output audio holds NaN or inf samples")
        sr = _output_rate(sample_rate)
        if self._out_sr is None:
            self._out_sr = sr
        elif sr != self._out_sr or a.shape[0] != self.result.chunks[0].audio.shape[0]:
            raise ProtocolError(f"output audio changed format mid-session ({sr} Hz x {a.shape[0]} ch after "
                                f"{self._out_sr} Hz x {self.result.chunks[0].audio.shape[0]} ch)")
        self._check_audio_size(a.shape[1], sr)
        self._out_samples += a.shape[1]
        t = self.now()
        if self.result.first_audio_s is None:
            self.result.first_audio_s = t
            self.result.first_audio_input_s = self.input_sent_s
        self.result.chunks.append(OutputChunk(a, sr, t, self.input_sent_s))
        self.reopen()

    def pcm16(self, data: bytes, sample_rate: int) -> None:
        """Output audio as raw little-endian 16-bit mono PCM (the Realtime API's ``audio/pcm``).

        Raises:
            ProtocolError: an odd number of bytes (not 16-bit PCM), or as :meth:`audio`.
        """
        if len(data) % 2:
            raise ProtocolError(f"output audio chunk of {len(data)} bytes is not 16-bit PCM (odd length)")
        self._check_audio_size(len(data) // 2, _output_rate(sample_rate))  # before decoding it
        self.audio(np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0, sample_rate)

    def _check_audio_size(self, n_samples: int, sample_rate: int) -> None:
        total_s = (self._out_samples + n_samples) / sample_rate
        if total_s > MAX_DURATION_S:
            raise ProtocolError(f"the system sent more than {MAX_DURATION_S:g} s of output audio "
                                f"({total_s:.0f} s with this chunk; score reads at most {MAX_DURATION_S:g} s)")

    def request_sent(self) -> None:
        """A request/response adapter sends its request now: the wall clock's end of input (the
        start of ``response_time_s``); a retried request restarts it."""
        self.result.input_end_s = self.now()

    def text(self, delta: str) -> None:
        """Output text (or the transcript of the output audio) arrived; stamped with both clocks
        (:attr:`SessionResult.text_events`).

        Raises:
            ProtocolError: output text past :data:`~spear_datasets.schema.MAX_TEXT_CHARS` characters in all.
        """
        if delta:
            self._text_chars += len(str(delta))
            if self._text_chars > MAX_TEXT_CHARS:
                raise ProtocolError(f"the system sent more than {MAX_TEXT_CHARS} characters of output text "
                                    f"(the longest transcript a metadata CSV keeps)")
            self._text.append(str(delta))
            self.result.text_events.append(TextEvent(str(delta), self.now(), self.input_sent_s, len(self.result.chunks)))

    def usage(self, model: str, raw: Any, *, cumulative: bool = False) -> None:
        """The service reported the usage ``raw`` of a response (Chat Completions ``usage``,
        Realtime ``response.done`` ``usage``, Gemini ``usageMetadata``:
        :func:`spear_metrics.core.usage.normalize_usage`) billed by ``model``: added to
        :attr:`SessionResult.usage` (``cumulative``: it replaces the earlier report, for services
        whose reports are running totals)."""
        from spear_metrics.core.usage import Usage, normalize_usage

        if hasattr(raw, "model_dump"):  # an SDK object
            raw = raw.model_dump()
        u = normalize_usage(raw)
        if u is None:
            return
        before = Usage(**self.result.usage[model]) if model in self.result.usage and not cumulative else Usage()
        self.result.usage[model] = (before + u).to_json()

    def answer_complete(self) -> None:
        """The adapter judges its answer complete (e.g. Moshi: its speech was followed by enough
        silence once the input was over): a paced session that is not time-synchronous stops its
        tail silence at the next chunk and goes on to :meth:`DuplexConnection.end_input` (SPEAR).
        Unlike :meth:`done` it ends no wait, and later audio does not undo it."""
        if self.result.answer_complete_s is None:
            self.result.answer_complete_s = self.now()

    def done(self, reason: str = "stop") -> None:
        """The system finished its output (for now: a later :meth:`audio` reopens)."""
        self.result.finish_reason = reason
        self._done.set()

    def reopen(self) -> None:
        """The system started another output (e.g. the Realtime API's ``response.created`` after an
        earlier response was done): the session waits for it again, as if no :meth:`done` had come
        (:meth:`audio` does the same when audio arrives). No effect after :meth:`fail`."""
        if self._done.is_set() and self._error is None:
            self._done.clear()

    def fail(self, error: BaseException | str) -> None:
        """A fatal error in the receiver (connection dropped, malformed event...): the session
        stops at once and the row fails with this reason. The first error is kept."""
        if self._error is None:
            self._error = error if isinstance(error, BaseException) else AgentError(str(error))
        self._done.set()


class DuplexConnection(Protocol):
    """One live session, as returned by :meth:`NetworkAgent.connect`."""

    async def send_audio(self, chunk: np.ndarray) -> None:
        """Send ``chunk`` ``(C, m)`` float32 at the request's rate (the adapter converts: mix,
        resample, encode). Called in order, ``m`` = ``chunk_ms`` worth of samples (the last may be
        shorter)."""
        ...

    async def end_input(self) -> None:
        """The input (and its tail silence) is over: e.g. send the request (half-duplex) or commit
        the buffer and ask for a response if the server VAD did not. Not called in a
        time-synchronous session, unless it drains its output (:attr:`SessionConfig.drain_output`)."""
        ...

    async def close(self) -> None:
        """Close the connection and stop the receiver (called exactly once, also after errors)."""
        ...


@runtime_checkable
class NetworkAgent(Protocol):
    """A real-time network adapter.

    Attributes:
        paced: ``True`` when the system takes the input as a real-time stream (full duplex);
            ``False`` for one request after the whole input (half duplex).
        tail_silence_s: seconds of silence to stream after the input (paced adapters).
        max_wait_s: longest wait (s) for the output after the input (and tail) ended.
        onset_rule: one line saying how :meth:`onset` is measured (recorded in run_info).

    Optional attributes (:class:`NetworkAgentBase` has their defaults):

        chunk_ms: the adapter's native input chunk in ms (e.g. one 80 ms Moshi frame), used when
            the user names none (:func:`resolve_chunk_ms`); ``None``: :data:`DEFAULT_CHUNK_MS`.
        max_concurrency: the most sessions the system serves at once (Kyutai's Python Moshi
            server: 1); ``--concurrency`` is lowered to it (:func:`clamp_concurrency`); ``None``: no cap.
        timeline: how FDB's time-synchronous reply channel is laid out (:data:`TIMELINES`,
            :func:`reply_timeline`): ``arrival`` (default) or ``frame_synchronous``;
            ``timeline_lead_s`` where a frame-synchronous channel starts (s).
        answer(result): SPEAR's answer from a session (:meth:`NetworkAgentBase.answer`,
            :func:`session_answer`); default: every output chunk back to back from :meth:`onset`.
    """

    paced: bool
    tail_silence_s: float
    max_wait_s: float

    async def connect(self, request: AudioRequest, sink: OutputSink, config: SessionConfig) -> DuplexConnection:
        """Open a session for ``request`` (handshake, session settings, history...) and start a
        receiver task that reports into ``sink``; return the connection to feed.

        Raises:
            AgentError (or a subclass, e.g. :class:`spear_metrics.agents.net.NetError`): the
                system refused or could not be reached (after the adapter's retries).
        """
        ...

    def onset(self, result: SessionResult) -> Optional[float]:
        """SPEAR onset in seconds from the start of the input, ``None`` for "at question end"
        (a half-duplex system that does not choose its timing)."""
        ...


def is_network_agent(agent: Any) -> bool:
    """``True`` when ``agent`` implements :class:`NetworkAgent` (an ``async def connect``)."""
    return asyncio.iscoroutinefunction(getattr(agent, "connect", None))


def resolve_chunk_ms(agent: Any, chunk_ms: Optional[float] = None) -> float:
    """The input chunk (ms) of ``agent``'s sessions: ``chunk_ms`` when given (the user's
    ``--chunk-ms``: honoured, also when it differs from the adapter's own), else the adapter's
    native ``chunk_ms`` attribute, else :data:`DEFAULT_CHUNK_MS` (40 ms)."""
    if chunk_ms is not None:
        return float(chunk_ms)
    native = getattr(agent, "chunk_ms", None)
    return float(native) if native else DEFAULT_CHUNK_MS


def clamp_concurrency(agent: Any, requested: int) -> tuple[int, Optional[str]]:
    """Sessions to run at once for ``agent``: ``requested`` lowered to the adapter's
    ``max_concurrency`` (when it declares one); returns ``(sessions, note)``, the note a line
    saying so (``None`` when nothing was lowered)."""
    cap = getattr(agent, "max_concurrency", None)
    if cap is None or requested <= int(cap):
        return requested, None
    cap = int(cap)
    return cap, (f"--concurrency {requested} lowered to {cap}: the adapter serves at most {cap} "
                 f"session{'s' if cap != 1 else ''} at a time (its max_concurrency)")


def session_config(agent: Any, *, chunk_ms: Optional[float] = None, time_synchronous: bool = False) -> SessionConfig:
    """The :class:`SessionConfig` of ``agent`` (its ``paced``, ``tail_silence_s``, ``max_wait_s``;
    ``chunk_ms`` by :func:`resolve_chunk_ms`; a time-synchronous session of a ``frame_synchronous``
    adapter drains its output)."""
    return SessionConfig(chunk_ms=resolve_chunk_ms(agent, chunk_ms), paced=bool(getattr(agent, "paced", True)),
                         tail_silence_s=float(getattr(agent, "tail_silence_s", 0.0) or 0.0),
                         max_wait_s=float(getattr(agent, "max_wait_s", 30.0)), time_synchronous=time_synchronous,
                         drain_output=time_synchronous and getattr(agent, "timeline", "arrival") == "frame_synchronous")


async def _sleep_until(deadline: float, clock: Callable[[], float]) -> None:
    delay = deadline - clock()
    if delay > 0:
        await asyncio.sleep(delay)
    else:  # behind schedule: still let pending receives run before the next send
        await asyncio.sleep(0)


async def run_session(agent: Any, request: AudioRequest, config: SessionConfig, *,
                      clock: Callable[[], float] = time.monotonic) -> SessionResult:
    """Drive one session of network adapter ``agent`` (see the module docstring).

    Returns the :class:`SessionResult` (possibly without audio: the caller decides whether that
    is a failure — SPEAR: yes, FDB: a silent reply).

    Raises:
        Whatever the adapter raises from ``connect``/``send_audio``/``end_input`` or reports with
        :meth:`OutputSink.fail`; the connection is closed in every case.
    """
    sink = OutputSink(request.sample_rate, clock=clock)
    conn = await agent.connect(request, sink, config)
    try:
        hop = max(1, round(config.chunk_ms * request.sample_rate / 1000.0))
        chunk_s = hop / request.sample_rate
        n = request.audio.shape[1]
        total = n + round(config.tail_silence_s * request.sample_rate)
        t0 = sink.start()
        for k, s in enumerate(range(0, total, hop)):
            if s >= n and sink.result.answer_complete_s is not None and not config.time_synchronous:
                break  # the adapter's answer is complete: the rest of the tail is not needed
            if config.paced:
                await _sleep_until(t0 + k * chunk_s, clock)
            for _ in range(2):  # let the receiver stamp what has already arrived before more is sent
                await asyncio.sleep(0)
            if config.paced:
                lag = clock() - (t0 + k * chunk_s)
                if lag > sink.result.send_lag_max_s:
                    sink.result.send_lag_max_s = lag
                    sink.result.send_lag_max_at_s = s / request.sample_rate
            sink.check()
            e = min(s + hop, total)
            if e <= n:
                chunk = request.audio[:, s:e]
            else:
                chunk = np.zeros((request.audio.shape[0], e - s), np.float32)
                if s < n:
                    chunk[:, : n - s] = request.audio[:, s:n]
            await conn.send_audio(chunk)
            sink.sent(e - s)
            if s < n <= e:  # the chunk holding the input's last sample
                sent = sink.result.last_input_sent_s = sink.now()
                sink.result.input_end_s = max(sent, n / request.sample_rate) if config.paced else sent
        sink.result.input_duration_s = n / request.sample_rate
        sink.result.tail_sent_s = max(0.0, sink.input_sent_s - sink.result.input_duration_s)
        if config.time_synchronous:
            if config.paced:  # the last chunk was sent at the start of its span: let it play out
                await _sleep_until(t0 + total / request.sample_rate, clock)
            sink.check()
            if config.drain_output:  # the output still in flight has its place in the reply channel
                await conn.end_input()
                await sink.wait(config.max_wait_s)
                sink.check()
            sink.result.finish_reason = "input_end"
            return sink.finished()
        if sink.result.input_end_s is None:
            sink.result.input_end_s = sink.now()
        if not config.paced:
            sink.result.input_end_s = sink.now()  # the moment the request goes out
        sink.check()
        await conn.end_input()
        waited_from = sink.now()
        while True:
            if not await sink.wait(config.max_wait_s - (sink.now() - waited_from)):
                sink.check()
                sink.result.finish_reason = "max_wait"
                break
            sink.check()
            if sink.is_done:
                break
        return sink.finished()
    finally:
        await conn.close()


def playback_timeline(result: SessionResult, n_samples: int, sample_rate: int) -> np.ndarray:
    """The output as a time-synchronous channel: ``(n_samples,)`` float32 at ``sample_rate`` Hz.

    Each received chunk (mixed to mono) is placed at ``max(its receive time, end of the previous
    chunk)`` on the wall clock since ``t0`` (a playback buffer: audio that arrives faster than real
    time queues behind what is playing); the whole is trimmed or zero-padded to ``n_samples`` (the
    input's length). Chunks that play back to back are resampled to ``sample_rate`` together, as
    the one signal they are (resampling each 40-100 ms delta on its own would put the filter's
    edge transients at every chunk boundary).
    """
    from spear_datasets.audio import resample

    out = np.zeros(int(n_samples), np.float32)
    cursor = 0  # output sample where the audio placed so far ends

    def place(start: int, run: list[np.ndarray], sr: int) -> int:
        a = resample(np.concatenate(run)[None, :], sr, sample_rate)[0]
        if start < n_samples:
            m = min(len(a), n_samples - start)
            out[start : start + m] = a[:m]
        return start + len(a)

    run: list[np.ndarray] = []
    run_start = run_in = 0  # the current run's first output sample and its input samples so far
    run_sr = 0
    for c in result.chunks:
        arrival = max(int(round(c.received_s * sample_rate)), 0)
        queued = run and c.sample_rate == run_sr and arrival <= run_start + round(run_in * sample_rate / run_sr)
        if queued:  # arrived before the run ends playing: joins it
            run.append(c.audio.mean(axis=0))
            run_in += c.audio.shape[1]
            continue
        if run:
            cursor = place(run_start, run, run_sr)
        if max(arrival, cursor) >= n_samples:
            run = []
            break
        run, run_start, run_in, run_sr = [c.audio.mean(axis=0)], max(arrival, cursor), c.audio.shape[1], c.sample_rate
    if run:
        place(run_start, run, run_sr)
    return out


def frame_synchronous_timeline(result: SessionResult, n_samples: int, sample_rate: int,
                               lead_s: float = 0.0) -> np.ndarray:
    """The output as a frame-synchronous channel: ``(n_samples,)`` float32 at ``sample_rate`` Hz.

    All output audio (mixed to mono, resampled to ``sample_rate``) back to back from ``lead_s``
    seconds, whatever its arrival times, trimmed or zero-padded to ``n_samples``: the rule of
    Full-Duplex-Bench's Moshi client (``v1_v1.5/model_inference/moshi/inference.py``: one 80 ms
    frame of zeros, then every decoded frame in order, cut to the input's length), for a system
    that answers every input frame with one output frame.
    """
    from spear_datasets.audio import resample

    out = np.zeros(int(n_samples), np.float32)
    if not result.chunks:
        return out
    audio, sr = result.concatenated()
    a = resample(audio.mean(axis=0, keepdims=True), sr, sample_rate)[0]
    start = min(max(0, int(round(lead_s * sample_rate))), len(out))
    m = min(len(a), len(out) - start)
    out[start:start + m] = a[:m]
    return out


def reply_timeline(agent: Any, result: SessionResult, n_samples: int, sample_rate: int) -> np.ndarray:
    """FDB's reply channel ``(n_samples,)`` float32 at ``sample_rate`` Hz by ``agent``'s
    ``timeline`` rule: ``arrival`` (:func:`playback_timeline`) or ``frame_synchronous``
    (:func:`frame_synchronous_timeline` from its ``timeline_lead_s``).

    Raises:
        ValueError: an unknown rule.
    """
    rule = getattr(agent, "timeline", "arrival")
    if rule == "arrival":
        return playback_timeline(result, n_samples, sample_rate)
    if rule == "frame_synchronous":
        return frame_synchronous_timeline(result, n_samples, sample_rate, float(getattr(agent, "timeline_lead_s", 0.0)))
    raise ValueError(f"unknown timeline rule {rule!r} (one of {', '.join(TIMELINES)})")


class NetworkAgentBase:
    """Convenience base of network adapters: the :class:`NetworkAgent` attributes' defaults and a
    synchronous :meth:`respond` (so the adapter also works wherever an :class:`~spear_metrics.agents.base.Agent`
    is expected: one session under ``asyncio.run``). Subclasses implement :meth:`connect` and may
    override :meth:`onset` (default ``None``: half-duplex) and :attr:`instructions`."""

    paced: bool = True
    tail_silence_s: float = 0.0
    max_wait_s: float = 30.0
    chunk_ms: Optional[float] = None
    max_concurrency: Optional[int] = None
    timeline: str = "arrival"
    timeline_lead_s: float = 0.0
    #: the adapter encodes each chunk of a live request as it comes (:attr:`AudioRequest.live`)
    live_input: bool = False
    instructions: Optional[str] = None
    onset_rule: str = "none (half-duplex: the answer is placed at the question end)"
    onset_kind: str = "question_end"  # a key of spear_metrics.agents.base.ONSET_KINDS

    async def connect(self, request: AudioRequest, sink: OutputSink, config: SessionConfig) -> DuplexConnection:
        raise NotImplementedError

    def onset(self, result: SessionResult) -> Optional[float]:
        return None

    def answer(self, result: SessionResult) -> AgentAnswer:
        """SPEAR's answer from a session (the hook :func:`session_answer` calls). Default: every
        output chunk back to back from :meth:`onset` (:func:`answer_from_session`); an adapter
        whose system streams silence too (Moshi) picks the answer out of the timeline here.

        Raises:
            NoAnswerError: no answer in the session (the row fails).
        """
        return answer_from_session(result, self.onset(result))

    def respond(self, audio: np.ndarray, row: Any, config: Any) -> AgentAnswer:
        """One SPEAR row without the harness's concurrency: ``audio`` ``(2, n)`` 16 kHz.

        Raises:
            AgentError: as :func:`run_session` / :func:`answer_from_session`.
        """
        request = AudioRequest(audio=audio, sample_rate=16_000, instructions=self.instructions,
                               row_id=str(getattr(row, "audio_path", "")))
        cfg = session_config(self, chunk_ms=getattr(config, "chunk_ms", None))
        result = asyncio.run(run_session(self, request, cfg))
        return self.answer(result)


@dataclass
class SessionAnswer(AgentAnswer):
    """An :class:`~spear_metrics.agents.base.AgentAnswer` made from a session, with where its first
    audio is on the session's clocks.

    Attributes:
        first_audio_s: wall clock (s after ``t0``) of the answer's first audio; ``None`` if unknown.
        first_audio_input_s: stream clock (s of input sent) at that moment.
    """

    first_audio_s: Optional[float] = None
    first_audio_input_s: Optional[float] = None


def session_answer(agent: Any, result: SessionResult) -> AgentAnswer:
    """SPEAR's answer from ``agent``'s session: its :meth:`NetworkAgentBase.answer` hook when it
    has one, else :func:`answer_from_session` with its :meth:`NetworkAgent.onset`.

    Raises:
        NoAnswerError (or the hook's AgentError): no answer (the row fails).
    """
    hook = getattr(agent, "answer", None)
    if callable(hook):
        return hook(result)
    return answer_from_session(result, agent.onset(result))


def answer_from_session(result: SessionResult, onset: Optional[float]) -> AgentAnswer:
    """SPEAR's answer from a session: the concatenated output audio starting at ``onset`` (s from
    the input start, ``None`` = at question end), the text, the finish reason and the measured
    ``response_time_s``.

    Raises:
        NoAnswerError: the session produced no audio (a never-answering system fails its row, as
            SPEAR's proxies report no success).
    """
    if not result.chunks:
        why = {"max_wait": "no answer audio before max_wait_s ran out",
               "stop": "the system finished without answer audio"}.get(result.finish_reason,
                                                                          f"no answer audio ({result.finish_reason})")
        raise NoAnswerError(why)
    audio, sr = result.concatenated()
    return SessionAnswer(audio=audio, sample_rate=sr, onset=onset, text=result.text or None,
                         finish_reason=result.finish_reason, response_time_s=result.response_time_s,
                         usage=dict(result.usage) or None,
                         first_audio_s=result.first_audio_s, first_audio_input_s=result.first_audio_input_s)


__all__ = [
    "AudioRequest", "DialogueTurn", "DuplexConnection", "NetworkAgent", "NoAnswerError", "OutputChunk", "OutputSink",
    "ProtocolError", "SessionAnswer", "SessionConfig", "SessionResult", "TextEvent", "answer_from_session", "frame_synchronous_timeline", "is_network_agent", "playback_timeline", "reply_timeline",
    "TIMELINES",
    "NetworkAgentBase", "DEFAULT_CHUNK_MS", "clamp_concurrency", "pcm16_bytes", "resolve_chunk_ms", "run_session", "session_answer", "session_config",
]
