"""Issue 11, fixed as classes: hostile audio headers, one stereo rule, one number parser, one option
schema per dimension, custom agents from the CLI, console reasons, output faults. Real audio:
the stereo AMI dialogue (``helpers.py``: FEE016 asks until 15.48 s on channel 0, MEO015 answers on
channel 1) and the Full-Duplex-Bench examples, copied into ``tmp_path`` and patched there."""

from __future__ import annotations

import csv
import errno
import json
import os
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import yaml

from spear_datasets.audio import load_audio, write_wav
from spear_metrics.cli import main

from conftest import REPO, STEREO_DIALOGUE
from helpers import CONTEXT_END, QUESTION_END, make_clips, row, write_rows


# --------------------------------------------------------------------------- helpers


def patch_wav(src: Path, dst: Path, *, rate: int | None = None, channels: int | None = None, bits: int | None = None) -> Path:
    """Copy ``src`` to ``dst`` with fields of its ``fmt `` chunk overwritten (the data stays as it is)."""
    data = bytearray(src.read_bytes())
    pos = 12
    while pos + 8 <= len(data):
        cid, size = struct.unpack_from("<4sI", data, pos)
        if cid == b"fmt ":
            tag, ch, sr, br, ba, bps = struct.unpack_from("<HHIIHH", data, pos + 8)
            struct.pack_into("<HHIIHH", data, pos + 8, tag, channels or ch, rate or sr, br, ba, bits or bps)
            dst.write_bytes(bytes(data))
            return dst
        pos += 8 + size + (size & 1)
    raise AssertionError(f"no fmt chunk in {src}")


def per_sample(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "per_sample.jsonl").read_text().splitlines()]


@pytest.fixture()
def decoded(monkeypatch):
    """Paths the loader actually decodes (both back ends), to show that bad headers never get there."""
    import spear_datasets.audio as audio

    seen: list[str] = []
    for name in ("_decode_soundfile", "_decode_ffmpeg"):
        real = getattr(audio, name)

        def spy(path, _real=real):
            seen.append(os.path.basename(str(path)))
            return _real(path)

        monkeypatch.setattr(audio, name, spy)
    return seen


@pytest.fixture()
def clips(tmp_path):
    """Input clips ``in0..in5.wav`` (copies of the 15.48 s stereo question) and MEO015's answer."""
    q, a = make_clips(STEREO_DIALOGUE, tmp_path, pad_s=0.2, name="in0")
    for i in range(1, 6):
        shutil.copy(q, tmp_path / f"in{i}.wav")
    return tmp_path, a


# --------------------------------------------------------------------------- audio headers (item 11), one stereo rule (item 12)


def test_absurd_headers_fail_their_row_before_any_decode_in_score(clips, tmp_path, decoded):
    d, a = clips
    patch_wav(a, d / "a_1hz.wav", rate=1)  # 6.2 s of answer claimed as 198,400 s (55 h) at 1 Hz
    patch_wav(a, d / "a_300ch.wav", channels=300)
    patch_wav(a, d / "a_3bit.wav", bits=3)
    patch_wav(d / "in4.wav", d / "in4.wav", rate=1)
    good = [row("in0.wav", a.name, 0.3), row("in5.wav", a.name, -1.0)]
    bad = [row("in1.wav", "a_1hz.wav", 0.3), row("in2.wav", "a_300ch.wav", 0.3), row("in3.wav", "a_3bit.wav", 0.3),
           row("in4.wav", a.name, 0.3)]
    write_rows(d / "all.csv", [good[0], *bad, good[1]])
    write_rows(d / "good.csv", good)
    assert main(["score", "--metadata", str(d / "all.csv"), "--metrics", "interruptions,explainable_features",
                 "--out", str(tmp_path / "r_all"), "--no-progress"]) == 0
    res = per_sample(tmp_path / "r_all")
    reasons = {r["row"]: r["error"] for r in res if r["status"] == "failed"}
    assert set(reasons) == {1, 2, 3, 4}
    assert "sample rate 1 Hz is outside [4000, 384000] Hz" in reasons[1]
    assert "300 channels (1 to 32 accepted)" in reasons[2]
    assert "3 bits per sample" in reasons[3]
    assert "sample rate 1 Hz" in reasons[4] and "in4.wav" in reasons[4]
    # none of the bad files reached a decoder (no allocation from their header values)
    assert not {"a_1hz.wav", "a_300ch.wav", "a_3bit.wav", "in4.wav"} & set(decoded)
    # the other rows score exactly as without the bad rows; the summary means are theirs alone
    assert main(["score", "--metadata", str(d / "good.csv"), "--metrics", "interruptions,explainable_features",
                 "--out", str(tmp_path / "r_good"), "--no-progress"]) == 0
    ok = [{k: v for k, v in r.items() if k != "row"} for r in res if r["status"] == "ok"]
    assert ok == [{k: v for k, v in r.items() if k != "row"} for r in per_sample(tmp_path / "r_good")]
    s_all = json.loads((tmp_path / "r_all" / "summary.json").read_text())
    s_good = json.loads((tmp_path / "r_good" / "summary.json").read_text())
    assert s_all["explainable_duration_s"] == s_good["explainable_duration_s"] == pytest.approx(6.2, abs=0.01)


