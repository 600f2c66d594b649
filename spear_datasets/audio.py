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
from typing import Any, Literal

import numpy as np

#: Sample rate (Hz) of every SPEAR clip and of every model input in the benchmark.
TARGET_SR = 16_000

#: Header limits every file read through this module must meet (checked from the header, before
#: any decode that allocates): rates outside [4 kHz, 384 kHz] are not speech recordings (a
#: header claiming 1 Hz would make a 32 KB file a 16,000 s "answer"); more than 32 channels is a
#: corrupt header; longer than one hour is no SPEAR clip or answer (input clips hold at most 5
#: turns, ``SPEAR_PROTOCOL.md`` section 1) nor an FDB sample, and would dominate every mean.
MIN_SAMPLE_RATE = 4_000
MAX_SAMPLE_RATE = 384_000
MAX_CHANNELS = 32
MAX_DURATION_S = 3600.0
#: Channels of a SPEAR input clip: one speaker per channel (``SPEAR_PROTOCOL.md`` section 1).
#: The one rule ``score``, ``infer`` and ``build-dataset`` apply (:func:`input_clip_info`).
INPUT_CHANNELS = 2

#: WAVE ``fmt `` format tags and the bits per sample each allows (container size for PCM/float).
_WAVE_PCM, _WAVE_FLOAT, _WAVE_ALAW, _WAVE_MULAW, _WAVE_EXTENSIBLE = 0x0001, 0x0003, 0x0006, 0x0007, 0xFFFE
_WAVE_BITS = {_WAVE_PCM: (8, 16, 24, 32), _WAVE_FLOAT: (32, 64), _WAVE_ALAW: (8,), _WAVE_MULAW: (8,)}


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


def _check_riff(path: str) -> None:
    """Validate a RIFF/WAVE file's own header: its ``fmt `` chunk and its data length.

    - ``fmt ``: a known format tag with bits per sample in its valid set (PCM 8/16/24/32, float
      32/64, A-law/mu-law 8; WAVE_FORMAT_EXTENSIBLE: container as PCM/float, valid bits 8 to the
      container) and a block alignment of ``channels x bytes per sample`` (a patched channel
      count breaks it). libsndfile reads a 3-bit header as 8-bit and a 300-channel one as 300
      channels of garbage.
    - data: fewer data bytes than the header declares is a cut file (libsndfile silently returns
      the frames that are there). Streaming placeholders (data size 0 or 0xFFFFFFFF) are not checked.
    - one ``fmt `` chunk only: a repeated one (decoders differ on which one counts) is refused.

    Files that are not RIFF/WAVE are left to :func:`_check_limits`.

    Raises:
        AudioError: one line naming the file.
    """
    import struct

    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(12)
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
            return
        pos, fmt_seen = 12, False
        while pos + 8 <= size:
            f.seek(pos)
            chunk_id, chunk_size = struct.unpack("<4sI", f.read(8))
            if chunk_id == b"fmt ":
                if fmt_seen:  # decoders disagree on which one counts: never guess the format
                    raise AudioError(f"bad WAV header: a second fmt chunk (the format is declared twice): {path}")
                _check_wave_fmt(f.read(min(chunk_size, 40)), path)
                fmt_seen = True
            elif chunk_id == b"data":
                if not fmt_seen:
                    raise AudioError(f"bad WAV header: data chunk before the fmt chunk: {path}")
                if chunk_size not in (0, 0xFFFFFFFF) and pos + 8 + chunk_size > size:
                    raise AudioError(f"audio file is truncated: its data chunk declares {chunk_size} bytes, "
                                     f"the file holds {size - pos - 8}: {path}")
                return
            pos += 8 + chunk_size + (chunk_size & 1)
        raise AudioError(f"audio file is truncated: no data chunk: {path}")


