"""Full-Duplex-Bench v1.5-shaped samples built from real recordings (tests/fixtures/real), with
scripted reply channels whose stop and response latencies are known by construction.

User channel (``input.wav``): FEE016's turn (left channel of the derived AMI stereo dialogue) as
the context turn, then an overlap by MEO015 (its right channel: a long turn, or its "Mm-hmm"
backchannel). Reply channel (``output.wav``): two VCTK sentences (p226, p225) placed so that the
first ends ``stop_s`` after the overlap starts (or continues through it) and the second starts
``resp_s`` after the overlap ends.

"Known by construction": each clip's speech span is what the same VAD (upstream's settings) finds
on the clip alone, between 1 s of silence on each side; clips are placed at multiples of Silero's
frame (512 samples), so in the composed channels the spans move by the placement offsets only. The
expected latencies follow from those spans and offsets; the VAD on the composed channel may still
move a boundary by up to one frame (32 ms).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from conftest import REAL, STEREO_DIALOGUE

SR = 16000
FRAME = 512


def _load(path: Path, channel, t0: float, t1: float) -> np.ndarray:
    from spear_datasets.audio import load_audio

    w = load_audio(path, sr=SR, channels=channel)[0]
    return w[int(t0 * SR):int(t1 * SR)].astype(np.float32)


def isolated_span(clip: np.ndarray, gap_s: float) -> tuple[float, float]:
    """The clip's one merged VAD segment (s, relative to the clip start) on the clip alone."""
    from spear_metrics.full_duplex_v15.timing import vad_segments

    pad = np.zeros(SR, np.float32)
    segs = vad_segments(np.concatenate([pad, clip, pad]), gap_s)
    assert len(segs) == 1, f"fixture clip is not one speech segment: {segs}"
    return segs[0][0] - 1.0, segs[0][1] - 1.0


def grid(t: float) -> float:
    """``t`` (s) rounded to Silero's frame grid."""
    return round(t * SR / FRAME) * FRAME / SR


@dataclass
class Clips:
    context: np.ndarray
    interruption: np.ndarray
    backchannel: np.ndarray
    reply1: np.ndarray
    reply2: np.ndarray


def clips() -> Clips:
    return Clips(
        context=_load(STEREO_DIALOGUE, 0, 0.7, 5.5),          # FEE016: "Actually that just raises a point..."
        interruption=_load(STEREO_DIALOGUE, 1, 15.4, 19.0),   # MEO015 takes the floor
        backchannel=_load(STEREO_DIALOGUE, 1, 5.8, 6.5),      # MEO015: "Mm-hmm."
        reply1=_load(REAL / "speechbrain__p226_002.wav", "mix", 0.0, 4.74),
        reply2=_load(REAL / "speechbrain__p225_002.wav", "mix", 0.0, 4.06),
    )


def _place(n: int, parts: list[tuple[float, np.ndarray]]) -> np.ndarray:
    out = np.zeros(n, np.float32)
    for t, x in parts:
        k = int(round(t * SR))
        m = min(len(x), n - k)
        out[k:k + m] += x[:m]
    return out


def _words(text: str, span: tuple[float, float]) -> dict:
    """A scripted transcript: the words of ``text`` spread evenly over ``span`` (s)."""
    ws = text.split()
    s, e = span
    step = (e - s) / len(ws)
    return {"text": text, "chunks": [{"text": w, "timestamp": [round(s + i * step, 3), round(s + (i + 1) * step - 0.02, 3)]}
                                     for i, w in enumerate(ws)]}


@dataclass
class Built:
    dir: Path
    overlap: tuple[float, float]
    stop_s: float | None      # expected stop latency (s)
    resp_s: float | None      # expected response latency (s)


def build_sample(d: Path, c: Clips, *, overlap: str = "interruption", stop_after_s: float | None = 0.8,
                 resp_after_s: float = 0.7, transcripts: bool = True, duration_s: float = 16.0) -> Built:
    """One v1.5 sample folder in ``d`` (see the module docstring).

    ``stop_after_s``: the first reply ends this long after the overlap starts; ``None``: it goes on
    through the whole overlap (expected stop latency = the overlap's length).
    """
    from spear_datasets.audio import write_wav

    d.mkdir(parents=True, exist_ok=True)
    n = int(duration_s * SR)
    u2 = c.interruption if overlap == "interruption" else c.backchannel
    a1 = isolated_span(c.context, 0.6)
    a2 = isolated_span(u2, 0.6)
    m1 = isolated_span(c.reply1, 0.5)
    m2 = isolated_span(c.reply2, 0.5)
    o1 = grid(0.5)
    ctx = (o1 + a1[0], o1 + a1[1])
    # the reply starts 0.4 s after the context turn; the overlap comes while it speaks
    p1 = grid(ctx[1] + 0.4 - m1[0])
    rep1 = (p1 + m1[0], p1 + m1[1])
    if stop_after_s is not None:
        o2 = grid(rep1[1] - stop_after_s - a2[0])
    else:  # the overlap lies inside the first reply
        o2 = grid(rep1[0] + 0.6 - a2[0])
    ov = (o2 + a2[0], o2 + a2[1])
    p2 = grid(max(ov[1], rep1[1]) + resp_after_s - m2[0])
    rep2 = (p2 + m2[0], p2 + m2[1])
    assert rep2[1] < duration_s and ov[0] - ctx[1] > 0.6 and rep2[0] - rep1[1] > 0.5
    write_wav(d / "input.wav", _place(n, [(o1, c.context), (o2, u2)]), SR)
    write_wav(d / "clean_input.wav", _place(n, [(o1, c.context)]), SR)
    write_wav(d / "output.wav", _place(n, [(p1, c.reply1), (p2, c.reply2)]), SR)
    pc2 = grid(rep1[1] + 0.3 - m2[0])
    write_wav(d / "clean_output.wav", _place(n, [(p1, c.reply1), (pc2, c.reply2)]), SR)
    (d / "metadata.json").write_text(json.dumps({
        "context_text": "Actually that just raises a point, I wonder what our design people think",
        "current_turn_text": "With menus" if overlap == "interruption" else "Mm-hmm.",
        "timestamps": [round(ov[0], 3), round(ov[1], 3)]}))
    if transcripts:
        r1, r2 = "Please call Stella ask her to bring these things", "with her from the store"
        for name, obj in {
            "input": {"text": "", "chunks": _words("Actually that just raises a point", ctx)["chunks"] +
                      _words("With menus yeah yeah", ov)["chunks"]},
            "clean_input": _words("Actually that just raises a point", ctx),
            "output": {"text": "", "chunks": _words(r1, rep1)["chunks"] + _words(r2, rep2)["chunks"]},
            "clean_output": {"text": "", "chunks": _words(r1, rep1)["chunks"] +
                             _words(r2, (pc2 + m2[0], pc2 + m2[1]))["chunks"]},
        }.items():
            obj["text"] = " ".join(ch["text"] for ch in obj["chunks"])
            (d / f"{name}.json").write_text(json.dumps(obj))
    stop = (rep1[1] - ov[0]) if stop_after_s is not None else (ov[1] - ov[0])
    return Built(d, ov, round(stop, 3), round(rep2[0] - ov[1], 3) if stop_after_s is not None
                 else round(rep2[0] - ov[1], 3))
