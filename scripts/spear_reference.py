"""A plain re-statement of SPEAR's own rules, for checking the project against them.

Written from the definitions in ``thomasthebaud/SPEAR-benchmark-code`` (``bin/base_metrics.py``,
``bin/distrib_baselines/run_f0_extraction.py``, ``normalize_features_by_answered_speaker.py``,
``bin/reports/benchmark_line.py``) as a per-file loop with the libraries SPEAR calls, and
**nothing imported from this project**: ``scripts/check_fidelity.py`` and
``scripts/bench_timing.py`` compare the project's values with these.

- audio for VAD: ``torchaudio.load``, channels averaged, ``torchaudio.functional.resample`` to 16 kHz;
- VAD: ``silero_vad.get_speech_timestamps(wav, load_silero_vad(), return_seconds=True)`` (defaults,
  the streaming JIT model);
- latency: the answer waveform cut at ``int(round(skip * 16000))`` with skip = max(0, -answer_start_time),
  VAD re-run on the cut, onset 0 when it holds no speech; + the question's gap + max(0, answer_start_time);
- overlap: answer VAD segments (uncut) + answer_start_time against question VAD segments clipped to
  [context_end, question_end] and moved to the question end;
- WER/CER: ``clean_reference`` + ``.strip('.? ')``, jiwer defaults, rows without reference or with
  an empty hypothesis left out;
- explainable: ``parselmouth.Sound(path).to_pitch_ac(pitch_floor=75, pitch_ceiling=500)``; F0 statistics normalised by the
  answered speaker's mean F0 within each subset table; mean over 7 features of their std (ddof 1).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

_VAD = None


def _vad_model():
    global _VAD
    if _VAD is None:
        from silero_vad import load_silero_vad

        _VAD = load_silero_vad()
    return _VAD


def load_mono_16k(path: str):
    """``torchaudio.load`` -> mean over channels -> ``torchaudio.functional.resample`` to 16 kHz (1-D tensor)."""
    import torchaudio

    wav, sr = torchaudio.load(path)
    if wav.shape[0] > 1:
        wav = wav.mean(dim=0, keepdim=True)
    if sr != 16000:
        wav = torchaudio.functional.resample(wav, sr, 16000)
    return wav.squeeze(0)


def vad(wav) -> list[tuple[float, float]]:
    import torch
    from silero_vad import get_speech_timestamps

    if wav.numel() == 0:
        return []
    with torch.no_grad():
        ts = get_speech_timestamps(wav, _vad_model(), sampling_rate=16000, return_seconds=True)
    return [(float(t["start"]), float(t["end"])) for t in ts]


def _ast(value) -> float:
    """``float(row.get('answer_start_time', 0.0))``; an empty cell reads as NaN upstream, which
    every ``max(0.0, .)`` turns into 0."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if x != x else x


def latency_ms(audio_path: str, answer_audio_path: str, question_end_time: float, answer_start_time) -> float:
    ast = _ast(answer_start_time)
    skip = max(0.0, -ast)
    q = vad(load_mono_16k(audio_path))
    a = load_mono_16k(answer_audio_path)
    if skip > 0.0:
        a = a[int(round(skip * 16000)):]
    a_segs = vad(a)
    q_end = q[-1][1] if q else question_end_time
    onset = a_segs[0][0] if a_segs else 0.0
    return 1000.0 * (max(0.0, question_end_time - q_end) + max(0.0, ast) + max(0.0, onset))


def interruption(audio_path: str, answer_audio_path: str, context_end_time: float, question_end_time: float,
                 answer_start_time) -> dict:
    ast = _ast(answer_start_time)
    q = [(max(s, context_end_time) - question_end_time, min(e, question_end_time) - question_end_time)
         for s, e in vad(load_mono_16k(audio_path)) if min(e, question_end_time) > max(s, context_end_time)]
    a = [(s + ast, e + ast) for s, e in vad(load_mono_16k(answer_audio_path))]
    total, n = 0.0, 0
    for s, e in a:
        o = sum(max(0.0, min(e, qe) - max(s, qs)) for qs, qe in q)
        if o > 0.0:
            n += 1
            total += o
    return {"interrupted_time_ms": 1000.0 * total, "interruption": int(n > 0)}


