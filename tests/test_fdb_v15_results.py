"""Full-Duplex-Bench v1.5 runs as results datasets: ``fdb score --version 1.5`` -> ``push-results``
-> ``datasets.load_dataset`` round trip (checked through the registry's results hook) and its tab of
the leaderboard Space (the run's HTML report: tests/test_fdb_v15_report.py). Samples built from
real recordings (tests/_fdb_v15_samples.py); the judge is the loopback fake."""

from __future__ import annotations

import json

import pytest

import _fdb_v15_samples as S
from helpers import FakeChatServer, served_page


@pytest.fixture(scope="module")
def v15_run(tmp_path_factory):
    """A scored v1.5 run of two user_interruption samples; the judge answers C_RESPOND for one and
    C_RESUME for the other, so C_RESPOND = C_RESUME = 0.5 by construction."""
    from spear_metrics.cli import main

    tmp = tmp_path_factory.mktemp("v15res")
    root = tmp / "v1_5"
    c = S.clips()
    S.build_sample(root / "user_interruption" / "1", c, stop_after_s=0.8, resp_after_s=0.7)
    S.build_sample(root / "user_interruption" / "2", c, stop_after_s=0.5, resp_after_s=1.1)
    out = tmp / "run"
    replies = [(200, '{"behaviour": ["C_RESPOND"]}'), (200, '{"behaviour": ["C_RESUME"]}')]
    with FakeChatServer(replies) as srv:
        assert main(["fdb", "score", "--root", str(root), "--out", str(out), "--no-progress", "--bootstrap", "50",
                     "--mos", "none", "--judge-url", srv.url, "--judge-model", "gpt-4o-2024-08-06",
                     "--judge-concurrency", "1"]) == 0  # one call at a time: the replies go to the samples in order
    return out


@pytest.mark.slow
def test_push_results_load_dataset_round_trip(v15_run, tmp_path, capsys):
    import datasets

    from spear_metrics.cli import main
    from spear_metrics.results import load_results_folder

    rows = [json.loads(x) for x in (v15_run / "per_sample.jsonl").read_text().splitlines()]
    summary = json.loads((v15_run / "summary.json").read_text())
    assert summary["benchmark"] == "full_duplex_v15" and summary["C_RESPOND"] == summary["C_RESUME"] == 0.5
    ds_dir = tmp_path / "DS"
    assert main(["push-results", str(v15_run), "--local-dir", str(ds_dir), "--model-name", "example"]) == 0
    # the next step points at the run's own tab (no human answers' dataset exists for FDB v1.5)
    printed = " ".join(capsys.readouterr().out.split())
    assert "Space, here (its Full-Duplex-Bench v1.5 tab):" in printed and "human answers" not in printed
    ds = datasets.load_dataset(str(ds_dir), split="test", cache_dir=str(tmp_path / "hf_cache"))
    by_row = sorted(ds.to_list(), key=lambda r: r["row"])
    assert ds.num_rows == 2 and [r["id"] for r in by_row] == [r["id"] for r in rows]
    # the nested record, flat: the tags joined, the features one column each, the transcripts as text
    assert sorted(ds["behaviour"]) == ["C_RESPOND", "C_RESUME"]
    assert [r["stop_latency_s"] for r in by_row] == [r["stop_latency_s"] for r in rows]
    assert [r["post_wpm"] for r in by_row] == [r["general"]["post"]["wpm"] for r in rows]
    assert by_row[0]["output_transcript"] == rows[0]["transcripts"]["output"]["text"]
    assert json.loads(by_row[0]["output_words"]) == rows[0]["transcripts"]["output"]["chunks"]
    card = (ds_dir / "README.md").read_text(encoding="utf-8")
    assert "benchmark: full_duplex_v15" in card and "| `C_RESPOND` | 0.5" in card
    res = load_results_folder(ds_dir, where="DS")  # what the Space reads: recomputed again on load
    assert res.summary["stop_latency_s"] == summary["stop_latency_s"]
    # an edited summary is refused, in one line, before anything is written
    summary["C_RESPOND"] = 0.75
    (v15_run / "summary.json").write_text(json.dumps(summary))
    capsys.readouterr()
    try:
        assert main(["push-results", str(v15_run), "--local-dir", str(tmp_path / "DS2"), "--model-name", "x"]) == 2
    finally:
        summary["C_RESPOND"] = 0.5
        (v15_run / "summary.json").write_text(json.dumps(summary))
    err = capsys.readouterr().err
    assert "'C_RESPOND' is 0.75 but its rows give 0.5" in err and err.count("\n") == 1
    assert not (tmp_path / "DS2").exists()


@pytest.mark.slow
@pytest.mark.browser
def test_space_tab_plays_each_sample_and_draws_the_overlap_window(v15_run, tmp_path):
    """The v1.5 tab (registered through the descriptor's space_tab) lists the pushed dataset; its
    sample browser plays input, output and clean output (durations as built) and draws the time
    line; the line under it gives the overlap window of the sample's metadata.json."""
    import os
    from pathlib import Path

    import spear_metrics.space.app as app
    import spear_metrics.space.tables as tables
    from spear_metrics.cli import main
    from spear_metrics.full_duplex_v15.ui import SPACE_TAB

    chromium = "/usr/bin/chromium"
    if not Path(chromium).exists():
        pytest.skip("system chromium not installed")
    ds_dir = tmp_path / "DS15"
    assert main(["push-results", str(v15_run), "--local-dir", str(ds_dir), "--model-name", "example",
                 "--with-audio", "--with-inputs"]) == 0
    assert ("Full-Duplex-Bench v1.5", SPACE_TAB) in tables.benchmark_tabs()
    rows = [json.loads(x) for x in (v15_run / "per_sample.jsonl").read_text().splitlines()]
    meta = json.loads((Path(rows[0]["audio_path"]).parent / "metadata.json").read_text())
    start, end = meta["timestamps"]
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    demo = app.build_app([str(ds_dir)])
    with served_page(demo, chromium) as page:
        page.locator("#leaderboard").first.wait_for(timeout=30000)
        page.get_by_role("tab", name="Full-Duplex-Bench v1.5").click()
        page.wait_for_function("() => { const t = document.querySelector('#fdb15'); "
                               "return t !== null && t.innerText.includes('example'); }", timeout=30000)
        page.locator("#fdb15_sample input").click()
        page.get_by_role("option", name="example · user_interruption/1 · ok").click()
        page.wait_for_selector(f"#fdb15_info >> text=overlap window {start:.3f}–{end:.3f} s", timeout=30000)
        # every player shows its file's duration once loaded (the built sample is 16 s long)
        for el in ("fdb15_input", "fdb15_output", "fdb15_clean"):
            page.wait_for_selector(f"#{el} >> text=0:16", timeout=30000)
        page.wait_for_selector("#fdb15_timeline img, #fdb15_timeline svg, #fdb15_timeline canvas",
                               timeout=30000)
        page.screenshot(path=str(tmp_path / "fdb15.png"), full_page=True)
    assert (tmp_path / "fdb15.png").stat().st_size > 10_000
