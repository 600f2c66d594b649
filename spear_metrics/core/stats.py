"""Bootstrap confidence intervals and paired comparisons of per-sample scores.

Percentile bootstrap over samples (Efron & Tibshirani 1993, ch. 13), resampling with a
``numpy.random.default_rng(seed)`` generator so a given seed gives the same interval on any
machine with the same numpy. Inputs are per-sample values; ``None`` entries are dropped first
(a value that does not exist is not a zero). An interval needs at least 2 values: with fewer
it does not exist and is ``None``.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

#: resamples used when a caller does not say
DEFAULT_RESAMPLES = 1000


def _clean(values: Sequence[Any]) -> np.ndarray:
    return np.asarray([float(v) for v in values if v is not None], dtype=np.float64)


def bootstrap_ci(
    values: Sequence[Any],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
    statistic: Callable[[np.ndarray], np.ndarray] | None = None,
) -> list[float] | None:
    """Percentile bootstrap interval of a statistic (default: the mean) of ``values``.

    Args:
        values: per-sample values (``None`` dropped), in the unit of the metric.
        n_resamples: bootstrap resamples (>= 1).
        seed: seed of ``numpy.random.default_rng``; same seed, same interval.
        confidence: coverage, e.g. 0.95 -> the 2.5th and 97.5th percentiles.
        statistic: maps a ``(n_resamples, n)`` array to ``(n_resamples,)`` (default mean over axis 1).

    Returns:
        ``[lo, hi]`` in the metric's unit, or ``None`` with fewer than 2 values or
        ``n_resamples`` < 1 (no interval exists).
    """
    x = _clean(values)
    if x.size < 2 or n_resamples < 1:
        return None
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(int(n_resamples), x.size))
    samples = x[idx]
    stats = statistic(samples) if statistic is not None else samples.mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(stats, [alpha, 1.0 - alpha])
    return [float(lo), float(hi)]


def paired_bootstrap(
    a: Sequence[Any],
    b: Sequence[Any],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """Paired bootstrap of the mean difference ``a - b`` over the same samples.

    ``a[i]`` and ``b[i]`` must be the same sample scored by two systems; pairs where either is
    ``None`` are dropped. Samples (pairs) are resampled together, which keeps the per-sample
    correlation between the systems.

    Returns:
        ``{"n_pairs", "mean_a", "mean_b", "diff" (mean of a - b), "diff_ci95" ([lo, hi] or None),
        "p_value"}`` where ``p_value`` is the two-sided bootstrap p-value of "the mean difference
        is 0": ``min(1, 2 * min(P*(d <= 0), P*(d >= 0)))`` over the resampled mean differences
        (``None`` with fewer than 2 pairs). ``diff_ci95`` is at ``confidence`` (0.95 by default).

    Raises:
        ValueError: ``a`` and ``b`` have different lengths.
    """
    if len(a) != len(b):
        raise ValueError(f"paired_bootstrap needs equal lengths, got {len(a)} and {len(b)}")
    pairs = [(float(x), float(y)) for x, y in zip(a, b) if x is not None and y is not None]
    out: dict[str, Any] = {"n_pairs": len(pairs), "mean_a": None, "mean_b": None, "diff": None,
                           "diff_ci95": None, "p_value": None}
    if not pairs:
        return out
    arr = np.asarray(pairs, dtype=np.float64)
    d = arr[:, 0] - arr[:, 1]
    out.update(mean_a=float(arr[:, 0].mean()), mean_b=float(arr[:, 1].mean()), diff=float(d.mean()))
    if d.size < 2 or n_resamples < 1:
        return out
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, d.size, size=(int(n_resamples), d.size))
    means = d[idx].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    out["diff_ci95"] = [float(lo), float(hi)]
    out["p_value"] = float(min(1.0, 2.0 * min(np.mean(means <= 0.0), np.mean(means >= 0.0))))
    return out
