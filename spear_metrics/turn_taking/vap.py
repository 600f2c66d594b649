"""Voice-activity-projection (VAP) models and the DialogNLL procedure of ``turn_taking``.

A VAP model (Ekstedt & Skantze 2022) reads a stereo dialog (one speaker per channel, 16 kHz)
and predicts, at every frame (50 Hz), a distribution over 256 classes = the joint future voice
activity of 2 speakers x 4 bins covering the next 2 s (bins of 0.2, 0.4, 0.6, 0.8 s).

Project interface (:class:`VapModel`): ``frame_hz`` and ``log_probs(stereo)`` with stereo
``torch.Tensor (B, 2, N)`` at 16 kHz -> ``(B, T, 256)`` natural-log probabilities. Loaders
(:func:`load_vap`):

- a folder whose ``config.json`` has ``"type": "spear_tiny_vap"`` + ``model.safetensors``:
  :class:`TinyVap`, a small causal conv+GRU VAP-like net (tests, benchmarks; random weights
  give a number, not a meaningful score);
- a TorchScript file (``.pt``/``.ts``/``.jit``) whose ``forward(waveform (B, 2, N))`` returns
  256-class **logits** ``(B, T, 256)`` at ``vap_frame_hz`` (default 50): e.g. an export of the
  public VAP checkpoint (github.com/ErikEkstedt/VoiceActivityProjection), which is not on
  the Hub.

Class index of a target (:func:`vap_labels`): bit ``4*c + b`` (LSB first) is set when speaker
``c`` (0, 1) is active for more than half of future bin ``b`` (0..3). A model trained with
another bit order must be exported with this one.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

import numpy as np

SR = 16000
FRAME_HZ = 50
BIN_TIMES = (0.2, 0.4, 0.6, 0.8)  # seconds; sum = 2.0 s horizon
N_CLASSES = 256


def activity_frames(segments: Sequence[tuple[float, float]], n_frames: int, frame_hz: int = FRAME_HZ) -> np.ndarray:
    """Binary voice activity ``(n_frames,)`` from speech segments in seconds (frame ``t`` covers
    ``[t/frame_hz, (t+1)/frame_hz)`` and is active when its start lies in a segment)."""
    act = np.zeros(n_frames, dtype=np.float32)
    for s, e in segments:
        lo, hi = max(0, int(math.ceil(s * frame_hz - 1e-9))), min(n_frames, int(math.ceil(e * frame_hz - 1e-9)))
        if hi > lo:
            act[lo:hi] = 1.0
    return act


def vap_labels(activity: np.ndarray, frame_hz: int = FRAME_HZ, bin_times: Sequence[float] = BIN_TIMES) -> np.ndarray:
    """Target class of each frame with a full 2 s future.

    Args:
        activity: ``(2, T)`` binary voice activity of the two speakers at ``frame_hz``.

    Returns:
        ``(T - H,)`` int64 class indices in [0, 256) for frames ``0 .. T-H-1`` where ``H`` is the
        horizon in frames (100 at 50 Hz); empty when the dialog is shorter than the horizon.
        Frame ``t``'s bin ``b`` spans frames ``[t+1+e_{b-1}, t+1+e_b)`` (the future after ``t``).
    """
    edges = np.concatenate([[0], np.cumsum(np.round(np.asarray(bin_times) * frame_hz).astype(int))])
    horizon = int(edges[-1])
    T = activity.shape[1]
    n = T - horizon
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    csum = np.concatenate([np.zeros((2, 1)), np.cumsum(activity, axis=1)], axis=1)  # (2, T+1)
    idx = np.zeros(n, dtype=np.int64)
    t = np.arange(n)
    for c in range(2):
        for b in range(len(bin_times)):
            lo, hi = t + 1 + edges[b], np.minimum(t + 1 + edges[b + 1], T)
            share = (csum[c, hi] - csum[c, lo]) / np.maximum(hi - lo, 1)
            idx |= (share > 0.5).astype(np.int64) << (4 * c + b)
    return idx


def dialog_nll(frame_nll: np.ndarray, boundaries_s: Sequence[float], frame_hz: int = FRAME_HZ,
               window_s: float = 2.0, worst_share: float = 0.25) -> tuple[float | None, int]:
    """DialogNLL of one dialog.

    Args:
        frame_nll: ``(n,)`` per-frame NLL (nats) of the target class, frames with a full future.
        boundaries_s: utterance starts and ends (s) of both speakers.

    Units: one per boundary ``tau``: the mean NLL over frames in ``[tau - window_s, tau)`` that
    have a target; boundaries whose window holds no such frame give no unit.
    DialogNLL = ½ · mean(units) + ½ · mean(worst ``ceil(worst_share * n_units)`` units).

    Returns:
        ``(DialogNLL or None when there is no unit, number of units)``.
    """
    units = []
    w = int(round(window_s * frame_hz))
    for tau in sorted(set(round(float(b), 6) for b in boundaries_s)):
        end = int(round(tau * frame_hz))
        hi, lo = min(len(frame_nll), end), max(0, end - w)
        if hi > lo:
            units.append(float(np.mean(frame_nll[lo:hi])))
    if not units:
        return None, 0
    u = np.sort(np.array(units))[::-1]
    k = max(1, int(math.ceil(worst_share * len(u))))
    return float(0.5 * u.mean() + 0.5 * u[:k].mean()), len(units)


class VapModel:
    """Interface: ``frame_hz`` (int) and ``log_probs(stereo (B, 2, N) float32 at 16 kHz) ->
    (B, T, 256)`` natural-log probabilities, on ``device``."""

    frame_hz: int = FRAME_HZ
    device = None

    def log_probs(self, stereo):  # pragma: no cover - interface
        raise NotImplementedError


def _tiny_vap_module(config: dict):
    from torch import nn

    class TinyVap(nn.Module):
        """Causal VAP-like net: Conv1d(2, C, 320, stride 320) -> ReLU -> GRU(C) -> Linear(256)."""

        def __init__(self):
            super().__init__()
            c = int(config.get("channels", 32))
            hop = SR // int(config.get("frame_hz", FRAME_HZ))
            self.frontend = nn.Conv1d(2, c, hop, stride=hop)
            self.rnn = nn.GRU(c, c, batch_first=True)
            self.head = nn.Linear(c, N_CLASSES)

        def forward(self, x):  # (B, 2, N) -> (B, T, 256) logits
            h = self.frontend(x).relu().transpose(1, 2)
            return self.head(self.rnn(h)[0])

    return TinyVap()


class TinyVap(VapModel):
    """:class:`VapModel` over the tiny project net (folder: config.json + model.safetensors)."""

    def __init__(self, folder: Path, device):
        from safetensors.torch import load_file

        cfg = json.loads((folder / "config.json").read_text())
        self.frame_hz = int(cfg.get("frame_hz", FRAME_HZ))
        self.net = _tiny_vap_module(cfg)
        self.net.load_state_dict(load_file(str(folder / "model.safetensors")))
        self.device = device
        self.net.to(device).eval()

    def log_probs(self, stereo):
        import torch

        with torch.inference_mode():
            return torch.log_softmax(self.net(stereo.to(self.device)).float(), dim=-1)


class JitVap(VapModel):
    """:class:`VapModel` over a TorchScript export returning 256-class logits."""

    def __init__(self, path: Path, device, frame_hz: int = FRAME_HZ):
        import torch

        self.net = torch.jit.load(str(path), map_location=device).eval()
        self.device = device
        self.frame_hz = frame_hz

    def log_probs(self, stereo):
        import torch

        with torch.inference_mode():
            logits = self.net(stereo.to(self.device))
            if logits.shape[-1] != N_CLASSES:
                raise ValueError(f"VAP model returned {logits.shape[-1]} classes, expected {N_CLASSES}")
            return torch.log_softmax(logits.float(), dim=-1)


def load_vap(model: str, *, device=None, frame_hz: int = FRAME_HZ) -> VapModel:
    """Load a VAP model (see module docstring) on ``device`` (default: this process's).

    Raises:
        ModelUnavailableError: the path/id cannot be resolved.
        ValueError: a folder that is not a known VAP layout.
    """
    from spear_metrics.core.batching import process_device
    from spear_metrics.core.models import resolve_model

    device = device if device is not None else process_device()
    p = resolve_model(model, purpose="VAP turn-taking")
    if p.is_file():
        return JitVap(p, device, frame_hz)
    cfg = p / "config.json"
    if cfg.exists() and json.loads(cfg.read_text()).get("type") == "spear_tiny_vap":
        return TinyVap(p, device)
    jits = sorted([*p.glob("*.ts"), *p.glob("*.jit"), *p.glob("*.pt")])
    if jits:
        return JitVap(jits[0], device, frame_hz)
    raise ValueError(f"VAP model {model!r}: neither a TorchScript file nor a 'spear_tiny_vap' folder")


def save_tiny_vap(folder: str | Path, *, channels: int = 16, seed: int = 0) -> Path:
    """Write a randomly initialised :class:`TinyVap` folder (tests, benchmarks)."""
    import torch
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = {"type": "spear_tiny_vap", "channels": channels, "frame_hz": FRAME_HZ}
    torch.manual_seed(seed)
    net = _tiny_vap_module(cfg)
    (folder / "config.json").write_text(json.dumps(cfg))
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(folder / "model.safetensors"))
    return folder
