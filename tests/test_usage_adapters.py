"""Usage the adapters' services report (Chat Completions ``usage``, Realtime ``response.done``) summed
per run in ``run_info.json``, against the loopback fakes of tests/openai_fakes.py on a real clip."""

from __future__ import annotations

import json

import pytest

from openai_fakes import CHAT_USAGE, ChatFake, Program
from spear_metrics.cli import main
from test_adapters_openai import KEY, answer_24k, name, sources, write_csv


def test_chat_completions_usage_in_run_info(real_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    ami, _ = sources(real_dir)["ami"]
    kinds = ["ok", "e500_once", "malformed"]  # answered; answered after a 500 (no usage in it); failed
    csv_path = write_csv(tmp_path / "data", [(name(k), ami) for k in range(len(kinds))])
    fake = ChatFake({name(k): Program(kind) for k, kind in enumerate(kinds)}, answer_24k(real_dir), 24_000, KEY)
    out = tmp_path / "out"
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"models": {"gpt-audio-test": {"input": 2.0, "output": 8.0, "audio_input": 40.0,
                                                                "audio_output": 80.0}}}))
    argv = ["infer", "--agent", "openai-audio", "--data", str(csv_path), "--out", str(out), "--no-progress",
            "--price-table", str(prices), "-a", f"base_url={fake.url}", "-a", "model=gpt-audio-test", "-a", "timeout_s=60",
            "-a", "max_tries=3", "-a", "max_wait_s=120"]
    try:
        assert main(argv) == 0
    finally:
        fake.close()
    usage = json.loads((out / "run_info.json").read_text())["usage"]
    # two answers, each billed CHAT_USAGE; the failed row and the HTTP 500 report none
    tot = usage["total"]
    assert tot["input_tokens"] == 2 * CHAT_USAGE["prompt_tokens"] and tot["output_tokens"] == 2 * CHAT_USAGE["completion_tokens"]
    assert tot["audio_input_tokens"] == 80 and tot["audio_output_tokens"] == 30
    assert list(usage["by_model"]) == ["gpt-audio-test"] and usage["by_model"]["gpt-audio-test"]["n_replies"] == 2
    printed = capsys.readouterr().out
    assert "tokens billed: gpt-audio-test: 100 in / 40 out (80 / 30 audio)" in printed
    # by hand: text in 100 - 80 = 20 at 2, audio in 80 at 40, text out 40 - 30 = 10 at 8, audio out 30 at 80, per million
    cost = (20 * 2 + 80 * 40 + 10 * 8 + 30 * 80) / 1e6
    assert f"cost {cost:.6f} USD" in printed
    # the cost is recorded too, in run_info.json, written while the folder is held (a recorded write)
    assert usage["cost"] == pytest.approx(cost, abs=1e-12) and usage["currency"] == "USD"
    assert usage["price_table"] == "prices.json" and usage["by_model"]["gpt-audio-test"]["cost"] == pytest.approx(cost)
    # so a rerun into the same folder (the fake closed: nothing is asked again) resumes, not refused as a foreign file
    assert main(argv) == 0
    again = json.loads((out / "run_info.json").read_text())
    assert again["rows_resumed"] == 3 and again["usage"]["cost"] == pytest.approx(cost, abs=1e-12)


def test_realtime_response_done_usage_in_run_info(real_dir, tmp_path, monkeypatch):
    from openai_fakes import REALTIME_USAGE, RealtimeFake
    from test_adapters_openai import REALTIME_OPTS

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    ami, ami_end = sources(real_dir)["ami"]
    csv_path = write_csv(tmp_path / "data", [(name(0), ami)])
    fake = RealtimeFake({name(0): Program("reply", at_s=ami_end + 0.3, speech_end_s=ami_end)}, answer_24k(real_dir), KEY)
    out = tmp_path / "out"
    try:
        args = ["infer", "--agent", "openai-realtime", "--data", str(csv_path), "--out", str(out), "--no-progress",
                "-a", f"base_url={fake.url}", "-a", "model=gpt-realtime-test"]
        for o in REALTIME_OPTS:
            args += ["-a", o]
        assert main(args) == 0
    finally:
        fake.close()
    usage = json.loads((out / "run_info.json").read_text())["usage"]
    assert usage["by_model"]["gpt-realtime-test"]["n_replies"] == 1
    assert usage["total"] == {"input_tokens": REALTIME_USAGE["input_tokens"], "output_tokens": REALTIME_USAGE["output_tokens"],
                              "audio_input_tokens": 150, "audio_output_tokens": 80, "cached_input_tokens": 0,
                              "cached_audio_input_tokens": 0}


