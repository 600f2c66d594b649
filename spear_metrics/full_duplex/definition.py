"""Full-Duplex-Bench v1.0 metrics: take-over rate, latencies, backchannel frequency and JSD,
interruption relevance.

Definitions: ``FDB_PROTOCOL.md`` (section "Metrics"), checked against the upstream evaluation
scripts of ``DanielLin94144/Full-Duplex-Bench`` (``eval_pause_handling.py``,
``eval_smooth_turn_taking.py``, ``eval_user_interruption.py``, ``eval_backchannel.py``,
``get_transcript/asr.py``); paper arXiv 2503.04721. The code is ours; the values match the
upstream scripts on the same inputs, quirks included (named below where they matter).

All times are seconds from the start of ``output.wav`` / ``input.wav`` (both start at t = 0).
Word times of the reply lie on ``output.wav``'s time line, task-file times (``turn_taking.json``,
``interrupt.json``) on ``input.wav``'s; a time that is not finite, negative, a span that ends
before it starts, or a time past the end of its audio (+ :data:`TIME_TOLERANCE_S`) fails the sample.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from spear_datasets.sources.fdb import (
    TASKS,
    Chunk,
    FDBFormatError,
    FDBSample,
    OutputTranscript,
    read_interrupt,
    read_output_json,
    read_rating_json,
    read_turn_taking,
)
from spear_metrics.core.dimension import MetricKey
from spear_metrics.core.vad import DEFAULT_BACKEND

from spear_metrics.full_duplex import VERSION  # noqa: E402  (the descriptor's; one place)

#: TOR: a reply shorter than this span (s) ...
TURN_MIN_SPAN_S = 1.0
#: ... with at most this many words is not a turn (upstream ``turn_duration_threshold``, ``turn_num_words_threshold``)
TURN_MAX_WORDS = 3
#: backchannel walk: a VAD segment longer than this (s) is a real turn (upstream ``time_threshold``)
BACKCHANNEL_MAX_SEGMENT_S = 3.0
#: backchannel walk: more words than this in a segment -> TOR 1
BACKCHANNEL_MAX_WORDS = 3
#: backchannel walk: a segment under this (s) with at most BACKCHANNEL_SHORT_MAX_WORDS words -> TOR 0
BACKCHANNEL_SHORT_S = 1.0
BACKCHANNEL_SHORT_MAX_WORDS = 2
#: JSD histogram bin width (s) and smoothing added to every bin (upstream ``window_size``, ``epsilon``)
BIN_S = 0.2
EPSILON = 1e-10
#: CrisperWhisper pause redistribution threshold (s) FDB applies to its ASR output
PAUSE_SPLIT_S = 0.12
#: a time may lie this far (s) past the end of its audio (ASR and annotation rounding) before
#: the sample fails as impossible (ours, not FDB's: upstream checks no times)
TIME_TOLERANCE_S = 0.5
#: how the reply is read for the backchannel VAD: ``None`` = resampled to 16 kHz (correct);
#: ``"upstream"`` = FDB's ``eval_backchannel.py`` reading, the file's samples handed to Silero
#: as if they were 16 kHz (no resampling: a 24 kHz reply's times come out 1.5 x too late)
COMPAT_MODES = (None, "upstream")
READINGS = {
    None: "reply resampled to 16 kHz for the VAD (correct reading)",
    "upstream": "reply samples read as 16 kHz without resampling, as FDB's eval_backchannel.py "
                "(a 24 kHz reply's VAD times are 1.5 x too late)",
}

Segment = tuple[float, float]


class FDBInputError(ValueError):
    """A sample cannot be scored (null timestamp, id absent from the reference...); one line."""


# ----------------------------------------------------------------------------- time checks


def check_time(t: float | None, duration_s: float, what: str) -> None:
    """Check one time (s) against its audio: ``None`` passes (null times are handled where used);
    else it must be finite, >= 0 and at most ``duration_s + TIME_TOLERANCE_S``.

    Raises:
        FDBInputError: naming ``what`` and the value.
    """
    if t is None:
        return
    if not math.isfinite(t):
        raise FDBInputError(f"{what} is not a finite time: {t!r}")
    if t < 0:
        raise FDBInputError(f"{what} is a negative time: {t!r} s")
    if t > duration_s + TIME_TOLERANCE_S:
        raise FDBInputError(f"{what} = {t!r} s is past the end of the audio ({duration_s:.3f} s)")


def check_chunks(chunks: Sequence[Chunk], duration_s: float, source: str = "output.json") -> None:
    """Check every word time of a reply against ``output.wav``'s duration (s): each non-null
    start/end passes :func:`check_time` and no word ends before it starts.

    Raises:
        FDBInputError: the first offending word, e.g. ``output.json: word 3 end = 1000004.5 s is
            past the end of the audio (10.400 s)``.
    """
    for i, c in enumerate(chunks):
        check_time(c.start, duration_s, f"{source}: word {i} start")
        check_time(c.end, duration_s, f"{source}: word {i} end")
        if c.start is not None and c.end is not None and c.end < c.start:
            raise FDBInputError(f"{source}: word {i} ends before it starts: [{c.start!r}, {c.end!r}]")


def wav_duration(path: str | Path) -> float:
    """Duration (s) of a sample's ``input.wav``/``output.wav`` from its header.

    Raises:
        FDBInputError: the file is missing (``"output.wav missing: PATH"``).
        AudioError: the file is empty, truncated or undecodable.
    """
    from spear_datasets.audio import audio_info

    p = Path(path)
    if not p.is_file():
        raise FDBInputError(f"{p.name} missing: {p}")
    return audio_info(p).duration


# ----------------------------------------------------------------------------- take-over / latency


def take_over(chunks: Sequence[Chunk]) -> int:
    """Take-over (TOR) of one reply from its ASR words: 1 = the model took the turn.

    No words -> 0. Else span = last word end - first word start (s); a span under 1 s with at
    most 3 words -> 0, anything else -> 1 (FDB v1.0, all three ASR-based tasks).
    When the last word's end is null its start is used (as upstream ``eval_pause_handling.py``).

    Raises:
        FDBInputError: the first word's start is null, or the last word has no time at all.
    """
    if not chunks:
        return 0
    start = chunks[0].start
    end = chunks[-1].end if chunks[-1].end is not None else chunks[-1].start
    if start is None:
        raise FDBInputError("first word of output.json has a null start timestamp")
    if end is None:
        raise FDBInputError("last word of output.json has null start and end timestamps")
    span = end - start
    if span < TURN_MIN_SPAN_S and len(chunks) <= TURN_MAX_WORDS:
        return 0
    return 1


def response_latency_s(chunks: Sequence[Chunk], reference_s: float) -> float | None:
    """Latency (s) = first word start - ``reference_s``, negatives counted as 0; ``None`` when
    the model did not take over (:func:`take_over` is 0), as FDB averages TOR = 1 samples only.

    ``reference_s``: ``turn_taking.json[0].timestamp[0]`` (smooth turn-taking) or
    ``interrupt.json[0].timestamp[1]`` (user interruption), seconds.

    Raises:
        FDBInputError: see :func:`take_over`.
    """
    if take_over(chunks) != 1:
        return None
    return max(0.0, float(chunks[0].start) - float(reference_s))


# ----------------------------------------------------------------------------- ASR helpers


def crop_after(wave: np.ndarray, end_s: float, sr: int = 16000) -> np.ndarray:
    """The part of a mono waveform from ``end_s`` seconds on (sample index ``int(end_s * sr)``,
    as upstream ``asr.py`` crops ``output.wav`` at the end of the interrupting turn)."""
    x = np.asarray(wave)
    if x.ndim == 2:
        x = x[0]
    return x[max(0, int(end_s * sr)):]


def shift_chunks(chunks: Sequence[Chunk], offset_s: float) -> tuple[Chunk, ...]:
    """Words moved by ``offset_s`` seconds (null times stay null): ASR of a cropped waveform
    back to absolute time."""
    return tuple(Chunk(c.text, None if c.start is None else c.start + offset_s,
                       None if c.end is None else c.end + offset_s) for c in chunks)


def adjust_pauses(chunks: Sequence[Chunk], split_s: float = PAUSE_SPLIT_S) -> tuple[Chunk, ...]:
    """FDB's post-processing of word times (``adjust_pauses_for_hf_pipeline_output``): each gap
    between consecutive words is shared, ``min(gap, split_s) / 2`` seconds added to the end of
    the earlier word and taken from the start of the next. The first start and the last end
    do not move, so TOR and latency are unchanged; backchannel word overlaps may change."""
    out = [list(c) for c in chunks]
    for i in range(len(out) - 1):
        e0 = out[i][2]
        s1 = out[i + 1][1]
        if e0 is None or s1 is None:
            continue
        gap = s1 - e0
        if gap > 0:
            d = split_s / 2 if gap > split_s else gap / 2
            out[i][2] = e0 + d
            out[i + 1][1] = s1 - d
    return tuple(Chunk(*c) for c in out)


def transcript_to_output(transcript: Any, offset_s: float = 0.0) -> OutputTranscript:
    """Turn an ASR backend's ``Transcript(text, words=[Word(text, start, end)], model)`` into
    output.json form: words shifted by ``offset_s`` (s), then :func:`adjust_pauses`."""
    words = tuple(Chunk(str(w.text).strip(), None if w.start is None else float(w.start),
                        None if w.end is None else float(w.end)) for w in (transcript.words or []))
    chunks = adjust_pauses(shift_chunks(words, offset_s))
    return OutputTranscript(text=str(transcript.text or ""), chunks=chunks, source=str(getattr(transcript, "model", "asr")))


# ----------------------------------------------------------------------------- backchannel


def words_in_segment(chunks: Sequence[Chunk], start_s: float, end_s: float) -> list[str]:
    """Words of the ASR that overlap a VAD segment ``[start_s, end_s]``.

    Upstream's test, reproduced: a word ``[s, e]`` counts when it lies inside
    (``s >= start and e <= end``), straddles the end (``s <= end < e``) or straddles the start
    (``s <= start < e``); so a word starting exactly at the segment end counts, one ending
    exactly at its start does not. Words with a null start or end are ignored.
    """
    out = []
    for c in chunks:
        s, e = c.start, c.end
        if s is None or e is None:
            continue
        if (s >= start_s and e <= end_s) or (s <= end_s and e > end_s) or (s <= start_s and e > start_s):
            out.append(c.text)
    return out


def backchannel_walk(segments: Sequence[Segment], chunks: Sequence[Chunk]) -> tuple[int, list[Segment]]:
    """Walk the reply's VAD segments in time order (FDB v1.0 backchannel).

    A segment longer than 3 s sets TOR = 1 and ends the walk. Every other segment is counted
    as a backchannel and sets TOR from its words (:func:`words_in_segment`): more than 3 -> 1;
    else under 1 s with at most 2 words -> 0; else 1. The last decision wins.

    Returns:
        ``(tor, counted_segments)``; no segment -> ``(0, [])``.
    """
    tor = 0
    counted: list[Segment] = []
    for s, e in sorted(segments):
        dur = e - s
        if dur > BACKCHANNEL_MAX_SEGMENT_S:
            tor = 1
            break
        n = len(words_in_segment(chunks, s, e))
        if n > BACKCHANNEL_MAX_WORDS:
            tor = 1
        elif dur < BACKCHANNEL_SHORT_S and n <= BACKCHANNEL_SHORT_MAX_WORDS:
            tor = 0
        else:
            tor = 1
        counted.append((s, e))
    return tor, counted


def backchannel_frequency(n_counted: int, duration_s: float) -> float:
    """Backchannels per second: counted segments / duration of ``output.wav`` (s)."""
    if duration_s <= 0:
        raise FDBInputError(f"output.wav duration is {duration_s} s")
    return n_counted / duration_s


def backchannel_histogram(segments: Sequence[Segment], duration_s: float) -> np.ndarray:
    """Normalised time histogram of backchannel segments, ``int(duration/0.2) + 1`` bins of 0.2 s.

    Each segment adds 1 to every bin from ``int(start / 0.2)`` to ``int(end / 0.2)``, computed in
    floating point as upstream (so 8.2 s falls in bin 40, since 8.2 / 0.2 = 40.999...); bins past
    the last are dropped; then + 1e-10 and normalised to sum 1. Segment times are expected as
    Silero returns them with ``return_seconds=True`` (rounded to 0.1 s).
    """
    n = int(duration_s / BIN_S) + 1
    h = np.zeros(n, dtype=np.float64)
    for s, e in segments:
        for i in range(int(s / BIN_S), int(e / BIN_S) + 1):
            if 0 <= i < n:
                h[i] += 1.0
    h = h + EPSILON
    return h / h.sum()


def resample_reference(reference: Sequence[float], n_bins: int) -> np.ndarray:
    """A human histogram linearly interpolated onto ``n_bins`` points spread over the same
    [0, 1] span (upstream ``interp1d(linspace(0,1,len(gt)), gt)(linspace(0,1,n))``)."""
    ref = np.asarray(reference, dtype=np.float64)
    if ref.size == 1:
        return np.full(n_bins, ref[0])
    return np.interp(np.linspace(0.0, 1.0, n_bins), np.linspace(0.0, 1.0, ref.size), ref)


def reference_histogram(entry: Any) -> np.ndarray:
    """One id's entry of the human distribution as a float64 array.

    Raises:
        FDBInputError: not a non-empty list of numbers, or negative/non-finite values, or a sum of 0.
    """
    if (not isinstance(entry, (list, tuple)) or not entry
            or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in entry)):
        raise FDBInputError("reference distribution entry is not a non-empty list of numbers")
    ref = np.asarray(entry, dtype=np.float64)
    if not np.isfinite(ref).all() or (ref < 0).any() or ref.sum() <= 0:
        raise FDBInputError("reference distribution has negative/non-finite values or sums to 0")
    return ref


def backchannel_jsd(segments: Sequence[Segment], duration_s: float, reference: Sequence[float]) -> float:
    """Jensen-Shannon **distance** (natural log; square root of the divergence) between the
    backchannel histogram (:func:`backchannel_histogram`) and the human one for the same id
    (:func:`resample_reference`); both normalised to sum 1. No counted segment -> 1.0.

    Raises:
        FDBInputError: the reference is unusable (:func:`reference_histogram`), checked first,
            even when no segment is counted.
    """
    ref = reference_histogram(reference)
    if not segments:
        return 1.0
    from scipy.spatial.distance import jensenshannon

    h = backchannel_histogram(segments, duration_s)
    return float(jensenshannon(h, resample_reference(ref, h.size)))


# ----------------------------------------------------------------------------- relevance judge

RELEVANCE_SYSTEM = """\
You rate spoken conversations between a user and an AI assistant. The user spoke first, the
AI started answering, and the user cut in while the AI was still talking. Judge only the AI's
reply that came after the user's interruption: how well does it respond to what the user said
when interrupting?

