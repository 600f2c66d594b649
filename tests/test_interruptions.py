"""Interruptions on real speech: known silence padding -> latency, known lead -> overlap."""

import numpy as np
import pytest

from spear_metrics.core.scoring import score_columns
from spear_datasets.audio import load_audio, write_wav
from spear_metrics.core.vad import speech_segments
from spear_metrics.interruptions.definition import interrupted_time_s, latency_s, skip_point_s

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
    # the answer segments given are those of the CUT answer: speech at the cut -> onset 0
    assert latency_s(q, [(0.0, 1.0)], 5.0, -1.0) == pytest.approx(0.5)
    # a silent (cut) answer has onset 0: it counts its question gap (SPEAR compute_latency)
    assert latency_s(q, [], 5.0, 0.0) == pytest.approx(0.5)
    assert latency_s(q, [], 5.0, 0.3) == pytest.approx(0.8)
    assert skip_point_s(-1.25) == 1.25 and skip_point_s(0.4) == 0.0 and skip_point_s(None) == 0.0
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


def test_every_vad_backend_matches_upstreams_jit_call(real_dir, tmp_path):
    a = _score(tmp_path, [0.5, 0.0], [None, -1.0], vad_backend="jit", vad_time_resolution=3)
    assert a["interrupted_time_ms"] > 0 and a["per_sample"][0]["latency_ms"] > 400  # a real overlap, a real gap
    for backend in ("batched", "sequence"):
        b = _score(tmp_path, [0.5, 0.0], [None, -1.0], vad_backend=backend, vad_time_resolution=3)
        assert [s["latency_ms"] for s in a["per_sample"]] == [s["latency_ms"] for s in b["per_sample"]], backend
        assert a["interrupted_time_ms"] == b["interrupted_time_ms"], backend


def test_cut_then_vad_short_tail_takes_next_segment_onset(real_dir, tmp_path):
    """SPEAR cuts the answer at the skip point and re-runs VAD. MEO015's answer has speech
    0.098-5.694 s then 0.42 s of silence, then speech from 6.114 s (VAD, ms). Placed 5.4 s
    before the question ends, less than 250 ms of its first segment remains after the cut,
    which Silero's minimum-speech rule drops: the onset is the NEXT segment's start minus the
    skip (0.714 s), not 0 as VAD on the whole answer, offset, would say."""
    x = load_audio(STEREO_DIALOGUE)
    ans = x[1, int(15.46 * 16000):]
    whole = speech_segments(ans, time_resolution=3)
    assert whole[0][1] - 5.4 < 0.30 and whole[1][0] == pytest.approx(6.114, abs=0.032)
    q_path, _ = make_clips(STEREO_DIALOGUE, tmp_path)
    write_wav(tmp_path / "answer.wav", ans)
    cols = dict(audio_path=[str(q_path)], answer_audio_path=[str(tmp_path / "answer.wav")],
                context_end_time=[CONTEXT_END], question_end_time=[QUESTION_END], answer_start_time=[-5.4])
    r = score_columns("interruptions", cols, vad_time_resolution=3)
    s = r["per_sample"][0]
    # the question's speech runs to its end (gap 0): latency = the cut answer's onset
    assert s["latency_ms"] == pytest.approx(1000 * (whole[1][0] - 5.4), abs=FRAME_MS)
    assert s["latency_ms"] > 600
    # the overlap still uses the uncut answer: its first segment overlaps FEE016's turn
    assert s["interruption"] is True
    r1 = score_columns("interruptions", cols)  # upstream 0.1 s resolution
    assert r1["latency_ms"] == pytest.approx(700.0)


