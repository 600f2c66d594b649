"""Clustered bootstrap, Holm's correction, tie groups and rank intervals (spear_metrics.core.stats).

Every expected number is true by construction or computed by hand in the test.
"""

from __future__ import annotations

import numpy as np
import pytest

from spear_metrics.core.stats import (
    Clusters, aggregate_intervals, bootstrap_ci, compare_runs, conversation_of, holm, no_interval_reason,
    paired_comparison,
)
from spear_metrics.core.ties import BEST_MARK, TIE_MARK, tie_groups
from spear_metrics.core.summary import few_events

# 4 conversations x 10 rows; the conversation means are 0, 10, 20, 30 and every row of a
# conversation deviates from its mean by -1 or +1 (5 of each): nearly all the variance lies
# between conversations.
MEANS = [0.0, 10.0, 20.0, 30.0]
ROWS = [m + d for m in MEANS for d in [-1.0, 1.0] * 5]
LABELS = [f"V00_S0001_I{c:08d}" for c in range(4) for _ in range(10)]
B = 4000


def test_clusters_draw_whole_conversations():
    cl = Clusters(["a", "b", "a", None, "b"])
    # clusters in first-seen order: a = rows 0, 2; b = rows 1, 4; row 3 alone
    assert cl.n_clusters == 3 and cl.sizes.tolist() == [2, 2, 1]
    assert cl.rows_of(np.array([1, 1, 0, 2])).tolist() == [1, 4, 1, 4, 0, 2, 3]
    drawn = cl.draw_clusters(np.random.default_rng(0), 7)
    assert drawn.shape == (7, 3) and drawn.min() >= 0 and drawn.max() <= 2


def test_conversation_bootstrap_is_wider_by_the_direct_ratio():
    """The row bootstrap's SD of the mean is the SD of the 40 rows / sqrt(40); the conversation
    bootstrap's is the SD of the 4 conversation means / sqrt(4) (population SDs, as the
    bootstrap draws from the empirical distribution). Both intervals are ~ 2 x 1.96 x SD wide,
    so their width ratio is the ratio of the two SDs (up to the bootstrap's own noise and the
    coarse distribution of 4 clusters: 35 distinct resamples)."""
    x = np.asarray(ROWS)
    sd_row = x.std() / np.sqrt(x.size)
    sd_conv = np.asarray(MEANS).std() / np.sqrt(len(MEANS))
    expected = sd_conv / sd_row  # = 11.18/2 / (11.22/6.32) ~ 3.15
    assert expected == pytest.approx(3.15, abs=0.01)
    row = bootstrap_ci(ROWS, n_resamples=B, seed=1)
    conv = bootstrap_ci(ROWS, n_resamples=B, seed=1, clusters=LABELS)
    ratio = (conv[1] - conv[0]) / (row[1] - row[0])
    assert ratio == pytest.approx(expected, rel=0.2)
    # the same through aggregate_intervals (a ratio-free mean here; any aggregate of the drawn rows)
    agg = aggregate_intervals(lambda idx: {"mean": float(x[idx].mean())}, x.size, ["mean"], n_resamples=B, seed=1,
                              clusters=LABELS)["mean"]
    assert (agg[1] - agg[0]) / (row[1] - row[0]) == pytest.approx(expected, rel=0.2)
    # the rows of a drawn conversation come along: every resampled mean is a mean of conversation means
    cl = Clusters(LABELS)
    drawn = cl.draw_clusters(np.random.default_rng(0), 50)
    for d in drawn:
        assert x[cl.rows_of(d)].mean() == pytest.approx(np.mean([MEANS[c] for c in d]))


def test_percentage_of_flags_by_conversation():
    """A percentage is a mean of 0/1 flags: conversations 0-1 all yes, 2-3 all no -> 50 %; the
    conversation bootstrap's resamples hold 0, 1, 2, 3 or 4 'yes' conversations of 4, so its
    interval lies on the grid 0, 25, 50, 75, 100 %."""
    flags = [c < 2 for c in range(4) for _ in range(10)]
    agg = aggregate_intervals(lambda idx: {"pct": 100.0 * np.mean(np.asarray(flags)[idx])}, 40, ["pct"],
                              n_resamples=B, seed=2, clusters=LABELS)["pct"]
    assert agg[0] in (0.0, 25.0) and agg[1] in (75.0, 100.0)


