"""The distributional dimension: SPEAR's per-answer features on real recordings, the dev-fitted
baselines, and SPEARBench's human_likeness_auroc against known references (samples cut at the
speaker hand-overs of three real conversations: tests/_distrib_samples.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from conftest import REAL


# --------------------------------------------------------------------------------------- lexical


def test_lexical_measures_hand_computed():
    """50 words cycling five types: TTR 5/50; one MATTR window of 50 (and min(500, 50) = 50) with
    the same ratio; MTLD: the running TTR reaches 5/7 <= 0.72 at every 7th word, so 7 factors
    hold 49 words and the 50th leaves a partial factor of TTR 1 (worth 0): 50 / 7 both ways;
    entropy log2(5) bits; no word occurs once."""
    from spear_metrics.distributional.features import lexical_features

    out = lexical_features(" ".join(["a", "b", "c", "d", "e"] * 10))
    assert out["lexical_status"] == "OK" and out["lexical_status_reason"] == ""
    assert out["lexical_total_words"] == 50 and out["lexical_unique_words"] == 5
    assert out["lexical_ttr"] == pytest.approx(0.1)
    assert out["lexical_mattr_small"] == pytest.approx(0.1) and out["lexical_mattr_large"] == pytest.approx(0.1)
    assert out["lexical_mattr_ratio"] == pytest.approx(1.0)
    assert out["lexical_mtld"] == pytest.approx(50 / 7)
    assert out["lexical_entropy"] == pytest.approx(math.log2(5))
    assert out["lexical_hapax_ratio"] == 0.0


def test_lexical_sentences_backchannels_and_quirks():
    """Four sentences: "yeah" and "okay" are backchannels (<= 2 words), "i mean it is kind of odd"
    holds discourse markers, "sure thing" neither: 2/4 and 1/4. Eleven words, all distinct:
    TTR 1, and below 50 words no MATTR/MTLD. Upstream's quirk: "yeah," keeps its comma, so
    "Yeah, right." is no backchannel. Distinct words all once: MTLD of 50 has no factor (None)."""
    from spear_metrics.distributional.features import lexical_features, mtld, tokens

    out = lexical_features("Yeah. Okay. I mean it is kind of odd. Sure thing.")
    assert out["lexical_total_words"] == 11 and out["lexical_ttr"] == 1.0 and out["lexical_hapax_ratio"] == 1.0
    assert out["lexical_backchannel_ratio"] == 0.5 and out["lexical_discourse_marker_ratio"] == 0.25
    assert out["lexical_status_reason"] == "SHORT_TEXT" and out["lexical_mattr_small"] is None and out["lexical_mtld"] is None
    assert lexical_features("Yeah, right.")["lexical_backchannel_ratio"] == 0.0
    assert lexical_features("Yeah right.")["lexical_backchannel_ratio"] == 1.0
    assert lexical_features("... !")["lexical_status"] == "EMPTY"
    assert tokens("Don't (stop) NOW!") == ["don't", "stop", "now"]
    assert mtld([f"w{i}" for i in range(50)]) is None


def test_word_count_of_a_real_transcript(real_dir):
    """The JFK sentence of faster-whisper's fixture, counted by hand: 22 words, 14 distinct (and, so,
    my, fellow, americans, ask, not, what, your, country, can, do, for, you), 6 of them once."""
    from spear_metrics.distributional.features import lexical_features

    text = (real_dir / "faster-whisper__jfk.txt").read_text()
    out = lexical_features(text)
    assert out["lexical_total_words"] == 22
    assert out["lexical_unique_words"] == 14 and out["lexical_hapax_ratio"] == pytest.approx(6 / 22)


# ------------------------------------------------------------------------------------------ F0


def test_f0_female_above_male_on_the_same_sentence(real_dir):
    """VCTK p225 (female) and p226 (male) read the same sentence: p225's F0 lies well above
    p226's, each in its sex's range; the trimmed statistics keep their order."""
    from spear_metrics.core.pitch import pitch_track_file
    from spear_metrics.distributional.features import f0_features

    out = {}
    for spk in ("p225", "p226"):
        track, dur = pitch_track_file(str(real_dir / f"speechbrain__{spk}_002.wav"))
        out[spk] = f0_features(track.f0_hz, dur)
        o = out[spk]
        assert o["f0_status"] == "OK" and o["f0_total_duration_s"] == pytest.approx(dur)
        assert o["f0_min_raw"] <= o["f0_p10"] <= o["f0_mean_p10_p90"] <= o["f0_p90"] <= o["f0_max_raw"]
        assert o["f0_range_p10_p90"] == pytest.approx(o["f0_p90"] - o["f0_p10"])
        assert o["f0_p25"] <= o["f0_mean_p25_p75"] <= o["f0_p75"]
        assert o["f0_voiced_duration_s"] == pytest.approx(o["f0_voiced_ratio"] * dur)
    assert 140 < out["p225"]["f0_median_raw"] < 260 and 80 < out["p226"]["f0_median_raw"] < 150
    assert out["p225"]["f0_mean_p10_p90"] - out["p226"]["f0_mean_p10_p90"] > 30


def test_f0_without_voice_and_too_short():
    from spear_metrics.distributional.features import f0_features

    silent = f0_features(np.zeros(100), 1.0)
    assert silent["f0_status"] == "NO_VOICED_FRAMES" and silent["f0_voiced_ratio"] == 0.0 and "f0_mean_raw" not in silent
    low = f0_features(np.r_[np.full(3, 120.0), np.zeros(97)], 1.0)  # 3 % voiced: flagged, values kept (upstream)
    assert low["f0_status"] == "LOW_VOICED_RATIO" and low["f0_mean_raw"] == 120.0
    assert f0_features(None, 0.01)["f0_status"].startswith("ERROR")


# ------------------------------------------------------------------------------------ temporal


def test_known_pause_between_two_timed_utterances(real_dir):
    """ES2011a headset clip: two utterances of one speaker, 1.46-2.82 s (3 words) and 3.36-4.36 s
    (5 words), times from lhotse's AMI supervisions. The project's VAD finds speech at 1.4-2.9 and
    3.3-4.5 s: one stretch after merging (gap <= 1 s). With each utterance's words filling it,
    the only pause is the 0.54 s between the utterances; the rates follow from 8 words."""
    from spear_datasets.audio import load_audio
    from spear_metrics.core.vad import speech_segments
    from spear_metrics.distributional.features import TimedWord, temporal_features

    sup = json.loads((real_dir / "lhotse__ES2011a.Headset-0-40s-46s.json").read_text())["supervisions"]
    words = []
    for s in sup:
        n = len(s["text"].split())
        step = (s["end"] - s["start"]) / n
        words += [TimedWord(s["start"] + i * step, s["start"] + (i + 1) * step) for i in range(n)]
    vad = speech_segments(load_audio(real_dir / "lhotse__ES2011a.Headset-0-40s-46s.wav", sr=16000, channels="mix"))
    assert vad == [(1.4, 2.9), (3.3, 4.5)]
    out = temporal_features(words, vad, "test")
    assert out["temporal_status"] == "OK"
    stretch = 4.5 - 1.4
    pause = sup[1]["start"] - sup[0]["end"]
    assert out["temporal_pause_count"] == 1 and out["temporal_pause_total_duration_s"] == pytest.approx(pause)
    assert out["temporal_total_duration_s"] == pytest.approx(stretch)
    assert out["temporal_speech_rate_wpm"] == pytest.approx(60 * 8 / stretch)
    assert out["temporal_articulation_rate_wpm"] == pytest.approx(60 * 8 / (stretch - pause))
    assert out["temporal_pause_ratio"] == pytest.approx(pause / stretch)


def test_stretch_rules():
    """Segments merge across gaps <= 1 s; stretches >= 12.1 s are kept, else every merged one
    (SPEAR's fallback); a word outside every stretch is dropped; pauses only within a stretch."""
    from spear_metrics.distributional.features import (
        TimedWord, merge_segments, select_stretches, temporal_metrics, words_in_stretches,
    )

    merged = merge_segments([(0.0, 5.0), (5.9, 13.0), (20.0, 21.0)])
    assert merged == [(0.0, 13.0), (20.0, 21.0)]
    assert select_stretches(merged) == [(0.0, 13.0)]
    assert select_stretches([(0.0, 2.0), (4.0, 5.0)]) == [(0.0, 2.0), (4.0, 5.0)]
    words = [TimedWord(0.1, 0.4), TimedWord(0.7, 1.0), TimedWord(1.9, 2.1), TimedWord(4.2, 4.5)]
    assert [i for _, i in words_in_stretches(words, [(0.0, 2.0), (4.0, 5.0)])] == [0, 0, 1]  # 1.9-2.1 sticks out
    m = temporal_metrics(words, [(0.0, 2.0), (4.0, 5.0)])
    assert m["temporal_pause_count"] == 1 and m["temporal_pause_total_duration_s"] == pytest.approx(0.3)  # not 0.4 -> 4.2
    assert m["temporal_speech_rate_wps"] == pytest.approx(3 / 3.0)


# ----------------------------------------------------------------------------- runs (shared data)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, real_dir):
    """The hand-over samples of the three conversations scored for the human answers, the
    fixed-delay reference (0.7 s) and the silence reference, without ASR; the references also
    with human_run (their human_likeness_auroc)."""
    import _distrib_samples as S
    from spear_metrics.core.scoring import run_score

    root = tmp_path_factory.mktemp("distrib")
    human = S.build_human(root)
    metrics = "interruptions,explainable_features,distributional"
    out = {"root": root, "human_csv": human}
    out["human"] = root / "res_human"
    run_score(human, metrics, out["human"], options={"asr": "none"}, progress=False, n_resamples=50)
    for name, csv in (("fixed-delay", S.fixed_delay(human, 0.7)), ("silence", S.silence(human))):
        out[name] = root / f"res_{name}"
        out[f"{name}_summary"] = run_score(csv, metrics, out[name], options={"asr": "none", "human_run": str(out["human"])},
                                           progress=False, n_resamples=50)
    return out


def test_runs_carry_the_features_and_validate(runs):
    """Every scored human answer has its F0 columns and sources; the summary is the one its rows
    give (results validation, as push-results checks it)."""
    from dataclasses import asdict

    from spear_datasets.schema import parse_row, read_metadata
    from spear_metrics.results import validate_run
    from spear_metrics.results.validate import read_run_files

    meta = [asdict(parse_row(r)) for r in read_metadata(runs["human_csv"])]

    def with_meta(rows):  # the metadata columns push-results --metadata adds (explainable's F0 groups need them)
        return [{**{k: v for k, v in m.items() if k not in ("audio_path", "answer_audio_path")}, **r} for m, r in zip(meta, rows)]

    summary, rows = read_run_files(runs["human"])
    rows = with_meta(rows)
    validate_run(summary, rows)
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) == summary["n_samples"] >= 20
    assert all(r["distrib_text_source"] in ("transcript_answer", "none") for r in ok)
    assert all(r["temporal_alignment_source"] == "estimated_from_metadata" for r in ok)
    voiced = [r for r in ok if r["f0_status"] in ("OK", "LOW_VOICED_RATIO")]
    assert len(voiced) >= 0.8 * len(ok) and all(r["f0_mean_p10_p90"] > 60 for r in voiced)
    assert summary["average_naturalness_score"] is None and "fit-baseline" in summary["average_naturalness_score_note"]
    assert summary["human_likeness_auroc"] is None and "human_run" in summary["human_likeness_note"]
    for name in ("fixed-delay", "silence"):
        s, r = read_run_files(runs[name])
        validate_run(s, with_meta(r))


