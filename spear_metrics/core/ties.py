"""Several systems on one key: tie groups (the systems not distinguishable from the best) and
rank intervals, the marks of every leaderboard (console, ``leaderboard.csv``, HTML report, Space).

:func:`tie_groups` draws one set of cluster resamples per key for every system together (a
system's resampled mean is an index draw over its clusters' sums), tests each system against the
best with a paired clustered bootstrap on the rows both answered (Holm over the systems compared)
and reads each system's rank interval from the same resamples. The rule in words:
:data:`TIE_RULE`. The per-sample statistics it builds on (clusters, Holm, the small-sample rule)
are :mod:`spear_metrics.core.stats`'.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from spear_metrics.core.stats import (
    ALPHA, CONFIDENCE, DEFAULT_RESAMPLES, MIN_DEFINED_SHARE, SMALL_SAMPLE, Clusters, as_number, holm,
    no_interval_reason,
)

#: the rule of :func:`tie_groups`, in words (shown with every tie group)
TIE_RULE = ("★ best; ≈ tied with the best: the system's difference from the best system on the rows both answered is "
            "not significant by a paired bootstrap over {unit}s (two-sided, Holm-adjusted over the systems compared "
            "with the best, p >= {alpha:g}), or fewer than {min_units} shared {unit}s exist to tell them apart; rank "
            "lo-hi: the 2.5th-97.5th percentile of the system's rank over {unit} resamples of all systems together")
#: added to :data:`TIE_RULE` when only the rows every system answered are compared (``common=True``)
TIE_COMMON = "; only the rows every system has a value for are compared ({n} rows)"
#: added to :data:`TIE_RULE` when clusters are drawn within strata (``stratum``)
TIE_STRATA = "; {unit}s are drawn within their {stratum} (each keeps its number of {unit}s)"
#: the marker of a system tied with the best (text, so it does not rest on colour)
TIE_MARK = "≈"
#: the marker of the best system
BEST_MARK = "★"


def value_parts(v: Any) -> tuple[float, float] | None:
    """A per-row value of :func:`tie_groups` as ``(numerator, denominator)``: a number ``x`` is
    ``(x, 1)`` (the key is a mean, or a share of 0/1 flags); a pair ``(num, den)`` of numbers with
    ``den >= 0`` is itself (the key is a ratio of sums, ``sum(num) / sum(den)``: a corpus error
    rate, SpeechRole's ``100 * sum(A) / sum(B)``); anything else -> ``None`` (no value)."""
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            return None
        num, den = _plain_number(v[0]), _plain_number(v[1])
        return None if num is None or den is None or den < 0 else (num, den)
    x = _plain_number(v)
    return None if x is None else (x, 1.0)


def _plain_number(v: Any) -> float | None:
    """:func:`as_number` with its common case (a Python float) read first."""
    if type(v) is float:
        return v if math.isfinite(v) else None
    return as_number(v)  # an int too (one of 400 digits is no float: None)


def _score(means: np.ndarray, better: str, target: float | None) -> np.ndarray:
    """Larger = better: the mean (``higher``), minus the mean (``lower``), minus the distance to
    ``target`` (``closer_to_human``)."""
    if better == "higher":
        return means
    if better == "lower":
        return -means
    return -np.abs(means - float(target))


def _drawn_sums(sums: np.ndarray, drawn: np.ndarray) -> np.ndarray:
    """``(n_systems, n_resamples)``: each system's per-cluster sums ``sums`` ``(n_systems,
    n_clusters)`` summed over each resample's drawn clusters ``drawn`` ``(n_resamples, k)``, the
    numbers ``sums[j][drawn].sum(axis=1)`` gives system by system, bit for bit.

    When every sum is a whole number and no partial sum can pass 2**53 (0/1 verdicts, error
    counts, token counts: every addition is exact, so the order of the additions cannot change
    the result), the sums come from one product with the draw counts ``(n_clusters,
    n_resamples)`` (how often each resample drew each cluster; ``numpy.einsum``, in float32 when
    no partial sum can pass 2**24, where float32 is exact too: the whole numbers are returned as
    float32 then); otherwise system by system."""
    n_sys, n_cl = sums.shape
    n_res, k = drawn.shape
    bound = float(np.abs(sums).max(initial=0.0)) * k if n_sys > 0 and k > 0 else math.inf
    if bound < 2.0 ** 53 and bool(np.all(sums == np.floor(sums))):
        counts = np.bincount((drawn + np.arange(n_res, dtype=np.intp)[:, None] * n_cl).ravel(),
                             minlength=n_res * n_cl).reshape(n_res, n_cl).T  # (n_clusters, n_resamples)
        # float32 holds every whole number below 2**24 exactly; numpy's own loop: no BLAS threads to wait on
        dtype = np.float32 if bound < 2.0 ** 24 else np.float64
        return np.einsum("sc,cb->sb", sums.astype(dtype), np.ascontiguousarray(counts, dtype=dtype))
    out = np.empty((n_sys, n_res), dtype=np.float64)
    for j in range(n_sys):
        out[j] = sums[j][drawn].sum(axis=1)
    return out


def _resampled_means(parts: dict[str, dict[Any, tuple[float, float]]], systems: Sequence[str], ids: Sequence[Any],
                     cluster: Callable[[Any], Any] | None, n_resamples: int, seed: int,
                     stratum: Callable[[Any], Any] | None = None) -> tuple[np.ndarray, "Clusters"]:
    """``(len(systems), n_resamples)`` values (``sum(num) / sum(den)`` of the rows' ``parts``,
    :func:`value_parts`) of each system over the rows ``ids`` of clustered resamples (NaN where a
    resample holds none of a system's rows), and the clusters drawn from.

    One draw (:meth:`Clusters.draw_clusters`, ``numpy.random.default_rng(seed)``) serves every
    system; every system's per-cluster sums (as :meth:`Clusters.sums`: one ``bincount`` over all
    systems, each bin summed in row order) are summed over each resample's drawn clusters
    (:func:`_drawn_sums`), the denominators once when every system has the same ones (a plain
    mean on common rows): the same numbers, bit for bit, as one system at a time."""
    cl = Clusters([cluster(i) for i in ids] if cluster is not None else [None] * len(ids),
                  [stratum(i) for i in ids] if stratum is not None else None)
    drawn = cl.draw_clusters(np.random.default_rng(seed), n_resamples)
    n_sys, n_ids, n_cl = len(systems), len(ids), cl.n_clusters
    missing = (np.nan, np.nan)
    ids = list(ids)
    nd = np.asarray([list(parts[n].values()) if list(parts[n]) == ids else [parts[n].get(i, missing) for i in ids]
                     for n in systems], dtype=np.float64).reshape(n_sys, n_ids, 2)  # rows in the order of ids
    ok = np.isfinite(nd)
    bins = (np.arange(n_sys, dtype=np.intp)[:, None] * n_cl + cl.cluster_of[None, :]).ravel()
    s_num = np.bincount(bins, weights=np.where(ok[..., 0], nd[..., 0], 0.0).ravel(), minlength=n_sys * n_cl)
    s_den = np.bincount(bins, weights=np.where(ok[..., 1], nd[..., 1], 0.0).ravel(), minlength=n_sys * n_cl)
    s_num, s_den = s_num.reshape(n_sys, n_cl), s_den.reshape(n_sys, n_cl)
    num = _drawn_sums(s_num, drawn)  # float32 only when it holds whole numbers exactly: divided in float64
    shared = n_sys > 1 and bool((s_den == s_den[0]).all())
    tot = _drawn_sums(s_den[:1] if shared else s_den, drawn).astype(np.float64)
    pos = tot > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        if pos.all():  # every resample holds a row of every system: no NaN to place
            return np.true_divide(num, tot, dtype=np.float64), cl
        return np.where(pos, np.true_divide(num, np.where(pos, tot, 1.0), dtype=np.float64), np.nan), cl


def _sorted_ranks(score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ranks of ``score`` ``(n_systems, n_resamples)`` (larger = better; no NaN) within each
    resample, from one sort per resample: ``(order, better)``, both ``(n_resamples, n_systems)``:
    ``order[b]`` the systems best first (equal scores in any order), ``better[b, i]`` how many
    systems score strictly better than ``order[b, i]`` (where its run of equal scores starts), so
    its rank is ``better + 1`` and equal scores share the better rank."""
    n_sys, n_res = score.shape
    u = np.negative(score.T, order="C")  # (n_resamples, n_systems), best first once sorted
    order = np.argsort(u, axis=1)
    srt = np.sort(u, axis=1)  # u along order, up to the order of equal entries (one run either way)
    better = np.zeros((n_res, n_sys), dtype=np.intp)
    if n_sys > 1:
        np.multiply(srt[:, 1:] != srt[:, :-1], np.arange(1, n_sys), out=better[:, 1:])
    np.maximum.accumulate(better, axis=1, out=better)
    return order, better


def _rank_matrix(score: np.ndarray) -> np.ndarray:
    """``(n_systems, n_resamples)`` ranks of ``score`` (larger = better; no NaN) within each
    resample (column): 1 + the number of systems strictly better, so equal scores share the
    better rank (:func:`_sorted_ranks`: one sort per resample, not every pair of systems)."""
    order, better = _sorted_ranks(score)
    ranks = np.empty(order.shape, dtype=np.intp)
    ranks[np.arange(order.shape[0])[:, None], order] = better + 1
    return ranks.T


def _count_quantiles(cum: np.ndarray, n: int, q: float) -> tuple[np.ndarray, np.ndarray]:
    """From cumulative counts ``cum`` ``(n_rows, top)`` (``cum[j, r]``: entries of row ``j`` that
    are <= ``r``; ``n`` entries a row), each row's ``np.quantile(row, q, method="lower")`` and
    ``np.quantile(row, 1 - q, method="higher")``: the sorted row's entries at ``floor((n - 1) q)``
    and ``ceil((n - 1)(1 - q))`` (numpy's definition of the two methods), the first ``r`` whose
    count passes the index."""
    i_lo = int(np.floor((n - 1) * np.float64(q)))
    i_hi = int(np.ceil((n - 1) * np.float64(1.0 - q)))
    return np.argmax(cum > i_lo, axis=1), np.argmax(cum > i_hi, axis=1)


def _rank_quantiles(ranks: np.ndarray, q: float) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``ranks`` ``(n_rows, n)`` (non-negative integers), ``np.quantile(row, q,
    method="lower")`` and ``np.quantile(row, 1 - q, method="higher")``, read from each row's
    cumulative counts instead of a sort (:func:`_count_quantiles`)."""
    n_rows, n = ranks.shape
    top = int(ranks.max(initial=0)) + 1
    counts = np.bincount((np.arange(n_rows, dtype=np.intp)[:, None] * top + ranks).ravel(),
                         minlength=n_rows * top).reshape(n_rows, top)
    return _count_quantiles(np.cumsum(counts, axis=1), n, q)


def tie_groups(
    values: dict[str, dict[Any, Any]],
    *,
    better: str,
    target: float | None = None,
    cluster: Callable[[Any], Any] | None = None,
    unit: str = "conversation",
    stratum: Callable[[Any], Any] | None = None,
    stratum_name: str = "stratum",
    common: bool = False,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    alpha: float = ALPHA,
    confidence: float = CONFIDENCE,
    parsed: bool = False,
) -> dict[str, Any]:
    """Which systems of a leaderboard key are statistically tied with the best, and each
    system's rank interval.

    Args:
        values: system -> {row id: per-row value} (``None`` = no value); the key's value of a
            system is ``sum(num) / sum(den)`` over its rows (:func:`value_parts`): the mean of
            its per-row numbers, or a ratio of sums when rows hold ``(num, den)`` pairs.
        better: ``"higher"``, ``"lower"``, or ``"closer_to_human"`` with ``target`` (the human
            value: the best is the system whose mean is nearest to it). Otherwise (or without a
            target) there is no best: ``None`` result fields with a ``note``.
        cluster: row id -> its cluster (``None`` = its own), named ``unit``; ``None``: rows.
        stratum: row id -> its stratum (``stratum_name`` in the rule, e.g. ``"role"``): clusters
            are drawn within their stratum, each stratum keeping its number of clusters
            (:class:`Clusters`); ``None``: one stratum.
        common: compare only the row ids every system has a value for (the values, the test and
            the rank intervals all on those rows; the rule says how many); ``False``: each
            comparison on the rows its two systems share, the ranks on all rows.
        parsed: every value is already its :func:`value_parts` pair ``(num, den)`` (as
            :func:`spear_metrics.reports.runs.leaderboard_ties` hands them): not read again.

    Rule (:data:`TIE_RULE`): the best system is the one with the best value; every other system
    is compared with it on the rows both have: the bootstrap distribution (clusters of shared
    rows resampled, :meth:`Clusters.draw_clusters`) of the difference of their scores (the
    values; for ``closer_to_human`` minus their distances to ``target``) gives the two-sided p
    ``min(1, 2 (1 + #beyond 0) / (B + 1))`` as :func:`paired_comparison` does; the p-values are
    Holm-adjusted (:func:`holm`) over those comparisons; a system is tied when its adjusted
    p >= ``alpha`` or no p exists (fewer than :data:`SMALL_SAMPLE` shared clusters: it cannot be
    told apart). Rank interval: every resample draws clusters from the union of all systems'
    rows (each system's value over the drawn rows it has), ranks the systems (1 = best; equal
    scores share the better rank) and takes the percentile interval of each system's rank (as
    EuroEval and Chatbot Arena report them); none (``note`` says why) when no stratum holds
    :data:`MIN_CLUSTERS` clusters.

    Returns:
        ``{"rule", "unit", "better", "target", "best", "note", "n_common", "systems": {name:
        {"value", "n", "best", "tied", "p_holm", "n_shared", "rank_ci95": [lo, hi] or None,
        "mark"}}}`` (``mark``: :data:`BEST_MARK`, :data:`TIE_MARK` or ``""``; ``n_common``: the
        rows every system has, with ``common``, else ``None``).
    """
    unit_name = unit if cluster is not None else "row"
    target = as_number(target)  # NaN / inf / not a number: no human value
    if not parsed:
        values = {name: {i: pv for i, v in vals.items() if (pv := value_parts(v)) is not None}
                  for name, vals in values.items()}  # system -> row id -> (num, den)
    n_common = None
    rule = TIE_RULE.format(unit=unit_name, alpha=alpha, min_units=SMALL_SAMPLE)
    if common:
        have = [set(v) for v in values.values() if v]
        shared = set.intersection(*have) if have else set()
        values = {name: vals if len(vals) == len(shared) else {i: v for i, v in vals.items() if i in shared}
                  for name, vals in values.items()}  # a system holding as many rows as are shared holds those
        n_common = len(shared)
        rule += TIE_COMMON.format(n=n_common)
    if stratum is not None:
        rule += TIE_STRATA.format(unit=unit_name, stratum=stratum_name)
    out: dict[str, Any] = {"rule": rule, "unit": unit_name, "better": better, "target": target, "best": None,
                           "note": None, "n_common": n_common, "systems": {}}
    means = {}
    for name, vals in values.items():
        parts = list(vals.values())
        den = sum(p[1] for p in parts)
        mean = float(sum(p[0] for p in parts) / den) if parts and den > 0 else None
        means[name] = mean if mean is not None and math.isfinite(mean) else None  # a sum past the float range: none
        out["systems"][name] = {"value": means[name], "n": len(parts), "best": False, "tied": None, "p_holm": None,
                                "n_shared": None, "rank_ci95": None, "mark": ""}
    if better not in ("higher", "lower") and not (better == "closer_to_human" and as_number(target) is not None):
        out["note"] = f"better = {better}" + (" without a human value" if better == "closer_to_human" else "") \
            + ": no best system, no tie group"
        return out
    ranked = [n for n in means if means[n] is not None]
    if len(ranked) < 2:
        out["note"] = ("no row is shared by every system: no tie group" if common and not n_common
                       else "fewer than 2 systems with a value: no tie group")
        return out
    point = dict(zip(ranked, _score(np.asarray([means[n] for n in ranked]), better, target)))
    best = max(ranked, key=lambda n: point[n])
    out["best"] = best
    out["systems"][best].update(best=True, tied=True, mark=BEST_MARK)
    others = [n for n in ranked if n != best]
    # with common rows every pair shares the same rows: one set of resamples serves every comparison
    together = _resampled_means(values, ranked, list(values[best]), cluster, max(1, n_resamples), seed, stratum) \
        if common else None
    ps: list[float | None] = []
    if together is not None and others:  # every comparison at once, on the one set of resamples
        m, cl = together
        scores = _score(m, better, target)
        jb = ranked.index(best)
        rest = [j for j, n in enumerate(ranked) if n != best]  # others, in their order
        diff = scores[jb][None, :] - scores  # every system's row; the best's own row is not read
        testable = cl.n_clusters >= SMALL_SAMPLE and n_resamples >= 1 and cl.movable()
        ok = np.isfinite(diff)
        if ok.all():  # no resample without a value (NaN compares false; no infinity)
            n_ok = np.full(len(ranked), diff.shape[1])
            below, above = np.count_nonzero(diff <= 0.0, axis=1), np.count_nonzero(diff >= 0.0, axis=1)
        else:
            n_ok = ok.sum(axis=1)
            below, above = (ok & (diff <= 0.0)).sum(axis=1), (ok & (diff >= 0.0)).sum(axis=1)
        n_ok, below, above = n_ok[rest], below[rest], above[rest]
        for k, n in enumerate(others):
            out["systems"][n]["n_shared"] = cl.n_clusters
            beyond = min(int(below[k]), int(above[k]))
            ps.append(float(min(1.0, 2.0 * (1 + beyond) / (int(n_ok[k]) + 1))) if testable and n_ok[k] else None)
    for n in others if together is None else ():
        ids = [i for i in values[best] if i in values[n]]
        p = None
        if ids:
            m, cl = _resampled_means(values, [best, n], ids, cluster, max(1, n_resamples), seed, stratum)
            out["systems"][n]["n_shared"] = cl.n_clusters
            diff = _score(m[0], better, target) - _score(m[1], better, target)
            if cl.n_clusters >= SMALL_SAMPLE and n_resamples >= 1 and cl.movable():
                ok = np.isfinite(diff)
                beyond = min(int(np.sum(diff[ok] <= 0.0)), int(np.sum(diff[ok] >= 0.0)))
                p = float(min(1.0, 2.0 * (1 + beyond) / (int(ok.sum()) + 1))) if ok.any() else None
        ps.append(p)
    for n, p in zip(others, holm(ps)):
        tied = p is None or p >= alpha
        out["systems"][n].update(p_holm=p, tied=tied, mark=TIE_MARK if tied else "")
    if n_resamples >= 1:
        if together is not None:
            m, cl = together
        else:
            ids = list(dict.fromkeys(i for n in ranked for i in values[n]))
            m, cl = _resampled_means(values, ranked, ids, cluster, n_resamples, seed, stratum)
        if not cl.movable():  # every resample is the same: no rank interval
            out["note"] = no_interval_reason(cl.n_clusters, unit_name) + ": no rank interval"
            return out
        finite = np.isfinite(m)
        lo_q = (1.0 - confidence) / 2.0
        if finite.all():  # every system has a value in every resample: rank counts straight from the sort
            order, ahead = _sorted_ranks(_score(m, better, target))
            n_sys, n_res = m.shape
            counts = np.bincount((order * (n_sys + 1) + ahead + 1).ravel(), minlength=n_sys * (n_sys + 1))
            los, his = _count_quantiles(np.cumsum(counts.reshape(n_sys, n_sys + 1), axis=1), n_res, lo_q)
            for j, n in enumerate(ranked):
                out["systems"][n]["rank_ci95"] = [int(los[j]), int(his[j])]
            return out
        score = np.where(finite, _score(m, better, target), -np.inf)
        ranks = _rank_matrix(score)  # systems strictly better, + 1
        full = finite.all(axis=1)
        if full.any():  # systems with a value in every resample: their quantiles at once
            rows = np.flatnonzero(full)
            los, his = _rank_quantiles(ranks[rows], lo_q)
            for j, lo, hi in zip(rows, los, his):
                out["systems"][ranked[j]]["rank_ci95"] = [int(lo), int(hi)]
        for j in np.flatnonzero(~full):
            r = ranks[j][finite[j]]
            if r.size >= MIN_DEFINED_SHARE * m.shape[1]:
                out["systems"][ranked[j]]["rank_ci95"] = [int(np.quantile(r, lo_q, method="lower")),
                                                          int(np.quantile(r, 1.0 - lo_q, method="higher"))]
    return out