def test_single_conversation_gives_no_interval_with_the_reason():
    one = [LABELS[0]] * 10
    assert bootstrap_ci(ROWS[:10], n_resamples=100, clusters=one) is None
    assert aggregate_intervals(lambda idx: {"m": 1.0}, 10, ["m"], n_resamples=100, clusters=one) == {"m": None}
    c = paired_comparison(ROWS[:10], [v + 1 for v in ROWS[:10]], n_resamples=100, clusters=one)
    assert c["diff"] == pytest.approx(-1.0) and c["diff_ci95"] is None and c["p_value"] is None
    assert c["n_clusters"] == 1 and "1 conversation: a conversation bootstrap needs at least 2" in c["note"]
    assert no_interval_reason(1) == c["note"].split(";")[0]


def test_singleton_clusters_give_the_row_bootstrap():
    """Rows without a conversation are their own: the interval is the row bootstrap's, bit for bit."""
    assert bootstrap_ci(ROWS, n_resamples=300, seed=3, clusters=[None] * 40) == bootstrap_ci(ROWS, n_resamples=300, seed=3)


def test_conversation_of_reads_the_id_or_the_clip_name():
    assert conversation_of({"conversation_id": "c7", "audio_path": "x.wav"}) == "c7"
    assert conversation_of({"audio_path": "a/V00_S2017_I00001160_P1273A_P2072A_0.wav"}) == "V00_S2017_I00001160"
    assert conversation_of({"audio_path": "a/clip.wav"}) is None


def test_holm_hand_computed():
    # sorted 0.01 (x4), 0.02 (x3), 0.03 (x2), 0.5 (x1): 0.04, 0.06, 0.06 (running max), 0.5; None is no test
    assert holm([0.03, None, 0.5, 0.01, 0.02]) == pytest.approx([0.06, None, 0.5, 0.04, 0.06])
    assert holm([None]) == [None]


def test_compare_runs_clusters_and_holm():
    """B is A + 0.5 on conversations 0-1 and A - 0.5 on 2-3 plus row noise: by rows the pairs look
    like 40 independent differences; by conversation there are 4 (two +0.5, two -0.5)."""
    rows_a = [{"audio_path": f"{LABELS[i]}_P1_P2_{i}.wav", "x": ROWS[i], "y": float(i % 2)} for i in range(40)]
    rows_b = [{"audio_path": r["audio_path"], "x": r["x"] + (0.5 if i < 20 else -0.5), "y": float(i % 2)}
              for i, r in enumerate(rows_a)]
    from spear_metrics.reports.runs import input_id

    comp = compare_runs(rows_a, rows_b, match=input_id, cluster=conversation_of, n_resamples=500)
    assert comp["bootstrap"]["unit"] == "conversation" and comp["n_clusters_common"] == 4
    e = comp["keys"]["x"]
    assert e["n"] == 40 and e["n_clusters"] == 4 and e["diff"] == pytest.approx(0.0)
    assert e["p_value"] is None and "4 conversations" in e["caution"]  # fewer than 10 conversations
    assert comp["keys"]["y"]["p_value"] == 1.0  # identical in every pair
    assert comp["keys"]["y"]["p_value_holm"] == 1.0
    rows = compare_runs(rows_a, rows_b, match=input_id, n_resamples=500)
    assert rows["bootstrap"]["unit"] == "row" and rows["keys"]["x"]["n_clusters"] == 40
    # clip names that name no conversation (the demo's): asked for conversations, rows are resampled and the
    # comparison says so, never "conversations" over clips
    anon_a = [{**r, "audio_path": f"clip{i}.wav"} for i, r in enumerate(rows_a)]
    anon_b = [{**r, "audio_path": f"clip{i}.wav"} for i, r in enumerate(rows_b)]
    anon = compare_runs(anon_a, anon_b, match=input_id, cluster=conversation_of, n_resamples=500)
    assert anon["bootstrap"]["unit"] == "row" and "n_clusters_common" not in anon
    assert anon["keys"]["x"]["n_clusters"] == 40 and any("rows resampled" in n for n in anon["notes"])


