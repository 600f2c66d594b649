"""Explainable acoustic features: ``explainable_duration_s``, ``explainable_voiced_ratio``,
``explainable_normalized_f0_std_avg``.

Definitions: ``SPEAR_PROTOCOL.md`` section 2 ("Explainable"), following upstream
``bin/distrib_baselines/run_f0_extraction.py`` and ``normalize_features_by_answered_speaker.py``:
Praat autocorrelation pitch (75-500 Hz); the seven F0 statistics (min, p10, p25, median, p75,
p90, max) of each answer are divided by the mean, over the answers to the same questioner, of
each answer's mean F0; the key is the mean over the seven features of their across-sample
standard deviation (ddof 1).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

import numpy as np

from spear_datasets.audio import TARGET_SR, audio_info
from spear_datasets.schema import SpearRow
from spear_metrics.core.dimension import Dimension, MetricKey, Sample, mean_or_none
from spear_metrics.core.pitch import F0_STATS, pitch_track


def normalized_f0_std_avg(questioners: Sequence[str], stats: Sequence[dict[str, float | None]]) -> float | None:
    """Mean over the 7 F0 statistics of their across-sample std (ddof 1) after dividing each
    answer's statistics by the mean F0 of the answers to the same questioner.

    Args:
        questioners: speaker tag of the question of each sample (the "answered speaker").
        stats: per sample, the keys of :data:`F0_STATS` plus ``f0_mean_hz`` (Hz or ``None``).

    Returns:
        The average std, or ``None`` when fewer than 2 samples have voiced frames.
    """
    group_means: dict[str, list[float]] = defaultdict(list)
    for q, s in zip(questioners, stats):
        if s.get("f0_mean_hz") is not None:
            group_means[q].append(float(s["f0_mean_hz"]))
    denom = {q: float(np.mean(v)) for q, v in group_means.items() if v and np.mean(v) > 0}
    matrix = []
    for q, s in zip(questioners, stats):
        if q in denom and all(s.get(k) is not None for k in F0_STATS):
            matrix.append([float(s[k]) / denom[q] for k in F0_STATS])
    if len(matrix) < 2:
        return None
    return float(np.mean(np.std(np.asarray(matrix), axis=0, ddof=1)))


class ExplainableFeatures(Dimension):
    """Duration, voicing and pitch-variability of the answers (Praat autocorrelation pitch)."""

    name = "explainable_features"
    version = "1.0.0"
    keys = (
        MetricKey("explainable_duration_s", "s", "closer_to_human", "duration of the answer audio file (not of its speech); mean"),
        MetricKey("explainable_voiced_ratio", "ratio", "closer_to_human", "share of voiced pitch frames (Praat AC, 75-500 Hz); mean"),
        MetricKey("explainable_normalized_f0_std_avg", "ratio", "closer_to_human",
                  "mean over 7 F0 statistics of their across-sample std, per-questioner normalised"),
    )

    def score_sample(self, sample: Sample) -> dict[str, Any]:
        duration = audio_info(sample.answer_audio_path).duration
        track = pitch_track(sample.answer_audio(), TARGET_SR)
        return {"explainable_duration_s": duration, "explainable_voiced_ratio": track.voiced_ratio, **track.stats()}

    def aggregate(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return {
            "explainable_duration_s": mean_or_none([v.get("explainable_duration_s") for v in values]),
            "explainable_voiced_ratio": mean_or_none([v.get("explainable_voiced_ratio") for v in values]),
            "explainable_normalized_f0_std_avg": normalized_f0_std_avg([r.questioner for r in rows], values),
        }

    def models(self) -> dict[str, str]:
        from importlib.metadata import version

        return {"pitch": f"praat-parselmouth {version('praat-parselmouth')} to_pitch_ac(75, 500)"}
