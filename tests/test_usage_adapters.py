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
                              "audio_input_tokens": 150, "audio_output_tokens": 80, "cached_input_tokens": 0}


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
                              "audio_input_tokens": 60, "audio_output_tokens": 35, "cached_input_tokens": 0}
