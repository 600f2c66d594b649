"""Interruptions dimension: ``latency_ms``, ``interrupted_time_ms``, ``interruptions_%``.

Definitions: ``SPEAR_PROTOCOL.md`` section 2 ("Interruptions") and "Rows and missing values".
VAD: Silero with library defaults on 16 kHz mono, seconds at 0.1 s (see :mod:`spear_metrics.core.vad`);
the question's VAD runs on the input clip with both channels mixed, so the answerer's
backchannels during the question count as question-time speech, as upstream.
"""

from __future__ import annotations

from typing import Any, Sequence

from spear_datasets.audio import TARGET_SR
from spear_datasets.schema import SpearRow
from spear_metrics.core.dimension import (Dimension, MetricKey, Option, Sample, keyed_resampler, mean_or_none,
                                          mean_resampler, percent_or_none, percent_resampler)
from spear_metrics.core.vad import BACKENDS, DEFAULT_BACKEND, Segment, answer_vad_key, clip_segments, intersect_segments, shift_segments, speech_segments, total_length


def skip_point_s(answer_start_time: float | None) -> float:
    """Seconds cut from the start of the answer before its onset is looked for:
    ``max(0, -answer_start_time)`` (the part of an overlapping answer that was spoken before the
    question ended). ``None`` (placed at the question end) gives 0. Source: upstream
    ``compute_latency`` (``bin/base_metrics.py``)."""
    return max(0.0, -(0.0 if answer_start_time is None else float(answer_start_time)))


def latency_s(
    question_segments: Sequence[Segment],
    cut_answer_segments: Sequence[Segment],
    question_end_time: float,
    answer_start_time: float | None,
) -> float:
    """Response latency of one sample in **seconds**, as SPEAR's ``compute_latency`` defines it.

    latency = max(0, question end - end of the last question speech segment)
            + max(0, answer_start_time)
            + max(0, start of the first speech segment of the answer cut at the skip point)

    Args:
        question_segments: VAD segments (s) of the input clip, channels mixed.
        cut_answer_segments: VAD segments (s) of the answer waveform **cut** at
            :func:`skip_point_s` and re-run through VAD (times from the cut). Cutting first
            matters: Silero drops speech shorter than 250 ms, so a short tail of speech left
            after the cut disappears and the next segment's start counts.
        question_end_time: s, inside the input clip.
        answer_start_time: s (``None`` = placed at the question end, taken as 0).

    Returns:
        Seconds, always defined: an answer with no speech after the cut has onset 0 (upstream),
        so it counts its question gap. With no speech in the question the first term is 0.
    """
    ast = 0.0 if answer_start_time is None else float(answer_start_time)
    q_speech_end = max((e for _, e in question_segments), default=question_end_time)
    gap = max(0.0, question_end_time - q_speech_end)
    onset = min((s for s, _ in cut_answer_segments), default=0.0)
    return gap + max(0.0, ast) + max(0.0, onset)


def overlap_spans(
    question_segments: Sequence[Segment],
    answer_segments: Sequence[Segment],
    context_end_time: float,
    question_end_time: float,
    answer_start_time: float | None,
) -> list[Segment] | None:
    """The spans (s, question's time line) where answer speech overlaps question speech.

    Answer segments are shifted by ``question_end_time + answer_start_time``; question segments
    are clipped to ``[context_end_time, question_end_time]``. ``None`` when
    ``answer_start_time`` is ``None`` (the system did not choose its timing).
    """
    if answer_start_time is None:
        return None
    placed = shift_segments(answer_segments, question_end_time + float(answer_start_time))
    question = clip_segments(question_segments, context_end_time, question_end_time)
    return intersect_segments(placed, question)


def interrupted_time_s(
    question_segments: Sequence[Segment],
    answer_segments: Sequence[Segment],
    context_end_time: float,
    question_end_time: float,
    answer_start_time: float | None,
) -> float | None:
    """Overlap (s) between answer speech placed on the question's time line and question speech:
    the summed lengths of :func:`overlap_spans` (``None`` when ``answer_start_time`` is ``None``)."""
    spans = overlap_spans(question_segments, answer_segments, context_end_time, question_end_time, answer_start_time)
    return None if spans is None else total_length(spans)


def _segments_json(segs: Sequence[Segment]) -> list[list[float]]:
    return [[round(float(s), 6), round(float(e), 6)] for s, e in segs]


