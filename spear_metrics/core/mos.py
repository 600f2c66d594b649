"""MOS (mean opinion score) predictors of SPEARBench. Each backend writes its OWN keys.

API::

    mos = load_mos("dnsmos")                 # or "distillmos", "utmos"
    mos.keys                                 # ("DNSMOS_OVRL", "DNSMOS_SIG", "DNSMOS_BAK", "DNSMOS_P808")
    mos.score([wave, ...], sr=16000)         # list[dict[key, float | None]]

``wave``: 1-D float32 mono; other rates are resampled to 16 kHz with soxr; values outside
[-1, 1] are clipped. An empty wave scores ``None`` for every key. Scores are per wave, one by
one (padding a batch shifts UTMOS and DistillMOS scores; DNSMOS is an ONNX model on 9 s windows).

Memory against the answer's length (``scripts/bench_scorer_memory.py``): DNSMOS reads 9.01 s
windows one at a time (its library's loop); DistillMOS reads its package's own windows (7.68 s,
hop at most 1 s) :attr:`DistillMOS.window_batch` at a time instead of all in one batch (its
package's forward stacks every window of the answer: 2.2 GB at 30 s, 4.1 GB at 60 s), the mean
over the same windows; UTMOS22 reads the whole answer in one pass (its own recipe and SPEAR's:
no windows), whose memory grows with the square of the length, so an answer longer than
:attr:`UTMOS22.max_seconds` gets no UTMOS (``None``, :meth:`MOSBackend.skip_reason` says why).

Backends (:data:`MOS_BACKENDS`):

- ``utmos`` -> ``UTMOS``: UTMOS22 "strong" learner (Saeki et al., VoiceMOS 2022; upstream SPEAR
  uses ``torch.hub`` ``tarepan/SpeechMOS:v1.2.0`` ``utmos22_strong``, a port of the same
  checkpoint). Model code: PyPI ``utmos-pytorch==0.1.0`` (fairseq-free port of
  ``sarulab-speech/UTMOS22``, validated by its author against the original). Weights: its
  converted state dict ``utmos_state_dict.pt`` from the Hub repo ``Blinorot/UTMOS-PyTorch`` or
  a local file / folder, through :func:`resolve_model`. Score = mean over frames of the
  projection x 2 + 3, domain 0, judge 288 (as upstream). Not embedded: weights are not on PyPI.
- ``dnsmos`` -> ``DNSMOS_OVRL``, ``DNSMOS_SIG``, ``DNSMOS_BAK``, ``DNSMOS_P808``: Microsoft DNSMOS
  (P.835 ``sig_bak_ovr.onnx`` + P.808 ``model_v8.onnx``), ONNX files shipped in PyPI
  ``speechmos==0.0.1.1``; waves shorter than 9.01 s are tiled as the library does.
- ``distillmos`` -> ``DistillMOS``: DistillMOS v7 (Stahl & Gamper 2025), weights shipped in PyPI
  ``distillmos==0.9.1``; 1-5 scale.

Models load lazily on the first :meth:`MOSBackend.score`, through ``resolve_model``.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from spear_metrics.core.batching import device_or_default
from spear_metrics.core.models import ModelUnavailableError, package_file, resolve_model

MOS_SR = 16000
#: longest answer (s) UTMOS22 scores by default: whole-answer memory (quadratic in the length) stays
#: near 4 GB on CPU; SPEAR's answers are human turns (mean 8.8 s in the published table)
UTMOS_MAX_SECONDS = 180.0


def _prep(w: np.ndarray, sr: int) -> np.ndarray:
    a = np.asarray(w, dtype=np.float32).reshape(-1)
    if sr != MOS_SR and a.size:
        import soxr

        a = soxr.resample(a, sr, MOS_SR).astype(np.float32)
    return np.clip(a, -1.0, 1.0)


class MOSBackend:
    """Base class: ``name``, ``keys`` (the summary/per-sample keys it writes), :meth:`describe`, :meth:`score`."""

    name: str = "mos"
    keys: tuple[str, ...] = ()
    #: longest wave (s) the backend scores; longer ones get ``None`` (:meth:`skip_reason`)
    max_seconds: float | None = None

    def describe(self) -> str:
        """Model id / package and version, for the summary's ``models``."""
        return self.name

    def load(self) -> None:
        """Load now (else on first :meth:`score`). Raises :class:`ModelUnavailableError` (one line)."""

    def _one(self, wave: np.ndarray) -> dict[str, float]:
        raise NotImplementedError

    def skip_reason(self, n_samples: int, sr: int = MOS_SR) -> str | None:
        """Why a wave of ``n_samples`` at ``sr`` Hz gets no score from this backend (one line),
        or ``None`` when it is scored: longer than :attr:`max_seconds`."""
        if self.max_seconds is not None and n_samples / sr > self.max_seconds:
            return (f"{', '.join(self.keys)} not computed for answers longer than {self.max_seconds:g} s "
                    f"({self.name} reads the whole answer at once: memory grows with the square of its length)")
        return None

    def score(self, waves: Sequence[np.ndarray], sr: int = MOS_SR) -> list[dict[str, float | None]]:
        """One dict ``{key: MOS (1-5 scale) or None}`` per wave (``None`` for an empty wave and
        for one :meth:`skip_reason` refuses).

        Raises:
            ModelUnavailableError: the model cannot be loaded.
        """
        self.load()
        out = []
        for w in waves:
            if self.skip_reason(int(np.asarray(w).size), sr) is not None:
                out.append({k: None for k in self.keys})
                continue
            a = _prep(w, sr)
            out.append({k: None for k in self.keys} if a.size == 0 else self._one(a))
        return out