Scale (integer from 0 = worst to 5 = best):
0 = has nothing to do with the interruption
1 = unrelated to the interruption
2 = only slightly related
3 = related
4 = closely related
5 = fully addresses the interruption

First write a short analysis of the interruption and of the reply, then give the rating.
Answer with one JSON object and nothing else: {"analysis": "<your analysis>", "rating": <0-5>}"""


def relevance_messages(context: str, interrupt: str, reply: str) -> list[dict]:
    """Chat messages asking a judge for the 0-5 relevance of the reply to the interruption
    (FDB v1.0's rubric and inputs - context turn, interrupting turn, reply text - in our words,
    with a JSON answer instead of upstream's free-text pattern)."""
    user = (f"Earlier user turn (context): {context}\n"
            f"User's interrupting turn: {interrupt}\n"
            f"AI's reply after the interruption: {reply}")
    return [{"role": "system", "content": RELEVANCE_SYSTEM}, {"role": "user", "content": user}]


def parse_rating(obj: dict) -> int:
    """The integer rating 0..5 of a judge's JSON reply.

    Raises:
        FDBInputError: not an integer in 0..5 (``4.0`` and ``"4"`` are accepted as 4).
    """
    r = obj.get("rating")
    try:
        if isinstance(r, bool):
            raise ValueError
        v = float(r)
    except (TypeError, ValueError):
        raise FDBInputError(f"judge rating {r!r} is not a number") from None
    if not v.is_integer() or not 0 <= v <= 5:
        raise FDBInputError(f"judge rating {r!r} is not an integer from 0 to 5")
    return int(v)


# ----------------------------------------------------------------------------- per-sample scorer


def _mono16k(path, *, resample: bool = True) -> np.ndarray:
    """``output.wav`` at 16 kHz, one channel: the file's only channel, or channel 1 of a stereo
    file (upstream ``load_audio`` in ``get_transcript/utils.py``). ``resample=False`` returns the
    file's own samples at its own rate (FDB's backchannel reading, see :data:`COMPAT_MODES`)."""
    from spear_datasets.audio import TARGET_SR, audio_info, load_audio

    ch = 1 if audio_info(path).channels >= 2 else 0
    return load_audio(path, sr=TARGET_SR if resample else None, channels=ch)[0]


@dataclass
class FullDuplexScorer:
    """Scores one FDB sample folder of a task into per-sample values.

    Args:
        task: one of ``pause_handling``, ``smooth_turn_taking``, ``backchannel``, ``user_interruption``.
        reference: backchannel only: FDB's human distribution (id -> histogram, as
            :func:`spear_datasets.sources.fdb.read_reference_distribution` returns it; an unusable
            entry fails the samples of its id); ``None`` = no JSD (``jsd`` is null).
        judge: user interruption only: a :class:`spear_metrics.core.judge.Judge`; ``None`` =
            no relevance (null).
        asr: a backend with ``transcribe(waves, sr=16000, word_timestamps=True)`` used when
            ``output.json`` is missing; ``None`` = ``spear_metrics.core.asr.load_asr(asr_name)``
            on first need.
        vad_backend: ``"batched"`` (default), ``"sequence"`` or ``"jit"`` (:mod:`spear_metrics.core.vad`).
        compat: ``None`` (correct reading) or ``"upstream"`` (:data:`COMPAT_MODES`): how the
            reply is read for the backchannel VAD. TOR and latency come from the ASR JSON and
            do not depend on it.
        asr_fallback: transcribe the reply when its ASR JSON is missing (``False``: a missing
            ``output.json`` fails the sample, as for a release, which ships its ASR).
        max_duration_diff_s: when set, a reply whose duration differs from ``input.wav``'s by
            more than this (s) fails the sample, before any decoding (a release's replies are
            time-synchronous with their stimulus).

    A sample's ``rating_json`` (FDB's judge rating, release) is its interruption relevance when
    present; else the configured ``judge`` is asked.
    """

    task: str
    reference: dict[str, Any] | None = None
    judge: Any = None
    asr: Any = None
    asr_name: str = "embedded"
    vad_backend: str = DEFAULT_BACKEND
    compat: str | None = None
    asr_fallback: bool = True
    max_duration_diff_s: float | None = None
    _lock: Any = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"unknown FDB task {self.task!r}; known: {', '.join(TASKS)}")
        if self.compat not in COMPAT_MODES:
            raise ValueError(f"unknown compat mode {self.compat!r}; known: none, upstream")

    # -- transcript
    def _asr_backend(self):
        if self.asr is None:
            try:
                from spear_metrics.core.asr import load_asr
            except ImportError as e:
                raise FDBInputError(f"output.json is missing and no ASR backend is available ({e})") from None
            self.asr = load_asr(self.asr_name)
        return self.asr

    def transcript(self, sample: FDBSample, offset_s: float = 0.0) -> OutputTranscript:
        """``output.json`` when present, else the ASR of ``output.wav`` from ``offset_s`` seconds
        on (user interruption: the end of the interrupting turn), words back in absolute time.
        A part that is empty or all zeros (digital silence: a system that never spoke) has no
        words, without asking the ASR (Whisper transcribes digital silence as "You")."""
        if sample.output_json.exists() or not self.asr_fallback:
            return read_output_json(sample.output_json)
        wave = _mono16k(sample.output_wav)
        part = crop_after(wave, offset_s) if offset_s > 0 else wave
        backend = self._asr_backend()
        if part.size == 0 or not np.any(part):  # no samples, or digital silence (Whisper would invent a "You")
            return OutputTranscript(text="", chunks=(), source=str(getattr(backend, "name", "asr")))
        tr = backend.transcribe([part.astype(np.float32)], sr=16000, word_timestamps=True)[0]
        return transcript_to_output(tr, offset_s)

    # -- per task
    def score(self, sample: FDBSample) -> dict[str, Any]:
        """Per-sample values (see the metric card). Raises ``FDBFormatError``/``FDBInputError``/
        ``AudioError`` (one line) when the sample cannot be scored: a missing ``input.wav`` or
        ``output.wav`` (backchannel: ``output.wav``; it reads nothing of ``input.wav``), a bad
        task file, or an impossible time (see the module docstring); with
        ``max_duration_diff_s``, a reply and stimulus of different lengths; a ``rating_json``
        that is malformed or outside 0-5.

        Thread-safe: several threads may score samples at once (``fdb score --judge-concurrency``);
        reading, ASR and VAD run one sample at a time (under the scorer's lock), only the
        relevance judge's calls overlap."""
        with self._lock:
            v, ask = self._measure(sample)
        if ask is not None:
            self._judge_relevance(v, *ask)
        return v

    def _measure(self, sample: FDBSample) -> tuple[dict[str, Any], tuple[Any, str] | None]:
        """:meth:`score`'s values without the judge's rating, and what to ask the judge
        (``(interrupt, reply text)``; ``None``: nothing)."""
        v: dict[str, Any] = {"id": sample.id, "task": self.task}
        if self.max_duration_diff_s is not None:
            self.check_durations(sample)
        if self.task == "backchannel":
            return self._backchannel(sample, v), None
        in_dur = wav_duration(sample.input_wav)
        out_dur = wav_duration(sample.output_wav)
        offset = 0.0
        interrupt = None
        span = None
        if self.task == "smooth_turn_taking":
            span = read_turn_taking(sample.task_json)
            ref_s = span[0]
        elif self.task == "user_interruption":
            interrupt = read_interrupt(sample.task_json)
            span = (interrupt.start_s, interrupt.end_s)
            ref_s = offset = interrupt.end_s
        else:  # pause handling: TOR only; pause.json is not needed (upstream does not read it)
            ref_s = None
        if span is not None:  # task-file times are on input.wav's time line
            check_time(span[0], in_dur, f"{sample.task_json.name}: timestamp start")
            check_time(span[1], in_dur, f"{sample.task_json.name}: timestamp end")
        tr = self.transcript(sample, offset)
        check_chunks(tr.chunks, out_dur, tr.source)
        v["asr_source"] = tr.source
        v["n_words"] = len(tr.chunks)
        v["tor"] = take_over(tr.chunks)
        v["first_word_s"] = tr.chunks[0].start if tr.chunks else None
        if ref_s is not None:
            v["reference_time_s"] = ref_s
            v["latency_s"] = response_latency_s(tr.chunks, ref_s)
        if interrupt is not None:
            v.update(relevance=None, relevance_analysis=None, relevance_error=None)
            rating = None if sample.rating_json is None else read_rating_json(sample.rating_json)
            if rating is not None:
                v["relevance_source"] = sample.rating_json.name
                if v["tor"] == 1:  # FDB rates TOR = 1 replies only
                    v["relevance"] = rating
            elif v["tor"] == 1 and self.judge is not None:
                return v, (interrupt, tr.text)
        return v, None

    def _judge_relevance(self, v: dict[str, Any], interrupt: Any, reply: str) -> None:
        """Ask the judge for the relevance of ``reply`` (into ``v``: ``relevance``,
        ``relevance_analysis``, or ``relevance_error`` with the one-line reason)."""
        from spear_metrics.core.judge import JudgeError

        try:
            obj = self.judge.ask_json(relevance_messages(interrupt.context, interrupt.interrupt, reply),
                                      required_keys=("analysis", "rating"))
            v["relevance"] = parse_rating(obj)
            v["relevance_analysis"] = str(obj.get("analysis"))
        except (JudgeError, FDBInputError) as e:
            v["relevance_error"] = " ".join(str(e).split())

    def check_durations(self, sample: FDBSample) -> None:
        """Reply and stimulus must last the same (within ``max_duration_diff_s``), from the headers.

        Raises:
            FDBInputError: a missing file, or durations further apart than the tolerance.
            AudioError: an unreadable header.
        """
        in_dur = wav_duration(sample.input_wav)
        out_dur = wav_duration(sample.output_wav)
        if abs(out_dur - in_dur) > self.max_duration_diff_s:
            raise FDBInputError(f"{sample.output_wav.name} lasts {out_dur:.3f} s but its stimulus input.wav {in_dur:.3f} s "
                                f"(more than {self.max_duration_diff_s:g} s apart)")

    def _backchannel(self, sample: FDBSample, v: dict[str, Any]) -> dict[str, Any]:
        from spear_metrics.core.vad import speech_segments

        ref = None
        if self.reference is not None:
            if sample.id not in self.reference:
                raise FDBInputError(f"sample id {sample.id!r} is absent from the human backchannel distribution")
            ref = self.reference[sample.id]
            reference_histogram(ref)  # an unusable entry fails its samples before any VAD work
        duration = wav_duration(sample.output_wav)
        # compat "upstream": the file's own samples go to Silero as if they were 16 kHz, as
        # FDB's script passes them (no resampling); the duration above stays the true one, as theirs
        wave = _mono16k(sample.output_wav, resample=self.compat != "upstream")
        segments = speech_segments(wave, backend=self.vad_backend, time_resolution=1)
        tr = self.transcript(sample)
        check_chunks(tr.chunks, duration, tr.source)
        tor, counted = backchannel_walk(segments, tr.chunks)
        v.update(
            asr_source=tr.source,
            n_words=len(tr.chunks),
            tor=tor,
            duration_s=duration,
            vad_segments=[list(s) for s in segments],
            n_backchannels=len(counted),
            backchannel_frequency=backchannel_frequency(len(counted), duration),
            jsd=None if ref is None else backchannel_jsd(counted, duration, ref),
        )
        return v


