"""Bootstrap intervals, paired comparisons and the unpaired tests of SPEAR's reports.

Everything here works on per-sample values (``None`` = the value does not exist; it is dropped,
never read as 0; booleans count as 0/1, so a mean of flags is a share).

- :func:`bootstrap_ci`: percentile interval of the mean of a list of values
  (``scipy.stats.bootstrap(method="percentile")``).
- :func:`aggregate_intervals`: percentile interval of *any* aggregate, recomputed on resampled
  units (row indices): whole-set statistics (correlations, normalised spreads, slopes) are
  recomputed on each resample from the fixed per-row inputs.
- :func:`paired_comparison`: two systems on the same samples: mean difference with a paired
  bootstrap interval and p-value, Wilcoxon signed-rank p-value, effect size d_z.
- :func:`unpaired_tests`: two independent samples (a model's answers against the human answers,
  as SPEAR's ``bin/reports/generate_short_report.py`` tests them): Welch's t-test (its default),
  Mann-Whitney U, and Cliff's delta.
- :func:`compare_runs`: two runs' per-sample rows matched by an id, every shared numeric key
  through the two functions above; ``spearbench compare`` (SPEAR) and ``spearbench fdb
  --compare`` (Full-Duplex-Bench) both call it.

Conventions (tested): identical samples give difference 0, interval ``[0, 0]`` and p-values 1;
fewer than 2 values (pairs) give ``None`` for the interval and the tests, with a ``note``;
below :data:`SMALL_SAMPLE` pairs there is no bootstrap p-value and the rest carries a
``caution`` naming the smallest p-value the exact rank tests can give on that many values.
Resampling uses ``numpy.random.default_rng(seed)``: one seed, one interval, on any machine with
the same numpy/scipy. Percentile bootstrap: Efron & Tibshirani (1993), ch. 13.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Iterable, Sequence

import numpy as np

#: resamples used when a caller does not say
DEFAULT_RESAMPLES = 1000
#: coverage of every interval written by the project (``*_ci95``)
CONFIDENCE = 0.95
#: an aggregate interval exists only when the statistic is defined on at least this share of
#: the resamples (a correlation is undefined on a resample whose side is constant)
MIN_DEFINED_SHARE = 0.5
#: Below this many pairs (paired tests) or values on a side (unpaired tests) a sample is *small*:
#: the bootstrap p-value is not given at all and every other p-value and interval carries a
#: caution (:func:`small_sample_caution`). Why 10: the percentile bootstrap treats the n pairs as
#: the population, so when all n differences have one sign every resampled mean has that sign
#: and its p-value is its floor 2/(B+1) whatever n is, while an exact test of the same data
#: (sign-flip / Wilcoxon) cannot go below 2^(1-n): 0.5 at n = 2, 0.0625 at n = 5. From n = 10
#: on, 2^(1-n) = 0.00195 is below the bootstrap's own floor with the default 1000 resamples
#: (2/1001 = 0.002), so the bootstrap no longer claims more than the data can show. With n
#: pairs the bootstrap distribution of a mean also takes at most C(2n-1, n) distinct values
#: (3 at n = 2, 126 at n = 5, 92,378 at n = 10).
SMALL_SAMPLE = 10
#: the significance level the cautions refer to ("cannot reach p < 0.05")
ALPHA = 0.05


def as_number(v: Any) -> float | None:
    """A per-sample value as a float: ``None``/NaN/inf/non-numbers -> ``None``; ``True``/``False`` -> 1.0/0.0."""
    if v is None or isinstance(v, (str, bytes, list, tuple, dict)):
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def wilcoxon_floor(n: int) -> float | None:
    """Smallest two-sided p-value the exact Wilcoxon signed-rank test (and the sign test) can
    give on ``n`` non-zero differences: ``2 / 2**n = 2**(1 - n)`` (every difference of one sign,
    probability ``1 / 2**n`` under the null, doubled). ``None`` for ``n`` < 1.

    >>> wilcoxon_floor(2), wilcoxon_floor(5)
    (0.5, 0.0625)
    """
    return None if n < 1 else float(2.0 ** (1 - n))


def mannwhitney_floor(n_a: int, n_b: int) -> float | None:
    """Smallest two-sided p-value the exact Mann-Whitney U test can give on samples of ``n_a``
    and ``n_b`` values: ``2 / C(n_a + n_b, n_a)`` (the two samples fully separated, one of the
    ``C(n_a + n_b, n_a)`` equally likely orderings under the null, doubled), capped at 1.
    ``None`` when a side is empty.

    >>> mannwhitney_floor(2, 2)  # 2 / 6
    0.3333333333333333
    """
    if n_a < 1 or n_b < 1:
        return None
    return float(min(1.0, 2.0 / math.comb(n_a + n_b, n_a)))


def bootstrap_p_floor(n_resamples: int) -> float | None:
    """Smallest two-sided bootstrap p-value :func:`paired_comparison` gives with ``n_resamples``
    resamples: ``2 / (B + 1)`` (no resample on the other side of 0; Davison & Hinkley 1997,
    eq. 4.11, counts the observed sample as one of ``B + 1``). ``None`` for ``B`` < 1."""
    return None if n_resamples < 1 else float(min(1.0, 2.0 / (n_resamples + 1)))


def distinct_resamples(n: int) -> int:
    """How many different resamples (multisets) of ``n`` units exist: ``C(2n - 1, n)``; the
    bootstrap distribution of a mean of ``n`` values takes at most that many values."""
    return math.comb(2 * n - 1, n) if n >= 1 else 0


def small_sample_caution(n: int, *, paired: bool = True, n_b: int | None = None) -> str | None:
    """Why p-values and intervals on ``n`` pairs (or ``n`` and ``n_b`` unpaired values) deserve
    caution, with the hand-checkable bounds; ``None`` from :data:`SMALL_SAMPLE` on (and for
    ``n`` < 2, where no test exists and the caller says so).

    Paired: ``"n = 2 pairs: too few for a bootstrap p-value ..."`` (no bootstrap p below
    :data:`SMALL_SAMPLE`; the exact Wilcoxon floor :func:`wilcoxon_floor`; the resamples behind
    the interval, :func:`distinct_resamples`). Unpaired: the Mann-Whitney floor
    :func:`mannwhitney_floor` and Welch's reliance on normal means.
    """
    if paired:
        if n < 2 or n >= SMALL_SAMPLE:
            return None
        floor = wilcoxon_floor(n)
        reach = f", so no difference can reach p < {ALPHA:g}" if floor > ALPHA else ""
        return (f"n = {n} pairs: too few for a bootstrap p-value (it needs at least {SMALL_SAMPLE} pairs; "
                f"the exact Wilcoxon p cannot go below 2^(1-n) = {floor:.3g}{reach}); "
                f"the 95 % interval rests on {distinct_resamples(n)} distinct resamples")
    n_b = n if n_b is None else n_b
    if min(n, n_b) < 2 or min(n, n_b) >= SMALL_SAMPLE:
        return None
    floor = mannwhitney_floor(n, n_b)
    reach = ", so no difference can reach p < 0.05" if floor > ALPHA else ""
    return (f"n = {n} and {n_b}: small samples (fewer than {SMALL_SAMPLE} values on a side): the exact "
            f"Mann-Whitney p cannot go below 2/C({n + n_b},{n}) = {floor:.3g}{reach}; Welch's t-test assumes "
            f"normally distributed means it cannot check")


def _numbers(values: Iterable[Any]) -> np.ndarray:
    return np.asarray([x for x in (as_number(v) for v in values) if x is not None], dtype=np.float64)


def percentile_interval(distribution: np.ndarray, confidence: float = CONFIDENCE) -> list[float] | None:
    """``[lo, hi]`` percentiles (linear interpolation, as ``scipy.stats.bootstrap``'s percentile
    method) of the finite entries of a bootstrap distribution; ``None`` when fewer than
    :data:`MIN_DEFINED_SHARE` of the entries are finite (the statistic mostly does not exist)."""
    d = np.asarray(distribution, dtype=np.float64).ravel()
    ok = np.isfinite(d)
    if d.size == 0 or ok.mean() < MIN_DEFINED_SHARE:
        return None
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.percentile(d[ok], [100.0 * alpha, 100.0 * (1.0 - alpha)])
    return [float(lo), float(hi)]


def _bootstrap(data: tuple, statistic: Callable, *, vectorized: bool, n_resamples: int, seed: int, confidence: float):
    """``scipy.stats.bootstrap(method="percentile")`` with the project's seed convention and its
    warnings about degenerate (constant) distributions silenced (they are expected: identical
    samples give the interval [0, 0] on purpose)."""
    from scipy.stats import bootstrap

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bootstrap(data, statistic, vectorized=vectorized, method="percentile", n_resamples=int(n_resamples),
                         confidence_level=confidence, rng=np.random.default_rng(seed))


def bootstrap_ci(
    values: Sequence[Any],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> list[float] | None:
    """Percentile bootstrap interval of the mean of ``values`` (``scipy.stats.bootstrap``).

    Args:
        values: per-sample values in the metric's unit (``None`` dropped, booleans as 0/1).
        n_resamples: bootstrap resamples (>= 1).
        seed: seed of ``numpy.random.default_rng``; same seed, same interval.
        confidence: coverage, e.g. 0.95 -> the 2.5th and 97.5th percentiles.

    Returns:
        ``[lo, hi]`` in the metric's unit, or ``None`` with fewer than 2 values or
        ``n_resamples`` < 1 (no interval exists).
    """
    x = _numbers(values)
    if x.size < 2 or n_resamples < 1:
        return None
    res = _bootstrap((x,), np.mean, vectorized=True, n_resamples=n_resamples, seed=seed, confidence=confidence)
    return percentile_interval(res.bootstrap_distribution, confidence)


def aggregate_intervals(
    aggregate: Callable[[np.ndarray], dict[str, Any]],
    n_units: int,
    keys: Sequence[str],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> dict[str, list[float] | None]:
    """Percentile bootstrap intervals of several aggregates recomputed on resampled units.

    The units ``0 .. n_units-1`` (e.g. the scored rows) are resampled with replacement
    (``scipy.stats.bootstrap`` over the index array, ``vectorized=False``) and ``aggregate``
    is called on each resample's indices; every value it returns for ``keys`` enters that key's
    bootstrap distribution. A statistic of the whole set (a correlation, a normalised standard
    deviation, a regression slope) is thereby recomputed on each resample from the fixed
    per-unit inputs. Resamples on which a key has no value (``None``: e.g. a correlation of a
    constant side) are left out of that key's percentiles; see :func:`percentile_interval`.

    Args:
        aggregate: maps an int array of unit indices ``(n_units,)`` (with repeats) to
            ``{key: value or None}``.
        n_units: how many units there are.
        keys: the keys to give intervals for.

    Returns:
        ``{key: [lo, hi] or None}``; all ``None`` with fewer than 2 units or ``n_resamples`` < 1.
    """
    keys = list(keys)
    if n_units < 2 or n_resamples < 1 or not keys:
        return {k: None for k in keys}

    def statistic(idx: np.ndarray) -> np.ndarray:
        out = aggregate(np.asarray(idx, dtype=np.intp))
        return np.asarray([np.nan if (x := as_number(out.get(k))) is None else x for k in keys], dtype=np.float64)

    res = _bootstrap((np.arange(n_units),), statistic, vectorized=False, n_resamples=n_resamples, seed=seed,
                     confidence=confidence)
    dist = np.asarray(res.bootstrap_distribution, dtype=np.float64).reshape(len(keys), -1)
    return {k: percentile_interval(dist[i], confidence) for i, k in enumerate(keys)}


# ---------------------------------------------------------------------------------------------
# two systems


def paired_comparison(
    a: Sequence[Any],
    b: Sequence[Any],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> dict[str, Any]:
    """Two systems on the same samples: ``a[i]`` and ``b[i]`` are sample ``i`` scored by each.

    Pairs where either value is missing are dropped. With ``d = a - b`` over the ``n`` pairs:

    - ``mean_a``, ``mean_b``, ``diff`` = mean of ``d`` (= ``mean_a - mean_b``);
    - ``diff_ci95``: percentile paired bootstrap of the mean of ``d`` (pairs resampled together,
      which keeps the per-sample correlation between the systems; ``scipy.stats.bootstrap``);
    - ``p_value``: two-sided bootstrap p-value of "the mean difference is 0" over the ``B``
      resampled means, counting the observed sample as one more (Davison & Hinkley 1997,
      eq. 4.11): ``min(1, 2 * (1 + min(#(mean d* <= 0), #(mean d* >= 0))) / (B + 1))``, so it
      never reads 0 (its floor ``p_value_floor`` = 2/(B+1)); ``None`` below
      :data:`SMALL_SAMPLE` pairs (see there why);
    - ``wilcoxon_p``: Wilcoxon signed-rank test (``scipy.stats.wilcoxon``, two-sided, zero
      differences dropped as SPEAR's reports do with ``zero_method="wilcox"``), and
      ``wilcoxon_floor``, the smallest p it can give on these pairs (:func:`wilcoxon_floor`);
    - ``d_z``: paired effect size, mean of ``d`` / standard deviation of ``d`` (ddof 1);
    - ``caution``: below :data:`SMALL_SAMPLE` pairs, why the numbers above say little
      (:func:`small_sample_caution`), else ``None``.

    Conventions: every difference 0 -> ``diff`` 0, ``diff_ci95`` ``[0, 0]``, both p-values 1,
    ``d_z`` 0. A constant non-zero difference has no d_z (``None``, SD 0). ``n`` < 2 -> interval,
    p-values and d_z ``None``; ``note`` says why.

    Returns:
        ``{"n", "mean_a", "mean_b", "diff", "diff_ci95", "p_value", "p_value_floor", "wilcoxon_p",
        "wilcoxon_floor", "d_z", "note", "caution"}``.

    Raises:
        ValueError: ``a`` and ``b`` have different lengths.
    """
    if len(a) != len(b):
        raise ValueError(f"paired_comparison needs equal lengths, got {len(a)} and {len(b)}")
    pairs = [(x, y) for x, y in ((as_number(u), as_number(v)) for u, v in zip(a, b)) if x is not None and y is not None]
    out: dict[str, Any] = {"n": len(pairs), "mean_a": None, "mean_b": None, "diff": None, "diff_ci95": None,
                           "p_value": None, "p_value_floor": None, "wilcoxon_p": None, "wilcoxon_floor": None,
                           "d_z": None, "note": None, "caution": None}
    if not pairs:
        out["note"] = "n = 0: no sample has a value in both runs"
        return out
    arr = np.asarray(pairs, dtype=np.float64)
    d = arr[:, 0] - arr[:, 1]
    out.update(mean_a=float(arr[:, 0].mean()), mean_b=float(arr[:, 1].mean()), diff=float(d.mean()))
    if d.size < 2:
        out["note"] = "n = 1: an interval and tests need at least 2 pairs"
        return out
    if not np.any(d):
        out.update(diff=0.0, diff_ci95=[0.0, 0.0] if n_resamples >= 1 else None, p_value=1.0, wilcoxon_p=1.0, d_z=0.0,
                   note="identical values in every pair")
        return out
    out["caution"] = small_sample_caution(int(d.size))
    if n_resamples >= 1:
        res = _bootstrap((d,), np.mean, vectorized=True, n_resamples=n_resamples, seed=seed, confidence=confidence)
        means = np.asarray(res.bootstrap_distribution, dtype=np.float64)
        out["diff_ci95"] = percentile_interval(means, confidence)
        if d.size >= SMALL_SAMPLE:
            beyond = min(int(np.sum(means <= 0.0)), int(np.sum(means >= 0.0)))
            out["p_value"] = float(min(1.0, 2.0 * (1 + beyond) / (means.size + 1)))
            out["p_value_floor"] = bootstrap_p_floor(int(means.size))
    out["wilcoxon_p"] = _wilcoxon_p(d)
    out["wilcoxon_floor"] = wilcoxon_floor(int(np.count_nonzero(d)))
    sd = float(d.std(ddof=1))
    if np.ptp(d) > 1e-9 * max(1.0, float(np.abs(d).max())):  # not a constant difference (up to rounding)
        out["d_z"] = float(d.mean() / sd)
    else:
        out["note"] = "constant non-zero difference: d_z does not exist (SD of the differences is 0)"
    return out


def _wilcoxon_p(d: np.ndarray) -> float | None:
    from scipy.stats import wilcoxon

    nz = d[d != 0]
    if nz.size == 0:
        return 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            p = float(wilcoxon(nz, alternative="two-sided", zero_method="wilcox").pvalue)
        except ValueError:
            return None
    return p if math.isfinite(p) else None


def cliffs_delta(a: Sequence[Any], b: Sequence[Any]) -> float | None:
    """Cliff's delta ``P(a > b) - P(a < b)`` over all pairs of one value of ``a`` and one of ``b``
    (Cliff 1993), in [-1, 1]; 0 for identical samples. ``None`` when a side has no value."""
    x, y = _numbers(a), np.sort(_numbers(b))
    if x.size == 0 or y.size == 0:
        return None
    below = np.searchsorted(y, x, side="left")  # values of b strictly below each value of a
    above = y.size - np.searchsorted(y, x, side="right")  # strictly above
    return float((below.sum() - above.sum()) / (x.size * y.size))


def unpaired_tests(a: Sequence[Any], b: Sequence[Any]) -> dict[str, Any]:
    """Two independent samples (e.g. a model's answers and the human answers of a subset).

    The tests SPEAR's reports use against the human answers (``generate_short_report.py``
    ``statistical_pvalue``): Welch's t-test (``scipy.stats.ttest_ind(equal_var=False)``, its
    default) and the Mann-Whitney U test (two-sided), plus Cliff's delta as effect size.

    Conventions: each side needs 2 values for a test (else ``None`` with a note); two constant
    samples have no Welch statistic: equal constants give p = 1, different ones ``None``.
    Below :data:`SMALL_SAMPLE` values on a side the p-values stand with a ``caution``
    (:func:`small_sample_caution`: the Mann-Whitney floor ``mannwhitney_floor``).

    Returns:
        ``{"n_a", "n_b", "mean_a", "mean_b", "diff" (mean_a - mean_b), "welch_p",
        "mannwhitney_p", "mannwhitney_floor", "cliffs_delta", "note", "caution"}``.
    """
    from scipy.stats import mannwhitneyu, ttest_ind

    x, y = _numbers(a), _numbers(b)
    out: dict[str, Any] = {"n_a": int(x.size), "n_b": int(y.size), "mean_a": float(x.mean()) if x.size else None,
                           "mean_b": float(y.mean()) if y.size else None, "diff": None, "welch_p": None,
                           "mannwhitney_p": None, "mannwhitney_floor": mannwhitney_floor(int(x.size), int(y.size)),
                           "cliffs_delta": cliffs_delta(x, y), "note": None,
                           "caution": small_sample_caution(int(x.size), paired=False, n_b=int(y.size))}
    if x.size and y.size:
        out["diff"] = out["mean_a"] - out["mean_b"]
    if x.size < 2 or y.size < 2:
        out["note"] = f"n = {x.size} and {y.size}: each side needs at least 2 values for a test"
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        welch = float(ttest_ind(x, y, equal_var=False).pvalue)
        mw = float(mannwhitneyu(x, y, alternative="two-sided", method=_mannwhitney_method(x, y)).pvalue)
    if not math.isfinite(welch):
        if np.ptp(x) == 0 and np.ptp(y) == 0 and x[0] == y[0]:
            welch = 1.0
        else:
            welch = None
            out["note"] = "both samples constant: Welch's t-test does not exist"
    out["welch_p"] = welch
    out["mannwhitney_p"] = mw if math.isfinite(mw) else None
    return out


#: at most this many orderings, a tied Mann-Whitney test is computed exactly (all 9 + 9 splits)
_EXACT_MW_ORDERINGS = 50_000


def _mannwhitney_method(x: np.ndarray, y: np.ndarray) -> Any:
    """``"auto"`` (scipy: exact without ties when a side has at most 8 values, else the normal
    approximation), except for tied small samples: there the normal approximation can fall far
    below the exact p (and below :func:`mannwhitney_floor`; booleans are all ties), so the exact
    permutation distribution over all ``C(n_a + n_b, n_a)`` orderings is used when there are at
    most :data:`_EXACT_MW_ORDERINGS`."""
    from scipy.stats import PermutationMethod

    orderings = math.comb(int(x.size + y.size), int(x.size))
    tied = np.unique(np.concatenate([x, y])).size < x.size + y.size
    if tied and orderings <= _EXACT_MW_ORDERINGS:
        return PermutationMethod(n_resamples=orderings)
    return "auto"


def numeric_keys(rows: Sequence[dict[str, Any]], exclude: Iterable[str] = ()) -> list[str]:
    """Per-sample keys whose non-null values are all numbers or booleans (first-seen order),
    leaving out ``exclude``. A key with no value in any row is not numeric (nothing to compare)."""
    skip = set(exclude)
    seen: dict[str, bool] = {}
    for r in rows:
        for k, v in r.items():
            if k in skip or v is None:
                continue
            ok = isinstance(v, (bool, int, float, np.bool_, np.integer, np.floating))
            seen[k] = seen.get(k, True) and ok
    return [k for k, ok in seen.items() if ok]


def compare_runs(
    rows_a: Sequence[dict[str, Any]],
    rows_b: Sequence[dict[str, Any]],
    *,
    match: Callable[[dict[str, Any]], Any],
    keys: Sequence[str] | None = None,
    exclude: Iterable[str] = (),
    group: Callable[[dict[str, Any]], str | None] | None = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
    names: tuple[str, str] = ("A", "B"),
) -> dict[str, Any]:
    """Compare two runs' per-sample rows (``per_sample.jsonl`` objects), A minus B.

    Only rows with ``status == "ok"`` count. Rows are paired by ``match(row)`` (SPEAR: the input
    clip's file name; FDB: the sample id); an id repeated within a run keeps its first row.

    Args:
        match: row -> pairing id.
        keys: the per-sample keys to compare; default every numeric key
            (:func:`numeric_keys`) present in both runs, minus ``exclude``.
        group: row -> subset label (``None`` = no subset) for the unpaired tests per subset;
            without it only the pooled tests are given.
        names: how ``notes`` name the two runs (e.g. their model names).

    Returns:
        ``{"n_ok_a", "n_ok_b", "n_common", "n_only_a", "n_only_b", "comparable", "notes",
        "keys_only_a", "keys_only_b", "bootstrap", "keys"}`` (``n_only_*``: rows of one run
        whose input the other lacks; ``keys_only_*``: numeric keys with values in one run only) where ``keys[k]`` is :func:`paired_comparison` of the matched
        rows plus ``"unpaired"``: ``{"all": unpaired_tests(...), <subset>: ...}`` over every ok
        row of each run. ``comparable`` is false when no row is shared; ``notes`` say why in words.
    """
    ok_a = [r for r in rows_a if r.get("status", "ok") == "ok"]
    ok_b = [r for r in rows_b if r.get("status", "ok") == "ok"]
    by_b: dict[Any, dict[str, Any]] = {}
    for r in ok_b:
        by_b.setdefault(match(r), r)
    seen_a: set = set()
    pairs = []
    for r in ok_a:
        m = match(r)
        if m in seen_a:
            continue
        seen_a.add(m)
        if m in by_b:
            pairs.append((r, by_b[m]))
    only_a: list[str] = []
    only_b: list[str] = []
    if keys is None:
        ka, kb = numeric_keys(ok_a, exclude), numeric_keys(ok_b, exclude)
        keys = [k for k in ka if k in set(kb)]
        only_a, only_b = [k for k in ka if k not in set(kb)], [k for k in kb if k not in set(ka)]
    name_a, name_b = names
    notes = []
    if len(ok_a) < len(rows_a) or len(ok_b) < len(rows_b):
        notes.append(f"failed rows left out: {len(rows_a) - len(ok_a)} in {name_a}, {len(rows_b) - len(ok_b)} in {name_b}")
    if not pairs:
        notes.append("not comparable: no scored sample is shared by both runs (n = 0 pairs); "
                     "only the unpaired tests below exist")
    elif len(pairs) < 2:
        notes.append(f"n = {len(pairs)} shared sample: no paired interval or test")
    elif len(pairs) < SMALL_SAMPLE:
        notes.append(f"n = {len(pairs)} shared samples: too few for a bootstrap p-value (it needs at least "
                     f"{SMALL_SAMPLE} pairs); the other p-values and intervals are shown with a caution")
    if not keys:
        notes.append("no numeric per-sample key is shared by both runs")
    if only_a:
        notes.append(f"values in {name_a} only (no row of {name_b} has one), not compared: {', '.join(only_a)}")
    if only_b:
        notes.append(f"values in {name_b} only (no row of {name_a} has one), not compared: {', '.join(only_b)}")
    groups = ["all"]
    if group is not None:
        labels = sorted({g for g in (group(r) for r in [*ok_a, *ok_b]) if g})
        groups += labels
    out: dict[str, Any] = {
        "n_ok_a": len(ok_a), "n_ok_b": len(ok_b), "n_common": len(pairs),
        "n_only_a": len(seen_a) - len(pairs), "n_only_b": len(by_b) - len(pairs),
        "comparable": bool(pairs), "notes": notes, "keys_only_a": only_a, "keys_only_b": only_b,
        "bootstrap": {"n_resamples": int(n_resamples), "seed": int(seed), "method": "percentile", "confidence": confidence,
                      "min_pairs_for_p": SMALL_SAMPLE},
        "keys": {},
    }
    for k in keys:
        entry = paired_comparison([a.get(k) for a, _ in pairs], [b.get(k) for _, b in pairs],
                                  n_resamples=n_resamples, seed=seed, confidence=confidence)
        unpaired = {}
        for g in groups:
            sel_a = ok_a if g == "all" else [r for r in ok_a if group(r) == g]
            sel_b = ok_b if g == "all" else [r for r in ok_b if group(r) == g]
            unpaired[g] = unpaired_tests([r.get(k) for r in sel_a], [r.get(k) for r in sel_b])
        entry["unpaired"] = unpaired
        out["keys"][k] = entry
    return out