def test_fixed_delay_told_apart_by_timing_alone(runs):
    """Same audio, onset moved to 0.7 s after the question end: every answer feature is equal for
    the pair of each question and left out, so the classifier has the timing values only; it
    tells the reference from the human answers well above chance."""
    s = runs["fixed-delay_summary"]
    feats = s["human_likeness_features"]
    assert feats and set(feats) <= {"latency_ms", "interrupted_time_ms", "interruption", "answer_speech_after_skip"}
    assert "latency_ms" in feats
    assert s["human_likeness_dropped"]["f0_median_raw"] == "equal for the model and the human answer of every question"
    lo, hi = s["human_likeness_auroc_ci95"]
    assert s["human_likeness_auroc"] > 0.75 and lo > 0.5, (s["human_likeness_auroc"], lo, hi)
    assert next(iter(s["human_likeness_contributions"])) == "latency_ms"
    assert s["human_likeness_n_conversations"] == 3 and s["human_likeness_n_folds"] == 3


def test_silence_is_told_apart_almost_always(runs):
    s = runs["silence_summary"]
    assert s["human_likeness_auroc"] >= 0.95 and s["human_likeness_auroc_ci95"][0] >= 0.8


def test_human_answers_against_themselves(runs):
    """Two halves of the human answers (random within each conversation): the classifier cannot
    tell them apart, its interval contains 0.5; folds never put a conversation on both sides."""
    from spear_datasets.schema import read_metadata
    from spear_metrics.distributional.likeness import _matrix, cross_validated, human_likeness
    from spear_metrics.reports.runs import input_id, load_run

    rows = load_run(runs["human"]).ok_rows
    conv = {input_id({"audio_path": r["audio_path"]}): r["conversation_id"] for r in read_metadata(runs["human_csv"])}
    half = np.random.default_rng(1).permutation(len(rows)) % 2 == 0
    a = [r for r, m in zip(rows, half) if m]
    b = [r for r, m in zip(rows, half) if not m]
    ga, gb = [conv[input_id(r)] for r in a], [conv[input_id(r)] for r in b]
    res = human_likeness(a, b, model_groups=ga, human_groups=gb, n_resamples=60, seed=0)
    assert res.auroc is not None and res.ci95[0] <= 0.5 <= res.ci95[1], (res.auroc, res.ci95)
    x = np.vstack([_matrix(a, res.features), _matrix(b, res.features)])
    y = np.r_[np.zeros(len(a), int), np.ones(len(b), int)]
    g = np.array(ga + gb, dtype=object)
    _, _, folds = cross_validated(x, y, g, seed=0)
    for tr, te in folds:
        assert not set(g[tr]) & set(g[te])


