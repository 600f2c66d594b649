"""Per-answer features of SPEAR's distributional baselines, as pure functions (numpy only).

Source of every definition: upstream ``thomasthebaud/SPEAR-benchmark-code``
``bin/distrib_baselines/extract_features.py`` (``compute_f0_features``,
``compute_lexical_features``, ``compute_temporal_features``), which takes its helpers from
``run_f0_extraction.py`` (``robust_stats``), ``run_lexical_extraction.py`` (``normalize_word``,
``compute_entropy``, ``compute_mattr``, ``compute_mtld``) and ``run_temporal_extraction.py``
(``merge_vad_segments``, ``filter_min_duration``, ``words_in_stretches``,
``compute_pause_stats_within_stretches``, ``compute_metrics_for_file``) — the same scripts as
``Ashish-Hallur/SPEAR-Metrics`` ("Distributional Baselines for Conversational Prosody and
Rhythm"). Every key below is named as upstream names its column; values upstream writes as NaN
are ``None`` here (the column then has no value for that answer).

Units: times in seconds, F0 in Hz, rates in words per second (``_wps``) or minute (``_wpm``).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

#: ``run_f0_extraction.py``: answers whose voiced-frame ratio is below this get
#: ``f0_status = "LOW_VOICED_RATIO"``; their F0 values are still written (upstream keeps them).
MIN_VOICED_RATIO = 0.05
#: ``run_lexical_extraction.py``: moving-average TTR windows and the MTLD factor threshold
MATTR_SMALL = 50
MATTR_LARGE = 500
MTLD_TTR_THRESHOLD = 0.72
#: answers with fewer words get no MATTR / MTLD (``lexical_status_reason = "SHORT_TEXT"``)
MIN_WORDS_LD = 50
#: ``run_temporal_extraction.py``: a gap between words of at least this is a pause (s)
PAUSE_THRESHOLD_S = 0.2
#: VAD segments closer than this are merged into one stretch (s)
MERGE_GAP_THRESHOLD_S = 1.0
#: stretches at least this long are kept (s); when none is, SPEAR's ``extract_features.py`` keeps
#: every merged stretch (its fallback: answers are rarely that long)
MIN_STRETCH_DURATION_S = 12.1
#: sentences of at most two words holding one of these are backchannels (upstream's list)
BACKCHANNEL_WORDS = frozenset({"yeah", "okay", "ok", "uh", "um"})
#: longer sentences holding one of these phrases count as discourse-marker sentences (upstream's list)
DISCOURSE_MARKERS = ("you know", "i mean", "kind of", "sort of")

#: F0 columns (``compute_f0_features``), in upstream's order
F0_KEYS = (
    "f0_total_duration_s", "f0_voiced_duration_s", "f0_voiced_ratio", "f0_n_voiced_frames",
    "f0_mean_raw", "f0_median_raw", "f0_std_raw", "f0_min_raw", "f0_max_raw", "f0_range_raw",
    "f0_p10", "f0_p90", "f0_range_p10_p90", "f0_mean_p10_p90", "f0_std_p10_p90",
    "f0_p25", "f0_p75", "f0_range_p25_p75", "f0_mean_p25_p75", "f0_std_p25_p75",
)
#: the part-of-speech columns (``compute_lexical_features``: spaCy ``en_core_web_sm`` ``pos_``
#: tags of the joined words; :mod:`spear_metrics.distributional.pos`), null without the tagger
POS_KEYS = ("lexical_content_word_count", "lexical_function_word_count", "lexical_density")
#: the ``pos_`` tags of content words (upstream's set)
CONTENT_POS = frozenset({"NOUN", "VERB", "ADJ", "ADV"})
#: lexical columns (``compute_lexical_features``) in upstream's column order; its always-empty
#: ``lexical_mean_asr_confidence`` and ``lexical_low_conf_flag`` are left out
LEXICAL_KEYS = (
    "lexical_total_words", "lexical_unique_words", *POS_KEYS, "lexical_ttr", "lexical_mattr_small", "lexical_mattr_large",
    "lexical_mattr_ratio", "lexical_mtld", "lexical_hapax_ratio", "lexical_entropy",
    "lexical_backchannel_ratio", "lexical_discourse_marker_ratio",
)
#: temporal columns (``compute_metrics_for_file``, prefixed ``temporal_`` as ``extract_features.py`` writes them)
TEMPORAL_KEYS = (
    "temporal_total_duration_s", "temporal_speech_active_time_s", "temporal_pause_count",
    "temporal_pause_total_duration_s", "temporal_pause_mean_duration_s", "temporal_pause_ratio",
    "temporal_speech_rate_wps", "temporal_speech_rate_wpm", "temporal_articulation_rate_wps",
    "temporal_articulation_rate_wpm",
)
#: every numeric feature column, in upstream's column order: what the baselines are fitted on
FEATURE_KEYS = (*F0_KEYS, *LEXICAL_KEYS, *TEMPORAL_KEYS)
#: upstream columns this project does not compute, with the reason
UNSUPPORTED = {
    "lexical_mean_asr_confidence": "upstream writes NaN for every answer (never a feature)",
}


# ----------------------------------------------------------------------------------------- F0


def robust_stats(voiced_hz: np.ndarray, low_p: float, high_p: float) -> tuple[float | None, ...]:
    """``run_f0_extraction.py`` ``robust_stats``: the ``low_p``/``high_p`` percentiles (numpy's
    linear interpolation) of the voiced F0 values, their difference, and the mean and standard
    deviation (ddof 0) of the values within ``[lo, hi]``. All five are ``None`` (upstream: NaN)
    when no value lies in the range.

    Args:
        voiced_hz: voiced F0 values (Hz), shape ``(n,)``, ``n >= 1``.
    """
    lo = float(np.percentile(voiced_hz, low_p))
    hi = float(np.percentile(voiced_hz, high_p))
    kept = voiced_hz[(voiced_hz >= lo) & (voiced_hz <= hi)]
    if len(kept) == 0:
        return (None, None, None, None, None)
    return (lo, hi, hi - lo, float(np.mean(kept)), float(np.std(kept)))


def f0_features(f0_hz: np.ndarray | None, total_duration_s: float) -> dict[str, Any]:
    """``compute_f0_features`` from a Praat autocorrelation pitch track (75-500 Hz).

    Args:
        f0_hz: F0 per analysis frame in Hz (0 = unvoiced), shape ``(frames,)``; ``None`` when
            Praat refused the sound (shorter than its analysis window): upstream then writes an
            error status and no F0 value.
        total_duration_s: Praat's total duration of the answer (s).

    Returns:
        The :data:`F0_KEYS` that exist, plus ``f0_status``: ``"OK"``, ``"NO_VOICED_FRAMES"``
        (only the four duration/ratio keys), ``"LOW_VOICED_RATIO"`` (voiced ratio below
        :data:`MIN_VOICED_RATIO`; the values are still given, as upstream writes them) or
        ``"ERROR: ..."``.
    """
    if f0_hz is None:
        return {"f0_status": f"ERROR: sound of {total_duration_s:.3f} s is shorter than Praat's pitch analysis window"}
    f0 = np.asarray(f0_hz, dtype=np.float64)
    voiced = f0[f0 > 0]
    ratio = len(voiced) / len(f0) if len(f0) else 0.0
    out: dict[str, Any] = {
        "f0_status": "OK",
        "f0_total_duration_s": float(total_duration_s),
        "f0_voiced_duration_s": ratio * float(total_duration_s),
        "f0_voiced_ratio": ratio,
        "f0_n_voiced_frames": int(len(voiced)),
    }
    if len(voiced) == 0:
        out["f0_status"] = "NO_VOICED_FRAMES"
        return out
    out.update({
        "f0_mean_raw": float(np.mean(voiced)),
        "f0_median_raw": float(np.median(voiced)),
        "f0_std_raw": float(np.std(voiced)),
        "f0_min_raw": float(np.min(voiced)),
        "f0_max_raw": float(np.max(voiced)),
        "f0_range_raw": float(np.max(voiced) - np.min(voiced)),
    })
    for (lo_p, hi_p), names in (((10, 90), ("f0_p10", "f0_p90", "f0_range_p10_p90", "f0_mean_p10_p90", "f0_std_p10_p90")),
                                ((25, 75), ("f0_p25", "f0_p75", "f0_range_p25_p75", "f0_mean_p25_p75", "f0_std_p25_p75"))):
        out.update(zip(names, robust_stats(voiced, lo_p, hi_p)))
    if ratio < MIN_VOICED_RATIO:
        out["f0_status"] = "LOW_VOICED_RATIO"
    return out


# ------------------------------------------------------------------------------------ lexical

_TOKEN_RE = re.compile(r"\b[\w']+\b")
_SENTENCE_RE = re.compile(r"[.!?]+")
_STRIP = ".,!?;:\"()[]{}"


def normalize_word(word: str) -> str:
    """``run_lexical_extraction.py`` ``normalize_word``: lower case, the characters
    ``.,!?;:"()[]{}`` stripped from both ends."""
    return word.lower().strip(_STRIP)


