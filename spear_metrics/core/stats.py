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
import re
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
#: What an interval resamples (``--bootstrap-unit``): ``"conversation"`` draws whole clusters
#: (every row of a drawn conversation comes along), ``"row"`` draws rows one by one.
BOOTSTRAP_UNITS = ("conversation", "row")
#: the default unit: SPEAR's rows are several questions cut from one conversation
#: (5,419 segments from 2,007 conversations), so they are not independent draws
DEFAULT_BOOTSTRAP_UNIT = "conversation"
#: a clustered interval needs at least this many clusters (one cluster: every resample is it)
MIN_CLUSTERS = 2
#: A percentage or rate computed from fewer than this many events (its ``<key>_n``: the rows, pairs
#: or answers it counts over) is marked as resting on few events
#: (:func:`spear_metrics.core.summary.few_events`); the threshold τ-voice applies to its
#: interaction metrics.
FEW_EVENTS = 10
#: a SPEAR conversation id inside a clip path (``V00_S2017_I00001160_P1273A_P2072A_0.wav``)
_CONVERSATION_IN_PATH = re.compile(r"V\d+_S\d+_I\d+")


def as_number(v: Any) -> float | None:
    """A per-sample value as a float: ``None``/NaN/inf/non-numbers -> ``None`` (so is an integer too
    large for a float, e.g. 400 digits); ``True``/``False`` -> 1.0/0.0."""
    if v is None or isinstance(v, (str, bytes, list, tuple, dict)):
        return None
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
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
    clusters: "Clusters | Sequence[Any] | None" = None,
) -> list[float] | None:
    """Percentile bootstrap interval of the mean of ``values`` (``scipy.stats.bootstrap``; with
    ``clusters``, over clustered resamples, :func:`clustered_mean_distribution`).

    Args:
        values: per-sample values in the metric's unit (``None`` dropped, booleans as 0/1).
        n_resamples: bootstrap resamples (>= 1).
        seed: seed of ``numpy.random.default_rng``; same seed, same interval.
        confidence: coverage, e.g. 0.95 -> the 2.5th and 97.5th percentiles.
        clusters: one cluster label per entry of ``values`` (or :class:`Clusters`), or ``None``
            (values resampled one by one).

    Returns:
        ``[lo, hi]`` in the metric's unit, or ``None`` with fewer than 2 values,
        ``n_resamples`` < 1, or (clustered) fewer than :data:`MIN_CLUSTERS` clusters holding a
        value (:func:`no_interval_reason`).
    """
    if clusters is not None:
        cl = as_clusters(clusters, len(values))
        has = np.asarray([as_number(v) is not None for v in values], dtype=bool)
        if int(has.sum()) < 2 or n_resamples < 1:
            return None
        cl = cl.subset(has)
        if not cl.movable():
            return None
        if cl.singletons:
            return bootstrap_ci(values, n_resamples=n_resamples, seed=seed, confidence=confidence)
        dist = clustered_mean_distribution([v for v, h in zip(values, has) if h], cl, n_resamples=n_resamples, seed=seed)
        return percentile_interval(dist, confidence)
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
    clusters: "Clusters | Sequence[Any] | None" = None,
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
        clusters: one cluster label per unit (or :class:`Clusters`): clusters are resampled
            instead of units, every unit of a drawn cluster comes along, and ``aggregate``
            receives the units of the drawn clusters (an index array of varying length; the
            ``numpy.random.default_rng(seed)`` draw of :meth:`Clusters.draw_clusters`).
            ``None``: units one by one (``scipy.stats.bootstrap``).

    Returns:
        ``{key: [lo, hi] or None}``; all ``None`` with fewer than 2 units, ``n_resamples`` < 1,
        or (clustered) fewer than :data:`MIN_CLUSTERS` clusters (:func:`no_interval_reason`).
    """
    keys = list(keys)
    if n_units < 2 or n_resamples < 1 or not keys:
        return {k: None for k in keys}
    if clusters is not None:
        cl = as_clusters(clusters, n_units)
        if not cl.movable():
            return {k: None for k in keys}
        if cl.singletons:
            return aggregate_intervals(aggregate, n_units, keys, n_resamples=n_resamples, seed=seed,
                                       confidence=confidence)
        drawn = cl.draw_clusters(np.random.default_rng(seed), n_resamples)
        dist = np.empty((len(keys), drawn.shape[0]), dtype=np.float64)
        for b in range(drawn.shape[0]):
            out = aggregate(cl.rows_of(drawn[b]))
            dist[:, b] = [np.nan if (x := as_number(out.get(k))) is None else x for k in keys]
        return {k: percentile_interval(dist[i], confidence) for i, k in enumerate(keys)}

    def statistic(idx: np.ndarray) -> np.ndarray:
        out = aggregate(np.asarray(idx, dtype=np.intp))
        return np.asarray([np.nan if (x := as_number(out.get(k))) is None else x for k in keys], dtype=np.float64)

    res = _bootstrap((np.arange(n_units),), statistic, vectorized=False, n_resamples=n_resamples, seed=seed,
                     confidence=confidence)
    dist = np.asarray(res.bootstrap_distribution, dtype=np.float64).reshape(len(keys), -1)
    return {k: percentile_interval(dist[i], confidence) for i, k in enumerate(keys)}


# ---------------------------------------------------------------------------------------------
# clusters: the sampled unit


def conversation_of(row: Any) -> str | None:
    """The conversation a SPEAR row belongs to: its ``conversation_id`` (a dict key or a
    :class:`~spear_datasets.protocol.SpearRow` attribute) when non-empty, else the
    ``V<v>_S<s>_I<i>`` id in its ``audio_path`` (SPEAR's clip names start with it), else
    ``None`` (the row is its own cluster)."""
    get = row.get if isinstance(row, dict) else (lambda k: getattr(row, k, None))
    cid = get("conversation_id")
    if cid is not None and str(cid).strip():
        return str(cid).strip()
    m = _CONVERSATION_IN_PATH.search(str(get("audio_path") or ""))
    return m.group(0) if m else None


class Clusters:
    """Row positions ``0 .. n-1`` grouped into clusters (conversations, dialogues, instances),
    optionally within strata, for the clustered bootstrap.

    A clustered resample draws as many clusters as there are, with replacement (within each
    stratum, as many as the stratum holds), and takes every row of each drawn cluster, in row
    order: a resample is an index array over the rows, of varying length, that every
    ``aggregate(idx)`` of :func:`aggregate_intervals` takes as it takes a row resample. Means,
    ratios of sums, percentages and whole-set statistics are thereby recomputed on the rows the
    drawn clusters hold (Davison & Hinkley 1997, section 3.8, "resampling stage 1 only": the
    clusters are the independent units).

    Args:
        labels: one cluster label per row; ``None`` or ``""`` = the row is its own cluster.
        strata: one stratum label per row, or ``None`` (one stratum); a cluster label is
            read within its stratum.
    """

    def __init__(self, labels: Sequence[Any], strata: Sequence[Any] | None = None):
        if strata is not None and len(strata) != len(labels):
            raise ValueError(f"Clusters: {len(labels)} labels but {len(strata)} strata")
        ids: dict[Any, int] = {}
        stratum_of: list[Any] = []
        cid = np.empty(len(labels), dtype=np.intp)
        for i, lab in enumerate(labels):
            st = None if strata is None else strata[i]
            key = (st, ("row", i) if lab is None or (isinstance(lab, str) and not lab.strip()) else ("id", lab))
            if key not in ids:
                ids[key] = len(ids)
                stratum_of.append(st)
            cid[i] = ids[key]
        self.n_units = len(labels)
        self.n_clusters = len(ids)
        self.cluster_of = cid
        self.sizes = np.bincount(cid, minlength=self.n_clusters).astype(np.intp)
        self.order = np.argsort(cid, kind="stable").astype(np.intp)
        self.starts = (np.cumsum(self.sizes) - self.sizes).astype(np.intp)
        groups: dict[Any, list[int]] = {}
        for c, st in enumerate(stratum_of):
            groups.setdefault(st, []).append(c)
        self.strata = [np.asarray(g, dtype=np.intp) for g in groups.values()]

    @property
    def singletons(self) -> bool:
        """Every cluster holds one row and there is one stratum: a clustered resample is then a
        row resample, and the callers take the row path (``scipy.stats.bootstrap``: the same
        numbers as without clusters)."""
        return self.n_clusters == self.n_units and len(self.strata) <= 1

    def movable(self) -> bool:
        """Whether resamples differ at all: some stratum holds at least :data:`MIN_CLUSTERS`
        clusters."""
        return any(g.size >= MIN_CLUSTERS for g in self.strata)

    def draw_clusters(self, rng: np.random.Generator, n_resamples: int) -> np.ndarray:
        """``(n_resamples, n_clusters)`` drawn cluster numbers, each row one resample (stratum
        by stratum, each stratum's own number of clusters)."""
        parts = [g[rng.integers(0, g.size, size=(int(n_resamples), g.size))] for g in self.strata]
        return np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]

    def rows_of(self, drawn: np.ndarray) -> np.ndarray:
        """The row positions of the drawn clusters ``drawn`` ``(k,)``: every row of each, in
        draw order, rows of one cluster in row order; shape ``(sum of their sizes,)``."""
        lengths = self.sizes[drawn]
        ends = np.cumsum(lengths)
        offsets = np.repeat(self.starts[drawn] - (ends - lengths), lengths) + np.arange(int(ends[-1]) if ends.size else 0)
        return self.order[offsets]

    def sums(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per-cluster sum and count of the finite entries of ``x`` ``(n_units,)``: the
        sufficient statistics of a mean, so the mean of a resample is
        ``sum[drawn].sum() / count[drawn].sum()`` (the fast path of means and percentages)."""
        x = np.asarray(x, dtype=np.float64)
        ok = np.isfinite(x)
        s = np.bincount(self.cluster_of, weights=np.where(ok, x, 0.0), minlength=self.n_clusters)
        c = np.bincount(self.cluster_of, weights=ok.astype(np.float64), minlength=self.n_clusters)
        return s, c

    def subset(self, keep: np.ndarray) -> "Clusters":
        """The clusters of the rows where ``keep`` (bool ``(n_units,)``) is true, renumbered."""
        keep = np.asarray(keep, dtype=bool)
        labels = self.cluster_of[keep].tolist()
        strata = None
        if len(self.strata) > 1:
            st = np.empty(self.n_clusters, dtype=np.intp)
            for k, g in enumerate(self.strata):
                st[g] = k
            strata = st[self.cluster_of[keep]].tolist()
        return Clusters(labels, strata)


def as_clusters(clusters: "Clusters | Sequence[Any] | None", n_units: int) -> "Clusters | None":
    """``clusters`` as :class:`Clusters` (labels are grouped; ``None`` stays ``None``: rows).

    Raises:
        ValueError: it does not have one entry per unit."""
    if clusters is None:
        return None
    c = clusters if isinstance(clusters, Clusters) else Clusters(list(clusters))
    if c.n_units != n_units:
        raise ValueError(f"clusters cover {c.n_units} units, not {n_units}")
    return c


def no_interval_reason(n_clusters: int, unit: str = "conversation") -> str:
    """Why a clustered interval does not exist: ``"1 conversation: a conversation bootstrap
    needs at least 2 (every resample would hold the same one)"``."""
    plural = unit if n_clusters == 1 else f"{unit}s"
    return (f"{n_clusters} {plural}: a {unit} bootstrap needs at least {MIN_CLUSTERS} "
            f"(every resample would hold the same {unit}s)")


def clustered_mean_distribution(x: Sequence[Any], clusters: "Clusters", *, n_resamples: int, seed: int) -> np.ndarray:
    """Bootstrap distribution ``(n_resamples,)`` of the mean of ``x`` (``None``/NaN = no value)
    over clustered resamples (:meth:`Clusters.draw_clusters`), from the per-cluster sums: one
    gather per resample, no per-row work. NaN where a resample holds no value."""
    vals = np.asarray([np.nan if (v := as_number(u)) is None else v for u in x], dtype=np.float64)
    s, c = clusters.sums(vals)
    drawn = clusters.draw_clusters(np.random.default_rng(seed), n_resamples)
    tot = c[drawn].sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(tot > 0, s[drawn].sum(axis=1) / np.where(tot > 0, tot, 1.0), np.nan)


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (Holm 1979), in the order given; ``None`` entries are
    not tests (left ``None``, not counted in ``m``). Sorted ascending ``p_(1) <= ... <= p_(m)``:
    ``adj_(i) = max_{j <= i} min(1, (m - j + 1) * p_(j))``; rejecting where ``adj < alpha``
    controls the family-wise error rate at ``alpha``.

    >>> holm([0.01, 0.04, 0.03])  # m = 3: 3*0.01, max(0.03, 2*0.03), max(0.06, 1*0.04)
    [0.03, 0.06, 0.06]
    """
    idx = [i for i, p in enumerate(p_values) if p is not None]
    out: list[float | None] = [None] * len(p_values)
    m = len(idx)
    running = 0.0
    for rank, i in enumerate(sorted(idx, key=lambda i: p_values[i])):
        running = max(running, min(1.0, (m - rank) * float(p_values[i])))
        out[i] = running
    return out


# ---------------------------------------------------------------------------------------------
# two systems


def paired_comparison(
    a: Sequence[Any],
    b: Sequence[Any],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
    clusters: "Clusters | Sequence[Any] | None" = None,
    unit: str = "conversation",
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

    Clustered (``clusters``: one label per pair position, e.g. the conversation; ``unit`` names
    it): the interval and the bootstrap p-value resample clusters of pairs
    (:func:`clustered_mean_distribution`; every pair of a drawn cluster comes along), the
    Wilcoxon test ranks the per-cluster mean differences (one value per cluster: the clusters are
    the independent units), and the small-sample rule counts clusters, not pairs. ``n_clusters``
    says how many clusters the pairs span; fewer than :data:`MIN_CLUSTERS` give no interval nor
    test (``note``: :func:`no_interval_reason`).

    Returns:
        ``{"n", "n_clusters", "unit", "mean_a", "mean_b", "diff", "diff_ci95", "p_value",
        "p_value_floor", "wilcoxon_p", "wilcoxon_floor", "d_z", "note", "caution"}``
        (``unit`` = ``"row"`` and ``n_clusters`` = ``n`` without clusters).

    Raises:
        ValueError: ``a`` and ``b`` have different lengths.
    """
    if len(a) != len(b):
        raise ValueError(f"paired_comparison needs equal lengths, got {len(a)} and {len(b)}")
    cl = as_clusters(clusters, len(a))
    both = [(x, y) for x, y in ((as_number(u), as_number(v)) for u, v in zip(a, b))]
    keep = np.asarray([x is not None and y is not None for x, y in both], dtype=bool)
    pairs = [p for p, k in zip(both, keep) if k]
    cl = cl.subset(keep) if cl is not None else None
    out: dict[str, Any] = {"n": len(pairs), "n_clusters": cl.n_clusters if cl is not None else len(pairs),
                           "unit": unit if cl is not None else "row", "mean_a": None, "mean_b": None, "diff": None,
                           "diff_ci95": None, "p_value": None, "p_value_floor": None, "wilcoxon_p": None,
                           "wilcoxon_floor": None, "d_z": None, "note": None, "caution": None}
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
    if cl is not None and not cl.movable():
        out["note"] = no_interval_reason(cl.n_clusters, unit) + "; no paired interval or test"
        return out
    n_units = int(d.size) if cl is None else cl.n_clusters
    out["caution"] = small_sample_caution(n_units)
    if cl is not None and not cl.singletons and out["caution"]:
        out["caution"] = out["caution"].replace(" pairs", f" {unit}s", 2)
    if n_resamples >= 1:
        if cl is None or cl.singletons:
            res = _bootstrap((d,), np.mean, vectorized=True, n_resamples=n_resamples, seed=seed, confidence=confidence)
            means = np.asarray(res.bootstrap_distribution, dtype=np.float64)
        else:
            means = clustered_mean_distribution(d, cl, n_resamples=n_resamples, seed=seed)
        out["diff_ci95"] = percentile_interval(means, confidence)
        if n_units >= SMALL_SAMPLE:
            beyond = min(int(np.sum(means <= 0.0)), int(np.sum(means >= 0.0)))
            out["p_value"] = float(min(1.0, 2.0 * (1 + beyond) / (means.size + 1)))
            out["p_value_floor"] = bootstrap_p_floor(int(means.size))
    ranked = d
    if cl is not None and not cl.singletons:  # one value per cluster: its mean difference
        s_, c_ = cl.sums(d)
        ranked = s_ / c_
    out["wilcoxon_p"] = _wilcoxon_p(ranked)
    out["wilcoxon_floor"] = wilcoxon_floor(int(np.count_nonzero(ranked)))
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
    cluster: Callable[[dict[str, Any]], Any] | None = None,
    unit: str = "conversation",
) -> dict[str, Any]:
    """Compare two runs' per-sample rows (``per_sample.jsonl`` objects), A minus B.

    Only rows with ``status == "ok"`` count. Rows are paired by ``match(row)`` (SPEAR: the input
    clip's file name; FDB: the sample id); an id repeated within a run keeps its first row (the
    others counted in ``n_repeated_a`` / ``n_repeated_b`` and said in ``notes``).

    Args:
        match: row -> pairing id.
        keys: the per-sample keys to compare; default every numeric key
            (:func:`numeric_keys`) present in both runs, minus ``exclude``.
        group: row -> subset label (``None`` = no subset) for the unpaired tests per subset;
            without it only the pooled tests are given.
        names: how ``notes`` name the two runs (e.g. their model names).
        cluster: row -> its cluster (SPEAR: :func:`conversation_of`; ``None`` = its own), named
            ``unit``: the paired intervals and tests resample clusters of pairs
            (:func:`paired_comparison`); ``None``: pairs one by one (``unit`` ``"row"``).

    Multiple comparisons: every key is one test, so each entry also carries ``p_value_holm`` and
    ``wilcoxon_p_holm``, the :func:`holm` adjustment over the keys of this comparison (read a key
    as different at 5 % when its Holm p is below 0.05; the family-wise error rate then stays at 5 %).

    Returns:
        ``{"n_ok_a", "n_ok_b", "n_common", "n_only_a", "n_only_b", "n_repeated_a", "n_repeated_b", "comparable", "notes",
        "keys_only_a", "keys_only_b", "bootstrap", "keys"}`` (``n_only_*``: rows of one run
        whose input the other lacks; ``keys_only_*``: numeric keys with values in one run only) where ``keys[k]`` is :func:`paired_comparison` of the matched
        rows plus ``"unpaired"``: ``{"all": unpaired_tests(...), <subset>: ...}`` over every ok
        row of each run. ``comparable`` is false when no row is shared; ``notes`` say why in words.
    """
    ok_a = [r for r in rows_a if r.get("status", "ok") == "ok"]
    ok_b = [r for r in rows_b if r.get("status", "ok") == "ok"]
    by_b: dict[Any, dict[str, Any]] = {}
    dup_b = 0
    for r in ok_b:
        m = match(r)
        if m in by_b:
            dup_b += 1
            continue
        by_b[m] = r
    seen_a: set = set()
    pairs = []
    dup_a = 0
    for r in ok_a:
        m = match(r)
        if m in seen_a:
            dup_a += 1
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
    for k, name in ((dup_a, name_a), (dup_b, name_b)):
        if k:  # never silently: the first row of an id is paired, the others are not
            notes.append(f"{k} scored row(s) of {name} repeat the pairing id of an earlier row and are left out of "
                         "the pairs (the id does not name one sample)")
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
        "n_repeated_a": dup_a, "n_repeated_b": dup_b,
        "comparable": bool(pairs), "notes": notes, "keys_only_a": only_a, "keys_only_b": only_b,
        "bootstrap": {"n_resamples": int(n_resamples), "seed": int(seed), "method": "percentile", "confidence": confidence,
                      "min_pairs_for_p": SMALL_SAMPLE, "unit": unit if cluster is not None else "row",
                      "multiple_comparisons": "Holm over the keys of this comparison (p_value_holm, wilcoxon_p_holm)"},
        "keys": {},
    }
    labels = None
    if cluster is not None:
        labels = [cluster(x) or cluster(y) for x, y in pairs]
        if pairs and not any(labels):  # nothing names a conversation: rows are what is resampled, and said so
            labels, unit = None, "row"
            out["bootstrap"]["unit"] = "row"
            notes.append("no row names its conversation (conversation_id, or a SPEAR clip name): rows resampled")
        else:
            out["n_clusters_common"] = len({c for c in labels if c}) + sum(1 for c in labels if not c)
    for k in keys:
        entry = paired_comparison([a.get(k) for a, _ in pairs], [b.get(k) for _, b in pairs],
                                  n_resamples=n_resamples, seed=seed, confidence=confidence, clusters=labels, unit=unit)
        unpaired = {}
        for g in groups:
            sel_a = ok_a if g == "all" else [r for r in ok_a if group(r) == g]
            sel_b = ok_b if g == "all" else [r for r in ok_b if group(r) == g]
            unpaired[g] = unpaired_tests([r.get(k) for r in sel_a], [r.get(k) for r in sel_b])
        entry["unpaired"] = unpaired
        out["keys"][k] = entry
    for field in ("p_value", "wilcoxon_p"):
        adjusted = holm([e[field] for e in out["keys"].values()])
        for e, p in zip(out["keys"].values(), adjusted):
            e[f"{field}_holm"] = p
    return out
