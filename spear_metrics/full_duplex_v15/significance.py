"""Full-Duplex-Bench v1.5 significance tests: paired t-tests of the reply's features.

Source: ``v1_v1.5/evaluation/significance_test.py`` of ``DanielLin94144/Full-Duplex-Bench`` with
its defaults (``--outlier_rule mad --outlier_on diff``, k = 3.5, alpha 0.05) and the metric list
of its README (``utmosv2 wpm mean_pitch std_pitch mean_intensity std_intensity``); the code here
is ours (scipy for the t-test; Holm written out, as ``statsmodels``' ``multipletests(method="holm")``).

- Samples: those whose behaviour tags hold ``C_RESPOND``; then those whose every ``*wpm`` column
  (``pre_wpm``, ``post_wpm``, ``clean_wpm``) is not 0 (a missing value, NaN, passes: ``NaN != 0``).
- Pairs per metric: ``pre`` vs ``post`` and ``clean`` vs ``post`` (before, after).
- Sentinels to NaN (``mask_invalid``): 0 for ``wpm``, ``speech_dur_s``, ``mean_pitch``,
  ``std_pitch``, ``std_intensity``; <= -190 for ``mean_intensity``.
- :func:`paired_compare`: pairs with a NaN dropped (fewer than 2: the test is skipped); MAD
  trimming on the differences ``after - before``: kept when within median +- 3.5 x 1.4826 x MAD
  (MAD 0: all kept); fewer than 2 kept: skipped. Then ``scipy.stats.ttest_rel(after, before)``,
  mean difference with its t interval (alpha 0.05), ``d_z`` = mean difference / its sd (ddof 1).
- Holm's step-down adjustment over every test that ran (``p_adj``; a NaN p-value counts in
  ``m``, as in statsmodels).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

#: upstream README's metric list (significance_test.py --metrics)
UPSTREAM_METRICS = ("utmosv2", "wpm", "mean_pitch", "std_pitch", "mean_intensity", "std_intensity")
PAIRS = (("pre", "post"), ("clean", "post"))
REQUIRED_TAG = "C_RESPOND"
MAD_K = 3.5
MAD_SCALE = 1.4826
ALPHA = 0.05


def mask_invalid(values: Sequence[float], metric: str) -> np.ndarray:
    """Upstream's ``mask_invalid``: placeholder values -> NaN (module docstring)."""
    s = np.asarray(values, dtype=float).copy()
    if metric in {"wpm", "speech_dur_s", "mean_pitch", "std_pitch", "std_intensity"}:
        s[s == 0.0] = np.nan
    if metric == "mean_intensity":
        s[s <= -190.0] = np.nan
    return s


class SkippedTest(ValueError):
    """A test that cannot run (too few pairs); the message is upstream's."""


def paired_compare(before: Sequence[float], after: Sequence[float], *, alpha: float = ALPHA,
                   outlier_k: float = MAD_K) -> dict[str, Any]:
    """Upstream's ``paired_compare`` (MAD on the differences; module docstring).

    Returns:
        ``n_raw``, ``n_valid``, ``n_used``, ``n_dropped``, ``mean_before``, ``mean_after``,
        ``mean_diff`` (after - before), ``ci95_low``, ``ci95_high``, ``t``, ``df``, ``p_t``, ``cohen_dz``
        (upstream's keys and values); ``note``: the project's :func:`zero_variance_note` when the
        differences have sd 0 (``None`` otherwise).

    Raises:
        SkippedTest: fewer than 2 valid pairs, or fewer than 2 left after trimming.
    """
    from scipy import stats

    b, a = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    if b.shape != a.shape:
        raise ValueError("before and after must have the same length.")
    mask = ~np.isnan(b) & ~np.isnan(a)
    b0, a0 = b[mask], a[mask]
    if b0.size < 2:
        raise SkippedTest("Fewer than 2 valid pairs; cannot analyze.")
    d0 = a0 - b0
    med = np.median(d0)
    scale = MAD_SCALE * np.median(np.abs(d0 - med))
    keep = np.ones(b0.size, dtype=bool) if scale == 0 else (d0 >= med - outlier_k * scale) & (d0 <= med + outlier_k * scale)
    b1, a1 = b0[keep], a0[keep]
    n = b1.size
    if n < 2:
        raise SkippedTest("All data flagged as outliers; relax trimming.")
    d = a1 - b1
    mean_d, sd_d = d.mean(), d.std(ddof=1)
    se = sd_d / np.sqrt(n)
    t, p = stats.ttest_rel(a1, b1)
    tcrit = stats.t.ppf(1 - alpha / 2, df=n - 1)
    return {"n_raw": int(b.size), "n_valid": int(b0.size), "n_used": int(n), "n_dropped": int(b0.size - n),
            "mean_before": float(b1.mean()), "mean_after": float(a1.mean()), "mean_diff": float(mean_d),
            "ci95_low": float(mean_d - tcrit * se), "ci95_high": float(mean_d + tcrit * se), "t": float(t),
            "df": int(n - 1), "p_t": float(p), "cohen_dz": float(mean_d / sd_d) if sd_d > 0 else None,
            "note": zero_variance_note(n, float(mean_d)) if not sd_d > 0 else None}


