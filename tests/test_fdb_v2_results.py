"""Full-Duplex-Bench v2 runs as results datasets: ``fdb score --version 2`` (score_run) ->
``push-results`` -> ``datasets.load_dataset`` round trip of both configs (per conversation, per
event), checked through the registry's results hook; ``report`` refusing the run in one line
(exit 2); its tab of the leaderboard Space (table, and in headless Chromium) and the tab's
conversation browser (players and time line, called directly). The judge is the loopback fake;
its replies are written here, so every value below is computed by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import FakeChatServer, served_page

TASKS = {
    "version": 6,
    "settings": {"turn_limit": 2, "max_duration_sec": 20, "examiner_can_interrupt": True,
                 "examiner_is_interruptible": False, "language": "en-US"},
    "splits": {
        "Daily": {"classes": [], "tasks": [
            {"id": "Daily.ordering.901", "split": "Daily", "class_id": "ordering",
             "examiner_system_prompt": "Order tea.", "examiner_task_prompt": "T1: tea.",
             "staged_reveal": {"T1": "Ask for tea.", "T2": "Say green.", "T3": "Name.", "T4": "Confirm."}}]},
        "Correction": {"classes": [], "tasks": [
            {"id": "Correction.fix.902", "split": "Correction", "class_id": "fix",
             "examiner_system_prompt": "Book, then change.", "examiner_task_prompt": "T1: six. T2: seven.",
             "staged_reveal": {"T1": "Book at six.", "T2": "Change to seven.", "T3": "Name.", "T4": "Confirm."}},
            {"id": "Correction.fix.903", "split": "Correction", "class_id": "fix",
             "examiner_system_prompt": "Garbage please.", "examiner_task_prompt": "T1: x.",
             "staged_reveal": {"T1": "GARBAGE.", "T2": "x", "T3": "x", "T4": "x"}}]},
    },
}
PROMPTS = {"system_prompt": "Rate Channel B.", "turn_taking_fluency_prompt": "TT 1-5.",
           "multi_turn_instruction_following_prompt": "IF 1-5.",
           "task_specific_prompts": [{"id": "correction", "title": "Correction Handling", "prompt": "Rate corrections 1-5."}],
           "output_format_prompt": "Output Format ..."}
#: Correction.fix.902: events [10, 20] (TT 4, IF 2) and [14, 16] (TT 2, IF 4): TT 3, IF 3, task 5
CORRECTION = '{"Turn-taking event and score": [[[10, 20], 4, 2], [[14, 16], 2, 4]], "Task-specific score": 5}'
#: Daily.ordering.901: one event [1, 5] (TT 5, IF 3), no task-specific score (N/A)
DAILY = '{"Turn-taking event and score": [[[1, 5], 5, 3]], "Task-specific score": "N/A"}'


def _reply(body):
    text = body["messages"][0]["content"]
    if "GARBAGE" in text:
        return 200, "no JSON here"
    return 200, CORRECTION if "Change to seven" in text else DAILY


@pytest.fixture(scope="module")
def v2_run(tmp_path_factory) -> Path:
    """Three conversations with transcripts scored: two judged, one failed (garbage reply)."""
    from spear_metrics.core.judge import Judge
    from spear_metrics.full_duplex_v2.score import score_run
    from spear_metrics.full_duplex_v2.tasks import load_tasks

    tmp = tmp_path_factory.mktemp("v2res")
    (tmp / "tasks.json").write_text(json.dumps(TASKS))
    tf = load_tasks(tmp / "tasks.json")
    for t in tf.tasks:
        (tmp / "conv" / t.id).mkdir(parents=True)
        (tmp / "conv" / t.id / "manifest.json").write_text("{}")
        for ch in "AB":
            (tmp / "conv" / t.id / f"{ch}.json").write_text(json.dumps(
                {"text": "hello", "chunks": [{"text": "hello", "timestamp": [0.5, 0.9]}]}))
    (tmp / "eval_prompts.json").write_text(json.dumps(PROMPTS))
    with FakeChatServer(_reply) as srv:
        judge = Judge(srv.url, "judge-2025-01-01", api_key="", temperature=0.2, max_retries=0, backoff_s=0)
        score_run(tmp / "conv", tf.tasks, tmp / "eval_prompts.json", judge, tmp / "run", n_resamples=50)
    return tmp / "run"


@pytest.mark.slow
def test_push_results_load_dataset_round_trip(v2_run, tmp_path, capsys):
    import datasets

    from spear_metrics.cli import main
    from spear_metrics.full_duplex_v2.results import leaderboard_frame
    from spear_metrics.results import load_results_folder

    rows = [json.loads(x) for x in (v2_run / "per_sample.jsonl").read_text().splitlines()]
    summary = json.loads((v2_run / "summary.json").read_text())
    assert [(r["id"], r["status"]) for r in rows] == [("Daily.ordering.901", "ok"), ("Correction.fix.902", "ok"),
                                                      ("Correction.fix.903", "failed")]
    assert (summary["n_samples"], summary["n_scored"], summary["n_failed"]) == (3, 2, 1)
    assert summary["splits"]["all"]["avg_turn_taking"]["mean"] == 4.0  # (5 + 3) / 2
    ds_dir = tmp_path / "DS"
    assert main(["push-results", str(v2_run), "--local-dir", str(ds_dir), "--model-name", "example"]) == 0
    cache = str(tmp_path / "hf_cache")
    conv = sorted(datasets.load_dataset(str(ds_dir), split="test", cache_dir=cache).to_list(), key=lambda r: r["row"])
    assert [r["id"] for r in conv] == [r["id"] for r in rows] and conv[2]["status"] == "failed"
    assert "malformed reply" in conv[2]["reason"]
    assert (conv[1]["avg_turn_taking"], conv[1]["avg_instruction_following"], conv[1]["avg_task_specific"]) == (3, 3, 5)
    assert conv[0]["avg_task_specific"] is None and conv[0]["n_files"] == 0
    # [10, 20] overlaps 0-15 by 5 s, [14, 16] by 1 s: TT (4*5 + 2*1) / 6
    assert conv[1]["TT[0-15]"] == pytest.approx(22 / 6) and json.loads(conv[1]["events"]) == [[10, 20, 4, 2], [14, 16, 2, 4]]
    events = datasets.load_dataset(str(ds_dir), "events", split="test", cache_dir=cache).to_list()
    assert [(e["id"], e["start_s"], e["end_s"], e["turn_taking_fluency"], e["instruction_following"]) for e in events] == [
        ("Daily.ordering.901", 1.0, 5.0, 5, 3), ("Correction.fix.902", 10.0, 20.0, 4, 2),
        ("Correction.fix.902", 14.0, 16.0, 2, 4)]
    card = (ds_dir / "README.md").read_text(encoding="utf-8")
    assert "benchmark: full_duplex_v2" in card and "config_name: events" in card and "| all | 2 | 4.000 [" in card
    res = load_results_folder(ds_dir, where="DS")  # what the Space reads: checked again on load
    assert res.summary["splits"] == summary["splits"]
    frame = leaderboard_frame([res])
    assert frame["split"].tolist() == ["all", "Correction", "Daily"] and frame["conversations"].tolist() == [2, 1, 1]
    assert frame["avg_turn_taking"].tolist()[1:] == ["3.000", "5.000"]  # one conversation: no interval
    # an edited split mean is refused, in one line, before anything is written
    summary["splits"]["all"]["avg_turn_taking"]["mean"] = 4.5
    (v2_run / "summary.json").write_text(json.dumps(summary))
    capsys.readouterr()
    try:
        assert main(["push-results", str(v2_run), "--local-dir", str(tmp_path / "DS2"), "--model-name", "x"]) == 2
    finally:
        summary["splits"]["all"]["avg_turn_taking"]["mean"] = 4.0
        (v2_run / "summary.json").write_text(json.dumps(summary))
    err = capsys.readouterr().err
    assert "splits['all']['avg_turn_taking'] is 4.5 (n 2) but its rows give 4.0 (n 2)" in err and err.count("\n") == 1
    assert not (tmp_path / "DS2").exists()
    # an edited event is refused too (the row's values are recomputed from its events)
    rows[1]["events"][0][2] = 5
    (v2_run / "per_sample.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    try:
        assert main(["push-results", str(v2_run), "--local-dir", str(tmp_path / "DS3"), "--model-name", "x"]) == 2
    finally:
        rows[1]["events"][0][2] = 4
        (v2_run / "per_sample.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert "row 1 'avg_turn_taking' is 3.0 but its events give 3.5" in capsys.readouterr().err


def test_report_refuses_a_v2_run_in_one_line(v2_run, tmp_path, capsys):
    from spear_metrics.cli import main

    capsys.readouterr()
    assert main(["report", str(v2_run), "--out", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Full-Duplex-Bench v2 run has no report page" in err
    assert not (tmp_path / "rep").exists()


@pytest.mark.slow
@pytest.mark.browser
def test_browser_v2_tab_shows_split_means(v2_run, tmp_path):
    """The leaderboard Space's Full-Duplex-Bench v2 tab in headless Chromium: the loaded results
    dataset's rows, the all-splits mean 4.000 with its interval."""
    import importlib.util
    import os

    from spear_metrics.cli import main

    chromium = "/usr/bin/chromium"
    if not Path(chromium).exists():
        pytest.skip("system chromium not installed")
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    assert main(["push-results", str(v2_run), "--local-dir", str(tmp_path / "DS"), "--model-name", "example-v2"]) == 0
    repo = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("spear_space_app_v2", repo / "spear_metrics" / "space" / "app.py")
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    demo = app.build_app([str(tmp_path / "DS")])
    with served_page(demo, chromium) as page:
        page.get_by_role("tab", name="Full-Duplex-Bench v2").click()
        page.wait_for_function("() => { const t = document.querySelector('#fdb2'); "
                               "return t !== null && t.innerText.includes('example-v2'); }", timeout=30000)
        text = page.locator("#fdb2").inner_text()
        assert "Correction" in text and "Daily" in text and "4.000 [" in text
        assert not page.locator("#fdb2_none").is_visible()