def test_too_few_rows_is_null_with_the_rule():
    from spear_metrics.distributional.likeness import MIN_PER_SIDE, human_likeness

    rows = [{"latency_ms": float(i)} for i in range(6)]
    res = human_likeness(rows[:3], rows[3:], model_groups=["a"] * 3, human_groups=["b"] * 3)
    assert res.auroc is None and res.ci95 is None
    assert "3 model and 3 human answers" in res.note and f">= {MIN_PER_SIDE} answers on each side" in res.note
    many = [{"latency_ms": float(i % 7)} for i in range(24)]
    one = human_likeness(many[:12], many[12:], model_groups=["c"] * 12, human_groups=["c"] * 12)
    assert one.auroc is None and "1 conversation" in one.note


# ------------------------------------------------------------------------------------ baselines


@pytest.fixture(scope="module")
def fitted(tmp_path_factory, real_dir):
    """Dev: conversations sample + dev00; test: seriously. The "model" speaks the human answers
    1.3x faster and higher (resampled: F0 x 1.3). Baseline fitted with `spearbench fit-baseline`."""
    import _distrib_samples as S
    from spear_metrics.cli import main
    from spear_metrics.core.scoring import run_score

    base = tmp_path_factory.mktemp("baseline")
    out = {}
    for split, names in (("dev", ("sample", "dev00")), ("test", ("seriously",))):
        root = base / split
        human = S.build_human(root, names)
        model = S.pitched(human, 1.3)
        for name, csv in (("human", human), ("model", model)):
            out[f"{split}_{name}"] = root / f"res_{name}"
            run_score(csv, "distributional", out[f"{split}_{name}"], options={"asr": "none"}, progress=False, n_resamples=0)
        out[f"{split}_model_csv"] = model
    assert main(["fit-baseline", "--model-run", str(out["dev_model"]), "--human-run", str(out["dev_human"])]) == 0
    out["baseline"] = out["dev_model"] / "distributional_baseline.json"
    out["summary"] = run_score(out["test_model_csv"], "distributional", base / "test" / "scored",
                               options={"asr": "none", "baseline": str(out["baseline"]), "human_run": str(out["test_human"])},
                               progress=False, n_resamples=50)
    out["scored"] = base / "test" / "scored"
    return out


