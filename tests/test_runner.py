"""`spearbench score` end to end: bad rows fail with reasons, others are scored, kill + resume."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from spear_datasets.audio import load_audio, write_wav
from spear_metrics.cli import main

from conftest import REPO, STEREO_DIALOGUE
from helpers import make_clips, row, write_rows

SPEARBENCH = [sys.executable, "-m", "spear_metrics.cli"]


def _per_sample(out: Path) -> list[dict]:
    return [json.loads(l) for l in (out / "per_sample.jsonl").read_text().splitlines()]


@pytest.fixture()
def bad_folder(tmp_path, real_dir):
    """A metadata folder mixing good answers (any rate/channels) and every kind of bad input."""
    q, a = make_clips(STEREO_DIALOGUE, tmp_path, pad_s=0.5)
    ans16 = load_audio(a)[0]
    import soxr

    for rate in (8000, 22050, 44100, 48000):
        sf.write(tmp_path / f"a{rate}.wav", soxr.resample(ans16, 16000, rate), rate, subtype="PCM_16")
    write_wav(tmp_path / "stereo.wav", np.stack([ans16, ans16]))
    sf.write(tmp_path / "a.flac", ans16, 16000)
    (tmp_path / "empty.wav").write_bytes(b"")
    (tmp_path / "garbage.wav").write_bytes(b"RIFF\x00\x00\x00\x00not really a wave file at all")
    (tmp_path / "truncated.wav").write_bytes((tmp_path / "a8000.wav").read_bytes()[:40])
    sf.write(tmp_path / "nan.wav", np.where(np.arange(len(ans16)) % 7 == 0, np.nan, ans16).astype(np.float32), 16000, subtype="FLOAT")
    write_wav(tmp_path / "silence.wav", np.zeros(32000, np.float32))
    inputs = []
    for i in range(16):
        p = tmp_path / f"in{i}.wav"
        if not p.exists():
            os.link(q, p)
        inputs.append(p.name)
    rows = [
        row(inputs[0], a.name, None),            # 0 ok, 16 kHz mono
        row(inputs[1], "a8000.wav", None),       # 1 ok, 8 kHz
        row(inputs[2], "a22050.wav", None),      # 2 ok
        row(inputs[3], "a44100.wav", None),      # 3 ok
        row(inputs[4], "a48000.wav", None),      # 4 ok
        row(inputs[5], "stereo.wav", None),      # 5 ok, stereo
        row(inputs[6], "a.flac", -0.8),          # 6 ok, FLAC; speech at 0.5 s placed 0.3 s before question end
        row(inputs[7], "missing.wav", None),     # 7 missing
        row(inputs[8], "empty.wav", None),       # 8 empty
        row(inputs[9], "garbage.wav", None),     # 9 undecodable
        row(inputs[10], "truncated.wav", None),  # 10 truncated
        row(inputs[11], "nan.wav", None),        # 11 NaN samples
        row(inputs[12], "silence.wav", 0.2),     # 12 silent answer: scored, latency null
        row(inputs[13], "../../etc/passwd", None),  # 13 unsafe path
        row(inputs[0], a.name, None),            # 14 duplicate of row 0
        row(inputs[14], a.name, None, question_end_time=99.0),  # 15 time outside the clip
    ]
    meta = write_rows(tmp_path / "metadata.csv", rows)
    text = meta.read_text().splitlines()
    text.append(f"{inputs[15]},{a.name},abc,15.48,,,,,,")  # 16 non-numeric time
    meta.write_text("\n".join(text) + "\n")
    return meta


def test_bad_rows_fail_with_reasons_and_the_rest_is_scored(bad_folder, tmp_path):
    out = tmp_path / "res"
    assert main(["score", "--metadata", str(bad_folder), "--metrics", "interruptions,explainable_features", "--out", str(out), "--no-progress"]) == 0
    rows = _per_sample(out)
    assert [r["row"] for r in rows] == list(range(17))
    status = {r["row"]: (r["status"], r["error"]) for r in rows}
    ok = [i for i, (s, _) in status.items() if s == "ok"]
    assert ok == [0, 1, 2, 3, 4, 5, 6, 12]
    reasons = {i: e for i, (s, e) in status.items() if s == "failed"}
    assert "not found" in reasons[7]
    assert "empty" in reasons[8]
    assert "cannot decode" in reasons[9]
    assert "truncated: no data chunk" in reasons[10]
    assert "NaN" in reasons[11]
    assert "escapes the data root" in reasons[13]
    assert reasons[14] == "duplicate of row 0 (same audio_path)"
    assert "outside the input clip" in reasons[15]
    assert "context_end_time is not a number" in reasons[16]
    by = {r["row"]: r for r in rows}
    # every rate / channel layout of the same answer gives the same 0.5 s of padding as latency
    lat = [by[i]["latency_ms"] for i in range(6)]
    assert lat[0] == pytest.approx(500.0) and all(abs(x - lat[0]) <= 100 for x in lat), lat
    # silent answer: scored, counted as a no-speech answer; its latency is its question gap (SPEAR)
    assert by[12]["status"] == "ok" and by[12]["no_speech_answer"] is True and by[12]["answer_speech_after_skip"] is False
    assert by[12]["latency_ms"] >= 0
    s = json.loads((out / "summary.json").read_text())
    ok = [r for r in rows if r["status"] == "ok"]
    assert s["latency_ms"] == pytest.approx(sum(r["latency_ms"] for r in ok) / len(ok))
    assert s["latency_ms_speech"] == pytest.approx(
        sum(r["latency_ms"] for r in ok if r["answer_speech_after_skip"]) / (len(ok) - 1))
    assert (s["n_samples"], s["n_scored"], s["n_failed"]) == (17, 8, 9)
    assert s["no_speech_answers_%"] == pytest.approx(100 / 8)
    # interruption values exist only for rows with an answer_start_time (6 and 12)
    assert s["interruptions_%"] == pytest.approx(50.0)
    # strict JSON: no NaN/Infinity tokens anywhere
    for line in (out / "per_sample.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


def test_unusable_input_exits_nonzero(tmp_path, capsys):
    assert main(["score", "--metadata", str(tmp_path / "none.csv"), "--metrics", "interruptions", "--out", str(tmp_path / "r")]) == 2
    assert "not found" in capsys.readouterr().err
    (tmp_path / "m.csv").write_text("audio_path,answer_audio_path,context_end_time,question_end_time\n")
    assert main(["score", "--metadata", str(tmp_path / "m.csv"), "--metrics", "interruptions", "--out", str(tmp_path / "r")]) == 2
    (tmp_path / "m.csv").write_text("audio_path,answer_audio_path,context_end_time,question_end_time\na.wav,b.wav,1,2\n")
    assert main(["score", "--metadata", str(tmp_path / "m.csv"), "--metrics", "nope", "--out", str(tmp_path / "r")]) == 2
    assert "unknown metric" in capsys.readouterr().err
    # every row failed: nothing scored -> non-zero, and the failures are still written
    assert main(["score", "--metadata", str(tmp_path / "m.csv"), "--metrics", "interruptions", "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    assert _per_sample(tmp_path / "r")[0]["status"] == "failed"


def test_kill_and_resume_gives_the_same_files(tmp_path, real_dir):
    q, a = make_clips(STEREO_DIALOGUE, tmp_path, pad_s=0.3, answer_s=15.0)
    rows = []
    for i in range(12):
        os.link(q, tmp_path / f"in{i}.wav")
        rows.append(row(f"in{i}.wav", a.name, [None, -0.4, 0.25][i % 3]))
    meta = write_rows(tmp_path / "metadata.csv", rows)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [*SPEARBENCH, "score", "--metadata", str(meta), "--metrics", "interruptions,explainable_features", "--batch-size", "1", "--no-progress"]
    ref = tmp_path / "ref"
    subprocess.run([*cmd, "--out", str(ref)], check=True, env=env, capture_output=True)

    out = tmp_path / "killed"
    proc = subprocess.Popen([*cmd, "--out", str(out)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = out / ".work" / "rank-0.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and (not log.exists() or len(log.read_text().splitlines()) < 3):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = len(log.read_text().splitlines())
    assert 3 <= done_before < 12 and not (out / "summary.json").exists()

    subprocess.run([*cmd, "--out", str(out)], check=True, env=env, capture_output=True)
    assert (out / "per_sample.jsonl").read_text() == (ref / "per_sample.jsonl").read_text()
    assert (out / "summary.json").read_text() == (ref / "summary.json").read_text()
    info = json.loads((out / "run_info.json").read_text())
    assert info["rows_resumed"] == done_before and info["rows_scored_this_run"] == 12 - done_before
    # every row logged exactly once across the two runs: nothing scored twice
    logged = [json.loads(l)["row"] for l in log.read_text().splitlines()]
    assert sorted(logged) == list(range(12))

    # a rerun of a finished run scores nothing and rewrites the same files
    subprocess.run([*cmd, "--out", str(out)], check=True, env=env, capture_output=True)
    assert json.loads((out / "run_info.json").read_text())["rows_scored_this_run"] == 0
    assert (out / "summary.json").read_text() == (ref / "summary.json").read_text()


def test_other_run_in_same_folder_is_refused(tmp_path, real_dir):
    q, a = make_clips(STEREO_DIALOGUE, tmp_path)
    meta = write_rows(tmp_path / "m.csv", [row(q.name, a.name, None)])
    out = tmp_path / "r"
    assert main(["score", "--metadata", str(meta), "--metrics", "interruptions", "--out", str(out), "--no-progress"]) == 0
    assert main(["score", "--metadata", str(meta), "--metrics", "explainable_features", "--out", str(out), "--no-progress"]) == 2
    assert main(["score", "--metadata", str(meta), "--metrics", "explainable_features", "--out", str(out), "--no-progress", "--overwrite"]) == 0


def test_a_folder_still_being_scored_is_refused(tmp_path, real_dir, capsys):
    """A kill -9 of accelerate's launcher can leave its ranks running; a resume on the same --out
    while one still holds its rank's lock is refused with one line (exit 2), and goes through
    once the lock is gone (the OS drops it with the process)."""
    import fcntl

    q, a = make_clips(STEREO_DIALOGUE, tmp_path)
    meta = write_rows(tmp_path / "m.csv", [row(q.name, a.name, None)])
    out = tmp_path / "r"
    args = ["score", "--metadata", str(meta), "--metrics", "interruptions", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    (out / "summary.json").unlink()
    with open(out / ".work" / "rank-0.lock", "a+") as held:  # what a live rank holds
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        capsys.readouterr()
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "being scored by another live process" in err[0]
    assert main(args) == 0 and (out / "summary.json").is_file()
    assert [r["status"] for r in _per_sample(out)] == ["ok"]


def test_impossible_times_cut_files_and_bad_options(tmp_path, real_dir, capsys):
    q, a = make_clips(STEREO_DIALOGUE, tmp_path, pad_s=0.5)
    whole = a.read_bytes()
    (tmp_path / "half.wav").write_bytes(whole[: len(whole) // 2])  # header says 6.5 s, 3.25 s there
    (tmp_path / "odd.wav").write_bytes(whole[:-1])
    (tmp_path / "adir.wav").mkdir()
    for i in range(7):
        os.link(q, tmp_path / f"in{i}.wav")
    meta = write_rows(tmp_path / "m.csv", [
        row("in0.wav", a.name, 0.2),            # 0 ok
        row("in1.wav", "half.wav", None),       # 1 cut in half
        row("in2.wav", "odd.wav", None),        # 2 one byte short
        row("in3.wav", a.name, 1e308),          # 3 absurd onset
        row("in4.wav", a.name, -20.0),          # 4 onset 4.52 s before the clip starts
        row("in5.wav", "adir.wav", None),       # 5 a directory
        row("in6.wav", a.name, -3.0),           # 6 onset 3 s before the question end: valid overlap
    ])
    out = tmp_path / "r"
    assert main(["score", "--metadata", str(meta), "--metrics", "interruptions,explainable_features", "--out", str(out), "--no-progress"]) == 0
    by = {r["row"]: r for r in _per_sample(out)}
    assert [i for i, r in by.items() if r["status"] == "ok"] == [0, 6]
    assert "truncated" in by[1]["error"] and "truncated" in by[2]["error"]
    assert "beyond 600 s after the question" in by[3]["error"] and "1e+308" in by[3]["error"]
    assert "4.52 s before the input clip starts" in by[4]["error"]
    assert "is a directory" in by[5]["error"]
    # row 6: MEO015's speech (from 0.5 s into the answer) placed at question end - 3 s runs over
    # the last ~2.5 s of FEE016's turn; speech is running at the 3 s skip point, so latency 0
    assert by[6]["interruption"] is True and 2300 <= by[6]["interrupted_time_ms"] <= 2500
    assert by[6]["latency_ms"] == 0.0
    assert by[0]["latency_ms"] == pytest.approx(700.0)  # 0.2 s onset + 0.5 s padding
    s = json.loads((out / "summary.json").read_text())
    assert s["latency_ms"] == pytest.approx(350.0)
    capsys.readouterr()
    # a bad option is refused before any row is scored
    assert main(["score", "--metadata", str(meta), "--metrics", "interruptions", "--out", str(tmp_path / "o"), "-o", "vad_time_resolution=abc"]) == 2
    assert "vad_time_resolution is not a number: 'abc'" in capsys.readouterr().err and not (tmp_path / "o").exists()
    # --out naming a file
    (tmp_path / "afile").write_text("x")
    assert main(["score", "--metadata", str(meta), "--metrics", "interruptions", "--out", str(tmp_path / "afile")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_header_problems(tmp_path):
    from spear_datasets.schema import MetadataError, read_metadata

    (tmp_path / "dup.csv").write_text("audio_path,answer_audio_path,context_end_time,question_end_time,question_end_time\na,b,1,2,3\n")
    with pytest.raises(MetadataError, match="repeats column"):
        read_metadata(tmp_path / "dup.csv")
    (tmp_path / "sp.csv").write_text("audio_path, answer_audio_path, context_end_time, question_end_time\na, b,1,2\n")
    assert read_metadata(tmp_path / "sp.csv")[0]["question_end_time"] == "2"


def test_unavailable_model_stops_the_run_with_one_line(tmp_path, real_dir, capsys):
    """A model that cannot be had is no fault of any row: one line, exit 2, no row marked failed."""
    q, a = make_clips(STEREO_DIALOGUE, tmp_path)
    meta = write_rows(tmp_path / "m.csv", [row(q.name, a.name, 0.1)])
    out = tmp_path / "r"
    rc = main(["score", "--metadata", str(meta), "--metrics", "interruptions,language_dialect", "--out", str(out),
               "--no-progress", "-o", f"lid_model={tmp_path / 'no-such-model'}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "no-such-model" in err
    assert not (out / "per_sample.jsonl").exists()
    assert (out / ".work" / "rank-0.jsonl").read_text() == ""


def test_resume_keeps_a_retried_ok_and_refuses_another_version(tmp_path, real_dir, monkeypatch):
    """An ok record in one rank's log beats an older failure of the same row in another rank's
    log (a 2-process run retried with 1 process), and a work folder of another metric version
    (another rule) is not resumed."""
    q, a = make_clips(STEREO_DIALOGUE, tmp_path)
    meta = write_rows(tmp_path / "m.csv", [row(q.name, a.name, None)])
    out = tmp_path / "r"
    args = ["score", "--metadata", str(meta), "--metrics", "interruptions", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    ok = _per_sample(out)[0]
    work = out / ".work"
    (log0,) = work.glob("rank-*.jsonl")
    log0.rename(work / "rank-0.jsonl")
    failed = {"row": 0, "status": "failed", "error": "an earlier failure", "values": {}}
    (work / "rank-1.jsonl").write_text(json.dumps(failed) + "\n")  # sorts after rank-0: read last
    assert main(args) == 0
    assert _per_sample(out)[0]["status"] == "ok" and _per_sample(out)[0]["latency_ms"] == ok["latency_ms"]
    from spear_metrics.interruptions.definition import Interruptions

    monkeypatch.setattr(Interruptions, "version", "9.9.9")
    assert main(args) == 2  # the logged rows were scored by another version: not resumed


def test_work_logs_without_their_run_json_are_not_resumed(tmp_path, real_dir):
    """Second breaker pass: run.json deleted, then another CSV into the same --out reused the old
    rows. Logs without their run.json belong to no known run: refused, or cleared by --overwrite."""
    q, a = make_clips(STEREO_DIALOGUE, tmp_path)
    out = tmp_path / "r"
    base = ["--metrics", "interruptions", "--out", str(out), "--no-progress"]
    m1 = write_rows(tmp_path / "m1.csv", [row(q.name, a.name, 0.0)])
    m2 = write_rows(tmp_path / "m2.csv", [row(q.name, a.name, 2.5)])
    assert main(["score", "--metadata", str(m1), *base]) == 0
    (out / ".work" / "run.json").unlink()
    assert main(["score", "--metadata", str(m2), *base]) == 2
    assert main(["score", "--metadata", str(m2), *base, "--overwrite"]) == 0
    fresh = tmp_path / "fresh"
    assert main(["score", "--metadata", str(m2), "--metrics", "interruptions", "--out", str(fresh), "--no-progress"]) == 0
    assert _per_sample(out) == _per_sample(fresh)


def test_inputs_without_an_answer_are_reported_per_subset(tmp_path, real_dir):
    """--inputs: the same clip name in improvised/ and naturalistic/ are two inputs; answering
    only the improvised one leaves the naturalistic one missing (second breaker pass)."""
    q, a = make_clips(STEREO_DIALOGUE, tmp_path)
    for sub in ("improvised", "naturalistic"):
        (tmp_path / sub).mkdir()
        os.link(q, tmp_path / sub / "same.wav")
    inputs = write_rows(tmp_path / "inputs.csv", [row(f"{s}/same.wav", a.name, None) for s in ("improvised", "naturalistic")])
    answers = write_rows(tmp_path / "answers.csv", [row("improvised/same.wav", a.name, None)])
    out = tmp_path / "r"
    assert main(["score", "--metadata", str(answers), "--metrics", "interruptions", "--out", str(out), "--no-progress",
                 "--inputs", str(inputs)]) == 0
    assert json.loads((out / "summary.json").read_text())["n_missing_answers"] == 1
    assert (out / "missing_answers.txt").read_text() == "naturalistic/same.wav\n"


@pytest.mark.parametrize("stop", ["interrupt", "log"])
def test_concurrent_items_are_not_started_after_an_interrupt_or_a_log_failure(tmp_path, stop, monkeypatch):
    """run_resumable(concurrency=2) over 40 items: when item 0 raises KeyboardInterrupt, or the work
    log cannot take item 0's result, the run stops without starting the queued items (each would be
    a paid judge call whose result is thrown away): only the calls already running finish."""
    import threading
    from types import SimpleNamespace

    from spear_metrics.core import records
    from spear_metrics.core.records import OutputError, SampleResult, claim_out
    from spear_metrics.core.runner import run_resumable

    started: list[int] = []
    gate = threading.Event()  # the calls after item 0 last until the run has stopped (at most 3 s)

    def score(batch):
        row = batch[0].row
        started.append(row)
        if row == 0 and stop == "interrupt":
            raise KeyboardInterrupt
        if row != 0:
            gate.wait(3.0)
        return [SampleResult(row=row, audio_path=f"item{row}")]

    if stop == "log":
        def refuse(self, objs):
            raise OutputError("no space left on device: work log")

        monkeypatch.setattr(records.AppendLog, "write", refuse)
    state = SimpleNamespace(process_index=0, num_processes=1, is_main_process=True, wait_for_everyone=lambda: None)
    with pytest.raises(KeyboardInterrupt if stop == "interrupt" else OutputError):
        with claim_out(tmp_path / "out", {"test": stop}, overwrite=False, conflict=RuntimeError("other run"),
                       command="score", state=state) as folder:  # as every caller holds its folder
            run_resumable([SimpleNamespace(row=i) for i in range(40)], score, folder.work, n_rows=40,
                          concurrency=2, state=state)
    gate.set()
    # item 0, the one the other thread was running, and at most one more taken by the first thread
    # before the stop reached the queue
    assert 0 in started and len(started) <= 3, started
