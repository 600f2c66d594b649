"""Full-Duplex-Bench v1.5 timing: stop latency and response latency.

Source: ``v1_v1.5/evaluation/get_timing.py`` of ``DanielLin94144/Full-Duplex-Bench`` (read for
the definition; the code here is ours). Per sample:

1. Silero VAD (``get_speech_timestamps`` with the library defaults, 16 kHz, times in samples / 16000)
   on ``input.wav`` and ``output.wav``; the user's segments merged across gaps <= 0.6 s
   (``USER_MERGE_GAP``), the model's across gaps <= 0.5 s (``MODEL_MERGE_GAP``).
2. ``latency_stop_list``: every non-empty intersection ``[max(u_s, m_s), min(u_e, m_e)]`` of a
   user and a model segment (a two-pointer sweep: the user pointer advances when ``u_e < m_e``,
   else the model pointer), keeping per end time (rounded to the ms) the shortest interval, sorted
   by end, each bound rounded to 3 decimals. The length of an interval is how long the model kept
   talking while the user spoke over it.
3. ``latency_resp_list``: for each user segment, the first model segment start strictly after its
   end; per model start (rounded to the ms) the latest user end is kept; ``[user_end, model_start]``
   rounded to 3 decimals, sorted by model start.

These two lists are upstream's per-sample output (``latency_intervals.json``); upstream's code
aggregates them no further. The project's per-sample numbers (:func:`overlap_latencies`) read
them at the overlap window of ``metadata.json``:

- ``stop_latency_s``: length of the first stop interval that intersects the overlap window
  ``[t0, t1]`` (``start < t1`` and ``end > t0``); ``None`` when the model was silent throughout it.
  An interval ends where the first of its two segments ends: when the model talks on past the end
  of the user's merged segment, the value is the overlap's length, not a time to stop;
- ``response_latency_s``: ``model_start - user_end`` of the first response interval whose user end
  is at or after ``t0`` (the user segment holding the overlap, or a later one); ``None`` when the
  model never spoke again.

Audio reading: the file resampled to 16 kHz (torchaudio's resampler, as upstream) and its channels
averaged (upstream hands a stereo file's 2-D tensor to Silero, which refuses it).
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from spear_metrics.core.vad import DEFAULT_BACKEND, speech_timestamps

Segment = tuple[float, float]

SR = 16_000
#: merge user pauses up to this long (s) (upstream ``USER_MERGE_GAP``)
USER_MERGE_GAP_S = 0.6
#: merge model pauses up to this long (s) (upstream ``MODEL_MERGE_GAP``)
MODEL_MERGE_GAP_S = 0.5


def merge_segments(segs: Sequence[Segment], gap_s: float) -> list[Segment]:
    """Upstream's ``_merge``: sort, then join a segment to the previous one when it starts at most
    ``gap_s`` seconds after that one's end (``s - prev_end <= gap_s``)."""
    if not segs:
        return []
    segs = sorted((float(s), float(e)) for s, e in segs)
    merged = [segs[0]]
    for s, e in segs[1:]:
        ps, pe = merged[-1]
        if s - pe <= gap_s:
            merged[-1] = (ps, max(pe, e))
        else:
            merged.append((s, e))
    return merged


def vad_segments(wav16k: np.ndarray, gap_s: float, *, backend: str = DEFAULT_BACKEND) -> list[Segment]:
    """Upstream's ``seg_sec``: Silero segments (library defaults) of 16 kHz mono samples ``(n,)``,
    in seconds (sample index / 16000, unrounded), merged across gaps <= ``gap_s`` (s).

    Raises:
        ValueError: not mono audio-scaled samples (:func:`spear_metrics.core.vad.speech_timestamps`).
    """
    ts = speech_timestamps(np.asarray(wav16k, dtype=np.float32), backend=backend)
    return merge_segments([(t["start"] / SR, t["end"] / SR) for t in ts], gap_s)


def read_16k(path: str | os.PathLike) -> np.ndarray:
    """A file as 16 kHz mono ``(n,)`` float32 (channels averaged; torchaudio's resampler).

    Raises:
        spear_datasets.audio.AudioError: missing or undecodable file.
    """
    from spear_datasets.audio import load_audio

    return load_audio(path, sr=SR, channels="mix", resampler="torchaudio")[0]


def stop_intervals(user: Sequence[Segment], model: Sequence[Segment]) -> list[list[float]]:
    """Upstream's ``overlaps``: ``latency_stop_list`` (see the module docstring)."""
    raw = []
    i = j = 0
    while i < len(user) and j < len(model):
        u_s, u_e = user[i]
        m_s, m_e = model[j]
        s, e = max(u_s, m_s), min(u_e, m_e)
        if e > s:
            raw.append((s, e))
        if u_e < m_e:
            i += 1
        else:
            j += 1
    best: dict[int, tuple[float, float]] = {}
    for s, e in raw:
        key = int(round(e * 1000))
        if key not in best or (e - s) < (best[key][1] - best[key][0]):
            best[key] = (s, e)
    return [[round(s, 3), round(e, 3)] for s, e in sorted(best.values(), key=lambda x: x[1])]


def response_intervals(user: Sequence[Segment], model: Sequence[Segment]) -> list[list[float]]:
    """Upstream's ``response_gaps``: ``latency_resp_list`` (see the module docstring)."""
    starts = [s for s, _ in model]
    tmp: dict[int, list[float]] = {}
    for _, u_e in user:
        nxt = next((s for s in starts if s > u_e), None)
        if nxt is None:
            continue
        key = int(round(nxt * 1000))
        cand = [round(u_e, 3), round(nxt, 3)]
        if key not in tmp or cand[0] > tmp[key][0]:
            tmp[key] = cand
    return [iv for _, iv in sorted(tmp.items(), key=lambda kv: kv[1][1])]


def overlap_latencies(stop_list: Sequence[Sequence[float]], resp_list: Sequence[Sequence[float]],
                      overlap: Segment) -> dict[str, float | None]:
    """The project's per-sample ``stop_latency_s`` and ``response_latency_s`` (s) read from
    upstream's two lists at the overlap window ``overlap = (t0, t1)`` (module docstring)."""
    t0, t1 = overlap
    stop = next((e - s for s, e in stop_list if s < t1 and e > t0), None)
    resp = next((m - u for u, m in resp_list if u >= t0), None)
    return {"stop_latency_s": None if stop is None else round(float(stop), 3),
            "response_latency_s": None if resp is None else round(float(resp), 3)}


def sample_timing(input_wav: str | os.PathLike, output_wav: str | os.PathLike, overlap: Segment, *,
                  backend: str = DEFAULT_BACKEND) -> dict[str, object]:
    """Timing of one sample: upstream's ``latency_stop_list`` / ``latency_resp_list`` (lists of
    ``[start_s, end_s]``), the merged VAD segments both came from, and the project's
    :func:`overlap_latencies`.

    Raises:
        spear_datasets.audio.AudioError: a missing or undecodable file; ValueError: see :func:`vad_segments`.
    """
    user = vad_segments(read_16k(input_wav), USER_MERGE_GAP_S, backend=backend)
    model = vad_segments(read_16k(output_wav), MODEL_MERGE_GAP_S, backend=backend)
    stop = stop_intervals(user, model)
    resp = response_intervals(user, model)
    return {"latency_stop_list": stop, "latency_resp_list": resp,
            "user_segments": [[round(s, 3), round(e, 3)] for s, e in user],
            "model_segments": [[round(s, 3), round(e, 3)] for s, e in model],
            **overlap_latencies(stop, resp, overlap)}