def test_baseline_is_deterministic_and_upstream_shaped(fitted, tmp_path):
    from spear_metrics.cli import main
    from spear_metrics.distributional.baseline import DEFAULT_IGNORED, read_baseline

    again = tmp_path / "again.json"
    assert main(["fit-baseline", "--model-run", str(fitted["dev_model"]), "--human-run", str(fitted["dev_human"]),
                 "--out", str(again)]) == 0
    assert again.read_bytes() == fitted["baseline"].read_bytes()
    b, sha = read_baseline(fitted["baseline"])
    t = b["tables"]["all"]
    assert b["ignored_features"] == sorted(DEFAULT_IGNORED) and not set(DEFAULT_IGNORED) & set(t["features"])
    assert "f0_median_raw" in t["features"] and t["stage2"]["clusters"]
    assert fitted["summary"]["distributional_baseline"]["sha256"] == sha


def test_lda_probability_is_sklearns(fitted):
    """P(human) from the stored coefficient equals ``predict_proba`` of the discriminant sklearn
    fits on the same real dev values, bit for bit; ``predict`` too."""
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    from spear_metrics.distributional.baseline import column, fit_feature, p_human, predict_human
    from spear_metrics.reports.runs import load_run

    h = column(load_run(fitted["dev_human"]).ok_rows, "f0_median_raw")
    m = column(load_run(fitted["dev_model"]).ok_rows, "f0_median_raw")
    fit = fit_feature(h, m)
    hh, mm = h[np.isfinite(h)], m[np.isfinite(m)]
    x = np.r_[hh, mm]
    lda = LinearDiscriminantAnalysis().fit(x.reshape(-1, 1), np.r_[np.ones(len(hh)), np.zeros(len(mm))])
    assert np.array_equal(p_human(fit, x), lda.predict_proba(x.reshape(-1, 1))[:, 1])
    assert np.array_equal(predict_human(fit, x), lda.predict(x.reshape(-1, 1)).astype(int))
    assert fit["dev_model_mean"] > fit["dev_original_mean"]  # the model speaks higher
    assert fit_feature(np.array([1.0, 1.0]), np.array([1.0, 1.0])) == "insufficient_nonconstant_dev_values"


