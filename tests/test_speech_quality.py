"""The speech_quality dimension end to end: CLI-equivalent run_score on real clips, summary keys,
provenance, UTMOS null + note, empty reference / empty hypothesis rules."""

from __future__ import annotations

import csv
import json

import pytest

from spear_metrics.core.scoring import run_score
from spear_metrics.speech_quality.definition import SpeechQuality, error_rates, spear_error_rates, spear_reference


def test_spear_reference_cleaning():
    # speaker tags of any P-id go, a leading **heading** (+ colon) goes, text before the LAST
    # triple space goes, then . ? and spaces at both ends; case and inner punctuation stay
    assert spear_reference("P0001: Yes, I do.") == "Yes, I do"
    assert spear_reference("**Answer**: P1234A: Sure?") == "Sure"
    assert spear_reference("P0002: draft one   draft two   P0002: Final words.") == "Final words"
    assert spear_reference("FEE016: Right.") == "FEE016: Right"  # only P-ids are tags upstream
    # nothing left, or no cell: "no reference", never an error
    assert spear_reference("P0002: ...?") is None and spear_reference("") is None and spear_reference(None) is None
    assert spear_error_rates("P0002: ...", "hello") == (None, None)
    # an empty hypothesis leaves the (row, ASR) pair out (SPEAR filters transcripts == '')
    assert spear_error_rates("P0001: yes I do", "") == (None, None)
    assert spear_error_rates("P0001: yes I do", None) == (None, None)
    # raw text: punctuation inside and case count, end punctuation does not
    assert spear_error_rates("P0001: Yes, I do.", "yes I do") == (pytest.approx(1 / 3), pytest.approx(2 / 9))
    assert spear_error_rates("P0001: Yes, I do.", "Yes, I do?") == (0.0, 0.0)


def test_error_rates_empty_texts_and_tags():
    assert error_rates("P1234A: Hello there.", "hello there") == (0.0, 0.0)
    assert error_rates("P1234A: Mm-hmm.", "yes") == (None, None)  # fillers only: no reference words
    assert error_rates("", "") == (None, None)
    assert error_rates("P0001: yes I do", "") == (1.0, 1.0)  # everything deleted
    assert error_rates("colour", "color") == (0.0, 0.0)  # Whisper normaliser on both sides


@pytest.fixture(scope="module")
def run_dir(real_dir, tmp_path_factory):
    """A speech_quality run of three real clips (absolute paths, as infer writes them): (RESULTS, metadata)."""
    tmp = tmp_path_factory.mktemp("sq")
    rows = []
    # input clips are stereo (one speaker per channel, the rule of every command); the answers are measured
    pairs = [("DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav", "faster-whisper__jfk.flac",
              "P0002: " + (real_dir / "faster-whisper__jfk.txt").read_text()),
             ("faster-whisper__jfk.flac", "speechbrain__p226_002.wav", "P0002: " + (real_dir / "speechbrain__p226_002.txt").read_text()),
             ("faster-whisper__stereo_diarization.wav", "speechbrain__p225_002.wav", "P0002: Mm-hmm.")]
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
    return out, meta


@pytest.fixture(scope="module")
def run(run_dir):
    out, _ = run_dir
    return json.loads((out / "summary.json").read_text()), [json.loads(l) for l in (out / "per_sample.jsonl").read_text().splitlines()]


def test_summary_keys_and_provenance(run):
    summary, per = run
    assert summary["n_scored"] == 3
    assert summary["UTMOS"] is None and "UTMOS not computed" in summary["UTMOS_note"]
    # the published WER_%/CER_% pool SPEAR's two ASR systems: with the embedded ASR they are null, with a note
    assert summary["WER_%"] is None and summary["CER_%"] is None and "whisper-large-v3" in summary["WER_note"]
    from spear_metrics.commands import null_reason  # the console prints the why, not "no value"

    assert "whisper-large-v3" in null_reason(summary, "WER_%") and "whisper-large-v3" in null_reason(summary, "CER_%")
    assert summary["WER_norm_%"] < 10 and summary["CER_norm_%"] < 10
    assert summary["asr_models"] == ["faster-whisper-base"]
    assert summary["WER_norm_%_faster-whisper-base"] == summary["WER_norm_%"]
    assert "asr:faster-whisper-base" in summary["models"] and "DistillMOS" in summary["models"]
    assert 1 <= summary["DistillMOS"] <= 5 and "DNSMOS_OVRL" not in summary
    # "Mm-hmm" is a reference under SPEAR's rule (raw text) but holds no words once normalised
    assert summary["no_reference_%"] == 0.0
    assert [r["WER_norm_%_faster-whisper-base"] is None for r in per] == [False, False, True]
    assert all(r["WER_%_faster-whisper-base"] is not None for r in per)
    assert all(r["UTMOS"] is None and r["asr_text_faster-whisper-base"] for r in per)