def _check_wave_fmt(fmt: bytes, path: str) -> None:
    """Check a WAVE ``fmt `` chunk body (see :func:`_check_riff`). Raises :class:`AudioError`."""
    import struct

    if len(fmt) < 16:
        raise AudioError(f"bad WAV header: fmt chunk of {len(fmt)} bytes: {path}")
    tag, channels, rate, _byte_rate, align, bits = struct.unpack("<HHIIHH", fmt[:16])
    _check_limits(rate, channels, None, path)
    valid_bits = bits
    if tag == _WAVE_EXTENSIBLE:
        if len(fmt) < 40:
            raise AudioError(f"bad WAV header: WAVE_FORMAT_EXTENSIBLE fmt chunk of {len(fmt)} bytes: {path}")
        valid_bits = struct.unpack("<H", fmt[18:20])[0] or bits
        tag = struct.unpack("<H", fmt[24:26])[0]  # first two bytes of the sub-format GUID
        if tag in _WAVE_BITS and not 8 <= valid_bits <= bits:
            raise AudioError(f"bad WAV header: {valid_bits} valid bits per sample in a {bits}-bit container: {path}")
    allowed = _WAVE_BITS.get(tag)
    if allowed is None:  # ADPCM, GSM...: libsndfile/FFmpeg check their own headers; rate/channels checked above
        return
    if bits not in allowed:
        raise AudioError(f"bad WAV header: {bits} bits per sample (format 0x{tag:04x} allows {'/'.join(map(str, allowed))}): {path}")
    if align != channels * bits // 8:
        raise AudioError(f"bad WAV header: block align {align} does not match {channels} channel(s) x {bits} bits: {path}")


def _check_limits(sample_rate: float | None, channels: int | None, frames: int | None, path: str) -> None:
    """Refuse header values no recording has (see :data:`MIN_SAMPLE_RATE` and the other limits).

    ``None`` means the header does not say (not checked). Raises :class:`AudioError`.
    """
    if sample_rate is not None and not MIN_SAMPLE_RATE <= sample_rate <= MAX_SAMPLE_RATE:
        raise AudioError(f"bad audio header: sample rate {sample_rate:g} Hz is outside "
                         f"[{MIN_SAMPLE_RATE}, {MAX_SAMPLE_RATE}] Hz: {path}")
    if channels is not None and not 1 <= channels <= MAX_CHANNELS:
        raise AudioError(f"bad audio header: {channels} channels (1 to {MAX_CHANNELS} accepted): {path}")
    if frames is not None and sample_rate and frames / sample_rate > MAX_DURATION_S:
        raise AudioError(f"bad audio header: {frames / sample_rate:.0f} s long (at most {MAX_DURATION_S:g} s accepted): {path}")


def _probe(path: str) -> tuple[AudioInfo | None, str]:
    """Header of ``path`` validated, without decoding: ``(info, backend)``.

    ``backend`` is ``"soundfile"`` when libsndfile reads the header (``info`` from it), else
    ``"ffmpeg"`` (``info`` from the FFmpeg stream metadata; ``None`` when FFmpeg cannot open it
    either: the decoders then say why). ``info.frames`` may be 0 when the header does not
    give a length (some MP3/OGG streams).

    Raises:
        AudioError: a bad header (limits, WAVE ``fmt`` values), a truncated WAV, or a file the
            system will not let us read (permission denied, I/O error).
    """
    try:
        _check_riff(path)
    except OSError as e:
        raise AudioError(f"cannot read audio file {path}: {e.strerror or e}") from None
    try:
        import soundfile as sf

        i = sf.info(path)
        info, backend = AudioInfo(int(i.samplerate), int(i.channels), max(0, int(i.frames))), "soundfile"
        if i.frames >= 2**62:  # libsndfile's "unknown length"
            info = AudioInfo(info.sample_rate, info.channels, 0)
    except Exception:
        try:
            from torchcodec.decoders import AudioDecoder

            md = AudioDecoder(path).metadata
            rate, ch = md.sample_rate, md.num_channels
            dur = md.duration_seconds_from_header
            info = AudioInfo(int(rate), int(ch), int(round(dur * rate)) if dur and rate else 0) if rate and ch else None
        except Exception:
            info = None
        backend = "ffmpeg"
    if info is not None:
        _check_limits(info.sample_rate, info.channels, info.frames or None, path)
    return info, backend


def is_pcm16_wav(info: Any) -> bool:
    """Whether a libsndfile header (``soundfile.info(path)`` or an open ``SoundFile``) is a 16-bit
    PCM WAV: the files whose decoded float32 samples are ``int16 / 32768``, as Praat reads them."""
    return info.format in ("WAV", "WAVEX") and info.subtype == "PCM_16"