# ----------------------------------------------------------------------------- aggregation

#: task -> per-sample keys averaged into the summary (same names in summary and per_sample)
TASK_KEYS: dict[str, tuple[str, ...]] = {
    "pause_handling": ("tor",),
    "smooth_turn_taking": ("tor", "latency_s"),
    "user_interruption": ("tor", "latency_s", "relevance"),
    "backchannel": ("tor", "backchannel_frequency", "jsd"),
}

#: the FDB summary keys (one description of each column; the metric card's table is generated from it)
KEYS: tuple[MetricKey, ...] = (
    MetricKey("tor", "fraction", "task_dependent",
              "take-over rate (pause handling, backchannel: lower is better; turn-taking, interruption: higher). Per "
              "sample from the ASR words of `output.json`: no word -> 0; span (last end - first start) < 1 s and <= 3 "
              "words -> 0; else 1. Backchannel: the VAD walk below", group="Full-Duplex-Bench", published=True, order=1),
    MetricKey("latency_s", "s", "lower",
              "first reply word start - `turn_taking.json[0].timestamp[0]` (turn-taking) or - "
              "`interrupt.json[0].timestamp[1]` (interruption); TOR = 1 samples only; negatives count as 0",
              group="Full-Duplex-Bench", published=True, order=2),
    MetricKey("relevance", "0-5", "higher",
              "interruption: LLM judge rating of the reply given the context turn, the interrupting turn and the reply "
              "text; TOR = 1 samples; `null` (+ `relevance_note`) without a judge",
              group="Full-Duplex-Bench", published=True, order=3),
    MetricKey("backchannel_frequency", "1/s", "closer_to_human",
              "counted backchannel segments / duration of `output.wav`", group="Full-Duplex-Bench", published=True, order=4),
    MetricKey("jsd", "distance", "lower",
              "Jensen-Shannon **distance** (natural log) between the backchannels' 0.2 s time histogram and FDB's human "
              "one for that id; no backchannel -> 1; `null` (+ `jsd_note`) without `--reference`",
              group="Full-Duplex-Bench", published=True, order=5),
)
#: key -> (unit, better, description), derived from :data:`KEYS`
KEY_INFO: dict[str, tuple[str, str, str]] = {k.name: (k.unit, k.better, k.description) for k in KEYS}
#: task -> the direction of "better" of its take-over rate ``tor`` (declared ``task_dependent``): the
#: model should keep quiet through a pause or a backchannel and take the turn at a turn end or
#: an interruption (FDB v1.0 paper, arXiv 2503.04721, section 4)
TOR_BETTER: dict[str, str] = {"pause_handling": "lower", "backchannel": "lower", "smooth_turn_taking": "higher",
                              "user_interruption": "higher"}