def _system(offset: float, noise_seed: int, conv_effect: np.ndarray) -> dict[str, float]:
    rng = np.random.default_rng(noise_seed)
    return {f"c{c}_{k}": float(conv_effect[c] + offset + rng.normal(0, 0.2)) for c in range(30) for k in range(3)}


def test_tie_groups_two_tied_one_not():
    """Three systems on 30 conversations x 3 rows sharing one conversation effect: A and B are
    the same system (offset 1.0) with independent row noise, C is 1.0 lower. A paired test
    removes the shared effect: B is tied with the best, C is not (its difference, -1.0, is 5 SD
    of the noise away from 0); C ranks 3rd in every resample."""
    effect = np.random.default_rng(0).normal(0, 3.0, 30)
    values = {"A": _system(1.0, 1, effect), "B": _system(1.0, 2, effect), "C": _system(0.0, 3, effect)}
    res = tie_groups(values, better="higher", cluster=lambda i: i.split("_")[0], n_resamples=1000, seed=0)
    best = res["best"]
    assert best in ("A", "B")
    other = "B" if best == "A" else "A"
    s = res["systems"]
    assert s[best]["mark"] == BEST_MARK and s[other]["tied"] and s[other]["mark"] == TIE_MARK
    assert s["C"]["tied"] is False and s["C"]["mark"] == "" and s["C"]["p_holm"] < 0.05
    assert s["C"]["rank_ci95"] == [3, 3] and s[best]["rank_ci95"][0] == 1 and s[other]["rank_ci95"][1] == 2
    assert s["C"]["n_shared"] == 30  # conversations, not rows
    assert "Holm" in res["rule"] and res["unit"] == "conversation"
    # lower is better: C is now the best and nobody is tied with it
    low = tie_groups(values, better="lower", cluster=lambda i: i.split("_")[0], n_resamples=500)
    assert low["best"] == "C" and not low["systems"]["A"]["tied"] and not low["systems"]["B"]["tied"]
    assert tie_groups(values, better="closer_to_human")["best"] is None  # no human value
    one = tie_groups(values, better="higher", cluster=lambda i: "c0", n_resamples=200)  # a single conversation
    assert all(v["rank_ci95"] is None for v in one["systems"].values()) and one["note"].startswith("1 conversation")
    assert all(v["tied"] for v in one["systems"].values())  # nobody can be told apart on one conversation
    # closer to a human value 0.9 below A/B's: C (1.0 below them) is 0.1 away, A and B 0.9 away. The
    # human value is fixed, so the systems' common level matters: with a conversation effect of
    # SD 3 that level is uncertain by 3 / sqrt(30) = 0.55 and nobody is distinguishable; with SD 0.1 C wins
    small = np.random.default_rng(0).normal(0, 0.1, 30)
    values = {"A": _system(1.0, 1, small), "B": _system(1.0, 2, small), "C": _system(0.0, 3, small)}
    target = float(np.mean(list(values["A"].values()))) - 0.9
    near = tie_groups(values, better="closer_to_human", target=target, cluster=lambda i: i.split("_")[0], n_resamples=500)
    assert near["best"] == "C" and not near["systems"]["A"]["tied"] and near["systems"]["C"]["rank_ci95"] == [1, 1]


def test_few_events_marks_rates_only():
    """interruptions_% is declared in %: 9 rows mark it, 10 do not; latency_ms (ms) is never marked."""
    s = {"interruptions_%": 20.0, "interruptions_%_n": 9, "latency_ms": 300.0, "latency_ms_n": 3}
    assert few_events(s, "interruptions_%") == "(few events: n = 9)"
    assert few_events({**s, "interruptions_%_n": 10}, "interruptions_%") == ""
    assert few_events(s, "latency_ms") == ""
    assert few_events({"x_rate": 0.5, "x_rate_n": 2}, "x_rate") == "(few events: n = 2)"