def test_upper_case_reference_differs_in_every_word_raw_and_in_none_normalised(real_dir):
    """The same words in capitals: SPEAR's raw-text WER counts each as a substitution, the
    normalised project key counts none (real ASR of a real recording of that sentence)."""
    from spear_metrics.core.scoring import score_columns

    ref = (real_dir / "speechbrain__p225_002.txt").read_text().strip()  # "Ask her to bring ... store."
    r = score_columns("speech_quality", {"audio_path": [str(real_dir / "faster-whisper__jfk.flac")],
                                         "answer_audio_path": [str(real_dir / "speechbrain__p225_002.wav")],
                                         "context_end_time": [0.5], "question_end_time": [1.0], "answer_start_time": [0.2],
                                         "transcript_answer": ["P0002: " + ref.upper()]}, mos="")
    row = r["per_sample"][0]
    assert row["asr_text_faster-whisper-base"].rstrip(".") == ref.rstrip(".")  # the ASR got every word right
    assert row["WER_%_faster-whisper-base"] == 100.0  # 11 of 11 words differ in case
    assert row["WER_norm_%_faster-whisper-base"] == 0.0 and r["WER_norm_%"] == 0.0


def test_published_wer_pools_row_asr_values_of_spears_two_systems(monkeypatch, real_dir):
    """WER_% = mean over every (row, ASR) value (SPEAR concatenates its per-ASR columns), not a
    mean of per-ASR means, and an empty hypothesis leaves its pair out. The two backends are
    stand-ins with known transcripts: this checks the pooling, not the models."""
    from spear_metrics.core import asr as asr_mod
    from spear_metrics.core.scoring import score_columns

    from helpers import known_asr

    texts = {"whisper-large-v3": ["Ask her to bring these things", "wrong words entirely here now"],
             "qwen3-asr-0.6b": ["", "Ask her to bring these things"]}
    for key in texts:
        monkeypatch.setitem(asr_mod.ASR_BACKENDS, key, known_asr(key, texts[key]))
    cols = {"audio_path": [str(real_dir / "DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav"),
                           str(real_dir / "faster-whisper__jfk.flac")],  # stereo input clips (the rule of every command)
            "answer_audio_path": [str(real_dir / "speechbrain__p225_002.wav")] * 2,
            "context_end_time": [0.5] * 2, "question_end_time": [1.0] * 2, "answer_start_time": [0.2] * 2,
            "transcript_answer": ["P0002: Ask her to bring these things."] * 2}
    r = score_columns("speech_quality", cols, asr="whisper-large-v3,qwen3-asr-0.6b", mos="")
    a, b = r["per_sample"]
    assert a["WER_%_whisper-large-v3"] == 0.0 and a["WER_%_Qwen3-ASR-0.6B"] is None
    assert b["WER_%_whisper-large-v3"] == 100.0 and b["WER_%_Qwen3-ASR-0.6B"] == 0.0
    assert r["WER_%"] == pytest.approx(100.0 / 3)  # (0 + 100 + 0) / 3 values; per-ASR means would give 25
    assert r["WER_%_whisper-large-v3"] == 50.0 and r["WER_%_Qwen3-ASR-0.6B"] == 0.0
    assert "WER_note" not in r
    # a results check (push-results, the Space) rebuilds the dimension with its defaults: the pooled
    # WER_% comes back from the rows' own ASR labels, not from the checker's options
    fresh = SpeechQuality().aggregate([], r["per_sample"])
    assert fresh["WER_%"] == pytest.approx(r["WER_%"]) and fresh["CER_%"] == pytest.approx(r["CER_%"])
    # the normalised project key counts the empty hypothesis as 100 % (all deleted)
    assert r["WER_norm_%"] == pytest.approx((0 + 100 + 100 + 0) / 4)


