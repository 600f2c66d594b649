"""Voice activity detection: Silero VAD, with the timings upstream SPEAR and FDB use.

Upstream calls ``silero_vad.get_speech_timestamps(wav16k, load_silero_vad(), return_seconds=True)``
with library defaults, so segment times are seconds rounded to 0.1 s (``time_resolution=1``).
That is the default here so scores compare with the published tables; ``time_resolution=3``
gives millisecond times.

Backends (all ship inside the ``silero-vad`` wheel, no download). Each computes Silero's per-frame
speech probabilities (one per 512 samples) and hands them to the library's own state machine
(``get_speech_timestamps_from_probs``, the one ``get_speech_timestamps`` ends with):

- ``"batched"`` (default): upstream's TorchScript model (``silero_vad.jit``, the weights
  ``load_silero_vad()`` loads), its stateless front end (STFT and the four convolutions) run on
  every frame of a block at once and its LSTM over the block in one ``torch.lstm`` call
  (:func:`speech_probabilities`). Same weights and operations as the streaming call; batched
  kernels sum in another order, so a probability differs from the streaming one by at most
  ~1e-5 (measured: ``scripts/check_vad_backends.py``), as the ONNX model's do.
- ``"sequence"``: the library's batched ONNX front end (``load_silero_vad(sequence=True)``
  + ``get_speech_timestamps_sequence``): one ONNX call per block of frames, the streaming ONNX
  model's probabilities.
- ``"jit"``: the streaming TorchScript model and ``get_speech_timestamps``, exactly upstream's call
  (one ``model(chunk)`` per 32 ms frame; ~6x slower than ``"batched"``).

All three give the same segments on every fixture and on the 2,725 rows of
``scripts/bench_full_split.py``; ``"jit"`` is the reference when a run must be upstream's to the bit.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Literal, Sequence

import numpy as np

from spear_datasets.audio import TARGET_SR

Segment = tuple[float, float]
Backend = Literal["batched", "sequence", "jit"]
#: the backend a run uses unless told otherwise
DEFAULT_BACKEND: Backend = "batched"
BACKENDS: tuple[str, ...] = ("batched", "sequence", "jit")

_MODELS: dict[str, object] = {}
_LOCK = threading.Lock()

#: Defaults of ``silero_vad.get_speech_timestamps`` (silero-vad 5/6), listed for the record.
SILERO_DEFAULTS = {
    "threshold": 0.5,
    "min_speech_duration_ms": 250,
    "min_silence_duration_ms": 100,
    "speech_pad_ms": 30,
}


class BatchedSilero:
    """Silero VAD's 16 kHz network with upstream's TorchScript weights, run block by block.

    The streaming model (``silero_vad.jit``) maps each 32 ms frame (512 samples, prefixed by the
    previous frame's last 64 samples) through a stateless front end (reflect-padded STFT as a
    258 x 256 convolution, magnitude, four Conv1d + ReLU) and then one LSTM cell whose state runs
    from frame to frame, followed by ReLU, a 1x1 convolution and a sigmoid. Only the LSTM is
    sequential: here the front end runs on up to ``block_frames`` frames in one batch and the
    LSTM over them in one ``torch.lstm`` call, its state carried to the next block. Torch ops
    release the GIL, so samples scored in threads run side by side.
    """

    FRAME = 512
    CONTEXT = 64

    def __init__(self, jit_model, *, block_frames: int = 2048):
        import torch

        m = jit_model._model  # the 16 kHz network of the TorchScript package
        params = dict(m.named_parameters())
        self.basis = m.stft.forward_basis_buffer.detach().clone()  # (258, 1, 256)
        self.convs = [(params[f"encoder.{i}.reparam_conv.weight"].detach().clone(),
                       params[f"encoder.{i}.reparam_conv.bias"].detach().clone(), stride)
                      for i, stride in enumerate((1, 2, 2, 1))]
        self.lstm = tuple(params[f"decoder.rnn.{k}"].detach().clone() for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
        self.out_w = params["decoder.decoder.2.weight"].detach().clone()  # (1, 128, 1)
        self.out_b = params["decoder.decoder.2.bias"].detach().clone()
        self.block_frames = int(block_frames)
        self._torch = torch

    def probabilities(self, wav: np.ndarray) -> np.ndarray:
        """Per-frame speech probabilities ``(ceil(n / 512),)`` float32 of 16 kHz mono ``(n,)``
        float32 samples; the last frame is zero-padded, as ``get_speech_timestamps`` pads it."""
        torch = self._torch
        F = torch.nn.functional
        x = torch.from_numpy(np.ascontiguousarray(wav, dtype=np.float32))
        n_frames = -(-x.numel() // self.FRAME)
        if n_frames == 0:
            return np.zeros(0, dtype=np.float32)
        padded = torch.zeros(self.CONTEXT + n_frames * self.FRAME)
        padded[self.CONTEXT:self.CONTEXT + x.numel()] = x  # zeros before the first frame: the streaming model's initial context
        state = (torch.zeros(1, 1, 128), torch.zeros(1, 1, 128))
        out = []
        with torch.inference_mode():
            for first in range(0, n_frames, self.block_frames):
                k = min(self.block_frames, n_frames - first)
                span = padded[first * self.FRAME: (first + k) * self.FRAME + self.CONTEXT]
                frames = span.unfold(0, self.FRAME + self.CONTEXT, self.FRAME)  # (k, 576): context + frame
                # the STFT's reflect padding (64 samples on the right), as torch.cat: the same values, 5x faster than F.pad
                frames = torch.cat([frames, frames[:, 511:575].flip(1)], 1).unsqueeze(1)  # (k, 1, 640)
                h = F.conv1d(frames, self.basis, None, 128)
                h = torch.sqrt(h[:, :129] ** 2 + h[:, 129:] ** 2)  # (k, 129, 4)
                for w, b, stride in self.convs:
                    h = F.relu(F.conv1d(h, w, b, stride, 1))
                seq, hn, cn = torch.lstm(h.reshape(k, 1, 128), state, self.lstm, True, 1, 0.0, False, False, False)
                state = (hn, cn)
                logit = F.conv1d(F.relu(seq.reshape(k, 128, 1)), self.out_w, self.out_b)
                out.append(torch.sigmoid(logit).reshape(k))
        return torch.cat(out).numpy()


def _model(backend: Backend):
    """The process's Silero model for ``backend`` (loaded once, shared by every dimension)."""
    with _LOCK:
        if backend not in _MODELS:
            if backend not in BACKENDS:
                raise ValueError(f"unknown VAD backend {backend!r} (use one of {', '.join(BACKENDS)})")
            import torch

            threads = torch.get_num_threads()
            from silero_vad import load_silero_vad

            # importing silero_vad calls torch.set_num_threads(1) for the whole process, which would
            # leave the model-based dimensions of the same run (turn-taking, emotions...) on one core
            torch.set_num_threads(threads)

            if backend == "sequence":
                _MODELS[backend] = load_silero_vad(sequence=True)
            elif backend == "jit":
                _MODELS[backend] = load_silero_vad()
            else:
                import warnings

                with warnings.catch_warnings():  # torch.jit.load's deprecation notice
                    warnings.simplefilter("ignore", FutureWarning)
                    _MODELS[backend] = BatchedSilero(load_silero_vad())
        return _MODELS[backend]


