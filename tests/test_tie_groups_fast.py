"""The vectorised tie groups (spear_metrics.core.ties.tie_groups) against the loop-per-system
implementation they replaced, kept below as the reference (``reference_tie_groups``: the code as it
was, one system at a time): the same seed must give the same tie groups, p-values and rank
intervals, bit for bit, on tables of every shape the leaderboards meet (clusters, strata, ties,
missing systems and rows, NaN values, ratio pairs, few clusters, one cluster, no resamples, many
systems drawn in chunks), and a whole Dynamic-SUPERB leaderboard must show the same marks."""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np
import pytest

import spear_metrics.core.ties as stats
from spear_metrics.core.stats import (
    ALPHA, CONFIDENCE, DEFAULT_RESAMPLES, MIN_DEFINED_SHARE, SMALL_SAMPLE, Clusters, as_number, holm,
    no_interval_reason,
)
from spear_metrics.core.ties import (
    BEST_MARK, TIE_COMMON, TIE_MARK, TIE_RULE, TIE_STRATA, _score, tie_groups, value_parts,
)


def _ref_resampled_means(parts: dict[str, dict[Any, tuple[float, float]]], systems: Sequence[str], ids: Sequence[Any],
                     cluster: Callable[[Any], Any] | None, n_resamples: int, seed: int,
                     stratum: Callable[[Any], Any] | None = None) -> tuple[np.ndarray, Clusters]:
    """The loop-per-system resampled values (reference)."""
    cl = Clusters([cluster(i) for i in ids] if cluster is not None else [None] * len(ids),
                  [stratum(i) for i in ids] if stratum is not None else None)
    drawn = cl.draw_clusters(np.random.default_rng(seed), n_resamples)
    m = np.empty((len(systems), drawn.shape[0]), dtype=np.float64)
    missing = (np.nan, np.nan)
    for j, n in enumerate(systems):
        nd = np.asarray([parts[n].get(i, missing) for i in ids], dtype=np.float64).reshape(len(ids), 2)
        s_num, _ = cl.sums(nd[:, 0])
        s_den, _ = cl.sums(nd[:, 1])
        tot = s_den[drawn].sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            m[j] = np.where(tot > 0, s_num[drawn].sum(axis=1) / np.where(tot > 0, tot, 1.0), np.nan)
    return m, cl