_TAG = r"(?:P\d{4}A?:\s*)"
_HEADING = r"^\s*\*\*[^*]+\*\*\s*[:\-\u2013\u2014]?\s*"


def clean_reference(text: str) -> str:
    text = re.sub(_TAG, "", str(text))
    text = re.sub(_HEADING, "", text)
    if "   " in text:
        text = text.split("   ")[-1]
    return re.sub(_TAG, "", text)


def wer_cer(reference, hypothesis) -> tuple[float, float] | None:
    """``None`` when the row is left out (no reference, empty hypothesis, or nothing left to compare)."""
    import jiwer

    if reference is None or str(reference) in ("", "nan") or not hypothesis:
        return None
    ref = clean_reference(reference).strip(".? ")
    if not ref:
        return None
    hyp = hypothesis.strip(".? ")
    return jiwer.wer(ref, hyp), jiwer.cer(ref, hyp)


def f0_features(answer_audio_path: str) -> dict:
    import parselmouth

    snd = parselmouth.Sound(str(answer_audio_path))
    dur = snd.get_total_duration()
    try:
        f0 = snd.to_pitch_ac(pitch_floor=75, pitch_ceiling=500).selected_array["frequency"]
    except parselmouth.PraatError:
        return {}
    voiced = f0[f0 > 0]
    out = {"total_duration_s": dur, "voiced_ratio": len(voiced) / len(f0) if len(f0) else 0.0}
    if len(voiced):
        out.update({"f0_mean_raw": float(np.mean(voiced)), "f0_min_raw": float(np.min(voiced)),
                    "f0_p10": float(np.percentile(voiced, 10)), "f0_p25": float(np.percentile(voiced, 25)),
                    "f0_median_raw": float(np.median(voiced)), "f0_p75": float(np.percentile(voiced, 75)),
                    "f0_p90": float(np.percentile(voiced, 90)), "f0_max_raw": float(np.max(voiced))})
    return out


F0_PROFILE = ["f0_min_raw", "f0_p10", "f0_p25", "f0_median_raw", "f0_p75", "f0_p90", "f0_max_raw"]


def answered_speaker(transcript_question: str) -> str:
    m = re.findall(r"([A-Za-z0-9]+):", str(transcript_question or ""))
    return m[-1] if m else ""


def normalized_f0_std_avg(features: list[dict], speakers: list[str], tables: list[str]) -> float | None:
    import pandas as pd

    df = pd.DataFrame(features)
    for c in ["f0_mean_raw", *F0_PROFILE]:
        if c not in df:
            df[c] = np.nan
    df["spk"], df["table"] = speakers, tables
    parts = []
    for _, g in df.groupby("table", dropna=False):
        g = g.copy()
        denom = g["f0_mean_raw"].groupby(g["spk"]).transform("mean").replace(0, np.nan)
        for c in F0_PROFILE:
            g[c] = g[c] / denom
        parts.append(g)
    df = pd.concat(parts)
    stds = []
    for c in F0_PROFILE:
        v = df[c].dropna()
        if len(v) > 1:
            stds.append(float(v.std(ddof=1)))
        elif len(v) == 1:
            stds.append(0.0)
    return float(np.mean(stds)) if stds else None


def subset_table(audio_path: str) -> str:
    m = re.search(r"(?:^|[/\\])(improvised|naturalistic)(?:[/\\]|$)", str(audio_path))
    return m.group(1) if m else ""


def resolve(meta_dir: Path, p: str) -> str:
    q = Path(p)
    return str(q if q.is_absolute() else meta_dir / q)