def speech_probabilities(wav: np.ndarray, *, backend: Backend = DEFAULT_BACKEND) -> np.ndarray:
    """Silero's per-frame speech probabilities of 16 kHz mono audio.

    Args:
        wav: ``float32`` samples, shape ``(n,)``, at 16000 Hz.
        backend: see the module docstring.

    Returns:
        ``(ceil(n / 512),)`` probabilities in [0, 1] (``float32``; ``float64`` from ``"jit"``).
    """
    x = np.ascontiguousarray(wav, dtype=np.float32).reshape(-1)
    model = _model(backend)
    if backend == "batched":
        return model.probabilities(x)
    if backend == "sequence":
        return model.audio_forward(x, sampling_rate=TARGET_SR)
    import torch

    t = torch.from_numpy(x)
    probs = []
    with _upstream_call():
        model.reset_states()
        for i in range(0, len(x), 512):  # get_speech_timestamps' loop
            chunk = t[i:i + 512]
            if len(chunk) < 512:
                chunk = torch.nn.functional.pad(chunk, (0, 512 - len(chunk)))
            probs.append(model(chunk, TARGET_SR).item())
    return np.asarray(probs, dtype=np.float64)


@contextlib.contextmanager
def _upstream_call():
    """The streaming model as upstream runs it: one caller at a time (it keeps state), no
    autograd, one torch thread (silero_vad's import sets one); the thread count is restored."""
    import torch

    from spear_metrics.core.batching import one_torch_thread

    with _LOCK, torch.no_grad(), one_torch_thread():
        yield