def test_absurd_headers_fail_fast_in_infer_and_fdb(clips, tmp_path, fdb_dir, decoded, capsys):
    d, a = clips
    patch_wav(d / "in1.wav", d / "in1.wav", rate=1)
    patch_wav(a, d / "a_300ch.wav", channels=300)
    # human agent: row 1's input claims 1 Hz; row 2's reference answer claims 300 channels
    write_rows(d / "in.csv", [row("in0.wav", a.name, 0.3), row("in1.wav", a.name, 0.3), row("in2.wav", "a_300ch.wav", 0.3)])
    assert main(["infer", "--agent", "human", "--data", str(d / "in.csv"), "--out", str(tmp_path / "inf"), "--no-progress"]) == 0
    fails = {o["row"]: o["error"] for o in map(json.loads, (tmp_path / "inf" / "failures.jsonl").read_text().splitlines())}
    assert set(fails) == {1, 2} and "sample rate 1 Hz" in fails[1] and "300 channels" in fails[2]
    assert not {"in1.wav", "a_300ch.wav"} & set(decoded)
    assert sorted(os.listdir(tmp_path / "inf" / "audio")) == ["in0.wav"]  # no 512 MB answer from a 1 Hz clip
    err = capsys.readouterr().err
    assert "failed row 1: bad audio header: sample rate 1 Hz" in err and "failures.jsonl" in err
    # FDB backchannel: a sample whose output.wav claims 1 Hz fails alone; the good one is scored
    src = fdb_dir / "example_data" / "smooth_turn_taking_example" / "1"
    root = tmp_path / "bc"
    for sid in ("1", "3"):
        (root / sid).mkdir(parents=True)
        for f in ("input.wav", "output.json"):
            shutil.copy(src / f, root / sid / f)
    shutil.copy(src / "output.wav", root / "1" / "output.wav")
    patch_wav(src / "output.wav", root / "3" / "output.wav", rate=1)
    assert main(["fdb", "score", "--task", "backchannel", "--root", str(root), "--out", str(tmp_path / "fdb"), "--no-progress",
                 "--bootstrap", "0"]) == 0
    by_id = {r["id"]: r for r in per_sample(tmp_path / "fdb")}
    assert by_id["1"]["status"] == "ok" and by_id["1"]["n_backchannels"] == 4  # as test_fdb on the same file
    assert by_id["3"]["status"] == "failed" and "sample rate 1 Hz" in by_id["3"]["error"]