#: the recorded conversation: the real stereo dialogue (AMI, tests/fixtures/real), FEE016 (left) as
#: the examiner, MEO015 (right) as the examinee; the judge rates MEO015's handover at +15.46 s and
#: its backchannel at +5.99 s (times from the fixture's RTTM)
HANDOVER = ('{"Turn-taking event and score": [[[15.46, 17.0], 4, 3], [[5.99, 6.28], 2, 5]], '
            '"Task-specific score": "N/A"}')


def _speech_of(rttm: Path, speaker: str) -> list[list[float]]:
    out = []
    for line in rttm.read_text().splitlines():
        p = line.split()
        if len(p) >= 8 and p[0] == "SPEAKER" and p[7] == speaker:
            out.append([float(p[3]), round(float(p[3]) + float(p[4]), 3)])
    return out


@pytest.mark.slow
def test_space_conversation_browser_plays_both_channels_and_draws_the_judged_events(tmp_path, real_dir):
    """The v2 tab's samples hook, without a browser: a conversation recorded on two real channels,
    scored (loopback judge) and pushed with its audio; the browser's players get A.wav, B.wav and
    combined.wav back as recorded, and its time line draws each channel's speech (the words of
    A.json / B.json) and the two judged events with their scores, as the data holds them."""
    import numpy as np
    import soundfile as sf

    from spear_metrics.cli import main
    from spear_metrics.core.judge import Judge
    from spear_metrics.full_duplex_v2.results import SPACE_TAB
    from spear_metrics.full_duplex_v2.score import score_run
    from spear_metrics.full_duplex_v2.tasks import load_tasks
    from spear_metrics.full_duplex_v2.ui import conversation_choices, show
    from spear_metrics.results import load_results_folder

    stereo = real_dir / "DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav"
    rttm = stereo.with_suffix(".rttm")
    tasks = {**TASKS, "splits": {"Daily": TASKS["splits"]["Daily"]}}
    (tmp_path / "tasks.json").write_text(json.dumps(tasks))
    tf = load_tasks(tmp_path / "tasks.json")
    conv = tmp_path / "conv" / tf.tasks[0].id
    conv.mkdir(parents=True)
    wave, sr = sf.read(stereo, dtype="int16")
    sf.write(conv / "A.wav", wave[:, 0], sr, subtype="PCM_16")
    sf.write(conv / "B.wav", wave[:, 1], sr, subtype="PCM_16")
    sf.write(conv / "combined.wav", wave, sr, subtype="PCM_16")
    (conv / "manifest.json").write_text("{}")
    speech = {"A": _speech_of(rttm, "FEE016"), "B": _speech_of(rttm, "MEO015")}
    for ch, turns in speech.items():  # one chunk per turn: its time span, as an ASR's word times would be
        (conv / f"{ch}.json").write_text(json.dumps(
            {"text": "x " * len(turns), "chunks": [{"text": "x", "timestamp": t} for t in turns]}))
    (tmp_path / "eval_prompts.json").write_text(json.dumps(PROMPTS))
    with FakeChatServer([(200, HANDOVER)]) as srv:
        judge = Judge(srv.url, "judge-2025-01-01", api_key="", temperature=0.2, max_retries=0, backoff_s=0)
        score_run(tmp_path / "conv", tf.tasks, tmp_path / "eval_prompts.json", judge, tmp_path / "run", n_resamples=0)
    row = json.loads((tmp_path / "run" / "per_sample.jsonl").read_text().splitlines()[0])
    assert row["audio_path"] == str(conv / "A.wav") and row["b_speech"] == speech["B"]
    ds = tmp_path / "DS"
    assert main(["push-results", str(tmp_path / "run"), "--local-dir", str(ds), "--model-name", "example-v2",
                 "--with-audio", "--with-inputs"]) == 0
    res = load_results_folder(ds, where="DS")
    assert SPACE_TAB.samples == "spear_metrics.full_duplex_v2.ui:build_samples"
    choices = conversation_choices([res])
    assert [c[0] for c in choices] == ["example-v2 · Daily.ordering.901 · ok"]

    def audio_file(cell):  # the Space's rule: embedded bytes to a file
        if not isinstance(cell, dict) or not cell.get("bytes"):
            return None
        p = tmp_path / f"cell{len(list(tmp_path.glob('cell*')))}.wav"
        p.write_bytes(cell["bytes"])
        return str(p)

    a, b, both, fig, text = show([res], choices[0][1], audio_file)
    got_a, got_b, got_both = sf.read(a, dtype="int16")[0], sf.read(b, dtype="int16")[0], sf.read(both, dtype="int16")[0]
    assert np.array_equal(got_a, wave[:, 0]) and np.array_equal(got_b, wave[:, 1]) and np.array_equal(got_both, wave)
    assert "2 judged events" in text and "turn-taking 3.00" in text  # (4 + 2) / 2
    ax = fig.axes[0]
    bars = [sorted((round(float(p.vertices[:, 0].min()), 3), round(float(p.vertices[:, 0].max()), 3))
                   for p in c.get_paths()) for c in ax.collections[:4]]
    assert bars[0] == [tuple(t) for t in speech["A"]] and bars[1] == [tuple(t) for t in speech["B"]]
    assert bars[2] == [(15.46, 17.0)] and bars[3] == [(5.99, 6.28)]
    assert [t.get_text() for t in ax.texts] == ["TT 4 / IF 3", "TT 2 / IF 5"]
    assert show([res], None, audio_file)[3] is None
