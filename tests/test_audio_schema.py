import math
import os
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from spear_datasets.audio import AudioError, audio_info, decode, load_audio, write_wav
from spear_datasets.schema import (
    SPEAR_COLUMNS,
    MetadataError,
    RowError,
    parse_row,
    read_metadata,
    resolve_path,
    strip_speaker_tags,
)

from conftest import STEREO_DIALOGUE, REFERENCE


def test_flac_44k_24bit_resampled_to_16k(real_dir):
    wav, sr = decode(real_dir / "faster-whisper__jfk.flac")
    assert sr == 44100 and wav.shape[0] == 2
    x = load_audio(real_dir / "faster-whisper__jfk.flac", channels="mix")
    assert x.shape[0] == 1
    assert x.shape[1] / 16000 == pytest.approx(wav.shape[1] / 44100, abs=1e-3)
    assert x.shape[1] / 16000 == pytest.approx(11.0, abs=0.05)


def test_stereo_speakers_stay_apart(real_dir):
    x = load_audio(STEREO_DIALOGUE)
    assert x.shape == (2, 31 * 16000)
    # 0.78-15.48 s FEE016 holds the floor on channel 0: far more energy there than on channel 1
    seg = slice(int(2 * 16000), int(5 * 16000))
    assert np.sqrt(np.mean(x[0, seg] ** 2)) > 5 * np.sqrt(np.mean(x[1, seg] ** 2))
    # channel pick and mix
    assert np.array_equal(load_audio(STEREO_DIALOGUE, channels=1)[0], x[1])
    assert np.allclose(load_audio(STEREO_DIALOGUE, channels="mix")[0], x.mean(0))


def test_16_bit_wav_decodes_to_libsndfiles_own_floats(real_dir):
    """16-bit WAVs (the fixtures, the dataset's clips) take an int16 read and one numpy pass; the
    floats are libsndfile's own float32 read, bit for bit, for stereo and mono."""
    for name in ("DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav", "pyannote-audio__sample.wav"):
        path = real_dir / name
        assert sf.info(str(path)).subtype == "PCM_16"
        wav, sr = decode(path)
        ref = sf.read(str(path), dtype="float32", always_2d=True)[0].T
        assert wav.dtype == np.float32 and wav.flags.c_contiguous and wav.shape == ref.shape
        np.testing.assert_array_equal(wav, ref)
        # every value is an int16 over 32768: the scale is the power of two, nothing rounded
        np.testing.assert_array_equal(wav * 32768, np.round(wav * 32768))
        assert np.abs(wav).max() > 0.1  # real speech, not silence


def test_stereo_mix_is_numpys_mean_bit_for_bit(real_dir):
    """The two-channel mix (a + b, then * 0.5) is ``wav.mean(axis=0)``'s float32 bits, on real
    stereo recordings (16-bit WAV, 44.1 kHz 24-bit FLAC) and on samples of every magnitude."""
    from spear_datasets.audio import convert

    for name in ("DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav",
                 "faster-whisper__stereo_diarization.wav", "faster-whisper__jfk.flac"):
        wav, sr = decode(real_dir / name)
        assert wav.shape[0] == 2 and not np.array_equal(wav[0], wav[1])
        mixed = convert(wav, sr, sr=None, channels="mix")
        assert mixed.dtype == np.float32 and mixed.shape == (1, wav.shape[1])
        np.testing.assert_array_equal(mixed, wav.mean(axis=0, keepdims=True))
    rng = np.random.default_rng(0)  # subnormal, audio-scaled and overflowing sums: still numpy's bits
    x = (rng.standard_normal((2, 100_000)) * rng.choice([1e-40, 1e-3, 1.0, 3e38], (2, 100_000))).astype(np.float32)
    np.testing.assert_array_equal(convert(x, 16000, sr=None, channels="mix"), x.mean(axis=0, keepdims=True))


def test_bad_audio_raises_one_line_reasons(tmp_path):
    with pytest.raises(AudioError, match="not found"):
        decode(tmp_path / "missing.wav")
    fifo = tmp_path / "pipe.wav"
    os.mkfifo(fifo)  # opening it would block forever: refused before any open
    for special in (fifo, Path("/dev/zero"), Path("/dev/urandom")):
        for check in (decode, audio_info):
            with pytest.raises(AudioError, match=r"audio path is not a regular file \(a pipe, socket or device\)"):
                check(special)
    (tmp_path / "empty.wav").write_bytes(b"")
    with pytest.raises(AudioError, match="empty"):
        decode(tmp_path / "empty.wav")
    (tmp_path / "text.wav").write_text("this is not audio")
    with pytest.raises(AudioError, match="cannot decode"):
        decode(tmp_path / "text.wav")
    sf.write(tmp_path / "nan.wav", np.array([0.1, np.nan, 0.2] * 1000, dtype=np.float32), 16000, subtype="FLOAT")
    with pytest.raises(AudioError, match="NaN"):
        decode(tmp_path / "nan.wav")