def timing_evidence(
    question_segments: Sequence[Segment],
    answer_segments: Sequence[Segment],
    cut_answer_segments: Sequence[Segment],
    overlaps: Sequence[Segment] | None,
    question_end_time: float,
    answer_start_time: float | None,
    skip_s: float,
) -> dict[str, Any]:
    """What each timing value of a row was computed from, for ``per_sample.jsonl`` (all in s):

    - ``question_vad_segments_s``: VAD segments of the input clip, channels mixed, on the clip's
      time line (what the question speech end and the overlap use);
    - ``answer_vad_segments_s``: VAD segments of the whole (uncut) answer placed on the
      question's time line, shifted by ``question_end_time + answer_start_time`` (an empty
      ``answer_start_time`` counts as 0), as the overlap uses them;
    - ``overlap_segments_s``: the spans of :func:`overlap_spans` (their summed length is
      ``interrupted_time_ms``; ``None`` without an ``answer_start_time``);
    - ``question_speech_end_s``: end of the last question segment (``None``: no question
      speech, the question gap is then 0);
    - ``skip_point_s``: where the answer was cut before its onset was looked for, s from the
      start of the answer (:func:`skip_point_s`);
    - ``answer_onset_after_skip_s``: start of the first VAD segment of the cut answer, s from
      the skip point (``None``: no speech after the cut, latency counts onset 0);
    - ``answer_speech_start_s``: that onset on the question's time line,
      ``question_end_time + max(0, answer_start_time) + answer_onset_after_skip_s``; latency is
      then ``answer_speech_start_s - min(question_speech_end_s, question_end_time)``.
    """
    ast = 0.0 if answer_start_time is None else float(answer_start_time)
    onset = min((s for s, _ in cut_answer_segments), default=None)
    return {
        "question_vad_segments_s": _segments_json(question_segments),
        "answer_vad_segments_s": _segments_json(shift_segments(answer_segments, question_end_time + ast)),
        "overlap_segments_s": None if overlaps is None else _segments_json(overlaps),
        "question_speech_end_s": max((round(float(e), 6) for _, e in question_segments), default=None),
        "skip_point_s": round(float(skip_s), 6),
        "answer_onset_after_skip_s": None if onset is None else round(float(onset), 6),
        "answer_speech_start_s": None if onset is None else round(question_end_time + max(0.0, ast) + max(0.0, float(onset)), 6),
    }


