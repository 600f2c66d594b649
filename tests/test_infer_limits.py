"""``infer`` against hostile adapters, on clips cut from the REAL stereo dialogue: an answer that
``score`` would refuse fails at infer time with the reason; an adapter that ends the process
(``os._exit``) cannot make every rerun end the same way."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from conftest import REPO, STEREO_DIALOGUE

from spear_datasets.audio import MAX_DURATION_S, MIN_SAMPLE_RATE
from spear_datasets.schema import MAX_ANSWER_START_S
from spear_metrics.agents import AgentAnswer, register_agent, unregister_agent
from spear_metrics.agents.harness import run_inference

#: (clip start, question end) in seconds of the real dialogue, one row each
CLIPS = [(0.0, 4.0), (5.0, 9.0), (10.0, 14.0)]


def make_csv(root: Path, behaviours: list[str]) -> Path:
    """A SPEAR CSV of ``len(behaviours)`` 4-s stereo clips of the real dialogue; each row's
    ``conversation_id`` names what the test adapter does with it."""
    if not STEREO_DIALOGUE.is_file():
        pytest.fail("real-speech fixtures not found (tests/fixtures is incomplete)")
    src, sr = sf.read(str(STEREO_DIALOGUE), dtype="int16")
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for k, behaviour in enumerate(behaviours):
        a, b = CLIPS[k % len(CLIPS)]
        a += 0.25 * (k // len(CLIPS))
        name = f"clip{k}.wav"
        sf.write(str(root / name), src[round(a * sr): round((a + 4.0) * sr)], sr, subtype="PCM_16")
        rows.append({"audio_path": name, "context_end_time": "0", "question_end_time": f"{b - a:g}",
                     "conversation_id": behaviour, "speakers": "A,B"})
    path = root / "metadata.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def failures(out: Path) -> dict[int, str]:
    return {f["row"]: f["error"] for f in map(json.loads, (out / "failures.jsonl").read_text().splitlines())}


class Hostile:
    """Answers with channel 1 of the input (3 s, 0.3 s after the question) unless the row asks otherwise."""

    def respond(self, audio, row, config):
        what = row.conversation_id
        if what == "onset_huge":
            return AgentAnswer(audio[1, :48000].copy(), 16_000, 1e12)
        if what == "onset_late":  # just past score's limit
            return AgentAnswer(audio[1, :48000].copy(), 16_000, row.question_end_time + MAX_ANSWER_START_S + 1.0)
        if what == "too_long":  # 1 s past the loader's limit, at the lowest accepted rate (58 MB, not 460)
            n = int((MAX_DURATION_S + 1) * MIN_SAMPLE_RATE)
            return AgentAnswer(np.full(n, 0.01, np.float32), MIN_SAMPLE_RATE, row.question_end_time + 0.3)
        return AgentAnswer(audio[1, :48000].copy(), 16_000, row.question_end_time + 0.3, "hello")


def test_answers_score_would_refuse_fail_at_infer_with_the_reason(tmp_path):
    data = make_csv(tmp_path / "data", ["good", "onset_huge", "onset_late", "too_long"])
    register_agent("hostile-limits", Hostile, replace=True)
    try:
        out = tmp_path / "out"
        info = run_inference("hostile-limits", str(data), out, progress=False)
    finally:
        unregister_agent("hostile-limits")
    assert info["n_answered"] == 1 and info["n_failed"] == 3
    why = failures(out)
    assert set(why) == {1, 2, 3}
    assert "score accepts at most 600 s" in why[1] and "onset 1e+12 s" in why[1]
    assert "score accepts at most 600 s" in why[2]
    assert f"answer audio is {MAX_DURATION_S + 1:.0f} s long" in why[3]
    assert sorted(p.name for p in (out / "audio").glob("*.wav")) == ["clip0.wav"]  # nothing written for the refused
    # score takes infer's folder as it is: the good row scored, the others failed with infer's reasons
    from spear_metrics.core.scoring import run_score

    res = tmp_path / "scores"
    run_score(out / "metadata.csv", "interruptions", res, progress=False)
    per = [json.loads(line) for line in (res / "per_sample.jsonl").read_text().splitlines()]
    assert len(per) == 4
    failed = [p for p in per if p.get("error")]
    assert len(failed) == 3 and all("infer failed" in p["error"] for p in failed)


EXIT_SCRIPT = textwrap.dedent("""
    import os, sys
    from spear_metrics.agents import AgentAnswer, register_agent
    from spear_metrics.cli import main

    class Exits:
        def respond(self, audio, row, config):
            if row.conversation_id == "exit" and not os.environ.get("FIXED"):
                os._exit(0)  # no exception, no cleanup: the process is simply gone
            return AgentAnswer(audio[1, :16000].copy(), 16000, row.question_end_time + 0.3)

    register_agent("exits-test", Exits)
    sys.exit(main(["infer", "--agent", "exits-test", "--data", sys.argv[1], "--out", sys.argv[2], "--no-progress",
                   *sys.argv[3:]]))
