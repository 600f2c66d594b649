"""Whisper-encoder classification/regression heads of Vox-Profile and Voxlect (Feng et al.),
re-implemented so their checkpoints load with this project's ``transformers``.

Why not the packages: ``hyperion-voxlect`` 0.1.1 and ``hyperion-voxprofile`` 0.1.0 (PyPI,
read from their wheels) pin ``transformers<5``, ``numpy<2`` and ``huggingface-hub<1.0``,
install a top-level package literally named ``src`` (voxlect), download
``openai/whisper-*`` from the Hub inside ``__init__`` (no local path, no offline use) and call
``.cuda()`` inside ``forward`` (no CPU, no per-process device). This module keeps their
checkpoint layout (``PyTorchModelHubMixin``: ``config.json`` with the wrapper's init kwargs
+ ``model.safetensors``) and their forward pass:

1. audio 16 kHz mono -> ``WhisperFeatureExtractor(chunk_length=15)``: every clip is padded
   or **cut to its first 15 s** (1500 mel frames of 10 ms, 750 encoder positions);
2. Whisper encoder with ``max_source_positions=750``; encoder layers ``i > L // 2`` have LoRA
   ``fc1``/``fc2`` (loralib layout: ``weight``, ``bias``, ``lora_A (r, in)``,
   ``lora_B (out, r)``, scaling ``1 / r``); the position table is the one STORED in the
   checkpoint (:class:`VoxWhisper` ``positions``): the wrapper's ``forward`` installs its own
   parameter ``embed_positions`` (first 750 rows, saved in the checkpoint beside the encoder)
   as the encoder's table before every call; SPEAR's ``forward_fast`` calls the encoder
   directly, with the encoder's stored table;
3. last hidden state -> 3 point-wise Conv1d (``hidden_dim``) -> mean over the clip's own
   frames (``(n // 160 - 1) // 2 + 1``, at most 750, at least 1) -> heads. The wrapper's
   ``forward`` pools over the clip's own frames also when called without ``length`` (its README
   usage: it then sets ``length = len(x[0])`` before pooling, so its ``torch.mean`` over all 750
   frames is never reached; read in ``tiantiaf0627/voxlect`` at commits ``e5d72f0`` and ``1e60614``
   and in the ``hyperion-voxlect`` 0.1.1 wheel).

Two ways to make the 1500 log-mel frames of step 1 (:meth:`VoxWhisper.predict` ``padding``):

- ``"audio"`` (default): the wrapper's own ``forward`` (Vox-Profile/Voxlect): the waveform is
  cut or zero-padded to 15 s, then the log-mel is computed (the padding is log-mel of silence);
- ``"mel"``: SPEAR's ``forward_fast`` (``bin/naturalness/extract.py``, used by
  ``extract_features.py`` for the full-turn A/V/D scores): the log-mel of the **whole**
  waveform (``padding="longest", truncation=False``: its own length, its own max-normalisation),
  then the mel frames are cut to 1500 or padded with zeros (``_ensure_whisper_expected_mel_len``).

Heads: ``out_layer`` (Voxlect dialect logits, ``output_class_num``) and
``arousal_layer``/``valence_layer``/``dominance_layer`` (Vox-Profile emotion-dim, sigmoid,
in [0, 1]). Only the heads a caller asks for are built and must be in the checkpoint.

Sources: ``src/model/dialect/whisper_dialect.py`` (hyperion-voxlect 0.1.1) and
``vox_profile/model/emotion/whisper_emotion_dim.py`` (hyperion-voxprofile 0.1.0).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from spear_metrics.core.models import ModelUnavailableError, resolve_model

SR = 16000
MAX_SECONDS = 15
MAX_POSITIONS = 750

#: Whisper encoder sizes by the wrapper's ``pretrain_model`` (from the openai/whisper-* configs)
BACKBONES: dict[str, dict[str, int]] = {
    "whisper_tiny": dict(d_model=384, encoder_layers=4, encoder_attention_heads=6, encoder_ffn_dim=1536, num_mel_bins=80),
    "whisper_base": dict(d_model=512, encoder_layers=6, encoder_attention_heads=8, encoder_ffn_dim=2048, num_mel_bins=80),
    "whisper_small": dict(d_model=768, encoder_layers=12, encoder_attention_heads=12, encoder_ffn_dim=3072, num_mel_bins=80),
    "whisper_medium": dict(d_model=1024, encoder_layers=24, encoder_attention_heads=16, encoder_ffn_dim=4096, num_mel_bins=80),
    "whisper_large": dict(d_model=1280, encoder_layers=32, encoder_attention_heads=20, encoder_ffn_dim=5120, num_mel_bins=128),
}

EMOTION_DIM_HEADS = ("arousal_layer", "valence_layer", "dominance_layer")
DIALECT_HEADS = ("out_layer",)


def _build(config: dict[str, Any], heads: Sequence[str]):
    import torch
    from torch import nn
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder, sinusoids

    class LoraLinear(nn.Linear):
        """``nn.Linear`` + LoRA update ``x A^T B^T / r`` (loralib's ``lora.Linear``, alpha 1)."""

        def __init__(self, fan_in: int, fan_out: int, r: int):
            super().__init__(fan_in, fan_out)
            self.lora_A = nn.Parameter(torch.zeros(r, fan_in))
            self.lora_B = nn.Parameter(torch.zeros(fan_out, r))
            self.scaling = 1.0 / r

        def forward(self, x):
            return super().forward(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scaling

    class VoxWhisperHead(nn.Module):
        def __init__(self):
            super().__init__()
            dims = dict(BACKBONES.get(config.get("pretrain_model", "whisper_large"), {}))
            dims.update(config.get("whisper_config") or {})
            if not dims:
                raise ValueError(f"unknown pretrain_model {config.get('pretrain_model')!r}")
            wcfg = WhisperConfig(**dims, max_source_positions=MAX_POSITIONS)
            wcfg._attn_implementation = "eager"
            self.num_mel_bins = wcfg.num_mel_bins
            self.backbone_model = nn.Module()
            self.backbone_model.encoder = WhisperEncoder(wcfg)
            if config.get("finetune_method", "lora") in ("lora", "combined"):
                r = int(config.get("lora_rank", 16))
                n_layers = wcfg.encoder_layers
                for i, layer in enumerate(self.backbone_model.encoder.layers):
                    if i > n_layers // 2:
                        layer.fc1 = LoraLinear(wcfg.d_model, wcfg.encoder_ffn_dim, r)
                        layer.fc2 = LoraLinear(wcfg.encoder_ffn_dim, wcfg.d_model, r)
            hd = int(config.get("hidden_dim", 256))
            self.model_seq = nn.Sequential(
                nn.Conv1d(wcfg.d_model, hd, 1), nn.ReLU(), nn.Dropout(0.1),
                nn.Conv1d(hd, hd, 1), nn.ReLU(), nn.Dropout(0.1), nn.Conv1d(hd, hd, 1),
            )
            n_w = wcfg.encoder_layers + 1 if config.get("use_conv_output", True) else wcfg.encoder_layers
            self.weights = nn.Parameter(torch.ones(n_w) / n_w)  # unused by the forward, kept for the layout
            for h in heads:
                if h == "out_layer":
                    n_out = int(config.get("output_class_num", 4))
                    setattr(self, h, nn.Sequential(nn.Linear(hd, hd), nn.ReLU(), nn.Linear(hd, n_out)))
                else:
                    setattr(self, h, nn.Sequential(nn.Linear(hd, hd), nn.ReLU(), nn.Linear(hd, 1), nn.Sigmoid()))
            self.heads = tuple(heads)
            self._sinusoids = sinusoids

        def reset_positions(self):
            emb = self.backbone_model.encoder.embed_positions
            with torch.no_grad():
                emb.weight.copy_(self._sinusoids(*emb.weight.shape))

        def forward(self, features, n_frames):
            """features ``(B, mels, 1500)``; n_frames ``(B,)`` valid encoder frames -> dict of
            head outputs ``(B, k)`` and ``embedding`` ``(B, hidden_dim)``."""
            h = self.backbone_model.encoder(features).last_hidden_state  # (B, 750, d)
            h = self.model_seq(h.transpose(1, 2)).transpose(1, 2)  # (B, 750, hd)
            mask = (torch.arange(h.shape[1], device=h.device)[None, :] < n_frames[:, None]).to(h.dtype)
            pooled = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
            out = {name: getattr(self, name)(pooled) for name in self.heads}
            out["embedding"] = pooled
            return out

    return VoxWhisperHead()


class VoxWhisper:
    """A loaded Vox-Profile/Voxlect Whisper head on a device.

    Args:
        model: Hub id or local folder (``config.json`` + ``model.safetensors`` or
            ``pytorch_model.bin``), resolved with :func:`resolve_model`.
        heads: which heads to build (e.g. :data:`DIALECT_HEADS`, :data:`EMOTION_DIM_HEADS`).
        device: torch device (default: :func:`spear_metrics.core.batching.process_device`).
        purpose: model role for error messages.
        positions: which position table the encoder uses. ``"wrapper"`` (default: the
            wrapper's ``forward``, as Voxlect's dialect models run): the checkpoint's own
            ``embed_positions`` parameter, first 750 rows (the encoder's stored table when the
            checkpoint has none); ``"checkpoint"`` (SPEAR's ``forward_fast``, which calls the
            encoder directly): the encoder's stored table; ``"sinusoids"``: Whisper's
            sinusoids for 750 steps (neither upstream path; for comparison). A table the
            checkpoint lacks falls back to sinusoids; :attr:`positions_source` says which was used.
        dtype: ``model_dtype`` option (:func:`spear_metrics.core.batching.model_dtype`): float32
            (default, the reference), ``float16``/``bfloat16``/``auto`` (half precision on CUDA:
            scores move by less than the tolerance that ``scripts/bench_model_throughput.py``
            measures and the README states).

    Raises:
        ModelUnavailableError: model files missing, or a requested head not in the checkpoint.
        ValueError: ``positions`` is not one of the three values.
    """

    def __init__(self, model: str, heads: Sequence[str], *, device=None, purpose: str = "Vox-Profile Whisper",
                 positions: str = "wrapper", dtype: str | None = None):
        import torch
        from transformers import WhisperFeatureExtractor

        from spear_metrics.core.batching import model_dtype, process_device

        path = resolve_model(model, purpose=purpose, allow_patterns=["*.json", "*.safetensors", "*.bin"])
        cfg_path = path / "config.json"
        if not cfg_path.exists():
            raise ModelUnavailableError(f"{purpose} model {model!r}: no config.json in {path}")
        self.config = json.loads(cfg_path.read_text())
        self.model_id = str(model)
        net = _build(self.config, heads)
        state = _load_state(path, purpose, model)
        state = {k: v for k, v in state.items() if not k.startswith("backbone_model.decoder")}
        result = net.load_state_dict(state, strict=False)
        missing = [k for k in result.missing_keys if not k.endswith("embed_positions.weight")]
        if missing:
            raise ModelUnavailableError(
                f"{purpose} model {model!r}: checkpoint lacks {len(missing)} weights (e.g. {missing[0]}); is it the right model?")
        if positions not in ("wrapper", "checkpoint", "sinusoids"):
            raise ValueError(f"positions must be 'wrapper', 'checkpoint' or 'sinusoids', got {positions!r}")
        table = net.backbone_model.encoder.embed_positions.weight
        stored = state.get("embed_positions")  # the wrapper's own parameter (PyTorchModelHubMixin layout)
        if positions == "wrapper" and stored is not None:
            if stored.ndim != 2 or stored.shape[0] < MAX_POSITIONS or stored.shape[1] != table.shape[1]:
                raise ModelUnavailableError(f"{purpose} model {model!r}: its embed_positions has shape "
                                            f"{tuple(stored.shape)}, expected ({MAX_POSITIONS}+, {table.shape[1]})")
            with torch.no_grad():
                table.copy_(stored[:MAX_POSITIONS].to(table.dtype))
            self.positions_source = "checkpoint embed_positions (the wrapper's forward)"
        elif positions != "sinusoids" and any(k.endswith("encoder.embed_positions.weight") for k in state):
            self.positions_source = "checkpoint encoder table"
        else:
            net.reset_positions()
            self.positions_source = "sinusoids" + ("" if positions == "sinusoids" else " (the checkpoint stores no table)")
        self.device = device if device is not None else process_device()
        self.dtype = model_dtype(dtype, self.device)
        self.net = net.to(self.device, self.dtype).eval()
        self.features = WhisperFeatureExtractor(feature_size=net.num_mel_bins, sampling_rate=SR, chunk_length=MAX_SECONDS)
        self._torch = torch
        self._item_bytes: float | None = None

    @property
    def labels(self) -> list[str] | None:
        """Class names stored in ``config.json`` (``labels`` or ``id2label``), if any."""
        if isinstance(self.config.get("labels"), list):
            return [str(x) for x in self.config["labels"]]
        if isinstance(self.config.get("id2label"), dict):
            d = self.config["id2label"]
            return [str(d.get(str(i), d.get(i))) for i in range(len(d))]
        return None

    def batch_size(self, option: int | str | None = "auto") -> int:
        """Clips per forward pass: ``option`` as given, or ``"auto"``: from the free memory of a
        CUDA device (every input is 1500 frames, so one probe of 2 clips gives the cost of one;
        measured once), 8 on CPU. See :func:`spear_metrics.core.batching.batch_size_for`."""
        from spear_metrics.core.batching import batch_size_for, peak_bytes_per_item

        def per_item() -> float:
            if self._item_bytes is None:
                probe = [np.zeros(MAX_SECONDS * SR, np.float32)] * 2
                self._item_bytes = peak_bytes_per_item(lambda k: self.predict(probe[:k], batch_size=k), self.device, 2)
            return self._item_bytes

        return batch_size_for(option, self.device, per_item)

    def predict(self, waves: Sequence[np.ndarray], *, batch_size: int | str | None = 8,
                padding: str = "audio") -> list[dict[str, np.ndarray] | None]:
        """Head outputs for mono 16 kHz waves (each ``(n,)`` float32).

        Args:
            waves: mono 16 kHz float32 arrays.
            batch_size: waves per forward pass (grouped by length), or ``"auto"`` (:meth:`batch_size`).
            padding: ``"audio"`` (waveform cut/padded to 15 s before the log-mel, the wrapper's
                ``forward``) or ``"mel"`` (log-mel of the whole waveform, frames cut/zero-padded
                to 1500, SPEAR's ``forward_fast``); see the module docstring. Either way only
                the first 15 s reach the encoder, and every input is 1500 frames, so a result
                does not depend on its batch.

        Returns:
            One dict per wave: head name -> ``(k,)`` array (dialect logits, or a one-element
            A/V/D score in [0, 1]) and ``embedding`` ``(hidden_dim,)``. With ``padding="mel"``
            an empty wave gives ``None`` (SPEAR writes no score for it); with ``"audio"`` it is
            scored as 0.1 s of silence.

        Raises:
            ValueError: unknown ``padding``; a wave too short for Whisper's STFT (fewer than
                201 samples) with ``padding="mel"``.
        """
        from spear_metrics.core.batching import duration_batches

        if padding not in ("audio", "mel"):
            raise ValueError(f"padding must be 'audio' or 'mel', got {padding!r}")
        torch = self._torch
        waves = [np.asarray(w, dtype=np.float32).reshape(-1) for w in waves]
        if padding == "audio":
            waves = [(w[: MAX_SECONDS * SR] if len(w) else np.zeros(SR // 10, np.float32)) for w in waves]
        out: list[dict[str, np.ndarray] | None] = [None] * len(waves)
        todo = [i for i, w in enumerate(waves) if len(w)]
        size = self.batch_size(batch_size)
        for idx in duration_batches([min(len(waves[i]), MAX_SECONDS * SR) for i in todo], max_items=size):
            batch = [waves[todo[k]] for k in idx]
            if padding == "audio":
                feats = self.features(batch, sampling_rate=SR, return_tensors="pt").input_features
            else:
                feats = torch.stack([self._whole_mel(w) for w in batch])
            # frames the pooling averages (the wrapper's _get_feat_extract_output_lengths, capped at 750
            # by the slicing; forward_fast takes at least the first frame)
            lo = 1 if padding == "mel" else 0
            n = torch.tensor([min(MAX_POSITIONS, max(lo, (len(w) // 160 - 1) // 2 + 1)) for w in batch])
            with torch.inference_mode():
                res = self.net(feats.to(self.device, self.dtype), n.to(self.device))
            res = {k: v.float().cpu().numpy() for k, v in res.items()}
            for j, k in enumerate(idx):
                out[todo[k]] = {name: v[j] for name, v in res.items()}
        return out

    def _whole_mel(self, wave: np.ndarray):
        """Log-mel ``(mels, 1500)`` of the whole ``wave`` (its own length and normalisation),
        cut to 1500 frames or padded with zeros, as SPEAR's ``forward_fast``."""
        torch = self._torch
        if len(wave) <= 200:  # Whisper's centred STFT reflects n_fft // 2 samples
            raise ValueError(f"audio of {len(wave)} samples is too short for the Whisper log-mel (needs > 200)")
        f = self.features(wave, sampling_rate=SR, padding="longest", truncation=False,
                          return_tensors="pt").input_features[0]
        frames = 2 * MAX_POSITIONS
        if f.shape[-1] >= frames:
            return f[:, :frames]
        return torch.nn.functional.pad(f, (0, frames - f.shape[-1]))


def _load_state(path: Path, purpose: str, model: str) -> dict:
    import torch

    st = path / "model.safetensors"
    if st.exists():
        from safetensors.torch import load_file

        return load_file(str(st))
    pt = path / "pytorch_model.bin"
    if pt.exists():
        return torch.load(str(pt), map_location="cpu", weights_only=True)
    raise ModelUnavailableError(f"{purpose} model {model!r}: no model.safetensors or pytorch_model.bin in {path}")


def save_vox_whisper(net, config: dict[str, Any], folder: str | Path) -> Path:
    """Write a head in the checkpoint layout this module reads (used by tests and tools)."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(folder / "model.safetensors"))
    return folder


def build_random(config: dict[str, Any], heads: Sequence[str], seed: int = 0):
    """A randomly initialised head of the real architecture (tests, benchmarks)."""
    import torch

    torch.manual_seed(seed)
    net = _build(config, heads)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if "lora_" in name:
                p.normal_(0, 0.02)
    return net


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Natural-log probabilities of a logit vector ``(k,)`` (numerically stable)."""
    x = np.asarray(logits, dtype=np.float64)
    m = x.max()
    return x - (m + math.log(np.exp(x - m).sum()))