def key_better(task: str, key: str) -> str | None:
    """The direction of "better" of per-sample key ``key`` in ``task``: :data:`TOR_BETTER` for
    ``tor``, else the key's declared one (:data:`KEY_INFO`); ``None`` for an unknown key or task."""
    if key == "tor":
        return TOR_BETTER.get(task)
    return KEY_INFO[key][1] if key in KEY_INFO else None


def aggregate(task: str, values: Sequence[dict[str, Any]], *, n_resamples: int = 1000, seed: int = 0,
              names: dict[str, str] | None = None) -> dict[str, Any]:
    """Summary of the scored (ok) samples of one task: each key of :data:`TASK_KEYS` as the mean
    of its non-null per-sample values (``None`` when none), ``<key>_n`` (how many values) and
    ``<key>_ci95`` (percentile bootstrap over samples, :func:`spear_metrics.core.stats.bootstrap_ci`;
    ``None`` with fewer than 2 values or ``n_resamples`` = 0). ``names`` renames the keys in the
    output (e.g. ``{"tor": "pause_tor_synthetic"}`` for the release leaderboard)."""
    from spear_metrics.core.stats import bootstrap_ci

    out: dict[str, Any] = {}
    for k in TASK_KEYS[task]:
        name = (names or {}).get(k, k)
        xs = [float(v[k]) for v in values if v.get(k) is not None]
        out[name] = float(np.mean(xs)) if xs else None
        out[f"{name}_ci95"] = bootstrap_ci(xs, n_resamples=n_resamples, seed=seed) if n_resamples > 0 else None
        out[f"{name}_n"] = len(xs)
    return out


