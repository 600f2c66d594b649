"""Side-by-side checks of upstream-named keys: each test re-states an upstream rule as read in the
benchmark's own code (file and function named in the test) and runs the project's code on the
same inputs. Where upstream computes a quirk, the re-statement keeps it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from spear_metrics.full_duplex_v15 import significance as sg


# ----------------------------------------------------------------------------- FDB v1.5 significance_test.py


def _upstream_holm(pvals):
    """statsmodels.stats.multitest.multipletests(pvals, method="holm")[1] as upstream's
    run_batch_tests calls it (read in statsmodels 0.14.4 multitest.py): argsort (NaN last), times
    arange(m, 0, -1) with m = len(pvals), maximum.accumulate, clipped at 1, back in input order."""
    p = np.asarray(pvals, dtype=float)
    order = np.argsort(p)
    ps = p[order]
    adj = np.maximum.accumulate(ps * np.arange(len(p), 0, -1))
    adj[adj > 1] = 1
    out = np.empty_like(adj)
    out[order] = adj
    return out


@pytest.mark.parametrize("pvals", [
    [0.01, 0.04, 0.03],
    [0.01, float("nan"), 0.04],                       # a test whose differences were all 0
    [float("nan"), 0.002, float("nan"), 0.3, 0.02],
    [0.5, 0.9],
    [0.0, 0.01, 0.01, 0.2],
])
def test_holm_equals_upstreams_multipletests(pvals):
    ours, theirs = sg.holm(pvals), _upstream_holm(pvals)
    assert np.array_equal(np.isnan(ours), np.isnan(theirs))
    assert np.asarray(ours)[~np.isnan(theirs)] == pytest.approx(theirs[~np.isnan(theirs)])


def _upstream_paired_compare(before, after, k=3.5, alpha=0.05):
    """significance_test.py ``paired_compare`` with its defaults (mad on diff), re-stated."""
    from scipy import stats

    b, a = np.asarray(before, float), np.asarray(after, float)
    m = ~np.isnan(b) & ~np.isnan(a)
    b0, a0 = b[m], a[m]
    vals = a0 - b0
    med = np.median(vals)
    mad = np.median(np.abs(vals - med))
    scale = 1.4826 * mad if mad > 0 else 0.0
    keep = np.ones(b0.size, bool) if scale == 0 else (vals >= med - k * scale) & (vals <= med + k * scale)
    b1, a1 = b0[keep], a0[keep]
    d = a1 - b1
    sd = d.std(ddof=1)
    t, p = stats.ttest_rel(a1, b1)
    return {"t": t, "p_t": p, "mean_diff": d.mean(), "cohen_dz": d.mean() / sd if sd > 0 else np.nan,
            "n_used": b1.size}


def _upstream_conclusion(name, r, mean_b, mean_a, ci):
    """significance_test.py ``format_conclusion`` (no trimming), re-stated."""
    md = r["mean_diff"]
    dir_en = "increased" if md > 0 else "decreased" if md < 0 else "did not change"
    p = r["p_t"]
    fp = "--" if p is None or np.isnan(p) else ("<.001" if p < 0.001 else f"{p:.3f}")
    sig = "a statistically reliable" if p < 0.05 else "no statistically reliable"
    return (f"{name}: {sig} change was observed; After {dir_en} relative to Before (M_before={mean_b:.2f}, "
            f"M_after={mean_a:.2f}, Δ={md:.2f}, 95% CI [{ci[0]:.2f}, {ci[1]:.2f}]; paired t({r['n_used'] - 1})="
            f"{r['t']:.2f}, p={fp}, d_z={r['cohen_dz']:.2f}).")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_two_identical_samples_give_upstreams_infinite_t_and_a_project_note():
    """Two C_RESPOND samples with the same pre and post wpm: the differences are equal, sd 0.
    Upstream's code (scipy ttest_rel) gives t = -inf, p = 0 and prints 'a statistically reliable
    change'; the project keeps those numbers and that line and adds its own note beside them."""
    pre, post = [150.0, 150.0], [120.0, 120.0]
    up = _upstream_paired_compare(pre, post)
    ours = sg.paired_compare(pre, post)
    assert up["t"] == -math.inf and up["p_t"] == 0.0 and np.isnan(up["cohen_dz"])
    assert ours["t"] == up["t"] and ours["p_t"] == up["p_t"] and ours["cohen_dz"] is None
    line = sg.conclusion({"pair": "pre_vs_post", "metric": "wpm", **ours})
    assert line == _upstream_conclusion("pre_vs_post:wpm", up, 150.0, 120.0, (ours["ci95_low"], ours["ci95_high"]))
    assert "paired t(1)=-inf, p=<.001" in line and "a statistically reliable change" in line
    assert ours["note"].startswith("project note: the 2 differences are all equal")
    # all-zero differences: NaN t and p upstream ("no statistically reliable", p=--); the note says so
    same = sg.paired_compare([150.0, 140.0], [150.0, 140.0])
    up0 = _upstream_paired_compare([150.0, 140.0], [150.0, 140.0])
    assert np.isnan(up0["p_t"]) and np.isnan(same["p_t"]) and np.isnan(same["t"])
    assert "no statistically reliable" in sg.conclusion({"pair": "pre_vs_post", "metric": "wpm", **same})
    assert "all 0" in same["note"]
    # an ordinary test carries no note
    assert sg.paired_compare([1, 2, 3, 4], [2, 4, 5, 9])["note"] is None


