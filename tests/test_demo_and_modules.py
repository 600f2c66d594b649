"""The README's main job (`spearbench demo`) and `evaluate.load` of the local module folders."""

import csv
import re

import pytest

from spear_metrics.cli import main

from conftest import REPO


@pytest.mark.slow
def test_demo_on_the_packaged_real_call(tmp_path, capsys):
    """The README's first command: four systems (the cascade makes its own speech), every offline
    dimension with intervals, a results dataset per system (the human answers' too), the report."""
    import json
    import shutil

    from spear_metrics.commands.demo import packaged_sample

    try:
        packaged_sample()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    assert main(["demo", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    board = {r["model"]: r for r in csv.DictReader(open(tmp_path / "leaderboard.csv"))}
    expected = {"human", "fixed-delay-0.7s", "barge-in-1s"} | ({"cascade"} if shutil.which("espeak-ng") else set())
    assert set(board) == expected
    assert all(r["n_samples"] == "2" and r["n_failed"] == "0" for r in board.values())
    h, fd, bi = board["human"], board["fixed-delay-0.7s"], board["barge-in-1s"]
    # the two human answers start 0.281 s and 0.020 s after their questions (STM times);
    # fixed-delay replays the same audio at 0.7 s: only the onset term changes.
    assert float(fd["latency_ms"]) - float(h["latency_ms"]) == pytest.approx(700 - 1000 * (0.281 + 0.020) / 2, abs=0.01)
    # human answers do not overlap the questions; barge-in overlaps question speech in every sample
    assert float(h["interruptions_%"]) == 0.0 and float(bi["interruptions_%"]) == 100.0
    assert float(bi["interrupted_time_ms"]) > 0 and float(bi["latency_ms"]) == 0.0
    # same answer audio for all three systems: same explainable features and speech quality
    assert h["explainable_duration_s"] == fd["explainable_duration_s"] == bi["explainable_duration_s"]
    assert float(h["explainable_duration_s"]) == pytest.approx((1.362 + 1.542) / 2, abs=0.001)
    assert h["WER_norm_%"] == fd["WER_norm_%"] != "" and h["DNSMOS_OVRL"] == bi["DNSMOS_OVRL"] != ""
    s = json.loads((tmp_path / "results" / "human" / "summary.json").read_text())
    assert s["latency_ms_n"] == 2 and "speech_quality" in s["metrics"]
    # the call is one conversation: the conversation bootstrap gives no interval, and says why
    assert s["latency_ms_ci95"] is None and s["bootstrap"]["note"].startswith("1 conversation: ")
    if "cascade" in board:  # espeak-ng speech, placed at the question end: no interruption values
        c = board["cascade"]
        assert c["interruptions_%"] == "" and float(c["explainable_duration_s"]) > 1.0
    assert (tmp_path / "datasets" / "human" / "summary.json").is_file()
    # each system's onset rule is recorded where compare, report and the Space read it (the reference
    # systems' answers share one folder without an infer record: they said "unstated" there while the
    # printed leaderboard said [fixed_delay])
    for where in ("results", "datasets"):
        kinds = {n: json.loads((tmp_path / where / n / "summary.json").read_text())["onset_kind"] for n in board}
        assert kinds["human"] == "reference" and kinds["fixed-delay-0.7s"] == kinds["barge-in-1s"] == "fixed_delay"
        assert kinds.get("cascade", "question_end") == "question_end"
    subject = "cascade" if "cascade" in board else "fixed-delay-0.7s"
    report = tmp_path / "results" / subject / "report" / "index.html"
    assert report.is_file() and f"report: {report}\n" in printed
    assert "barge-in-1s" in printed and "latency_ms" in printed
    # SPEARBench's overall score cannot exist on two samples of one call: each system says why
    assert h["human_likeness_auroc"] == fd["human_likeness_auroc"] == ""
    # the reason every system shares, printed once (beside the key's row)
    assert all(board[n]["human_likeness_auroc"] == "" for n in board)
    assert printed.count("not computed: 2 model and 2 human answers and 1 conversation") == 1
    assert json.loads((tmp_path / "results" / "fixed-delay-0.7s" / "summary.json").read_text())["human_likeness_auroc_n"] == 4
    # what to do next, each command on its own line; every other line fits 120 columns
    commands = [line[2:] for line in printed.splitlines() if line.startswith("  ") and not line.startswith("   ")]
    assert all(len(line) <= 120 for line in printed.splitlines() if line[2:] not in commands)
    from spear_metrics.commands import runnable

    space = next(c for c in commands if c.startswith(f"{runnable('python')} -m spear_metrics.space --results "))
    assert space.split("--results ")[1].split() == [str(tmp_path / "datasets" / n) for n in board]
    build = next(c for c in commands if c.startswith(f"{runnable('spearbench')} build-dataset"))
    assert f"--source {tmp_path / 'spear_data'}" in build and "//" not in re.sub(r"https?://", "", printed)
    assert (tmp_path / "spear_data" / "inputs" / "test" / "naturalistic" / "metadata.csv").is_file()
    # a rerun scores nothing again and says so
    assert main(["demo", "--out", str(tmp_path)]) == 0
    again = capsys.readouterr().out
    assert re.search(r"resumed: rows already done by an earlier demo in \S+: .*human scores 2 of 2", " ".join(again.split()))


@pytest.mark.parametrize("name", ["interruptions", "explainable_features"])
def test_evaluate_load_local_module(name, real_dir, tmp_path, monkeypatch):
    import evaluate

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    m = evaluate.load(str(REPO / "spear_metrics" / name))
    q = str(real_dir / "DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav")  # stereo input clip
    a = str(real_dir / "speechbrain__p226_002.wav")
    r = m.compute(audio_path=[q], answer_audio_path=[a], context_end_time=[10.0], question_end_time=[12.0], answer_start_time=[0.5])
    assert r["n_scored"] == 1 and len(r["per_sample"]) == 1
    if name == "interruptions":
        assert r["interruptions_%"] == 0.0 and r["latency_ms"] > 500  # 0.5 s onset + the VCTK clip's leading silence
    else:
        assert r["explainable_duration_s"] == pytest.approx(4.74, abs=0.01)
    with pytest.raises(ValueError):  # the five timing inputs are required
        m.compute(audio_path=[q], answer_audio_path=[a])