def score_one(sample: FDBSample, scorer: FullDuplexScorer, row: int, *, audio_path: str | None = None,
              answer_audio_path: str | None = None, extra: dict[str, Any] | None = None):
    """Score one sample into a :class:`spear_metrics.core.records.SampleResult` (``row`` = its
    id in the run); a sample that cannot be scored is a failed result with its one-line reason,
    never a crash. ``audio_path``/``answer_audio_path`` default to its ``input.wav``/reply paths;
    ``values`` always hold ``id``, ``task`` and ``extra`` (e.g. the release category)."""
    from spear_metrics.core.records import SampleResult

    base = {"id": sample.id, "task": scorer.task, **(extra or {})}
    r = SampleResult(row=row, audio_path=audio_path or str(sample.input_wav),
                     answer_audio_path=answer_audio_path or str(sample.output_wav), values=dict(base))
    try:
        r.values = {**base, **scorer.score(sample)}
    except Exception as e:  # one bad sample never stops the run; the reason is kept
        from spear_datasets.audio import AudioError

        msg = " ".join(str(e).split()) or type(e).__name__
        r.fail(msg if isinstance(e, (FDBInputError, FDBFormatError, AudioError)) else f"{type(e).__name__}: {msg}")
    return r


def score_samples(samples: Sequence[FDBSample], scorer: FullDuplexScorer, progress: Any = None) -> list:
    """Score every sample in memory (:func:`score_one`; ``row`` = position in ``samples``).
    ``progress``: an object with ``update(n)`` (e.g. a tqdm bar), advanced by 1 per sample.
    The CLI goes through the resumable runner instead (:mod:`spear_metrics.full_duplex.runs`)."""
    results = []
    for i, s in enumerate(samples):
        results.append(score_one(s, scorer, i))
        if progress is not None:
            progress.update(1)
    return results