# ----------------------------------------------------------------------------- FDB v2 scoring/parse.py + score.py


_V2_JSON_REPLY = """Here is my rating.
```json
{"Turn-taking event and score": [
  [[0, 10], 9, 3.7],
  [{"start": 12, "end": 14}, "4", "null"],
  [[20, 22], [24, 26], 2, 5],
  [{30, 33}, 0, 1],
  [["1:00", "1:04"], 5, 5],
  [[50, 40], 3, 3]
], "Task-specific score": 4.5}
```"""


def test_v2_published_keys_follow_upstreams_parse_and_score():
    """Upstream's rules, read in parse.py (flatten_turn_taking, normalize_intervals_text,
    coerce_int) and score.py / score_time.py, applied by hand to a reply with every quirk:
    9 and 0 count (no range check); 3.7 -> 3 (int(float(x))); "4" -> 4 but "null" -> None, so
    that event is not counted (score.py wants two numbers); two intervals in one entry give two
    events; {"start", "end"} and {30, 33} are read as [s, e]; "1:00" is 60 s; [50, 40] counts in
    the means (score.py checks no time) but not in the bins (score_time.py skips end <= start);
    the JSON task score 4.5 is taken as it is (not coerced)."""
    from spear_metrics.full_duplex_v2.parse import parse_reply
    from spear_metrics.full_duplex_v2.score import task_scores

    counted = [(0.0, 10.0, 9, 3), (20.0, 22.0, 2, 5), (24.0, 26.0, 2, 5), (30.0, 33.0, 0, 1), (60.0, 64.0, 5, 5),
               (50.0, 40.0, 3, 3)]
    up = parse_reply(_V2_JSON_REPLY)
    assert up["Turn-taking event and score"][1] == [[12.0, 14.0], 4, None] and up["Task-specific score"] == 4.5
    row = task_scores(_V2_JSON_REPLY)
    assert [tuple(e) for e in row["events"]] == counted
    assert row["n_events"] == 6 and row["n_files"] == 1 and row["avg_task_specific"] == 4.5
    assert row["avg_turn_taking"] == pytest.approx(21 / 6) and row["avg_instruction_following"] == pytest.approx(22 / 6)
    # the project's strict reading: {30, 33} is not JSON, so no entry reads as a 1-5 event, and 4.5 is no integer
    assert row["strict_n_events"] == 0 and row["strict_avg_turn_taking"] is None and row["strict_avg_task_specific"] is None
    from spear_metrics.full_duplex_v2.score import binned_row, binned_sums

    bins = binned_row(binned_sums([tuple(e) for e in row["events"]]))
    # score_time.py: sum(score * overlap) / sum(overlap) per 15 s bin; [50, 40] skipped
    assert (bins["TT[0-15]"], bins["IF[0-15]"]) == (9.0, 3.0)
    assert (bins["TT[15-30]"], bins["IF[15-30]"]) == (2.0, 5.0)
    assert (bins["TT[30-45]"], bins["IF[30-45]"]) == (0.0, 1.0)
    assert bins["TT[45-60]"] is None and (bins["TT[60-75]"], bins["IF[60-75]"]) == (5.0, 5.0)
    assert bins["TT[105-120]"] is None


def test_v2_fenced_blocks_merge_and_the_colon_form_as_upstream():
    """parse.py process_one_text: every fenced block holding the key is read and their events
    merged; the task score is the last block's. In the second (not JSON) block the scanner reads
    '[s, e]: tt, if' entries only: the JSON-shaped entry is skipped, '"3"' is 3, null is None (not
    counted); the quoted task score "4" is coerced to 4."""
    from spear_metrics.full_duplex_v2.score import task_scores

    reply = ('First try:\n```json\n{"Turn-taking event and score": [[[1, 2], 4, 4]], "Task-specific score": 2}\n```\n'
             'Revised:\n```\n{"Turn-taking event and score": [\n  [3, 4]: 5, 1,\n  [[5, 6], 2, 2],\n  [7, 8]: "3", null\n],\n'
             '"Task-specific score": "4"}\n```')
    row = task_scores(reply)
    assert [tuple(e) for e in row["events"]] == [(1.0, 2.0, 4, 4), (3.0, 4.0, 5, 1)]
    assert row["avg_turn_taking"] == 4.5 and row["avg_instruction_following"] == 2.5
    assert row["avg_task_specific"] == 4.0 and row["n_files"] == 1


