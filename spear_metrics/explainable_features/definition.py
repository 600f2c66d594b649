"""Explainable acoustic features: ``explainable_duration_s``, ``explainable_voiced_ratio``,
``explainable_normalized_f0_std_avg``.

Definitions: ``SPEAR_PROTOCOL.md`` section 2 ("Explainable"), following upstream
``bin/distrib_baselines/run_f0_extraction.py`` and ``normalize_features_by_answered_speaker.py``:
Praat autocorrelation pitch (75-500 Hz, 10 ms step) of the answer FILE as Praat reads it (its own
sample rate and channels: ``parselmouth.Sound(path)``); duration = Praat's total duration; the
seven F0 statistics (min, p10, p25, median, p75, p90, max) of each answer are divided by the
mean, over the answers to the same questioner within the same split/subset table (the subset
folder of ``audio_path``), of each answer's mean F0; the key is the mean over the seven features
of their across-sample standard deviation (ddof 1), subsets pooled after normalisation.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Sequence

import numpy as np

from spear_datasets.schema import SpearRow, subset_of
from spear_metrics.core.dimension import Dimension, MetricKey, Sample, keyed_resampler, mean_or_none, mean_resampler
from spear_metrics.core.pitch import F0_STATS, answer_pitch


def normalized_f0_std_avg(
    questioners: Sequence[str],
    stats: Sequence[dict[str, float | None]],
    tables: Sequence[str | None] | None = None,
) -> float | None:
    """SPEAR's ``explainable_normalized_f0_std_avg`` from per-answer F0 statistics.

    Within each split/subset table, each answer's seven F0 statistics (:data:`F0_STATS`, Hz) are
    divided by the mean ``f0_mean_hz`` of the answers to the same questioner (missing values
    skipped; a zero mean gives no value). Then, tables pooled, each feature's values are taken
    where they exist; the feature's across-sample std (ddof 1) counts when there are >= 2
    values, 0.0 when there is exactly one (upstream quirk), and the feature is skipped when there
    is none. The key is the mean of those stds.

    Sources: ``normalize_features_by_answered_speaker.py`` (pandas groupby-mean) and
    ``bin/reports/benchmark_line.py`` ``normalized_f0_std_average``.

    Args:
        questioners: the answered speaker of each sample (last speaker tag of its question).
        stats: per sample, the keys of :data:`F0_STATS` plus ``f0_mean_hz`` (Hz or ``None``).
        tables: per sample, its split/subset table (``None`` = one table for the whole run).

    Returns:
        The mean std (a ratio), or ``None`` when no feature has a value.
    """
    tables = list(tables) if tables is not None else [None] * len(stats)
    sums: dict[tuple, list[float]] = defaultdict(list)
    for t, q, s in zip(tables, questioners, stats):
        if s.get("f0_mean_hz") is not None:
            sums[(t, q)].append(float(s["f0_mean_hz"]))
    denom = {k: float(np.mean(v)) for k, v in sums.items() if np.mean(v) != 0}
    stds = []
    for key in F0_STATS:
        col = [float(s[key]) / denom[(t, q)] for t, q, s in zip(tables, questioners, stats)
               if s.get(key) is not None and (t, q) in denom]
        if len(col) > 1:
            stds.append(float(np.std(col, ddof=1)))
        elif len(col) == 1:
            stds.append(0.0)
    return float(np.mean(stds)) if stds else None


def normalized_f0_std_avg_resampler(
    questioners: Sequence[str],
    stats: Sequence[dict[str, float | None]],
    tables: Sequence[str | None] | None = None,
) -> Callable[[np.ndarray], float | None]:
    """:func:`normalized_f0_std_avg` of a bootstrap resample, the per-row inputs read once.

    Each row's (table, questioner) group becomes an int code, its ``f0_mean_hz`` and its seven
    F0 statistics float arrays with masks for ``None``. ``f(idx)`` (``idx``: int row positions,
    with repeats) then equals ``normalized_f0_std_avg([questioners[i] for i in idx],
    [stats[i] for i in idx], [tables[i] for i in idx])`` bit for bit:

    - group means: the resample's ``f0_mean_hz`` values, stably sorted by group, keep the
      resample order within each group (the list the slow path builds); groups of the same size
      ``m`` are gathered into one C-contiguous ``(groups, m)`` array whose row means
      (``mean(axis=1)``: each row reduced by numpy's contiguous pairwise sum, then divided by
      ``m``) equal ``np.mean`` of each group's list (checked on the installed numpy by
      ``tests/test_resampled_aggregates.py``); a mean of 0 gives no normaliser, as there;
    - per feature, the values divided by their group's mean are taken in resample order (the
      same IEEE divisions) and go through the same ``np.std(ddof=1)``, the stds through the same
      ``np.mean``.
    """
    tables = list(tables) if tables is not None else [None] * len(stats)
    codes: dict[tuple, int] = {}
    group = np.array([codes.setdefault((t, q), len(codes)) for t, q in zip(tables, questioners)], dtype=np.intp)
    n_groups = len(codes)

    def column(key: str) -> tuple[np.ndarray, np.ndarray]:
        xs = [s.get(key) for s in stats]
        return (np.array([x is not None for x in xs], dtype=bool),
                np.array([0.0 if x is None else float(x) for x in xs], dtype=np.float64))

    has_mean, f0_mean = column("f0_mean_hz")
    feats = [column(key) for key in F0_STATS]

    def group_means(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mean ``f0_mean_hz`` per group code, whether it is a normaliser) over the resample."""
        denom = np.zeros(n_groups, dtype=np.float64)
        usable = np.zeros(n_groups, dtype=bool)
        sel = idx[has_mean[idx]]
        if sel.size:
            order = np.argsort(group[sel], kind="stable")
            g, x = group[sel][order], f0_mean[sel][order]
            first, starts, sizes = np.unique(g, return_index=True, return_counts=True)
            for m in np.unique(sizes):
                pick = sizes == m
                denom[first[pick]] = x[starts[pick][:, None] + np.arange(m)].mean(axis=1)
            usable[first] = denom[first] != 0
        return denom, usable

    def statistic(idx: np.ndarray) -> float | None:
        denom, usable = group_means(idx)
        g = group[idx]
        ok, d = usable[g], denom[g]
        stds = []
        for has, x in feats:
            keep = ok & has[idx]
            col = x[idx][keep] / d[keep]
            if col.size > 1:
                stds.append(float(np.std(col, ddof=1)))
            elif col.size == 1:
                stds.append(0.0)
        return float(np.mean(stds)) if stds else None

    return statistic


