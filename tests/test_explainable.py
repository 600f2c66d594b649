"""Explainable features on real speech: the VCTK pair (same sentence, female p225 / male p226)."""

import numpy as np
import pytest

from spear_datasets.audio import load_audio
from spear_metrics.core.pitch import pitch_track
from spear_metrics.core.runner import score_columns
from spear_metrics.explainable_features.definition import normalized_f0_std_avg


def test_female_pitch_above_male(real_dir):
    f = pitch_track(load_audio(real_dir / "speechbrain__p225_002.wav", channels="mix"), 16000).stats()
    m = pitch_track(load_audio(real_dir / "speechbrain__p226_002.wav", channels="mix"), 16000).stats()
    # adult female speaking F0 ~165-255 Hz, adult male ~85-155 Hz
    assert 150 < f["f0_median_hz"] < 280
    assert 80 < m["f0_median_hz"] < 170
    assert f["f0_median_hz"] > 1.25 * m["f0_median_hz"]  # measured here: 167 vs 123 Hz
    assert f["f0_min_hz"] <= f["f0_p10_hz"] <= f["f0_p25_hz"] <= f["f0_median_hz"] <= f["f0_p75_hz"] <= f["f0_p90_hz"] <= f["f0_max_hz"]


def test_silence_has_no_voiced_frames():
    t = pitch_track(np.zeros(16000, np.float32), 16000)
    assert t.voiced_ratio == 0.0 and t.stats()["f0_median_hz"] is None
    assert pitch_track(np.zeros(100, np.float32), 16000).voiced_ratio is None  # shorter than one window


def test_normalized_f0_std_hand_computed():
    stats = [
        {**{k: v for k, v in zip(("f0_min_hz", "f0_p10_hz", "f0_p25_hz", "f0_median_hz", "f0_p75_hz", "f0_p90_hz", "f0_max_hz"), [100.0] * 7)}, "f0_mean_hz": 100.0},
        {**{k: v for k, v in zip(("f0_min_hz", "f0_p10_hz", "f0_p25_hz", "f0_median_hz", "f0_p75_hz", "f0_p90_hz", "f0_max_hz"), [300.0] * 7)}, "f0_mean_hz": 300.0},
        {**{k: v for k, v in zip(("f0_min_hz", "f0_p10_hz", "f0_p25_hz", "f0_median_hz", "f0_p75_hz", "f0_p90_hz", "f0_max_hz"), [50.0] * 7)}, "f0_mean_hz": 50.0},
    ]
    # questioner A: mean F0 of its answers (100+300)/2 = 200 -> 0.5, 1.5; questioner B: 50/50 -> 1.0
    # std ddof1 of [0.5, 1.5, 1.0] = 0.5 for each of the 7 features
    assert normalized_f0_std_avg(["A", "A", "B"], stats) == pytest.approx(0.5)
    assert normalized_f0_std_avg(["A"], stats[:1]) is None


def test_module_values_on_real_clips(real_dir):
    paths = [str(real_dir / "speechbrain__p225_002.wav"), str(real_dir / "speechbrain__p226_002.wav")]
    # any input clip long enough: the answers' own files are what is measured
    cols = dict(audio_path=[str(real_dir / "pyannote-audio__sample.wav"), str(real_dir / "pyannote-audio__dev00.wav")],
                answer_audio_path=paths, context_end_time=[1.0, 1.0], question_end_time=[2.0, 2.0], answer_start_time=[None, None],
                transcript_question=["P0001A: are you?", "P0002A: is it?"])
    r = score_columns("explainable_features", cols)
    durations = [s["explainable_duration_s"] for s in r["per_sample"]]
    assert durations == pytest.approx([4.06, 4.74], abs=0.01)  # file lengths (SOURCES.md)
    assert r["explainable_duration_s"] == pytest.approx(4.40, abs=0.01)
    assert 0.3 < r["explainable_voiced_ratio"] < 0.9
    # each answer is its questioner's only answer: every normalised statistic is relative to its own mean
    assert r["explainable_normalized_f0_std_avg"] is not None and r["explainable_normalized_f0_std_avg"] < 0.5
