"""The speech_quality dimension end to end: CLI-equivalent run_score on real clips, summary keys,
provenance, UTMOS null + note, empty reference / empty hypothesis rules."""

from __future__ import annotations

import csv
import json

import pytest

from spear_metrics.core.runner import run_score
from spear_metrics.speech_quality.definition import SpeechQuality, error_rates


def test_error_rates_empty_texts_and_tags():
    assert error_rates("P1234A: Hello there.", "hello there") == (0.0, 0.0)
    assert error_rates("P1234A: Mm-hmm.", "yes") == (None, None)  # fillers only: no reference words
    assert error_rates("", "") == (None, None)
    assert error_rates("P0001: yes I do", "") == (1.0, 1.0)  # everything deleted
    assert error_rates("colour", "color") == (0.0, 0.0)  # Whisper normaliser on both sides


@pytest.fixture(scope="module")
def run(real_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sq")
    rows = []
    pairs = [("speechbrain__p225_002.wav", "faster-whisper__jfk.flac", "P0002: " + (real_dir / "faster-whisper__jfk.txt").read_text()),
             ("faster-whisper__jfk.flac", "speechbrain__p226_002.wav", "P0002: " + (real_dir / "speechbrain__p226_002.txt").read_text()),
             ("speechbrain__p226_002.wav", "speechbrain__p225_002.wav", "P0002: Mm-hmm.")]
    for q, a, ref in pairs:
        rows.append({"audio_path": str(real_dir / q), "answer_audio_path": str(real_dir / a), "context_end_time": 0.5,
                     "question_end_time": 1.0, "answer_duration": "", "speakers": "P0001|P0002",
                     "conversation_id": "V00_S0001_I00000001", "transcript_question": "P0001: well?",
                     "transcript_answer": ref.strip(), "answer_start_time": 0.2})
    meta = tmp / "meta.csv"
    with open(meta, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    out = tmp / "out"
    run_score(meta, "speech_quality", out, options={"mos": "distillmos"}, progress=False)
    return json.loads((out / "summary.json").read_text()), [json.loads(l) for l in (out / "per_sample.jsonl").read_text().splitlines()]


def test_summary_keys_and_provenance(run):
    summary, per = run
    assert summary["n_scored"] == 3
    assert summary["UTMOS"] is None and "UTMOS not computed" in summary["UTMOS_note"]
    assert summary["WER_%"] < 10 and summary["CER_%"] < 10
    assert summary["asr_models"] == ["faster-whisper-base"] and summary["WER_%_faster-whisper-base"] == summary["WER_%"]
    assert "asr:faster-whisper-base" in summary["models"] and "DistillMOS" in summary["models"]
    assert 1 <= summary["DistillMOS"] <= 5 and "DNSMOS_OVRL" not in summary
    assert summary["no_reference_%"] == pytest.approx(100 / 3)
    assert [r["WER_%"] is None for r in per] == [False, False, True]  # "Mm-hmm." has no words
    assert all(r["UTMOS"] is None and r["asr_text_faster-whisper-base"] for r in per)


def test_reference_profile_without_weights_says_so(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    dim = SpeechQuality(profile="reference")
    assert [a.name for a in dim.asrs] == ["Qwen3-ASR-0.6B-hf", "whisper-large-v3"] and dim.mos_names == ["utmos"]
    with pytest.raises(ValueError, match="profile"):
        SpeechQuality(profile="nope")


def test_reference_profile_offline_rows_say_why(monkeypatch, real_dir):
    from spear_metrics.core.runner import score_columns

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    r = score_columns("speech_quality", {"audio_path": [str(real_dir / "faster-whisper__jfk.flac")],
                                         "answer_audio_path": [str(real_dir / "speechbrain__p225_002.wav")],
                                         "context_end_time": [0.5], "question_end_time": [1.0], "answer_start_time": [0.2],
                                         "transcript_answer": ["P0002: Ask her."]}, profile="reference")
    assert r["n_scored"] == 1 and r["UTMOS"] is None and r["WER_%"] is None
    assert "UTMOS unavailable" in r["UTMOS_note"] and "Blinorot/UTMOS-PyTorch" in r["UTMOS_note"]
    assert "openai/whisper-large-v3" in r["ASR_note"] and "Qwen/Qwen3-ASR-0.6B-hf" in r["ASR_note"]
