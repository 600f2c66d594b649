"""Dimension.resampled_aggregate (the bootstrap's per-resample aggregate, per-row inputs read
once into arrays) gives what the dimension's aggregate gives on the resampled rows, bit for bit,
and summarize's intervals are those of the generic recompute.

Per-row values are scored from real fixture audio (VAD / Praat pitch / stand-in ASR and MOS on
the real answers), then spread over more rows (each copy's numbers scaled by its own factor, so
that sums depend on their order) with questioners and split/subset tables arranged as the cases
need: rows with ``None`` values, a questioner with one answer, one whose answers are all
unvoiced, two subset tables and a path that names none.
"""

from __future__ import annotations

import numpy as np
import pytest

from spear_datasets.audio import write_wav
from spear_metrics.core.dimension import Dimension
from spear_metrics.core.pitch import F0_STATS
from spear_metrics.core.records import SampleResult
from spear_metrics.core.scoring import score_columns
from spear_metrics.core.stats import aggregate_intervals

from conftest import STEREO_DIALOGUE
from helpers import CONTEXT_END, QUESTION_END, known_asr, make_clips, row


def _values(result: dict) -> list[dict]:
    """The per-row values as the dimension produced them (what summarize receives)."""
    assert all(s["status"] == "ok" for s in result["per_sample"]), result["per_sample"]
    return [SampleResult.from_json(s).values for s in result["per_sample"]]


def _scaled(v: dict, keys, f: float) -> dict:
    return {k: (x * f if k in keys and x is not None else x) for k, x in v.items()}


def _resamples(n: int) -> list[np.ndarray]:
    """The identity, then 50 bootstrap resamples (with repeats) of n rows."""
    rng = np.random.default_rng(0)
    return [np.arange(n), *(rng.integers(0, n, n) for _ in range(50))]


def _assert_bit_identical(dim: Dimension, rows, values) -> None:
    fast = dim.resampled_aggregate(rows, values)
    for idx in _resamples(len(values)):
        slow = dim.aggregate([rows[i] for i in idx], [values[i] for i in idx])
        got = fast(idx)
        assert list(got) == list(slow)  # same keys, same order
        for k, v in slow.items():
            if isinstance(v, float):
                # repr round-trips a double: equal reprs = the same bits (sign of zero, NaN too)
                assert isinstance(got[k], float) and repr(got[k]) == repr(v), (k, got[k], v)
            else:
                assert got[k] == v, (k, got[k], v)


def _assert_same_intervals(dim: Dimension, rows, values) -> None:
    """summarize's ``_ci95`` (through resampled_aggregate) = aggregate_intervals over the generic
    recompute, the path summarize took before resampled_aggregate existed (rows resampled one by
    one; these rows are all of one conversation, so the default conversation bootstrap gives
    none: tests/test_clustered_stats.py)."""
    out = dim.summarize(rows, values, n_resamples=200, seed=0, bootstrap_unit="row")
    keys = [k[: -len("_ci95")] for k in out if k.endswith("_ci95")]
    live = [k for k in keys if out[k] is not None and out[f"{k}_n"] >= 2]
    old = aggregate_intervals(Dimension.resampled_aggregate(dim, rows, values), len(values), live, n_resamples=200, seed=0)
    assert live and any(out[f"{k}_ci95"] is not None for k in live)
    for k in keys:
        assert out[f"{k}_ci95"] == old.get(k), k


# ------------------------------------------------------------------ interruptions


@pytest.fixture(scope="module")
def interruption_rows(real_dir, tmp_path_factory):
    """Real VAD timings: answers padded 0 / 0.3 / 0.7 s, placed at the question end (no
    ``answer_start_time``: interruption values None), 0.5 s early (an overlap) and 0.3 s late,
    and a digitally silent answer (no speech: left out of latency_ms_speech)."""
    tmp = tmp_path_factory.mktemp("interruptions")
    clips = [make_clips(STEREO_DIALOGUE, tmp, pad_s=p, name=f"in{i}") for i, p in enumerate([0.0, 0.3, 0.7, 0.0, 0.0])]
    write_wav(tmp / "silent.wav", np.zeros(3 * 16000, np.float32))
    answers = [str(a) for _, a in clips[:4]] + [str(tmp / "silent.wav")]  # each input clip has one answer
    inputs = [str(q) for q, _ in clips]
    asts = [None, -0.5, 0.3, None, 0.2]
    r = score_columns("interruptions", dict(audio_path=inputs, answer_audio_path=answers,
                                            context_end_time=[CONTEXT_END] * 5, question_end_time=[QUESTION_END] * 5,
                                            answer_start_time=asts), vad_time_resolution=3)
    real = _values(r)
    assert real[4]["answer_speech_after_skip"] is False and real[1]["interruption"] is True
    assert real[0]["interrupted_time_ms"] is None and real[2]["interruption"] is False
    rng = np.random.default_rng(1)
    values = [_scaled(real[i % 5], {"latency_ms", "interrupted_time_ms"}, float(rng.uniform(0.5, 1.5))) for i in range(137)]
    rows = [row(inputs[i % 5], answers[i % 5], asts[i % 5]) for i in range(137)]
    return rows, values


