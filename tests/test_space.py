"""The Space driven in real headless Chromium (Playwright, system /usr/bin/chromium) and through
gradio_client, with results datasets scored from the real AMI stereo call. Loopback only."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _spear_samples import score_and_write  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"

pytestmark = pytest.mark.browser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory, real_dir):
    """The app on 127.0.0.1:<free port> with a human and a model results dataset and one bad folder."""
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    root = tmp_path_factory.mktemp("space")
    built = score_and_write(root)
    bad = root / "bad_run"
    shutil.copytree(built["model_run"], bad)
    s = json.loads((bad / "summary.json").read_text())
    s["metric_versions"]["interruptions"] = "7.0"
    (bad / "summary.json").write_text(json.dumps(s))
    spec = importlib.util.spec_from_file_location("spear_space_app_served", REPO / "space" / "app.py")
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    sources = [str(built["human_ds"]), str(built["model_ds"]), str(bad)]
    demo = app.build_app(sources)
    port = _free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        yield {"url": f"http://127.0.0.1:{port}", "built": built, "bad": bad, "sources": sources}
    finally:
        demo.close()


def test_browser_leaderboard_and_samples(served, tmp_path):
    """Leaderboard renders at once (human latency 742.055), a bad folder is reported, a row click
    opens the model in the sample browser, the three audio players load, next steps."""
    if not Path(CHROMIUM).exists():
        pytest.skip("system chromium not installed")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(served["url"], wait_until="domcontentloaded")
            page.wait_for_selector("#leaderboard >> text=742.055", timeout=30000)
            assert page.locator("#leaderboard >> text=toy-delayed-model").count() >= 1
            status = page.locator("#status").inner_text()
            assert "rejected" in status and "unknown metric version interruptions='7.0'" in status
            assert page.locator("#leaderboard >> text=Interruptions · latency_ms [ms] ≈human").count() >= 1
            page.screenshot(path=str(tmp_path / "leaderboard.png"), full_page=True)

            page.locator("#leaderboard >> text=toy-delayed-model").first.click()
            page.get_by_role("tab", name="Samples").click()
            page.wait_for_function(
                "() => document.querySelector('#model input') && document.querySelector('#model input').value.startsWith('toy-delayed-model')",
                timeout=20000)
            page.wait_for_function(
                "() => document.querySelector('#sample input') && document.querySelector('#sample input').value.startsWith('row 0')",
                timeout=20000)
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
        finally:
            browser.close()
    for name in ("leaderboard.png", "samples.png", "plots.png"):
        assert (tmp_path / name).stat().st_size > 10_000
    print("screenshots in", tmp_path)


def test_gradio_client_table_and_sample(served):
    """The API: the table (strings, '-' for missing) and one sample with its audio files."""
    from gradio_client import Client

    client = Client(served["url"], verbose=False)
    table = client.predict(api_name="/leaderboard")
    rows = {r[0] + "|" + r[-1]: dict(zip(table["headers"], r)) for r in table["data"]}
    lat = "Interruptions · latency_ms [ms] ≈human"
    assert rows["human|published"][lat] == "742.055"
    assert rows["gpt-audio-1.5|published"]["Interruptions · interrupted_time_ms [ms] ≈human"] == "-"
    toy = rows[f"toy-delayed-model|{served['built']['model_ds']}"]
    assert toy["Speech quality · UTMOS [MOS 1-5] ↑"] == "-" and toy["inference mode"] == "Full-duplex"
    assert any("unknown metric version" in e for e in table["errors"])
    half = client.predict(inference_modes="Half-duplex", api_name="/leaderboard")
    assert sorted(r[0] for r in half["data"]) == ["Qwen2.5-Omni-7B", "mini-omni"]

    inp, human, model, tq, th, tm, scores, info = client.predict(str(served["built"]["model_ds"]), 1, api_name="/sample")
    for f in (inp, human, model):
        assert Path(f).read_bytes()[:4] == b"RIFF"
    assert tq.startswith("FEE016:") and th.startswith("MEO015:") and tm.startswith("MODEL:")
    vals = dict(scores["data"])
    assert vals["interruption"] == "true" and float(vals["interrupted_time_ms"]) > 0
