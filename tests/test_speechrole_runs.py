"""``spearbench speechrole score/summarize`` end to end: hand-made test data of the real schema
around real recordings, a loopback OpenAI-compatible judge on 127.0.0.1 (v1 prose, v2 JSON,
malformed replies, errors), resumption after an error and after kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import FakeChatServer
from speechrole_fixtures import PositionBiasedJudge, make_eval_root
from spear_metrics.cli import main
from spear_metrics.speechrole.protocol import ASPECTS

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def eval_root(tmp_path, real_dir) -> Path:
    return make_eval_root(tmp_path, real_dir)


def score(root: Path, url: str, out: Path, *extra: str, mode: str = "single") -> int:
    return main(["speechrole", "score", "--outputs", str(root / "model_output" / "sys"), "--test-data", str(root),
                 "--mode", mode, "--judge-url", url, "--judge-model", "fake-gemini", "--out", str(out),
                 "--judge-backoff-s", "0", "--no-progress", "--bootstrap", "100", *extra])


def test_v1_score_writes_upstream_layout_and_summary(eval_root, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_JUDGE_KEY", "sk-secret-123")
    judge = PositionBiasedJudge(eval_root, malformed=("Knowledge_Consistency",))
    out = tmp_path / "RESULTS"
    with FakeChatServer(judge) as srv:
        rc = score(eval_root, srv.url, out, "--judge-retries", "1", "--judge-concurrency", "3",
                   "--judge-key-env", "FAKE_JUDGE_KEY")
    assert rc == 0
    n_calls = 3 * 8  # three single-turn dialogues, one call per aspect
    # Knowledge_Consistency is never parsable: 1 + 1 retry per dialogue
    assert len(srv.requests) == n_calls + 3
    assert {h.get("Authorization") for h in srv.headers} == {"Bearer sk-secret-123"}
    assert all("temperature" not in b and "seed" not in b for b in srv.requests)  # v1 sends neither
    # the results layout of the judge script (flat, indent 4), Model A = the system
    shrek = json.loads((out / "single" / "Shrek.json").read_text(encoding="utf-8"))
    assert [o["idx"] for o in shrek] == [0, 1]
    assert list(shrek[0]) == ["idx", *[f"{a}_results" for a in ASPECTS]]
    base = PositionBiasedJudge.BASE
    assert shrek[0]["Speech_Fluency_results"]["score"] == [base["Speech_Fluency"] + 1, 8]
    assert shrek[0]["Speech_Fluency_results"]["reason"].endswith(f"[Scores]: ({base['Speech_Fluency'] + 1}, 8)")
    kc = shrek[1]["Knowledge_Consistency_results"]
    assert kc["score"] is None and kc["status"] == "unparsed" and "2 attempt" in kc["error"]
    assert (out / "single" / "Shrek.json").read_text(encoding="utf-8").startswith("[\n    {\n        \"idx\": 0")
    replies = [json.loads(x) for x in (out / "replies.jsonl").read_text().splitlines()]
    assert len(replies) == n_calls + 3 and sum(r["error"] is not None for r in replies) == 6
    summary = json.loads((out / "summary.json").read_text())
    # every dialogue: system BASE + 1, reference 8
    for a in ASPECTS[:-1]:
        assert summary[f"single_{a}_mean_A"] == base[a] + 1 and summary[f"single_{a}_mean_B"] == 8
        assert summary[f"single_{a}_ratio_100_sumA_over_sumB"] == pytest.approx(100 * (base[a] + 1) / 8)
        assert summary[f"single_{a}_ratio_100_sumA_over_sumB_ci95"] == pytest.approx([100 * (base[a] + 1) / 8] * 2)
        assert summary[f"single_{a}_na_share"] == 0.0
    assert summary["single_Knowledge_Consistency_mean_A"] is None and summary["single_Knowledge_Consistency_na_share"] == 1
    assert summary["single_all_aspects_na_share"] == pytest.approx(3 / 24)
    assert (summary["n_samples"], summary["n_scored"], summary["n_failed"]) == (3, 3, 0)
    assert summary["benchmark"] == "speechrole" and summary["judge_model"] == "fake-gemini"
    assert summary["protocol"] == "v1" and summary["prompt_version"].startswith("v1-")
    assert summary["judge_temperature"] is None and summary["reference_key"] == "role_speech_path1"
    assert summary["judge_endpoint"] == srv.url
    assert summary["headline_note"].startswith("unsupported")
    # the key is nowhere on disk, nor on the console
    for f in out.rglob("*"):
        if f.is_file():
            assert "sk-secret-123" not in f.read_text(encoding="utf-8", errors="replace")
    printed = capsys.readouterr()
    assert "sk-secret-123" not in printed.out + printed.err
    assert "Speech_Fluency" in printed.out


def test_v2_swap_order_reports_position_bias(eval_root, tmp_path):
    judge = PositionBiasedJudge(eval_root)
    out = tmp_path / "R2"
    with FakeChatServer(judge) as srv:
        assert score(eval_root, srv.url, out, "--protocol", "v2", "--swap-order", "--audio-data", "base64",
                     mode="single,multi") == 0
    # one call per dialogue and order: 4 dialogues x 2 orders
    assert len(srv.requests) == 8 and all(b["temperature"] == 0.0 for b in srv.requests)
    assert all(not p["input_audio"]["data"].startswith("data:") for b in srv.requests
               for p in b["messages"][1]["content"] if p["type"] == "input_audio")
    multi = [b for b in srv.requests if len(b["messages"][1]["content"]) == 7]  # 2 turns: 2 + 2 audio parts
    assert len(multi) == 2
    swapped = json.loads((out / "swapped" / "multi" / "Shrek.json").read_text())
    assert swapped[0]["Speech_Fluency_results"]["score"] == [9, PositionBiasedJudge.BASE["Speech_Fluency"]]
    s = json.loads((out / "summary.json").read_text())
    assert s["modes"] == ["single", "multi"] and s["swapped"] is True
    for scope in ("single", "multi", "overall"):
        for a in ASPECTS:
            assert s[f"{scope}_{a}_position_bias_system"] == pytest.approx(1.0)  # (BASE + 1) - BASE
            assert s[f"{scope}_{a}_position_bias_reference"] == pytest.approx(1.0)  # 9 - 8
        assert s[f"{scope}_all_aspects_position_bias_system"] == pytest.approx(1.0)
    assert s["overall_Instruction_Adherence_position_bias_system_n"] == 4
    assert s["overall_n_dialogues"] == 4 and s["multi_n_pairs_scored"] == 8
    rows = [json.loads(x) for x in (out / "per_sample.jsonl").read_text().splitlines()]
    assert [(r["row"], r["mode"], r["role"], r["dialogue"]) for r in rows] == [
        (0, "single", "Shrek", 0), (1, "single", "Shrek", 1), (2, "single", "Thor", 0), (3, "multi", "Shrek", 0)]


def test_failed_dialogues_and_errors_do_not_stop_the_run(eval_root, tmp_path):
    (eval_root / "model_output" / "sys" / "single_result" / "json" / "Thor.json").unlink()
    calls = {"n": 0}

    def flaky(body):  # a 500 on every 5th call, once
        calls["n"] += 1
        if calls["n"] % 5 == 0:
            return 500, "overloaded"
        return 200, "fine [Scores]: (6, 9)"

    out = tmp_path / "R3"
    with FakeChatServer(flaky) as srv:
        assert score(eval_root, srv.url, out, "--judge-concurrency", "1") == 0
    failed = [json.loads(x) for x in (out / "failed_dialogues.jsonl").read_text().splitlines()]
    assert failed == [{"mode": "single", "role": "Thor", "dialogue": 0,
                       "error": "no model output for role Thor (single_result/json/Thor.json)"}]
    s = json.loads((out / "summary.json").read_text())
    assert (s["n_samples"], s["n_scored"], s["n_failed"]) == (3, 2, 1)
    # 16 calls answered; every 5th request was a 500 and was retried: requests 5, 10, 15
    assert len(srv.requests) == 16 + 3
    assert s["single_Speech_Fluency_mean_A"] == 6 and s["single_n_pairs_scored"] == 16
    assert s["single_n_pairs_not_judged"] == 0 and s["single_n_dialogues_scored"] == 2  # Thor: a failed dialogue
    rows = [json.loads(x) for x in (out / "per_sample.jsonl").read_text().splitlines()]
    assert rows[2]["status"] == "failed" and rows[2]["error"].startswith("no model output for role Thor")


def test_resume_after_a_fatal_judge_error_asks_no_call_twice(eval_root, tmp_path, capsys):
    out = tmp_path / "R4"
    first = PositionBiasedJudge(eval_root, fail_after=10)  # then 401 for everything: the run stops
    with FakeChatServer(first) as srv:
        assert score(eval_root, srv.url, out, "--judge-concurrency", "3") == 2
    assert "the judge refused the request" in capsys.readouterr().err
    assert not (out / "summary.json").exists()
    second = PositionBiasedJudge(eval_root)
    with FakeChatServer(second) as srv:
        assert score(eval_root, srv.url, out, "--judge-concurrency", "3") == 0
    answered = {k: first.answered.get(k, 0) + second.answered.get(k, 0) for k in {*first.answered, *second.answered}}
    assert len(answered) == 24 and set(answered.values()) == {1}  # every call answered exactly once in all
    assert sum(first.answered.values()) >= 10 and sum(second.answered.values()) == 24 - sum(first.answered.values())
    s = json.loads((out / "summary.json").read_text())
    assert s["n_scored"] == 3 and s["single_n_pairs_scored"] == 24
    # the same folder with other settings is refused, with --overwrite it is redone
    with FakeChatServer(PositionBiasedJudge(eval_root)) as srv:
        assert score(eval_root, srv.url, out, "--protocol", "v2") == 2
        assert "other inputs or settings" in capsys.readouterr().err
        assert score(eval_root, srv.url, out, "--protocol", "v2", "--overwrite") == 0
    assert json.loads((out / "summary.json").read_text())["protocol"] == "v2"


def test_kill_9_then_rerun_loses_and_repeats_nothing_logged(eval_root, tmp_path):
    out = tmp_path / "R5"
    slow = PositionBiasedJudge(eval_root, delay_s=0.3)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with FakeChatServer(slow) as srv:
        cmd = [sys.executable, "-m", "spear_metrics.cli", "speechrole", "score", "--outputs",
               str(eval_root / "model_output" / "sys"), "--test-data", str(eval_root), "--mode", "single",
               "--judge-url", srv.url, "--judge-model", "fake-gemini", "--out", str(out), "--no-progress",
               "--judge-concurrency", "2", "--bootstrap", "0"]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        log = out / ".work" / "single" / "rank-0.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if log.is_file() and len(log.read_text().splitlines()) >= 4:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    logged = {json.loads(x)["audio_path"] for x in log.read_text().splitlines() if x.strip()}
    assert 4 <= len(logged) < 24
    second = PositionBiasedJudge(eval_root)
    with FakeChatServer(second) as srv:
        assert score(eval_root, srv.url, out, "--judge-concurrency", "2") == 0
    # nothing logged before the kill was asked again; only the calls in flight at the kill were
    assert sum(second.answered.values()) == 24 - len(logged)
    rows = [json.loads(x) for x in (out / "per_sample.jsonl").read_text().splitlines()]
    assert [r["status"] for r in rows] == ["ok"] * 3
    assert all(r[f"{a}_status"] == "scored" for r in rows for a in ASPECTS)


def test_summarize_released_folder_equals_score_folder_summary(tmp_path):
    from conftest import FIXTURES

    rel = FIXTURES / "speechrole" / "ali_cloud"
    if not rel.is_dir():
        pytest.fail("tests/fixtures is incomplete")
    assert main(["speechrole", "summarize", "--results", str(rel), "--out", str(tmp_path / "S"), "--bootstrap", "50"]) == 0
    s = json.loads((tmp_path / "S" / "summary.json").read_text())
    assert s["result_shapes"] == {"nested": 4} and s["n_samples"] == 8
    assert s["judge_note"].startswith("the judge, protocol") and s["models"] == {"judge": "not recorded in the result files"}
    # Thor multi Emotion_Appropriateness (4, 8), (4, 9); Sherlock multi (3, 9), (5, 9)
    assert s["multi_Emotion_Appropriateness_ratio_100_sumA_over_sumB"] == pytest.approx(100 * (4 + 4 + 3 + 5) / (8 + 9 + 9 + 9))


def test_results_dataset_push_load_and_the_space_tab(tmp_path, capsys):
    from conftest import FIXTURES
    from spear_metrics.results import load_results
    from spear_metrics.speechrole.results import leaderboard_frame

    rel = FIXTURES / "speechrole" / "ali_cloud"
    if not rel.is_dir():
        pytest.fail("tests/fixtures is incomplete")
    run = tmp_path / "S"
    assert main(["speechrole", "summarize", "--results", str(rel), "--out", str(run), "--bootstrap", "100"]) == 0
    ds = tmp_path / "DS"
    assert main(["push-results", str(run), "--local-dir", str(ds), "--model-name", "ali_cloud"]) == 0
    res = load_results(ds)
    assert res.model == "ali_cloud" and len(res.samples) == 8 and res.summary["benchmark"] == "speechrole"
    card = (ds / "README.md").read_text(encoding="utf-8")
    assert "benchmark: speechrole" in card and "| overall | all_aspects |" in card
    table = leaderboard_frame([res], "single")
    # single, all eight aspects pooled over the four dialogues of Sherlock Holmes and Shrek
    assert table.loc[0, "dialogues"] == 4 and table.loc[0, "all_aspects · 100·ΣA/ΣB"].startswith(
        f"{res.summary['single_all_aspects_ratio_100_sumA_over_sumB']:.1f} [")
    # an edited summary is refused before anything is written
    s = json.loads((run / "summary.json").read_text())
    s["overall_Speech_Fluency_mean_A"] = 9.5
    (run / "summary.json").write_text(json.dumps(s))
    assert main(["push-results", str(run), "--local-dir", str(tmp_path / "DS2"), "--model-name", "x"]) == 2
    assert "overall_Speech_Fluency_mean_A" in capsys.readouterr().err
    s["overall_Speech_Fluency_mean_A"] = 6.0
    (run / "summary.json").write_text(json.dumps(s))
    assert main(["push-results", str(run), "--local-dir", str(tmp_path / "DS3"), "--model-name", "x",
                 "--with-audio"]) == 2
    # the Space: the SPEAR table leaves it out, the SpeechRole-Eval tab shows it
    from spear_metrics.space import tables
    from spear_metrics.speechrole.ui import SPACE_TAB

    labels = tables.set_sources([str(ds)])
    rows, errors = tables.all_rows(labels)
    assert errors == [] and all(r["source"] == "published" for r in rows)
    tab = tables.benchmark_table(SPACE_TAB, labels, "overall")
    assert list(tab["model"]) == ["ali_cloud"] and tab.loc[0, "source"] == "local:DS"


def test_evaluate_module_aggregates_result_files():
    import evaluate
    from conftest import FIXTURES

    rel = FIXTURES / "speechrole"
    if not rel.is_dir():
        pytest.fail("tests/fixtures is incomplete")
    m = evaluate.load(str(REPO / "spear_metrics" / "speechrole" / "speechrole.py"))
    r = m.compute(result_file=[str(rel / "ali_cloud/single/Shrek.json"), str(rel / "ali_cloud/multi/Thor.json")],
                  mode=["single", "multi"], bootstrap=0)
    # the card's example: Shrek single Instruction_Adherence (7, 10) and (9, 10)
    assert r["single_Instruction_Adherence_mean_A"] == 8.0 and r["single_Instruction_Adherence_ratio_100_sumA_over_sumB"] == 80.0
    # Thor multi Speech_Fluency (5, 9) and (5, 9)
    assert r["multi_Speech_Fluency_mean_A"] == 5 and r["n_samples"] == 4 and len(r["per_sample"]) == 4
    with pytest.raises(ValueError, match="one each"):
        m.compute(result_file=[str(rel / "ali_cloud/single/Shrek.json")], mode=["single"], order=["benchmark", "swapped"])


def test_foreign_results_and_outputs_are_never_overwritten(eval_root, tmp_path, capsys):
    from conftest import FIXTURES

    rel = FIXTURES / "speechrole" / "ali_cloud"
    if not rel.is_dir():
        pytest.fail("tests/fixtures is incomplete")
    released = tmp_path / "test_results" / "ali_cloud"
    shutil_copy = __import__("shutil").copytree
    shutil_copy(rel, released)
    before = {p: p.read_bytes() for p in released.rglob("*.json")}
    with FakeChatServer(PositionBiasedJudge(eval_root)) as srv:
        assert score(eval_root, srv.url, released) == 2
        assert score(eval_root, srv.url, released, "--overwrite") == 2
    err = capsys.readouterr().err
    assert "holds files this tool did not write (multi, single)" in err and "--overwrite included" in err
    assert {p: p.read_bytes() for p in released.rglob("*.json")} == before
    assert not (released / ".work").exists()  # nothing at all was written there
    # infer into the folder of a system's existing outputs is refused too
    outputs = eval_root / "model_output" / "sys"
    assert main(["speechrole", "infer", "--agent", "human", "--test-data", str(eval_root), "--mode", "single",
                 "--out", str(outputs), "--no-progress"]) == 2
    assert "holds files this tool did not write" in capsys.readouterr().err
    assert not (outputs / ".work").exists()


def test_overwrite_replaces_only_what_score_recorded(eval_root, tmp_path, capsys):
    out = tmp_path / "R6"
    with FakeChatServer(PositionBiasedJudge(eval_root)) as srv:
        assert score(eval_root, srv.url, out) == 0
        # the owner's own notes beside the results, and inside a results folder score wrote
        (out / "notes.txt").write_text("mine", encoding="utf-8")
        (out / "single" / "notes.txt").write_text("mine too", encoding="utf-8")
        old_shrek = (out / "single" / "Shrek.json").read_bytes()
        assert score(eval_root, srv.url, out, "--protocol", "v2", "--overwrite") == 0
        assert json.loads((out / "summary.json").read_text())["protocol"] == "v2"
        assert (out / "single" / "Shrek.json").read_bytes() != old_shrek  # recorded: replaced
        assert (out / "notes.txt").read_text() == "mine" and (out / "single" / "notes.txt").read_text() == "mine too"
        # a result file edited by someone is theirs now: never replaced, never summarized as the judge's
        edited = out / "single" / "Shrek.json"
        edited.write_text(edited.read_text(encoding="utf-8").replace('"idx": 0', '"idx": 0 '), encoding="utf-8")
        kept = edited.read_bytes()
        assert score(eval_root, srv.url, out, "--protocol", "v1", "--overwrite") == 2
        assert "judge results this command did not write (single/Shrek.json)" in capsys.readouterr().err
        assert edited.read_bytes() == kept
    # summarize never writes into a score folder (another command's), and a score folder is summarized elsewhere
    assert main(["speechrole", "summarize", "--results", str(out), "--out", str(out), "--bootstrap", "0"]) == 2
    assert "holds the output of `spearbench speechrole score`" in capsys.readouterr().err


def test_hub_test_data_offline_is_one_line(eval_root, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    rc = main(["speechrole", "score", "--outputs", str(eval_root / "model_output" / "sys"), "--test-data",
               "yuhui1038/SpeechRole-Eval", "--mode", "single", "--judge-url", "http://127.0.0.1:9/v1",
               "--judge-model", "j", "--out", str(tmp_path / "R"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "cannot fetch the test data from the Hub" in err