def test_leaderboard_marks_in_console_and_csv(tmp_path):
    """The demo's leaderboard with tie groups: latency_ms (lower is better) of three systems on
    30 conversations x 3 rows; fast and fast2 differ only by row noise, slow is 200 ms slower."""
    import csv

    from spear_metrics.commands.demo import leaderboard_text, write_leaderboard
    from spear_metrics.reports.runs import leaderboard_ties

    effect = np.random.default_rng(0).normal(0, 100.0, 30)

    def rows(offset: float, seed: int) -> list[dict]:
        rng = np.random.default_rng(seed)
        return [{"row": 3 * c + k, "audio_path": f"a/V00_S0001_I{c:08d}_P1_P2_{k}.wav", "status": "ok",
                 "latency_ms": float(500 + effect[c] + offset + rng.normal(0, 20))} for c in range(30) for k in range(3)]

    runs = {"fast": rows(0, 1), "fast2": rows(0, 2), "slow": rows(200, 3)}
    # latency_ms is "closer to human": no human value, no tie group
    assert leaderboard_ties(runs, ["latency_ms"], n_resamples=100) == {}
    # the human answers at 480 ms: fast and fast2 (~500 + mean effect) are nearest
    human = {"latency_ms": 480.0 + float(effect.mean())}
    ties = leaderboard_ties(runs, ["latency_ms"], n_resamples=500, human=human)
    t = ties["latency_ms"]
    assert t["best"] in ("fast", "fast2") and t["systems"]["slow"]["tied"] is False
    summaries = {n: {"latency_ms": float(np.mean([r["latency_ms"] for r in rs])), "latency_ms_n": 90}
                 for n, rs in runs.items()}
    cols = write_leaderboard(tmp_path / "leaderboard.csv", summaries, ties)
    assert "latency_ms" in cols and "latency_ms_tie" not in cols  # the value columns
    board = {r["model"]: r for r in csv.DictReader(open(tmp_path / "leaderboard.csv", encoding="utf-8"))}
    other = "fast2" if t["best"] == "fast" else "fast"
    assert board[t["best"]]["latency_ms_tie"] == "best" and board[other]["latency_ms_tie"] == "tied"
    assert board["slow"]["latency_ms_tie"] == "" and board["slow"]["latency_ms_rank_ci95"] == "3-3"
    text = leaderboard_text(cols, summaries, ties)
    line = next(x for x in text.splitlines() if x.startswith("latency_ms"))
    assert BEST_MARK in line and TIE_MARK in line and "rank 3" in line
    assert "tied with the best" in text  # the rule, stated once