def test_write_wav_is_pcm16_and_atomic(tmp_path):
    p = write_wav(tmp_path / "a" / "x.wav", np.zeros((2, 1600), np.float32))
    info = sf.info(p)
    assert (info.samplerate, info.channels, info.frames, info.subtype) == (16000, 2, 1600, "PCM_16")
    assert not list(p.parent.glob(".*tmp"))
    assert audio_info(p).duration == pytest.approx(0.1)


def test_parse_row_errors():
    good = {"audio_path": "a.wav", "answer_audio_path": "b.wav", "context_end_time": "1.0", "question_end_time": "2.5", "answer_start_time": ""}
    r = parse_row(good)
    assert r.answer_start_time is None and r.question_end_time == 2.5
    assert parse_row({**good, "answer_start_time": "-0.4"}).answer_start_time == -0.4  # overlap is valid
    for bad, msg in [
        ({"question_end_time": "abc"}, "not a number"),
        ({"question_end_time": "nan"}, "not finite"),
        ({"context_end_time": "3.0"}, "after question_end_time"),
        ({"context_end_time": "-1"}, "negative"),
        ({"answer_audio_path": ""}, "answer_audio_path is empty"),
        ({"answer_start_time": "soon"}, "not a number"),
    ]:
        with pytest.raises(RowError, match=msg):
            parse_row({**good, **bad})


def test_resolve_path_roots(tmp_path):
    src = tmp_path / "root" / "data" / "seamless_2t_2s_questions"
    csv_dir = src / "inputs" / "test" / "improvised"
    csv_dir.mkdir(parents=True)
    up = resolve_path("data/seamless_2t_2s_questions/inputs/test/improvised/audios/x.wav", csv_dir)
    assert up == tmp_path / "root" / "data/seamless_2t_2s_questions/inputs/test/improvised/audios/x.wav"
    assert resolve_path("audios/x.wav", csv_dir) == csv_dir / "audios/x.wav"
    assert resolve_path("/abs/x.wav", csv_dir) == Path("/abs/x.wav")
    with pytest.raises(RowError, match="escapes"):
        resolve_path("../../etc/passwd", csv_dir)
    with pytest.raises(RowError, match="escapes"):
        resolve_path("audios/../../../x.wav", csv_dir)


def test_upstream_metadata_example_reads():
    p = REFERENCE / "spear_metadata_example.csv"
    if not p.exists():
        pytest.fail("tests/fixtures/reference is incomplete")
    rows = read_metadata(p, required=("audio_path",))
    assert len(rows) == 5 and list(rows[0])[: len(SPEAR_COLUMNS)] == list(SPEAR_COLUMNS)
    r = parse_row(rows[0], require_answer=False)
    assert r.answer_start_time == pytest.approx(-2.671, abs=1e-9)
    assert r.questioner == "P1273A"
    assert strip_speaker_tags(r.transcript_question).startswith("So I bought this facial cleanser")
    assert strip_speaker_tags(": ") == ""


def test_metadata_errors(tmp_path):
    with pytest.raises(MetadataError, match="not found"):
        read_metadata(tmp_path / "none.csv")
    (tmp_path / "h.csv").write_text("foo,bar\n1,2\n")
    with pytest.raises(MetadataError, match="lacks column"):
        read_metadata(tmp_path / "h.csv")
    (tmp_path / "e.csv").write_text(",".join(SPEAR_COLUMNS) + "\n")
    with pytest.raises(MetadataError, match="no rows"):
        read_metadata(tmp_path / "e.csv")


def test_speaker_tags_of_the_row_are_stripped():
    assert strip_speaker_tags("P1273A: Mm-hmm. P2072A: Yes?") == "Mm-hmm. Yes?"
    # non-Seamless ids are stripped when the row names them in `speakers`
    assert strip_speaker_tags("speaker90: Oh, hello. speaker90: Bye", ["speaker90", "speaker91"]) == "Oh, hello. Bye"
    assert strip_speaker_tags("MEO015:", ["FEE016", "MEO015"]) == ""
    assert strip_speaker_tags("Note: this stays", ["speaker90"]) == "Note: this stays"


def test_nan_time_is_not_finite_in_every_entry_point():
    good = {"audio_path": "a.wav", "answer_audio_path": "b.wav", "context_end_time": 1.0, "question_end_time": 2.5}
    for key in ("answer_start_time", "question_end_time"):
        with pytest.raises(RowError, match=f"{key} is not finite"):
            parse_row({**good, key: float("nan")})