def test_one_stereo_rule_for_input_clips(clips, tmp_path, capsys):
    d, a = clips
    x = load_audio(d / "in0.wav")
    write_wav(d / "mono.wav", x[:1])
    write_wav(d / "three.wav", np.vstack([x, x.mean(axis=0, keepdims=True)]))
    write_rows(d / "m.csv", [row("in0.wav", a.name, 0.3), row("mono.wav", a.name, 0.3), row("three.wav", a.name, 0.3)])
    assert main(["score", "--metadata", str(d / "m.csv"), "--metrics", "interruptions", "--out", str(tmp_path / "s"),
                 "--no-progress"]) == 0
    res = per_sample(tmp_path / "s")
    assert res[0]["status"] == "ok"
    assert "input clip has 1 channel(s), expected 2" in res[1]["error"]
    assert "input clip has 3 channel(s), expected 2" in res[2]["error"]
    # infer applies the same rule, with the same words
    assert main(["infer", "--agent", "fixed-delay", "--data", str(d / "m.csv"), "--out", str(tmp_path / "i"), "--no-progress"]) == 0
    fails = {o["row"]: o["error"] for o in map(json.loads, (tmp_path / "i" / "failures.jsonl").read_text().splitlines())}
    assert "input clip has 1 channel(s), expected 2" in fails[1] and "input clip has 3 channel(s), expected 2" in fails[2]


# --------------------------------------------------------------------------- one number parser


def test_one_number_parser():
    from spear_datasets.schema import NumberError, RowError, parse_number, parse_row

    assert parse_number(" 1e3 ") == 1000.0 and parse_number("3", integer=True) == 3 and parse_number(2.0, integer=True) == 2
    for bad in ("1_000", "nan", "-inf", "0x10", "\u0663", "", True, "3.5"):
        with pytest.raises(NumberError):
            parse_number(bad, integer=bad == "3.5")
    base = dict(audio_path="a.wav", answer_audio_path="b.wav", context_end_time="1", question_end_time="2")
    # float() alone takes "1_000"; the metadata cell is refused with the reason
    with pytest.raises(RowError, match="question_end_time is not a number: '1_000'"):
        parse_row(dict(base, question_end_time="1_000"))
    with pytest.raises(RowError, match="answer_start_time is not finite"):
        parse_row(dict(base, answer_start_time="Infinity"))


# --------------------------------------------------------------------------- option schema (item 3)


def test_options_are_typed_refused_when_unknown_and_recorded(clips, tmp_path, capsys):
    d, a = clips
    write_rows(d / "m.csv", [row("in0.wav", a.name, 0.3), row("in1.wav", a.name, -1.0)])
    args = ["score", "--metadata", str(d / "m.csv"), "--metrics", "interruptions,explainable_features", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "typo"), "-o", "vad_time_resolutoin=3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("spearbench score: unknown option 'vad_time_resolutoin' for interruptions, explainable_features; "
                   "valid: vad_backend, vad_time_resolution")
    assert not (tmp_path / "typo").exists()
    with pytest.raises(SystemExit) as e:  # argparse: usage + one error line, exit 2
        main([*args, "--out", str(tmp_path / "zero"), "--batch-size", "0"])
    assert e.value.code == 2 and "argument --batch-size: must be >= 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "zero").exists()
    assert main([*args, "--out", str(tmp_path / "ms"), "-o", "vad_time_resolution=3"]) == 0
    s = json.loads((tmp_path / "ms" / "summary.json").read_text())
    assert s["options"] == {"interruptions": {"vad_backend": "batched", "vad_time_resolution": 3}, "explainable_features": {}}
    # ms VAD times: latencies are no longer multiples of 100 ms
    assert any(round(r["latency_ms"]) % 100 for r in per_sample(tmp_path / "ms"))


def test_evaluate_compute_refuses_unknown_options(clips):
    import evaluate

    from spear_metrics.core.options import OptionError

    d, a = clips
    m = evaluate.load(str(REPO / "spear_metrics" / "interruptions"))
    cols = dict(audio_path=[str(d / "in0.wav")], answer_audio_path=[str(a)], context_end_time=[8.74],
                question_end_time=[QUESTION_END], answer_start_time=[0.3])
    with pytest.raises(OptionError, match=r"unknown option 'foo' for interruptions; valid: vad_backend, vad_time_resolution"):
        m.compute(**cols, foo=1)
    with pytest.raises(OptionError, match="vad_backend must be one of batched, sequence, jit"):
        m.compute(**cols, vad_backend="fast")
    r = m.compute(**cols, vad_time_resolution="2")  # typed by the schema
    assert r["options"]["interruptions"] == {"vad_backend": "batched", "vad_time_resolution": 2}
    assert "vad_time_resolution (int, default 1" in m.inputs_description


