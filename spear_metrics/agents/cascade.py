"""``cascade``: ASR -> a simple rule-based text reply -> espeak-ng speech. No downloads beyond
what the ASR backend of :mod:`spear_metrics.core.asr` (``load_asr``) needs.

It is a half-duplex baseline: it hears the question turn (the questioner's channel between
``context_end_time`` and ``question_end_time``), answers at the question end (onset ``None``)
or ``think_s`` seconds after it, in espeak-ng's voice.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from typing import Any, Optional

import numpy as np

from spear_datasets.audio import TARGET_SR, load_audio, resample
from spear_datasets.schema import SpearRow
from spear_metrics.agents.base import AgentAnswer, AgentError, GenerationConfig


def question_audio(audio: np.ndarray, row: SpearRow) -> np.ndarray:
    """The question turn as 16 kHz mono ``float32`` ``(n,)``: the questioner's channel (from
    ``row.speakers`` and the last tag of ``row.transcript_question``; both channels averaged when
    unknown) between ``context_end_time`` and ``question_end_time`` (s); the whole clip when that
    span is shorter than 0.1 s."""
    speakers = [s for s in (row.speakers or "").split("|") if s]
    q = row.questioner
    mono = audio[speakers.index(q)] if q in speakers and speakers.index(q) < audio.shape[0] else audio.mean(axis=0)
    a, b = round(row.context_end_time * TARGET_SR), round(row.question_end_time * TARGET_SR)
    seg = mono[a:b] if b - a >= TARGET_SR // 10 else mono
    return np.ascontiguousarray(seg, dtype=np.float32)


def reply_text(heard: str) -> str:
    """A deterministic one-sentence reply to the transcript ``heard`` (rule-based, no model)."""
    words = re.findall(r"[A-Za-z0-9']+", heard or "")
    if not words:
        return "Sorry, I didn't catch that. Could you say it again?"
    tail = " ".join(words[-6:])
    if heard.strip().endswith("?"):
        return f"Good question. About {tail}, I think that could work."
    return f"I see, {tail}. Tell me more."


def espeak(text: str, *, voice: str = "en-us", words_per_minute: int = 170, binary: str = "espeak-ng") -> np.ndarray:
    """Synthesize ``text`` with espeak-ng; returns 16 kHz mono ``float32`` ``(1, n)``.

    Raises:
        AgentError: espeak-ng is not installed, fails, or produces no audio.
    """
    exe = shutil.which(binary)
    if exe is None:
        raise AgentError(f"{binary} not found on PATH (Debian: apt-get install espeak-ng)")
    fd, tmp = tempfile.mkstemp(suffix=".wav")
    os.close(fd)
    try:
        proc = subprocess.run([exe, "-v", voice, "-s", str(int(words_per_minute)), "-w", tmp, "--", text],
                              capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise AgentError(f"{binary} failed ({proc.returncode}): {proc.stderr.strip()[:200]}")
        wav = load_audio(tmp, sr=None, channels="mix")
        import soundfile as sf

        sr = sf.info(tmp).samplerate
    except AgentError:
        raise
    except Exception as e:
        raise AgentError(f"{binary} produced no usable audio: {e}") from None
    finally:
        os.unlink(tmp)
    # the resampler's ringing can pass full scale, which validate_answer refuses: clip it here
    return np.clip(resample(wav, sr, TARGET_SR), -1.0, 1.0)


class CascadeAgent:
    """ASR (``spear_metrics.core.asr.load_asr(asr)``) -> :func:`reply_text` -> :func:`espeak`.

    Args:
        asr: ASR backend name for ``load_asr`` (default ``"embedded"``), loaded on first use.
        voice: espeak-ng voice.
        rate: espeak-ng speaking rate, words per minute.
        think_s: answer ``think_s`` seconds after the question end; ``None`` (default) = onset
            ``None`` ("at question end", the agent does not choose its timing).
        asr_backend: an object with ``transcribe(list[(n,) float32 16 kHz], sr=16000,
            word_timestamps=False) -> list[Transcript]`` used instead of ``load_asr`` (tests).
    """

    def __init__(self, asr: str = "embedded", voice: str = "en-us", rate: int = 170,
                 think_s: Optional[float] = None, asr_backend: Any = None):
        self.asr_name = asr
        self.voice = voice
        self.rate = int(rate)
        self.think_s = None if think_s is None else float(think_s)
        self.onset_kind = "question_end" if self.think_s is None else "fixed_delay"  # agents.base.ONSET_KINDS
        self._asr = asr_backend

    def _backend(self):
        if self._asr is None:
            try:
                from spear_metrics.core.asr import load_asr
            except ImportError as e:
                raise AgentError(f"cascade needs spear_metrics.core.asr (load_asr): {e}") from None
            self._asr = load_asr(self.asr_name)
        return self._asr

    def respond(self, audio: np.ndarray, row: SpearRow, config: GenerationConfig) -> AgentAnswer:
        """Transcribe the question, reply, speak. Raises :class:`AgentError` (ASR/TTS failure)."""
        (transcript,) = self._backend().transcribe([question_audio(audio, row)], sr=TARGET_SR, word_timestamps=False)
        heard = getattr(transcript, "text", "") or ""
        text = reply_text(heard)
        wav = espeak(text, voice=self.voice, words_per_minute=self.rate)
        onset = None if self.think_s is None else row.question_end_time + self.think_s
        return AgentAnswer(audio=wav, sample_rate=TARGET_SR, onset=onset, text=text, finish_reason="stop")