def _decode_soundfile(path: str) -> tuple[np.ndarray, int]:
    import soundfile as sf

    with sf.SoundFile(path) as f:
        declared, sr = f.frames, f.samplerate
        if is_pcm16_wav(f):
            # libsndfile's own int16 -> float32 is ``sample * (1.0f / 0x8000)`` (pcm.c): the same
            # bits as this numpy pass (exact: a power-of-two scale), which also transposes to
            # (channels, frames) on the way instead of a second copy; 3.8x faster on 16-bit WAVs
            raw = f.read(dtype="int16", always_2d=True)  # (frames, channels)
            wav = np.empty(raw.shape[::-1], dtype=np.float32)
            np.multiply(raw.T, np.float32(1.0 / 0x8000), out=wav)
        else:
            wav = np.ascontiguousarray(f.read(dtype="float32", always_2d=True).T)
    n = wav.shape[-1]
    # compressed formats (MP3, ...) announce their length in the header: far fewer decoded frames = cut file
    if 0 < declared < 2**62 and n < 0.98 * declared - sr * 0.05:
        raise AudioError(f"audio file is truncated: {n / sr:.2f} s decoded of {declared / sr:.2f} s declared: {path}")
    return wav, int(sr)


def _decode_ffmpeg(path: str) -> tuple[np.ndarray, int]:
    from torchcodec.decoders import AudioDecoder

    decoder = AudioDecoder(path)
    samples = decoder.get_all_samples()
    wav, sr = samples.data.numpy().astype(np.float32, copy=False), int(samples.sample_rate)
    declared = getattr(decoder.metadata, "duration_seconds_from_header", None)
    if declared and wav.shape[-1] / sr < 0.98 * declared - 0.05:
        raise AudioError(f"audio file is truncated: {wav.shape[-1] / sr:.2f} s decoded of {declared:.2f} s declared: {path}")
    return wav, sr


def _check_path(p: str) -> None:
    """Refuse what is not a readable regular file, before opening it (a FIFO would block, a device
    such as ``/dev/zero`` never ends). Raises :class:`AudioError`."""
    if os.path.isdir(p):
        raise AudioError(f"audio path is a directory, not a file: {p}")
    if not os.path.isfile(p):
        if os.path.exists(p):  # a FIFO, a socket, a character or block device (/dev/zero, /dev/urandom)
            raise AudioError(f"audio path is not a regular file (a pipe, socket or device): {p}")
        raise AudioError(f"audio file not found: {p}")
    if os.path.getsize(p) == 0:
        raise AudioError(f"audio file is empty (0 bytes): {p}")