def test_v2_reply_gate_accepts_what_upstream_reads_and_refuses_nothing_readable():
    from spear_metrics.full_duplex_v2.score import judge_reply_gate, task_scores

    only_task = task_scores('{"Task-specific score": 3}')      # upstream: a row with the task score only
    assert only_task["n_files"] == 1 and only_task["n_events"] == 0 and only_task["avg_task_specific"] == 3.0
    assert only_task["avg_turn_taking"] is None and only_task["strict_reason"]
    empty = task_scores('{"Turn-taking event and score": []}')  # upstream: an empty row
    assert empty["n_events"] == 0 and empty["n_files"] == 0 and empty["avg_task_specific"] is None
    # a JSON task score that is a string is not a number for score.py: no n_files
    assert task_scores('{"Turn-taking event and score": [], "Task-specific score": "4"}')["n_files"] == 0
    for garbage in ("I cannot rate this.", '{"scores": []}', "[1, 2]", ""):
        with pytest.raises(ValueError):
            judge_reply_gate(garbage)


def test_v2_reply_with_integers_past_the_float_range_is_read_not_raised():
    """A judge reply holding a 400-digit JSON integer (Python's ``json`` reads it as an int that
    ``float()`` cannot hold): as a time, its pair gives no event; as the task score, no value; the
    strict reading refuses that entry. Nothing raises ``OverflowError`` (which no caller catches)."""
    from spear_metrics.full_duplex_v2.score import judge_reply_gate, parse_judge_reply, task_scores

    huge = "1" + "0" * 400
    key = '"Turn-taking event and score"'
    as_task = task_scores('{%s: [[[1, 2], 4, 5]], "Task-specific score": %s}' % (key, huge))
    assert as_task["avg_task_specific"] is None and as_task["n_files"] == 0  # no float holds it
    assert as_task["n_events"] == 1 and as_task["avg_turn_taking"] == 4.0
    assert as_task["strict_avg_task_specific"] is None and as_task["task_score_reason"]
    as_time = task_scores('{%s: [[[%s, 2], 4, 5], [[3, 4], 2, 3]], "Task-specific score": 3}' % (key, huge))
    assert [tuple(e) for e in as_time["events"]] == [(3.0, 4.0, 2, 3)]  # the unreadable pair gives no event
    assert as_time["n_failed_events"] == 1 and as_time["strict_n_events"] == 1
    only = judge_reply_gate('{%s: [[[%s, 2], 4, 5]]}' % (key, huge))  # an events list: kept, no event counted
    assert only[key.strip('"')] == []
    assert parse_judge_reply('{%s: [[[1, 2], %s, 5]], "Task-specific score": 3}' % (key, huge)).failed_events


# ----------------------------------------------------------------------------- Dynamic-SUPERB llm_classification


def test_dsuperb_llm_classification_request_and_value_as_upstream(tmp_path):
    """Dynamic-SUPERB Phase-2's llm_classification (OpenAI port: create_classification_prompt,
    read_result; driver: label only): one user message = the prompt with the row's instruction,
    label and sllm_response as the file holds them (str.format, nothing stripped), max_tokens 512,
    temperature 0; result:\\s*(yes|no) on reply.lower().strip(), first match; yes -> 1.0 else 0.0."""
    import json
    from types import SimpleNamespace

    from spear_metrics.dynamic_superb.metrics import UPSTREAM_CLASSIFICATION_PROMPT
    from spear_metrics.dynamic_superb.scoring import read_predictions, upstream_classification

    rows = {"a.wav": {"instruction": "Is the speaker happy? Answer yes or no. ", "label": " Yes ",
                      "label2": "no", "sllm_response": "  yes, happy\n"},
            "b.wav": {"instruction": "Which events?", "label": ["door", "door", "speech"], "sllm_response": "door"}}
    f = tmp_path / "Task.json"
    f.write_text(json.dumps(rows))
    items, _ = read_predictions(f, "Task", "llm_classification", 0)
    sent = []

    def judge_reply(reply):
        def ask(msgs, parse, extra_body=None):
            sent.append((msgs, extra_body))
            return SimpleNamespace(value=parse(reply), reply=reply, attempts=[1], meta=None)
        return SimpleNamespace(ask=ask, temperature=0.0)

    def upstream_text(row):  # create_classification_prompt, re-stated
        return UPSTREAM_CLASSIFICATION_PROMPT.format(instruction=row["instruction"], label=row["label"],
                                                     response=row["sllm_response"])

    out = upstream_classification(items[0], judge_reply("The answer matches.\nRESULT: Yes\nresult: no"))
    assert sent[-1] == ([{"role": "user", "content": upstream_text(rows["a.wav"])}], {"max_tokens": 512})
    assert out["llm_classification_verdict"] == "yes" and out["llm_classification"] == 1.0  # first match wins
    out = upstream_classification(items[1], judge_reply("It differs. Result:NO"))
    assert sent[-1][0][0]["content"] == upstream_text(rows["b.wav"])  # a list label as str.format writes it
    assert out["llm_classification"] == 0.0
    out = upstream_classification(items[1], judge_reply("no verdict here"))
    assert out["llm_classification_verdict"] is None and out["llm_classification"] == 0.0