def test_gemini_live_usage_metadata_in_run_info(real_dir, tmp_path, monkeypatch):
    from fakes.gemini_fake import USAGE, FakeGeminiLive, GeminiScenario

    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    ami, _ = sources(real_dir)["ami"]
    csv_path = write_csv(tmp_path / "data", [(name(0), ami)])
    out = tmp_path / "out"
    with FakeGeminiLive({name(0): GeminiScenario(answer_24k(real_dir), KEY, delay_s=0.2)}) as fake:
        assert main(["infer", "--agent", "gemini-live", "--data", str(csv_path), "--out", str(out), "--no-progress",
                     "--chunk-ms", "40", "-a", f"base_url={fake.url('')}", "-a", "model=gemini-live-test",
                     "-a", "max_wait_s=60"]) == 0
    usage = json.loads((out / "run_info.json").read_text())["usage"]
    assert usage["by_model"]["gemini-live-test"]["n_replies"] == 1
    assert usage["total"] == {"input_tokens": USAGE["promptTokenCount"], "output_tokens": USAGE["responseTokenCount"],
                              "audio_input_tokens": 60, "audio_output_tokens": 35, "cached_input_tokens": 0,
                              "cached_audio_input_tokens": 0}


# --------------------------------------------------------------------------- --price-table on every infer command


def _prices(tmp_path, model: str, **entry):
    p = tmp_path / "prices.json"
    p.write_text(json.dumps({"currency": "EUR", "models": {model: entry}}))
    return p


def _realtime_cost(n: int) -> float:
    """``n`` Realtime replies of REALTIME_USAGE at input 1, output 4, audio in 10, audio out 20 per
    million: text in 200 - 150, audio in 150, text out 100 - 80, audio out 80."""
    return n * ((200 - 150) * 1 + 150 * 10 + (100 - 80) * 4 + 80 * 20) / 1e6


def test_fdb_infer_prices_the_realtime_usage(fdb_dir, real_dir, tmp_path, monkeypatch, capsys):
    import shutil

    from openai_fakes import REALTIME_USAGE, RealtimeFake
    from spear_datasets.audio import load_audio

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    root = tmp_path / "fdb" / "pause_handling"
    (root / "1").mkdir(parents=True)
    for f in ("input.wav", "pause.json"):
        src = fdb_dir / "example_data" / "pause_handling_example" / "1" / f
        if src.is_file():
            shutil.copy(src, root / "1" / f)
    answer = load_audio(real_dir / "speechbrain__p225_002.wav", sr=24_000, channels="mix")[0][:12000]
    fake = RealtimeFake({"pause_handling_1": Program("reply", at_s=1.0, speech_end_s=0.5)}, answer, KEY)
    prices = _prices(tmp_path, "gpt-realtime-test", input=1.0, output=4.0, audio_input=10.0, audio_output=20.0)
    argv = ["fdb", "infer", "--agent", "openai-realtime", "--root", str(root), "--no-asr", "--no-progress",
            "--price-table", str(prices), "-a", f"base_url={fake.url}", "-a", "model=gpt-realtime-test"]
    try:
        assert main(argv) == 0
    finally:
        fake.close()
    info = json.loads((root / ".spearbench-fdb-infer" / "run_info.json").read_text())
    usage = info["usage"]
    assert usage["total"]["input_tokens"] == REALTIME_USAGE["input_tokens"]
    assert usage["by_model"]["gpt-realtime-test"]["n_replies"] == 1
    assert usage["currency"] == "EUR" and usage["cost"] == pytest.approx(_realtime_cost(1), abs=1e-12)
    out = capsys.readouterr().out
    assert f"tokens billed: gpt-realtime-test: 200 in / 100 out (150 / 80 audio); cost {_realtime_cost(1):.6f} EUR" in out
    # a rerun has nothing to ask (the fake is closed) and still reports the folder's cost
    assert main(argv) == 0
    assert f"cost {_realtime_cost(1):.6f} EUR" in capsys.readouterr().out