def zero_variance_note(n_used: int, mean_diff: float) -> str:
    """The project's note on a test whose ``n_used`` differences are all equal (sd 0). Upstream's
    numbers stand as its code gives them (scipy's ``ttest_rel``: ``t`` = +-inf and ``p`` = 0 for
    equal non-zero differences, NaN for all-zero ones; ``d_z`` NaN); the note says what they mean."""
    if mean_diff == 0:
        return f"project note: the {n_used} differences are all 0: no change and nothing to test (t and p undefined)"
    return (f"project note: the {n_used} differences are all equal (sd 0): t is infinite and p = 0 by arithmetic, "
            f"not evidence; the 'statistically reliable' wording is upstream's rule (p < .05) applied to it")


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (same order as given), as upstream's
    ``statsmodels.stats.multitest.multipletests(pvals, method="holm")`` computes them: a NaN
    p-value (a test whose differences are all 0, so ``ttest_rel`` gives NaN) stays NaN but counts
    in ``m`` (statsmodels sorts it last and multiplies by ``len(pvals)``); the arithmetic is
    :func:`spear_metrics.core.stats.holm`, the project's one implementation, with NaN stood in
    for by ``+inf`` (sorted last, so every other rank and ``m`` are statsmodels').
    """
    from spear_metrics.core.stats import holm as holm_adjusted

    ps = [float(p) for p in pvalues]
    adj = holm_adjusted([math.inf if math.isnan(p) else p for p in ps])
    return [math.nan if math.isnan(p) else float(a) for p, a in zip(ps, adj)]


def _num(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f


def table(samples: Sequence[dict[str, Any]], metrics: Sequence[str]) -> tuple[list[str], dict[str, np.ndarray]]:
    """The ``C_RESPOND`` samples with no ``*wpm`` of 0, as columns ``<side>_<metric>`` (NaN where
    missing). ``samples``: ``{"id", "behaviour": [tags] or None, "general": split_features result}``."""
    rows = [s for s in samples if REQUIRED_TAG in (s.get("behaviour") or []) and isinstance(s.get("general"), dict)]
    wanted = set(metrics) | {"wpm"}
    cols: dict[str, list[float]] = {f"{side}_{m}": [] for m in wanted for side in ("pre", "post", "clean")}
    ids = []
    for s in rows:
        g = s["general"]
        vals = {f"{side}_{m}": _num((g.get(side) or {}).get(m)) for m in wanted for side in ("pre", "post", "clean")}
        if any(vals[f"{side}_wpm"] == 0 for side in ("pre", "post", "clean")):
            continue
        ids.append(str(s.get("id")))
        for k, v in vals.items():
            cols[k].append(v)
    return ids, {k: np.asarray(v, dtype=float) for k, v in cols.items()}


def run_tests(samples: Sequence[dict[str, Any]], metrics: Sequence[str] = UPSTREAM_METRICS) -> dict[str, Any]:
    """Upstream's ``run_batch_tests`` on the samples of one subset: ``{"n_samples", "samples",
    "tests": [...], "skipped": [{"pair", "metric", "reason"}]}``; each test is :func:`paired_compare`'s
    dict with ``pair`` (``"pre_vs_post"``...), ``metric`` and ``p_adj`` (Holm over the tests run)."""
    ids, cols = table(samples, metrics)
    tests, skipped = [], []
    for m in metrics:
        for p1, p2 in PAIRS:
            try:
                res = paired_compare(mask_invalid(cols[f"{p1}_{m}"], m), mask_invalid(cols[f"{p2}_{m}"], m))
            except SkippedTest as e:
                skipped.append({"pair": f"{p1}_vs_{p2}", "metric": m, "reason": str(e)})
                continue
            tests.append({"pair": f"{p1}_vs_{p2}", "metric": m, **res})
    for t, p in zip(tests, holm([t["p_t"] for t in tests])):
        t["p_adj"] = p
    return {"n_samples": len(ids), "samples": ids, "tests": tests, "skipped": skipped}


def conclusion(t: dict[str, Any]) -> str:
    """Upstream's ``format_conclusion`` line for one test."""
    d = t["mean_diff"]
    direction = "increased" if d > 0 else "decreased" if d < 0 else "did not change"
    sig = "a statistically reliable" if t["p_t"] < 0.05 else "no statistically reliable"
    p = t["p_t"]
    ps = "--" if p is None or np.isnan(p) else ("<.001" if p < 0.001 else f"{p:.3f}")
    dz = t["cohen_dz"]
    line = (f"{t['pair']}:{t['metric']}: {sig} change was observed; After {direction} relative to Before "
            f"(M_before={t['mean_before']:.2f}, M_after={t['mean_after']:.2f}, Δ={d:.2f}, 95% CI "
            f"[{t['ci95_low']:.2f}, {t['ci95_high']:.2f}]; paired t({t['df']})={t['t']:.2f}, p={ps}, "
            f"d_z={float('nan') if dz is None else dz:.2f}).")
    if t["n_dropped"] > 0:
        line += f" Outlier trimming (mad) removed {t['n_dropped']}/{t['n_used'] + t['n_dropped']} pairs."
    return line
