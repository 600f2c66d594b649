"""Honest statistics on small samples (spear_metrics.core.stats), with values checked by hand.

- The exact Wilcoxon signed-rank test on n differences of one sign gives 2 / 2^n = 2^(1-n):
  0.5 for 2 pairs, 2/1024 for 10; the exact Mann-Whitney U test on two fully separated samples
  gives 2 / C(n_a + n_b, n_a): 1/3 for 2 and 2.
- The percentile bootstrap of n differences of one sign puts every resampled mean on that side,
  so its p-value is its floor 2/(B+1) whatever n is; below SMALL_SAMPLE = 10 pairs it is not
  given at all (at n = 10 the exact floor 2^-9 = 0.00195 is below 2/1001 = 0.002).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from spear_metrics.cli import main
from spear_metrics.core.stats import (
    SMALL_SAMPLE,
    bootstrap_p_floor,
    compare_runs,
    distinct_resamples,
    mannwhitney_floor,
    paired_comparison,
    small_sample_caution,
    unpaired_tests,
    wilcoxon_floor,
)


def test_floors_by_hand_and_as_scipy_computes_them():
    from scipy.stats import mannwhitneyu, wilcoxon

    assert wilcoxon_floor(2) == 0.5 and wilcoxon_floor(5) == 0.0625 and wilcoxon_floor(10) == 2 / 1024
    assert wilcoxon_floor(0) is None
    # scipy's exact test reaches exactly that floor when every difference has one sign
    for n in (2, 5, 10):
        assert wilcoxon(list(range(1, n + 1))).pvalue == pytest.approx(wilcoxon_floor(n))
    assert mannwhitney_floor(2, 2) == pytest.approx(1 / 3)  # 2 / C(4, 2) = 2/6
    assert mannwhitney_floor(3, 3) == pytest.approx(0.1)  # 2 / C(6, 3) = 2/20
    assert mannwhitneyu([3.0, 4.0], [1.0, 2.0], method="exact").pvalue == pytest.approx(mannwhitney_floor(2, 2))
    assert bootstrap_p_floor(999) == 0.002 and bootstrap_p_floor(0) is None
    assert [distinct_resamples(n) for n in (1, 2, 5, 10)] == [1, 3, 126, 92378]  # C(2n-1, n)
    # the threshold's reason: from 10 pairs the exact floor is below the bootstrap's own (B = 1000)
    assert wilcoxon_floor(SMALL_SAMPLE) < bootstrap_p_floor(1000) < wilcoxon_floor(SMALL_SAMPLE - 1)


def test_two_pairs_give_no_bootstrap_p_and_say_why():
    """The demo's case: 2 pairs, one system 250 ms later on both."""
    r = paired_comparison([250.5, 281.0], [0.0, 0.0], n_resamples=1000, seed=0)
    assert r["n"] == 2 and r["diff"] == pytest.approx(265.75)
    assert r["p_value"] is None  # not "< 0.001"
    assert r["wilcoxon_p"] == 0.5 == r["wilcoxon_floor"]
    assert r["diff_ci95"] == pytest.approx([250.5, 281.0])  # resampled means: 250.5, 265.75, 281.0
    assert r["caution"].startswith("n = 2 pairs: too few for a bootstrap p-value")
    assert "2^(1-n) = 0.5" in r["caution"] and "3 distinct resamples" in r["caution"]
    assert "no difference can reach p < 0.05" in r["caution"]


def test_ten_pairs_get_a_bootstrap_p_at_its_floor():
    d = [float(i) for i in range(1, 11)]  # ten differences, all positive
    r = paired_comparison(d, [0.0] * 10, n_resamples=999, seed=3)
    assert r["caution"] is None
    assert r["p_value"] == pytest.approx(2 / 1000) == r["p_value_floor"]  # no resampled mean <= 0
    assert r["wilcoxon_p"] == pytest.approx(2 / 1024)
    # a difference centred on 0: no more the floor, and never 0
    mixed = paired_comparison([1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 1.5, -1.5], [0.0] * 10, n_resamples=999)
    assert 0.5 < mixed["p_value"] <= 1.0
    # identical pairs keep their convention at any n
    same = paired_comparison([1.0, 2.0], [1.0, 2.0])
    assert same["p_value"] == 1.0 and same["caution"] is None


