"""Full-Duplex-Bench v1.5 speech adaptation: features of the reply before vs after the overlap.

Source: ``v1_v1.5/evaluation/eval_general_before_after.py`` with the configuration of
``evaluate.py --task general_before_after`` (``trim_mode="silero"``, UTMOSv2, speaking rate,
pitch, intensity on; SQuIM and sudden cutoff off; aggregation ``trim`` 5 %) of
``DanielLin94144/Full-Duplex-Bench`` (read for the definitions; the code is ours).

Per sample (:func:`split_features`):

- split time (``_choose_split_time_word_aligned``): with ``distractor_end`` = ``metadata.json``
  ``timestamps[1]``, the start of the first ``output.json`` word (in start order) that starts
  after it or holds it (``s <= t < e``); the last word's end when every word ends before it;
  ``distractor_end`` itself when there are no words; clamped to ``[0, duration]``.
- ``pre`` = ``output.wav`` before the split, ``post`` = from the split on (samples
  ``round(t * 16000)``); ``pre`` words end at or before the split, ``post`` words the others;
  ``clean`` = the whole ``clean_output.wav`` with ``clean_output.json``'s words.
- per segment (:func:`segment_features`; an empty segment has no features): silence trimmed by
  Silero VAD (threshold 0.5, min speech 60 ms, min silence 50 ms, default 30 ms padding) with the
  speech parts concatenated (no speech found: the segment is kept whole), then
  ``utmosv2`` (null here, :data:`UTMOSV2_UNSUPPORTED`), ``wpm`` = words / ((last word end - first
  word start) / 60) in the words' file order (0 when that span is <= 0), ``speech_dur_s`` (that
  span), ``mean_pitch`` / ``std_pitch`` (Hz; Praat ``to_pitch(time_step=0.01, floor 50, ceiling
  600)`` voiced frames ``0 < f0 <= 600``, ``std`` with ``ddof=1``; one frame: std 0; none: 0, 0;
  Praat failing: librosa ``pyin``, then torchaudio's ``detect_pitch_frequency``, as upstream),
  ``mean_intensity`` / ``std_intensity`` (dB; Praat ``to_intensity(time_step=0.01)`` frames above
  -200; fallbacks librosa RMS dB, then frame RMS dB, as upstream), ``cutoff_count`` (upstream's
  ``detect_sudden_cutoffs``, off in upstream's ``evaluate.py``: computed here for the record).
  The project adds the offline MOS of the same trimmed audio (``DNSMOS_OVRL`` by default:
  :mod:`spear_metrics.core.mos`), a different model from UTMOSv2 under its own name.
- aggregation (``_aggregate_results`` with ``agg={"mode": "trim", "trim_prop": 0.05}``): per side
  (``pre`` and ``post``; upstream aggregates no ``clean``) and key, the values that are not NaN;
  with 3 or more, those between the 5th and 95th percentiles (numpy's linear interpolation,
  bounds included) are kept; the mean of the kept ones (:func:`trimmed_mean`).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Sequence

import numpy as np

from spear_datasets.sources.fdb import Chunk

SR = 16_000
#: why the UTMOSv2 key is null (upstream scores with ``utmosv2.create_model(pretrained=True)``)
UTMOSV2_UNSUPPORTED = ("unsupported: UTMOSv2 (sarulab-speech/UTMOSv2) is not on PyPI and its pretrained weights "
                       "download from the Hugging Face Hub at first use, which this toolkit's offline model rule "
                       "does not allow; the project's offline MOS key stands beside it")
#: the upstream feature keys, in upstream's order (significance_test.py's README list, then the extras)
FEATURE_KEYS = ("utmosv2", "wpm", "mean_pitch", "std_pitch", "mean_intensity", "std_intensity", "speech_dur_s",
                "cutoff_count")
SIDES = ("pre", "post", "clean")
#: Silero settings of upstream's silence trimming (``_apply_silero_vad`` defaults)
TRIM_VAD = {"threshold": 0.5, "min_speech_duration_ms": 60, "min_silence_duration_ms": 50}
#: pitch analysis (``_compute_pitch_stats_robust`` defaults): Hz, Hz, s
PITCH_FLOOR_HZ, PITCH_CEILING_HZ, FRAME_S = 50.0, 600.0, 0.01
#: sudden cutoff (``detect_sudden_cutoffs``): frame ms, drop dB, margin dB, history frames
CUTOFF_FRAME_MS, CUTOFF_DB, CUTOFF_MARGIN_DB, CUTOFF_HIST = 30, -18.0, 6.0, 30
EPS = 1e-10
#: the 5 % trim of the aggregation, and the fewest values it trims
TRIM_PROP, TRIM_MIN_N = 0.05, 3


# ----------------------------------------------------------------------------- split


def _ts(c: Chunk) -> tuple[float, float] | None:
    return None if c.start is None or c.end is None else (float(c.start), float(c.end))


def split_time(distractor_end: float, chunks: Sequence[Chunk]) -> float:
    """Upstream's ``_choose_split_time_word_aligned`` (module docstring), before clamping (s)."""
    spans = sorted(t for c in chunks if (t := _ts(c)) is not None)
    if not spans:
        return float(distractor_end)
    for s, e in spans:
        if distractor_end < s or s <= distractor_end < e:
            return s
    return spans[-1][1]


