"""Voice-activity-projection (VAP) models and SPEAR's DialogNLL procedure for ``turn_taking``.

A VAP model (Ekstedt & Skantze 2022) reads a stereo dialog (one speaker per channel) and
predicts, at every model frame, a distribution over 256 classes = the joint future voice
activity of 2 speakers x 4 bins covering the next 2 s (bins of 0.2, 0.4, 0.6, 0.8 s).

Project interface (:class:`VapModel`): ``sample_rate``, ``frame_hz`` and ``log_probs(stereo)``
with stereo ``torch.Tensor (B, 2, N)`` at ``sample_rate`` -> ``(B, T, 256)`` natural-log
probabilities. Loaders (:func:`load_vap`):

- a folder whose ``config.json`` has ``"type": "spear_tiny_vap"`` + ``model.safetensors``:
  :class:`TinyVap`, a small causal conv+GRU VAP-like net (tests, benchmarks; random weights
  give a number, not a meaningful score);
- a TorchScript file (``.pt``/``.ts``/``.jit``) whose ``forward(waveform (B, 2, N))`` returns
  256-class **logits** ``(B, T, 256)``; its rate and frame rate are options (``vap_sample_rate``
  16000 and ``vap_frame_hz`` 50 for a VAP backbone; SPEAR's other backbones read 24 kHz at
  12.5 Hz).

The procedure below re-states SPEAR's (``bin/turntaking/run_turntaking_inference.py`` with
``dualturn/scripts/score_vap_nll_naturalness.py`` and ``train_fvad_head.py``), all on the
50 Hz VAD grid of 20 ms frames:

- :func:`vad_frames` / :func:`clean_vad`: Silero segments (in samples) -> 50 Hz frames
  ``[start // 320, min(end // 320, n))``; then DualTurn's clean-up: speech runs shorter than
  ``int(150 / 20) = 7`` frames removed, then silence runs shorter than 7 frames filled (only
  runs that end before the last frame);
- :func:`future_vad_labels`: target of model frame ``i``: anchor ``a = round((i + 1) * 50 /
  frame_hz)``; bit ``4 * speaker + b`` set when the speaker's mean activity over 50 Hz frames
  ``[a + o_b, a + o_b + w_b)`` (``w`` = 10, 20, 30, 40 frames) is ``>= threshold_ratio`` (0.5);
  a frame has a target only when ``a + 100 <= T50`` and it lies within the audio;
- :func:`utterance_units`: per speaker, VAD islands merged when the gap is <= 1.0 s and the
  other speaker is active <= 20 % of it; utterances >= 0.5 s give two units, ``[start - 2 s,
  start]`` and ``[end - 2 s, end]``, clamped to the dialog;
- :func:`unit_nlls`: a unit's NLL = mean of the finite frame NLLs in model frames
  ``[max(ceil(3 s * frame_hz), floor(start * frame_hz)), min(n, ceil(end * frame_hz)))`` (the
  first 3 s are context), kept with >= 5 frames; without any unit, SPEAR's fallbacks (frames
  within 2 s of a VAD change, then every frame after the context);
- :func:`dialog_nll`: ½ · mean + ½ · mean of the worst ``max(1, ceil(0.25 n))`` units.

Class index: bit ``4*c + b`` (LSB first) for speaker ``c`` (0, 1) and future bin ``b`` (0..3).
A model trained with another bit order must be exported with this one.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

SR = 16000
FRAME_HZ = 50
VAD_HZ = 50.0  # SPEAR's VAD grid (20 ms frames of 320 samples at 16 kHz)
BIN_TIMES = (0.2, 0.4, 0.6, 0.8)  # seconds; sum = 2.0 s horizon
N_CLASSES = 256
CONTEXT_S = 3.0
UNIT_PRE_S = 2.0
MIN_UNIT_FRAMES = 5


def vad_frames(segments: Sequence[tuple[int, int]], n_samples: int, sr: int = SR) -> np.ndarray:
    """50 Hz binary VAD ``(n_samples // 320,)`` int8 from Silero segments given in **samples**
    at 16 kHz: frames ``[start // 320, min(end // 320, n))`` are active (SPEAR's
    ``silero_vad_per_frame``)."""
    frame = int(20 / 1000 * sr)
    n = n_samples // frame
    vad = np.zeros(n, dtype=np.int8)
    for s, e in segments:
        vad[int(s // frame): min(int(e // frame), n)] = 1
    return vad


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """``[(start, end), ...]`` (end exclusive) of the True runs of a 1-D mask."""
    padded = np.concatenate(([False], np.asarray(mask, dtype=bool), [False]))
    starts = np.flatnonzero(~padded[:-1] & padded[1:])
    ends = np.flatnonzero(padded[:-1] & ~padded[1:])
    return [(int(s), int(e)) for s, e in zip(starts, ends)]


def clean_vad(vad: np.ndarray, *, frame_hz: float = VAD_HZ, min_speech_ms: int = 150, min_silence_ms: int = 150) -> np.ndarray:
    """DualTurn's VAD clean-up of one channel ``(T,)`` (SPEAR's ``dualturn_clean_vad_1d``):
    speech runs shorter than ``int(min_speech_ms / frame_ms)`` frames that end before the last
    frame are removed; then silence runs shorter than ``int(min_silence_ms / frame_ms)`` that
    end before the last frame (a leading one included) are filled."""
    out = np.asarray(vad, dtype=np.int8).copy()
    n = len(out)
    frame_ms = 1000.0 / frame_hz
    min_speech, min_silence = int(min_speech_ms / frame_ms), int(min_silence_ms / frame_ms)
    for s, e in _runs(out == 1):
        if e < n and e - s < min_speech:
            out[s:e] = 0
    for s, e in _runs(out == 0):
        if e < n and e - s < min_silence:
            out[s:e] = 1
    return out


def future_vad_labels(vad50: np.ndarray, n_frames: int, valid_frames: int, *, frame_hz: float = FRAME_HZ,
                      threshold_ratio: float = 0.5, bin_times: Sequence[float] = BIN_TIMES) -> np.ndarray:
    """256-class target of each model frame (SPEAR's ``future_vad_states`` + packing).

    Args:
        vad50: ``(T50, 2)`` cleaned 50 Hz VAD of the two channels.
        n_frames: model frames ``T``.
        valid_frames: frames that lie within the audio (``ceil(n_samples / samples_per_frame)``).

    Returns:
        ``(n_frames,)`` int64: class in [0, 256), or -1 where the frame has no target.
    """
    widths = [max(1, int(round(t * VAD_HZ))) for t in bin_times]
    horizon = int(sum(widths))
    T50 = vad50.shape[0]
    labels = np.full(n_frames, -1, dtype=np.int64)
    idx = np.arange(n_frames)
    anchors = np.round((idx.astype(np.float32) + np.float32(1.0)) * np.float32(VAD_HZ / float(frame_hz))).astype(np.int64)
    ok = (idx < valid_frames) & (anchors + horizon <= T50)
    if not ok.any():
        return labels
    a = anchors[ok]
    packed = np.zeros(len(a), dtype=np.int64)
    bit = 0
    for ch in range(2):
        cs = np.concatenate([[0.0], np.cumsum(vad50[:, ch].astype(np.float64))])
        offset = 0
        for w in widths:
            mean = (cs[a + offset + w] - cs[a + offset]) / float(w)
            packed |= (mean >= threshold_ratio).astype(np.int64) << bit
            offset += w
            bit += 1
    labels[ok] = packed
    return labels


def utterance_units(vad50: np.ndarray, duration_s: float, *, pre_s: float = UNIT_PRE_S, post_s: float = 0.0,
                    min_utterance_s: float = 0.5, merge_gap_s: float = 1.0, merge_other_max_ratio: float = 0.2) -> list[dict[str, Any]]:
    """SPEAR's boundary units from the cleaned 50 Hz VAD ``(T50, 2)`` (``extract_utterance_units``
    with ``unit_mode="boundaries"``): ``[{"kind": "utterance_start"|"utterance_end", "start_s",
    "end_s", "speaker"}]`` sorted by (start, end, kind, speaker)."""
    fh = VAD_HZ
    T = vad50.shape[0]

    def other_ratio(speaker: int, a: float, b: float) -> float:
        lo, hi = max(0, int(math.floor(a * fh))), min(T, int(math.ceil(b * fh)))
        return 0.0 if hi <= lo else float((vad50[lo:hi, 1 - speaker] > 0).mean())

    merged: list[dict[str, Any]] = []
    for sp in range(vad50.shape[1]):
        cur = None
        for s, e in _runs(vad50[:, sp] > 0):
            seg = {"speaker": sp, "start": s / fh, "end": e / fh}
            if cur is None:
                cur = seg
            elif seg["start"] - cur["end"] <= merge_gap_s and other_ratio(sp, cur["end"], seg["start"]) <= merge_other_max_ratio:
                cur["end"] = seg["end"]
            else:
                merged.append(cur)
                cur = seg
        if cur is not None:
            merged.append(cur)
    merged.sort(key=lambda x: (x["start"], x["end"], x["speaker"]))
    units: list[dict[str, Any]] = []
    seen: set = set()
    for seg in merged:
        if seg["end"] - seg["start"] < min_utterance_s:
            continue
        for kind, t in (("utterance_start", seg["start"]), ("utterance_end", seg["end"])):
            lo, hi = max(0.0, t - pre_s), min(float(duration_s), t + post_s)
            key = (kind, round(lo, 2), round(hi, 2), seg["speaker"])
            if hi <= lo or key in seen:
                continue
            seen.add(key)
            units.append({"kind": kind, "start_s": lo, "end_s": hi, "speaker": seg["speaker"]})
    return sorted(units, key=lambda u: (u["start_s"], u["end_s"], u["kind"], u["speaker"]))


def vad_to_model_frames(vad50: np.ndarray, n_frames: int, frame_hz: float) -> np.ndarray:
    """``(n_frames, 2)`` int8: a model frame is active when >= half of its 50 Hz frames are."""
    out = np.zeros((n_frames, 2), dtype=np.int8)
    T = vad50.shape[0]
    for i in range(n_frames):
        lo = int(math.floor(i * VAD_HZ / frame_hz))
        hi = max(int(math.floor((i + 1) * VAD_HZ / frame_hz)), lo + 1)
        if lo < T:
            out[i] = (vad50[lo:min(hi, T)].mean(axis=0) >= 0.5).astype(np.int8)
    return out


def unit_nlls(frame_nll: np.ndarray, units: Sequence[dict[str, Any]], vad_model: np.ndarray, *, frame_hz: float = FRAME_HZ,
              context_s: float = CONTEXT_S, min_unit_frames: int = MIN_UNIT_FRAMES) -> list[float]:
    """Mean NLL of each unit (SPEAR's ``unit_rows_from_units``, fallbacks included).

    Args:
        frame_nll: ``(n,)`` per-frame NLL (nats), NaN where a frame has no target.
        units: from :func:`utterance_units`.
        vad_model: ``(n, 2)`` VAD on the model frame grid (:func:`vad_to_model_frames`).
    """
    n = len(frame_nll)
    first = int(math.ceil(context_s * frame_hz))
    out = []
    for u in units:
        lo = max(first, int(math.floor(float(u["start_s"]) * frame_hz)))
        hi = min(n, int(math.ceil(float(u["end_s"]) * frame_hz)))
        if hi <= lo:
            continue
        v = frame_nll[lo:hi]
        v = v[np.isfinite(v)]
        if v.size >= min_unit_frames:
            out.append(float(v.mean()))
    if out:
        return out
    valid = np.zeros(n, dtype=bool)
    valid[min(first, n):] = True
    m = min(n, vad_model.shape[0])
    mask = np.zeros(n, dtype=bool)
    if m > 1:  # fallback 1: frames within 2 s of a VAD change
        w = int(round(2.0 * frame_hz))
        for i in np.flatnonzero(np.any(vad_model[1:m] != vad_model[: m - 1], axis=1)) + 1:
            mask[max(0, i - w): min(n, i + w + 1)] = True
        mask &= valid
    if int(mask.sum()) >= min_unit_frames:
        v = frame_nll[mask]
        v = v[np.isfinite(v)]
        if v.size >= min_unit_frames:
            return [float(v.mean())]
    v = frame_nll[valid]  # fallback 2: every frame after the context
    v = v[np.isfinite(v)]
    return [float(v.mean())] if v.size else []


def dialog_nll(units: Sequence[float], *, tail_share: float = 0.25, mean_weight: float = 0.5) -> dict[str, float] | None:
    """DialogNLL of one dialog from its unit NLLs (SPEAR's ``aggregate_unit_rows``):
    ``mean_weight * mean + (1 - mean_weight) * mean of the worst max(1, ceil(tail_share * n))``;
    ``None`` without units."""
    if not len(units):
        return None
    arr = np.asarray(units, dtype=np.float64)
    k = max(1, int(math.ceil(max(0.0, min(1.0, tail_share)) * len(arr))))
    mean, tail = float(arr.mean()), float(np.sort(arr)[-k:].mean())
    return {"mean_nll": mean, "tail_nll": tail, "dialog_nll": mean_weight * mean + (1 - mean_weight) * tail, "n_units": len(arr)}


class VapModel:
    """Interface: ``sample_rate`` (Hz of the audio it reads), ``frame_hz`` (its output frame
    rate) and ``log_probs(stereo (B, 2, N) float32 at sample_rate) -> (B, T, 256)``
    natural-log probabilities, on ``device``."""

    sample_rate: int = SR
    frame_hz: float = FRAME_HZ
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

    def __init__(self, path: Path, device, frame_hz: float = FRAME_HZ, sample_rate: int = SR):
        import torch

        self.net = torch.jit.load(str(path), map_location=device).eval()
        self.device = device
        self.frame_hz = float(frame_hz)
        self.sample_rate = int(sample_rate)

    def log_probs(self, stereo):
        import torch

        with torch.inference_mode():
            logits = self.net(stereo.to(self.device))
            if logits.shape[-1] != N_CLASSES:
                raise ValueError(f"VAP model returned {logits.shape[-1]} classes, expected {N_CLASSES}")
            return torch.log_softmax(logits.float(), dim=-1)


def load_vap(model: str, *, device=None, frame_hz: float = FRAME_HZ, sample_rate: int = SR) -> VapModel:
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
        return JitVap(p, device, frame_hz, sample_rate)
    cfg = p / "config.json"
    if cfg.exists() and json.loads(cfg.read_text()).get("type") == "spear_tiny_vap":
        return TinyVap(p, device)
    jits = sorted([*p.glob("*.ts"), *p.glob("*.jit"), *p.glob("*.pt")])
    if jits:
        return JitVap(jits[0], device, frame_hz, sample_rate)
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