def test_unpaired_small_samples_carry_the_mann_whitney_floor():
    u = unpaired_tests([3.0, 4.0], [1.0, 2.0])
    assert u["mannwhitney_p"] == pytest.approx(1 / 3) == pytest.approx(u["mannwhitney_floor"])
    assert "2/C(4,2) = 0.333" in u["caution"] and "no difference can reach p < 0.05" in u["caution"]
    assert unpaired_tests(list(range(10)), list(range(10, 20)))["caution"] is None


def test_tied_small_unpaired_samples_get_the_exact_p_not_the_normal_approximation():
    """Flags are all ties. Model: 1 of 9 answers interrupts; humans: 8 of 9. Exact: over all
    C(18, 9) = 48,620 equally likely splits of the 18 values (9 ones), the model's 9 hold at most
    one 1 in 1 + 9 * 9 = 82 of them: p = 2 * 82 / 48,620 = 0.0034, twice the normal
    approximation's 0.0016."""
    from scipy.stats import mannwhitneyu

    a, b = [True] + [False] * 8, [True] * 8 + [False]
    u = unpaired_tests(a, b)
    approx = mannwhitneyu([float(v) for v in a], [float(v) for v in b], method="asymptotic").pvalue
    # exact by hand: 9 ones and 9 zeros among the 18 values; P(at most 1 one in a's 9 of 18) doubled
    tail = (math.comb(9, 0) * math.comb(9, 9) + math.comb(9, 1) * math.comb(9, 8)) / math.comb(18, 9)
    assert u["mannwhitney_p"] == pytest.approx(min(1.0, 2 * tail))
    assert u["mannwhitney_p"] > approx and u["mannwhitney_p"] >= u["mannwhitney_floor"]
    # three and three with ties: the approximation reads 0.072, below the floor 2/C(6,3) = 0.1
    t = unpaired_tests([1.0, 1.0, 3.0], [4.0, 5.0, 5.0])
    assert t["mannwhitney_p"] == pytest.approx(0.1) == pytest.approx(t["mannwhitney_floor"])
    assert small_sample_caution(1) is None and small_sample_caution(SMALL_SAMPLE) is None


def test_compare_runs_names_the_runs_and_warns_once():
    rows_a = [{"row": i, "status": "ok", "latency_ms": v} for i, v in enumerate([0.0, 0.0])]
    rows_b = [{"row": i, "status": "ok", "latency_ms": v, "interruption": False} for i, v in enumerate([250.5, 281.0])]
    comp = compare_runs(rows_a, rows_b, match=lambda r: r["row"], names=("cascade", "human"))
    assert any("n = 2 shared samples: too few for a bootstrap p-value" in n for n in comp["notes"])
    assert "values in human only (no row of cascade has one), not compared: interruption" in comp["notes"]
    assert not any(re.search(r"\b[AB]\b", n) for n in comp["notes"])  # no undefined A / B
    assert comp["bootstrap"]["min_pairs_for_p"] == SMALL_SAMPLE



def test_rows_that_repeat_a_pairing_id_are_counted_never_dropped_silently():
    """Three rows of A share one id (only the first can pair), one row of B repeats another's:
    the pairs are the 2 distinct ids both have, and a note counts the left-out rows of each run."""
    rows_a = [{"row": i, "status": "ok", "x": float(i), "id": k} for i, k in enumerate(["a", "a", "a", "b"])]
    rows_b = [{"row": i, "status": "ok", "x": float(i), "id": k} for i, k in enumerate(["a", "b", "b"])]
    comp = compare_runs(rows_a, rows_b, match=lambda r: r["id"], names=("A run", "B run"))
    assert comp["keys"]["x"]["n"] == 2
    assert "2 scored row(s) of A run repeat the pairing id of an earlier row and are left out of the pairs " \
           "(the id does not name one sample)" in comp["notes"]
    assert any(n.startswith("1 scored row(s) of B run repeat") for n in comp["notes"])


