"""Pitch (F0) with Praat's autocorrelation method through ``parselmouth``.

Source: upstream SPEAR ``bin/distrib_baselines/run_f0_extraction.py``:
``parselmouth.Sound(path).to_pitch_ac(pitch_floor=75, pitch_ceiling=500)``; a frame is voiced
when its F0 > 0. Praat's default time step for ``to_pitch_ac`` is 0.75 / pitch_floor = 10 ms.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

F0_FLOOR_HZ = 75.0
F0_CEILING_HZ = 500.0

#: The seven per-answer F0 statistics (Hz) behind ``explainable_normalized_f0_std_avg``.
F0_STATS = ("f0_min_hz", "f0_p10_hz", "f0_p25_hz", "f0_median_hz", "f0_p75_hz", "f0_p90_hz", "f0_max_hz")


@dataclass(frozen=True)
class PitchTrack:
    """F0 per analysis frame in Hz (0 = unvoiced) and the frame step in seconds."""

    f0_hz: np.ndarray
    time_step_s: float

    @property
    def voiced(self) -> np.ndarray:
        return self.f0_hz[self.f0_hz > 0]

    @property
    def voiced_ratio(self) -> float | None:
        """Voiced frames / all frames (``None`` for a clip too short to hold one frame)."""
        n = len(self.f0_hz)
        return float(len(self.voiced) / n) if n else None

    def stats(self) -> dict[str, float | None]:
        """min, p10, p25, median, p75, p90, max and mean of voiced F0 (Hz); ``None`` when unvoiced.

        Percentiles use numpy's default linear interpolation, as upstream.
        """
        v = self.voiced
        if len(v) == 0:
            return {k: None for k in (*F0_STATS, "f0_mean_hz")}
        p = np.percentile(v, [10, 25, 50, 75, 90])
        vals = [v.min(), p[0], p[1], p[2], p[3], p[4], v.max()]
        out = {k: float(x) for k, x in zip(F0_STATS, vals)}
        out["f0_mean_hz"] = float(v.mean())
        return out


def _track(snd, floor_hz: float, ceiling_hz: float) -> PitchTrack:
    import parselmouth

    try:
        pitch = snd.to_pitch_ac(pitch_floor=floor_hz, pitch_ceiling=ceiling_hz)
    except parselmouth.PraatError:
        # Praat refuses sounds shorter than its window (3 periods of the floor, 40 ms at 75 Hz)
        return PitchTrack(np.zeros(0), 0.75 / floor_hz)
    return PitchTrack(np.asarray(pitch.selected_array["frequency"], dtype=np.float64), float(pitch.time_step))


def pitch_track(wav: np.ndarray, sr: int, *, floor_hz: float = F0_FLOOR_HZ, ceiling_hz: float = F0_CEILING_HZ) -> PitchTrack:
    """Praat autocorrelation pitch of a waveform.

    Args:
        wav: ``float`` samples, shape ``(n,)`` (mono) or ``(channels, n)`` (Praat analyses all
            channels of a multichannel sound together, as it does for a stereo file).
        sr: its rate in Hz.

    Returns:
        :class:`PitchTrack`; a clip shorter than Praat's analysis window gives an empty track.
    """
    return _track(_sound(wav, sr), floor_hz, ceiling_hz)


def _sound(wav: np.ndarray, sr: int):
    """A Praat sound of samples ``(n,)`` or ``(channels, n)`` at ``sr`` Hz (one channel: mono)."""
    import parselmouth

    x = np.asarray(wav, dtype=np.float64)
    x = x[0] if x.ndim == 2 and x.shape[0] == 1 else x
    return parselmouth.Sound(x, sampling_frequency=float(sr))


def pitch_track_file(path: str, *, floor_hz: float = F0_FLOOR_HZ, ceiling_hz: float = F0_CEILING_HZ,
                     decoded: tuple[np.ndarray, int] | None = None) -> tuple[PitchTrack, float]:
    """Praat pitch of an audio FILE as SPEAR reads it: ``parselmouth.Sound(path)`` at the file's own
    sample rate and channels, no resampling or mixing (upstream ``run_f0_extraction.py``).

    Files Praat cannot open (e.g. Opus, M4A) are decoded by THE audio loader at their own rate
    with their channels kept, which is the same signal.

    ``decoded``: the file as THE loader decoded it, ``(wav (channels, n) float32, sr)``. For the
    formats of :data:`PRAAT_EXACT_FORMATS` (16- and 24-bit PCM WAV and FLAC, 32-bit float WAV)
    these are the very values Praat reads (``sample / 2 ** (bits - 1)``, or the floats), so Praat
    gets them instead of decoding the file again, and a stereo file whose two channels are bit-identical
    (the human answers' format: the answerer's channel on both) is analysed as one channel: the
    same F0 frames bit for bit, 15 % less CPU. Praat's autocorrelation adds the channels' power
    spectra, so two equal channels give exactly twice one channel's (doubling is exact in
    floating point, as is every step after it: the inverse FFT of a doubled input is doubled, and
    the lags are normalised by the zero lag). Checked frame by frame against Praat reading the
    file on the benchmark's 48 answer clips and the fixture WAVs (66 files, once) and by the breaker pass
    (47 files, 8-96 kHz, edge-case headers), and in ``tests/test_explainable.py``.

    Returns:
        ``(track, total_duration_s)`` (Praat's ``get_total_duration``).

    Raises:
        spear_datasets.audio.AudioError: the file cannot be decoded at all.
    """
    import parselmouth

    if decoded is not None and _praat_reads_as_decoded(path):
        wav, sr = decoded
        if wav.shape[0] == 2 and np.array_equal(wav[0], wav[1]):
            wav = wav[:1]
        snd = _sound(wav, sr)
        return _track(snd, floor_hz, ceiling_hz), float(snd.get_total_duration())
    try:
        snd = parselmouth.Sound(str(path))
    except parselmouth.PraatError:
        from spear_datasets.audio import decode

        wav, sr = decode(path)
        snd = _sound(wav, sr)
    return _track(snd, floor_hz, ceiling_hz), float(snd.get_total_duration())


def answer_pitch(sample) -> tuple[PitchTrack, float]:
    """:func:`pitch_track_file` of a sample's answer file, computed once per sample for every
    dimension of the run that asks (``explainable_features``, ``distributional``).

    Args:
        sample: a :class:`spear_metrics.core.dimension.Sample`; its answer is decoded once by THE
            loader (header checks, NaN/inf refused) and handed to Praat as :func:`pitch_track_file` says.

    Returns:
        ``(track, total_duration_s)``.

    Raises:
        spear_datasets.audio.AudioError: the answer cannot be decoded (asked again, raised again).
    """
    return sample.cached("pitch:answer", lambda: pitch_track_file(str(sample.answer_audio_path),
                                                                  decoded=sample.decoded("answer")))


#: (libsndfile format, subtype) of the files whose float32 samples as THE loader decodes them are
#: the values Praat reads, bit for bit: integers of at most 24 bits over a power of two, and
#: float32 (checked against ``parselmouth.Sound(path).values`` in ``tests/test_explainable.py``).
#: 32-bit integers and 64-bit floats are not: float32 keeps 24 bits of them.
PRAAT_EXACT_FORMATS = frozenset({("WAV", "PCM_16"), ("WAVEX", "PCM_16"), ("WAV", "PCM_24"), ("WAVEX", "PCM_24"),
                                 ("WAV", "FLOAT"), ("WAVEX", "FLOAT"), ("FLAC", "PCM_16"), ("FLAC", "PCM_24")})


def _praat_reads_as_decoded(path: str) -> bool:
    """Whether libsndfile reads ``path`` as one of :data:`PRAAT_EXACT_FORMATS` (a second header
    parse, ~0.1 ms)."""
    import soundfile as sf

    try:
        info = sf.info(str(path))
    except Exception:
        return False
    return (info.format, info.subtype) in PRAAT_EXACT_FORMATS
