"""Built-in reference agents (no downloads): ``human``, ``silence``, ``fixed-delay``, ``barge-in``.

They replay the dataset's own human answer (``row.answer_audio_path``, an oracle) with a timing
they are told, so the harness and the interruption scores can be checked against known onsets.
All support both modes: offline (:meth:`respond`) and streaming (:meth:`stream`, a session that
starts speaking at the chunk that contains its onset).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from spear_datasets.audio import TARGET_SR, load_audio
from spear_datasets.schema import SpearRow, parse_number
from spear_metrics.agents.base import AgentAnswer, AgentError, GenerationConfig


class ScheduledSession:
    """A :class:`~spear_metrics.agents.base.StreamSession` that speaks a prepared answer when the
    stream reaches ``answer.onset`` (s); with ``onset`` ``None`` it waits for :meth:`finish`."""

    def __init__(self, answer: AgentAnswer):
        self.answer = answer

    def feed(self, chunk: np.ndarray, start: float) -> Optional[AgentAnswer]:
        onset = self.answer.onset
        end = start + chunk.shape[-1] / TARGET_SR
        if onset is not None and onset < end:
            return self.answer
        return None

    def finish(self, end: float) -> AgentAnswer:
        return self.answer


def _finite(name: str, value: float, *, minimum: float = 0.0) -> float:
    """``value`` as a finite float >= ``minimum`` (THE number parser); ``ValueError`` otherwise."""
    return float(parse_number(value, what=name, minimum=minimum))


class _ReplayHuman:
    """Base of the agents that replay the human answer; subclasses choose the onset."""

    onset_kind = "reference"  # spear_metrics.agents.base.ONSET_KINDS

    uses_reference_answer = True

    def onset(self, row: SpearRow) -> Optional[float]:
        raise NotImplementedError

    def respond(self, audio: np.ndarray, row: SpearRow, config: GenerationConfig) -> AgentAnswer:
        """The human answer clip (16 kHz, channels kept), starting at :meth:`onset`.

        Raises:
            AgentError: the row has no human answer clip.
            spear_datasets.audio.AudioError: the clip cannot be read.
        """
        if not row.answer_audio_path:
            raise AgentError("row has no human answer clip (answer_audio_path empty)")
        # a resampled full-scale recording overshoots [-1, 1] (the resampler's ringing), which
        # validate_answer refuses: the clip was valid PCM, so its resampled copy is clipped here
        wav = np.clip(load_audio(row.answer_audio_path, sr=TARGET_SR, channels="keep"), -1.0, 1.0)
        return AgentAnswer(audio=wav, sample_rate=TARGET_SR, onset=self.onset(row),
                           text=row.transcript_answer or None, finish_reason="stop")

    def stream(self, row: SpearRow, config: GenerationConfig) -> ScheduledSession:
        return ScheduledSession(self.respond(np.zeros((2, 0), np.float32), row, config))


class HumanAgent(_ReplayHuman):
    """The dataset's own answer at its own time: onset = ``question_end_time + answer_start_time``
    (s); ``None`` when the row's ``answer_start_time`` is empty. Onsets before the clip start
    are clipped to 0 s."""

    def onset(self, row: SpearRow) -> Optional[float]:
        if row.answer_start_time is None:
            return None
        return max(0.0, row.question_end_time + row.answer_start_time)


class FixedDelayAgent(_ReplayHuman):
    """The human answer replayed ``delay`` seconds after the question ends
    (``answer_start_time`` = ``delay``). Raises ``ValueError`` for a negative or non-finite delay.

    Args:
        delay: seconds from the question end to the answer onset (>= 0).
    """

    onset_kind = "fixed_delay"

    def __init__(self, delay: float = 0.5):
        self.delay = _finite("delay", delay)

    def onset(self, row: SpearRow) -> float:
        return row.question_end_time + self.delay


class BargeInAgent(_ReplayHuman):
    """The human answer started ``lead`` seconds BEFORE the question ends
    (``answer_start_time`` = ``-lead``; clipped to the clip start when ``lead`` exceeds the
    clip). Raises ``ValueError`` for a negative or non-finite lead.

    Args:
        lead: seconds before the question end at which the answer starts (>= 0).
    """

    def __init__(self, lead: float = 1.0):
        self.lead = _finite("lead", lead)

    def onset(self, row: SpearRow) -> float:
        return max(0.0, row.question_end_time - self.lead)


class SilenceAgent:
    """Never speaks: ``duration`` seconds of digital silence (mono, 16 kHz), onset ``None``
    (offline) / end of input (streaming), ``finish_reason="silence"``. A silent answer is a
    behaviour, not a failure: the scorer counts it in ``no_speech_answers_%``.

    Args:
        duration: seconds of silence returned (> 0).
    """

    def __init__(self, duration: float = 2.0):
        self.duration = _finite("duration", duration)
        if self.duration <= 0:
            raise ValueError("duration must be > 0 s")

    def respond(self, audio: np.ndarray, row: SpearRow, config: GenerationConfig) -> AgentAnswer:
        n = max(1, round(self.duration * TARGET_SR))
        return AgentAnswer(audio=np.zeros((1, n), np.float32), sample_rate=TARGET_SR, onset=None,
                           text=None, finish_reason="silence")

    def stream(self, row: SpearRow, config: GenerationConfig) -> ScheduledSession:
        return ScheduledSession(self.respond(np.zeros((2, 0), np.float32), row, config))