class DNSMOS(MOSBackend):
    """DNSMOS P.835 (SIG, BAK, OVRL, polynomial-mapped) and P.808 MOS from ``speechmos``'s ONNX files.

    Args:
        personalized: use the personalised P.835 model (``pdnsmos_models``), as ``speechmos``.
        threads: ONNX Runtime intra-op threads (0 = its default).
    """

    name = "dnsmos"
    keys = ("DNSMOS_OVRL", "DNSMOS_SIG", "DNSMOS_BAK", "DNSMOS_P808")

    def __init__(self, personalized: bool = False, threads: int = 0, **_: Any):
        self.personalized = bool(personalized)
        self.threads = int(threads)
        self._model = None

    def describe(self) -> str:
        from importlib.metadata import version

        try:
            v = version("speechmos")
        except Exception:
            v = "?"
        return f"DNSMOS P.835{' personalized' if self.personalized else ''} + P.808 (ONNX, speechmos=={v})"

    def load(self) -> None:
        if self._model is not None:
            return
        folder = package_file("speechmos", "pdnsmos_models" if self.personalized else "dnsmos_models")
        p808 = package_file("speechmos", "dnsmos_models", "model_v8.onnx")
        if folder is None or p808 is None:
            raise ModelUnavailableError("DNSMOS model is unavailable: pip install speechmos==0.0.1.1 (ships the ONNX files)")
        import onnxruntime as ort
        from speechmos.dnsmos import DNSMOS as _D

        primary = resolve_model(folder / "sig_bak_ovr.onnx", purpose="DNSMOS")
        p808 = resolve_model(p808, purpose="DNSMOS P.808")
        model = _D.__new__(_D)
        opts = ort.SessionOptions()
        if self.threads:
            opts.intra_op_num_threads = self.threads
        model.primary_model_path = str(primary)
        model.onnx_sess = ort.InferenceSession(str(primary), opts, providers=["CPUExecutionProvider"])
        model.p808_onnx_sess = ort.InferenceSession(str(p808), opts, providers=["CPUExecutionProvider"])
        self._model = model

    def _one(self, wave: np.ndarray) -> dict[str, float]:
        r = self._model(wave, MOS_SR, self.personalized)
        return {"DNSMOS_OVRL": float(r["ovrl_mos"]), "DNSMOS_SIG": float(r["sig_mos"]),
                "DNSMOS_BAK": float(r["bak_mos"]), "DNSMOS_P808": float(r["p808_mos"])}