def test_placed_onsets_are_not_ranked_on_onset_keys(tmp_path):
    """A cascade placed at the question end (0 ms) would be 'best' on latency_ms; on the keys
    computed from the onset, only systems whose onset is measured are ranked, each against its
    own rule: the two first_audio systems get their marks, the placed ones (question_end,
    fixed_delay) and the lone frame system show their rule; a key not computed from the onset
    (UTMOS) ranks everybody. The same rule through results_tie_cells (the Space's marks), with
    each dataset's onset rule read from its summary."""
    import csv
    from types import SimpleNamespace

    import pandas as pd

    from spear_metrics.commands.demo import leaderboard_text, write_leaderboard
    from spear_metrics.reports.runs import leaderboard_ties, results_tie_cells, tie_cell

    effect = np.random.default_rng(0).normal(0, 50.0, 30)

    def rows(latency: float, utmos: float, seed: int) -> list[dict]:
        rng = np.random.default_rng(seed)
        return [{"row": 3 * c + k, "audio_path": f"a/V00_S0001_I{c:08d}_P1_P2_{k}.wav", "status": "ok",
                 "latency_ms": float(latency + effect[c] + rng.normal(0, 20)), "UTMOS": float(utmos + rng.normal(0, 0.1))}
                for c in range(30) for k in range(3)]

    runs = {"cascade": rows(0, 3.0, 1), "fixed": rows(700, 3.5, 2), "rt_a": rows(500, 4.0, 3),
            "rt_b": rows(900, 2.5, 4), "moshi": rows(480, 2.0, 5)}
    kinds = {"cascade": "question_end", "fixed": "fixed_delay", "rt_a": "first_audio", "rt_b": "first_audio",
             "moshi": "frame"}
    human = {"latency_ms": 450.0, "UTMOS": 4.2}
    plain = leaderboard_ties(runs, ["latency_ms"], n_resamples=300, human=human)
    assert plain["latency_ms"]["best"] == "moshi"  # without the rule, systems of other rules are ranked together
    ties = leaderboard_ties(runs, ["latency_ms", "UTMOS"], n_resamples=300, human=human, onset_kinds=kinds)
    lat = ties["latency_ms"]
    assert lat["unranked"] == {"cascade": "question_end", "fixed": "fixed_delay", "moshi": "frame"}
    assert set(lat["systems"]) == {"rt_a", "rt_b"} and lat["best"] == "rt_a"
    assert lat["systems"]["rt_a"]["rank_ci95"] == [1, 1] and lat["systems"]["rt_b"]["rank_ci95"] == [2, 2]
    assert tie_cell(ties, "latency_ms", "cascade") == "[question_end]" and BEST_MARK in tie_cell(ties, "latency_ms", "rt_a")
    assert tie_cell(ties, "latency_ms", "moshi") == "[frame]"  # measured, but no other system shares its rule
    assert "unranked" not in ties["UTMOS"] and ties["UTMOS"]["best"] == "rt_a"  # not onset-derived: all ranked
    assert set(ties["UTMOS"]["systems"]) == set(runs)
    # the demo's console table and CSV
    summaries = {n: {"latency_ms": float(np.mean([r["latency_ms"] for r in rs])), "latency_ms_n": 90,
                     "UTMOS": float(np.mean([r["UTMOS"] for r in rs]))} for n, rs in runs.items()}
    cols = write_leaderboard(tmp_path / "leaderboard.csv", summaries, ties)
    board = {r["model"]: r for r in csv.DictReader(open(tmp_path / "leaderboard.csv", encoding="utf-8"))}
    assert board["cascade"]["latency_ms_tie"] == "not ranked: question_end onset"
    assert board["cascade"]["latency_ms_rank_ci95"] == "" and board["rt_a"]["latency_ms_tie"] == "best"
    text = leaderboard_text(cols, summaries, ties)
    line = next(x for x in text.splitlines() if x.startswith("latency_ms"))
    assert "[question_end]" in line and "[fixed_delay]" in line and line.count(BEST_MARK) == 1
    assert "ranks only systems whose onset is measured" in text
    # the Space's marks: the onset rule comes from each dataset's summary
    loaded = [SimpleNamespace(source=n, summary={"onset_kind": kinds[n]},
                              samples=pd.DataFrame(rs)) for n, rs in runs.items()]
    cells = results_tie_cells(loaded, ["latency_ms", "UTMOS"], n_resamples=300, human=human)
    assert cells["cascade"]["latency_ms"] == "[question_end]" and cells["fixed"]["latency_ms"] == "[fixed_delay]"
    assert cells["rt_a"]["latency_ms"].startswith(BEST_MARK) and cells["cascade"]["UTMOS"] != "[question_end]"
    # a dataset that states no rule is not ranked on latency either
    loaded[2] = SimpleNamespace(source="rt_a", summary={}, samples=pd.DataFrame(runs["rt_a"]))
    cells = results_tie_cells(loaded, ["latency_ms"], n_resamples=300, human=human)
    assert cells["rt_a"]["latency_ms"] == "[unstated]" and cells["rt_b"]["latency_ms"] == "[first_audio]"


