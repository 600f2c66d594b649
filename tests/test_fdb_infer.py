"""``spearbench fdb-infer`` on Full-Duplex-Bench's own example stimuli (tests/fixtures/fdb), through
``openai-realtime`` against the loopback Realtime fake (clocked by the samples it receives), then
``spearbench fdb`` scores the folder as is."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from openai_fakes import Program, RealtimeFake
from spear_datasets.audio import decode, load_audio
from spear_metrics.cli import main

KEY = "sk-test-FAKEKEY-fdb-0123456789"
CHUNK_S = 0.040


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture
def fdb_root(fdb_dir, tmp_path):
    """pause_handling/1 and smooth_turn_taking/1 as FDB ships them (stimulus, task file and the
    original model's output.wav/output.json), plus smooth_turn_taking/2: the same stimulus only."""
    root = tmp_path / "fdb"
    ex = fdb_dir / "example_data"
    shutil.copytree(ex / "pause_handling_example", root / "pause_handling")
    shutil.copytree(ex / "smooth_turn_taking_example", root / "smooth_turn_taking")
    (root / "smooth_turn_taking" / "2").mkdir()
    for f in ("input.wav", "turn_taking.json"):
        shutil.copy(ex / "smooth_turn_taking_example" / "1" / f, root / "smooth_turn_taking" / "2" / f)
    return root


def test_fdb_infer_writes_time_synchronous_replies_that_fdb_scores(fdb_root, real_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    turn_end = json.loads((fdb_root / "smooth_turn_taking/1/turn_taking.json").read_text())[0]["timestamp"][0]
    delay = 0.4
    progs = {"pause_handling_1": Program("silent"),  # holds its turn through the pause: no reply
             "smooth_turn_taking_1": Program("reply", at_s=turn_end + delay, speech_end_s=turn_end),
             "smooth_turn_taking_2": Program("refuse")}
    answer = load_audio(real_dir / "speechbrain__p225_002.wav", sr=24_000, channels="mix")[0]
    fake = RealtimeFake(progs, answer, KEY, transcript="ask her to bring these things with her from the store")
    before = {p: sha(p) for p in fdb_root.rglob("*") if p.is_file()}
    base = ["fdb", "infer", "--agent", "openai-realtime", "--root", str(fdb_root), "--concurrency", "3", "--no-progress",
            "-a", f"base_url={fake.url}"]
    originals = {p for p in before if p.name in ("output.wav", "output.json")}
    try:
        # 1. existing replies (the original model's) are kept; only the bare stimulus runs (the fake
        # refuses it: no reply written this run, so the run exits 1)
        assert main(base + ["--tasks", "smooth_turn_taking", "--no-asr"]) == 1
        assert {p: sha(p) for p in before} == before
        assert fake.connections["smooth_turn_taking_2"] == 1 and fake.connections["smooth_turn_taking_1"] == 0
        fails = [json.loads(x) for x in (fdb_root / "smooth_turn_taking/.spearbench-fdb-infer/failures.jsonl").read_text().splitlines()]
        assert fails == [{"sample": "2", "error": f"{fake.url} (WebSocket handshake) answered HTTP 403: this model is not available to you"}]
        assert not (fdb_root / "smooth_turn_taking/2/output.wav").exists()
        printed = capsys.readouterr()
        # the failures log is named by its real path, never with a literal <task>
        assert str(fdb_root / "smooth_turn_taking" / ".spearbench-fdb-infer" / "failures.jsonl") in printed.err + printed.out
        assert "<task>" not in printed.err + printed.out
        # 2. --overwrite never replaces replies fdb-infer did not write (another system's): kept, said so
        # (still no reply of this system: exit 1)
        assert main(base + ["--overwrite"]) == 1
        assert {p: sha(p) for p in before} == before and fake.connections["pause_handling_1"] == 0
        err = capsys.readouterr().err
        assert "2 sample(s) hold an output.wav/output.json fdb-infer did not write" in err
        assert "pause_handling/1" in err and "smooth_turn_taking/1" in err
        # 3. the user moves them away: the stimuli run, with the scorer's own ASR
        for p in originals:
            p.rename(tmp_path / f"{p.parent.parent.name}_{p.name}")
        assert main(base) == 0
        # 4. a rerun has nothing left to do (the refused sample stays failed without --retry-failed)
        calls = dict(fake.connections)
        assert main(base + ["--overwrite"]) == 0
        assert dict(fake.connections) == calls
        manifest = [json.loads(x) for x in
                    (fdb_root / "pause_handling/.spearbench-fdb-infer/written-0.jsonl").read_text().splitlines()]
        assert {m["path"] for m in manifest} == {"1/output.wav", "1/output.json"}  # all it wrote there, nothing else
    finally:
        fake.close()
    for task, sid in (("pause_handling", "1"), ("smooth_turn_taking", "1")):
        d = fdb_root / task / sid
        x, sr_in = decode(d / "input.wav")
        y, sr_out = decode(d / "output.wav")
        assert sr_out == sr_in and y.shape == (1, x.shape[1])  # same rate and length as the stimulus
        for f in d.iterdir():  # nothing else in the sample folder changed
            if f.name not in ("output.wav", "output.json"):
                assert sha(f) == before[f]
    for p in originals:  # the original model's replies, moved away by the user, untouched
        assert sha(tmp_path / f"{p.parent.parent.name}_{p.name}") == before[p]
    pause = decode(fdb_root / "pause_handling/1/output.wav")[0]
    assert not pause.any()  # the silent system: a silent reply channel
    assert json.loads((fdb_root / "pause_handling/1/output.json").read_text()) == {"text": "", "chunks": []}
    y, sr = decode(fdb_root / "smooth_turn_taking/1/output.wav")
    first = np.flatnonzero(np.abs(y[0]) > 0)[0] / sr
    at = turn_end + delay
    # played when it arrived: not before the chunk holding at_s was sent; generous upper bound
    assert at - CHUNK_S <= first <= at + 3.0
    asr = json.loads((fdb_root / "smooth_turn_taking/1/output.json").read_text())
    words = " ".join(c["text"].lower() for c in asr["chunks"])
    assert "bring" in words and "store" in words
    assert all(first - 0.1 <= c["timestamp"][0] for c in asr["chunks"])
    # 4. spearbench fdb scores the folders as they are
    res = tmp_path / "res"
    assert main(["fdb", "score", "--task", "smooth_turn_taking", "--root", str(fdb_root / "smooth_turn_taking"), "--out",
                 str(res), "--no-progress"]) == 0
    rows = {r["id"]: r for r in map(json.loads, (res / "per_sample.jsonl").read_text().splitlines())}
    assert rows["1"]["status"] == "ok" and rows["1"]["tor"] == 1 and rows["1"]["asr_source"] == "output.json"
    assert delay - CHUNK_S <= rows["1"]["latency_s"] <= delay + 3.0
    assert rows["2"]["status"] == "failed"  # no reply was written for the refused stimulus
    res2 = tmp_path / "res2"
    assert main(["fdb", "score", "--task", "pause_handling", "--root", str(fdb_root / "pause_handling"), "--out", str(res2),
                 "--no-progress"]) == 0
    (p,) = map(json.loads, (res2 / "per_sample.jsonl").read_text().splitlines())
    assert p["status"] == "ok" and p["tor"] == 0
    for f in fdb_root.rglob("*"):
        if f.is_file():
            assert KEY.encode() not in f.read_bytes()
    # 5. other settings with --overwrite: the replies the earlier run wrote are removed only while unchanged;
    # a transcript the user edited since is theirs (kept, and its sample with it)
    edited = fdb_root / "pause_handling/1/output.json"
    edited.write_text('{"text": "corrected by hand", "chunks": []}', encoding="utf-8")
    other = ["fdb", "infer", "--agent", "openai-realtime", "--root", str(fdb_root), "--tasks", "pause_handling", "--no-asr",
             "--no-progress", "--chunk-ms", "20", "-a", "base_url=ws://127.0.0.1:9/v1/realtime"]
    assert main(other) == 2
    assert "holds replies of another fdb-infer run" in capsys.readouterr().err
    assert (fdb_root / "pause_handling/1/output.wav").is_file()
    lock = fdb_root / "pause_handling/.spearbench-fdb-infer/rank-0.lock"
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'a+'); "
                               "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(120)", str(lock)],
                              stdout=subprocess.PIPE, text=True)
    try:  # another live process writes the task folder (holds its lock): refused, nothing removed
        assert holder.stdout.readline().strip() == "held"
        assert main(other + ["--overwrite"]) == 2
        assert "is being written by another live process" in capsys.readouterr().err
        assert (fdb_root / "pause_handling/1/output.wav").is_file()
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert main(other + ["--overwrite"]) == 0
    assert not (fdb_root / "pause_handling/1/output.wav").exists()  # recorded and unchanged: removed
    assert json.loads(edited.read_text())["text"] == "corrected by hand"
    assert "1 sample(s) hold an output.wav/output.json fdb-infer did not write" in capsys.readouterr().err