def partition(chunks: Sequence[Chunk], split_t: float) -> tuple[list[Chunk], list[Chunk]]:
    """Upstream's ``_partition_chunks_word_aligned``: ``(words ending <= split_t, the others)``,
    file order kept, words without times dropped."""
    pre, post = [], []
    for c in chunks:
        t = _ts(c)
        if t is None:
            continue
        (pre if t[1] <= split_t else post).append(c)
    return pre, post


def speech_stats(chunks: Sequence[Chunk]) -> tuple[float, int]:
    """Upstream's ``_speech_stats``: ``(last word end - first word start, or 0 when negative; word count)``."""
    if not chunks:
        return 0.0, 0
    span = float(chunks[-1].end) - float(chunks[0].start)
    return (span if span >= 0 else 0.0), len(chunks)


def words_per_minute(chunks: Sequence[Chunk]) -> float:
    """Upstream's ``_wpm_speech_only``: words / (span / 60); 0 when the span is <= 0."""
    span, n = speech_stats(chunks)
    return 0.0 if span <= 0 else float(n / (span / 60.0))


# ----------------------------------------------------------------------------- segment features


def trim_silence(wav: np.ndarray, *, backend: str | None = None) -> np.ndarray:
    """Upstream's Silero trimming (``collapse="concat"``): the speech parts of 16 kHz mono ``(n,)``
    samples back to back; the input unchanged when the VAD finds none."""
    from spear_metrics.core.vad import DEFAULT_BACKEND, speech_timestamps

    ts = speech_timestamps(np.asarray(wav, dtype=np.float32), backend=backend or DEFAULT_BACKEND, **TRIM_VAD)
    if not ts:
        return wav
    n = wav.shape[-1]
    parts = []
    for t in ts:
        s, e = max(0, min(n, int(t["start"]))), max(0, min(n, int(t["end"])))  # samples at 16 kHz
        parts.append(wav[s:e] if e > s else wav[:0])
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def _f0(x: np.ndarray) -> np.ndarray | None:
    """F0 per frame (Hz): Praat, else librosa pyin, else torchaudio (upstream's chain); ``None`` if all fail."""
    try:
        import parselmouth

        snd = parselmouth.Sound(x.astype(np.float64), sampling_frequency=SR)
        return np.asarray(snd.to_pitch(time_step=FRAME_S, pitch_floor=PITCH_FLOOR_HZ,
                                       pitch_ceiling=PITCH_CEILING_HZ).selected_array["frequency"], dtype=np.float32)
    except Exception:
        pass
    try:
        import librosa

        f0, _, _ = librosa.pyin(x.astype(np.float32), fmin=PITCH_FLOOR_HZ, fmax=PITCH_CEILING_HZ, sr=SR,
                                hop_length=max(1, int(round(SR * FRAME_S))))
        return np.asarray(f0, dtype=np.float32)
    except Exception:
        pass
    try:
        import torch
        import torchaudio

        f0 = torchaudio.functional.detect_pitch_frequency(torch.from_numpy(x.astype(np.float32))[None], sample_rate=SR,
                                                          frame_time=FRAME_S, freq_low=PITCH_FLOOR_HZ,
                                                          freq_high=PITCH_CEILING_HZ)
        return f0[0].numpy().astype(np.float32)
    except Exception:
        return None


def pitch_stats(x: np.ndarray) -> tuple[float, float]:
    """``(mean_pitch, std_pitch)`` in Hz over voiced frames (module docstring)."""
    f0 = _f0(x)
    if f0 is None:
        return 0.0, 0.0
    v = f0[~np.isnan(f0) & (f0 > 0) & (f0 <= PITCH_CEILING_HZ)]
    if v.size == 0:
        return 0.0, 0.0
    if v.size == 1:
        return float(v[0]), 0.0
    return float(np.mean(v)), float(np.std(v, ddof=1))


def _intensity_db(x: np.ndarray) -> np.ndarray | None:
    hop = max(1, int(round(SR * FRAME_S)))
    try:
        import parselmouth

        vals = parselmouth.Sound(x.astype(np.float64), sampling_frequency=SR).to_intensity(time_step=FRAME_S)
        vals = vals.values.T.flatten()
        vals = vals[vals > -200]
        if vals.size:
            return vals.astype(np.float32)
    except Exception:
        pass
    try:
        import librosa

        rms = librosa.feature.rms(y=x.astype(np.float32), frame_length=hop, hop_length=hop, center=False).squeeze(0)
        return (20.0 * np.log10(np.maximum(rms, 1e-10))).astype(np.float32)
    except Exception:
        pass
    vals = [20.0 * np.log10(np.sqrt(np.mean(x[s:s + hop] ** 2) + 1e-10)) for s in range(0, x.shape[0], hop)]
    return np.array(vals, dtype=np.float32) if vals else None