def tokens(text: str) -> list[str]:
    """``extract_features.py`` ``iter_text_tokens``: every ``\\b[\\w']+\\b`` match of ``text``,
    normalised (:func:`normalize_word`), empty ones dropped."""
    out = []
    for t in _TOKEN_RE.findall(text or ""):
        w = normalize_word(t)
        if w:
            out.append(w)
    return out


def mattr(toks: Sequence[str], window: int) -> float | None:
    """Moving-average type-token ratio (Covington & McFall 2010) as ``compute_mattr``: the mean of
    ``distinct / window`` over every window of ``window`` consecutive tokens; ``None`` when there
    are fewer tokens than ``window``."""
    if len(toks) < window:
        return None
    return float(np.mean([len(set(toks[i:i + window])) / window for i in range(len(toks) - window + 1)]))


def _mtld_pass(toks: Sequence[str], threshold: float) -> float | None:
    """One direction of MTLD (McCarthy & Jarvis 2010) as upstream's ``mtld_pass``: a factor ends
    when the running TTR falls to ``threshold`` or below; a trailing partial factor adds
    ``(1 - ttr) / (1 - threshold)``; the pass is ``tokens / factors`` (``None`` for no factor)."""
    factors = 0.0
    types: set[str] = set()
    count = 0
    ttr = 1.0
    for tok in toks:
        count += 1
        types.add(tok)
        ttr = len(types) / count
        if ttr <= threshold:
            factors += 1
            types = set()
            count = 0
    if count > 0:
        factors += (1 - ttr) / (1 - threshold)
    return len(toks) / factors if factors > 0 else None