def test_compare_refuses_runs_of_another_benchmark(tmp_path, capsys):
    """An FDB v2 run's rows all have an input named A.wav: paired by clip name they would pair as
    one conversation; compare refuses the run in one line instead (exit 2)."""
    runs = []
    for name in ("x", "y"):
        d = tmp_path / name
        d.mkdir()
        (d / "summary.json").write_text(json.dumps({"benchmark": "full_duplex_v2"}))
        (d / "per_sample.jsonl").write_text("".join(json.dumps(
            {"row": i, "id": f"t{i}", "status": "ok", "audio_path": f"/conv/t{i}/A.wav", "avg_turn_taking": 1.0})
            + "\n" for i in range(3)))
        runs.append(str(d))
    assert main(["compare", *runs]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a Full-Duplex-Bench v2 run: compare pairs SPEAR runs by input clip name" in err


def _run_folder(root: Path, name: str, latencies: list[float]) -> Path:
    """A scored folder as `compare` reads it (per_sample.jsonl; no summary needed)."""
    d = root / name
    d.mkdir(parents=True)
    (d / "per_sample.jsonl").write_text("".join(
        json.dumps({"row": i, "audio_path": f"inputs/test/naturalistic/audios/clip{i}.wav", "status": "ok",
                    "latency_ms": v, "explainable_duration_s": 1.0 + v / 1000}) + "\n" for i, v in enumerate(latencies)))
    return d


def test_compare_console_two_pairs(tmp_path, capsys):
    a = _run_folder(tmp_path, "cascade", [0.0, 0.0])
    b = _run_folder(tmp_path, "human", [250.5, 281.0])
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert "p boot 0.000" not in out and "0.000*" not in out
    lat = next(line for line in out.splitlines() if line.startswith("latency_ms"))
    cells = lat.split()
    assert cells[1] == "2" and cells[5 + 2] == "-"  # n, then p boot (after mean A, mean B, A-B and the 2-cell CI)
    assert "0.500*" in lat  # the exact Wilcoxon p with its caution mark
    assert out.count("* n = 2 pairs: too few for a bootstrap p-value") == 1
    comp = json.loads((tmp_path / "c" / "comparison.json").read_text())
    assert comp["keys"]["latency_ms"]["p_value"] is None and comp["keys"]["latency_ms"]["wilcoxon_p"] == 0.5
    from spear_metrics.commands import runnable

    # every line within 120 columns but the printed command (copied whole)
    assert all(len(line) <= 120 for line in out.splitlines() if not line.startswith(f"  {runnable('spearbench')}"))
    # --columns selects; an unknown one is refused with the valid ones
    assert main(["compare", str(a), str(b), "--columns", "n,diff,wilcoxon_p"]) == 0
    head = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("key"))
    assert head.split() == ["key", "n", "A-B", "p", "Wilcoxon"]
    assert main(["compare", str(a), str(b), "--columns", "n,bogus"]) == 2
    assert "unknown bogus; valid: n, mean_a" in capsys.readouterr().err


def test_report_never_reads_below_0001_on_two_pairs(tmp_path):
    from spear_metrics.reports.html import build_report
    from spear_metrics.reports.runs import load_run

    a = _run_folder(tmp_path, "cascade", [0.0, 0.0])
    b = _run_folder(tmp_path, "human", [250.5, 281.0])
    for d in (a, b):  # the dimension must be scored for its section's tests
        (d / "summary.json").write_text(json.dumps({"metrics": ["interruptions"], "latency_ms": None}))
    html = build_report(load_run(a), tmp_path / "r", human=load_run(b)).read_text()
    text = re.sub(r"<[^>]+>", " ", html)
    assert "&lt; 0.001" not in html and "< 0.001" not in text
    assert "none (n = 2 &lt; 10)" in html  # the bootstrap p column says why it is empty
    assert text.count("n = 2 pairs: too few for a bootstrap p-value") == 1  # once above the paired tests
    assert math.isclose(float(re.search(r"0\.500\s+\(floor (\S+)\)", text).group(1)), 0.5)
