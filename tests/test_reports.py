"""Intervals on every aggregate, paired comparisons and the HTML report, on real recorded calls.

Samples are cut with the selection protocol from the real telephone call in the fixtures
(pyannote's sample.wav + RTTM + STM: 2 question/answer exchanges, human answers starting 0.281 s
and 0.020 s after their questions). The reference systems replay the same human answer audio
with a chosen onset, so every difference between them and the human answers is known.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from spear_metrics.cli import main
from spear_metrics.core.stats import (
    aggregate_intervals,
    bootstrap_ci,
    cliffs_delta,
    paired_comparison,
    unpaired_tests,
)

CHROMIUM = "/usr/bin/chromium"
METRICS = "interruptions,explainable_features"
DELAY = 0.7


@pytest.fixture(scope="module")
def runs(real_dir, tmp_path_factory):
    """Human answers and the fixed-delay / barge-in replays of them, scored (1000 resamples)."""
    from spear_metrics.commands.demo import build_demo_data, write_system_metadata
    from spear_metrics.core.scoring import run_score

    root = tmp_path_factory.mktemp("reports")
    human = build_demo_data(real_dir / "pyannote-audio__sample.wav", real_dir / "pyannote-audio__sample.rttm",
                            real_dir / "pyannote-audio__sample.stm", root / "data")
    metas = {"human": human, "fixed": write_system_metadata(human, "fixed-delay", DELAY),
             "barge": write_system_metadata(human, "barge-in", -1.0)}
    out = {}
    for name, meta in metas.items():
        run_score(meta, METRICS, root / name, progress=False)
        out[name] = root / name
    out["root"], out["human_csv"] = root, human
    return out


def _rows(folder: Path) -> list[dict]:
    return [json.loads(l) for l in (folder / "per_sample.jsonl").read_text().splitlines() if l.strip()]


def _summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


# ------------------------------------------------------------------ intervals in summary.json


def test_every_aggregate_has_interval_and_n(runs):
    s = _summary(runs["human"])
    numeric = [k for k, v in s.items() if k in s.get("metric_keys", {}).get("interruptions", []) +
               s.get("metric_keys", {}).get("explainable_features", [])]
    assert set(numeric) >= {"latency_ms", "latency_ms_speech", "interrupted_time_ms", "interruptions_%",
                            "no_speech_answers_%", "explainable_duration_s", "explainable_voiced_ratio",
                            "explainable_normalized_f0_std_avg"}
    for k in numeric:
        assert f"{k}_ci95" in s and f"{k}_n" in s, k
        ci = s[f"{k}_ci95"]
        if s[k] is not None and ci is not None:
            assert ci[0] <= s[k] + 1e-9 and s[k] <= ci[1] + 1e-9, k  # the mean of 2 rows lies inside
    # both human answers hold speech, start after their question (0.281 / 0.020 s) and have voiced frames
    assert s["latency_ms_n"] == s["latency_ms_speech_n"] == s["interruptions_%_n"] == 2
    assert s["explainable_normalized_f0_std_avg_n"] == 2
    # the two rows are cut from one call: one conversation, so the default conversation bootstrap
    # gives no interval, and says why
    b = s["bootstrap"]
    assert b["unit"] == "conversation" and b["n_clusters"] == 1 and b["note"].startswith("1 conversation: ")
    assert s["latency_ms_ci95"] is None
    # by rows: the resampled means are row 0, row 1, or their average -> [min, max] of the rows
    from spear_metrics.core.registry import load_dimension
    from spear_datasets.schema import parse_row, read_metadata

    meta = [parse_row(r) for r in read_metadata(runs["human_csv"])]
    by_row = load_dimension("interruptions").summarize(meta, _rows(runs["human"]), n_resamples=1000, bootstrap_unit="row")
    lat = sorted(r["latency_ms"] for r in _rows(runs["human"]))
    assert by_row["latency_ms_ci95"] == pytest.approx(lat)
    assert b["n_resamples"] == 1000 and b["method"] == "percentile"


def test_summary_deterministic_and_resumable(runs, tmp_path):
    """A resumed run (nothing left to score) writes the same summary.json, intervals included."""
    from spear_metrics.core.scoring import run_score

    out = tmp_path / "again"
    shutil.copytree(runs["human"], out)
    before = (out / "summary.json").read_bytes()
    (out / "summary.json").unlink()
    run_score(runs["human_csv"], METRICS, out, progress=False)
    assert (out / "summary.json").read_bytes() == before
    assert json.loads((out / "run_info.json").read_text())["rows_resumed"] == 2


def test_bootstrap_zero_gives_null_intervals_but_counts(runs, tmp_path):
    assert main(["score", "--metadata", str(runs["human_csv"]), "--metrics", "interruptions", "--out",
                 str(tmp_path / "r"), "--bootstrap", "0", "--no-progress"]) == 0
    s = _summary(tmp_path / "r")
    assert s["latency_ms_ci95"] is None and s["latency_ms_n"] == 2


def test_interval_width_shrinks_as_rows_are_added(runs):
    """Same empirical distribution, 4x the rows: the bootstrap standard error of a mean halves,
    so the interval's width does too (within resampling noise); a whole-set statistic (the
    normalised F0 spread) narrows as well. Rows resampled one by one: the copies are of one
    conversation (the conversation bootstrap gives none: tests/test_clustered_stats.py)."""
    from spear_metrics.core.registry import load_dimension
    from spear_datasets.schema import parse_row, read_metadata

    meta = [parse_row(r) for r in read_metadata(runs["barge"].parent / "data" / "barge-in.csv")]
    vals = [{k: v for k, v in r.items()} for r in _rows(runs["barge"])]
    vals += [dict(v, interrupted_time_ms=v["interrupted_time_ms"] * 0.5) for v in vals]  # 4 distinct values
    meta = meta + meta
    widths = {}
    for dim in ("interruptions", "explainable_features"):
        d = load_dimension(dim)
        for k in (2, 8):
            s = d.summarize(meta * k, vals * k, n_resamples=2000, seed=1, bootstrap_unit="row")
            for key in ("interrupted_time_ms", "explainable_duration_s", "explainable_normalized_f0_std_avg"):
                if f"{key}_ci95" in s:
                    lo, hi = s[f"{key}_ci95"]
                    widths[(key, k)] = hi - lo
    for key in ("interrupted_time_ms", "explainable_duration_s"):
        assert widths[(key, 8)] / widths[(key, 2)] == pytest.approx(0.5, abs=0.1), key
    assert widths[("explainable_normalized_f0_std_avg", 8)] < widths[("explainable_normalized_f0_std_avg", 2)]


# ------------------------------------------------------------------ statistics conventions


def test_paired_conventions():
    same = paired_comparison([1.0, 2.5, 4.0], [1.0, 2.5, 4.0])
    assert same["diff"] == 0.0 and same["diff_ci95"] == [0.0, 0.0] and same["p_value"] == 1.0
    assert same["wilcoxon_p"] == 1.0 and same["d_z"] == 0.0 and same["n"] == 3
    one = paired_comparison([1.0, None], [2.0, 3.0])
    assert one["n"] == 1 and one["diff"] == -1.0 and one["diff_ci95"] is None and one["p_value"] is None
    assert "n = 1" in one["note"]
    none = paired_comparison([None], [1.0])
    assert none["n"] == 0 and none["diff"] is None and "n = 0" in none["note"]
    shift = paired_comparison([0.1, 0.5, 0.9, 1.3], [1.1, 1.5, 1.9, 2.3], n_resamples=300)
    # 4 pairs: an interval, but no bootstrap p-value (fewer than SMALL_SAMPLE pairs), and the
    # exact Wilcoxon p of 4 differences of one sign is its floor 2^(1-4)
    assert shift["diff_ci95"] == pytest.approx([-1.0, -1.0]) and shift["p_value"] is None and shift["d_z"] is None
    assert shift["wilcoxon_p"] == pytest.approx(0.125) == shift["wilcoxon_floor"] and "n = 4 pairs" in shift["caution"]
    # booleans are shares: 3 of 4 against 1 of 4 -> +0.5
    assert paired_comparison([True, True, True, False], [True, False, False, False])["diff"] == pytest.approx(0.5)
    with pytest.raises(ValueError):
        paired_comparison([1.0], [1.0, 2.0])


def test_unpaired_tests_match_scipy_and_cliffs_delta():
    from scipy.stats import PermutationMethod, mannwhitneyu, ttest_ind

    a, b = [1.0, 2.0, 3.0, 4.0, 10.0], [2.0, 2.5, 3.5, 1.0]
    u = unpaired_tests(a, b)
    assert u["welch_p"] == pytest.approx(ttest_ind(a, b, equal_var=False).pvalue)
    # tied small samples (1.0 and 2.0 on both sides): the exact permutation p over all C(9, 5) orderings
    assert u["mannwhitney_p"] == pytest.approx(
        mannwhitneyu(a, b, alternative="two-sided", method=PermutationMethod(n_resamples=126)).pvalue)
    untied = [1.5, 2.2, 3.1, 4.0, 10.0]  # no ties: scipy's default (exact for a side of at most 8)
    assert unpaired_tests(untied, b)["mannwhitney_p"] == pytest.approx(mannwhitneyu(untied, b).pvalue)
    # Cliff's delta by definition: (#a>b - #a<b) / (n_a n_b)
    gt = sum(x > y for x in a for y in b)
    lt = sum(x < y for x in a for y in b)
    assert u["cliffs_delta"] == pytest.approx((gt - lt) / 20)
    assert cliffs_delta([5, 6], [1, 2]) == 1.0 and cliffs_delta([1, 2, 3], [1, 2, 3]) == 0.0
    same = unpaired_tests([3.0, 3.0], [3.0, 3.0])
    assert same["welch_p"] == 1.0 and same["cliffs_delta"] == 0.0
    small = unpaired_tests([1.0], [1.0, 2.0])
    assert small["welch_p"] is None and "at least 2" in small["note"]


def test_aggregate_intervals_recompute_whole_set_statistics():
    """A correlation recomputed on each resample: its interval is that of the bootstrap of r
    (not of a mean of per-row values), and resamples where r does not exist are left out."""
    x = np.array([0.1, 0.4, 0.35, 0.8, 0.9, 0.2, 0.6, 0.7])
    y = x * 0.5 + np.array([0.05, -0.02, 0.03, 0.0, -0.04, 0.02, 0.01, -0.03])

    def corr(idx):
        xs, ys = x[idx], y[idx]
        if np.ptp(xs) == 0:
            return {"r": None}
        return {"r": float(np.corrcoef(xs, ys)[0, 1])}

    ci = aggregate_intervals(corr, len(x), ["r"], n_resamples=500, seed=3)["r"]
    r = corr(np.arange(len(x)))["r"]
    assert ci[0] <= r <= ci[1] and ci[1] <= 1.0 and ci[0] > 0.9  # a tight, strong correlation
    assert aggregate_intervals(corr, len(x), ["r"], n_resamples=500, seed=3)["r"] == ci  # seeded
    assert aggregate_intervals(corr, 1, ["r"])["r"] is None
    assert bootstrap_ci([2.0, 2.0, 2.0]) == [2.0, 2.0]


# ------------------------------------------------------------------ paired comparison of runs


def test_fixed_delay_against_human_known_difference(runs, tmp_path):
    """On rows with answer_start_time >= 0 whose answer holds speech at its start, replaying the
    human answer DELAY s after the question end changes latency by exactly DELAY - answer_start_time
    (same audio, same VAD, no cut); resampling rows, the interval of the mean difference lies above
    0. The two rows are of one conversation (the metadata's conversation_id, which the scored
    folders take from the metadata they scored): by default, conversations resampled, there is no
    interval, and the comparison says why."""
    assert main(["compare", str(runs["fixed"]), str(runs["human"]), "--out", str(tmp_path / "conv")]) == 0
    by_conv = json.loads((tmp_path / "conv" / "comparison.json").read_text())["keys"]["latency_ms"]
    assert by_conv["diff_ci95"] is None and "conversation" in by_conv["note"]
    assert main(["compare", str(runs["fixed"]), str(runs["human"]), "--out", str(tmp_path / "c"),
                 "--bootstrap-unit", "row"]) == 0
    comp = json.loads((tmp_path / "c" / "comparison.json").read_text())
    from spear_datasets.schema import parse_row, read_metadata

    ast = {Path(r["audio_path"]).stem: parse_row(r).answer_start_time for r in read_metadata(runs["human_csv"])}
    human = {Path(r["audio_path"]).stem: r for r in _rows(runs["human"])}
    fixed = {Path(r["audio_path"]).stem: r for r in _rows(runs["fixed"])}
    checked = 0
    for stem, h in human.items():
        if ast[stem] >= 0 and h["answer_onset_after_skip_s"] is not None and h["skip_point_s"] == 0.0:
            assert fixed[stem]["latency_ms"] - h["latency_ms"] == pytest.approx(1000 * (DELAY - ast[stem]), abs=1e-6)
            checked += 1
    assert checked == 2
    lat = comp["keys"]["latency_ms"]
    assert lat["n"] == 2 and lat["diff_ci95"][0] > 0
    assert lat["diff"] == pytest.approx(1000 * (DELAY - np.mean(list(ast.values()))), abs=1e-6)
    assert comp["matching"].startswith("input clip file name") and comp["n_common"] == 2
    # same answer audio: the explainable features do not differ at all
    assert comp["keys"]["explainable_duration_s"]["diff_ci95"] == [0.0, 0.0]


def test_system_against_itself(runs, tmp_path, capsys):
    assert main(["compare", str(runs["human"]), str(runs["human"]), "--out", str(tmp_path)]) == 0
    comp = json.loads((tmp_path / "comparison.json").read_text())
    assert comp["keys"] and comp["comparable"]
    for k, e in comp["keys"].items():
        assert e["diff"] == 0.0 and e["diff_ci95"] == [0.0, 0.0] and e["p_value"] == 1.0, k
        assert e["unpaired"]["all"]["cliffs_delta"] == 0.0
    assert "latency_ms" in capsys.readouterr().out


def _bad_runs(runs, root: Path) -> dict[str, Path]:
    """A run with a failed row and a missing key, a one-row run, a run sharing no input."""
    bad = {}
    failed = root / "failed_missing"
    shutil.copytree(runs["barge"], failed)
    rows = _rows(failed)
    rows[1].update({k: None for k in rows[1] if k not in ("row", "audio_path", "answer_audio_path")},
                   status="failed", error="answer file is truncated")
    (failed / "per_sample.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = _summary(failed)
    del s["latency_ms"]
    (failed / "summary.json").write_text(json.dumps(s))
    bad["failed_missing"] = failed
    single = root / "single"
    shutil.copytree(runs["fixed"], single)
    (single / "per_sample.jsonl").write_text(json.dumps(_rows(single)[0]) + "\n")
    bad["single"] = single
    alien = root / "alien"
    shutil.copytree(runs["fixed"], alien)
    rows = _rows(alien)
    for r in rows:
        r["audio_path"] = r["audio_path"].replace("sample_", "other_")
    (alien / "per_sample.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    bad["alien"] = alien
    return bad


def test_compare_bad_inputs_say_so(runs, tmp_path, capsys):
    bad = _bad_runs(runs, tmp_path)
    assert main(["compare", str(bad["alien"]), str(runs["human"])]) == 0
    out = capsys.readouterr().out
    assert "not comparable" in out and "n = 0" in out
    assert main(["compare", str(bad["single"]), str(runs["human"]), "--out", str(tmp_path / "one")]) == 0
    one = json.loads((tmp_path / "one" / "comparison.json").read_text())
    assert one["n_common"] == 1 and one["keys"]["latency_ms"]["diff_ci95"] is None
    assert main(["compare", str(bad["failed_missing"]), str(runs["human"]), "--out", str(tmp_path / "f")]) == 0
    f = json.loads((tmp_path / "f" / "comparison.json").read_text())
    assert f["n_common"] == 1 and any("failed rows left out: 1 in failed_missing, 0 in human" in n for n in f["notes"])
    assert any("missing column 'latency_ms'" in p for p in f["a"]["problems"])
    assert main(["compare", str(tmp_path / "nowhere"), str(runs["human"])]) == 2


# ------------------------------------------------------------------ timing evidence


def test_timing_evidence_explains_latency_and_overlap(runs):
    from spear_metrics.reports.runs import NOT_COMPARED

    ev_keys = set()
    for who in ("human", "barge"):
        for r in _rows(runs[who]):
            qse, start = r["question_speech_end_s"], r["answer_speech_start_s"]
            assert start is not None and qse is not None
            assert r["latency_ms"] == pytest.approx(1000 * max(0.0, start - qse), abs=1e-3)
            spans = r["overlap_segments_s"]
            assert r["interrupted_time_ms"] == pytest.approx(1000 * sum(e - s for s, e in spans), abs=1e-3)
            ev_keys |= {k for k in r if k.endswith("_s") and not k.startswith("explainable")}
    barge = _rows(runs["barge"])
    human = _rows(runs["human"])
    for b, h in zip(barge, human):
        assert b["skip_point_s"] == 1.0 and h["skip_point_s"] == 0.0
        # same answer, placed 1 s before the question end instead of answer_start_time after it
        shift = np.array(b["answer_vad_segments_s"]) - np.array(h["answer_vad_segments_s"])
        assert np.allclose(shift[0], shift) and shift[0][0] < -1.0
        assert b["interrupted_time_ms"] > 0 and b["overlap_segments_s"]
    scalar = {k for k in ev_keys if not k.endswith("_segments_s")}
    assert scalar <= NOT_COMPARED  # evidence is never compared as a measurement


def test_segments_survive_a_results_dataset(runs, tmp_path):
    from spear_metrics.results import load_results, write_results_dataset

    ds = write_results_dataset(runs["barge"], tmp_path / "ds", model_name="barge", metadata=runs["root"] / "data" / "barge-in.csv")
    res = load_results(str(ds))
    segs = res.samples["answer_vad_segments_s"].iloc[0]
    assert [list(map(float, p)) for p in segs] == _rows(runs["barge"])[0]["answer_vad_segments_s"]


# ------------------------------------------------------------------ the report, in a real browser


@pytest.mark.browser
def test_per_sample_values_of_the_wrong_kind_are_shown_missing(runs, tmp_path, capsys):
    """A per_sample.jsonl whose latency_ms is text (markup in it) in one row and NaN in another: the
    report is written (it stopped with exit 1, 'Unknown format code' in the timeline plot), the
    values are missing in it, the run's problems say which, and the markup is not in the page."""
    hostile = tmp_path / "hostile"
    shutil.copytree(runs["fixed"], hostile)
    rows = _rows(hostile)
    rows[0]["latency_ms"] = "<script>alert(1)</script>"
    rows[1]["latency_ms"] = float("nan")
    (hostile / "per_sample.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "report"
    assert main(["report", str(hostile), "--human", str(runs["human"]), "--out", str(out), "--bootstrap", "0"]) == 0
    html = (out / "index.html").read_text()
    assert "<script>alert" not in html
    assert "2 per-sample value(s) of the wrong kind shown as missing: row 0 &#x27;latency_ms&#x27;, row 1" in html


def test_summary_fields_of_the_wrong_shape_are_left_out_in_one_line(runs, tmp_path):
    """summary.json's ``data`` and ``bootstrap`` given as text, ``metrics`` as a number: the report
    is written (it stopped with exit 1 on ``data``, "'str' object has no attribute 'get'"), the
    fields are left out and the run's problems say which."""
    hostile = tmp_path / "hostile"
    shutil.copytree(runs["fixed"], hostile)
    s = _summary(hostile)
    s.update(data="<i>data</i>", bootstrap="1000", metrics=3)
    (hostile / "summary.json").write_text(json.dumps(s))
    out = tmp_path / "report"
    assert main(["report", str(hostile), "--human", str(runs["human"]), "--out", str(out), "--bootstrap", "0"]) == 0
    html = (out / "index.html").read_text()
    assert "<i>data</i>" not in html
    assert "summary.json fields of the wrong shape left out: bootstrap, data, metrics" in html


def test_report_renders_in_chromium(runs, tmp_path):
    """Every section renders, every image loads, no "nan"; bad inputs are reported in words."""
    if not Path(CHROMIUM).exists():
        pytest.skip("system chromium not installed")
    from playwright.sync_api import sync_playwright

    bad = _bad_runs(runs, tmp_path)
    out = tmp_path / "report"
    assert main(["report", str(bad["failed_missing"]), "--human", str(runs["human"]), "--against", str(runs["fixed"]),
                 "--against", str(bad["single"]), "--against", str(tmp_path / "missing_run"), "--out", str(out)]) == 0
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert "interruptions__latency_ms.png" in pngs and any(n.startswith("interruptions__timeline_row") for n in pngs)
    html = (out / "index.html").read_text()
    assert "http://" not in html.replace("http://www.w3.org", "") and "https://" not in html  # self-contained
    assert "data scored: custom data" in html  # these runs' rows are not SPEAR's split
    alien_out = tmp_path / "alien_report"
    assert main(["report", str(bad["alien"]), "--human", str(runs["human"]), "--out", str(alien_out)]) == 0
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            page.goto((out / "index.html").as_uri())
            for sec in ["provenance", "runs", "dim-speech_quality", "dim-interruptions", "dim-language_dialect",
                        "dim-turn_taking", "dim-emotions", "dim-stances", "dim-explainable_features"]:
                assert page.locator(f"#{sec}").is_visible(), sec
            n_img = page.locator("img").count()
            broken = page.evaluate("() => [...document.images].filter(i => !i.complete || i.naturalWidth === 0).length")
            assert n_img >= 8 and broken == 0
            text = page.locator("body").inner_text()
            assert not re.search(r"\bnan\b", text, re.I)
            assert "missing column 'latency_ms'" in text  # the missing key, in words
            assert "answer file is truncated" in text  # the failed row and its reason
            assert "could not be read" in text  # the --against that does not exist
            assert "Not scored in any run of this report" in text and "n = 2" in text
            # the answer first: the summary is the first section, in the first screen, after the contents
            assert page.evaluate("() => document.querySelector('section').id") == "summary"
            assert page.locator("#summary h2").bounding_box()["y"] < 1000
            toc = page.evaluate("() => [...document.querySelectorAll('nav.toc a')].map(a => a.getAttribute('href'))")
            ids = page.evaluate("() => [...document.querySelectorAll('section')].map(s => '#' + s.id)")
            assert toc == ids and "#summary" in toc and "#provenance" in toc
            summary = page.locator("#summary").inner_text()
            # named runs, the difference with its interval in words, the small-sample caution once
            assert "failed_missing is" in summary and "than human" in summary and " B" not in summary.split("published")[0]
            assert page.locator("#summary .caution").count() == 1 and "Only 1 shared sample" in summary
            assert "&lt; 0.001" not in html and "< 0.001" not in text  # no bootstrap p from 1 or 2 pairs
            # defaults shown as what they mean, never None
            assert "None" not in page.locator("#provenance").inner_text()
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
            if os.environ.get("SPEARBENCH_SHOTS"):  # a screenshot of the top to look at
                page.screenshot(path=os.path.join(os.environ["SPEARBENCH_SHOTS"], "report_top.png"))
            page.goto((alien_out / "index.html").as_uri())
            text = page.locator("body").inner_text()
            assert "not comparable" in text and "n = 0" in text
            assert page.evaluate("() => [...document.images].filter(i => i.naturalWidth === 0).length") == 0
        finally:
            browser.close()
    assert (tmp_path / "report.png").stat().st_size > 50_000


def test_distributional_table_gives_each_reason_once_and_names_the_reference(tmp_path):
    """Three runs without human_likeness_auroc for one reason and without a baseline: each reason
    is one numbered note under the table (not repeated in a note column and again below); the
    human answers are the reference, not a run missing its score; no empty header over provenance."""
    from spear_metrics.reports.html import build_report
    from spear_metrics.reports.plots import panel_title
    from spear_metrics.reports.runs import load_run

    why = "not computed: 2 model and 2 human answers and 1 conversation; needs >= 10 answers on each side"
    base = "needs a baseline fitted on the dev split: spearbench fit-baseline, then -o baseline=PATH"
    folders = {}
    for name in ("cascade", "human", "other"):
        d = tmp_path / name
        d.mkdir()
        (d / "per_sample.jsonl").write_text(json.dumps({"row": 0, "audio_path": "a/clip0.wav", "status": "ok"}) + "\n")
        note = "needs the human answers' run scored with the same dimensions: -o human_run=RESULTS" if name == "human" else why
        (d / "summary.json").write_text(json.dumps({
            "metrics": ["distributional"], "human_likeness_auroc": None, "human_likeness_auroc_n": 0,
            "human_likeness_note": note, "human_likeness_n_folds": 0, "human_likeness_n_conversations": 1,
            "average_naturalness_score": None, "average_naturalness_score_note": base}))
        folders[name] = d
    html = build_report(load_run(folders["cascade"]), tmp_path / "r", human=load_run(folders["human"]),
                        against=[load_run(folders["other"])]).read_text()
    sec = html[html.index('id="dim-distributional"'):html.index('id="runs"')]
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", sec))
    assert text.count("not computed: 2 model") == 1 and text.count("needs a baseline fitted") == 1
    assert text.count("no value (note 1)") == 2 and text.count("no value (note 2)") == 3
    assert "the reference (human answers)" in text and "-o human_run=RESULTS" not in text
    assert "<thead><tr><th></th><th></th></tr></thead>" not in html
    assert panel_title("explainable_normalized_f0_std_avg") == "explainable_normalized_\nf0_std_avg"
    assert panel_title("latency_ms") == "latency_ms"


def test_report_title_names_the_agent_else_the_folder(runs, tmp_path, capsys):
    """The title is the run's model: the agent of the ``infer`` run whose answers were scored
    (its run_info.json beside the metadata CSV the run read), else the folder name; ``--name``
    wins over both."""
    from spear_metrics.reports.html import build_report
    from spear_metrics.reports.runs import load_run

    answers, results = tmp_path / "answers", tmp_path / "RESULTS"
    assert main(["infer", "--agent", "fixed-delay", "-a", "delay=0.7", "--data", str(runs["human_csv"]),
                 "--out", str(answers), "--no-progress"]) == 0
    assert main(["score", "--metadata", str(answers / "metadata.csv"), "--metrics", "interruptions",
                 "--out", str(results), "--no-progress"]) == 0
    capsys.readouterr()

    def title(run) -> str:
        html = build_report(run, tmp_path / f"r_{run.name}", n_resamples=0).read_text()
        h1 = re.search(r"<h1>(.*?)</h1>", html).group(1)
        assert re.search(r"<title>(.*?)</title>", html).group(1) == h1
        return h1

    assert title(load_run(results)) == "SPEARBench report: fixed-delay"
    assert title(load_run(results, name="mine")) == "SPEARBench report: mine"
    # the fixture's replay was scored from a plain CSV (no infer record beside it): the folder name
    assert load_run(runs["fixed"]).name == runs["fixed"].name
    assert title(load_run(runs["fixed"])) == f"SPEARBench report: {runs['fixed'].name}"
