"""Voice activity detection: Silero VAD, with the timings upstream SPEAR and FDB use.

Upstream calls ``silero_vad.get_speech_timestamps(wav16k, load_silero_vad(), return_seconds=True)``
with library defaults, so segment times are seconds rounded to 0.1 s (``time_resolution=1``).
That is the default here so scores compare with the published tables; ``time_resolution=3``
gives millisecond times.

Backends (all ship inside the ``silero-vad`` wheel, no download). Each computes Silero's per-frame
speech probabilities (one per 512 samples) and hands them to the library's own state machine
(``get_speech_timestamps_from_probs``, the one ``get_speech_timestamps`` ends with):

- ``"batched"`` (default): upstream's TorchScript model (``silero_vad.jit``, the weights
  ``load_silero_vad()`` loads), its stateless front end (STFT as an rfft, and the four convolutions
  as one dense matrix product each) run on every frame of a block at once and its LSTM over the
  block in one ``torch.lstm`` call (:class:`BatchedSilero`). Batched kernels sum in another order,
  so a probability differs from the streaming one (by at most 1.04e-5 on 118,477 frames,
  ``scripts/check_vad_backends.py --audio`` with the pool of ``scripts/bench_full_split.py``);
  a frame within :data:`EXACT_MARGIN` (1e-4) of a threshold could then decide otherwise, so the
  frames up to the last such one are recomputed bit for bit as upstream computes them on the
  same machine (:func:`exact_near_thresholds`; the last bits of a probability depend on the
  CPU's kernels, so another machine's upstream call can differ from this one's). The segments are then upstream's whenever the batched error
  stays below the margin (about 10x the largest seen, 1.04e-5; 8.8e-6 on the fixtures peak-normalised).
- ``"sequence"``: the library's batched ONNX front end (``load_silero_vad(sequence=True)``):
  the streaming ONNX model's probabilities, within 1.5e-5 of the TorchScript model's and no
  guard: a frame at a threshold can move a segment by a frame (``tests/test_vad_backends.py``).
- ``"jit"``: the streaming TorchScript model and ``get_speech_timestamps``, exactly upstream's call
  (one ``model(chunk)`` per 32 ms frame; about 16x the CPU of unguarded ``"batched"``, 12x of guarded).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Literal, Sequence, get_args

import numpy as np

from spear_datasets.audio import TARGET_SR

Segment = tuple[float, float]
Backend = Literal["batched", "sequence", "jit"]
#: the backend a run uses unless told otherwise
DEFAULT_BACKEND: Backend = "batched"
BACKENDS: tuple[str, ...] = get_args(Backend)

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
        self.window = self.basis[0, 0].clone()  # the basis' k = 0 row: its analysis window (256,)
        self.convs = [(params[f"encoder.{i}.reparam_conv.weight"].detach().clone(),
                       params[f"encoder.{i}.reparam_conv.bias"].detach().clone(), stride)
                      for i, stride in enumerate((1, 2, 2, 1))]
        self.lstm = tuple(params[f"decoder.rnn.{k}"].detach().clone() for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
        self.out_w = params["decoder.decoder.2.weight"].detach().clone()  # (1, 128, 1)
        self.out_b = params["decoder.decoder.2.bias"].detach().clone()
        self.block_frames = int(block_frames)
        self._torch = torch
        self._jit = jit_model  # upstream's streaming model: the reference of _batched_exact_holds
        # the batched pass's encoder: each convolution over a frame's 4 STFT columns as one dense
        # matrix, a frame's activations flattened time-major (column, channel)
        self._dense = []
        length = 4
        for w, b, stride in self.convs:
            m, length = _dense_conv_matrix(w, stride, 1, length)
            self._dense.append((m, b.repeat(length)))
        self._out_vec = self.out_w.reshape(-1).clone()  # (128,)

    def _signal(self, wav: np.ndarray, n_frames: int):
        """The first ``n_frames`` frames' samples as one tensor: 64 zeros (the streaming model's
        initial context), then the audio, zero-padded to whole frames (as
        ``get_speech_timestamps`` pads the last one)."""
        x = self._torch.from_numpy(np.ascontiguousarray(wav, dtype=np.float32))
        padded = self._torch.zeros(self.CONTEXT + n_frames * self.FRAME)
        m = min(x.numel(), n_frames * self.FRAME)
        padded[self.CONTEXT:self.CONTEXT + m] = x[:m]
        return padded

    def _frames(self, signal, first: int, k: int):
        """Frames ``first .. first + k - 1`` of :meth:`_signal` as the STFT reads them:
        ``(k, 1, 640)`` = the previous frame's last 64 samples, the frame, and the STFT's reflect
        padding (64 samples on the right; ``torch.cat`` copies the same values as ``F.pad``,
        5x faster)."""
        span = signal[first * self.FRAME: (first + k) * self.FRAME + self.CONTEXT]
        frames = span.unfold(0, self.FRAME + self.CONTEXT, self.FRAME)  # (k, 576): context + frame
        return self._torch.cat([frames, frames[:, 511:575].flip(1)], 1).unsqueeze(1)

    def _magnitudes(self, frames):
        """STFT magnitudes ``(k, 4, 129)`` (column, frequency) of frames ``(k, 1, 640)``: the four
        256-sample windows (hop 128) of each frame times the model's window (row 0 of its basis:
        a periodic Hann window), through ``torch.fft.rfft``. The model's basis is that window times
        the DFT's cos / -sin rows (to 5.7e-8), so this is its convolution computed as an FFT: 4.5x
        less CPU than the 258 x 256 convolution (``scripts/check_vad_backends.py`` bounds the result)."""
        torch = self._torch
        spec = torch.view_as_real(torch.fft.rfft(frames[:, 0].unfold(1, 256, 128) * self.window, dim=-1))
        power = spec * spec  # (k, 4, 129, 2): re^2, im^2
        return torch.add(power[..., 0], power[..., 1]).sqrt_()

    def probabilities(self, wav: np.ndarray) -> np.ndarray:
        """Per-frame speech probabilities ``(ceil(n / 512),)`` float32 of 16 kHz mono ``(n,)``
        float32 samples; the last frame is zero-padded, as ``get_speech_timestamps`` pads it."""
        torch = self._torch
        n_frames = -(-np.size(wav) // self.FRAME)
        if n_frames == 0:
            return np.zeros(0, dtype=np.float32)
        signal = self._signal(wav, n_frames)
        state = (torch.zeros(1, 1, 128), torch.zeros(1, 1, 128))
        out = []
        with torch.inference_mode():
            for first in range(0, n_frames, self.block_frames):
                k = min(self.block_frames, n_frames - first)
                h = self._magnitudes(self._frames(signal, first, k)).reshape(k, 4 * 129)
                for m, b in self._dense:  # the four Conv1d + ReLU, each one sgemm over the block
                    h = torch.addmm(b, h, m).relu_()
                seq, hn, cn = torch.lstm(h.reshape(k, 1, 128), state, self.lstm, True, 1, 0.0, False, False, False)
                state = (hn, cn)
                logit = torch.addmv(self.out_b, seq.reshape(k, 128).relu(), self._out_vec)  # the 1x1 convolution
                out.append(torch.sigmoid(logit))
        return torch.cat(out).numpy()

    def exact_probabilities(self, wav: np.ndarray, n_frames: int) -> np.ndarray:
        """The streaming model's probabilities of the first ``n_frames`` frames, bit for bit.

        Upstream calls the model once per frame, on one torch thread: each convolution is then
        torch's native convolution of one frame (im2col and one BLAS sgemm: oneDNN only takes
        batches of 2 and more), the LSTM cell one ``lstm_cell`` call and the output sigmoid a
        scalar ``exp``. Here each reduction runs with the same kernel on the same operands: the
        convolutions over all frames with one sgemm per frame (``aten._slow_conv2d_forward``), or
        per two frames where this machine's BLAS gives the same bits for that
        (:meth:`_conv_exact`, checked once per process); the LSTM cell frame by frame; the
        sigmoid on a strided view (the kernel's scalar loop). Element-wise steps whose IEEE
        results do not depend on the batch (padding copies, squares, sums, ``sqrt``, ReLU) run
        on all frames at once. One torch thread, as upstream (a kernel's choice and its sums can
        depend on the thread count).

        These kernel choices are torch's and the BLAS's, not a documented contract, so once per
        process :meth:`_batched_exact_holds` runs this path and upstream's streaming model on
        seeded frames; if any bit differs, every call here is upstream's own streaming loop instead
        (:func:`streaming_probabilities`, 2x slower). Frames go in
        blocks of ``block_frames`` (memory bounded by the block, not the file), the LSTM state
        carried across blocks.

        Returns ``(n_frames,)`` float32. About half the CPU of upstream's streaming call
        (``scripts/check_vad_backends.py`` counts the bit-identical frames against that call on
        every fixture).
        """
        from spear_metrics.core.batching import one_torch_thread

        torch = self._torch
        with torch.inference_mode(), one_torch_thread():
            if not self._batched_exact_holds():
                with _upstream_call():
                    return np.asarray(streaming_probabilities(self._jit, wav, n_frames), dtype=np.float32)
            signal = self._signal(wav, n_frames)
            state = (torch.zeros(1, 128), torch.zeros(1, 128))
            out = []
            for first in range(0, n_frames, self.block_frames):
                probs, state = self._exact_block(self._frames(signal, first, min(self.block_frames, n_frames - first)), state)
                out.append(probs)
            return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)

    def _exact_block(self, frames, state):
        """:meth:`exact_probabilities` of frames ``(k, 1, 640)`` from LSTM ``state`` ``(h, c)``:
        ``((k,) float32, state after them)``."""
        torch = self._torch
        F = torch.nn.functional
        w_ih, w_hh, b_ih, b_hh = self.lstm
        k = frames.shape[0]
        z = self._conv_exact(frames, self.basis, None, 128, 0)
        z = torch.sqrt(torch.pow(z[:, :129], 2) + torch.pow(z[:, 129:], 2))  # (k, 129, 4)
        for w, b, stride in self.convs:
            z = F.relu(self._conv_exact(z, w, b, stride, 1))
        enc = z.squeeze(-1)  # (k, 128)
        h, c = state
        hs = torch.empty(k, 128)
        for i in range(k):
            h, c = torch.lstm_cell(enc[i:i + 1], [h, c], w_ih, w_hh, b_ih, b_hh)
            hs[i] = h[0]
        logits = _native_conv1d(F.relu(hs).unsqueeze(-1), self.out_w, self.out_b, 1, 0)  # (k, 1, 1)
        strided = torch.empty(k, 2)
        strided[:, 0] = logits.reshape(k)
        # a one-element tensor takes the sigmoid kernel's scalar tail; a contiguous batch its
        # vectorised body, whose exp rounds differently: a strided view takes the scalar loop
        return torch.sigmoid(strided[:, 0]).numpy(), (h, c)

    #: whether the batched kernels of :meth:`exact_probabilities` give upstream's bits in this
    #: process (None: not checked yet)
    _EXACT_HOLDS: bool | None = None

    def _batched_exact_holds(self) -> bool:
        """Once per process: :meth:`_exact_block` and upstream's streaming model (``model(chunk)``
        per frame, the TorchScript package this class was built from) on 33 frames of seeded
        noise (odd: the pairing's single last frame too), speech-scaled and beyond full scale;
        ``True`` when every probability is bit-identical. About 20 ms."""
        if BatchedSilero._EXACT_HOLDS is None:
            torch = self._torch
            g = torch.Generator().manual_seed(0)
            ok = True
            for scale in (0.1, 3.0):
                wav = (torch.randn(33 * self.FRAME, generator=g) * scale).numpy()
                signal = self._signal(wav, 33)
                got, _ = self._exact_block(self._frames(signal, 0, 33), (torch.zeros(1, 128), torch.zeros(1, 128)))
                with _upstream_call():
                    ref = np.asarray(streaming_probabilities(self._jit, wav), dtype=np.float32)
                ok = ok and bool(np.array_equal(got, ref))
            BatchedSilero._EXACT_HOLDS = ok
        return BatchedSilero._EXACT_HOLDS

    #: per convolution (weight shape, stride, padding, input length, no bias): the kernel of
    #: :meth:`_conv_exact` that gives the batch-1 bits on this machine, ``"bmm"``, ``"pairs"`` or
    #: ``"native"`` (filled by :meth:`_conv_exact`)
    _PAIR_KERNEL: dict[tuple, str] = {}

    def _conv_exact(self, x, weight, bias, stride: int, padding: int):
        """``conv1d`` of frames ``x`` ``(k, C, L)`` with the bits of upstream's batch-1 calls.

        Two frames per sgemm where this machine's BLAS gives the same bits for that as for one
        frame: all the pairs in one ``torch.bmm`` (:func:`_paired_bmm_conv1d`: torch runs each
        batch entry as one sgemm) or, where that differs, one ``torch.mm`` per pair
        (:func:`_paired_conv1d`); else one frame per sgemm (:func:`_native_conv1d`). Which it is,
        is checked once per process and convolution on 64 frames of seeded noise: which kernel
        runs, and so its summation order, depends on the shapes, not on the data. MKL's
        small-``m`` kernel passes for the STFT and the first two encoder convolutions (``m`` =
        4 and 2 columns a frame) and fails for the last two (``m = 1``, its matrix-vector path).
        """
        torch = self._torch
        key = (tuple(weight.shape), stride, padding, x.shape[-1], bias is None)
        kernel = BatchedSilero._PAIR_KERNEL.get(key)
        if kernel is None:
            g = torch.Generator().manual_seed(0)
            probe = (torch.randn(64, *x.shape[1:], generator=g) * 0.3).clamp(-1, 1)
            native = _native_conv1d(probe, weight, bias, stride, padding)
            kernel = next((name for name, fn in (("bmm", _paired_bmm_conv1d), ("pairs", _paired_conv1d))
                           if torch.equal(fn(probe, weight, bias, stride, padding), native)), "native")
            BatchedSilero._PAIR_KERNEL[key] = kernel
        k = x.shape[0]
        if kernel == "native" or k < 2:
            return _native_conv1d(x, weight, bias, stride, padding)
        paired = _paired_bmm_conv1d if kernel == "bmm" else _paired_conv1d
        even = paired(x[:k - k % 2], weight, bias, stride, padding)
        return torch.cat([even, _native_conv1d(x[k - 1:], weight, bias, stride, padding)]) if k % 2 else even


def _dense_conv_matrix(weight, stride: int, padding: int, length: int):
    """A zero-padded ``conv1d`` over inputs of ``length`` columns as one dense matrix:
    ``(length * C, length_out * O)``, rows and columns time-major (``column * C + channel``), so
    that ``x.reshape(k, -1) @ matrix`` is the convolution of ``k`` inputs ``(k, length, C)``. Each
    entry is a weight or 0 (a tap on the padding); returns ``(matrix, length_out)``. For Silero's
    encoder (inputs of 4, 4, 2 and 1 columns) one sgemm per block is 2-3x faster than the
    convolution kernels on such short inputs, with the same products summed in another order."""
    import torch

    o, c, taps = weight.shape
    length_out = (length + 2 * padding - taps) // stride + 1
    m = torch.zeros(length, c, length_out, o)
    for j in range(length_out):
        for tap in range(taps):
            col = j * stride + tap - padding
            if 0 <= col < length:
                m[col, :, j, :] = weight[:, :, tap].t()
    return m.reshape(length * c, length_out * o), length_out


def _native_conv1d(x, weight, bias, stride: int, padding: int):
    """``conv1d`` of ``x`` ``(k, C, L)`` computed as ``k`` batch-1 calls compute it on one thread:
    torch's native convolution (``aten._slow_conv2d_forward``: im2col and one sgemm per sample,
    bias first, ``beta = 1``), the backend torch picks for one Silero frame (oneDNN takes
    batches of 2 and more, and sums in another order). ``(k, O, L_out)``."""
    import torch

    return torch.ops.aten._slow_conv2d_forward(x.unsqueeze(2), weight.unsqueeze(2), [1, weight.shape[-1]], bias,
                                               [1, stride], [0, padding]).squeeze(2)


def _im2col(x, taps: int, stride: int, padding: int):
    """The native convolution's im2col columns of frames ``x`` ``(k, C, L)``: ``(k, C * taps,
    L_out)``, rows ``c * taps + tap``, the frames zero-padded by ``padding`` on both sides."""
    import torch

    k, c, _ = x.shape
    if padding:
        x = torch.nn.functional.pad(x, (padding, padding))
    return x.unfold(2, taps, stride).permute(0, 1, 3, 2).reshape(k, c * taps, -1)


def _paired_conv1d(x, weight, bias, stride: int, padding: int):
    """``conv1d`` of an even number of frames ``x`` ``(k, C, L)``: the native convolution's
    im2col columns of two frames side by side, one ``torch.mm`` / ``torch.addmm`` (the same
    sgemm call with twice the columns) per pair. ``(k, O, L_out)``."""
    import torch

    cols = _im2col(x, weight.shape[-1], stride, padding)
    k, rows, m = cols.shape
    w2 = weight.reshape(weight.shape[0], -1)
    out = torch.empty(k, w2.shape[0], m)
    for i in range(0, k, 2):
        pair = cols[i:i + 2].permute(1, 0, 2).reshape(rows, 2 * m)
        r = torch.mm(w2, pair) if bias is None else torch.addmm(bias[:, None], w2, pair)
        out[i:i + 2] = r.reshape(-1, 2, m).transpose(0, 1)
    return out


def _paired_bmm_conv1d(x, weight, bias, stride: int, padding: int):
    """:func:`_paired_conv1d` with every pair in one ``torch.bmm`` / ``torch.baddbmm`` call
    (the sgemm of each pair run by torch's batch loop, without a Python loop). ``(k, O, L_out)``."""
    import torch

    cols = _im2col(x, weight.shape[-1], stride, padding)
    k, rows, m = cols.shape
    pairs = cols.reshape(k // 2, 2, rows, m).permute(0, 2, 1, 3).reshape(k // 2, rows, 2 * m)
    w2 = weight.reshape(weight.shape[0], -1).expand(k // 2, -1, -1)
    r = torch.bmm(w2, pairs) if bias is None else torch.baddbmm(bias[None, :, None], w2, pairs)
    return r.reshape(k // 2, -1, 2, m).transpose(1, 2).reshape(k, -1, m)


def check_backend(backend: str) -> None:
    """Raises ``ValueError`` (one line) unless ``backend`` is one of :data:`BACKENDS`."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown VAD backend {backend!r} (use one of {', '.join(BACKENDS)})")


def _model(backend: Backend):
    """The process's Silero model for ``backend`` (loaded once, shared by every dimension)."""
    with _LOCK:
        if backend not in _MODELS:
            check_backend(backend)
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


def _peak(x: np.ndarray) -> float:
    """``np.abs(x).max(initial=0.0)`` of float samples (NaN when a sample is NaN, inf when one is
    infinite) from the largest and the smallest sample, without an array of absolute values."""
    hi, lo = float(x.max(initial=0.0)), float(x.min(initial=0.0))
    if not (np.isfinite(hi) and np.isfinite(lo)):
        return float("nan") if np.isnan(hi) or np.isnan(lo) else float("inf")
    return max(hi, -lo)


def _mono(wav: np.ndarray) -> np.ndarray:
    """``wav`` as contiguous float32 ``(n,)``: ``(n,)`` or ``(1, n)`` in; anything else is refused
    (flattening a ``(2, n)`` stereo array would run the VAD on the channels end to end), as are
    samples above :data:`MAX_PEAK` (or NaN / inf).

    Raises:
        ValueError: not mono, or not audio-scaled.
    """
    x = np.asarray(wav, dtype=np.float32)
    if x.ndim == 2 and x.shape[0] == 1:
        x = x[0]
    if x.ndim != 1:
        raise ValueError(f"VAD needs mono audio, got shape {x.shape}")
    peak = _peak(x)
    if not np.isfinite(peak):
        raise ValueError("VAD input holds NaN or inf samples")
    if peak > MAX_PEAK:
        raise ValueError(f"VAD input (16 kHz mono, after any resampling) peaks at {peak:.7g}, above {MAX_PEAK:.0e}: "
                         "Silero's float32 STFT power would overflow into NaN probabilities (read as no speech); "
                         "the samples are not audio-scaled")
    return np.ascontiguousarray(x)


#: the largest |sample| the VAD takes: a frame's STFT sums 256 windowed samples and squares them in
#: float32 (max 3.4e38), so past 3.4e38 ** 0.5 / 256 = 7.2e16 probabilities can turn NaN (measured:
#: none at 1e17, 82 of 157 frames at 1e18, on real speech). Real files: |x| <= 1, int16 values
#: written as floats 32768, int32 values 2.1e9.
MAX_PEAK = 1e16


def speech_probabilities(wav: np.ndarray, *, backend: Backend = DEFAULT_BACKEND) -> np.ndarray:
    """Silero's per-frame speech probabilities of 16 kHz mono audio.

    Args:
        wav: ``float32`` samples, shape ``(n,)`` or ``(1, n)``, at 16000 Hz (``ValueError`` otherwise).
        backend: see the module docstring.

    Returns:
        ``(ceil(n / 512),)`` probabilities in [0, 1] (``float32``; ``float64`` from ``"jit"``).
    """
    x = _mono(wav)
    model = _model(backend)
    if backend == "batched":
        return model.probabilities(x)
    if backend == "sequence":
        return model.audio_forward(x, sampling_rate=TARGET_SR)
    with _upstream_call():
        return np.asarray(streaming_probabilities(model, x), dtype=np.float64)


def streaming_probabilities(model, x: np.ndarray, n_frames: int | None = None) -> list[float]:
    """Upstream's frame loop (``get_speech_timestamps``'): the streaming TorchScript ``model``
    reset, then one ``model(chunk)`` per 512 samples of ``x`` ``(n,)`` float32, the last chunk
    zero-padded; the first ``n_frames`` frames (default all). Python floats, as upstream hands
    them to its state machine. Call it inside :func:`_upstream_call` (the model keeps state)."""
    import torch

    t = torch.from_numpy(x)
    stop = len(x) if n_frames is None else min(len(x), n_frames * 512)
    probs = []
    model.reset_states()
    for i in range(0, stop, 512):
        chunk = t[i:i + 512]
        if len(chunk) < 512:
            chunk = torch.nn.functional.pad(chunk, (0, 512 - len(chunk)))
        probs.append(model(chunk, TARGET_SR).item())
    return probs


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
        wav: ``float32`` samples ``(n,)`` or ``(1, n)`` at 16000 Hz.
        backend: ``"batched"``, ``"sequence"`` or ``"jit"`` (module docstring). ``"jit"`` is
            upstream's own call, ``silero_vad.get_speech_timestamps(wav, load_silero_vad(), ...)``,
            on one torch thread as upstream runs it; the others feed their probabilities to the
            same state machine, ``get_speech_timestamps_from_probs``.
        **kwargs: the state machine's keyword arguments (``get_speech_timestamps_from_probs``:
            threshold, neg_threshold, min_speech_duration_ms, min_silence_duration_ms,
            speech_pad_ms, max_speech_duration_s, return_seconds, time_resolution...), library
            defaults for those not given (:data:`SILERO_DEFAULTS`); ``get_speech_timestamps``'
            own ``window_size_samples`` / ``progress_tracking_callback`` only with ``"jit"``.

    Returns:
        ``[{"start": ..., "end": ...}, ...]`` in samples, or seconds with ``return_seconds=True``.

    Raises:
        ValueError: an unknown backend, or audio that is not mono or beyond :data:`MAX_PEAK`.
    """
    x = _mono(wav)
    model = _model(backend)
    if backend == "jit":
        import torch
        from silero_vad import get_speech_timestamps

        with _upstream_call():
            return get_speech_timestamps(torch.from_numpy(x), model, sampling_rate=TARGET_SR, **kwargs)
    from silero_vad.utils_vad import get_speech_timestamps_from_probs

    if backend == "batched":
        threshold = float(kwargs.get("threshold", SILERO_DEFAULTS["threshold"]))
        neg = kwargs.get("neg_threshold")
        neg = max(threshold - 0.15, 0.01) if neg is None else float(neg)  # the library's rule
        probs = exact_near_thresholds(x, model, (threshold, neg))
    else:
        probs = speech_probabilities(x, backend=backend)
    # Python floats, as upstream's loop hands them (``model(chunk).item()``): a float32 array would
    # compare with the float64 thresholds in float32 (numpy 2 promotion) and 0.35 has no float32 value
    return get_speech_timestamps_from_probs(np.asarray(probs).tolist(), sampling_rate=TARGET_SR,
                                            audio_length_samples=len(x), step=1, **kwargs)


#: a batched probability this close to a threshold (or closer) is recomputed as upstream computes
#: it; the largest batched-vs-streaming difference seen is 1.04e-5 on the 289 signals of
#: ``scripts/check_vad_backends.py --audio`` with the full-split pool (118,477 frames), 8.8e-6 on the
#: fixtures peak-normalised (about 10x below the margin)
EXACT_MARGIN = 1e-4


def exact_near_thresholds(wav: np.ndarray, model: "BatchedSilero", thresholds: Sequence[float],
                          margin: float = EXACT_MARGIN) -> np.ndarray:
    """Batched probabilities that decide as upstream's do.

    The state machine only compares each probability with ``threshold`` (``>=``) and
    ``neg_threshold`` (``<``). A batched probability farther than ``margin`` from both gives the
    same comparisons as the streaming model's (they differ by far less than ``margin``). When a
    frame lies within ``margin`` of one, the frames up to the last such frame are recomputed bit
    for bit as the streaming model computes them (:meth:`BatchedSilero.exact_probabilities`:
    the LSTM state runs from the first frame); later frames keep their batched values. About 10 %
    of the audio is recomputed at the default margin (``scripts/check_vad_backends.py``).

    Audio beyond full scale (any ``|sample| > 1``, e.g. int16 values in a float file) is
    computed exactly whole, without a batched pass: there the batched error is not bounded by
    the margin.

    Args:
        wav: the 16 kHz mono samples ``(n,)`` float32.
        thresholds: the state machine's ``(threshold, neg_threshold)``.

    Returns:
        ``(frames,)`` probabilities whose comparisons with both thresholds are upstream's.
    """
    if _peak(wav) > 1.0:
        # the batched error grows with the amplitude (1.5e-3 at int16 scale written as floats,
        # found by the breaker pass): outside [-1, 1] no margin holds, so every frame is exact
        return model.exact_probabilities(wav, -(-np.size(wav) // model.FRAME))
    probs = model.probabilities(wav)
    p = probs.astype(np.float64)
    near = np.zeros(p.shape, dtype=bool)
    for t in thresholds:
        near |= np.abs(p - t) <= margin
    if not near.any():
        return probs
    last = int(np.flatnonzero(near)[-1]) + 1
    out = np.array(probs, dtype=np.float32)
    out[:last] = model.exact_probabilities(wav, last)
    return out


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
        ValueError: not mono, beyond :data:`MAX_PEAK`, a rate other than 16 kHz, or an unknown backend.
    """
    x = _mono(wav)
    if sr != TARGET_SR:
        raise ValueError(f"VAD runs on {TARGET_SR} Hz audio, got {sr} Hz")
    ts = speech_timestamps(x, backend=backend, return_seconds=True, time_resolution=time_resolution)
    return [(float(t["start"]), float(t["end"])) for t in ts]


def answer_speech_segments(sample, *, backend: Backend = DEFAULT_BACKEND, time_resolution: int = 1) -> list[Segment]:
    """:func:`speech_segments` of a sample's answer (16 kHz, channels averaged:
    ``Sample.answer_audio()``), computed once per sample and setting for every dimension of the
    run that asks (``interruptions``, ``distributional``).

    Raises:
        ValueError: as :func:`speech_segments`.
        spear_datasets.audio.AudioError: the answer cannot be decoded.
    """
    return sample.cached(answer_vad_key(backend, time_resolution),
                         lambda: speech_segments(sample.answer_audio(), backend=backend, time_resolution=time_resolution))


def answer_vad_key(backend: str, time_resolution: int) -> str:
    """The ``Sample.cached`` key of the answer's VAD segments for one setting: a dimension that
    computes them its own way (same call, same setting) stores them under it for the others."""
    return f"vad:answer:{backend}:{int(time_resolution)}"


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
