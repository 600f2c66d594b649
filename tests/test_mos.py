"""MOS backends: the embedded predictors rank clean real speech above the same speech degraded
(heavy white noise at 0 dB SNR, then hard clipping); each backend writes only its own keys."""

from __future__ import annotations

import numpy as np
import pytest

from spear_datasets.audio import load_audio
from spear_metrics.core.models import ModelUnavailableError
from spear_metrics.core.mos import load_mos


def _degrade(w: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(0)
    w = 0.9 * w / np.abs(w).max()
    n = rng.standard_normal(w.size).astype(np.float32)
    n *= np.sqrt((w**2).mean() / (n**2).mean())  # 0 dB SNR
    return np.clip(4 * (w + n), -0.3, 0.3).astype(np.float32)


@pytest.fixture(scope="module")
def clean(real_dir):
    return load_audio(real_dir / "speechbrain__p226_002.wav", sr=16000, channels="mix")[0]


@pytest.mark.parametrize("name,key", [("dnsmos", "DNSMOS_OVRL"), ("distillmos", "DistillMOS")])
def test_embedded_mos_ranks_clean_above_degraded(clean, name, key):
    m = load_mos(name, device="cpu")
    good, bad, empty = m.score([clean, _degrade(clean), np.zeros(0, np.float32)])
    assert set(good) == set(m.keys) and "UTMOS" not in good
    assert 1.0 <= bad[key] < good[key] <= 5.0 and good[key] - bad[key] > 1.0, (good, bad)
    assert all(v is None for v in empty.values())


def test_utmos_weights_unavailable_offline_is_one_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    m = load_mos("utmos")
    assert m.keys == ("UTMOS",)
    with pytest.raises(ModelUnavailableError, match="Blinorot/UTMOS-PyTorch"):
        m.load()


def test_utmos_loads_a_local_state_dict(tmp_path, clean):
    """The real UTMOS22 architecture with random weights, saved and loaded through resolve_model."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("utmos_pytorch")
    from utmos_pytorch.utmos_torch import UTMOSModel

    torch.manual_seed(0)
    torch.save(UTMOSModel().state_dict(), tmp_path / "utmos_state_dict.pt")
    m = load_mos("utmos", model=str(tmp_path), device="cpu")
    (s,) = m.score([clean[:16000]])
    assert set(s) == {"UTMOS"} and np.isfinite(s["UTMOS"])


def test_distillmos_in_place_activations_give_the_packages_values(real_dir):
    """DistillMOS's LeakyReLU layers run in place (no copy of each feature map): the scores of
    real speech of 3.1 s, 11 s (44.1 kHz, resampled; 5 windows) and 4 s are those of
    the package's own layers, bit for bit."""
    import torch

    waves = [load_audio(real_dir / c, sr=16000, channels="mix")[0]
             for c in ("speechbrain__p226_002.wav", "faster-whisper__jfk.flac", "pyannote-audio__dev00.wav")]
    waves[2] = waves[2][: 4 * 16000]
    m = load_mos("distillmos", device="cpu")
    m.load()
    relus = [layer for layer in m._model.modules() if isinstance(layer, torch.nn.LeakyReLU)]
    assert len(relus) == 6 and all(layer.inplace for layer in relus)
    fast = m.score(waves)
    for layer in relus:
        layer.inplace = False
    try:
        assert m.score(waves) == fast
    finally:
        for layer in relus:
            layer.inplace = True
    assert all(1.0 < s["DistillMOS"] < 5.0 for s in fast) and len({s["DistillMOS"] for s in fast}) == 3
