"""``spearbench fdb-infer`` on Full-Duplex-Bench's own example stimuli (../shared/fixtures/fdb), through
``openai-realtime`` against the loopback Realtime fake (clocked by the samples it receives), then
``spearbench fdb`` scores the folder as is."""

from __future__ import annotations

import hashlib
import json
import shutil
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


def test_fdb_infer_writes_time_synchronous_replies_that_fdb_scores(fdb_root, real_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    turn_end = json.loads((fdb_root / "smooth_turn_taking/1/turn_taking.json").read_text())[0]["timestamp"][0]
    delay = 0.4
    progs = {"pause_handling_1": Program("silent"),  # holds its turn through the pause: no reply
             "smooth_turn_taking_1": Program("reply", at_s=turn_end + delay, speech_end_s=turn_end),
             "smooth_turn_taking_2": Program("refuse")}
    answer = load_audio(real_dir / "speechbrain__p225_002.wav", sr=24_000, channels="mix")[0]
    fake = RealtimeFake(progs, answer, KEY, transcript="ask her to bring these things with her from the store")
    before = {p: sha(p) for p in fdb_root.rglob("*") if p.is_file()}
    base = ["fdb-infer", "--agent", "openai-realtime", "--root", str(fdb_root), "--concurrency", "3", "--no-progress",
            "-a", f"base_url={fake.url}"]
    try:
        # 1. existing replies (the original model's) are kept; only the bare stimulus runs
        assert main(base + ["--tasks", "smooth_turn_taking", "--no-asr"]) == 0
        assert {p: sha(p) for p in before} == before
        assert fake.connections["smooth_turn_taking_2"] == 1 and fake.connections["smooth_turn_taking_1"] == 0
        fails = [json.loads(x) for x in (fdb_root / "smooth_turn_taking/.spearbench-fdb-infer/failures.jsonl").read_text().splitlines()]
        assert fails == [{"sample": "2", "error": f"{fake.url} (WebSocket handshake) answered HTTP 403"}]
        assert not (fdb_root / "smooth_turn_taking/2/output.wav").exists()
        # 2. --overwrite replaces output.wav/output.json only, with ASR by the scorer's own path
        assert main(base + ["--overwrite"]) == 0
        # 3. a rerun has nothing left to do (the refused sample stays failed without --retry-failed)
        calls = dict(fake.connections)
        assert main(base + ["--overwrite"]) == 0
        assert dict(fake.connections) == calls
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
    assert main(["fdb", "--task", "smooth_turn_taking", "--root", str(fdb_root / "smooth_turn_taking"), "--out",
                 str(res), "--no-progress"]) == 0
    rows = {r["id"]: r for r in map(json.loads, (res / "per_sample.jsonl").read_text().splitlines())}
    assert rows["1"]["status"] == "ok" and rows["1"]["tor"] == 1 and rows["1"]["asr_source"] == "output.json"
    assert delay - CHUNK_S <= rows["1"]["latency_s"] <= delay + 3.0
    assert rows["2"]["status"] == "failed"  # no reply was written for the refused stimulus
    res2 = tmp_path / "res2"
    assert main(["fdb", "--task", "pause_handling", "--root", str(fdb_root / "pause_handling"), "--out", str(res2),
                 "--no-progress"]) == 0
    (p,) = map(json.loads, (res2 / "per_sample.jsonl").read_text().splitlines())
    assert p["status"] == "ok" and p["tor"] == 0
    for f in fdb_root.rglob("*"):
        if f.is_file():
            assert KEY.encode() not in f.read_bytes()


def test_fdb_infer_kill_after_the_reply_is_written_and_foreign_transcripts(fdb_root, real_dir, monkeypatch):
    """A run killed between writing a reply and logging it redoes that sample on rerun (the
    output.wav there is its own, not another system's to keep); an output.json this command did
    not write is kept (and its sample not run) unless --overwrite."""
    import spear_datasets.audio as audio_mod
    from spear_metrics.full_duplex.infer import run_fdb_inference

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    from spear_datasets.audio import write_wav

    task = fdb_root / "smooth_turn_taking"
    shutil.rmtree(task / "1")
    turn_end = json.loads((task / "2" / "turn_taking.json").read_text())[0]["timestamp"][0]
    x, sr = decode(task / "2" / "input.wav")
    write_wav(task / "2" / "input.wav", x[:, : round((turn_end + 0.6) * sr)], sr)  # the stimulus up to its turn end
    shutil.copytree(task / "2", task / "3")
    foreign = task / "3" / "output.json"
    foreign.write_text('{"text": "another system", "chunks": []}')
    progs = {f"smooth_turn_taking_{i}": Program("reply", at_s=turn_end + 0.3, speech_end_s=turn_end) for i in (2, 3)}
    fake = RealtimeFake(progs, load_audio(real_dir / "speechbrain__p225_002.wav", sr=24_000, channels="mix")[0][:12000], KEY)
    write_wav = audio_mod.write_wav

    def write_then_die(path, wav, sr=16000):
        write_wav(path, wav, sr)
        raise KeyboardInterrupt  # stands for a kill -9 after the file, before its record

    kw = dict(agent_options={"base_url": fake.url}, asr=None, progress=False)
    try:
        monkeypatch.setattr(audio_mod, "write_wav", write_then_die)
        with pytest.raises(KeyboardInterrupt):
            run_fdb_inference("openai-realtime", task, **kw)
        monkeypatch.setattr(audio_mod, "write_wav", write_wav)
        assert (task / "2" / "output.wav").is_file() and foreign.read_text().startswith('{"text": "another')
        info = run_fdb_inference("openai-realtime", task, **kw)
        assert info["n_written"] == 1 and info["n_done"] == 1 and info["n_kept"] == 1
        assert fake.connections["smooth_turn_taking_2"] == 2 and fake.connections["smooth_turn_taking_3"] == 0
        assert foreign.read_text() == '{"text": "another system", "chunks": []}'
        assert not (task / "3" / "output.wav").exists()
        info = run_fdb_inference("openai-realtime", task, overwrite=True, **kw)  # now it may replace them
        assert info["n_written"] == 1 and info["n_done"] == 2 and info["n_kept"] == 0
        assert not foreign.exists() and (task / "3" / "output.wav").is_file()
    finally:
        fake.close()
    y, sr = decode(task / "2" / "output.wav")
    assert np.flatnonzero(y[0])[0] / sr >= turn_end + 0.3 - CHUNK_S  # the reply, placed in the channel