def speech_timestamps(wav: np.ndarray, *, backend: Backend = DEFAULT_BACKEND, **kwargs: Any) -> list[dict[str, float]]:
    """THE Silero call of the project: ``get_speech_timestamps``'s result for 16 kHz mono audio.

    Args:
        wav: ``float32`` samples ``(n,)`` at 16000 Hz.
        backend: ``"batched"``, ``"sequence"`` or ``"jit"`` (module docstring). ``"jit"`` is
            upstream's own call, ``silero_vad.get_speech_timestamps(wav, load_silero_vad(), ...)``,
            on one torch thread as upstream runs it; the others feed their probabilities to the
            same state machine, ``get_speech_timestamps_from_probs``.
        **kwargs: ``get_speech_timestamps``'s keyword arguments (threshold, min_speech_duration_ms,
            min_silence_duration_ms, speech_pad_ms, return_seconds, time_resolution...), library
            defaults for those not given (:data:`SILERO_DEFAULTS`).

    Returns:
        ``[{"start": ..., "end": ...}, ...]`` in samples, or seconds with ``return_seconds=True``.

    Raises:
        ValueError: an unknown backend.
    """
    x = np.ascontiguousarray(wav, dtype=np.float32).reshape(-1)
    model = _model(backend)
    if backend == "jit":
        import torch
        from silero_vad import get_speech_timestamps

        with _upstream_call():
            return get_speech_timestamps(torch.from_numpy(x), model, sampling_rate=TARGET_SR, **kwargs)
    from silero_vad.utils_vad import get_speech_timestamps_from_probs

    probs = speech_probabilities(x, backend=backend)
    return get_speech_timestamps_from_probs(probs, sampling_rate=TARGET_SR, audio_length_samples=len(x), step=1, **kwargs)


def speech_segments(
    wav: np.ndarray,
    *,
    sr: int = TARGET_SR,
    backend: Backend = DEFAULT_BACKEND,
    time_resolution: int = 1,
) -> list[Segment]:
    """Speech segments of one mono 16 kHz waveform, with the library defaults upstream uses
    (``get_speech_timestamps(wav, model, return_seconds=True)``).

    Args:
        wav: ``float32`` samples, shape ``(n,)`` or ``(1, n)``, at ``sr`` = 16000 Hz.
        backend: ``"batched"``, ``"sequence"`` or ``"jit"`` (see module docstring).
        time_resolution: decimals of the returned seconds (1 = upstream's 0.1 s).

    Returns:
        ``[(start_s, end_s), ...]`` in seconds, sorted, non-overlapping.

    Raises:
        ValueError: not mono, a rate other than 16 kHz, or an unknown backend.
    """
    x = np.asarray(wav, dtype=np.float32)
    if x.ndim == 2 and x.shape[0] == 1:
        x = x[0]
    if x.ndim != 1:
        raise ValueError(f"VAD needs mono audio, got shape {x.shape}")
    if sr != TARGET_SR:
        raise ValueError(f"VAD runs on {TARGET_SR} Hz audio, got {sr} Hz")
    ts = speech_timestamps(x, backend=backend, return_seconds=True, time_resolution=time_resolution)
    return [(float(t["start"]), float(t["end"])) for t in ts]


def intersect_segments(a: Sequence[Segment], b: Sequence[Segment]) -> list[Segment]:
    """The spans (s) during which a segment of ``a`` and a segment of ``b`` are both active, in
    time order. Both lists must be internally non-overlapping (as VAD output is). Two-pointer sweep.
    """
    a = sorted(a)
    b = sorted(b)
    i = j = 0
    out: list[Segment] = []
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if hi > lo:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def total_length(segs: Sequence[Segment]) -> float:
    """Summed length (s) of non-overlapping segments, added in order."""
    total = 0.0
    for lo, hi in segs:
        total += hi - lo
    return total



def clip_segments(segs: Sequence[Segment], lo: float, hi: float) -> list[Segment]:
    """Segments clipped to ``[lo, hi]`` seconds; empty ones dropped."""
    out = []
    for s, e in segs:
        s2, e2 = max(s, lo), min(e, hi)
        if e2 > s2:
            out.append((s2, e2))
    return out


def shift_segments(segs: Sequence[Segment], offset: float) -> list[Segment]:
    """Segments moved by ``offset`` seconds."""
    return [(s + offset, e + offset) for s, e in segs]
