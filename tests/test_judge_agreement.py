"""``spearbench judge-agreement``: agreement statistics on hand-computed cases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spear_metrics.core.agreement import AgreementError, agreement, categorical_stats, score_stats

A = ["yes", "yes", "no", "no", "yes", "no", "yes", "yes", "no", "no"]
B = ["yes", "no", "no", "no", "yes", "no", "yes", "yes", "yes", "no"]


def test_kappa_and_agreement_by_hand():
    st = categorical_stats(A, B, n_resamples=200, seed=0)
    # items 1 and 8 differ: p_o = 8/10; both judges say yes 5 times in 10: p_e = .5*.5 + .5*.5 = .5
    assert st["agreement_%"] == pytest.approx(80.0)
    assert st["cohen_kappa"] == pytest.approx((0.8 - 0.5) / (1 - 0.5))
    lo, hi = st["cohen_kappa_ci95"]
    assert lo <= st["cohen_kappa"] <= hi
    # one label everywhere on both sides: p_e = 1, kappa does not exist
    one = categorical_stats(["yes"] * 4, ["yes"] * 4, n_resamples=0)
    assert one["cohen_kappa"] is None and one["cohen_kappa_note"].startswith("both judges gave every item the one label 'yes'")
    assert "cohen_kappa_note" not in st


def test_correlations_by_hand():
    st = score_stats([1, 2, 3], [1, 3, 2], n_resamples=0)
    # ranks are the values: d = (0, 1, 1), rho = 1 - 6*2 / (3*(9-1)) = 0.5; Pearson of the same = 0.5
    assert st["spearman"] == pytest.approx(0.5) and st["pearson"] == pytest.approx(0.5)
    assert st["exact_agreement_%"] == pytest.approx(100 / 3)
    rev = score_stats([1, 2, 3, 4], [8, 6, 4, 2], n_resamples=0)
    assert rev["spearman"] == pytest.approx(-1.0) and rev["pearson"] == pytest.approx(-1.0)
    flat = score_stats([5, 5, 5], [1, 2, 3], n_resamples=0)  # a constant side
    assert flat["pearson"] is None and flat["pearson_note"] == "one judge gave every item the same score: a correlation does not exist"
    assert score_stats([4], [2], n_resamples=0)["spearman_note"].startswith("fewer than 2 items")
    assert "pearson_note" not in st


def _run(folder: Path, verdicts, relevance=None) -> Path:
    folder.mkdir()
    rows = []
    for k, v in enumerate(verdicts):
        r = {"row": k, "instance": "SpeechDetection_LJSpeech", "file": f"f{k}", "status": "ok", "judge_verdict": v}
        rows.append(r)
    rows.append({"row": len(rows), "instance": "SpeechDetection_LJSpeech", "file": "bad", "status": "failed",
                 "judge_verdict": None, "error": "judge: HTTP 500"})
    (folder / "per_sample.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_cli_on_two_runs(tmp_path, capsys):
    from spear_metrics.cli import main

    a = _run(tmp_path / "a", A)
    b = _run(tmp_path / "b", B[:9])  # the last item judged only by A
    out = tmp_path / "agree.json"
    assert main(["judge-agreement", str(a), str(b), "--bootstrap", "100", "--out", str(out)]) == 0
    res = json.loads(out.read_text())["fields"]["judge_verdict"]
    # 9 common items, item 1 and item 8 differ: 7/9
    assert res["n_items"] == 9 and res["n_only_a"] == 1 and res["agreement_%"] == pytest.approx(700 / 9)
    assert [d["item"] for d in res["disagreements"]] == ["SpeechDetection_LJSpeech/f1", "SpeechDetection_LJSpeech/f8"]
    printed = capsys.readouterr().out
    assert "2 item(s) disagree" in printed and "cohen_kappa" in printed
    with pytest.raises(AgreementError, match="not judged in both"):
        agreement(a, b, fields=["relevance"])
    assert main(["judge-agreement", str(a), str(tmp_path / "nowhere")]) == 2
    # a '-' says why on the console: both judges said "yes" to every item
    same = _run(tmp_path / "same", ["yes"] * 3)
    same_b = _run(tmp_path / "same_b", ["yes"] * 3)
    capsys.readouterr()
    assert main(["judge-agreement", str(same), str(same_b), "--bootstrap", "0"]) == 0
    kappa = next(ln for ln in capsys.readouterr().out.splitlines() if "cohen_kappa" in ln)
    assert kappa.split()[:2] == ["cohen_kappa", "-"] and "the one label 'yes'" in kappa


def test_fdb_v15_behaviour_tags_by_subset_and_id(tmp_path):
    """FDB v1.5 rows (``subset``, ``id``, ``behaviour`` a list of tags): items joined on subset/id
    whatever the row order, a tag list compared as one label."""
    def run(folder: Path, rows) -> Path:
        folder.mkdir()
        (folder / "per_sample.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return folder

    a = run(tmp_path / "a", [{"row": 0, "subset": "user_interruption", "id": "1", "status": "ok", "behaviour": ["C_RESPOND"]},
                             {"row": 1, "subset": "user_interruption", "id": "2", "status": "ok", "behaviour": ["C_RESUME"]},
                             {"row": 2, "subset": "background_speech", "id": "1", "status": "ok", "behaviour": ["C_RESUME"]}])
    # B scored the subsets in another order: rows differ, items are the same
    b = run(tmp_path / "b", [{"row": 0, "subset": "background_speech", "id": "1", "status": "ok", "behaviour": ["C_RESUME"]},
                             {"row": 1, "subset": "user_interruption", "id": "1", "status": "ok", "behaviour": ["C_RESPOND"]},
                             {"row": 2, "subset": "user_interruption", "id": "2", "status": "ok", "behaviour": ["C_RESPOND"]}])
    res = agreement(a, b, n_resamples=0)["fields"]["behaviour"]
    # 3 common items, user_interruption/2 differs: 2/3
    assert res["kind"] == "categorical" and res["n_items"] == 3 and res["agreement_%"] == pytest.approx(200 / 3)
    assert res["disagreements"] == [{"item": "user_interruption/2", "a": "c_resume", "b": "c_respond"}]


def test_runs_of_different_items_or_a_line_nested_too_deeply_are_refused(tmp_path, capsys):
    """Two runs judging no common item give no statistic: exit 2 with one line (not empty
    statistics and exit 0); a per_sample line nested deeper than the JSON parser's recursion limit
    is 'not JSON', not a traceback."""
    from spear_metrics.cli import main

    a = _run(tmp_path / "a", ["yes", "no"])
    b = tmp_path / "b"
    b.mkdir()
    (b / "per_sample.jsonl").write_text(json.dumps({"instance": "Other", "file": "f0", "judge_verdict": "yes"}) + "\n")
    assert main(["judge-agreement", str(a), str(b), "--bootstrap", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no item judged in both runs" in err and len(err.splitlines()) == 1
    (b / "per_sample.jsonl").write_text("[" * 100_000 + "\n")
    with pytest.raises(AgreementError, match="line 1 is not JSON"):
        agreement(a, b)


def test_nan_and_empty_judgements_are_counted_never_compared(tmp_path, capsys):
    """A verdict of NaN (JSON NaN) was compared as the label 'nan' (two runs with NaN on the same
    item 'agreed'); an empty verdict as the label ''. Neither is a judgement: left out of the
    statistics and counted per run. A: yes, NaN, no, ""; B: yes, NaN, yes, no -> the pairs
    (yes, yes), (no, yes): 1 of 2 agree, 50 %."""
    from spear_metrics.cli import main

    a = _run(tmp_path / "a", ["yes", float("nan"), "no", ""])
    b = _run(tmp_path / "b", ["yes", float("nan"), "yes", "no"])
    res = agreement(a, b, n_resamples=0)["fields"]["judge_verdict"]
    assert res["n_items"] == 2 and res["agreement_%"] == pytest.approx(50.0)
    assert res["n_unusable_a"] == 2 and res["n_unusable_b"] == 1
    assert main(["judge-agreement", str(a), str(b), "--bootstrap", "0"]) == 0
    assert "no judgement (NaN, inf, empty) in 2 row(s) of A, 1 of B" in capsys.readouterr().out