class ExplainableFeatures(Dimension):
    """Duration, voicing and pitch-variability of the answers (Praat autocorrelation pitch)."""

    name = "explainable_features"
    version = "2.0.1"
    # 2.0.0 results read as 2.0.1's (same columns and values); 2.0.1 decodes the answer first, so a NaN/inf
    # answer fails its row instead of being scored
    compatible_versions = ("2.0.0",)
    keys = (
        MetricKey("explainable_duration_s", "s", "closer_to_human",
                  "duration of the answer audio file as Praat reads it (not of its speech); mean",
                  group="Explainable features", published=True, order=20),
        MetricKey("explainable_voiced_ratio", "ratio", "closer_to_human",
                  "share of voiced frames of Praat's autocorrelation pitch (75–500 Hz, 10 ms step) of the answer file; mean",
                  group="Explainable features", published=True, order=21),
        MetricKey("explainable_normalized_f0_std_avg", "ratio", "closer_to_human",
                  "F0 min, p10, p25, median, p75, p90, max of each answer divided by the mean F0 of the answers to the "
                  "same questioner (last speaker tag of `transcript_question`) **within the same split/subset table** (the "
                  "`improvised`/`naturalistic` folder of `audio_path`; one table when the path names none); subsets "
                  "pooled, then the mean over the 7 features of their across-sample std (ddof 1; a feature with a single "
                  "value counts 0.0, as upstream)",
                  group="Explainable features", published=True, order=22),
    )

    def score_sample(self, sample: Sample) -> dict[str, Any]:
        # THE loader's checks (header, decodable, no NaN/inf samples) before Praat sees the file; the
        # decoded answer is the one the other dimensions of the run share
        # (answer_pitch: decoded once, analysed once for every dimension of the run)
        track, duration = answer_pitch(sample)
        if not len(track.f0_hz):
            # Praat refuses a sound shorter than its window: upstream's row holds no value at all
            return {"explainable_duration_s": None, "explainable_voiced_ratio": None, **track.stats(),
                    "explainable_note": f"answer too short for Praat pitch analysis ({duration:.3f} s)"}
        return {"explainable_duration_s": duration, "explainable_voiced_ratio": track.voiced_ratio, **track.stats()}

    def aggregate_counts(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[str, int]:
        """``explainable_normalized_f0_std_avg``: the answers with voiced frames (a mean F0, so
        their questioner's group has a normaliser, and at least one F0 statistic) that entered
        the per-feature spreads; the two means: rows with a value."""
        out = super().aggregate_counts(rows, values, keys)
        out["explainable_normalized_f0_std_avg"] = sum(
            1 for v in values if v.get("f0_mean_hz") is not None and any(v.get(k) is not None for k in F0_STATS))
        return out

    def aggregate(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return {
            "explainable_duration_s": mean_or_none([v.get("explainable_duration_s") for v in values]),
            "explainable_voiced_ratio": mean_or_none([v.get("explainable_voiced_ratio") for v in values]),
            "explainable_normalized_f0_std_avg": normalized_f0_std_avg(
                [r.questioner for r in rows], values, [subset_of(r.audio_path) for r in rows]),
        }

    def resampled_aggregate(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]]):
        """:meth:`aggregate` of one bootstrap resample ``idx`` (row positions, with repeats),
        bit-identical to it: the two means by :func:`mean_resampler`, the F0 spread by
        :func:`normalized_f0_std_avg_resampler`; each row's table (``subset_of(audio_path)``) and
        questioner are read once here, not on every resample."""
        return keyed_resampler({
            "explainable_duration_s": mean_resampler([v.get("explainable_duration_s") for v in values]),
            "explainable_voiced_ratio": mean_resampler([v.get("explainable_voiced_ratio") for v in values]),
            "explainable_normalized_f0_std_avg": normalized_f0_std_avg_resampler(
                [r.questioner for r in rows], values, [subset_of(r.audio_path) for r in rows]),
        })

    def models(self) -> dict[str, str]:
        from importlib.metadata import version

        return {"pitch": f"praat-parselmouth {version('praat-parselmouth')} to_pitch_ac(pitch_floor=75, pitch_ceiling=500)"}