class DistillMOS(MOSBackend):
    """DistillMOS v7 (``distillmos.ConvTransformerSQAModel``) with the weights shipped in the wheel.

    The package's own recipe for an answer of any length (its ``forward`` with
    ``segmenting_in_forward``): windows of ``SEQ_LEN`` samples (7.68 s; a shorter answer is
    zero-padded to one window) starting at ``int(c * (n - SEQ_LEN))`` for ``c`` in
    ``linspace(0, 1, ceil((n - SEQ_LEN) / MAX_HOP_LEN) + 1)`` (hops of at most 1 s), the score the
    mean of the windows' scores. The package runs every window in one batch (memory linear in
    the length: about 75 MB a window); here the same windows run :attr:`window_batch` at a time
    (:meth:`windows`), so memory is bounded whatever the length. The value equals the package's
    forward up to float rounding (the mean of the windows' ``1 + 4 q`` instead of ``1 + 4`` times
    the mean of ``q``; ``tests/test_scorer_memory.py``).

    Args:
        device: ``None`` = CUDA when available, else CPU.
        window_batch: windows per forward pass (>= 1).
    """

    name = "distillmos"
    keys = ("DistillMOS",)

    def __init__(self, device: str | None = None, window_batch: int = 4, **_: Any):
        self.device = device
        self.window_batch = max(1, int(window_batch))
        self._model = None

    @staticmethod
    def windows(n_samples: int) -> list[int]:
        """First sample of each window the package's recipe reads from an answer of
        ``n_samples`` samples (16 kHz); windows are ``SEQ_LEN`` long (a shorter answer: one
        window, zero-padded)."""
        from distillmos.sqa import MAX_HOP_LEN, SEQ_LEN

        over = max(0, int(n_samples) - SEQ_LEN)
        hops = int(np.ceil(over / MAX_HOP_LEN)) + 1
        return [int(c * over) for c in np.linspace(0, 1, hops)]

    def describe(self) -> str:
        from importlib.metadata import version

        try:
            v = version("distillmos")
        except Exception:
            v = "?"
        return f"DistillMOS v7 (distillmos=={v}, weights/distill_mos_v7.pt)"

    def load(self) -> None:
        if self._model is not None:
            return
        ckpt = package_file("distillmos", "weights", "distill_mos_v7.pt")
        if ckpt is None:
            raise ModelUnavailableError("DistillMOS model is unavailable: pip install distillmos==0.9.1 (ships the weights)")
        import torch
        from distillmos import ConvTransformerSQAModel

        ckpt = resolve_model(ckpt, purpose="DistillMOS")
        model = ConvTransformerSQAModel(load_weights=False, segmenting_in_forward=False)  # windows: _one
        model.load_state_dict(torch.load(ckpt, map_location="cpu", weights_only=True)["model"])
        for layer in model.modules():
            # each LeakyReLU of the spectrogram CNN overwrites its convolution's output, read by
            # nothing else: the same values without a copy of every feature map (~8% less CPU)
            if isinstance(layer, torch.nn.LeakyReLU):
                layer.inplace = True
        self._device = torch.device(device_or_default(self.device))
        self._model = model.to(self._device).eval()

    def _one(self, wave: np.ndarray) -> dict[str, float]:
        import torch
        from distillmos.sqa import SEQ_LEN

        if wave.size < SEQ_LEN:
            wave = np.pad(wave, (0, SEQ_LEN - wave.size))
        starts = self.windows(wave.size)
        scores = []
        with torch.inference_mode():
            for k in range(0, len(starts), self.window_batch):
                batch = np.stack([wave[s : s + SEQ_LEN] for s in starts[k : k + self.window_batch]])
                scores.append(self._model(torch.from_numpy(batch).to(self._device)).reshape(-1).float().cpu())
        return {"DistillMOS": float(torch.cat(scores).mean())}