""")


def test_an_adapter_that_ends_the_process_fails_its_row_on_the_second_rerun(tmp_path):
    data = make_csv(tmp_path / "data", ["good", "exit", "good"])
    script = tmp_path / "run.py"
    script.write_text(EXIT_SCRIPT)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def run(*extra, **env_extra):
        return subprocess.run([sys.executable, str(script), str(data), str(out), *extra], env={**env, **env_extra},
                              capture_output=True, text=True, timeout=300)

    for _ in range(2):  # the first end of the process may be a user's kill: the row runs again once
        r = run()
        assert r.returncode == 0 and not (out / "metadata.csv").exists()
    r = run()
    assert r.returncode == 0, r.stderr
    why = failures(out)
    assert list(why) == [1] and why[1].startswith("the process ended during this row twice (os._exit, a crash or a kill)")
    with open(out / "metadata.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [bool(r["answer_audio_path"]) for r in rows] == [True, False, True]
    assert rows[1]["audio_path"] == str((tmp_path / "data" / "clip1.wav").resolve())  # same path form as its siblings
    assert run().returncode == 0 and list(failures(out)) == [1]  # a plain rerun leaves it failed
    r = run("--retry-failed", FIXED="1")
    assert r.returncode == 0, r.stderr
    assert failures(out) == {} and json.loads((out / "run_info.json").read_text())["n_answered"] == 3


def test_ctrl_c_during_a_row_never_counts_against_it(tmp_path):
    data = make_csv(tmp_path / "data", ["good", "interrupt", "good"])
    state = {"interrupts": 3}

    class Interrupted:
        def respond(self, audio, row, config):
            if row.conversation_id == "interrupt" and state["interrupts"]:
                state["interrupts"] -= 1
                raise KeyboardInterrupt()
            return AgentAnswer(audio[1, :16000].copy(), 16_000, row.question_end_time + 0.3)

    register_agent("ctrl-c-test", Interrupted, replace=True)
    try:
        out = tmp_path / "out"
        for _ in range(3):
            with pytest.raises(KeyboardInterrupt):
                run_inference("ctrl-c-test", str(data), out, progress=False)
        info = run_inference("ctrl-c-test", str(data), out, progress=False)
    finally:
        unregister_agent("ctrl-c-test")
    assert info["n_answered"] == 3 and info["n_failed"] == 0


def test_a_long_agent_message_is_cut_after_masking_everywhere_it_goes(tmp_path, capsys):
    from spear_metrics.cli import main
    from spear_metrics.core.records import MAX_REASON_CHARS
    from spear_metrics.core.secrets import register_secret

    key = "sk-test-" + "k" * 40
    register_secret(key)
    data = make_csv(tmp_path / "data", ["good", "raise"])

    class Verbose:
        def respond(self, audio, row, config):
            if row.conversation_id == "raise":  # the key straddles the cut: masked whole first
                raise ValueError("boom\nsecond line " + "x" * (MAX_REASON_CHARS - 40) + key + "y" * 5000)
            return AgentAnswer(audio[1, :16000].copy(), 16_000, row.question_end_time + 0.3)

    register_agent("verbose-test", Verbose, replace=True)
    try:
        out = tmp_path / "out"
        run_inference("verbose-test", str(data), out, progress=False)
    finally:
        unregister_agent("verbose-test")
    why = failures(out)[1]
    assert why.startswith("ValueError: boom second line xxx") and why.endswith("…")
    assert len(why) <= len("ValueError: ") + MAX_REASON_CHARS + 1 and "\n" not in why
    assert key[:20] not in why and "***" in why
    res = tmp_path / "scores"
    assert main(["score", "--metadata", str(out / "metadata.csv"), "--metrics", "interruptions", "--out", str(res),
                 "--no-progress"]) == 0
    per = [json.loads(line) for line in (res / "per_sample.jsonl").read_text().splitlines()]
    err = [p["error"] for p in per if p.get("error")]
    assert len(err) == 1 and len(err[0]) < MAX_REASON_CHARS + 40 and key[:20] not in err[0]
    printed = capsys.readouterr()
    assert "y" * 400 not in printed.out + printed.err


def test_exit_status_is_1_only_when_no_row_was_answered(tmp_path, capsys):
    """``infer`` exits 1 when every row failed (nothing to score), 0 when at least one was answered
    (the failures listed), 2 for a whole-run problem; the other inference commands share the rule."""
    from spear_metrics.cli import main
    from spear_metrics.commands import run_exit_status

    data = make_csv(tmp_path / "data", ["onset_huge", "onset_late"])
    register_agent("hostile-exit", Hostile, replace=True)
    try:
        assert main(["infer", "--agent", "hostile-exit", "--data", str(data), "--out", str(tmp_path / "none"),
                     "--no-progress"]) == 1
        assert "0/2 answered, 2 failed" in capsys.readouterr().out
        mixed = make_csv(tmp_path / "mixed", ["good", "onset_huge"])
        assert main(["infer", "--agent", "hostile-exit", "--data", str(mixed), "--out", str(tmp_path / "some"),
                     "--no-progress"]) == 0
        assert "1/2 answered, 1 failed" in capsys.readouterr().out
        assert main(["infer", "--agent", "hostile-exit", "--data", str(tmp_path / "nowhere.csv"),
                     "--out", str(tmp_path / "x"), "--no-progress"]) == 2
    finally:
        unregister_agent("hostile-exit")
    assert [run_exit_status(a, f) for a, f in [(0, 0), (0, 3), (1, 3), (4, 0)]] == [0, 1, 0, 0]
