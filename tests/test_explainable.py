"""Explainable features on real speech: the VCTK pair (same sentence, female p225 / male p226)."""

import numpy as np
import pytest

from spear_datasets.audio import load_audio
from spear_metrics.core.pitch import pitch_track
from spear_metrics.core.scoring import score_columns
from spear_metrics.explainable_features.definition import normalized_f0_std_avg

from conftest import STEREO_DIALOGUE as STEREO


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
    # one value per feature: upstream counts its std as 0.0 (pandas path: len 1 -> 0.0)
    assert normalized_f0_std_avg(["A"], stats[:1]) == 0.0
    assert normalized_f0_std_avg(["A"], [{k: None for k in stats[0]}]) is None
    # the normalisation is per split/subset table: the same questioner A in two subsets has two
    # means (200 in improvised -> 0.5, 1.5; 50 in naturalistic -> 1.0), not one pooled mean of 150
    assert normalized_f0_std_avg(["A", "A", "A"], stats, ["improvised", "improvised", "naturalistic"]) == pytest.approx(0.5)
    pooled = np.std([100 / 150, 300 / 150, 50 / 150], ddof=1)
    assert normalized_f0_std_avg(["A", "A", "A"], stats) == pytest.approx(pooled)


def test_praat_reads_the_file_at_its_own_rate_and_channels(real_dir):
    """SPEAR runs parselmouth.Sound(path): 48 kHz p225 is analysed at 48 kHz (same track as the
    decoded 48 kHz samples, no resampling); the 44.1 kHz stereo jfk.flac keeps both channels."""
    from spear_datasets.audio import decode
    from spear_metrics.core.pitch import pitch_track_file

    track, dur = pitch_track_file(str(real_dir / "speechbrain__p225_002.wav"))
    wav, sr = decode(real_dir / "speechbrain__p225_002.wav")
    assert sr == 48000 and dur == pytest.approx(wav.shape[1] / 48000)
    native = pitch_track(wav, sr)
    assert np.allclose(track.f0_hz, native.f0_hz) and track.time_step_s == pytest.approx(0.01)
    at16k = pitch_track(load_audio(real_dir / "speechbrain__p225_002.wav", channels="mix"), 16000)
    assert not np.array_equal(at16k.f0_hz, track.f0_hz)  # resampling first would change the track
    jfk, jdur = pitch_track_file(str(real_dir / "faster-whisper__jfk.flac"))
    jwav, jsr = decode(real_dir / "faster-whisper__jfk.flac")
    assert jsr == 44100 and jwav.shape[0] == 2 and jdur == pytest.approx(jwav.shape[1] / 44100)
    assert np.allclose(jfk.f0_hz, pitch_track(jwav, jsr).f0_hz)


def test_module_values_on_real_clips(real_dir):
    paths = [str(real_dir / "speechbrain__p225_002.wav"), str(real_dir / "speechbrain__p226_002.wav")]
    # any stereo input clip long enough: the answers' own files are what is measured
    cols = dict(audio_path=[str(real_dir / "DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav"),
                            str(real_dir / "faster-whisper__stereo_diarization.wav")],
                answer_audio_path=paths, context_end_time=[1.0, 1.0], question_end_time=[2.0, 2.0], answer_start_time=[None, None],
                transcript_question=["P0001A: are you?", "P0002A: is it?"])
    r = score_columns("explainable_features", cols)
    durations = [s["explainable_duration_s"] for s in r["per_sample"]]
    assert durations == pytest.approx([4.06, 4.74], abs=0.01)  # file lengths (SOURCES.md)
    assert r["explainable_duration_s"] == pytest.approx(4.40, abs=0.01)
    assert 0.3 < r["explainable_voiced_ratio"] < 0.9
    # each answer is its questioner's only answer: every normalised statistic is relative to its own mean
    assert r["explainable_normalized_f0_std_avg"] is not None and r["explainable_normalized_f0_std_avg"] < 0.5


def test_decoded_16_bit_wav_gives_praats_own_track(real_dir, tmp_path):
    """The human answers' format (16 kHz 16-bit stereo, the answerer's channel on both): Praat on
    the decoded samples, one channel, gives the same F0 frames bit for bit as Praat reading the
    file; a stereo file with two different speakers keeps both channels, also bit for bit."""
    import soundfile as sf

    from spear_datasets.audio import decode
    from spear_metrics.core.pitch import pitch_track_file

    x = load_audio(real_dir / "speechbrain__p225_002.wav", channels="mix")[0]  # 16 kHz, female speaker
    dup = tmp_path / "answer_both_channels.wav"
    sf.write(str(dup), np.stack([x, x]).T, 16000, subtype="PCM_16")
    stereo = real_dir / "DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav"  # two speakers
    for path in (dup, stereo):
        ref, ref_dur = pitch_track_file(str(path))  # upstream: parselmouth.Sound(path)
        wav, sr = decode(path)
        got, dur = pitch_track_file(str(path), decoded=(wav, sr))
        np.testing.assert_array_equal(got.f0_hz, ref.f0_hz)
        assert dur == ref_dur and got.time_step_s == ref.time_step_s
        assert (got.f0_hz > 0).mean() > 0.2  # real voiced speech is compared, not an empty track
    assert np.median(pitch_track_file(str(dup))[0].voiced) > 165  # p225 is a female speaker


