"""SpeechRole scores are checked against the judge's 1-10 scale where they enter: in the judge's
reply (v1 and v2) and in a results folder read back. A score outside it (0, 11, -5, 1000, a
400-digit number) is a failed pair with its reason, never averaged and never an OverflowError."""

from __future__ import annotations

import json

import pytest

from spear_metrics.speechrole.aggregate import aggregate_rows, read_judge_results
from spear_metrics.speechrole.protocol import ASPECTS, parse_v1, parse_v2

HUGE = int("9" * 400)


@pytest.mark.parametrize("a,b", [(0, 5), (11, 3), (5, 1000), (HUGE, 4)])
def test_v1_reply_outside_the_scale_is_unparsed(a, b):
    with pytest.raises(ValueError, match="outside the judge's 1-10 scale"):
        parse_v1(f"Fine. [Scores]: ({a}, {b})")
    assert parse_v1("Fine. [Scores]: (1, 10)")["score"] == [1, 10]


@pytest.mark.parametrize("bad", [0, 11, -5, 1000, HUGE, "-5"])
def test_v2_reply_outside_the_scale_is_unparsed(bad):
    reply = {a: {"reason": "r", "score_a": 7, "score_b": 8} for a in ASPECTS}
    assert parse_v2(json.dumps(reply))[ASPECTS[0]]["score"] == [7, 8]
    reply[ASPECTS[2]]["score_b"] = bad
    with pytest.raises(ValueError, match=f"{ASPECTS[2]} score_b"):
        parse_v2(json.dumps(reply))


def test_results_folder_scores_outside_the_scale_fail_their_pair(tmp_path):
    """Dialogue 0: all aspects (3, 6); dialogue 1: (9, 4) except the first aspect, whose pairs
    across dialogues 2-6 are (0, 5), (11, 3), (-5, 4), (1000, 2), (HUGE, 3): only the in-scale
    pairs enter the means (first aspect: A = (3 + 9) / 2 = 6, B = (6 + 4) / 2 = 5); the others are
    unparsed with the scale named; nothing raises."""
    first = ASPECTS[0]
    bad = [[0, 5], [11, 3], [-5, 4], [1000, 2], [HUGE, 3]]
    objs = [{"idx": 0, **{f"{a}_results": {"reason": "r", "score": [3, 6]} for a in ASPECTS}},
            {"idx": 1, **{f"{a}_results": {"reason": "r", "score": [9, 4]} for a in ASPECTS}}]
    for k, pair in enumerate(bad, start=2):
        objs.append({"idx": k, f"{first}_results": {"reason": "r", "score": pair}})
    (tmp_path / "single").mkdir()
    (tmp_path / "single" / "role.json").write_text(json.dumps(objs), encoding="utf-8")
    rows, _ = read_judge_results(tmp_path)
    by = {r["dialogue"]: r for r in rows}
    for k in range(2, 7):
        assert by[k][f"{first}_status"] == "unparsed" and by[k][f"{first}_A"] is None
        assert "outside the judge's 1-10 scale" in by[k][f"{first}_error"], by[k][f"{first}_error"]
        assert by[k]["status"] == "failed"
    assert "400 digits" in by[6][f"{first}_error"] and len(by[6][f"{first}_error"]) < 200
    summary = aggregate_rows(rows, n_resamples=20, seed=0)
    assert summary[f"overall_{first}_mean_A"] == pytest.approx(6.0)
    assert summary[f"overall_{first}_mean_B"] == pytest.approx(5.0)
