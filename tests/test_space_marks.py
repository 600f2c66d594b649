"""The Space computes its tie marks once per loaded set of results datasets and table options
(``spear_metrics.space.tables.MARKS``): the cached marks and tables are the uncached ones, on
tables whose answer is known by construction; a new set (another dataset, another loaded object,
other options) is computed again; the cache keeps at most its size.

The construction (as tests/test_benchmark_ties.py): system A; system B holds A's values with
neighbouring samples swapped, so its value is A's and its paired differences are symmetric
around 0 (one is ★, the other ≈, ranks 1 and 1-2); system C is worse on every sample by a fixed
amount (no mark, rank 3 in every resample)."""

from __future__ import annotations

import pandas as pd
import pytest

from spear_metrics.core.ties import BEST_MARK, TIE_MARK
from spear_metrics.results.load import Results
from spear_metrics.space import tables


def _results(name: str, summary: dict, rows: list[dict]) -> Results:
    return Results(source=f"local:{name}", model=name, inference_mode=None, open_weights=None, summary=summary,
                   samples=pd.DataFrame(rows))


def _assert_two_tied_one_not(cells: dict[str, str], rank: str) -> None:
    """A and B: one ★, the other ≈, both at ``rank``; C: rank 3 alone, no mark."""
    marks = {n: BEST_MARK if BEST_MARK in c else TIE_MARK if TIE_MARK in c else "" for n, c in cells.items()}
    assert sorted(marks[n] for n in ("A", "B")) == sorted([BEST_MARK, TIE_MARK]), cells
    assert marks["C"] == "" and cells["C"] == "rank 3", cells
    best = "A" if marks["A"] == BEST_MARK else "B"
    assert cells[best] == f"{BEST_MARK} {rank}" and cells["B" if best == "A" else "A"] == f"{TIE_MARK} {rank}", cells


def _dsuperb(system: str) -> Results:
    """A judged task of 30 rows: A right on 2 rows of 3, B the same with rows (0,1), (2,3)... swapped, C never."""
    from spear_metrics.dynamic_superb.results import BENCHMARK
    from spear_metrics.dynamic_superb.scoring import aggregate_task

    rows = [{"row": i, "instance": "ClsTask", "file": f"c{i}", "status": "ok",
             "judge_accuracy": {"A": int(i % 3 != 0), "B": int((i ^ 1) % 3 != 0), "C": 0}[system]} for i in range(30)]
    task = aggregate_task("llm_classification", rows, 30, n_resamples=0)
    overall = {"judge_accuracy": {"mean": task["judge_accuracy"], "n_tasks": 1}}
    return _results(system, {"benchmark": BENCHMARK, "tasks": {"ClsTask": task}, "overall": overall, "judge": {}}, rows)


def _spear(system: str) -> Results:
    """40 rows, 2 per conversation (V1_S<k>_I1): UTMOS of A 3 + 0.1 (i % 5), B A's of the row's
    neighbour in its conversation (so every conversation's mean is A's: B is A's equal in every
    resample, rank 1 as A), C A's - 1."""
    a = [3 + 0.1 * (i % 5) for i in range(40)]
    rows = [{"row": i, "audio_path": f"/data/V1_S{i // 2}_I1_q{i}.wav", "conversation_id": f"V1_S{i // 2}_I1",
             "status": "ok", "UTMOS": {"A": a[i], "B": a[i ^ 1], "C": a[i] - 1}[system]} for i in range(40)]
    return _results(system, {"metrics": ["speech_quality"], "onset_kind": "frame"}, rows)


@pytest.fixture
def marks_cache(monkeypatch):
    """A fresh :data:`tables.MARKS` for the test (the module's own is left as it was)."""
    cache = tables.MarksCache(size=4)
    monkeypatch.setattr(tables, "MARKS", cache)
    return cache


def _dsuperb_tab():
    from spear_metrics.core.registry import benchmarks

    return next(b.hook("space_tab") for b in benchmarks() if b.name == "dynamic_superb")