def summarize(task: str, results: Sequence, *, n_resamples: int = 1000, seed: int = 0,
              judge: Any = None, reference_given: bool = False, compat: str | None = None,
              n_processes: int = 1, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """``summary.json`` content for one task (through :func:`spear_metrics.core.summary.build_summary`):
    the aggregates of :func:`aggregate`, notes for values that do not exist by configuration
    (``relevance_note``, ``jsd_note``), counts and provenance, and which reading of the reply
    was used (``compat``, ``reply_reading``: :data:`READINGS`)."""
    from spear_metrics.core.summary import build_summary

    ok_values = [r.values for r in results if r.ok]
    agg = aggregate(task, ok_values, n_resamples=n_resamples, seed=seed)
    models: dict[str, str] = {}
    notes: dict[str, Any] = {}
    if task == "user_interruption":
        if judge is None:
            notes["relevance_note"] = "no judge configured (--judge-url/--judge-model): relevance not computed"
        else:
            models["relevance"] = judge.describe() if hasattr(judge, "describe") else str(judge)
            notes["n_relevance_errors"] = sum(1 for v in ok_values if v.get("relevance_error"))
            if hasattr(judge, "report"):  # replies from the cache, returned model ids, usage and cost
                notes["judge_calls"] = judge.report()
    if task == "backchannel":
        models["tor"] = models["backchannel_frequency"] = "silero-vad (library defaults, 0.1 s times)"
        if not reference_given:
            notes["jsd_note"] = "no human distribution given (--reference icc_gt_distribution.json): jsd not computed"
    asr_sources = sorted({str(v.get("asr_source")) for v in ok_values if v.get("asr_source") not in (None, "output.json")})
    if asr_sources:
        models["asr"] = ", ".join(asr_sources)
    info = {"task": task, "protocol": "Full-Duplex-Bench v1.0", "compat": compat or "none",
            "reply_reading": READINGS[compat], "bootstrap": bootstrap_info(n_resamples, seed)}
    info.update(notes)
    if extra:
        info.update(extra)
    return build_summary(aggregates=agg, results=results, metrics=["full_duplex"], versions={"full_duplex": VERSION},
                         models=models, n_processes=n_processes, extra=info)


def bootstrap_info(n_resamples: int, seed: int) -> dict[str, Any]:
    """How the ``*_ci95`` intervals of a summary were made."""
    return {"n_resamples": n_resamples, "seed": seed, "method": "percentile", "confidence": 0.95}