def reference_tie_groups(
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
    """The tie groups as the loop-per-system implementation computes them (reference; ``parsed``
    is accepted and ignored: value_parts gives a (num, den) pair back as it is)."""
    unit_name = unit if cluster is not None else "row"
    target = as_number(target)  # NaN / inf / not a number: no human value
    values = {name: {i: pv for i, v in vals.items() if (pv := value_parts(v)) is not None}
              for name, vals in values.items()}  # system -> row id -> (num, den)
    n_common = None
    rule = TIE_RULE.format(unit=unit_name, alpha=alpha, min_units=SMALL_SAMPLE)
    if common:
        have = [set(v) for v in values.values() if v]
        shared = set.intersection(*have) if have else set()
        values = {name: {i: v for i, v in vals.items() if i in shared} for name, vals in values.items()}
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
    together = _ref_resampled_means(values, ranked, list(values[best]), cluster, max(1, n_resamples), seed, stratum) \
        if common else None
    ps: list[float | None] = []
    for n in others:
        ids = [i for i in values[best] if i in values[n]]
        p = None
        if ids:
            if together is not None:
                m, cl = together[0][[ranked.index(best), ranked.index(n)]], together[1]
            else:
                m, cl = _ref_resampled_means(values, [best, n], ids, cluster, max(1, n_resamples), seed, stratum)
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
        ids = list(dict.fromkeys(i for n in ranked for i in values[n]))
        m, cl = together if together is not None else _ref_resampled_means(values, ranked, ids, cluster, n_resamples,
                                                                        seed, stratum)
        if not cl.movable():  # every resample is the same: no rank interval
            out["note"] = no_interval_reason(cl.n_clusters, unit_name) + ": no rank interval"
            return out
        score = np.where(np.isfinite(m), _score(m, better, target), -np.inf)
        ranks = 1 + (score[None, :, :] > score[:, None, :]).sum(axis=1)  # systems strictly better, + 1
        lo_q = (1.0 - confidence) / 2.0
        for j, n in enumerate(ranked):
            r = ranks[j][np.isfinite(m[j])]
            if r.size >= MIN_DEFINED_SHARE * m.shape[1]:
                out["systems"][n]["rank_ci95"] = [int(np.quantile(r, lo_q, method="lower")),
                                                  int(np.quantile(r, 1.0 - lo_q, method="higher"))]
    return out


# ---------------------------------------------------------------------------------------------
# tables


def _clustered(n_systems: int = 9, n_conv: int = 30, per: int = 3, seed: int = 1) -> dict[str, dict[Any, Any]]:
    """``n_systems`` systems on ``n_conv`` conversations x ``per`` rows sharing one conversation
    effect; systems 0 and 1 are the same system (tied), system 2 equals system 0 exactly (equal
    scores in every resample: shared ranks), the others step down by 0.3; system 3 misses a third
    of the rows (NaN or absent), system 4 has no value at all, one value is a bool and one a string."""
    rng = np.random.default_rng(seed)
    effect = rng.normal(0, 2.0, n_conv)
    out: dict[str, dict[Any, Any]] = {}
    for s in range(n_systems):
        level = {0: 1.0, 1: 1.0, 2: 1.0}.get(s, 1.0 - 0.3 * s)
        noise = np.random.default_rng(0 if s == 2 else 100 + s)
        out[f"S{s}"] = {f"c{c}_{k}": float(effect[c] + level + noise.normal(0, 0.5)) for c in range(n_conv)
                        for k in range(per)}
    for k, i in enumerate(list(out["S3"])):
        if k % 3 == 0:
            out["S3"][i] = float("nan") if k % 2 else None
        if k % 7 == 0:
            del out["S3"][i]
    out["S4"] = {i: None for i in out["S4"]}
    if n_systems > 6:
        out["S6"]["c0_0"] = True
        out["S6"]["c1_0"] = "text"
    return out


def _ratios(n_systems: int = 6, n_rows: int = 40) -> dict[str, dict[Any, Any]]:
    """``(edits, tokens)`` pairs: a ratio of sums; some rows with 0 tokens, one negative (no value)."""
    out = {}
    for s in range(n_systems):
        out[f"R{s}"] = {r: ((r * 7 + s * 3) % 10 < 6 + s % 3, (r % 5)) for r in range(n_rows)}
        out[f"R{s}"][0] = (1.0, -1.0)
    return out


def _conv(i: str) -> str:
    return i.split("_")[0]


def _stratum(i: Any) -> Any:
    return int(str(i).split("_")[0][1:]) % 3


def _sparse() -> dict[str, dict[Any, Any]]:
    """:func:`_clustered` with S5 answering only conversation c0 (absent from about a third of the
    resamples: a rank over the resamples that hold it) and S7 only c1 and c2 on 5 systems."""
    out = _clustered()
    out["S5"] = {i: v for i, v in out["S5"].items() if i.startswith("c0_")}
    out["S7"] = {i: v for i, v in out["S7"].items() if i.startswith(("c1_", "c2_"))}
    return out


CASES = {
    "sparse systems": dict(values=_sparse(), better="higher", cluster=_conv),
    "sparse systems by row": dict(values=_sparse(), better="lower"),
    "clustered higher": dict(values=_clustered(), better="higher", cluster=_conv),
    "clustered lower common": dict(values=_clustered(), better="lower", cluster=_conv, common=True),
    "clustered closer common": dict(values=_clustered(), better="closer_to_human", target=0.2, cluster=_conv,
                                    common=True),
    "strata common": dict(values=_clustered(), better="higher", cluster=_conv, stratum=_stratum,
                          stratum_name="role", common=True),
    "strata pairwise": dict(values=_clustered(), better="higher", cluster=_conv, stratum=_stratum),
    "rows common": dict(values=_clustered(), better="higher", common=True),
    "rows pairwise lower": dict(values=_clustered(), better="lower"),
    "ratios common": dict(values=_ratios(), better="lower", common=True),
    "ratios closer": dict(values=_ratios(), better="closer_to_human", target=0.5),
    "few clusters": dict(values=_clustered(n_conv=5), better="higher", cluster=_conv, common=True),
    "one cluster": dict(values=_clustered(), better="higher", cluster=lambda i: "c", common=True),
    "no resamples": dict(values=_clustered(), better="higher", cluster=_conv, common=True, n_resamples=0),
    "one resample": dict(values=_clustered(), better="higher", cluster=_conv, common=True, n_resamples=1),
    "many systems": dict(values=_clustered(n_systems=40, n_conv=25, per=2), better="higher", cluster=_conv,
                         common=True),
    "no best": dict(values=_clustered(), better="closer_to_human"),
    "one system": dict(values={"A": {1: 1.0, 2: 2.0}, "B": {1: None}}, better="higher", common=True),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("seed", [0, 7])
def test_tie_groups_match_the_reference_bit_for_bit(case, seed):
    """Same seed, same everything: values, bests, p-values (``==`` on floats), rank intervals, notes."""
    kw = dict(CASES[case])
    kw.setdefault("n_resamples", 300)
    got = tie_groups(seed=seed, **kw)
    want = reference_tie_groups(seed=seed, **kw)
    assert got == want
    pairs = {n: {i: p for i, v in vals.items() if (p := value_parts(v)) is not None} for n, vals in kw["values"].items()}
    assert tie_groups(seed=seed, **{**kw, "values": pairs}, parsed=True) == want  # as leaderboard_ties hands them
    if case == "sparse systems":  # a system absent from some resamples is ranked over those that hold it
        assert want["systems"]["S5"]["rank_ci95"] is not None and want["systems"]["S7"]["rank_ci95"] is not None
    if case == "clustered higher":  # the table is one a test can fail on: a best, ties and separated systems
        marks = [s["mark"] for s in want["systems"].values()]
        assert marks.count(BEST_MARK) == 1 and TIE_MARK in marks and "" in marks


def test_resampled_means_match_the_reference_on_fractions_and_whole_numbers():
    """The matrix of resampled values equals the one-system-at-a-time reference entry for entry
    (NaN where a resample holds no value), on fractional values (summed system by system) and on
    whole numbers (0/1 verdicts, error counts: summed by one matrix product, exact)."""
    for raw in (_clustered(n_systems=12), _ratios(n_systems=8, n_rows=300)):
        values = {n: {i: p for i, v in vals.items() if (p := value_parts(v)) is not None} for n, vals in raw.items()}
        systems = sorted(values)
        ids = list(dict.fromkeys(i for n in systems for i in values[n]))
        cluster = _conv if isinstance(ids[0], str) else (lambda i: i // 3)
        stratum = _stratum if isinstance(ids[0], str) else None
        want, _ = _ref_resampled_means(values, systems, ids, cluster, 200, 3, stratum)
        got, _ = stats._resampled_means(values, systems, ids, cluster, 200, 3, stratum)
        np.testing.assert_array_equal(got, want)
        if "S4" in raw:  # S4 holds no value: its NaN row is compared too
            assert np.isnan(want[systems.index("S4")]).all()


def test_drawn_sums_are_exact_on_whole_numbers_only():
    """Whole-number sums over many clusters (pairwise and product orders both exact) match; a
    fractional table, whose sum depends on the order of additions, goes system by system."""
    rng = np.random.default_rng(5)
    drawn = rng.integers(0, 500, size=(100, 500))
    whole = rng.integers(-3, 40, size=(6, 500)).astype(np.float64)
    np.testing.assert_array_equal(stats._drawn_sums(whole, drawn), np.stack([w[drawn].sum(axis=1) for w in whole]))
    big = whole * 2.0 ** 20  # past float32's exact range (2**24 over 500 draws): summed in float64, still exact
    got = stats._drawn_sums(big, drawn)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, np.stack([w[drawn].sum(axis=1) for w in big]))
    frac = rng.normal(size=(6, 500))
    np.testing.assert_array_equal(stats._drawn_sums(frac, drawn), np.stack([f[drawn].sum(axis=1) for f in frac]))
    # the product order would move the fractional sums: the system-by-system path is needed
    counts = np.stack([np.bincount(d, minlength=500) for d in drawn]).astype(np.float64)
    assert not np.array_equal((counts @ frac.T).T, np.stack([f[drawn].sum(axis=1) for f in frac]))


def test_dsuperb_leaderboard_marks_match_the_reference(monkeypatch):
    """A whole Dynamic-SUPERB table (judged and WER tasks, overall means) through the Space's
    table function: the same cells with the reference tie groups."""
    import importlib.util
    from pathlib import Path

    from spear_metrics.dynamic_superb.results import leaderboard_frame

    spec = importlib.util.spec_from_file_location(
        "bench_space_render", Path(__file__).resolve().parents[1] / "scripts" / "bench_space_render.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    loaded = bench.synthetic_results(7, 4, 12)
    fast = leaderboard_frame(loaded)
    monkeypatch.setattr(stats, "tie_groups", reference_tie_groups)
    slow = leaderboard_frame(loaded)
    assert fast.equals(slow)
    cells = " ".join(map(str, fast.to_numpy().ravel()))
    assert BEST_MARK in cells and TIE_MARK in cells and "rank" in cells


def test_clean_records_are_to_dict_cleaned_value_by_value():
    """The rows the tie marks read (results_rows): the same dicts, types and key order as
    ``to_dict("records")`` cleaned by clean_value, on every kind of column a results table holds."""
    import pandas as pd

    from spear_metrics.core.records import clean_value
    from spear_metrics.reports.runs import _clean_records

    frame = pd.DataFrame({
        "f": [0.5, float("nan"), float("inf"), -0.0], "i": [1, 2, 3, 4], "b": [True, False, True, False],
        "o": ["a", None, float("nan"), np.float64(2.0)], "arr": [np.array([1.0, np.nan]), None, [1], "x"],
        "s": pd.array(["x", None, "z", "w"], dtype="string"), "inferred": ["x", None, "z", "w"],
        "arrow": pd.array(["x", None, "z", "w"], dtype="string[pyarrow]"),
        "when": pd.to_datetime(["2024-01-01", None, "2024-01-03", "2024-01-04"]), "f32": np.array([1.5, np.nan, 2, 3], dtype=np.float32),
        "u": np.array([1, 2, 3, 4], dtype=np.uint8)})
    want = [{k: clean_value(v) for k, v in r.items()} for r in frame.to_dict("records")]
    got = _clean_records(frame)
    assert got == want
    assert [list(map(type, r.values())) for r in got] == [list(map(type, r.values())) for r in want]
    assert [list(r) for r in got] == [list(r) for r in want]
    assert got[1]["f"] is None and got[2]["f"] is None and got[0]["i"] == 1 and type(got[0]["i"]) is int
    assert _clean_records(frame[[]]) == [{}, {}, {}, {}]
    twice = pd.DataFrame([[1.0, 2.0, "a"]], columns=["x", "x", "y"])  # a repeated name: read as to_dict reads it
    with pytest.warns(UserWarning):
        want_twice = [{k: clean_value(v) for k, v in r.items()} for r in twice.to_dict("records")]
    with pytest.warns(UserWarning):
        assert _clean_records(twice, ["x", "y"]) == want_twice
    sub = ["u", "s", "f"]
    assert _clean_records(frame, sub) == [{k: clean_value(v) for k, v in r.items()} for r in frame[sub].to_dict("records")]


@pytest.mark.parametrize("n", [1, 2, 3, 39, 40, 41, 199, 1000, 1001])
def test_rank_quantiles_are_numpys_lower_and_higher(n):
    """The rank interval's ends read from rank counts are numpy's quantiles (methods ``lower`` and
    ``higher``) of each row, for resample counts on both sides of the index roundings."""
    rng = np.random.default_rng(n)
    ranks = rng.integers(1, 12, size=(9, n))
    ranks[0] = 3  # one constant row
    q = (1.0 - CONFIDENCE) / 2.0
    lo, hi = stats._rank_quantiles(ranks, q)
    assert lo.tolist() == [int(np.quantile(r, q, method="lower")) for r in ranks]
    assert hi.tolist() == [int(np.quantile(r, 1.0 - q, method="higher")) for r in ranks]


def test_rank_matrix_counts_the_strictly_better():
    """Ranks from one sort per resample equal 1 + the systems strictly better (every pair compared),
    equal scores (and -inf, no value) sharing the better rank."""
    rng = np.random.default_rng(2)
    score = rng.integers(0, 5, size=(30, 200)).astype(np.float64)
    score[3, ::7] = -np.inf
    score[4] = -0.0
    want = 1 + (score[None, :, :] > score[:, None, :]).sum(axis=1)
    np.testing.assert_array_equal(stats._rank_matrix(score), want)
    np.testing.assert_array_equal(stats._rank_matrix(score[:1]), np.ones((1, 200)))


def test_value_parts_reads_every_row_value_as_as_number_does():
    """A number is (x, 1); a pair of numbers (tuple or list alike) with den >= 0 is itself;
    anything as_number gives no value for (NaN, text, an int too large for a float) is no value,
    never an OverflowError."""
    assert value_parts(2) == (2.0, 1.0) and value_parts(0.5) == (0.5, 1.0) and value_parts(True) == (1.0, 1.0)
    assert value_parts((3, 4)) == value_parts([3, 4]) == (3.0, 4.0)
    assert value_parts(10 ** 400) is None and value_parts((10 ** 400, 1)) is None and value_parts([1, 10 ** 400]) is None
    assert value_parts(float("nan")) is None and value_parts("1") is None and value_parts((1, -1)) is None
    assert value_parts((1, 2, 3)) is None and value_parts(None) is None