def test_decoded_24_bit_flac_and_float_wav_give_praats_own_track(real_dir, tmp_path, monkeypatch):
    """Praat gets the loader's samples for 24-bit FLAC (jfk, 44.1 kHz stereo), float WAV (dev00)
    and the same speech written as 16/24-bit FLAC, 24-bit and float WAV (WAVEX too): the values
    Praat reads from the file bit for bit, so the same F0 frames; a 32-bit integer WAV is not one
    of those formats (float32 keeps 24 of its bits) and Praat reads that file itself."""
    import parselmouth
    import soundfile as sf

    from spear_datasets.audio import decode
    from spear_metrics.core import pitch

    x, sr = sf.read(str(real_dir / "speechbrain__p226_002.wav"), dtype="float64")
    paths = [real_dir / "faster-whisper__jfk.flac", real_dir / "pyannote-audio__dev00.wav"]
    for fmt, sub in (("FLAC", "PCM_16"), ("FLAC", "PCM_24"), ("WAV", "PCM_24"), ("WAV", "FLOAT"), ("WAVEX", "FLOAT")):
        paths.append(tmp_path / f"{fmt}_{sub}.{'flac' if fmt == 'FLAC' else 'wav'}")
        sf.write(str(paths[-1]), np.stack([x, x]).T if fmt == "WAVEX" else x, sr, subtype=sub, format=fmt)
    for path in paths:
        info = sf.info(str(path))
        assert (info.format, info.subtype) in pitch.PRAAT_EXACT_FORMATS, path
        wav, rate = decode(path)
        np.testing.assert_array_equal(parselmouth.Sound(str(path)).values, wav.astype(np.float64))
        ref, ref_dur = pitch.pitch_track_file(str(path))
        calls = []
        real_sound = parselmouth.Sound

        def no_file_read(*a, **k):
            calls.append(a)
            assert not isinstance(a[0], str), "Praat read the file again"
            return real_sound(*a, **k)

        with monkeypatch.context() as m:
            m.setattr(parselmouth, "Sound", no_file_read)
            got, dur = pitch.pitch_track_file(str(path), decoded=(wav, rate))
        assert calls  # Praat got the decoded samples
        np.testing.assert_array_equal(got.f0_hz, ref.f0_hz)
        assert dur == ref_dur and (got.f0_hz > 0).mean() > 0.2, path
    int32 = tmp_path / "int32.wav"
    sf.write(str(int32), x * 0.9, sr, subtype="PCM_32")
    assert not pitch._praat_reads_as_decoded(str(int32))


def test_nan_answer_fails_its_row_with_explainable_features_alone(real_dir, tmp_path):
    """Praat would read a float WAV holding NaN; the loader's checks run first and fail the row."""
    import soundfile as sf

    x = load_audio(real_dir / "speechbrain__p226_002.wav", channels="mix")[0]
    bad = x.copy()
    bad[1000] = np.nan
    sf.write(str(tmp_path / "nan.wav"), bad, 16000, subtype="FLOAT")
    good = str(real_dir / "speechbrain__p225_002.wav")
    clip = str(real_dir / "DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav")
    cols = dict(audio_path=[clip, str(real_dir / "faster-whisper__stereo_diarization.wav")],
                answer_audio_path=[str(tmp_path / "nan.wav"), good], context_end_time=[1.0, 1.0],
                question_end_time=[2.0, 2.0], answer_start_time=[None, None],
                transcript_question=["P0001A: are you?", "P0002A: is it?"])
    r = score_columns("explainable_features", cols)
    first, second = r["per_sample"]
    assert first["status"] == "failed" and "NaN" in first["error"]
    assert second["status"] == "ok" and second["explainable_duration_s"] == pytest.approx(4.06, abs=0.01)


def test_a_row_failed_by_one_dimension_keeps_no_values_of_another(real_dir, tmp_path):
    """An input clip holding inf fails interruptions (it reads the clip); explainable_features,
    scored beside it, only reads the answer and succeeds: its values must not stay on the failed
    row's line. The good row beside it keeps all of its values."""
    import soundfile as sf

    from spear_metrics.core.registry import load_dimensions
    from spear_metrics.core.scoring import prepare_rows, score_samples

    clip = load_audio(STEREO, channels="keep")
    clip[0, 500] = np.inf
    sf.write(str(tmp_path / "inf_clip.wav"), clip.T, 16000, subtype="FLOAT")
    answer = str(real_dir / "speechbrain__p225_002.wav")
    raw = [dict(audio_path=p, answer_audio_path=answer, context_end_time="1.0", question_end_time="2.0",
                answer_start_time="0.5", transcript_question="P0001A: are you?")
           for p in (str(tmp_path / "inf_clip.wav"), str(STEREO))]
    prep = prepare_rows(raw, ".")
    bad, good = score_samples(load_dimensions(["interruptions", "explainable_features"], {}), prep.samples)
    assert bad.status == "failed" and bad.error.startswith("interruptions:") and "inf" in bad.error
    assert bad.values == {}
    assert good.status == "ok" and good.values["explainable_duration_s"] == pytest.approx(4.06, abs=0.01)
    assert good.values["latency_ms"] is not None