def test_interruptions_resampled_aggregate_is_bit_identical(interruption_rows):
    from spear_metrics.interruptions.definition import Interruptions

    _assert_bit_identical(Interruptions(), *interruption_rows)


def test_interruptions_summarize_intervals_unchanged(interruption_rows):
    from spear_metrics.interruptions.definition import Interruptions

    _assert_same_intervals(Interruptions(), *interruption_rows)


# ------------------------------------------------------------------ explainable features

#: (table folder or None, questioner, how many answers, voiced?): a questioner with one answer,
#: one whose answers are all unvoiced (no normaliser), the same questioner in both tables, a
#: group of >= 8 answers (so resamples hold groups of every size), a path naming no table
_GROUPS = [("improvised", "P0001A", 6, True), ("improvised", "P0002A", 1, True), ("improvised", "P0003A", 3, False),
           ("naturalistic", "P0001A", 12, True), ("naturalistic", "P0004A", 2, True), ("naturalistic", "P0005A", 4, True),
           (None, "P0006A", 5, True), ("improvised", "P0007A", 9, True), ("naturalistic", "P0008A", 3, True)]


@pytest.fixture(scope="module")
def explainable_rows(real_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("explainable")
    write_wav(tmp / "silence.wav", np.zeros(2 * 16000, np.float32))  # unvoiced: no F0 statistic
    write_wav(tmp / "short.wav", np.zeros(100, np.float32))  # shorter than Praat's window: no value at all
    answers = [str(real_dir / n) for n in ("speechbrain__p225_002.wav", "speechbrain__p226_002.wav", "faster-whisper__jfk.flac")]
    answers += [str(tmp / "silence.wav"), str(tmp / "short.wav")]
    inputs = [str(make_clips(STEREO_DIALOGUE, tmp, name=f"q{i}")[0]) for i in range(5)]  # one answer per input clip
    r = score_columns("explainable_features", dict(audio_path=inputs, answer_audio_path=answers,
                                                   context_end_time=[1.0] * 5, question_end_time=[2.0] * 5,
                                                   answer_start_time=[None] * 5))
    real = _values(r)
    voiced, unvoiced = real[:3], real[3:]
    assert all(v["f0_mean_hz"] for v in voiced) and all(v["f0_mean_hz"] is None for v in unvoiced)
    assert unvoiced[1]["explainable_duration_s"] is None
    hz = {*F0_STATS, "f0_mean_hz", "explainable_duration_s"}
    rng = np.random.default_rng(2)
    rows, values = [], []
    for table, questioner, n, is_voiced in _GROUPS:
        for j in range(n):
            src = (voiced if is_voiced else unvoiced)[j % (3 if is_voiced else 2)]
            v = _scaled(src, hz, float(rng.uniform(0.6, 1.6)))
            folder = f"test/{table}/" if table else "clips/"
            rows.append(row(f"{folder}{questioner}_{j}.wav", f"answers/{questioner}_{j}.wav", None,
                            transcript_question=f"P0999A: so? {questioner}: well?"))
            values.append(v)
    # a voiced answer missing one statistic, and one with statistics but no mean F0 (normalised
    # by the other answers of its group)
    values[1]["f0_max_hz"] = None
    values[2]["f0_mean_hz"] = None
    order = rng.permutation(len(rows))  # groups interleaved, as rows of a split are
    return [rows[i] for i in order], [values[i] for i in order]


def test_explainable_resampled_aggregate_is_bit_identical(explainable_rows):
    from spear_metrics.explainable_features.definition import ExplainableFeatures

    rows, values = explainable_rows
    assert {r.questioner for r in rows} >= {"P0001A", "P0002A", "P0003A"}
    assert ExplainableFeatures().aggregate(rows, values)["explainable_normalized_f0_std_avg"] is not None
    _assert_bit_identical(ExplainableFeatures(), rows, values)
    unvoiced = [v for v in values if v["f0_mean_hz"] is None and v["f0_min_hz"] is None]
    _assert_bit_identical(ExplainableFeatures(), rows[: len(unvoiced)], unvoiced)  # no value on any resample


def test_explainable_summarize_intervals_unchanged(explainable_rows):
    from spear_metrics.explainable_features.definition import ExplainableFeatures

    _assert_same_intervals(ExplainableFeatures(), *explainable_rows)


def test_row_means_of_a_contiguous_block_are_np_mean_of_each_list():
    """What normalized_f0_std_avg_resampler relies on for bit-identical group means, on the
    installed numpy: ``block.mean(axis=1)`` of a C-contiguous (groups, m) array equals
    ``np.mean`` of each row as a list (the slow path's group lists)."""
    rng = np.random.default_rng(3)
    for m in [*range(1, 41), 63, 64, 65, 127, 128, 129, 257, 1000]:
        for groups in (1, 3, 50, 2000 if m <= 16 else 20):
            block = rng.normal(150.0, 40.0, (groups, m)) * 10.0 ** rng.integers(-3, 4, (groups, m))
            rows = [float(np.mean(r.tolist())) for r in block]
            assert block.mean(axis=1).tolist() == rows, (m, groups)


# ------------------------------------------------------------------ speech quality


def _stand_ins(monkeypatch, texts: dict[str, list[str]]):
    """ASR backends with known transcripts (cycled) and a MOS backend reading the real waves."""
    from spear_metrics.core import asr as asr_mod, mos as mos_mod
    from spear_metrics.core.mos import MOSBackend

    class Level(MOSBackend):
        name = "level"
        keys = ("DNSMOS_OVRL", "DistillMOS")

        def __init__(self, **_):
            pass

        def _one(self, wave):
            rms = float(np.sqrt(np.mean(np.square(wave))))
            return {"DNSMOS_OVRL": 1.0 + 40.0 * rms, "DistillMOS": None if rms < 0.05 else 5.0 - 20.0 * rms}

    for key in texts:
        monkeypatch.setitem(asr_mod.ASR_BACKENDS, key, known_asr(key, texts[key]))
    monkeypatch.setitem(mos_mod.MOS_BACKENDS, "level", Level)


@pytest.fixture(scope="module", params=["spear-pair", "one-asr"])
def speech_quality_rows(request, real_dir, tmp_path_factory):
    """SPEAR's two ASR systems (pooled WER_%) or one other ASR (WER_% null, with its note);
    empty hypotheses (no normalised value), a reference cleaned to nothing, UTMOS notes."""
    spear = request.param == "spear-pair"
    texts = ({"whisper-large-v3": ["Ask her to bring these things", "wrong words entirely", "Ask her", ""],
              "qwen3-asr-0.6b": ["", "Ask her to bring these things with her", "bring things", "Ask"]} if spear
             else {"standin-asr": ["Ask her to bring these things", "", "things", "her to bring"]})
    answers = [str(real_dir / n) for n in ("speechbrain__p225_002.wav", "speechbrain__p226_002.wav",
                                            "faster-whisper__jfk.flac", "pyannote-audio__sample.wav")]
    refs = ["P0002: Ask her to bring these things.", "P0002: Mm-hmm.", "P0002: [noise]", "P0002: Bring these things."]
    tmp = tmp_path_factory.mktemp("speech_quality")
    inputs = [str(make_clips(STEREO_DIALOGUE, tmp, name=f"q{i}")[0]) for i in range(4)]  # one answer per input clip
    with pytest.MonkeyPatch.context() as mp:
        _stand_ins(mp, texts)
        r = score_columns("speech_quality", {"audio_path": inputs, "answer_audio_path": answers,
                                             "context_end_time": [0.5] * 4, "question_end_time": [1.0] * 4,
                                             "answer_start_time": [0.2] * 4, "transcript_answer": refs},
                          asr=",".join(texts), mos="level")
        from spear_metrics.speech_quality.definition import SpeechQuality

        dim = SpeechQuality(asr=",".join(texts), mos="level")
    real = _values(r)
    assert dim.spear_asr is spear and (r["WER_%"] is None) is not spear
    assert any(v is None for x in real for k, v in x.items() if k.startswith("WER_norm_%_"))
    assert "UTMOS_note" in real[0]
    rng = np.random.default_rng(4)
    scaled = {k for k in real[0] if k.startswith(("WER_", "CER_", "DNSMOS", "DistillMOS"))}
    values = [_scaled(real[i % 4], scaled, float(rng.uniform(0.5, 1.5))) for i in range(101)]
    rows = [row(inputs[i % 4], answers[i % 4], 0.2) for i in range(101)]
    return dim, rows, values


def test_speech_quality_resampled_aggregate_is_bit_identical(speech_quality_rows):
    dim, rows, values = speech_quality_rows
    _assert_bit_identical(dim, rows, values)
    # rows carrying different ASR labels: the keys depend on the resample, the recompute is used
    mixed = [dict(v) for v in values]
    label = next(k for k in mixed[0] if k.startswith("asr_text_"))
    del mixed[0][label]
    _assert_bit_identical(dim, rows, mixed)


def test_speech_quality_summarize_intervals_unchanged(speech_quality_rows):
    dim, rows, values = speech_quality_rows
    _assert_same_intervals(dim, rows, values)