class Interruptions(Dimension):
    """Timing of the answer against the question (Silero VAD on question and answer)."""

    name = "interruptions"
    version = "2.0.1"
    # 2.0.0 results read as 2.0.1's (same columns and values); 2.0.1 fails rows whose audio reaches the VAD
    # as NaN/inf or far out of scale (> 1e16) instead of reading them as no speech
    compatible_versions = ("2.0.0",)
    threaded_samples = True  # torch / ONNX Runtime kernels release the GIL
    keys = (
        MetricKey("latency_ms", "ms", "closer_to_human",
                  "SPEAR's `compute_latency`: (question end − end of last question speech)₊ + `answer_start_time`₊ + the "
                  "first VAD start in the answer **cut** at the skip point (skip = max(0, −`answer_start_time`); VAD re-run "
                  "on the cut audio, so a tail of < 250 ms of speech left after the cut is dropped and the next segment "
                  "counts; 0 when the cut holds no speech); mean over every scored row, silent answers included",
                  group="Interruptions", published=True, order=4),
        MetricKey("latency_ms_speech", "ms", "closer_to_human",
                  "the same per-row latency averaged only over rows whose cut answer holds speech "
                  "(`answer_speech_after_skip`): a silent answer has no onset, and SPEAR's onset 0 rewards it with a "
                  "short latency", group="Interruptions"),
        MetricKey("interrupted_time_ms", "ms", "closer_to_human",
                  "overlap of answer speech placed at question end + `answer_start_time` with question speech clipped to "
                  "[context end, question end]; mean, zeros included; null for rows without `answer_start_time`",
                  group="Interruptions", published=True, order=5),
        MetricKey("interruptions_%", "%", "closer_to_human",
                  "share of rows (with an `answer_start_time`) whose answer overlaps question speech",
                  group="Interruptions", published=True, order=6),
        MetricKey("no_speech_answers_%", "%", "lower",
                  "share of scored rows whose answer holds no VAD speech (scored: a behaviour, not a failure)",
                  group="Interruptions"),
    )
    option_schema = (
        Option("vad_backend", str, DEFAULT_BACKEND, "Silero VAD front end (see spear_metrics.core.vad): batched "
               "(upstream's TorchScript weights, frames batched, frames near a threshold recomputed as upstream), sequence "
               "(packaged ONNX, unguarded) or jit (upstream's streaming call)", choices=BACKENDS),
        Option("vad_time_resolution", int, 1, "decimals of VAD times in seconds (1 = upstream's 0.1 s, 3 = ms)",
               minimum=0, maximum=6),
    )

    def _vad(self, wav):
        return speech_segments(
            wav,
            backend=self.options.get("vad_backend", DEFAULT_BACKEND),
            time_resolution=int(self.options.get("vad_time_resolution", 1)),
        )

    def _cut_vad(self, sample: Sample, skip_s: float, whole: list[Segment]) -> list[Segment]:
        """VAD of the answer cut at ``skip_s`` (upstream: ``waveform[int(round(skip * sr)):]``,
        then VAD again). Without a cut this is the whole answer's VAD, run once."""
        if skip_s <= 0.0:
            return whole
        cut = sample.answer_audio()[0, int(round(skip_s * TARGET_SR)):]
        return self._vad(cut) if cut.size else []

    def score_sample(self, sample: Sample) -> dict[str, Any]:
        m = sample.meta
        q = sample.cached("vad:input_mix", lambda: self._vad(sample.input_audio("mix")))
        a = sample.cached(answer_vad_key(self.options.get("vad_backend", DEFAULT_BACKEND),
                                         int(self.options.get("vad_time_resolution", 1))),
                          lambda: self._vad(sample.answer_audio()))
        skip = skip_point_s(m.answer_start_time)
        cut = self._cut_vad(sample, skip, a)
        lat = latency_s(q, cut, m.question_end_time, m.answer_start_time)
        spans = overlap_spans(q, a, m.context_end_time, m.question_end_time, m.answer_start_time)
        it = None if spans is None else total_length(spans)  # = interrupted_time_s(...)
        return {
            "latency_ms": round(1000.0 * lat, 6),
            "answer_speech_after_skip": bool(cut),
            "interrupted_time_ms": None if it is None else round(1000.0 * it, 6),
            "interruption": None if it is None else bool(it > 0),
            "no_speech_answer": len(a) == 0,
            **timing_evidence(q, a, cut, spans, m.question_end_time, m.answer_start_time, skip),
        }

    def aggregate_counts(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[str, int]:
        """Rows that entered each key: every row with a latency; rows whose cut answer holds
        speech (``latency_ms_speech``); rows with an ``answer_start_time`` (the two
        interruption keys); every scored row (``no_speech_answers_%``)."""
        out = super().aggregate_counts(rows, values, keys)
        out["latency_ms_speech"] = sum(1 for v in values if v.get("answer_speech_after_skip") and v.get("latency_ms") is not None)
        out["interruptions_%"] = sum(1 for v in values if v.get("interruption") is not None)
        out["no_speech_answers_%"] = sum(1 for v in values if v.get("no_speech_answer") is not None)
        return out

    def aggregate(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return {
            "latency_ms": mean_or_none([v.get("latency_ms") for v in values]),
            "latency_ms_speech": mean_or_none([v.get("latency_ms") for v in values if v.get("answer_speech_after_skip")]),
            "interrupted_time_ms": mean_or_none([v.get("interrupted_time_ms") for v in values]),
            "interruptions_%": percent_or_none([v.get("interruption") for v in values]),
            "no_speech_answers_%": percent_or_none([v.get("no_speech_answer") for v in values]),
        }

    def resampled_aggregate(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]]):
        """:meth:`aggregate` of one bootstrap resample ``idx`` (row positions, with repeats) from
        per-row arrays read once; bit-identical to it (:func:`mean_resampler`,
        :func:`percent_resampler`). ``latency_ms_speech`` reads the latency of the rows whose cut
        answer holds speech and ``None`` elsewhere (the rows :meth:`aggregate` filters out)."""
        latency = [v.get("latency_ms") for v in values]
        return keyed_resampler({
            "latency_ms": mean_resampler(latency),
            "latency_ms_speech": mean_resampler(
                [x if v.get("answer_speech_after_skip") else None for x, v in zip(latency, values)]),
            "interrupted_time_ms": mean_resampler([v.get("interrupted_time_ms") for v in values]),
            "interruptions_%": percent_resampler([v.get("interruption") for v in values]),
            "no_speech_answers_%": percent_resampler([v.get("no_speech_answer") for v in values]),
        })

    def models(self) -> dict[str, str]:
        from importlib.metadata import version

        return {"vad": f"silero-vad {version('silero-vad')} ({self.options.get('vad_backend', DEFAULT_BACKEND)})"}