def test_fdb_infer_redoes_a_reply_written_just_before_a_kill(fdb_root, real_dir, monkeypatch):
    """A run killed between writing a reply and logging its sample redoes that sample on rerun: the
    manifest recorded the output.wav as fdb-infer's before it was written, so it is not kept as
    another system's reply; also when the sample had failed before and the kill came during a
    --retry-failed run (a rerun without it redoes the reply it never logged). An output.json this
    command did not write stays, and its sample is not run."""
    import spear_datasets.audio as audio_mod
    from spear_metrics.full_duplex.infer import run_fdb_inference

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    task = fdb_root / "smooth_turn_taking"
    shutil.rmtree(task / "1")  # FDB's released outputs: kept as another system's, not needed here
    x, sr = decode(task / "2" / "input.wav")
    audio_mod.write_wav(task / "2" / "input.wav", x[:, : round(1.5 * sr)], sr)  # 1.5 s stimuli: short sessions
    for sid in ("3", "4"):
        shutil.copytree(task / "2", task / sid)
    foreign = task / "3" / "output.json"
    foreign.write_text('{"text": "another system", "chunks": []}')
    at = 0.6
    progs = {"smooth_turn_taking_2": Program("reply", at_s=at, speech_end_s=0.5),
             "smooth_turn_taking_3": Program("reply", at_s=at, speech_end_s=0.5),
             "smooth_turn_taking_4": Program("refuse")}
    fake = RealtimeFake(progs, load_audio(real_dir / "speechbrain__p225_002.wav", sr=24_000, channels="mix")[0][:12000], KEY)
    write_wav = audio_mod.write_wav

    def write_then_die(path, wav, sr=16000):
        write_wav(path, wav, sr)
        raise KeyboardInterrupt  # stands for a kill -9 after the file, before its record

    kw = dict(agent_options={"base_url": fake.url}, asr=None, progress=False, concurrency=2)
    try:
        monkeypatch.setattr(audio_mod, "write_wav", write_then_die)
        with pytest.raises(KeyboardInterrupt):  # 4 is refused (logged failed) while 2 streams, then 2 dies
            run_fdb_inference("openai-realtime", task, **kw)
        import gc

        # the interrupted loop's task (its exception never retrieved: the "process" died) is collected
        # here, not inside a later test (a finalizer running inside CPython 3.11's ast.parse breaks it)
        gc.collect()
        monkeypatch.setattr(audio_mod, "write_wav", write_wav)
        assert (task / "2" / "output.wav").is_file() and foreign.read_text().startswith('{"text": "another')
        info = run_fdb_inference("openai-realtime", task, **kw)
        assert info["n_written"] == 1 and info["n_done"] == 1 and info["n_kept"] == 1 and info["n_failed"] == 1
        assert fake.connections["smooth_turn_taking_2"] == 2 and fake.connections["smooth_turn_taking_3"] == 0
        assert foreign.read_text() == '{"text": "another system", "chunks": []}'
        assert not (task / "3" / "output.wav").exists()
        # the failed sample, retried: killed right after its reply is written
        fake.programs["smooth_turn_taking_4"] = Program("reply", at_s=at, speech_end_s=0.5)
        monkeypatch.setattr(audio_mod, "write_wav", write_then_die)
        with pytest.raises(KeyboardInterrupt):
            run_fdb_inference("openai-realtime", task, retry_failed=True, **kw)
        monkeypatch.setattr(audio_mod, "write_wav", write_wav)
        assert (task / "4" / "output.wav").is_file()
        info = run_fdb_inference("openai-realtime", task, **kw)  # no --retry-failed: the unlogged reply is redone
        assert info["n_written"] == 1 and info["n_done"] == 2 and info["n_failed"] == 0 and info["n_kept"] == 1
        assert fake.connections["smooth_turn_taking_4"] == 3 and fake.connections["smooth_turn_taking_2"] == 2
        assert info["kept"] == ["smooth_turn_taking/3"]
    finally:
        fake.close()
    for sid in ("2", "4"):
        y, sr = decode(task / sid / "output.wav")
        assert np.flatnonzero(y[0])[0] / sr >= at - CHUNK_S  # the reply, placed in the channel
