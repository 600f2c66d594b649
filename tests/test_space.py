"""The Space driven in real headless Chromium (Playwright, system /usr/bin/chromium) and through
gradio_client, with results datasets scored from the real AMI stereo call. Loopback only."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _spear_samples import score_and_write  # noqa: E402
from helpers import open_page, serve, served_page  # noqa: E402
from spear_metrics.results import SourcePolicy  # noqa: E402
from spear_metrics.space import samples, tables  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
# marks per test: `browser` for the tests that launch Chromium; `slow` for those over 10 s, which is
# every test of the served app (its fixture scores the datasets and starts the server: ~45 s)


@pytest.fixture(scope="module")
def served(tmp_path_factory, real_dir):
    """The app on 127.0.0.1:<free port> started with a human and a model results dataset, a
    results dataset of an unknown metric version and a raw scored folder (both refused)."""
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    import huggingface_hub.constants as hf_constants

    os.environ["HF_HUB_OFFLINE"] = "1"  # a typed Hub id is looked up in the cache only: no network
    offline_before, hf_constants.HF_HUB_OFFLINE = hf_constants.HF_HUB_OFFLINE, True
    root = tmp_path_factory.mktemp("space")
    built = score_and_write(root)
    bad = root / "bad_version_ds"
    shutil.copytree(built["model_ds"], bad)
    s = json.loads((bad / "summary.json").read_text())
    s["metric_versions"]["interruptions"] = "7.0"
    (bad / "summary.json").write_text(json.dumps(s))
    spec = importlib.util.spec_from_file_location("spear_space_app_served", REPO / "spear_metrics" / "space" / "app.py")
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    sources = [str(built["human_ds"]), str(built["model_ds"]), str(bad), str(built["model_run"])]
    try:
        with serve(app.build_app(sources)) as url:
            yield {"url": url, "built": built, "bad": bad, "sources": sources, "root": root, "app": app}
    finally:
        hf_constants.HF_HUB_OFFLINE = offline_before


@contextlib.contextmanager
def leaderboard_page(served):
    """A headless Chromium page on the served app, its leaderboard rendered (skips without chromium)."""
    if not Path(CHROMIUM).exists():
        pytest.skip("system chromium not installed")
    with open_page(served["url"], CHROMIUM) as page:
        page.wait_for_selector("#leaderboard >> text=742.055", timeout=30000)
        yield page


@pytest.mark.slow
@pytest.mark.browser
def test_browser_leaderboard_and_samples(served, tmp_path):
    """Leaderboard renders at once (human latency 742.055), a bad folder is reported, a row click
    opens the model in the sample browser, the three audio players load, next steps."""
    with leaderboard_page(served) as page:
        assert page.locator("#leaderboard >> text=toy-delayed-model").count() >= 1
        status = page.locator("#status").inner_text()
        assert "rejected local:bad_version_ds: unknown metric version interruptions='7.0'" in status
        assert "rejected local:RESULTS_model: a scored RESULTS folder, not a results dataset" in status
        assert str(served["root"]) not in status
        assert page.locator("#leaderboard >> text=Interruptions · latency_ms [ms] ≈human").count() >= 1
        # headers wrap between words, never inside one; the source (published or this run) is the
        # second column, on the first screen, so the two "human" rows can be told apart
        th = page.locator("#leaderboard th").first
        assert th.evaluate("e => [getComputedStyle(e).wordBreak, getComputedStyle(e).overflowWrap]") == ["normal", "normal"]
        source = page.locator("#leaderboard th", has_text="source").first.bounding_box()
        assert source is not None and source["x"] + source["width"] < 1400
        page.screenshot(path=str(tmp_path / "leaderboard.png"), full_page=True)
        if os.environ.get("SPEARBENCH_SHOTS"):
            page.screenshot(path=os.path.join(os.environ["SPEARBENCH_SHOTS"], "space_leaderboard.png"))

        page.locator("#leaderboard >> text=toy-delayed-model").first.click()
        page.get_by_role("tab", name="Samples").click()
        page.wait_for_function(
            "() => document.querySelector('#model input') && document.querySelector('#model input').value.startsWith('toy-delayed-model')",
            timeout=20000)
        page.wait_for_function(
            "() => document.querySelector('#sample input') && document.querySelector('#sample input').value.startsWith('row 0')",
            timeout=20000)
        # the label names the sample: row id, input clip, status
        clip = Path(json.loads((served["built"]["model_run"] / "per_sample.jsonl").read_text().splitlines()[0])["audio_path"]).stem
        assert page.locator("#sample input").input_value() == f"row 0 · {clip} · ok"
        # each player shows the clip's duration once its audio has loaded (input 15.48 s, answers 9-10 s)
        page.wait_for_selector("#audio_input >> text=0:15", timeout=20000)
        page.wait_for_selector("#audio_human >> text=0:09", timeout=20000)
        page.wait_for_selector("#audio_model >> text=/^0:(09|10)$/", timeout=20000)  # 9.94 s
        assert "error: nan" not in page.locator("body").inner_text()
        assert page.locator("#t_model textarea").input_value() == "MODEL: right, a menu on the remote."
        page.screenshot(path=str(tmp_path / "samples.png"), full_page=True)
        page.click("#next")
        page.wait_for_function("() => document.querySelector('#sample input').value.startsWith('row 1')",
                               timeout=20000)
        page.get_by_role("tab", name="Plots").click()
        page.wait_for_timeout(1500)
        page.screenshot(path=str(tmp_path / "plots.png"), full_page=True)
    for name in ("leaderboard.png", "samples.png", "plots.png"):
        assert (tmp_path / name).stat().st_size > 10_000
    print("screenshots in", tmp_path)


@pytest.mark.slow
@pytest.mark.browser
def test_browser_intervals_timeline_and_report(served, tmp_path):
    """A results dataset's values carry their n (and interval, which rows of a single conversation
    do not have), tie marks and few-event marks; a sample's timing evidence is drawn;
    the Report tab shows the model dataset's report/ (pushed with it) in a sandboxed frame and
    says so when a dataset has none."""
    import re

    with leaderboard_page(served) as page:
        text = page.locator("#leaderboard").inner_text()
        # the toy model's 3 scored rows, all of one call: the value and n, no interval (a conversation
        # bootstrap needs 2 conversations); tie marks beside the values of the two datasets, as text
        assert re.search(r"\d+\.\d{3} n=3", text) and not re.search(r"\] n=3", text)
        assert "★" in text and "≈" in text and "(few events: n = 3)" in text
        page.get_by_role("tab", name="Samples").click()
        page.wait_for_selector("#timeline img", timeout=60000)
        assert page.evaluate("() => document.querySelector('#timeline img').naturalWidth") > 300
        page.locator("#timeline").screenshot(path=str(tmp_path / "timeline.png"))
        page.get_by_role("tab", name="Report").click()
        frame = page.frame_locator("#report iframe")
        assert frame.locator("h1").inner_text(timeout=30000) == "SPEARBench report: toy-delayed-model"
        assert frame.locator("#dim-interruptions").is_visible()
        assert page.locator("#report iframe").get_attribute("sandbox") == ""
        page.locator("#report_model input").click()
        page.get_by_role("option", name=re.compile(r"^human .*no report")).click()
        page.wait_for_selector("#report >> text=has no report", timeout=30000)
    assert (tmp_path / "timeline.png").stat().st_size > 10_000


@pytest.mark.slow
@pytest.mark.browser
def test_browser_model_column_stays_every_tab_loads_and_no_error(served, capfd):
    """As a user: the leaderboard (28 columns, wider than the 1400 px window) scrolled to its last
    column still shows the model column where it was, header and rows (the model a value belongs
    to); every tab opens, the marks legend reads whole, sorting by a column works, and the server
    prints no Python error (gradio prints a traceback for any event that raises) nor the page a
    script error."""
    with leaderboard_page(served) as page:
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        model_th = page.locator('#leaderboard th[aria-colindex="1"]')
        model_cell = page.locator('#leaderboard [role="gridcell"][aria-colindex="1"]').first
        source_th = page.locator('#leaderboard th[aria-colindex="2"]')
        x0 = model_th.bounding_box()["x"]
        assert model_th.inner_text() == "model" and model_cell.bounding_box()["x"] == pytest.approx(x0, abs=1)
        viewport = page.locator("#leaderboard .virtual-table-viewport")
        assert viewport.evaluate("e => e.scrollWidth > e.clientWidth")  # the table is wider than its frame
        viewport.evaluate("e => { e.scrollLeft = e.scrollWidth; }")
        page.wait_for_function("() => document.querySelector('#leaderboard .virtual-table-viewport').scrollLeft > 500")
        page.wait_for_timeout(300)  # the frame after the scroll
        assert source_th.bounding_box()["x"] < x0  # the other columns went left, out of sight
        assert model_th.bounding_box()["x"] == pytest.approx(x0, abs=1)
        assert model_cell.bounding_box()["x"] == pytest.approx(x0, abs=1)
        last = page.locator("#leaderboard th").last.bounding_box()
        assert last["x"] > x0 + model_th.bounding_box()["width"] - 1  # not hidden under the model column
        # the marks legend, opened: its rules as text
        page.get_by_text("Marks: ★ best, ≈ tied, rank interval, few events, onset rule").click()
        legend = page.locator("text=★ best; ≈ tied with the best").first
        legend.wait_for(timeout=20000)
        assert legend.is_visible() and "rank lo-hi" in legend.inner_text()
        # sorting by a column (best first) keeps every row
        n_rows = page.locator('#leaderboard [role="gridcell"][aria-colindex="1"]').count()
        page.locator("#leaderboard").scroll_into_view_if_needed()
        page.get_by_label("sort by").click()
        page.get_by_role("option", name="latency_ms", exact=True).click()
        page.get_by_text("best first").click()
        page.wait_for_function("() => document.querySelector('#leaderboard [role=gridcell][aria-colindex=\"1\"]')"
                               ".innerText.trim() === 'human'", timeout=20000)  # the human row: closest to human
        assert page.locator('#leaderboard [role="gridcell"][aria-colindex="1"]').count() == n_rows
        tabs = [t.inner_text() for t in page.get_by_role("tab").all()]
        benchmark_tabs = tables.benchmark_tabs()
        assert tabs == ["Leaderboard", *(title for title, _ in benchmark_tabs), "Samples", "Plots", "Report"]
        for title, tab in benchmark_tabs:  # no results dataset of these benchmarks: each says so
            page.get_by_role("tab", name=title, exact=True).click()
            page.locator(f"#{tab.elem_id}_none").wait_for(state="visible", timeout=20000)
        page.get_by_role("tab", name="Samples", exact=True).click()
        page.wait_for_function("() => (document.querySelector('#sample input') || {}).value?.startsWith('row ')",
                               timeout=20000)
        page.get_by_role("tab", name="Plots", exact=True).click()
        page.get_by_role("button", name="Refresh plots").click()
        page.get_by_role("tab", name="Report", exact=True).click()
        page.frame_locator("#report iframe").locator("h1").wait_for(timeout=30000)
        assert not errors, errors
    err = capfd.readouterr().err
    assert "Traceback" not in err, err[-3000:]


@pytest.mark.slow
def test_timeline_draws_the_evidence(served):
    """The timeline of the model's interrupting sample (answer 1 s before the question end) draws
    the input's and the answer's VAD segments and the overlap the evidence holds."""
    built = served["built"]
    label = next(v for _, v in samples._samples_models(tables.POLICY.start_labels) if v.endswith("ds_model"))
    row = json.loads((built["model_run"] / "per_sample.jsonl").read_text().splitlines()[1])
    assert row["skip_point_s"] == 1.0 and row["overlap_segments_s"]
    fig = samples.timeline_view(tables.POLICY.start_labels, label, 1)
    ax = fig.axes[0]
    assert "overlap" in ax.get_title() and f"{row['interrupted_time_ms']:.3f}" in ax.get_title()
    bars = [c for c in ax.collections if type(c).__name__ == "PolyCollection"]  # broken_barh
    assert len(bars) == len(row["question_vad_segments_s"]) + len(row["answer_vad_segments_s"])
    spans = [p for p in ax.patches if type(p).__name__ in ("Rectangle", "Polygon")]
    assert len(spans) >= len(row["overlap_segments_s"])
    none = samples.timeline_view(tables.POLICY.start_labels, label, 3)  # the failed row: said in words
    assert "failed" in none.axes[0].texts[0].get_text()


@pytest.mark.slow
def test_gradio_client_table_and_sample(served):
    """The API: the table (strings, '-' for missing) and one sample with its audio files."""
    from gradio_client import Client

    client = Client(served["url"], verbose=False)
    table = client.predict(api_name="/leaderboard")
    assert table["headers"][:5] == ["model", "source", "data", "inference mode", "open weights"]
    rows = {r[0] + "|" + r[1]: dict(zip(table["headers"], r)) for r in table["data"]}
    lat = "Interruptions · latency_ms [ms] ≈human"
    assert rows["human|published"][lat] == "742.055"
    assert rows["gpt-audio-1.5|published"]["Interruptions · interrupted_time_ms [ms] ≈human"] == "-"
    toy = rows["toy-delayed-model|local:ds_model"]
    assert toy["Speech quality · UTMOS [MOS 1-5] ↑"] == "-" and toy["inference mode"] == "Full-duplex"
    # the published rows are SPEAR's test split; the toy run's 4 rows are custom data, listed after them
    assert rows["human|published"]["data"] == "SPEAR test split" and toy["data"] == "custom data"
    assert [r[2] for r in table["data"]].index("custom data") > [r[1] for r in table["data"]].index("published")
    assert any("unknown metric version" in e for e in table["errors"])
    half = client.predict(inference_modes="Half-duplex", api_name="/leaderboard")
    assert sorted(r[0] for r in half["data"]) == ["Qwen2.5-Omni-7B", "mini-omni"]
    # the tie marks of the two start datasets were computed when the app was built: the tables
    # asked since, filtered and sorted otherwise, reuse them (the same marks, nothing recomputed)
    computed = tables.MARKS.computed
    by_latency = client.predict(sort="latency_ms", sort_order="best first", api_name="/leaderboard")
    assert tables.MARKS.computed == computed
    assert sorted(by_latency["data"]) == sorted(table["data"])
    assert any("★" in cell for r in by_latency["data"] if r[1].startswith("local:ds_") for cell in r)

    inp, human, model, tq, th, tm, scores, info = client.predict("local:ds_model", 1, api_name="/sample")
    for f in (inp, human, model):
        assert Path(f).read_bytes()[:4] == b"RIFF"
    assert tq.startswith("FEE016:") and th.startswith("MEO015:") and tm.startswith("MODEL:")
    vals = dict(scores["data"])
    assert vals["interruption"] == "true" and float(vals["interrupted_time_ms"]) > 0
    # a row that is not an integer is no row: the Space's one refusal for a row, never rounded to a neighbour
    for bad in (1.5, 0.5, -1):
        *_, scores, info = client.predict("local:ds_model", bad, api_name="/sample")
        assert not scores["data"] and info.startswith(f"row {bad:g} is not in "), (bad, info)
    *_, scores, info = client.predict("local:ds_model", 1.0, api_name="/sample")
    assert dict(scores["data"]) == vals and "row 1 ·" in info


@pytest.mark.slow
def test_sample_reads_a_results_dataset_without_the_huggingface_schema_metadata(served, tmp_path):
    """A results parquet rewritten without its ``huggingface`` schema metadata (the leaderboard
    accepts it) keeps its audio columns as plain {bytes, path} structs: the sample view reads them
    as audio and shows every value instead of raising (``float()`` of a dict)."""
    import pyarrow.parquet as pq

    ds = tmp_path / "ds_model"
    shutil.copytree(served["built"]["model_ds"], ds)
    for f in (ds / "data").glob("*.parquet"):
        t = pq.read_table(f)
        assert b"huggingface" in (t.schema.metadata or {})
        pq.write_table(t.replace_schema_metadata(None), f)
    before = tables.POLICY
    tables.POLICY = SourcePolicy([str(ds)])
    try:
        inp, human, model, tq, th, tm, scores, info = samples.sample_view(["local:ds_model"], "local:ds_model", 1)
    finally:
        tables.POLICY = before
    assert Path(model).read_bytes()[:4] == b"RIFF" and tm.startswith("MODEL:")
    vals = dict(scores.values.tolist())
    assert vals["interruption"] == "true" and float(vals["interrupted_time_ms"]) > 0
    assert "row 1 ·" in info


def _no_server_path(text: str, served) -> None:
    assert str(served["root"]) not in text and "/tmp/" not in text and "/etc" not in text, text


@pytest.mark.slow
def test_api_reads_only_start_sources_and_hub_ids(served, tmp_path):
    """The API never reads a server folder it was not started with (an existing one, a missing
    one, a traversal, the real path of a start source): the same refusal for each, naming no
    server path; a Hub id is looked up on the Hub only (offline here: a one-line failure)."""
    from gradio_client import Client

    client = Client(served["url"], verbose=False)
    existing = tmp_path / "anything"
    existing.mkdir()
    probes = [str(existing), str(tmp_path / "missing"), "../../..", "/etc", str(served["built"]["model_ds"]),
              "tmp/anything"]
    table = client.predict(sources_text=", ".join(probes[:-1]), api_name="/leaderboard")
    refusals = [e for e in table["errors"] if "not a source this Space was started with" in e]
    assert len(refusals) == len(probes) - 1
    shapes = {e.split(": ", 1)[1] for e in refusals}
    assert len(shapes) == 1  # existing or not, the same words: nothing tells whether a path exists
    n_published = sum(1 for r in table["data"] if r[1] == "published")  # source: the second column
    assert len(table["data"]) == n_published + 2  # the published rows and the two start datasets only
    assert all(r[1] in ("published", "local:ds_human", "local:ds_model") for r in table["data"])
    hub = client.predict(sources_text="tmp/anything", api_name="/leaderboard")  # a Hub id, never the disk
    assert any(e.startswith("rejected tmp/anything: cannot fetch the Hub dataset (") for e in hub["errors"])
    for probe in probes:
        *_, scores, info = client.predict(probe, 0, api_name="/sample")
        assert not scores["data"] and "rejected" in info, (probe, info)
        _no_server_path(info, served)
    for e in table["errors"] + hub["errors"]:
        _no_server_path(e, served)


@pytest.mark.slow
@pytest.mark.browser
def test_browser_load_box_reports_whole_messages_that_stay(served):
    """A refused source typed in the Load box is reported whole (no cut mid-word) and stays after
    the table refresh that follows; a good Hub-looking id that cannot be fetched is reported too."""
    with leaderboard_page(served) as page:
        typed = str(served["built"]["model_run"])
        page.fill("#sources textarea", f"{typed}, nobody/no-such-results")
        page.click("#load")
        page.wait_for_selector("#status >> text=nobody/no-such-results", timeout=30000)
        page.wait_for_timeout(2000)  # the refresh chained after the load has run by now
        status = page.locator("#status").inner_text()
        assert ("server folders are read only when given at start)" in status)  # the whole message, to its end
        assert "rejected nobody/no-such-results: cannot fetch the Hub dataset (" in status
        assert status.count("rejected") == 2


@pytest.mark.slow
@pytest.mark.browser
def test_browser_benchmark_tabs_say_none_loaded_and_wrap_headers_between_words(served, tmp_path):
    """With no Dynamic-SUPERB or SpeechRole-Eval results loaded, each tab shows one line saying so
    instead of an empty table (gradio's placeholder headers "1 | 2 | 3"); with a SpeechRole-Eval
    results dataset loaded (real released judge outputs), its table shows and its headers wrap
    between words only, as the SPEAR table's do."""
    from conftest import FIXTURES
    from spear_metrics.cli import main

    app = served["app"]
    with leaderboard_page(served) as page:
        from spear_metrics.dynamic_superb.ui import SPACE_TAB as DSUPERB_TAB
        from spear_metrics.full_duplex.ui import SPACE_TAB as FDB_TAB
        from spear_metrics.speechrole.ui import SPACE_TAB as SPEECHROLE_TAB

        for tab, none_id, table_id, line in (("Dynamic-SUPERB Phase-2", "dsuperb_none", "dsuperb", DSUPERB_TAB.none_line),
                                             ("SpeechRole-Eval", "speechrole_none", "speechrole", SPEECHROLE_TAB.none_line),
                                             ("Full-Duplex-Bench v1.0", "fdb_none", "fdb", FDB_TAB.none_line)):
            page.get_by_role("tab", name=tab).click()
            page.wait_for_selector(f"#{none_id} >> text=No ", timeout=20000)
            assert " ".join(page.locator(f"#{none_id}").inner_text().split()) == line
            assert page.locator(f"#{table_id} th").count() == 0 or not page.locator(f"#{table_id}").is_visible()

    rel = FIXTURES / "speechrole" / "ali_cloud"
    if not rel.is_dir():
        pytest.fail("SpeechRole judge outputs not found (tests/fixtures is incomplete)")
    assert main(["speechrole", "summarize", "--results", str(rel), "--out", str(tmp_path / "S"), "--bootstrap", "50"]) == 0
    assert main(["push-results", str(tmp_path / "S"), "--local-dir", str(tmp_path / "DS"), "--model-name", "ali_cloud"]) == 0
    with served_page(app.build_app([str(tmp_path / "DS")]), CHROMIUM) as page:
        page.locator("#leaderboard th").first.wait_for(timeout=30000)  # the app has rendered
        page.get_by_role("tab", name="SpeechRole-Eval").click()
        page.wait_for_function("() => { const t = document.querySelector('#speechrole'); "
                               "return t !== null && t.innerText.includes('ali_cloud'); }", timeout=30000)
        assert not page.locator("#speechrole_none").is_visible()
        ths = page.locator("#speechrole th")
        assert ths.count() > 3
        # the header cells and everything inside them (gradio's own cell styles break anywhere)
        styles = page.locator("#speechrole th, #speechrole th *").evaluate_all(
            "es => es.map(e => [getComputedStyle(e).wordBreak, getComputedStyle(e).overflowWrap])")
        assert len(styles) > 3 and all(s == ["normal", "normal"] for s in styles), set(map(tuple, styles))
        page.screenshot(path=str(tmp_path / "speechrole.png"), full_page=True)


def test_leaderboard_marks_rows_of_different_onset_rules():
    """Loaded results measured by different onset rules are never silently side by side: each of
    their rows says its rule in the inference-mode cell; runs sharing one rule are shown as before;
    the download CSV carries ``onset_kind``."""
    spec = importlib.util.spec_from_file_location("spear_space_app_onsets", REPO / "spear_metrics" / "space" / "app.py")
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    base = {"protocol": "spear-v1", "open_weights": True}
    rows = [dict(base, model="published-one", source="published", inference_mode="Streaming"),
            dict(base, model="moshi", source="runs/moshi", inference_mode="streaming", onset_kind="frame"),
            dict(base, model="gpt-audio", source="runs/gpt", inference_mode="offline", onset_kind="question_end")]
    modes = list(tables.display_frame(rows, None)["inference mode"])
    assert modes == ["Streaming", "streaming · onset frame", "offline · onset question_end"]
    same = [rows[0], rows[1], dict(rows[1], model="moshi-2", source="runs/moshi2")]
    assert list(tables.display_frame(same, None)["inference mode"]) == ["Streaming", "streaming", "streaming"]
    assert list(tables.csv_frame(rows)["onset_kind"]) == ["", "frame", "question_end"]