def test_speechrole_infer_prices_the_chat_usage(real_dir, tmp_path, monkeypatch, capsys):
    from openai_fakes import ChatFake
    from speechrole_fixtures import make_eval_root
    from spear_datasets.audio import load_audio

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    eval_root = make_eval_root(tmp_path, real_dir)
    answer = load_audio(real_dir / "speechbrain__p226_002.wav", sr=24_000, channels="mix")[0]
    fake = ChatFake({}, answer, 24_000, KEY, transcript="onions have layers")
    prices = _prices(tmp_path, "gpt-audio-test", input=2.0, output=8.0, audio_input=40.0, audio_output=80.0)
    out = tmp_path / "model_output" / "gpt"
    try:
        assert main(["speechrole", "infer", "--agent", "openai-audio", "--test-data", str(eval_root), "--mode", "multi",
                     "--out", str(out), "--no-progress", "--price-table", str(prices), "-a", f"base_url={fake.url}",
                     "-a", "model=gpt-audio-test", "-a", "max_tries=1"]) == 0
    finally:
        fake.close()
    n_turns = sum(fake.calls.values())
    assert n_turns >= 2  # the multi dialogue: one reply per turn, each billed CHAT_USAGE
    usage = json.loads((out / "multi_result" / "run_info.json").read_text())["usage"]
    assert usage["by_model"]["gpt-audio-test"]["n_replies"] == n_turns
    assert usage["total"]["input_tokens"] == n_turns * CHAT_USAGE["prompt_tokens"]
    cost = n_turns * ((50 - 40) * 2 + 40 * 40 + (20 - 15) * 8 + 15 * 80) / 1e6  # CHAT_USAGE by hand
    assert usage["cost"] == pytest.approx(cost, abs=1e-12) and usage["price_table"] == "prices.json"
    assert f"multi: tokens billed: gpt-audio-test: {n_turns * 50} in / {n_turns * 20} out" in capsys.readouterr().out


def test_dsuperb_infer_prices_the_chat_usage(real_dir, tmp_path, monkeypatch, capsys):
    from dsuperb_fixtures import ASR, build_instances
    from openai_fakes import ChatFake
    from spear_datasets.audio import load_audio

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    data = build_instances(real_dir, tmp_path / "data")
    answer = load_audio(real_dir / "speechbrain__p226_002.wav", sr=24_000, channels="mix")[0]
    fake = ChatFake({}, answer, 24_000, KEY, transcript="a transcript")
    prices = _prices(tmp_path, "gpt-audio-test", input=2.0, output=8.0, audio_input=40.0, audio_output=80.0)
    pred = tmp_path / "pred"
    try:
        rc = main(["dsuperb", "infer", "--agent", "openai-audio", "--tasks", ASR, "--data", str(data), "--out", str(pred),
                   "--no-progress", "--price-table", str(prices), "-a", f"base_url={fake.url}",
                   "-a", "model=gpt-audio-test", "-a", "max_tries=1"])
    finally:
        fake.close()
    assert rc == 0
    n = json.loads((pred / ".work" / "run_info.json").read_text())["n_answered"]
    assert n == 3  # the fixture's three good rows (two fail before reaching the adapter)
    cost = n * ((50 - 40) * 2 + 40 * 40 + (20 - 15) * 8 + 15 * 80) / 1e6
    for info in (json.loads((pred / ".work" / "run_info.json").read_text()),
                 json.loads((pred / ".work" / ASR / "run_info.json").read_text())):
        assert info["usage"]["by_model"]["gpt-audio-test"]["n_replies"] == n
        assert info["usage"]["cost"] == pytest.approx(cost, abs=1e-12)
    assert f"cost {cost:.6f} EUR" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["fdb", "infer", "--agent", "openai-realtime", "--root", "ROOT"],
                                  ["speechrole", "infer", "--agent", "openai-audio", "--test-data", "ROOT", "--mode",
                                   "single", "--out", "OUT"],
                                  ["dsuperb", "infer", "--agent", "fixed-text", "--tasks", "x", "--out", "OUT"]])
def test_an_unusable_price_table_is_refused_before_any_call(argv, tmp_path, capsys):
    bad = tmp_path / "prices.json"
    bad.write_text('{"models": {"m": {"input": -1}}}')
    (tmp_path / "root").mkdir()
    argv = [a.replace("ROOT", str(tmp_path / "root")).replace("OUT", str(tmp_path / "out")) for a in argv]
    assert main(argv + ["--no-progress", "--price-table", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "input must be a non-negative number" in err[0]
    assert not (tmp_path / "out").exists()