def test_every_option_a_dimension_reads_is_declared():
    """Each ``options.get("x")`` / ``options["x"]`` in a dimension's code names a declared option."""
    from spear_metrics.core.registry import DIMENSIONS, dimension_class

    for name in DIMENSIONS:
        cls = dimension_class(name)
        folder = REPO / "spear_metrics" / name
        read = set()
        for f in folder.glob("*.py"):
            read |= set(re.findall(r"options(?:\.get\(|\[)\"([a-z_0-9]+)\"", f.read_text()))
        declared = {o.name for o in cls.option_schema}
        assert read <= declared, f"{name} reads undeclared options {sorted(read - declared)}"
        assert all(o.doc for o in cls.option_schema), name


# --------------------------------------------------------------------------- custom agents (item 2)


def _readme_agent() -> str:
    text = (REPO / "README.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "class EchoAgent" in b)
    return block


def _start(out: Path) -> float:
    with open(out / "metadata.csv", newline="") as f:
        return float(next(csv.DictReader(f))["answer_start_time"])


def test_custom_agent_from_a_file_or_a_module(clips, tmp_path, monkeypatch, capsys):
    d, a = clips
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "my_agents.py").write_text(_readme_agent())  # the README's own example
    write_rows(d / "m.csv", [row("in0.wav", a.name, 0.3)])
    common = ["--data", str(d / "m.csv"), "--no-progress"]
    assert main(["infer", "--agent", f"{tmp_path / 'pkg' / 'my_agents.py'}:EchoAgent", "-a", "gap=0.5", *common,
                 "--out", str(tmp_path / "f")]) == 0
    assert _start(tmp_path / "f") == pytest.approx(0.5)  # answer_start_time = the gap
    # the echo is the question: the questioner FEE016's channel (channel 0 by `speakers`; the last tag of
    # transcript_question) from context end to question end, with the question's words as its text
    ans = load_audio(tmp_path / "f" / "audio" / "in0.wav")[0]
    q = load_audio(d / "in0.wav")[0][round(CONTEXT_END * 16_000):round(QUESTION_END * 16_000)]
    assert ans.shape == q.shape and np.abs(ans - q).max() < 1e-3
    with open(tmp_path / "f" / "metadata.csv", newline="") as f:
        assert next(csv.DictReader(f))["transcript_answer"] == "... a little L_C_D_ display?"
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    assert main(["infer", "--agent", "my_agents:EchoAgent", *common, "--out", str(tmp_path / "m")]) == 0
    assert _start(tmp_path / "m") == pytest.approx(0.3)  # the default gap
    capsys.readouterr()
    assert main(["infer", "--agent", "my_agents:EchoAgent", "-a", "gapp=1", *common, "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.strip() == "spearbench infer: unknown option 'gapp' for agent my_agents:EchoAgent; valid: gap"
    assert main(["infer", "--agent", "my_agents:NoSuch", *common, "--out", str(tmp_path / "y")]) == 2
    assert "has no 'NoSuch'" in capsys.readouterr().err


def test_list_agents_alone_shows_descriptions_and_options(capsys):
    assert main(["infer", "--list-agents"]) == 0
    out = capsys.readouterr().out
    assert "fixed-delay: The human answer replayed delay seconds after the question ends" in out  # markup rendered
    assert "-a delay (float, default 0.5): seconds from the question end to the answer onset" in out
    assert "human:" in out and "(no options)" in out
    assert main(["infer"]) == 2
    assert "--agent, --data, --out" in capsys.readouterr().err


# --------------------------------------------------------------------------- console (items 4, 5, 8)


def test_console_gives_failed_rows_and_null_reasons(clips, tmp_path, capsys):
    from spear_metrics.commands.score import print_summary

    d, a = clips
    write_rows(d / "m.csv", [row("in0.wav", a.name, None), row("in1.wav", "missing.wav", None), row("in2.wav", a.name, None)])
    assert main(["score", "--metadata", str(d / "m.csv"), "--metrics", "interruptions", "--out", str(tmp_path / "o"),
                 "--no-progress"]) == 0
    cap = capsys.readouterr()
    assert re.search(r"failed row 1 \(missing\.wav|failed row 1 \(in1\.wav\): audio file not found: .*missing\.wav", cap.err)
    assert f"every failed row with its reason: {tmp_path / 'o' / 'per_sample.jsonl'}" in cap.err
    # empty answer_start_time everywhere: no interruption value exists, and the console says so
    assert re.search(r"interrupted_time_ms\s+- \(note (\d)\)", cap.out)  # the reason once, below, with its cause
    k = re.search(r"interrupted_time_ms\s+- \(note (\d)\)", cap.out).group(1)
    assert re.search(rf"note {k}: n = 0: no row has an answer_start_time", cap.out)
    print_summary({"UTMOS": None, "UTMOS_note": "UTMOS not computed: MOS backends dnsmos do not include utmos",
                   "WER_%": 12.5, "metrics": ["speech_quality"]})
    out = capsys.readouterr().out
    assert re.search(r"UTMOS\s+- \(note 1\)", out) and "note 1: UTMOS not computed: MOS backends dnsmos do not include utmos" in out
    assert re.search(r"WER_%\s+12\.500", out)


def test_model_loading_line_and_unavailable_model_message(tmp_path, monkeypatch, capsys):
    from spear_metrics.core.models import ModelUnavailableError, resolve_model

    (tmp_path / "lid").mkdir()
    assert resolve_model(tmp_path / "lid", purpose="language ID") == tmp_path / "lid"
    assert f"loading language ID model {tmp_path / 'lid'}" in capsys.readouterr().err
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty_cache"))
    with pytest.raises(ModelUnavailableError) as e:
        resolve_model("someone/not-cached", purpose="language ID")
    msg = str(e.value)
    assert "(hf download someone/not-cached)" in msg and "pass a local folder instead with -o lid_model=FOLDER" in msg
    assert "huggingface-cli" not in msg and "loading" not in capsys.readouterr().err


def test_demo_call_needs_its_turn_files(real_dir, tmp_path, capsys):
    from spear_metrics.cli import COMMANDS, build_parser

    call, rttm = real_dir / "pyannote-audio__sample.wav", real_dir / "pyannote-audio__sample.rttm"
    assert main(["demo", "--out", str(tmp_path / "d"), "--call", str(call), "--rttm", str(rttm)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--call, --rttm and --stm go together" in err and "missing --stm" in err
    parser = build_parser({"demo": __import__(COMMANDS["demo"][0], fromlist=["run"])})
    sub = next(a for a in parser._actions if a.dest == "command").choices["demo"]
    assert "needs --rttm and --stm" in sub.format_help().replace("\n", " ").replace("  ", " ")


# --------------------------------------------------------------------------- FDB task check and dataset card (item 9)


def test_fdb_refuses_a_folder_of_another_task(fdb_dir, tmp_path, capsys):
    root = fdb_dir / "example_data" / "smooth_turn_taking_example"
    assert main(["fdb", "score", "--task", "backchannel", "--root", str(root), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "looks like a smooth_turn_taking folder, not backchannel" in err
    assert not (tmp_path / "o").exists()


def test_dataset_card_takes_source_and_licence_from_the_source(clips, tmp_path, capsys):
    d, a = clips
    src = tmp_path / "src"
    base = src / "inputs" / "test" / "improvised"
    (base / "audios").mkdir(parents=True)
    for i in range(2):
        shutil.copy(d / f"in{i}.wav", base / "audios" / f"in{i}.wav")
    shutil.copy(a, base / "audios" / "ans.wav")
    write_rows(base / "metadata.csv", [row(f"audios/in{i}.wav", "audios/ans.wav", -0.02) for i in range(2)])  # AMI ids
    assert main(["build-dataset", "--source", str(src), "--out", str(tmp_path / "h1"), "--no-progress"]) == 0
    card = (tmp_path / "h1" / "README.md").read_text()
    assert yaml.safe_load(card.split("---\n")[1])["license"] == "unknown"
    assert "Seamless" not in card and "CC BY-NC" not in card and "licence not stated" in card
    assert main(["build-dataset", "--source", str(src), "--out", str(tmp_path / "h2"), "--no-progress",
                 "--source-name", "the AMI Meeting Corpus", "--license", "cc-by-4.0"]) == 0
    card = (tmp_path / "h2" / "README.md").read_text()
    assert yaml.safe_load(card.split("---\n")[1])["license"] == "cc-by-4.0" and "the AMI Meeting Corpus" in card


# --------------------------------------------------------------------------- accelerate (item 10)


def test_single_process_accelerate_launch_is_warned(monkeypatch, capsys):
    import spear_metrics.core.batching as batching

    monkeypatch.setattr(batching, "_WARNED", False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    assert batching.distributed_state().num_processes == 1
    assert "warning" not in capsys.readouterr().err  # a plain process is not a lost launch
    # what `accelerate launch --num_processes 2` (no --multi_gpu) leaves on a CPU-only machine: one process
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
    assert batching.distributed_state().num_processes == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "accelerate launch asked for several processes but this run has 1" in err
    assert "ACCELERATE_USE_CPU=true accelerate launch --multi_gpu" in err



def test_model_backends_take_the_process_device_unless_one_is_asked(monkeypatch):
    """ASR, MOS and the speech-quality lanes pick their device through the one rule of
    :func:`process_device` (accelerate's state, ``ACCELERATE_USE_CPU`` honoured), not a second
    ``PartialState()`` of their own: a process whose state says ``cuda:1`` runs them there."""
    import types

    import spear_metrics.core.batching as batching

    monkeypatch.setattr(batching, "distributed_state", lambda: types.SimpleNamespace(device="cuda:1"))
    assert batching.device_or_default(None) == "cuda:1"
    assert batching.device_or_default("") == "cuda:1"
    assert batching.device_or_default("cpu") == "cpu"  # asked for: kept
    import spear_metrics.core.asr as asr
    import spear_metrics.core.mos as mos

    assert asr.device_or_default is batching.device_or_default and mos.device_or_default is batching.device_or_default


# --------------------------------------------------------------------------- output faults (item 15)


class _FailingFile:
    """A file whose writes fail with ``OSError(code)`` after ``after`` bytes (a disk that fills up)."""

    def __init__(self, f, code: int, after: int):
        self._f, self._code, self._left = f, code, after

    def write(self, s):
        if len(s) > self._left:
            self._f.write(s[: self._left])
            raise OSError(self._code, os.strerror(self._code))
        self._left -= len(s)
        return self._f.write(s)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def test_output_faults_end_with_one_line(clips, tmp_path, monkeypatch, capsys):
    import builtins
    from pathlib import Path as _Path

    import spear_metrics.core.records as records

    d, a = clips
    write_rows(d / "m.csv", [row("in0.wav", a.name, 0.3), row("in1.wav", a.name, -1.0)])
    args = ["score", "--metadata", str(d / "m.csv"), "--metrics", "interruptions", "--no-progress"]

    # --out under a regular file
    (tmp_path / "afile").write_text("x")
    assert main([*args, "--out", str(tmp_path / "afile" / "res")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"spearbench score: cannot create the folder {tmp_path / 'afile' / 'res' / '.work'}: {tmp_path / 'afile'} is a file, not a folder"

    # a read-only filesystem (the folder cannot be made)
    real_mkdir = _Path.mkdir

    def ro_mkdir(self, *a, **k):
        if "ro_out" in str(self):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        return real_mkdir(self, *a, **k)

    monkeypatch.setattr(_Path, "mkdir", ro_mkdir)
    assert main([*args, "--out", str(tmp_path / "ro_out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.endswith(": Read-only file system") and "ro_out" in err
    monkeypatch.setattr(_Path, "mkdir", real_mkdir)

    # a disk that fills up while per_sample.jsonl is written: one line, no .tmp left, a rerun completes
    real_open = builtins.open

    def full_open(path, mode="r", *a, **k):
        f = real_open(path, mode, *a, **k)
        return _FailingFile(f, errno.ENOSPC, 100) if str(path).endswith(".per_sample.jsonl.tmp") else f

    out = tmp_path / "full"
    monkeypatch.setattr(records, "open", full_open, raising=False)
    assert main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"spearbench score: cannot write {out / 'per_sample.jsonl'}: No space left on device"
    assert not list(out.glob(".*.tmp")) and not (out / "per_sample.jsonl").exists()
    monkeypatch.setattr(records, "open", real_open, raising=False)
    assert main([*args, "--out", str(out)]) == 0  # resumes from the work log
    reference = tmp_path / "ref"
    assert main([*args, "--out", str(reference)]) == 0
    assert (out / "per_sample.jsonl").read_text() == (reference / "per_sample.jsonl").read_text()

    # a malformed work-log line is ignored (its row, if any, is redone): same files, exit 0
    with open(reference / ".work" / "rank-0.jsonl", "a") as f:
        f.write('{"row": "x"}\n{"row": 1.5, "status": "ok"}\n{"row": true, "status": "ok"}\n')
    before = (reference / "per_sample.jsonl").read_text()
    assert main([*args, "--out", str(reference)]) == 0
    assert (reference / "per_sample.jsonl").read_text() == before


def test_second_breaker_pass_faults_end_in_one_line(tmp_path, real_dir, capsys, monkeypatch):
    """Found by the second breaker pass: an answer the system will not let us read (EACCES,
    simulated) fails its row only; a work log with a non-UTF-8 byte is a torn line; a 300 KB
    transcript cell is read; an absurd --bootstrap is refused by argparse; infer refuses to write
    over its own input metadata."""
    from helpers import make_clips, row, write_rows
    from spear_datasets import audio as audio_mod
    from spear_metrics.cli import main
    from conftest import STEREO_DIALOGUE

    q, a = make_clips(STEREO_DIALOGUE, tmp_path)
    q2 = tmp_path / "in2.wav"
    os.link(q, q2)
    shutil.copy(a, tmp_path / "locked.wav")
    real_check = audio_mod._check_riff

    def denied(path):
        if str(path).endswith("locked.wav"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_check(path)

    monkeypatch.setattr(audio_mod, "_check_riff", denied)
    meta = write_rows(tmp_path / "metadata.csv", [row(q.name, a.name, None, transcript_answer="P0002: " + "word " * 60000),
                                                  row(q2.name, "locked.wav", None)])
    out = tmp_path / "r"
    args = ["score", "--metadata", str(meta), "--metrics", "interruptions", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    rows = [json.loads(line) for line in (out / "per_sample.jsonl").read_text().splitlines()]
    assert rows[0]["status"] == "ok" and rows[1]["status"] == "failed" and "Permission denied" in rows[1]["error"]
    log = next((out / ".work").glob("rank-*.jsonl"))
    with open(log, "ab") as f:
        f.write(b"\xff\xfe{not json\n")
    assert main(args) == 0 and [json.loads(line) for line in (out / "per_sample.jsonl").read_text().splitlines()] == rows
    # a declared key edited to text in the work log: that record is not trusted, its row is redone
    text = log.read_text(errors="replace")
    log.write_text(re.sub(r'"latency_ms": [0-9.]+', '"latency_ms": "abc"', text, count=1))
    assert '"latency_ms": "abc"' in log.read_text()
    assert main(args) == 0 and [json.loads(line) for line in (out / "per_sample.jsonl").read_text().splitlines()] == rows
    with pytest.raises(SystemExit) as e:
        main([*args, "--bootstrap", "100000000000"])
    assert e.value.code == 2 and "at most" in capsys.readouterr().err
    before = meta.read_bytes()
    assert main(["infer", "--agent", "fixed-delay", "--data", str(meta), "--out", str(tmp_path), "--no-progress"]) == 2
    assert "would overwrite the input metadata" in capsys.readouterr().err and meta.read_bytes() == before