def test_test_split_scores_tell_the_higher_voice(fitted):
    """On the held-out conversation: the F0 discriminants find the 1.3x voice (AUROC well above
    0.5, intervals present), its answers' mean P(human) on F0 is below one half, each answer
    carries its naturalness scores and the stage-2 general feature."""
    import json

    from spear_metrics.reports.runs import load_run

    s = fitted["summary"]
    assert s["f0_median_raw__auroc__all"] > 0.75 and s["f0_median_raw__auroc__all_ci95"][0] > 0.5
    assert s["f0_median_raw__naturalness_score"] < 0.5
    # the naturalness mean is over answers of ONE conversation: the conversation bootstrap gives it no
    # interval, and says why (docs/statistics.md); the AUROC resamples questions (folds by conversation)
    assert 0 < s["average_naturalness_score"] < 1 and s["average_naturalness_score_ci95"] is None
    assert "conversation" in json.dumps(s["bootstrap"])
    assert s["f0_median_raw__auroc__all_n"] == 2 * s["average_naturalness_score_n"]
    rows = load_run(fitted["scored"]).ok_rows
    assert all(0 <= r["f0_median_raw__naturalness_score"] <= 1 for r in rows if r.get("f0_median_raw") is not None)
    assert all(isinstance(r["general_explainable_feature_rho0p8"], float) for r in rows)
    assert s["distributional_clusters"]["all"][0]["name"] == "corr_cluster_001_rho0p8"


