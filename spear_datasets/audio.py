"""THE audio loader of SPEARBench: every module that reads a waveform goes through here.

Decoding: libsndfile (``soundfile``: WAV, FLAC, OGG, MP3...) first, FFmpeg (``torchcodec``)
for anything libsndfile cannot read. Resampling: ``soxr`` (the resampler ``librosa`` uses) by
default, or ``torchaudio.functional.resample`` with its defaults (``resampler="torchaudio"``:
the resampler SPEAR's own scripts use, so that VAD on a 24/44.1/48 kHz answer sees the same
samples as upstream).
Waveforms are ``float32`` arrays of shape ``(channels, samples)`` in [-1, 1].
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

#: Sample rate (Hz) of every SPEAR clip and of every model input in the benchmark.
TARGET_SR = 16_000


class AudioError(ValueError):
    """An audio file is missing, empty, undecodable or holds non-finite samples.

    The message is one line and names the file; runners store it as the row's failure reason.
    """


@dataclass(frozen=True)
class AudioInfo:
    """Header facts of an audio file: ``sample_rate`` (Hz), ``channels``, ``frames`` (per channel)."""

    sample_rate: int
    channels: int
    frames: int

    @property
    def duration(self) -> float:
        """Duration in seconds."""
        return self.frames / self.sample_rate if self.sample_rate else 0.0


def _check_riff_complete(path: str) -> None:
    """Raise :class:`AudioError` when a RIFF/WAVE file holds fewer data bytes than its header declares.

    libsndfile silently returns the frames that are there; a cut file must not be scored as if
    it were complete. Streaming placeholders (data size 0 or 0xFFFFFFFF) are not checked.
    """
    import struct

    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(12)
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
            return
        pos = 12
        while pos + 8 <= size:
            f.seek(pos)
            chunk_id, chunk_size = struct.unpack("<4sI", f.read(8))
            if chunk_id == b"data":
                if chunk_size not in (0, 0xFFFFFFFF) and pos + 8 + chunk_size > size:
                    raise AudioError(f"audio file is truncated: its data chunk declares {chunk_size} bytes, "
                                     f"the file holds {size - pos - 8}: {path}")
                return
            pos += 8 + chunk_size + (chunk_size & 1)
        raise AudioError(f"audio file is truncated: no data chunk: {path}")


def _decode_soundfile(path: str) -> tuple[np.ndarray, int]:
    import soundfile as sf

    _check_riff_complete(path)
    declared = sf.info(path).frames
    data, sr = sf.read(path, dtype="float32", always_2d=True)  # (frames, channels)
    # compressed formats (MP3, ...) announce their length in the header: far fewer decoded frames = cut file
    if 0 < declared < 2**62 and len(data) < 0.98 * declared - sr * 0.05:
        raise AudioError(f"audio file is truncated: {len(data) / sr:.2f} s decoded of {declared / sr:.2f} s declared: {path}")
    return np.ascontiguousarray(data.T), int(sr)


def _decode_ffmpeg(path: str) -> tuple[np.ndarray, int]:
    from torchcodec.decoders import AudioDecoder

    decoder = AudioDecoder(path)
    samples = decoder.get_all_samples()
    wav, sr = samples.data.numpy().astype(np.float32, copy=False), int(samples.sample_rate)
    declared = getattr(decoder.metadata, "duration_seconds_from_header", None)
    if declared and wav.shape[-1] / sr < 0.98 * declared - 0.05:
        raise AudioError(f"audio file is truncated: {wav.shape[-1] / sr:.2f} s decoded of {declared:.2f} s declared: {path}")
    return wav, sr


def decode(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """Decode a file at its native rate and channel count.

    Returns ``(waveform, sample_rate)``, waveform ``float32`` of shape ``(channels, samples)``.

    Raises:
        AudioError: missing file, zero-length file, undecodable data, no samples, NaN/inf samples.
    """
    p = str(path)
    if os.path.isdir(p):
        raise AudioError(f"audio path is a directory, not a file: {p}")
    if not os.path.isfile(p):
        raise AudioError(f"audio file not found: {p}")
    if os.path.getsize(p) == 0:
        raise AudioError(f"audio file is empty (0 bytes): {p}")
    try:
        wav, sr = _decode_soundfile(p)
    except AudioError:
        raise
    except Exception as sf_err:  # libsndfile cannot read it: let FFmpeg try
        try:
            wav, sr = _decode_ffmpeg(p)
        except Exception as ff_err:
            raise AudioError(
                f"cannot decode audio {p}: libsndfile: {str(sf_err).strip()}; "
                f"ffmpeg: {str(ff_err).strip().splitlines()[0] if str(ff_err).strip() else type(ff_err).__name__}"
            ) from None
    if wav.size == 0 or wav.shape[-1] == 0:
        raise AudioError(f"audio file has no samples: {p}")
    if not np.isfinite(wav).all():
        raise AudioError(f"audio has NaN or inf samples: {p}")
    return wav, sr


Resampler = Literal["soxr", "torchaudio"]


def resample(wav: np.ndarray, orig_sr: int, target_sr: int, resampler: Resampler = "soxr") -> np.ndarray:
    """Resample ``(channels, samples)`` audio from ``orig_sr`` to ``target_sr`` Hz.

    ``resampler="soxr"``: soxr HQ. ``"torchaudio"``: ``torchaudio.functional.resample`` with its
    defaults (windowed sinc, Hann, lowpass width 6, rolloff 0.99), as upstream SPEAR's
    ``load_audio_mono`` (``bin/base_metrics.py``).
    """
    if orig_sr == target_sr:
        return wav
    if resampler == "torchaudio":
        import torch
        import torchaudio.functional as taf

        out = taf.resample(torch.from_numpy(np.ascontiguousarray(wav, dtype=np.float32)), int(orig_sr), int(target_sr))
        return np.ascontiguousarray(out.numpy(), dtype=np.float32)
    if resampler != "soxr":
        raise ValueError(f"resampler must be 'soxr' or 'torchaudio', got {resampler!r}")
    import soxr

    out = soxr.resample(wav.T, orig_sr, target_sr, quality="HQ")
    out = out.reshape(out.shape[0], -1) if out.ndim == 2 else out[:, None]
    return np.ascontiguousarray(out.T, dtype=np.float32)


def load_audio(
    path: str | os.PathLike,
    *,
    sr: int | None = TARGET_SR,
    channels: Literal["keep", "mix"] | int = "keep",
    resampler: Resampler = "soxr",
) -> np.ndarray:
    """Load audio as ``float32`` ``(channels, samples)`` at ``sr`` Hz.

    Args:
        path: any file libsndfile or FFmpeg decodes.
        sr: target rate in Hz (``None`` keeps the file's rate; use :func:`decode` to learn it).
        channels: ``"keep"`` keeps speakers apart (SPEAR input clips: channel 0 = first speaker,
            channel 1 = second); ``"mix"`` averages all channels into one (shape ``(1, n)``,
            as upstream SPEAR does for answers and for the question's VAD); an ``int`` picks
            that channel (shape ``(1, n)``).
        resampler: ``"soxr"`` (default) or ``"torchaudio"`` (SPEAR's own; see :func:`resample`).
            Channels are mixed before resampling, as upstream.

    Raises:
        AudioError: see :func:`decode`; also a channel index the file does not have.
    """
    wav, file_sr = decode(path)
    if channels == "mix":
        wav = wav.mean(axis=0, keepdims=True)
    elif isinstance(channels, int) and not isinstance(channels, bool):
        if not 0 <= channels < wav.shape[0]:
            raise AudioError(f"audio {path} has {wav.shape[0]} channel(s), channel {channels} asked for")
        wav = wav[channels : channels + 1]
    elif channels != "keep":
        raise ValueError(f"channels must be 'keep', 'mix' or an int, got {channels!r}")
    if sr is not None:
        wav = resample(wav, file_sr, sr, resampler)
    return wav


def audio_info(path: str | os.PathLike) -> AudioInfo:
    """Read rate, channels and length from the header (libsndfile), decoding only as a fallback.

    Raises:
        AudioError: as :func:`decode`.
    """
    p = str(path)
    if not os.path.isfile(p):
        raise AudioError(f"audio file not found: {p}")
    _check_riff_complete(p)
    try:
        import soundfile as sf

        i = sf.info(p)
        if i.frames > 0:
            return AudioInfo(int(i.samplerate), int(i.channels), int(i.frames))
    except Exception:
        pass
    wav, sr = decode(p)
    return AudioInfo(sr, wav.shape[0], wav.shape[1])


def write_wav(path: str | os.PathLike, wav: np.ndarray, sr: int = TARGET_SR) -> Path:
    """Write ``(channels, samples)`` or ``(samples,)`` float audio as 16-bit PCM WAV, atomically.

    The file appears under its final name only once complete (write to a temporary name, then
    rename), so a killed run never leaves a truncated clip behind.
    """
    import soundfile as sf

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    data = np.asarray(wav, dtype=np.float32)
    data = data[None, :] if data.ndim == 1 else data
    tmp = p.with_name(f".{p.name}.tmp")
    sf.write(str(tmp), np.clip(data.T, -1.0, 1.0), sr, subtype="PCM_16", format="WAV")
    os.replace(tmp, p)
    return p
