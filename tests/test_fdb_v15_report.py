"""The HTML report of a Full-Duplex-Bench v1.5 run (``spearbench report`` through the descriptor's
``report`` hook, spear_metrics/full_duplex_v15/report.py): a run scored from samples built of real
recordings (tests/_fdb_v15_samples.py), the judge the loopback fake; the page must show the numbers
of the run's own summary files, the paired tests with Holm's p, the provenance and players that
reach each sample's files."""

from __future__ import annotations

import dataclasses
import html
import json
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

import _fdb_v15_samples as S
from helpers import FakeChatServer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def v15_run(tmp_path_factory):
    """Three samples in two subsets. user_interruption/2 swaps the two reply sentences, so its
    before/after features differ from /1's and the paired tests over the two C_RESPOND samples of
    user_interruption run (with a spread); user_backchannel/1 is tagged C_RESUME."""
    from spear_metrics.cli import main

    tmp = tmp_path_factory.mktemp("v15rep")
    root = tmp / "v1_5"
    c = S.clips()
    swapped = dataclasses.replace(c, reply1=c.reply2, reply2=c.reply1)
    S.build_sample(root / "user_interruption" / "1", c, stop_after_s=0.8, resp_after_s=0.7)
    S.build_sample(root / "user_interruption" / "2", swapped, stop_after_s=0.5, resp_after_s=1.1)
    S.build_sample(root / "user_backchannel" / "1", c, overlap="backchannel", stop_after_s=None, resp_after_s=0.9)
    out = tmp / "run"
    # rows in order: user_backchannel/1, user_interruption/1, user_interruption/2
    replies = [(200, '{"behaviour": ["C_RESUME"]}'), (200, '{"behaviour": ["C_RESPOND"]}'),
               (200, '{"behaviour": ["C_RESPOND"]}')]
    with FakeChatServer(replies) as srv:
        assert main(["fdb", "score", "--root", str(root), "--out", str(out), "--no-progress", "--bootstrap", "50",
                     "--mos", "none", "--judge-url", srv.url, "--judge-model", "gpt-4o-2024-08-06",
                     "--judge-concurrency", "1"]) == 0
    return out


def _row_of(page: str, first_cell: str, after: str = "") -> str:
    """The ``<tr>`` whose first cell is ``first_cell`` (the first one after ``after``)."""
    start = page.index(after) if after else 0
    m = re.search(r"<tr><td>" + re.escape(first_cell) + r"</td>.*?</tr>", page[start:])
    assert m, f"no row {first_cell!r}"
    return m.group(0)


def _cell(summary: dict, key: str) -> str:
    """What the page shows for a key with its interval (value_cell's format)."""
    from spear_metrics.reports.html import fmt

    lo, hi = summary[f"{key}_ci95"] or (None, None)
    text = fmt(summary[key])
    return text + (f' <span class="ci">[{fmt(lo)}, {fmt(hi)}]' if lo is not None else "")


def _section(page: str, sid: str) -> str:
    return page[page.index(f'<section id="{sid}">'):].split("</section>", 1)[0]


def test_report_shows_the_runs_numbers_tests_provenance_and_players(v15_run, tmp_path, capsys):
    from spear_metrics.cli import main
    from spear_metrics.full_duplex_v15.behaviour import PROMPT_SHA256, TAGS
    from spear_metrics.reports.html import fmt, fmt_p

    rep = tmp_path / "rep"
    capsys.readouterr()
    assert main(["report", str(v15_run), "--out", str(rep)]) == 0
    assert "wrote" in capsys.readouterr().out
    page = (rep / "index.html").read_text(encoding="utf-8")
    overall = json.loads((v15_run / "summary.json").read_text())
    subs = {s: json.loads((v15_run / s / "summary.json").read_text()) for s in ("user_backchannel", "user_interruption")}
    # the tag shares and the latencies of each subset and of all, with their intervals, as summary.json holds them
    tags, latency = _section(page, "tags"), _section(page, "latency")
    for label, s in [*subs.items(), ("all", overall)]:
        row = _row_of(tags, label)
        for k in TAGS:
            assert (_cell(s, k) if s[f"{k}_ci95"] else fmt(s[k])) in row, (label, k)
        row = _row_of(latency, label)
        for k in ("stop_latency_s", "response_latency_s"):
            assert (_cell(s, k) if s[f"{k}_ci95"] else fmt(s[k])) in row, (label, k)
    assert subs["user_interruption"]["C_RESPOND"] == 1.0 and subs["user_backchannel"]["C_RESUME"] == 1.0
    assert (rep / "fdb15__tags.png").stat().st_size > 5000 and (rep / "fdb15__latency.png").is_file()
    # the paired tests of user_interruption: every test that ran, with Holm's p and d_z as scored
    feats = _section(page, "features")
    ui = feats[feats.index("<h4>user_interruption: upstream"):].split("<h4>", 2)[1]
    tests = subs["user_interruption"]["significance"]["tests"]
    assert len(tests) == 10  # 5 metrics x 2 pairs; utmosv2 skipped with upstream's reason
    assert "Skipped (Fewer than 2 valid pairs; cannot analyze.): pre_vs_post:utmosv2, clean_vs_post:utmosv2" in ui
    rows = re.findall(r"<tr><td>(\w+)</td><td><code>(\w+)</code></td>(.*?)</tr>", ui)
    assert len(rows) == 10
    for t, (pair, metric, rest) in zip(tests, rows):
        assert (pair, metric) == (t["pair"], t["metric"])
        for v in (fmt(t["mean_diff"]), fmt(t["ci95_low"]), fmt(t["ci95_high"]), fmt(t["t"]), html.unescape(fmt_p(t["p_t"])),
                  html.unescape(fmt_p(t["p_adj"])), fmt(t["cohen_dz"])):
            assert v in html.unescape(rest), (pair, metric, v)
    holm = {(t["pair"], t["metric"]): t["p_adj"] for t in tests}
    assert 0 < holm[("clean_vs_post", "std_pitch")] < 1  # a Holm p that is neither clipped nor 0: shown as is
    # provenance: the judge (requested model, prompt sha256 recorded by the run), transcripts, bootstrap
    prov = _section(page, "provenance")
    assert overall["judge_prompt_sha256"] == PROMPT_SHA256 and PROMPT_SHA256 in prov
    assert "gpt-4o-2024-08-06" in prov and "input: input.json" in prov
    assert "50 resamples, seed 0" in prov and "each subset's <code>summary.json</code>" in prov
    # the samples: overlap window from the row, players whose relative src reaches the sample's files
    per = [json.loads(x) for x in (v15_run / "per_sample.jsonl").read_text().splitlines()]
    samples = _section(page, "samples")
    for r in per:
        row = _row_of(samples, f"{r['subset']}/{r['id']}")
        assert f"{fmt(r['overlap'][0])}&ndash;{fmt(r['overlap'][1])}" in row
        srcs = re.findall(r'<audio controls preload="none" src="([^"]+)"', row)
        folder = Path(r["audio_path"]).parent.resolve()
        assert [(rep / unquote(html.unescape(s))).resolve() for s in srcs] == \
            [folder / n for n in ("input.wav", "output.wav", "clean_output.wav")]
        assert all(not s.startswith("/") for s in srcs)
    assert len(list(rep.glob("fdb15__timeline_row*.png"))) == 3
    # a second report into the same folder replaces the first one's files, nothing else
    (rep / "notes.txt").write_text("mine")
    assert main(["report", str(v15_run), "--out", str(rep)]) == 0
    assert (rep / "notes.txt").read_text() == "mine" and (rep / "index.html").is_file()


