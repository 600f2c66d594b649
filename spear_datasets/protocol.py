"""The SPEAR selection protocol: cut question/answer samples from a conversation's turns.

Source: ``SPEAR_PROTOCOL.md`` section 1 ("Selection protocol"), after upstream
``bin/prepare_data_from_seamless.py``:

- merge both speakers' turns sorted by start time;
- a **question** is a turn whose text ends with ``?`` and whose next turn (in start order) is
  by the other speaker;
- context + question is at most 5 turns (the up-to-4 turns before the question, any speaker);
- the **answer** is the other speaker's following turns until the questioner speaks again;
- answers shorter than 1.0 s (first answer start to last answer end) are dropped.

Times are seconds on the conversation's clock. Input clips are 16 kHz stereo, channel 0 = the
first participant of ``speakers`` (sorted ids), channel 1 = the second; the clip runs from the
first context turn's start to the question's end. The human answer clip is the answerer's
channel over the answer span, copied to both channels.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Container, Mapping, Sequence

import numpy as np

from spear_datasets.audio import TARGET_SR, write_wav
from spear_datasets.schema import SpearRow, write_metadata

MAX_TURNS = 5
MIN_ANSWER_S = 1.0


@dataclass(frozen=True)
class Turn:
    """One speaker turn: ``speaker`` id, ``start``/``end`` in seconds, ``text``."""

    speaker: str
    start: float
    end: float
    text: str = ""

    def tagged(self) -> str:
        """``"SPK: text"`` as in SPEAR transcripts."""
        return f"{self.speaker}: {self.text.strip()}"


@dataclass(frozen=True)
class QASample:
    """A selected exchange: ``context`` turns, the ``question`` turn, the ``answer`` turns."""

    context: tuple[Turn, ...]
    question: Turn
    answer: tuple[Turn, ...]

    @property
    def clip_start(self) -> float:
        """Start (s, conversation clock) of the input clip: the first context turn's start."""
        return min(t.start for t in (*self.context, self.question))

    @property
    def answer_start(self) -> float:
        """Start (s) of the answer's first turn, on the conversation's clock."""
        return self.answer[0].start

    @property
    def answer_end(self) -> float:
        """End (s) of the exchange: the latest end of any of its turns (upstream's ``end_audio``,
        ``max(t["end"] for t in selected_turns)`` in ``bin/prepare_data_from_seamless.py``: a
        question or context turn that ends after the answer's last turn extends the answer)."""
        return max(t.end for t in (*self.context, self.question, *self.answer))

    @property
    def answer_duration(self) -> float:
        """:attr:`answer_end` minus :attr:`answer_start` (s)."""
        return self.answer_end - self.answer_start

    @property
    def answer_start_time(self) -> float:
        """Answer onset minus question end (s); negative = started before the question ended."""
        return self.answer_start - self.question.end

    def to_row(self, audio_path: str, answer_audio_path: str, speakers: Sequence[str], conversation_id: str) -> SpearRow:
        """The SPEAR metadata row of this sample (times relative to the input clip)."""
        return SpearRow(
            audio_path=audio_path,
            answer_audio_path=answer_audio_path,
            context_end_time=self.question.start - self.clip_start,
            question_end_time=self.question.end - self.clip_start,
            answer_duration=self.answer_duration,
            speakers="|".join(speakers),
            conversation_id=conversation_id,
            transcript_question=" ".join(t.tagged() for t in (*self.context, self.question)),
            transcript_answer=" ".join(t.tagged() for t in self.answer),
            answer_start_time=self.answer_start_time,
        )