def test_cached_benchmark_table_is_the_uncached_one_and_computed_once(marks_cache):
    tab = _dsuperb_tab()
    data = [_dsuperb(s) for s in "ABC"]
    first = tables.benchmark_frame(tab, data)
    assert marks_cache.computed == 1
    again = tables.benchmark_frame(tab, data)  # a re-render: nothing computed
    assert marks_cache.computed == 1
    uncached = tables.benchmark_frame(tab, data, cached=False)
    assert marks_cache.computed == 1
    pd.testing.assert_frame_equal(first, uncached)
    pd.testing.assert_frame_equal(again, uncached)
    by = {m: r for m, r in zip(first["model"], first.to_dict("records"))}
    # each cell: the value, then its marks; A and B differ on single rows, so either is 1st or 2nd in a resample
    _assert_two_tied_one_not({n: by[n]["ClsTask (judge_accuracy)"].split(" ", 1)[1] for n in "ABC"}, "rank 1-2")
    assert by["C"]["ClsTask (judge_accuracy)"].startswith("0.000") and by["A"]["ClsTask (judge_accuracy)"].startswith("0.667")
    # the caller's copy is its own: changing it leaves the kept table as it was
    again.loc[0, "model"] = "changed"
    pd.testing.assert_frame_equal(tables.benchmark_frame(tab, data), uncached)
    # another benchmark's dataset loaded beside them (a SPEAR run): the tab's table is the same
    # table, not computed again; the table function given every dataset keeps these three too
    spear = _spear("A")
    assert tables.tab_results(tab, [spear, *data]) == data
    pd.testing.assert_frame_equal(tables.benchmark_frame(tab, [data[0], spear, *data[1:]]), uncached)
    assert marks_cache.computed == 1
    pd.testing.assert_frame_equal(tables._benchmark_frame(tab, [spear, *data]), uncached)


def test_cached_spear_marks_are_the_uncached_ones(marks_cache):
    data = [_spear(s) for s in "ABC"]
    cached = tables.spear_marks(data, None)
    assert tables.spear_marks(data, None) is cached and marks_cache.computed == 1
    assert cached == tables.spear_marks(data, None, cached=False)
    _assert_two_tied_one_not({n: cached[f"local:{n}"]["UTMOS"] for n in "ABC"}, "rank 1")
    # another human row is another set of options ("closer to human" keys are judged against it)
    tables.spear_marks(data, {"latency_ms": 700.0})
    assert marks_cache.computed == 2


def test_a_new_loaded_set_is_computed_again_and_the_cache_is_bounded(marks_cache):
    data = [_dsuperb(s) for s in "ABC"]
    calls = []

    def compute(tag):
        return lambda: calls.append(tag) or tag

    assert marks_cache.get("t", data, (), compute(1)) == 1
    assert marks_cache.get("t", data, (), compute(2)) == 1  # kept
    reloaded = [data[0], _dsuperb("B"), data[2]]  # the same label, another loaded object: another set
    assert marks_cache.get("t", reloaded, (), compute(3)) == 3
    assert marks_cache.get("t", data[:2], (), compute(4)) == 4  # a dataset fewer
    assert marks_cache.get("t", data, ("single",), compute(5)) == 5  # other options
    assert calls == [1, 3, 4, 5] and len(marks_cache) == 4
    marks_cache.get("u", data, (), compute(6))  # a fifth entry: the least recently used goes
    assert len(marks_cache) == 4
    assert marks_cache.get("t", data, (), compute(7)) == 7  # the first entry was the oldest: computed again
    assert marks_cache.get("u", data, (), compute(8)) == 6  # the newest stays


def test_a_failed_computation_keeps_nothing(marks_cache):
    data = [_dsuperb("A")]

    def fail():
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        marks_cache.get("t", data, (), fail)
    assert len(marks_cache) == 0 and marks_cache.get("t", data, (), lambda: "ok") == "ok"
    with pytest.raises(ValueError):
        tables.MarksCache(size=0)


def test_entries_of_a_freed_dataset_are_dropped(marks_cache):
    """The cache holds no dataset: once one is freed (a Hub dataset the policy no longer keeps),
    the entries computed from it go, and nothing of it stays in memory through the cache."""
    import gc
    import weakref

    kept, freed = _dsuperb("A"), _dsuperb("B")
    marks_cache.get("t", [kept], (), lambda: "kept")
    marks_cache.get("t", [kept, freed], (), lambda: "both")
    marks_cache.get("u", [freed], (), lambda: "freed")
    assert len(marks_cache) == 3
    ref = weakref.ref(freed)
    del freed
    gc.collect()
    assert ref() is None  # the cache did not keep it alive
    assert len(marks_cache) == 1 and marks_cache.get("t", [kept], (), lambda: "again") == "kept"
    # an object that cannot be watched is computed every time, never kept (its id could be reused)
    assert marks_cache.get("t", [("no", "weakref")], (), lambda: 1) == 1 and len(marks_cache) == 1