def test_report_of_a_results_dataset_recomputes_the_subsets_to_the_same_numbers(v15_run, tmp_path):
    """A results dataset holds no per-subset summary.json: the subsets are recomputed from its rows
    with the recorded bootstrap, to the numbers fdb score wrote; its samples' folders are not
    reachable from the dataset's relative paths, so there are no players."""
    from spear_metrics.cli import main
    from spear_metrics.full_duplex_v15.report import subset_summaries
    from spear_metrics.reports.runs import load_run

    ds = tmp_path / "DS"
    assert main(["push-results", str(v15_run), "--local-dir", str(ds), "--model-name", "example"]) == 0
    got, origin = subset_summaries(load_run(str(ds)))
    assert origin == "recomputed"
    for name, s in got.items():
        scored = json.loads((v15_run / name / "summary.json").read_text())
        for k in ("C_RESPOND", "C_RESPOND_ci95", "stop_latency_s", "stop_latency_s_ci95", "post_wpm", "post_wpm_ci95"):
            assert s[k] == pytest.approx(scored[k]), (name, k)
        assert [t["p_adj"] for t in s["significance"]["tests"]] == \
            pytest.approx([t["p_adj"] for t in scored["significance"]["tests"]])
    rep = tmp_path / "rep"
    assert main(["report", str(ds), "--out", str(rep)]) == 0
    page = (rep / "index.html").read_text(encoding="utf-8")
    assert "recomputed here from the rows" in page and "<audio" not in page and "no players" in page


def test_a_summary_of_the_wrong_shape_gives_a_page_that_says_so(v15_run, tmp_path):
    """summary.json's objects replaced by text (markup in it) and its numbers by text or NaN, and a
    subset summary whose significance tests are a number: the report is written (it stopped with
    exit 1: "'str' object has no attribute 'get'", "'int' object is not iterable"), the run's
    fields of the wrong shape are left out in one line, the section that cannot be built from the
    subset's summary says so in one line, the others are built, and the markup is not in the page."""
    import shutil

    from spear_metrics.cli import main

    run = tmp_path / "run"
    shutil.copytree(v15_run, run, ignore=shutil.ignore_patterns(".work"))
    s = json.loads((run / "summary.json").read_text())
    subsets = list(s["subsets"])
    for k, v in s.items():
        if isinstance(v, dict):
            s[k] = "<script>alert(1)</script>"
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            s[k] = float("nan") if len(k) % 2 else "<b>x</b>"
    (run / "summary.json").write_text(json.dumps(s))
    out = tmp_path / "report"
    assert main(["report", str(run), "--out", str(out)]) == 0
    page = (out / "index.html").read_text()
    assert "<script>alert" not in page and "<b>x</b>" not in page
    assert "summary.json fields of the wrong shape left out: behaviour_ratios_upstream, bootstrap" in page
    sub = run / "user_interruption" / "summary.json"
    s = json.loads(sub.read_text())
    s["significance"]["tests"] = 5
    sub.write_text(json.dumps(s))
    shutil.copy(v15_run / "summary.json", run / "summary.json")
    assert main(["report", str(run), "--out", str(out)]) == 0
    page = (out / "index.html").read_text()
    assert page.count("This section could not be built from the run's files: ") == 1
    assert "is not iterable" in _section(page, "features")
    assert page.count("<audio") >= 3 and "<h3>Failed samples (0)</h3>" in page  # the samples section was built
    assert subsets  # the run had its subsets