def test_two_measured_onset_rules_are_ranked_apart_and_the_mark_names_its_rule():
    """Two systems per measured onset rule (first_audio, frame): each pair is ranked within its
    rule, so the key has two best systems, and each mark says among which rule it is best
    (never two bare ★ in one column)."""
    from spear_metrics.reports.runs import leaderboard_ties, tie_cell

    def rows(latency: float, seed: int) -> list[dict]:
        rng = np.random.default_rng(seed)
        return [{"audio_path": f"a/V00_S0001_I{c:08d}_P1_P2_{k}.wav", "status": "ok",
                 "latency_ms": float(latency + rng.normal(0, 20))} for c in range(30) for k in range(3)]

    runs = {"rt_a": rows(500, 1), "rt_b": rows(900, 2), "moshi_a": rows(480, 3), "moshi_b": rows(1000, 4)}
    kinds = {"rt_a": "first_audio", "rt_b": "first_audio", "moshi_a": "frame", "moshi_b": "frame"}
    ties = leaderboard_ties(runs, ["latency_ms"], n_resamples=300, human={"latency_ms": 450.0}, onset_kinds=kinds)
    lat = ties["latency_ms"]
    assert set(lat["groups"]) == {"first_audio", "frame"} and lat["unranked"] == {}
    assert lat["groups"]["first_audio"]["best"] == "rt_a" and lat["groups"]["frame"]["best"] == "moshi_a"
    assert tie_cell(ties, "latency_ms", "rt_a") == f"{BEST_MARK} rank 1 among first_audio"
    assert tie_cell(ties, "latency_ms", "moshi_a") == f"{BEST_MARK} rank 1 among frame"
    assert tie_cell(ties, "latency_ms", "moshi_b").endswith("among frame") and BEST_MARK not in tie_cell(ties, "latency_ms", "moshi_b")


def test_a_scored_folder_takes_its_conversations_from_the_metadata_it_scored(tmp_path):
    """per_sample.jsonl keeps no conversation_id: a scored folder's rows take it from the metadata
    CSV the run read (.work/run.json), row by row where the clip names agree, so a comparison
    resamples the conversations summary.json resampled even for clip names without SPEAR's id;
    a row whose metadata row names another clip keeps none (its clip name decides)."""
    import json

    from spear_metrics.reports.runs import load_run

    meta = tmp_path / "metadata.csv"
    meta.write_text("audio_path,context_end_time,question_end_time,conversation_id\n"
                    "call_a1.wav,1,2,callA\ncall_a2.wav,1,2,callA\ncall_b1.wav,1,2,callB\nother.wav,1,2,callC\n",
                    encoding="utf-8")
    res = tmp_path / "res"
    (res / ".work").mkdir(parents=True)
    (res / ".work" / "run.json").write_text(json.dumps({"metadata": str(meta)}), encoding="utf-8")
    (res / "summary.json").write_text("{}", encoding="utf-8")
    names = ["call_a1.wav", "call_a2.wav", "call_b1.wav", "renamed.wav"]
    (res / "per_sample.jsonl").write_text("".join(
        json.dumps({"row": i, "audio_path": f"/data/{n}", "answer_audio_path": None, "latency_ms": 100.0 * i,
                    "status": "ok", "error": None}) + "\n" for i, n in enumerate(names)), encoding="utf-8")
    rows = {r["row"]: r for r in load_run(res).rows}
    assert [conversation_of(rows[i]) for i in range(3)] == ["callA", "callA", "callB"]
    assert "conversation_id" not in rows[3] and conversation_of(rows[3]) is None  # other clip: not matched


def test_tie_groups_give_no_value_past_the_float_range_and_no_nan_target():
    """Per-row values whose mean leaves the float range (each finite, their sum not) give the system
    no value, not +-inf (which marked a 'best' and a 'tie' on infinities and made the result
    non-JSON); a NaN human target is no target. The result is JSON without NaN or inf either way."""
    import json

    ids = range(40)
    rows = {"A": {i: 1e308 for i in ids}, "B": {i: 1.0 + (i % 3) for i in ids}, "C": {i: 2.0 + (i % 5) for i in ids}}
    r = tie_groups(rows, better="higher", n_resamples=50)
    assert r["systems"]["A"]["value"] is None and r["systems"]["A"]["mark"] == ""
    assert r["best"] == "C"
    json.dumps(r, allow_nan=False)
    r = tie_groups({"A": rows["B"], "B": rows["C"]}, better="closer_to_human", target=float("nan"), n_resamples=50)
    assert r["target"] is None and r["best"] is None and "without a human value" in r["note"]
    json.dumps(r, allow_nan=False)