def mtld(toks: Sequence[str], threshold: float = MTLD_TTR_THRESHOLD) -> float | None:
    """``compute_mtld``: the mean of the forward and backward passes (``numpy.nanmean``: one
    missing pass leaves the other); ``None`` below :data:`MIN_WORDS_LD` tokens."""
    if len(toks) < MIN_WORDS_LD:
        return None
    passes = [p for p in (_mtld_pass(toks, threshold), _mtld_pass(list(toks)[::-1], threshold)) if p is not None]
    return float(np.mean(passes)) if passes else None


def entropy_bits(counts: Counter) -> float | None:
    """``compute_entropy``: Shannon entropy (bits) of the word distribution, summed in the
    counter's first-seen order as upstream sums it."""
    total = sum(counts.values())
    if total == 0:
        return None
    p = np.array(list(counts.values())) / total
    return float(-np.sum(p * np.log2(p)))


def pos_counts(toks: Sequence[str], tagger: Any) -> dict[str, Any]:
    """The :data:`POS_KEYS` of an answer's words as ``compute_lexical_features`` computes them:
    ``tagger(" ".join(toks))`` (spaCy re-tokenises: ``don't`` gives two tags), content words =
    tags in :data:`CONTENT_POS` (0 when no token is tagged at all), function words = word count
    minus content words, density = content words / word count."""
    pos = [t.pos_ for t in tagger(" ".join(toks))]
    content = sum(p in CONTENT_POS for p in pos) if any(pos) else 0
    return {"lexical_content_word_count": content, "lexical_function_word_count": len(toks) - content,
            "lexical_density": content / len(toks)}


