"""Tie marks (★ best, ≈ tied with the best) and rank intervals on the leaderboards of the other
benchmarks: Full-Duplex-Bench v1.0 (Space table and the release's leaderboard.md), v1.5, v2,
SpeechRole-Eval and Dynamic-SUPERB, from hand-built per-sample rows of three systems.

The construction, in every test: system A; system B holds A's values with pairs of samples
swapped (or the same values with a +d / -d alternation), so its value is A's and its paired
differences are symmetric around 0 (no test can tell them apart: the one with the better value by
float rounding is ★, the other ≈); system C is worse on every shared sample by a fixed amount (its
paired differences all have one sign: p at the bootstrap's floor, no mark, rank 3 in every
resample)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from spear_metrics.core.ties import BEST_MARK, TIE_MARK
from spear_metrics.results.load import Results


def _results(name: str, summary: dict, rows: list[dict]) -> Results:
    return Results(source=f"local:{name}", model=name, inference_mode=None, open_weights=None, summary=summary,
                   samples=pd.DataFrame(rows))


def _marks(cells: dict[str, str]) -> dict[str, str]:
    """system -> its mark: ★, ≈ or "" (the first word of the marks after the value)."""
    return {n: BEST_MARK if BEST_MARK in c else TIE_MARK if TIE_MARK in c else "" for n, c in cells.items()}


def _assert_two_tied_one_not(cells: dict[str, str]) -> None:
    marks = _marks(cells)
    assert sorted(marks[n] for n in ("A", "B")) == sorted([BEST_MARK, TIE_MARK]), cells
    assert marks["C"] == "" and "rank 3" in cells["C"], cells
    best = "A" if marks["A"] == BEST_MARK else "B"
    assert "rank 1" in cells[best] and "rank 1-2" in cells["B" if best == "A" else "A"], cells


# ----------------------------------------------------------------------------- FDB v1.0

N_FDB = 80


def _fdb_rows(system: str, n: int = N_FDB) -> list[dict]:
    """smooth_turn_taking rows: A takes the turn except on every 4th sample (i % 4 == 3); B on
    the same pairs swapped (misses i % 4 == 2); C takes it on even samples only. Latency (only
    where the turn was taken, as FDB): A 0.3 + 0.01 (i % 7) s; B A's +- 0.05 s alternating every
    4 samples; C A's + 0.8 s."""
    rows = []
    for i in range(n):
        tor = {"A": int(i % 4 != 3), "B": int(i % 4 != 2), "C": int(i % 2 == 0)}[system]
        lat = 0.3 + 0.01 * (i % 7) + {"A": 0.0, "B": 0.05 if (i // 4) % 2 == 0 else -0.05, "C": 0.8}[system]
        rows.append({"row": i, "id": str(i), "task": "smooth_turn_taking", "status": "ok", "error": None,
                     "tor": tor, "latency_s": lat if tor else None})
    return rows


def _fdb_results(system: str, n: int = N_FDB, task: str = "smooth_turn_taking", name: str | None = None) -> Results:
    from spear_metrics.full_duplex.definition import aggregate

    rows = [dict(r, task=task) for r in _fdb_rows(system, n)]
    summary = {"metrics": ["full_duplex"], "task": task, "n_samples": n, "n_scored": n, "n_failed": 0,
               **aggregate(task, rows, n_resamples=0)}
    return _results(name or system, summary, rows)


def test_fdb_v1_space_table_marks_ties_and_rank_intervals():
    from spear_metrics.full_duplex.results import leaderboard_frame

    other_task = _fdb_results("A", 8, task="pause_handling", name="D")  # alone in its task: no tie group, few events
    frame = leaderboard_frame([_fdb_results(s) for s in "ABC"] + [other_task])
    by = {m: r for m, r in zip(frame["model"], frame.to_dict("records"))}
    for key in ("tor", "latency_s"):  # tor: higher is better in turn-taking; latency: lower
        _assert_two_tied_one_not({n: by[n][key] for n in "ABC"})
    # C's take-over rate is 0.5: the value comes first, then its marks
    assert by["C"]["tor"].startswith("0.500") and by["A"]["tor"].startswith("0.750")
    assert by["A"]["relevance"] == "-"  # not a key of the task
    # pause handling: one dataset, no mark; its take-over rate over 8 samples is marked as resting on few events
    assert BEST_MARK not in by["D"]["tor"] and "rank" not in by["D"]["tor"]
    assert by["D"]["tor"].endswith("(few events: n = 8)") and "few events" not in by["A"]["tor"]
    assert "few events" not in by["D"]["latency_s"]  # a latency is not a rate


def test_fdb_v1_pause_handling_lower_tor_is_better_and_only_shared_samples_count():
    """pause handling: the model should keep quiet, so the LOWEST take-over rate is ★; a system
    that scored fewer samples is compared on the samples every system scored (the rule says how many)."""
    from spear_metrics.full_duplex.results import tie_spec
    from spear_metrics.reports.runs import leaderboard_ties

    rows = {s: _fdb_rows(s) for s in "ABC"}
    rows["A"] = rows["A"][:60]  # A scored 60 of the 80 samples
    ties = leaderboard_ties(rows, ["tor"], spec=tie_spec("pause_handling"), n_resamples=500)["tor"]
    assert ties["best"] == "C" and ties["n_common"] == 60 and "(60 rows)" in ties["rule"]
    assert not ties["systems"]["A"]["tied"]  # A takes over on 15 of the 60 where C keeps quiet, never the reverse
    assert ties["systems"]["C"]["value"] == pytest.approx(0.5) and ties["unit"] == "sample"


def test_fdb_release_leaderboard_md_marks(tmp_path):
    """The release's leaderboard.md over three runs: each column's cells carry ★ / ≈ / rank, the
    rule is written under the table, and a take-over rate over 5 samples is marked."""
    from spear_metrics.full_duplex.runs import RELEASE_COLUMNS, RELEASE_PROTOCOL, write_leaderboard

    for s in "ABC":
        rows = [dict(r, category="candor_turn_taking", stimulus=f"candor_turn_taking/{r['id']}") for r in _fdb_rows(s)]
        rows += [dict(r, category="synthetic_pause_handling", stimulus=f"synthetic_pause_handling/{r['id']}",
                      latency_s=None) for r in _fdb_rows(s, 5)]
        tt = [r for r in rows if r["category"] == "candor_turn_taking"]
        pause = [r for r in rows if r["category"] == "synthetic_pause_handling"]
        summary = {"protocol": RELEASE_PROTOCOL, "run": f"run{s}", "label": s, "compat": "none",
                   "n_samples": len(rows), "n_failed": 0,
                   "turn_taking_tor": sum(r["tor"] for r in tt) / len(tt), "turn_taking_tor_n": len(tt),
                   "pause_tor_synthetic": sum(r["tor"] for r in pause) / len(pause), "pause_tor_synthetic_n": 5}
        (tmp_path / f"run{s}").mkdir()
        (tmp_path / f"run{s}" / "summary.json").write_text(json.dumps(summary))
        (tmp_path / f"run{s}" / "per_sample.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # a run folder whose summary.json is a FIFO (a plain read blocks for ever) or nested past the parser's depth
    # (RecursionError) is skipped, not a hang or a crash
    import os

    (tmp_path / "runF").mkdir()
    os.mkfifo(tmp_path / "runF" / "summary.json")
    (tmp_path / "runN").mkdir()
    (tmp_path / "runN" / "summary.json").write_text("[" * 100_000)
    text = write_leaderboard(tmp_path).read_text(encoding="utf-8")
    lines = {ln.split(" | ")[1]: ln.split(" | ") for ln in text.splitlines() if ln.startswith("| run")}
    assert set(lines) == {"model", "A", "B", "C"}  # the header and the three runs, nothing of runF or runN
    col = 2 + list(RELEASE_COLUMNS).index("turn_taking_tor")
    _assert_two_tied_one_not({n: lines[n][col] for n in "ABC"})
    pause = 2 + list(RELEASE_COLUMNS).index("pause_tor_synthetic")
    assert all(lines[n][pause].endswith("(few events: n = 5)") for n in "ABC")
    assert "Tie marks: ★ best" in text and "turn_taking_tor 80" in text


# ----------------------------------------------------------------------------- FDB v1.5 and v2


def test_fdb_v15_table_marks_the_latencies():
    from spear_metrics.full_duplex_v15.results import NAME, leaderboard_frame

    data = []
    for s in "ABC":
        # stop latency: A 0.4 + 0.01 (i % 5) s; B A's +- 0.05 s alternating every 4 samples; C A's + 0.8 s
        rows = [{"row": i, "id": str(i), "subset": "background_speech", "status": "ok", "response_latency_s": None,
                 "stop_latency_s": 0.4 + 0.01 * (i % 5) + {"A": 0.0, "B": 0.05 if (i // 4) % 2 == 0 else -0.05,
                                                             "C": 0.8}[s]} for i in range(40)]
        vals = [r["stop_latency_s"] for r in rows]
        summary = {"benchmark": NAME, "n_samples": 40, "stop_latency_s": sum(vals) / 40, "stop_latency_s_n": 40,
                   "C_RESPOND": 0.5, "C_RESPOND_n": 4}
        data.append(_results(s, summary, rows))
    frame = leaderboard_frame(data)
    by = {m: r for m, r in zip(frame["model"], frame.to_dict("records"))}
    _assert_two_tied_one_not({n: by[n]["stop_latency_s"] for n in "ABC"})
    assert by["A"]["response_latency_s"] == "-"
    # a tag share (no better direction: no mark) over 4 judged samples rests on few events
    assert by["A"]["C_RESPOND"] == "0.500 (few events: n = 4)"


def test_fdb_v2_table_marks_each_split():
    from spear_metrics.full_duplex_v2.results import NAME, SPLIT_KEYS, leaderboard_frame

    data = []
    for s in "ABC":
        rows = []
        for i in range(30):  # 30 conversations: 20 Correction, 10 Daily
            a = 2 + (i % 4)
            tt = {"A": a, "B": {0: 3, 1: 2, 2: 5, 3: 4}[i % 4], "C": a - 1}[s]  # B: A's pairs (0,1), (2,3) swapped
            rows.append({"row": i, "id": f"task{i}", "split": "Correction" if i < 20 else "Daily", "status": "ok",
                         "avg_turn_taking": tt, "avg_instruction_following": None, "avg_task_specific": None})

        def cell(rs):
            vals = [r["avg_turn_taking"] for r in rs]
            return {"n_conversations": len(rs), "avg_turn_taking": {"mean": sum(vals) / len(vals), "n": len(vals),
                                                                     "ci95": None},
                    **{k: {"mean": None, "n": 0, "ci95": None} for k in SPLIT_KEYS[1:]}}

        splits = {"all": cell(rows), "Correction": cell(rows[:20]), "Daily": cell(rows[20:])}
        data.append(_results(s, {"benchmark": NAME, "n_samples": 30, "splits": splits}, rows))
    frame = leaderboard_frame(data)
    for split in ("all", "Correction", "Daily"):
        sel = frame[frame["split"] == split]
        _assert_two_tied_one_not(dict(zip(sel["model"], sel["avg_turn_taking"])))
    assert set(frame["avg_instruction_following"]) == {"-"}


# ----------------------------------------------------------------------------- SpeechRole-Eval


def _speechrole_results(system: str) -> Results:
    """Two roles x 10 single-mode dialogues, eight aspects; the reference (Model B) always 8. A:
    2 + (d % 5) + (aspect % 2); B: A's scores of dialogues (0,1), (2,3)... swapped within the
    role (same sums per role); C: A's minus 1."""
    from spear_metrics.speechrole.aggregate import aggregate_rows
    from spear_metrics.speechrole.protocol import ASPECTS

    rows = []
    for role in ("Holmes", "Shrek"):
        for d in range(10):
            src = d ^ 1 if system == "B" else d
            r = {"row": len(rows), "mode": "single", "role": role, "dialogue": d, "status": "ok", "error": None}
            for j, a in enumerate(ASPECTS):
                r[f"{a}_A"] = 2 + (src % 5) + (j % 2) - (1 if system == "C" else 0)
                r[f"{a}_B"] = 8
                r[f"{a}_status"] = "scored"
                r[f"{a}_error"] = None
            rows.append(r)
    summary = {"benchmark": "speechrole", "judge_model": "judge-x", "protocol": "v1", "n_samples": len(rows),
               **aggregate_rows(rows, n_resamples=0)}
    return _results(system, summary, rows)


def test_speechrole_table_marks_ratios_by_dialogue_within_role():
    from spear_metrics.speechrole.results import leaderboard_frame, tie_spec
    from spear_metrics.reports.runs import leaderboard_ties, results_rows

    data = [_speechrole_results(s) for s in "ABC"]
    frame = leaderboard_frame(data, "single")
    by = {m: r for m, r in zip(frame["model"], frame.to_dict("records"))}
    for col in ("all_aspects · 100·ΣA/ΣB", "Speech_Fluency · 100·ΣA/ΣB"):
        _assert_two_tied_one_not({n: by[n][col] for n in "ABC"})
    # the value shown is the summary's 100 x sum(A) / sum(B), then the marks
    assert by["A"]["all_aspects · 100·ΣA/ΣB"].startswith(
        f"{data[0].summary['single_all_aspects_ratio_100_sumA_over_sumB']:.1f}")
    # the test's value is the same ratio of sums, and the rule names the role strata
    spec = tie_spec()
    t = leaderboard_ties(results_rows(data, (), spec), ["single_all_aspects_ratio_100_sumA_over_sumB"],
                         spec=spec, n_resamples=200)["single_all_aspects_ratio_100_sumA_over_sumB"]
    assert t["systems"]["local:C"]["value"] == pytest.approx(data[2].summary["single_all_aspects_ratio_100_sumA_over_sumB"])
    assert t["unit"] == "dialogue" and "drawn within their role" in t["rule"] and t["systems"]["local:C"]["n_shared"] == 20
    # no multi-mode dialogue: nothing to mark
    multi = leaderboard_frame(data, "multi")
    assert not any(BEST_MARK in str(v) or TIE_MARK in str(v) for v in multi.to_numpy().ravel())


# ----------------------------------------------------------------------------- Dynamic-SUPERB


def test_dsuperb_table_marks_task_keys_and_overall_means():
    from spear_metrics.dynamic_superb.results import BENCHMARK, leaderboard_frame
    from spear_metrics.dynamic_superb.scoring import aggregate_task

    tasks_of = {"ClsTask": "llm_classification", "AsrTask": "word_error_rate"}
    data = []
    for s in "ABC":
        rows = []
        for i in range(30):
            a = int(i % 3 != 0)  # A right on 2 of 3 rows; B the same with rows (0,1), (3,4)... swapped; C never
            acc = {"A": a, "B": int((i ^ 1) % 3 != 0), "C": 0}[s]
            rows.append({"row": len(rows), "instance": "ClsTask", "file": f"c{i}", "status": "ok", "judge_accuracy": acc})
        for i in range(30):  # 10 reference words each; A 1 edit on odd rows, B on even rows, C 5 edits each
            e = {"A": i % 2, "B": 1 - i % 2, "C": 5}[s]
            rows.append({"row": len(rows), "instance": "AsrTask", "file": f"a{i}", "status": "ok", "WER_edits": e,
                         "WER_ref_tokens": 10})
        tasks = {inst: aggregate_task(m, [r for r in rows if r["instance"] == inst], 30, n_resamples=0)
                 for inst, m in tasks_of.items()}
        overall = {"judge_accuracy": {"mean": tasks["ClsTask"]["judge_accuracy"], "n_tasks": 1},
                   "WER": {"mean": tasks["AsrTask"]["WER"], "n_tasks": 1}}
        data.append(_results(s, {"benchmark": BENCHMARK, "tasks": tasks, "overall": overall, "judge": {}}, rows))
    frame = leaderboard_frame(data)
    by = {m: r for m, r in zip(frame["model"], frame.to_dict("records"))}
    for col in ("ClsTask (judge_accuracy)", "AsrTask (WER)"):
        _assert_two_tied_one_not({n: by[n][col] for n in "ABC"})
    assert by["C"]["AsrTask (WER)"].startswith("0.500") and by["A"]["AsrTask (WER)"].startswith("0.050")
    # one instance per key: the overall means are compared on 1 instance, too few to tell anyone apart
    assert all(TIE_MARK in by[n]["mean WER (1 tasks)"] or BEST_MARK in by[n]["mean WER (1 tasks)"] for n in "ABC")
    assert all("rank" not in by[n]["mean WER (1 tasks)"] for n in "ABC")  # 1 instance: no rank interval


def test_space_marks_legend_states_the_rules_it_applies():
    """Every Space tab explains its marks with the rules the tables use: the tie rule of
    core.stats (its significance level), the few-events threshold and the onset note."""
    from spear_metrics.core.stats import ALPHA, FEW_EVENTS
    from spear_metrics.reports.runs import ONSET_TIE_NOTE
    from spear_metrics.space.tables import marks_markdown

    text = marks_markdown()
    assert "★ best" in text and "≈ tied with the best" in text
    assert f"p >= {ALPHA:g}" in text and f"fewer than {FEW_EVENTS} events" in text
    assert ONSET_TIE_NOTE in text