def decode(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """Decode a file at its native rate and channel count.

    The header is validated first (:func:`audio_info`'s checks: rate, channels, bits per sample,
    duration), so a file with absurd header values fails in milliseconds, before any allocation.

    Returns ``(waveform, sample_rate)``, waveform ``float32`` of shape ``(channels, samples)``.

    Raises:
        AudioError: missing file, zero-length file, bad header, undecodable data, no samples,
            NaN/inf samples.
    """
    p = str(path)
    _check_path(p)
    _, backend = _probe(p)
    try:
        if backend != "soundfile":
            raise RuntimeError("libsndfile cannot read the header")
        wav, sr = _decode_soundfile(p)
    except AudioError:
        raise
    except Exception as sf_err:  # libsndfile cannot read it: let FFmpeg try
        try:
            wav, sr = _decode_ffmpeg(p)
        except AudioError:
            raise
        except Exception as ff_err:
            raise AudioError(
                f"cannot decode audio {p}: libsndfile: {str(sf_err).strip()}; "
                f"ffmpeg: {str(ff_err).strip().splitlines()[0] if str(ff_err).strip() else type(ff_err).__name__}"
            ) from None
    if wav.size == 0 or wav.shape[-1] == 0:
        raise AudioError(f"audio file has no samples: {p}")
    _check_limits(sr, wav.shape[0], wav.shape[-1], p)  # what a header without a length did not say
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
    return convert(wav, file_sr, sr=sr, channels=channels, resampler=resampler, path=path)


def convert(
    wav: np.ndarray,
    file_sr: int,
    *,
    sr: int | None = TARGET_SR,
    channels: Literal["keep", "mix"] | int = "keep",
    resampler: Resampler = "soxr",
    path: str | os.PathLike = "<array>",
) -> np.ndarray:
    """What :func:`load_audio` does after decoding: pick or mix channels, then resample.

    Args:
        wav: ``(channels, samples)`` float32 as :func:`decode` returns it, at ``file_sr`` Hz.
        sr, channels, resampler: as :func:`load_audio`.
        path: named in the error message.

    Returns ``wav`` itself (no copy) when nothing changes (``"keep"`` at the file's rate).

    Raises:
        AudioError: a channel index the audio does not have.
    """
    if channels == "mix" and wav.shape[0] == 2 and wav.dtype == np.float32:
        # numpy's float32 mean of two rows is (a + b) then / 2; * 0.5 is the same real number, so the
        # same rounded float: the same bits as ``wav.mean(axis=0)`` in two plain passes (4x faster)
        mixed = np.add(wav[0], wav[1])
        mixed *= np.float32(0.5)
        wav = mixed[None]
    elif channels == "mix":
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
    """Read rate, channels and length from the header, validated; decoding only when the header
    gives no length.

    Checks (no decode): the file exists and is not empty; rate in [:data:`MIN_SAMPLE_RATE`,
    :data:`MAX_SAMPLE_RATE`] Hz; 1 to :data:`MAX_CHANNELS` channels; at most
    :data:`MAX_DURATION_S` s; for WAV, bits per sample valid for its format and block
    alignment / byte rate consistent with them; a WAV data chunk as long as declared.

    Raises:
        AudioError: one line naming the file (as :func:`decode` for files it must decode).
    """
    p = str(path)
    _check_path(p)
    info, _ = _probe(p)
    if info is not None and info.frames > 0:
        return info
    wav, sr = decode(p)
    return AudioInfo(sr, wav.shape[0], wav.shape[1])


def input_clip_info(path: str | os.PathLike) -> AudioInfo:
    """:func:`audio_info` of a SPEAR input clip, which must have :data:`INPUT_CHANNELS` channels
    (one speaker per channel, ``SPEAR_PROTOCOL.md`` section 1): the one channel rule of
    ``score``, ``infer`` and ``build-dataset``.

    Raises:
        AudioError: as :func:`audio_info`, or a clip that is not stereo.
    """
    info = audio_info(path)
    if info.channels != INPUT_CHANNELS:
        raise AudioError(f"input clip has {info.channels} channel(s), expected {INPUT_CHANNELS} "
                         f"(one speaker per channel): {path}")
    return info


def wav_bytes(wav: np.ndarray, sr: int = TARGET_SR) -> bytes:
    """``(channels, samples)`` or ``(samples,)`` float audio as the bytes of a 16-bit PCM WAV file
    (samples clipped to [-1, 1]): THE WAV encoding of the project (files, API requests, judge calls)."""
    import io

    import soundfile as sf

    data = np.asarray(wav, dtype=np.float32)
    data = data[None, :] if data.ndim == 1 else data
    buf = io.BytesIO()
    sf.write(buf, np.clip(data.T, -1.0, 1.0), int(sr), subtype="PCM_16", format="WAV")
    return buf.getvalue()


def write_wav(path: str | os.PathLike, wav: np.ndarray, sr: int = TARGET_SR) -> Path:
    """Write ``(channels, samples)`` or ``(samples,)`` float audio as 16-bit PCM WAV, atomically
    (:func:`wav_bytes`).

    The file appears under its final name only once complete (write to a temporary name, then
    rename), so a killed run never leaves a truncated clip behind.

    Raises:
        spear_datasets.files.OutputError: the file cannot be written (read-only, disk full...);
            no temporary file is left.
    """
    from spear_datasets.files import atomic_path

    p = Path(path)
    data = wav_bytes(wav, sr)  # encoded in memory: a failed write is then a plain OSError with its errno
    with atomic_path(p) as tmp:
        tmp.write_bytes(data)
    return p


def decode_bytes(data: bytes, name: str = "<bytes>") -> tuple[np.ndarray, int]:
    """:func:`decode` of an encoded file held in memory (e.g. a ``datasets.Audio(decode=False)``
    cell's ``bytes``): the same header checks and decoders, every channel kept.

    The bytes go to a temporary file (deleted on return) named with ``name``'s suffix, so that
    the decoders see the container they expect; messages name ``name``, not that file.

    Args:
        data: the encoded file (WAV, FLAC, MP3...).
        name: what the bytes are (a dataset row, the cell's original path), used in messages.

    Returns:
        ``(waveform (channels, samples) float32, sample_rate Hz)``.

    Raises:
        AudioError: no bytes, or as :func:`decode`.
    """
    import tempfile

    if not data:
        raise AudioError(f"audio is empty (0 bytes): {name}")
    suffix = Path(str(name)).suffix if Path(str(name)).suffix and len(Path(str(name)).suffix) <= 6 else ".audio"
    with tempfile.TemporaryDirectory(prefix="spearbench-audio-") as tmp:
        p = Path(tmp) / f"cell{suffix}"
        p.write_bytes(bytes(data))
        try:
            return decode(p)
        except AudioError as e:
            raise AudioError(str(e).replace(str(p), str(name))) from None