def test_reference_profile_without_weights_says_so(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    dim = SpeechQuality(profile="reference")
    assert [label for label, _ in dim.asrs] == ["whisper-large-v3", "Qwen3-ASR-0.6B"] and dim.mos_names == ["utmos"]
    assert dim.spear_asr
    whisper, qwen = (a for _, a in dim.asrs)  # called as SPEAR's bin/transcribe.py calls them
    assert whisper.language is None and whisper.long_form is False and qwen.language is None and qwen.max_new_tokens == 256
    assert not SpeechQuality(profile="reference", whisper_model="openai/whisper-tiny").spear_asr
    with pytest.raises(ValueError, match="profile"):
        SpeechQuality(profile="nope")


def test_reference_profile_offline_stops_the_run_naming_the_model(monkeypatch, real_dir):
    """profile=reference asks for the published table's models by name: offline without them the
    run stops with one line naming the first model missing (exit 2 in the CLI), never a run of
    null keys."""
    from spear_metrics.core.models import ModelUnavailableError
    from spear_metrics.core.scoring import score_columns

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailableError, match="profile=reference.*Blinorot/UTMOS-PyTorch") as e:
        score_columns("speech_quality", {"audio_path": [str(real_dir / "faster-whisper__jfk.flac")],
                                         "answer_audio_path": [str(real_dir / "speechbrain__p225_002.wav")],
                                         "context_end_time": [0.5], "question_end_time": [1.0], "answer_start_time": [0.2],
                                         "transcript_answer": ["P0002: Ask her."]}, profile="reference")
    assert "\n" not in str(e.value)


def test_speech_quality_run_publishes_and_loads_without_local_paths(run_dir, real_dir, tmp_path, capsys):
    """push-results takes a speech_quality run (UTMOS null with its text note, per row too), the
    results dataset carries no absolute local path (the metadata's paths are absolute), and the
    Space's loader accepts it with the note as text."""
    from spear_metrics.cli import main
    from spear_metrics.results import load_results

    out, meta = run_dir
    ds = tmp_path / "ds"
    rc = main(["push-results", str(out), "--local-dir", str(ds), "--model-name", "sq", "--with-audio",
               "--metadata", str(meta)])
    assert rc == 0, capsys.readouterr().err
    for f in (p for p in ds.rglob("*") if p.is_file()):
        data = f.read_bytes()
        assert str(real_dir).encode() not in data and str(tmp_path).encode() not in data, f.name
    res = load_results(ds)
    assert list(res.samples["audio_path"]) == ["DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav",
                                               "faster-whisper__jfk.flac", "faster-whisper__stereo_diarization.wav"]
    assert res.summary["UTMOS"] is None and all("UTMOS not computed" in n for n in res.samples["UTMOS_note"])
    assert res.summary["WER_%"] == pytest.approx(json.loads((out / "summary.json").read_text())["WER_%"])


def test_models_shared_per_process_and_one_thread_each_on_cpu():
    """Two speech_quality dimensions of one process hold the same backend objects (so each model
    loads once per process); with several CPU lanes every model computes on one thread; one lane
    keeps the libraries' default threads. Nothing is loaded here (models load on first use)."""
    from spear_metrics.speech_quality.definition import cpu_lanes

    a, b = SpeechQuality(device="cpu", cpu_lanes=2), SpeechQuality(device="cpu", cpu_lanes=2)
    assert a.lanes == 2 and [id(x) for _, x in a.asrs] == [id(x) for _, x in b.asrs]
    assert [id(m) for m in a.moss] == [id(m) for m in b.moss]
    assert a.asrs[0][1].cpu_threads == 1 and next(m for m in a.moss if m.name == "dnsmos").threads == 1
    one = SpeechQuality(device="cpu", cpu_lanes=1)
    assert one.lanes == 1 and one.asrs[0][1].cpu_threads == 0 and next(m for m in one.moss if m.name == "dnsmos").threads == 0
    assert id(one.asrs[0][1]) != id(a.asrs[0][1])  # another thread setting: another backend
    assert cpu_lanes(3) == 3 and cpu_lanes(0) >= 1


@pytest.mark.slow
def test_side_by_side_models_give_the_values_of_one_after_the_other(real_dir):
    """The CPU lanes (models side by side, one thread each) against one model after the other on
    the libraries' threads, on real answers of 4.7 s, 11 s and 30 s: the same texts, and MOS
    values equal up to the float rounding of another thread split (DNSMOS windows of 9.01 s hop
    1 s and DistillMOS windows of 7.68 s are still scored each on its own)."""
    from spear_datasets.audio import load_audio

    waves = [load_audio(real_dir / c, sr=16000, channels="mix")[0]
             for c in ("speechbrain__p226_002.wav", "faster-whisper__jfk.flac", "pyannote-audio__dev00.wav")]
    lanes, one = SpeechQuality(device="cpu", cpu_lanes=2), SpeechQuality(device="cpu", cpu_lanes=1)
    (mos_l, text_l), (mos_1, text_1) = lanes._run_models(waves), one._run_models(waves)
    assert text_l == text_1 and text_l["faster-whisper-base"][1].startswith("And so my fellow Americans")
    for m_l, m_1 in zip(lanes.moss, one.moss):
        assert m_l.keys == m_1.keys
        for a, b in zip(mos_l[id(m_l)], mos_1[id(m_1)]):
            assert a.keys() == b.keys() and all(abs(a[k] - b[k]) < 1e-4 for k in a)