def test_bad_baseline_is_refused_in_one_line(tmp_path):
    from spear_metrics.core.options import OptionError
    from spear_metrics.core.registry import load_dimension

    bad = tmp_path / "b.json"
    bad.write_text('{"format": "other"}')
    with pytest.raises(OptionError, match="not a spearbench/distributional-baseline file"):
        load_dimension("distributional", asr="none", baseline=str(bad))
    with pytest.raises(OptionError, match="asr must be none or an ASR backend"):
        load_dimension("distributional", asr="nope")


# ------------------------------------------------------------------------------ report and Space


def test_report_section_and_space_column(runs, tmp_path):
    from spear_metrics.reports.html import build_report
    from spear_metrics.reports.runs import load_run

    run, human = load_run(runs["fixed-delay"], name="fixed-delay"), load_run(runs["human"], name="human")
    page = build_report(run, tmp_path / "report", human=human, n_resamples=20).read_text()
    assert 'id="dim-distributional"' in page and "human_likeness_auroc" in page
    assert f"{runs['fixed-delay_summary']['human_likeness_auroc']:.3f}" in page
    assert "latency_ms" in page.split('id="dim-distributional"')[1]

    space = pytest.importorskip("spear_metrics.space.tables")
    cols = [c.name for c in space.columns()]
    assert cols[-1] == "human_likeness_auroc"
    cells = space.project_cells(runs["fixed-delay_summary"])
    assert cells["human_likeness_auroc"] == runs["fixed-delay_summary"]["human_likeness_auroc"]
    assert cells["human_likeness_auroc_ci95"] == runs["fixed-delay_summary"]["human_likeness_auroc_ci95"]


def test_evaluate_module_scores_a_real_answer(real_dir, monkeypatch):
    """``evaluate.load`` of the module folder: a real answer with its transcript, no ASR."""
    import evaluate

    from conftest import REPO

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    m = evaluate.load(str(REPO / "spear_metrics" / "distributional"))
    q = str(real_dir / "DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav")
    a = str(real_dir / "speechbrain__p225_002.wav")
    text = (real_dir / "speechbrain__p225_002.txt").read_text()
    r = m.compute(audio_path=[q], answer_audio_path=[a], context_end_time=[10.0], question_end_time=[12.0],
                  answer_start_time=[0.5], transcript_answer=[f"p225: {text}"], speakers=["x|p225"], asr="none")
    row = r["per_sample"][0]
    assert r["n_scored"] == 1 and row["lexical_total_words"] == 11 and row["distrib_text_source"] == "transcript_answer"
    assert 140 < row["f0_median_raw"] < 260 and r["average_naturalness_score"] is None


@pytest.mark.slow
def test_asr_word_times_on_a_real_answer(real_dir):
    """The JFK clip as an answer, the packaged Whisper base with word times: the text has the
    transcript's 22 words; the two pauses of at least 0.2 s are the two commas ("Americans, ask",
    "you, ask"); "And" starts before the VAD's first speech segment and is not inside a stretch,
    so the rates count 21 words."""
    pytest.importorskip("faster_whisper")
    from spear_metrics.core.models import ModelUnavailableError
    from spear_metrics.core.scoring import score_columns

    q = str(real_dir / "DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav")
    try:
        r = score_columns("distributional", {
            "audio_path": [q], "answer_audio_path": [str(real_dir / "faster-whisper__jfk.flac")],
            "context_end_time": [10.0], "question_end_time": [12.0], "answer_start_time": [0.3]},
            asr="embedded")
    except ModelUnavailableError as e:
        pytest.skip(str(e))
    row = r["per_sample"][0]
    assert row["distrib_text_source"] == "asr:faster-whisper-base"
    assert row["temporal_alignment_source"] == "asr_word_timestamps:faster-whisper-base"
    assert row["lexical_total_words"] == 22
    assert row["temporal_pause_count"] == 2 and 0.4 < row["temporal_pause_mean_duration_s"] < 0.7
    n_in = row["temporal_speech_rate_wps"] * row["temporal_total_duration_s"]
    assert n_in == pytest.approx(21)
    assert row["temporal_articulation_rate_wps"] * row["temporal_speech_active_time_s"] == pytest.approx(21)