def select_samples(turns: Sequence[Turn], *, max_turns: int = MAX_TURNS, min_answer_s: float = MIN_ANSWER_S) -> list[QASample]:
    """Apply the selection protocol to the turns of one two-person conversation.

    Args:
        turns: both speakers' turns, any order (sorted here by start, then end).
        max_turns: most turns in context + question (5 in SPEAR).
        min_answer_s: shortest answer kept, seconds (1.0 in SPEAR).

    Returns:
        The samples in conversation order.

    Raises:
        ValueError: more than two speakers, or a turn with ``end < start``.
    """
    ordered = sorted(turns, key=lambda t: (t.start, t.end, t.speaker, t.text))  # upstream's sort key
    speakers = {t.speaker for t in ordered}
    if len(speakers) > 2:
        raise ValueError(f"the protocol needs a two-person conversation, got speakers {sorted(speakers)}")
    for t in ordered:
        if t.end < t.start:
            raise ValueError(f"turn of {t.speaker} ends before it starts: {t.start}-{t.end}")
    out = []
    for i, q in enumerate(ordered[:-1]):
        if not q.text.strip().endswith("?") or ordered[i + 1].speaker == q.speaker:
            continue
        answer = []
        for t in ordered[i + 1 :]:
            if t.speaker == q.speaker:
                break
            answer.append(t)
        sample = QASample(context=tuple(ordered[max(0, i - (max_turns - 1)) : i]), question=q, answer=tuple(answer))
        if sample.answer_duration >= min_answer_s:
            out.append(sample)
    return out


def write_samples(
    samples: Sequence[QASample],
    channels: Mapping[str, np.ndarray],
    out_dir: str | os.PathLike,
    *,
    conversation_id: str,
    sr: int = TARGET_SR,
    audio_dir: str = "audios",
    answer_dir: str = "answers",
    only: Container[int] | None = None,
) -> list[SpearRow]:
    """Write the input clips and human answer clips of ``samples`` and return their rows.

    Args:
        samples: from :func:`select_samples`.
        channels: speaker id -> that speaker's mono waveform ``(n,)`` on the conversation clock, at ``sr`` Hz.
        out_dir: folder; clips go to ``out_dir/<audio_dir>/<stem>.wav`` and ``out_dir/<answer_dir>/<stem>.wav``,
            row paths are relative to ``out_dir``. Stem: ``<conversation_id>_<P1>_<P2>_<k>``.
        conversation_id: e.g. ``V00_S2017_I00001160``.
        only: the indices ``k`` of the samples to write (the others are neither written nor
            returned; their stems keep their place in the numbering); ``None``: all.

    Raises:
        ValueError: ``channels`` does not hold exactly the two speakers of the samples.
    """
    speakers = sorted(channels)
    if len(speakers) != 2:
        raise ValueError(f"need exactly two speaker channels, got {speakers}")
    out = Path(out_dir)
    n = max(len(np.asarray(channels[s]).reshape(-1)) for s in speakers)
    stereo = np.zeros((2, n), dtype=np.float32)
    for c, s in enumerate(speakers):
        x = np.asarray(channels[s], dtype=np.float32).reshape(-1)
        stereo[c, : len(x)] = x
    rows = []
    for k, smp in enumerate(samples):
        if only is not None and k not in only:
            continue
        stem = f"{conversation_id}_{speakers[0]}_{speakers[1]}_{k}"
        a, b = int(round(smp.clip_start * sr)), int(round(smp.question.end * sr))
        write_wav(out / audio_dir / f"{stem}.wav", stereo[:, a:b], sr)
        answerer = smp.answer[0].speaker
        if answerer not in speakers:
            raise ValueError(f"answer speaker {answerer!r} has no channel")
        ch = stereo[speakers.index(answerer)]
        ans = ch[int(round(smp.answer_start * sr)) : int(round(smp.answer_end * sr))]
        write_wav(out / answer_dir / f"{stem}.wav", np.stack([ans, ans]), sr)
        rows.append(smp.to_row(f"{audio_dir}/{stem}.wav", f"{answer_dir}/{stem}.wav", speakers, conversation_id))
    return rows


def build_split(
    conversations: Sequence[tuple[str, Sequence[Turn], Mapping[str, np.ndarray]]],
    out_dir: str | os.PathLike,
    *,
    sr: int = TARGET_SR,
) -> Path:
    """Select and write samples of several conversations into ``out_dir`` with ``metadata.csv``.

    Args:
        conversations: ``(conversation_id, turns, {speaker: mono wav at sr})`` per conversation.

    Returns:
        Path of the written ``metadata.csv``.
    """
    rows: list[SpearRow] = []
    for conv_id, turns, channels in conversations:
        rows.extend(write_samples(select_samples(turns), channels, out_dir, conversation_id=conv_id, sr=sr))
    return write_metadata(Path(out_dir) / "metadata.csv", rows)