class UTMOS22(MOSBackend):
    """UTMOS22 strong learner (``utmos_pytorch.UTMOSScoreTorch``), weights through ``resolve_model``.

    The whole answer goes through the model in one pass, as UTMOS22's own predictor and SPEAR
    (``tarepan/SpeechMOS`` on the whole answer) run it: UTMOS22 has no windowing recipe, and a
    mean over windows would be another number. Its wav2vec 2.0 attention makes memory grow with
    the square of the length (peak RSS on CPU, ``scripts/bench_scorer_memory.py``: 1.9 GB at 30 s,
    2.4 GB at 60 s, 4.2 GB at 180 s; 600 s would need tens of GB), so answers longer than
    ``max_seconds`` get no UTMOS (``None`` with the reason, :meth:`skip_reason`) rather than
    another rule under SPEAR's key.

    Args:
        model: Hub id (``Blinorot/UTMOS-PyTorch``), a folder holding ``utmos_state_dict.pt``, or the file.
        revision: Hub revision to pin.
        device: ``None`` = CUDA when available, else CPU.
        max_seconds: longest answer (s) scored (default :data:`UTMOS_MAX_SECONDS`).
    """

    name = "utmos"
    keys = ("UTMOS",)
    FILE = "utmos_state_dict.pt"

    def __init__(self, model: str = "Blinorot/UTMOS-PyTorch", revision: str | None = None, device: str | None = None,
                 max_seconds: float | None = None, **_: Any):
        self.model_ref = model or "Blinorot/UTMOS-PyTorch"
        self.revision = revision
        self.device = device
        self.max_seconds = float(max_seconds) if max_seconds else UTMOS_MAX_SECONDS
        self._model = None

    def describe(self) -> str:
        return (f"UTMOS22 strong (utmos-pytorch model code, weights {self.model_ref}"
                + (f"@{self.revision}" if self.revision else "") + f"/{self.FILE})")

    def load(self) -> None:
        if self._model is not None:
            return
        path = resolve_model(self.model_ref, revision=self.revision, purpose="UTMOS", allow_patterns=[self.FILE])
        if path.is_dir():
            path = path / self.FILE
        if not path.is_file():
            raise ModelUnavailableError(f"UTMOS model {self.model_ref!r}: {self.FILE} not found in {path.parent}")
        try:
            from utmos_pytorch import UTMOSScoreTorch
        except ImportError:
            raise ModelUnavailableError("UTMOS needs the model code: pip install utmos-pytorch==0.1.0") from None
        import torch

        device = device_or_default(self.device)
        model = UTMOSScoreTorch(ckpt_path=str(path), device=device)
        self._device = torch.device(device)
        self._model = model.eval()

    def _one(self, wave: np.ndarray) -> dict[str, float]:
        import torch

        with torch.inference_mode():
            x = torch.from_numpy(wave)[None, None].to(self._device)
            return {"UTMOS": float(self._model.score(x).reshape(-1)[0])}


#: name -> factory(**kw)
MOS_BACKENDS: dict[str, Callable[..., MOSBackend]] = {
    "dnsmos": DNSMOS,
    "distillmos": DistillMOS,
    "utmos": UTMOS22,
    "utmos22": UTMOS22,
}


def register_mos(name: str, factory: Callable[..., MOSBackend]) -> None:
    """Make ``load_mos(name, **kw)`` return ``factory(**kw)``; it must declare its own ``keys``."""
    MOS_BACKENDS[name] = factory


def load_mos(name: str = "dnsmos", **kw: Any) -> MOSBackend:
    """A MOS backend by name (nothing is loaded until it scores).

    Raises:
        ValueError: unknown backend (the message lists the known ones).
    """
    key = (name or "dnsmos").strip().lower()
    if key not in MOS_BACKENDS:
        raise ValueError(f"unknown MOS backend {name!r}; known: {', '.join(sorted(MOS_BACKENDS))}")
    return MOS_BACKENDS[key](**kw)