def test_lexical_text_is_the_asr_first_as_upstream(real_dir, monkeypatch):
    """Upstream's ``feature_text`` reads the ASR text of its preprocessed answer first and the
    metadata's ``transcript_answer`` only when that text is empty: the default does the same
    (an ASR that hears nothing falls back to the transcript instead of an empty text)."""
    import spear_metrics.core.asr as asr_mod
    from spear_metrics.core.asr import Transcript, Word
    from spear_metrics.core.scoring import score_columns

    heard = {"text": " Hello there, general Kenobi. "}

    class FakeASR:
        name = "fake-asr"

        def transcribe(self, waves, sr, word_timestamps=False):
            words = [Word(w, 0.2 + 0.4 * i, 0.5 + 0.4 * i) for i, w in enumerate(heard["text"].split())]
            return [Transcript(heard["text"], words, "fake-asr") for _ in waves]

        def describe(self):
            return "fake"

    monkeypatch.setattr(asr_mod, "load_asr", lambda name, **kw: FakeASR())
    q = str(real_dir / "DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav")
    cols = {"audio_path": [q], "answer_audio_path": [str(real_dir / "speechbrain__p225_002.wav")],
            "context_end_time": [10.0], "question_end_time": [12.0], "answer_start_time": [0.5],
            "transcript_answer": ["p225: one two three four five six"], "speakers": ["x|p225"]}
    row = score_columns("distributional", cols, asr="embedded")["per_sample"][0]
    assert row["distrib_text_source"] == "asr:fake-asr" and row["lexical_total_words"] == 4
    row = score_columns("distributional", cols, asr="embedded", text_source="transcript_answer")["per_sample"][0]
    assert row["distrib_text_source"] == "transcript_answer" and row["lexical_total_words"] == 6
    heard["text"] = "  "
    row = score_columns("distributional", cols, asr="embedded")["per_sample"][0]
    assert row["distrib_text_source"] == "transcript_answer" and row["lexical_total_words"] == 6


def test_likeness_reads_no_side_marker_and_is_deterministic():
    """A value that is one number on every model answer and another on every human answer (a
    run's sample rate, an id) would give AUROC 1 without saying anything of the answers: it is
    left out with its reason, and answers drawn from one distribution stay near 0.5. Question-side
    values equal for both answers of each question are left out too. Same inputs, same value."""
    from spear_metrics.distributional.likeness import human_likeness

    rng = np.random.default_rng(7)
    n = 40
    conv = [f"c{i % 8}" for i in range(n)]
    q_end = rng.uniform(1, 9, n)  # question-side: the same for both answers of a question
    model = [{"latency_ms": float(rng.normal(600, 150)), "answer_sr": 24000, "q_s": float(q_end[i])} for i in range(n)]
    human = [{"latency_ms": float(rng.normal(600, 150)), "answer_sr": 16000, "q_s": float(q_end[i])} for i in range(n)]
    units = list(range(n))
    kw = dict(model_groups=conv, human_groups=conv, model_units=units, human_units=units, n_resamples=40, seed=3)
    res = human_likeness(model, human, **kw)
    assert res.features == ["latency_ms"]
    assert "mark of the run" in res.dropped["answer_sr"] and "every question" in res.dropped["q_s"]
    assert res.auroc is not None and res.auroc < 0.75 and res.ci95[0] <= 0.5 <= res.ci95[1], (res.auroc, res.ci95)
    again = human_likeness(model, human, **kw)
    assert (again.auroc, again.ci95, again.contributions) == (res.auroc, res.ci95, res.contributions)
    # the marker alone, forced in, is read perfectly: what leaving it out prevents
    forced = human_likeness(model, human, features=["answer_sr"], **{**kw, "n_resamples": 0})
    assert forced.auroc == 1.0