def lexical_features(text: str, tagger: Any = None) -> dict[str, Any]:
    """``compute_lexical_features`` of an answer's text.

    Args:
        tagger: spaCy ``en_core_web_sm`` 3.8.0 (:func:`spear_metrics.distributional.pos.load_tagger`);
            ``None``: the :data:`POS_KEYS` are ``None``.

    Returns:
        ``lexical_status`` (``"OK"``, or ``"EMPTY"`` with no other key when the text holds no
        word), ``lexical_status_reason`` (``"SHORT_TEXT"`` below :data:`MIN_WORDS_LD` words:
        MATTR and MTLD are then ``None``) and the :data:`LEXICAL_KEYS`:

        - ``lexical_ttr``: distinct / total words; ``lexical_hapax_ratio``: words seen once / total;
        - ``lexical_mattr_small``: MATTR, window 50; ``lexical_mattr_large``: window
          ``min(500, total)`` (so the TTR of the whole text below 500 words);
          ``lexical_mattr_ratio``: small / large;
        - ``lexical_mtld``: MTLD, threshold 0.72; ``lexical_entropy``: bits;
        - ``lexical_backchannel_ratio`` / ``lexical_discourse_marker_ratio``: over the sentences
          of the text (split on ``[.!?]+``, lower-cased, split on whitespace), the share of
          sentences of at most two words holding one of :data:`BACKCHANNEL_WORDS` / of longer
          sentences holding one of :data:`DISCOURSE_MARKERS`. Upstream's quirk is kept: words
          keep their commas, so ``"yeah, right"`` is no backchannel.
    """
    toks = tokens(text)
    n = len(toks)
    if n == 0:
        return {"lexical_status": "EMPTY", "lexical_status_reason": ""}
    out: dict[str, Any] = {"lexical_status": "OK", "lexical_status_reason": "",
                           "lexical_total_words": n, "lexical_unique_words": len(set(toks))}
    out.update(pos_counts(toks, tagger) if tagger is not None else dict.fromkeys(POS_KEYS))
    out["lexical_ttr"] = out["lexical_unique_words"] / n
    if n >= MIN_WORDS_LD:
        small, large = mattr(toks, MATTR_SMALL), mattr(toks, min(MATTR_LARGE, n))
        out["lexical_mattr_small"], out["lexical_mattr_large"] = small, large
        out["lexical_mattr_ratio"] = small / large if small and large else None
        out["lexical_mtld"] = mtld(toks, MTLD_TTR_THRESHOLD)
    else:
        out.update({"lexical_mattr_small": None, "lexical_mattr_large": None, "lexical_mattr_ratio": None,
                    "lexical_mtld": None, "lexical_status_reason": "SHORT_TEXT"})
    freq = Counter(toks)
    out["lexical_hapax_ratio"] = sum(1 for c in freq.values() if c == 1) / n
    out["lexical_entropy"] = entropy_bits(freq)
    sentences = [s.strip().lower() for s in _SENTENCE_RE.split(text) if s.strip()]
    backchannels = discourse = 0
    for s in sentences:
        words = s.split()
        if len(words) <= 2:
            backchannels += any(w in BACKCHANNEL_WORDS for w in words)
        else:
            discourse += any(m in s for m in DISCOURSE_MARKERS)
    out["lexical_backchannel_ratio"] = backchannels / len(sentences) if sentences else 0
    out["lexical_discourse_marker_ratio"] = discourse / len(sentences) if sentences else 0
    return {k: out[k] for k in ("lexical_status", "lexical_status_reason", *LEXICAL_KEYS)}


# ----------------------------------------------------------------------------------- temporal


@dataclass(frozen=True)
class TimedWord:
    """One word with its start and end in seconds from the start of the answer."""

    start: float
    end: float


def timed_words(words: Sequence[Any]) -> list[TimedWord]:
    """Words with usable times, sorted by start, as ``extract_words`` keeps them: objects with
    ``start``/``end`` attributes (or dict keys) in seconds; a word without both times, with a
    time that is not a finite number, or with ``end <= start`` is dropped."""
    out = []
    for w in words:
        s, e = (w.get("start"), w.get("end")) if isinstance(w, dict) else (getattr(w, "start", None), getattr(w, "end", None))
        try:
            s, e = float(s), float(e)
        except (TypeError, ValueError):
            continue
        if not (math.isfinite(s) and math.isfinite(e)) or e <= s:
            continue
        out.append(TimedWord(s, e))
    return sorted(out, key=lambda w: w.start)


def estimated_words(text: str, duration_s: float) -> list[TimedWord]:
    """``estimate_timed_words`` (upstream's path when no word timing exists): the text's tokens
    spread evenly over ``[0, duration_s]``, each lasting 0.8 of its share."""
    toks = tokens(text)
    if not toks or duration_s <= 0:
        return []
    step = duration_s / len(toks)
    return [TimedWord(i * step, min(duration_s, i * step + 0.8 * step)) for i in range(len(toks))]


def merge_segments(segments: Sequence[tuple[float, float]], max_gap_s: float = MERGE_GAP_THRESHOLD_S) -> list[tuple[float, float]]:
    """``merge_vad_segments``: segments (sorted by start, ``end > start`` only) joined when the
    gap to the stretch so far is at most ``max_gap_s``."""
    segs = sorted(((float(s), float(e)) for s, e in segments if float(e) > float(s)), key=lambda t: t[0])
    if not segs:
        return []
    merged = []
    cur_s, cur_e = segs[0]
    for s, e in segs[1:]:
        if s - cur_e <= max_gap_s:
            cur_e = max(cur_e, e)
        else:
            merged.append((cur_s, cur_e))
            cur_s, cur_e = s, e
    merged.append((cur_s, cur_e))
    return merged