def test_silent_answer_counts_its_question_gap(real_dir, tmp_path):
    """A digitally silent answer is scored: onset 0, so latency = the question's gap after its
    last speech + answer_start_time; it enters latency_ms but not latency_ms_speech."""
    x = load_audio(STEREO_DIALOGUE)
    # question clip ends 1.0 s after FEE016's speech (15.48 s): append 1 s of silence
    q = np.concatenate([x[:, : int(QUESTION_END * 16000)], np.zeros((2, 16000), np.float32)], axis=1)
    write_wav(tmp_path / "q.wav", q)
    write_wav(tmp_path / "q2.wav", q)  # each input clip has exactly one answer
    write_wav(tmp_path / "silent.wav", np.zeros(3 * 16000, np.float32))
    _, talk = make_clips(STEREO_DIALOGUE, tmp_path, pad_s=0.5)
    cols = dict(audio_path=[str(tmp_path / "q.wav"), str(tmp_path / "q2.wav")], answer_audio_path=[str(tmp_path / "silent.wav"), str(talk)],
                context_end_time=[CONTEXT_END] * 2, question_end_time=[QUESTION_END + 1.0] * 2,
                answer_start_time=[0.2, 0.0])
    r = score_columns("interruptions", cols, vad_time_resolution=3)
    silent, spoken = r["per_sample"]
    gap = QUESTION_END + 1.0 - speech_segments(q.mean(0), time_resolution=3)[-1][1]
    assert gap == pytest.approx(1.0, abs=0.1)  # the appended second, less Silero's end padding
    assert silent["status"] == "ok" and silent["answer_speech_after_skip"] is False
    assert silent["latency_ms"] == pytest.approx(1000 * (gap + 0.2))
    assert spoken["latency_ms"] == pytest.approx(1000 * (gap + 0.5), abs=2 * FRAME_MS)
    assert r["latency_ms"] == pytest.approx((silent["latency_ms"] + spoken["latency_ms"]) / 2)
    assert r["latency_ms_speech"] == pytest.approx(spoken["latency_ms"])
    assert r["no_speech_answers_%"] == 50.0


@pytest.mark.slow
def test_minus_question_end_rows_scored_as_upstream(real_dir, tmp_path):
    """Rows whose answer_start_time is -question_end_time written with 3 decimals (a half-duplex
    proxy's onset 0.0): upstream's metadata-example question ends, each with that answer_start_time,
    parse (one of them puts the onset 1e-14 s before the clip), and the latency and overlap equal
    scripts/spear_reference.py's re-statement of SPEAR's rule on the same files."""
    import csv
    import sys
    from pathlib import Path

    from conftest import REFERENCE
    from spear_datasets.schema import RowError, parse_row

    q_ends = [float(r["question_end_time"]) for r in csv.DictReader(open(REFERENCE / "spear_metadata_example.csv"))]
    asts = [round(-q, 3) for q in q_ends]
    assert sum(q + a < 0 for q, a in zip(q_ends, asts)) == 1  # 7.193999999999988 - 7.194: the rounding case
    for q, a in zip(q_ends, asts):
        parse_row({"audio_path": "in.wav", "answer_audio_path": "a.wav", "context_end_time": "0",
                   "question_end_time": repr(q), "answer_start_time": repr(a)})
    with pytest.raises(RowError, match="before the input clip"):  # a real unit error still is one
        parse_row({"audio_path": "in.wav", "answer_audio_path": "a.wav", "context_end_time": "0",
                   "question_end_time": "7.19", "answer_start_time": "-7.2"})

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import spear_reference as ref

    q_end = q_ends[1]  # 7.193999999999988, inside the 15.48 s input clip
    audio, answer = make_clips(STEREO_DIALOGUE, tmp_path, answer_s=14.0)  # answer speech goes on past the cut
    cols = dict(audio_path=[str(audio)], answer_audio_path=[str(answer)], context_end_time=[3.0],
                question_end_time=[q_end], answer_start_time=[asts[1]])
    row = score_columns("interruptions", cols)["per_sample"][0]
    assert row["status"] == "ok", row
    want_lat = ref.latency_ms(str(audio), str(answer), q_end, asts[1])
    want = ref.interruption(str(audio), str(answer), 3.0, q_end, asts[1])
    assert row["latency_ms"] == pytest.approx(want_lat, abs=1e-3)
    assert row["interrupted_time_ms"] == pytest.approx(want["interrupted_time_ms"], abs=1e-3)
    assert bool(row["interruption"]) == bool(want["interruption"])
