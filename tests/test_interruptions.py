"""Interruptions on real speech: known silence padding -> latency, known lead -> overlap."""

import pytest

from spear_metrics.core.runner import score_columns
from spear_metrics.interruptions.definition import interrupted_time_s, latency_s

from conftest import STEREO_DIALOGUE
from helpers import CONTEXT_END, QUESTION_END, make_clips

FRAME_MS = 32  # one Silero frame (512 samples at 16 kHz)


def test_latency_formula_hand_computed():
    q = [(0.0, 1.0), (2.0, 4.5)]
    a = [(0.3, 2.0), (2.5, 3.0)]
    # gap 5.0-4.5 = 0.5, + answer_start_time 0.2, + onset 0.3
    assert latency_s(q, a, 5.0, 0.2) == pytest.approx(1.0)
    # empty answer_start_time = placed at question end
    assert latency_s(q, a, 5.0, None) == pytest.approx(0.8)
    # barge-in 1 s: skip 1.0 s into the answer; speech running at the skip point counts 0
    assert latency_s(q, a, 5.0, -1.0) == pytest.approx(0.5)
    # skip 2.2 s: the first segment ending after 2.2 starts at 2.5 -> onset 0.3
    assert latency_s(q, a, 5.0, -2.2) == pytest.approx(0.5 + 0.3)
    assert latency_s(q, [], 5.0, 0.0) is None
    # overlap: answer placed at 5.0-1.0 -> [(4.3, 6.0), (6.5, 7.0)]; question speech in [1, 5] -> (2, 4.5)
    assert interrupted_time_s(q, a, 1.0, 5.0, -1.0) == pytest.approx(0.2)
    assert interrupted_time_s(q, a, 1.0, 5.0, 0.5) == 0.0
    assert interrupted_time_s(q, a, 1.0, 5.0, None) is None


def _score(tmp_path, pads, asts, **options):
    paths = [make_clips(STEREO_DIALOGUE, tmp_path, pad_s=p, name=f"in{i}") for i, p in enumerate(pads)]
    n = len(paths)
    cols = dict(audio_path=[str(q) for q, _ in paths], answer_audio_path=[str(a) for _, a in paths],
                context_end_time=[CONTEXT_END] * n, question_end_time=[QUESTION_END] * n, answer_start_time=asts)
    return score_columns("interruptions", cols, **options)


def test_silence_padding_shows_up_as_latency(real_dir, tmp_path):
    # FEE016's turn ends at the clip end (15.48 s): no gap after question speech; MEO015's
    # "Right" begins at the start of the answer clip, so the latency is the padding itself.
    pads = [0.2, 0.5, 0.7]
    r = _score(tmp_path, pads, [None] * 3, vad_time_resolution=3)
    for pad, s in zip(pads, r["per_sample"]):
        assert s["status"] == "ok"
        assert abs(s["latency_ms"] - 1000 * pad) <= 2 * FRAME_MS, (pad, s["latency_ms"])
        assert s["interrupted_time_ms"] is None  # no chosen timing, as upstream's "-"
    assert r["interruptions_%"] is None
    # default (upstream) resolution: 0.1 s steps
    r = _score(tmp_path, [0.7], [None])
    assert r["latency_ms"] == pytest.approx(700.0)


def test_known_lead_gives_known_overlap(real_dir, tmp_path):
    # the answer placed 0.5 s / 1.0 s before the question ends overlaps FEE016's running turn by
    # the lead minus the answer's own speech onset (< 0.1 s): the two overlaps differ by 0.5 s.
    r = _score(tmp_path, [0.0, 0.0, 0.0], [-0.5, -1.0, 0.3], vad_time_resolution=3)
    half, full, late = r["per_sample"]
    assert 500 - 100 - FRAME_MS <= half["interrupted_time_ms"] <= 500
    assert 1000 - 100 - FRAME_MS <= full["interrupted_time_ms"] <= 1000
    assert full["interrupted_time_ms"] - half["interrupted_time_ms"] == pytest.approx(500, abs=1)
    assert half["interruption"] and full["interruption"] and late["interruption"] is False
    assert late["interrupted_time_ms"] == 0.0
    # speech already running at the skip point: onset 0, no question gap -> latency 0
    assert half["latency_ms"] == 0.0 and full["latency_ms"] == 0.0
    assert late["latency_ms"] == pytest.approx(300 + late_onset(r), abs=1e-6)
    assert r["interruptions_%"] == pytest.approx(200 / 3)
    assert r["interrupted_time_ms"] == pytest.approx((half["interrupted_time_ms"] + full["interrupted_time_ms"]) / 3)


def late_onset(r):
    """The unpadded answer's VAD onset (ms) = 1000 - overlap at a 1 s lead (same clip)."""
    return 1000 - r["per_sample"][1]["interrupted_time_ms"]


def test_jit_backend_matches_sequence_backend(real_dir, tmp_path):
    a = _score(tmp_path, [0.5, 0.0], [None, -1.0], vad_backend="jit")
    b = _score(tmp_path, [0.5, 0.0], [None, -1.0], vad_backend="sequence")
    assert [s["latency_ms"] for s in a["per_sample"]] == [s["latency_ms"] for s in b["per_sample"]]
    assert a["interrupted_time_ms"] == b["interrupted_time_ms"]
