"""Voice activity detection: Silero VAD, with the timings upstream SPEAR and FDB use.

Upstream calls ``silero_vad.get_speech_timestamps(wav16k, load_silero_vad(), return_seconds=True)``
with library defaults, so segment times are seconds rounded to 0.1 s (``time_resolution=1``).
That is the default here so scores compare with the published tables; ``time_resolution=3``
gives millisecond times.

Backends (all ship inside the ``silero-vad`` wheel, no download):

- ``"sequence"`` (default): the library's batched ONNX front end (``load_silero_vad(sequence=True)``
  + ``get_speech_timestamps_sequence``): one ONNX call per block of frames, the same per-frame
  probabilities as the streaming ONNX model and the same state machine
  (``get_speech_timestamps_from_probs``). ~8x faster than the streaming loop here.
- ``"jit"``: the streaming TorchScript model and ``get_speech_timestamps``, exactly upstream's call.
"""

from __future__ import annotations

import threading
from typing import Literal, Sequence

import numpy as np

from spear_datasets.audio import TARGET_SR

Segment = tuple[float, float]
Backend = Literal["sequence", "jit"]

_MODELS: dict[str, object] = {}
_LOCK = threading.Lock()

#: Defaults of ``silero_vad.get_speech_timestamps`` (silero-vad 5/6), listed for the record.
SILERO_DEFAULTS = {
    "threshold": 0.5,
    "min_speech_duration_ms": 250,
    "min_silence_duration_ms": 100,
    "speech_pad_ms": 30,
}


def _model(backend: Backend):
    with _LOCK:
        if backend not in _MODELS:
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
                raise ValueError(f"unknown VAD backend {backend!r} (use 'sequence' or 'jit')")
        return _MODELS[backend]


def speech_segments(
    wav: np.ndarray,
    *,
    sr: int = TARGET_SR,
    backend: Backend = "sequence",
    time_resolution: int = 1,
) -> list[Segment]:
    """Speech segments of one mono 16 kHz waveform.

    Args:
        wav: ``float32`` samples, shape ``(n,)`` or ``(1, n)``, at ``sr`` = 16000 Hz.
        backend: ``"sequence"`` or ``"jit"`` (see module docstring).
        time_resolution: decimals of the returned seconds (1 = upstream's 0.1 s).

    Returns:
        ``[(start_s, end_s), ...]`` in seconds, sorted, non-overlapping.

    Raises:
        ValueError: not mono, or a rate other than 16 kHz.
    """
    x = np.asarray(wav, dtype=np.float32)
    if x.ndim == 2 and x.shape[0] == 1:
        x = x[0]
    if x.ndim != 1:
        raise ValueError(f"VAD needs mono audio, got shape {x.shape}")
    if sr != TARGET_SR:
        raise ValueError(f"VAD runs on {TARGET_SR} Hz audio, got {sr} Hz")
    model = _model(backend)
    if backend == "sequence":
        from silero_vad import get_speech_timestamps_sequence

        ts = get_speech_timestamps_sequence(x, model, return_seconds=True, time_resolution=time_resolution)
    else:
        import torch
        from silero_vad import get_speech_timestamps

        with _LOCK, torch.no_grad():  # the streaming model keeps state: one caller at a time
            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # as upstream runs it (silero_vad's import sets one thread)
            try:
                ts = get_speech_timestamps(torch.from_numpy(x), model, return_seconds=True, time_resolution=time_resolution)
            finally:
                torch.set_num_threads(threads)
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
