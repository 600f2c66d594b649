"""The agent interface of ``spearbench infer``: what an adapter implements and returns.

An adapter is any object with ``respond(audio, row, config) -> AgentAnswer`` (:class:`Agent`);
full-duplex adapters also implement ``stream(row, config) -> StreamSession``
(:class:`StreamingAgent`) and are fed the input in real-time-sized chunks.

Times: seconds. Audio: ``float32`` numpy arrays, shape ``(channels, samples)``; the input is
always 16 kHz stereo (channel 0 = first speaker of ``row.speakers``, channel 1 = second).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, runtime_checkable

import numpy as np

from spear_datasets.audio import MAX_DURATION_S, MAX_SAMPLE_RATE, MIN_SAMPLE_RATE
from spear_datasets.schema import MAX_ANSWER_START_S, MAX_TEXT_CHARS, SpearRow
from spear_metrics.core.onset import ONSET_KINDS, onset_kind  # noqa: F401 (the adapters' vocabulary)

#: Sample rates (Hz) an answer may come in (the loader's header limits); anything else is a failed row.
MIN_ANSWER_SR = MIN_SAMPLE_RATE
MAX_ANSWER_SR = MAX_SAMPLE_RATE
#: Most channels an answer may have (more means "(samples, channels)" was returned by mistake).
MAX_ANSWER_CHANNELS = 8
#: How far (absolute) float samples may pass full scale (1.0) and still count as valid audio:
#: one bfloat16 step at 1.0 (2**-7), the coarsest float format models emit audio in, so a peak
#: that is 1.0 before a cast survives the cast. Samples within it are clipped to [-1, 1]; a float
#: answer that goes further is refused (integer PCM in a float array, an unnormalised vocoder).
FULL_SCALE_TOLERANCE = 2.0 ** -7
#: Integer sample types an answer may come in and how each maps onto [-1, 1): ``(offset,
#: scale)``, float = (int - offset) / scale (the WAV/soundfile conventions; 8-bit WAV is
#: unsigned, centred on 128). Other integer types (int64, uint16...) have no agreed PCM scale
#: and are refused rather than guessed.
INTEGER_PCM: dict[str, tuple[int, float]] = {
    "int8": (0, 2.0 ** 7),
    "uint8": (128, 2.0 ** 7),
    "int16": (0, 2.0 ** 15),
    "int32": (0, 2.0 ** 31),
}


class AgentError(RuntimeError):
    """An adapter cannot answer this row (one-line reason; the harness fails the row, run goes on)."""


class AgentOutputError(ValueError):
    """An adapter returned an invalid :class:`AgentAnswer` (reason stored on the failed row)."""


@dataclass
class AgentAnswer:
    """What an adapter returns for one input clip.

    Attributes:
        audio: the answer waveform, ``(samples,)`` or ``(channels, samples)``: float in [-1, 1]
            (within :data:`FULL_SCALE_TOLERANCE`), or integer PCM of a type in
            :data:`INTEGER_PCM` (int16 /32768, int32 /2**31, int8 /128, uint8 centred on 128);
            anything else fails the row (see :func:`validate_answer`). It starts at ``onset``
            (its first sample is played at that time).
        sample_rate: rate of ``audio`` in Hz (the harness resamples to 16 kHz when writing).
        onset: when the answer starts, in **seconds from the start of the input clip**; may be
            before the question ends (``row.question_end_time``): an interruption. ``None``
            means "at question end, the agent did not choose its timing" (half-duplex) and is
            written as an EMPTY ``answer_start_time``, never as 0.0.
        text: the agent's own text stream (``transcript_answer``), ``None`` when it has none.
        finish_reason: why generation stopped (``"stop"``, ``"length"``, ``"silence"``...).
        response_time_s: measured wall-clock seconds from the end of the input (or the request
            sent) to the first answer audio; ``None`` when not measured. Recorded by ``infer``
            beside ``answer_start_time`` (records, ``run_info.json``, ``response_times.csv``);
            not a SPEAR metadata column.
        usage: tokens the service billed for this answer, ``{model: usage fields}``
            (:class:`spear_metrics.core.usage.Usage`); ``None`` when not reported. Summed per run
            in ``run_info.json`` (``usage``).
    """

    audio: np.ndarray
    sample_rate: int
    onset: Optional[float] = None
    text: Optional[str] = None
    finish_reason: str = "stop"
    response_time_s: Optional[float] = None
    usage: Optional[dict] = None


@dataclass(frozen=True)
class GenerationConfig:
    """How the harness drives an adapter.

    Attributes:
        mode: ``"offline"`` (the whole question in, one :meth:`Agent.respond` call) or
            ``"streaming"`` (full-duplex simulation: input fed in chunks of ``chunk_ms``).
        chunk_ms: chunk length in **milliseconds** in streaming mode (20-100 ms is typical), also
            the chunk a network adapter's session is fed in; ``None``: the adapter's own (its
            ``chunk_ms`` attribute, e.g. ``moshi``'s 80 ms frame), else 40 ms
            (:func:`spear_metrics.agents.duplex.resolve_chunk_ms`; ``infer`` resolves it before the run).
        max_wait_s: streaming only: seconds of silence fed after the input ends before the
            session is asked to :meth:`StreamSession.finish` (the world waits for an answer).
        max_answer_s: longest answer in seconds an adapter should produce (a hint to adapters;
            the harness does not cut answers).
        seed: random seed for sampling adapters.
        options: free adapter-specific settings (``--agent-option`` pairs also go to the adapter
            constructor).
    """

    mode: str = "offline"
    chunk_ms: Optional[float] = 40.0
    max_wait_s: float = 0.0
    max_answer_s: float = 30.0
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in ("offline", "streaming"):
            raise ValueError(f"mode must be 'offline' or 'streaming', got {self.mode!r}")
        if self.chunk_ms is not None and not (math.isfinite(self.chunk_ms) and self.chunk_ms > 0):
            raise ValueError(f"chunk_ms must be > 0, got {self.chunk_ms}")
        if not (math.isfinite(self.max_wait_s) and self.max_wait_s >= 0):
            raise ValueError(f"max_wait_s must be >= 0, got {self.max_wait_s}")


@runtime_checkable
class Agent(Protocol):
    """A speech agent adapter (non-streaming form; every adapter implements it).

    ``respond(audio, row, config)``:

    - ``audio``: the input clip, ``float32`` ``(2, n)`` at 16 kHz, both speakers' channels.
    - ``row``: the clip's metadata; its paths are resolved absolute paths. ``row.answer_audio_path``
      is the HUMAN reference answer (oracle, present only for adapters that set
      ``uses_reference_answer = True``; ``None`` otherwise).
    - ``config``: :class:`GenerationConfig`.

    Returns an :class:`AgentAnswer`. Raise :class:`AgentError` (or anything) to fail the row.
    """

    def respond(self, audio: np.ndarray, row: SpearRow, config: GenerationConfig) -> AgentAnswer: ...


class StreamSession(Protocol):
    """One input clip fed to a full-duplex adapter in real-time-sized chunks.

    ``feed(chunk, start)``: ``chunk`` is ``(2, m)`` 16 kHz audio covering
    ``[start, start + m/16000)`` seconds of the clip (after the clip ends: zeros, up to
    ``config.max_wait_s``). Return ``None`` to keep listening, or an :class:`AgentAnswer` to
    start speaking now; its ``onset`` may be ``None`` (the harness records the end of this
    chunk) or a time not before ``start`` (it cannot start in the past).

    ``finish(end)``: the input is over (``end`` s) and the agent has not spoken: return the final
    answer (``onset`` ``None`` -> ``end``; a later onset is allowed).
    """

    def feed(self, chunk: np.ndarray, start: float) -> Optional[AgentAnswer]: ...

    def finish(self, end: float) -> AgentAnswer: ...


@runtime_checkable
class StreamingAgent(Agent, Protocol):
    """A full-duplex adapter: ``stream(row, config)`` opens a :class:`StreamSession` per clip."""

    def stream(self, row: SpearRow, config: GenerationConfig) -> StreamSession: ...


def answer_samples(audio: Any) -> np.ndarray:
    """THE definition of valid agent audio: ``audio`` as float32 samples in [-1, 1].

    - float arrays: kept when every sample lies within [-1 - t, 1 + t], t =
      :data:`FULL_SCALE_TOLERANCE` (2**-7: float rounding, a bfloat16 cast), then clipped to
      [-1, 1]; NaN/inf and samples beyond the tolerance are refused;
    - integer PCM (:data:`INTEGER_PCM`): converted by its scale (int16 / 32768, int32 / 2**31,
      int8 / 128, uint8 (x - 128) / 128), so a 16-bit answer is not clipped to full scale;
    - anything else (bool, complex, strings, int64 and other integer types without an agreed
      PCM scale, ragged lists) is refused.

    The shape is not checked here (:func:`validate_answer` does).

    Raises:
        AgentOutputError: one line saying why the samples are not valid audio.
    """
    try:
        raw = np.asarray(audio)
    except (TypeError, ValueError) as e:
        raise AgentOutputError(f"answer audio is not a numeric array: {e}") from None
    kind = raw.dtype.kind
    if kind in "iu":
        if raw.dtype.name not in INTEGER_PCM:
            raise AgentOutputError(f"answer audio is {raw.dtype.name}, which has no agreed PCM scale; return float32 "
                                   f"in [-1, 1] or integer PCM ({', '.join(INTEGER_PCM)})")
        offset, scale = INTEGER_PCM[raw.dtype.name]
        return ((raw.astype(np.float64) - offset) / scale).astype(np.float32)
    if kind != "f":
        raise AgentOutputError(f"answer audio is not a real numeric array (dtype {raw.dtype}); "
                               "return float32 in [-1, 1] or integer PCM")
    a = raw.astype(np.float32)
    if not np.isfinite(a).all():
        raise AgentOutputError("answer audio holds NaN or inf samples")
    peak = float(np.abs(a).max()) if a.size else 0.0
    if peak > 1.0 + FULL_SCALE_TOLERANCE:
        raise AgentOutputError(f"answer audio peaks at {peak:.6g}, beyond full scale (float audio must lie in [-1, 1]; "
                               "integer PCM must keep its integer dtype)")
    return np.clip(a, -1.0, 1.0)


def validate_answer(ans: Any) -> tuple[np.ndarray, int]:
    """Check an adapter's output; returns ``(audio (channels, samples) float32 in [-1, 1], sample_rate)``.

    The samples follow :func:`answer_samples` (float within full scale, or integer PCM converted
    by its scale).

    Raises:
        AgentOutputError: not an :class:`AgentAnswer`; ``sample_rate`` not an int in
            [:data:`MIN_ANSWER_SR`, :data:`MAX_ANSWER_SR`] Hz (wrong or zero rate); audio not
            valid samples (:func:`answer_samples`: beyond full scale, NaN/inf, a dtype without a
            PCM scale), not 1-D/2-D, empty (zero or negative duration), or shaped
            ``(samples, channels)``; ``onset`` not ``None`` and not a finite number >= 0 s;
            ``text``/``finish_reason`` of the wrong type; ``text`` longer than
            :data:`spear_datasets.schema.MAX_TEXT_CHARS` characters.
    """
    if not isinstance(ans, AgentAnswer):
        raise AgentOutputError(f"adapter returned {type(ans).__name__}, expected AgentAnswer")
    sr = ans.sample_rate
    if isinstance(sr, bool) or not isinstance(sr, (int, np.integer)) or not MIN_ANSWER_SR <= int(sr) <= MAX_ANSWER_SR:
        raise AgentOutputError(f"invalid sample_rate {sr!r} (expected an int in [{MIN_ANSWER_SR}, {MAX_ANSWER_SR}] Hz)")
    audio = answer_samples(ans.audio)
    if audio.ndim == 1:
        audio = audio[None, :]
    if audio.ndim != 2:
        raise AgentOutputError(f"answer audio has shape {audio.shape}; expected (samples,) or (channels, samples)")
    if audio.shape[0] > MAX_ANSWER_CHANNELS:
        raise AgentOutputError(f"answer audio has shape {audio.shape}: looks like (samples, channels); expected (channels, samples)")
    if audio.shape[0] == 0 or audio.shape[1] == 0:
        raise AgentOutputError("answer audio is empty (duration 0 s); return silence samples for a silent answer")
    if ans.onset is not None:
        if isinstance(ans.onset, bool) or not isinstance(ans.onset, (int, float, np.floating, np.integer)):
            raise AgentOutputError(f"onset must be a number of seconds or None, got {type(ans.onset).__name__}")
        if not math.isfinite(float(ans.onset)):
            raise AgentOutputError(f"onset is not finite: {ans.onset!r}")
        if float(ans.onset) < 0:
            raise AgentOutputError(f"onset is negative ({float(ans.onset):.3f} s before the input clip starts)")
    if ans.text is not None and not isinstance(ans.text, str):
        raise AgentOutputError(f"text must be a str or None, got {type(ans.text).__name__}")
    if ans.text is not None and len(ans.text) > MAX_TEXT_CHARS:  # never written into metadata.csv
        raise AgentOutputError(f"answer text holds {len(ans.text)} characters (a transcript cell keeps at most "
                               f"{MAX_TEXT_CHARS})")
    if not isinstance(ans.finish_reason, str) or not ans.finish_reason:
        raise AgentOutputError("finish_reason must be a non-empty str")
    return audio, int(sr)


def check_answer_limits(audio: np.ndarray, sample_rate: int, onset: Optional[float], question_end_time: float) -> None:
    """Refuse an answer that ``score`` would refuse, before it is written (called by the harness
    right after :func:`validate_answer`, once the onset is known).

    The limits are ``score``'s own: the answer WAV is read back through the audio loader's header
    checks (at most :data:`spear_datasets.audio.MAX_DURATION_S` s long) and its
    ``answer_start_time`` (``onset - question_end_time``, s) through
    :func:`spear_datasets.schema.parse_row` (at most :data:`spear_datasets.schema.MAX_ANSWER_START_S` s).

    Args:
        audio: the validated answer, ``(channels, samples)``; sample_rate: its rate in Hz.
        onset: the answer onset in seconds from the start of the input clip, or ``None``.
        question_end_time: the row's question end (s).

    Raises:
        AgentOutputError: the answer is longer than ``MAX_DURATION_S`` s, or starts more than
            ``MAX_ANSWER_START_S`` s after the question ends.
    """
    duration = audio.shape[-1] / float(sample_rate)
    if duration > MAX_DURATION_S:
        raise AgentOutputError(f"answer audio is {duration:.0f} s long (score accepts at most {MAX_DURATION_S:g} s)")
    if onset is not None and float(onset) - question_end_time > MAX_ANSWER_START_S:
        raise AgentOutputError(f"onset {float(onset):g} s is {float(onset) - question_end_time:g} s after the question "
                               f"ends (score accepts at most {MAX_ANSWER_START_S:g} s; unit error?)")