def select_stretches(merged: Sequence[tuple[float, float]], min_s: float = MIN_STRETCH_DURATION_S) -> list[tuple[float, float]]:
    """``filter_min_duration``: the stretches at least ``min_s`` long; SPEAR's
    ``compute_temporal_features`` keeps every merged stretch when none is."""
    kept = [(s, e) for s, e in merged if e - s >= min_s]
    return kept or list(merged)


def words_in_stretches(words: Sequence[TimedWord], stretches: Sequence[tuple[float, float]]) -> list[tuple[TimedWord, int]]:
    """``words_in_stretches`` + ``assign_stretch_index_for_words``: each word (sorted by start)
    that lies wholly inside a stretch, with that stretch's index. Upstream's walk is kept: the
    stretch pointer only moves forward, past stretches that end before the word starts."""
    out = []
    j = 0
    for w in words:
        while j < len(stretches) and w.start > stretches[j][1]:
            j += 1
        if j >= len(stretches):
            break
        s, e = stretches[j]
        if w.start >= s and w.end <= e:
            out.append((w, j))
    return out


def temporal_metrics(words: Sequence[TimedWord], stretches: Sequence[tuple[float, float]],
                     pause_threshold_s: float = PAUSE_THRESHOLD_S) -> dict[str, float] | None:
    """``compute_metrics_for_file`` on the selected stretches (``None``: fewer than 2 words in them).

    Pauses are gaps of at least ``pause_threshold_s`` between consecutive words of the same
    stretch. ``temporal_total_duration_s`` = summed stretch time; ``speech_active_time_s`` =
    that minus the pauses; speech rate = words / stretch time, articulation rate = words /
    speech-active time (per second and x 60 per minute); ``pause_ratio`` = pause time /
    stretch time. A zero denominator gives ``None``.
    """
    if not words or not stretches:
        return None
    sel = words_in_stretches(words, stretches)
    if len(sel) < 2:
        return None
    total = float(sum(e - s for s, e in stretches))
    pauses = []
    for (prev, i_prev), (w, i) in zip(sel, sel[1:]):
        if i != i_prev:
            continue
        gap = w.start - prev.end
        if gap >= pause_threshold_s:
            pauses.append(gap)
    pause_total = float(np.sum(pauses)) if pauses else 0.0
    pause_mean = float(np.mean(pauses)) if pauses else 0.0
    active = max(total - pause_total, 0.0)
    n = len(sel)
    sr = n / total if total > 0 else None
    ar = n / active if active > 0 else None
    return {
        "temporal_total_duration_s": total,
        "temporal_speech_active_time_s": active,
        "temporal_pause_count": len(pauses),
        "temporal_pause_total_duration_s": pause_total,
        "temporal_pause_mean_duration_s": pause_mean,
        "temporal_pause_ratio": pause_total / total if total > 0 else None,
        "temporal_speech_rate_wps": sr,
        "temporal_speech_rate_wpm": None if sr is None else sr * 60.0,
        "temporal_articulation_rate_wps": ar,
        "temporal_articulation_rate_wpm": None if ar is None else ar * 60.0,
    }


def temporal_features(words: Sequence[TimedWord], vad_segments: Sequence[tuple[float, float]], source: str) -> dict[str, Any]:
    """``compute_temporal_features``: the :data:`TEMPORAL_KEYS` from timed words and VAD segments.

    Args:
        words: timed words (:func:`timed_words` or :func:`estimated_words`).
        vad_segments: speech segments ``(start_s, end_s)`` of the answer.
        source: where the word times come from, written as ``temporal_alignment_source``.

    Returns:
        ``temporal_alignment_source``, ``temporal_status`` (``"OK"``, ``"TOO_FEW_WORDS"``,
        ``"NO_VAD"`` or ``"INSUFFICIENT_TIMED_WORDS_IN_STRETCHES"``; the values only with ``"OK"``).
    """
    out: dict[str, Any] = {"temporal_alignment_source": source}
    if len(words) < 2:
        out["temporal_status"] = "TOO_FEW_WORDS"
        return out
    if not vad_segments:
        out["temporal_status"] = "NO_VAD"
        return out
    metrics = temporal_metrics(words, select_stretches(merge_segments(vad_segments)))
    if metrics is None:
        out["temporal_status"] = "INSUFFICIENT_TIMED_WORDS_IN_STRETCHES"
        return out
    out.update(metrics)
    out["temporal_status"] = "OK"
    return out