def test_fit_baseline_on_too_few_rows_says_why(tmp_path, capsys):
    """One dev answer a side: no discriminant can be fitted; fit-baseline writes nothing and says
    why in one line (exit 2) instead of writing a baseline without a feature."""
    import json

    from spear_metrics.cli import main

    for side, f0 in (("human", 120.0), ("model", 180.0)):
        d = tmp_path / side
        d.mkdir()
        row = {"row": 0, "audio_path": "clip.wav", "answer_audio_path": "ans.wav", "f0_mean_p10_p90": f0,
               "lexical_ttr": 0.8, "status": "ok", "error": None}
        (d / "per_sample.jsonl").write_text(json.dumps(row) + "\n")
        (d / "summary.json").write_text(json.dumps({"metrics": ["distributional"], "n_samples": 1, "n_scored": 1}))
    rc = main(["fit-baseline", "--model-run", str(tmp_path / "model"), "--human-run", str(tmp_path / "human")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "no feature could be fitted" in err[0] and "1 human and 1 model" in err[0]
    assert not (tmp_path / "model" / "distributional_baseline.json").exists()


def _upstream_pos_restated(text: str, nlp) -> dict:
    """Upstream's POS columns re-stated from reading ``extract_features.py`` (``iter_text_tokens``:
    ``re.findall(r"\\b[\\w']+\\b")`` + ``normalize_word``; ``compute_lexical_features``: tags of
    ``nlp(" ".join(tokens))``, content = pos_ in NOUN/VERB/ADJ/ADV, 0 when nothing is tagged)."""
    import re

    toks = [t.lower().strip(".,!?;:\"()[]{}") for t in re.findall(r"\b[\w']+\b", text)]
    toks = [t for t in toks if t]
    tags = [t.pos_ for t in nlp(" ".join(toks))]
    content = sum(p in {"NOUN", "VERB", "ADJ", "ADV"} for p in tags) if any(tags) else 0
    return {"lexical_content_word_count": content, "lexical_function_word_count": len(toks) - content,
            "lexical_density": content / len(toks)}


def test_pos_features_side_by_side_with_upstream(real_dir):
    """The three POS features equal upstream's rule on real transcripts, with en_core_web_sm 3.8.0
    loaded as upstream loads it (ner and parser disabled), the package found by name."""
    import json

    import spacy

    from spear_metrics.distributional.features import POS_KEYS, lexical_features
    from spear_metrics.distributional.pos import CONTENT_SHA256, load_tagger

    tagger, label, why = load_tagger()
    assert why is None and label.split()[1] == "3.8.0", why  # installed by scripts/setup.sh (sha256-pinned)
    upstream_nlp = spacy.load(label.split()[0], disable=["ner", "parser"])
    texts = [t["text"] for t in json.loads(
        (real_dir / "DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.json").read_text())["turns"]]
    texts += [(real_dir / "faster-whisper__jfk.txt").read_text(), "I don't know, y'know? It's 5 o'clock."]
    for text in texts:
        got = lexical_features(text, tagger)
        want = _upstream_pos_restated(text, upstream_nlp)
        assert {k: got[k] for k in POS_KEYS} == pytest.approx(want), text
        assert got["lexical_content_word_count"] + got["lexical_function_word_count"] == got["lexical_total_words"]
    assert len(CONTENT_SHA256) == 4


def test_pos_features_without_the_model_say_so(monkeypatch):
    """No tagger: the POS keys are null (never upstream's spacy.blank zeros) and the reason is written."""
    from spear_metrics.distributional import definition, pos
    from spear_metrics.distributional.features import POS_KEYS, lexical_features

    out = lexical_features("the cat sat on the mat", None)
    assert all(out[k] is None for k in POS_KEYS) and out["lexical_total_words"] == 6
    monkeypatch.setattr(pos, "_CACHE", {"nlp": (None, None, "needs spaCy's en_core_web_sm 3.8.0 (test)")})
    monkeypatch.setattr(definition, "load_tagger", pos.load_tagger)
    d = definition.Distributional(asr="none")
    assert d.models()["distributional:pos_tagger"].startswith("none (needs spaCy")
    from pathlib import Path

    assert pos.check_model_dir(Path("/nonexistent")) == "tok2vec/model missing in nonexistent"