def intensity_stats(x: np.ndarray) -> tuple[float, float]:
    """``(mean_intensity, std_intensity)`` in dB (module docstring)."""
    v = _intensity_db(x)
    if v is None or v.size == 0:
        return 0.0, 0.0
    if v.size == 1:
        return float(v[0]), 0.0
    return float(np.mean(v)), float(np.std(v, ddof=1))


def sudden_cutoffs(x: np.ndarray) -> list[float]:
    """Upstream's ``detect_sudden_cutoffs``: times (s) where a 30 ms frame's RMS level drops by
    >= 18 dB from the previous frame while that one stood >= 6 dB above the 10th percentile of
    the last 30 frames' levels."""
    def rms_db(b: np.ndarray) -> float:
        return float(20 * np.log10(np.sqrt(np.mean(b ** 2)) + EPS))

    hop = int(SR * CUTOFF_FRAME_MS / 1000)
    if x.size == 0:
        return []
    hist: deque = deque(maxlen=CUTOFF_HIST)
    prev = rms_db(x[:hop]) if len(x) >= hop else rms_db(x)
    out = []
    for i in range(1, max(1, len(x) // hop)):
        frame = x[i * hop:(i + 1) * hop]
        if frame.size == 0:
            break
        cur = rms_db(frame)
        hist.append(cur)
        floor = np.percentile(hist, 10) if hist else cur
        if cur - prev <= CUTOFF_DB and prev >= floor + CUTOFF_MARGIN_DB:
            out.append(i * CUTOFF_FRAME_MS / 1000)
        prev = cur
    return out


def segment_features(wav: np.ndarray, chunks: Sequence[Chunk] | None, *, mos: Any = None,
                     vad_backend: str | None = None) -> dict[str, Any]:
    """Upstream's ``_eval_segment`` for one segment of 16 kHz mono samples ``(n,)`` and its words
    (module docstring); ``{}`` for an empty segment. ``mos``: a :class:`spear_metrics.core.mos.MOSBackend`
    whose keys are added (``None``: none)."""
    out: dict[str, Any] = {}
    if wav is None or wav.size == 0:
        return out
    x = trim_silence(wav, backend=vad_backend)
    if x.size == 0:
        return out
    out["utmosv2"] = None
    if mos is not None:
        out.update(mos.score([x], sr=SR)[0])
    if chunks is not None:
        out["wpm"] = words_per_minute(chunks)
        out["speech_dur_s"] = speech_stats(chunks)[0]
    out["cutoff_count"] = float(len(sudden_cutoffs(x)))
    out["mean_pitch"], out["std_pitch"] = pitch_stats(x)
    out["mean_intensity"], out["std_intensity"] = intensity_stats(x)
    return out


def split_features(output_wav: np.ndarray, output_chunks: Sequence[Chunk], distractor_end: float,
                   clean_wav: np.ndarray | None = None, clean_chunks: Sequence[Chunk] | None = None, *,
                   mos: Any = None, vad_backend: str | None = None) -> dict[str, Any]:
    """Upstream's ``eval_general_split`` result for one sample: ``{"pre", "post", "clean"?,
    "split_t", "distractor_end", "pre_dur_s", "post_dur_s"}`` (module docstring); ``clean`` only
    when the clean reply is given."""
    total = output_wav.shape[-1] / SR
    t = max(0.0, min(total, split_time(distractor_end, output_chunks)))
    k = max(0, min(output_wav.shape[-1], int(round(t * SR))))
    pre_c, post_c = partition(output_chunks, t)
    res: dict[str, Any] = {
        "pre": segment_features(output_wav[:k], pre_c, mos=mos, vad_backend=vad_backend),
        "post": segment_features(output_wav[k:], post_c, mos=mos, vad_backend=vad_backend),
        "split_t": float(t), "distractor_end": float(distractor_end),
        "pre_dur_s": float(t), "post_dur_s": float(max(0.0, total - t)),
    }
    if clean_wav is not None and clean_chunks is not None:
        res["clean"] = segment_features(clean_wav, clean_chunks, mos=mos, vad_backend=vad_backend)
    return res


# ----------------------------------------------------------------------------- aggregation


def trim_filter(values: Sequence[Any], prop: float = TRIM_PROP, min_n: int = TRIM_MIN_N) -> list[float]:
    """Upstream's ``_robust_filter_vals`` in ``trim`` mode: numbers that are not NaN; with at least
    ``min_n`` of them, those within ``[P(prop), P(1 - prop)]`` (numpy percentiles, linear)."""
    vals = [float(v) for v in values if v is not None and not (isinstance(v, float) and np.isnan(v))]
    if len(vals) < min_n:
        return vals
    lo, hi = np.percentile(vals, prop * 100.0), np.percentile(vals, 100.0 - prop * 100.0)
    return [v for v in vals if lo <= v <= hi]


def trimmed_mean(values: Sequence[Any]) -> float | None:
    """Mean of :func:`trim_filter`'s values (``None`` when none): upstream's aggregate of a key."""
    kept = trim_filter(values)
    return float(sum(kept) / len(kept)) if kept else None
