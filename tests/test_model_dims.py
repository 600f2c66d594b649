"""Model-based dimensions: formulas on hand-computed inputs, and every model path with tiny
random models of the real architectures through the real loading + batching code."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, STEREO_DIALOGUE
from model_fixtures import five_rows, tiny_models

from spear_metrics.core.batching import duration_batches
from spear_metrics.emotions.definition import avd_correlation, dev_shift, question_turn
from spear_metrics.language_dialect.definition import dialect_entrainment_slope, dialectal_variance, language_decision
from spear_metrics.turn_taking.definition import response_offset_s, spear_dialog, stereo_at
from spear_metrics.turn_taking.vap import clean_vad, dialog_nll, future_vad_labels, unit_nlls, utterance_units, vad_frames

# ---------------------------------------------------------------- formulas, by hand


def test_entrainment_slope_hand_computed():
    # q flattened = [0, 1, 2, 3] -> minmax [0, 1/3, 2/3, 1]; a = 2q + 5 -> minmax identical -> slope 1
    q = np.array([[0.0, 1.0], [2.0, 3.0]])
    assert dialect_entrainment_slope(q, 2 * q + 5) == pytest.approx(1.0)
    # a reversed: a' = 1 - q' -> slope -1
    assert dialect_entrainment_slope(q, -q) == pytest.approx(-1.0)
    # q' = [0, 1/2, 1], a = [0, 0, 1] (minmax of [1, 1, 3]): cov = 1/4... slope = sum(dq*da)/sum(dq^2)
    # dq = [-1/2, 0, 1/2], da = [-1/3, -1/3, 2/3] -> (1/6 + 1/3) / (1/2) = 1
    assert dialect_entrainment_slope(np.array([[1.0, 2.0, 3.0]]), np.array([[1.0, 1.0, 3.0]])) == pytest.approx(1.0)
    # dq = [-1/2, 0, 1/2], a' = [0, 1, 0] -> da = [-1/3, 2/3, -1/3] -> (1/6 - 1/6) = 0
    assert dialect_entrainment_slope(np.array([[1.0, 2.0, 3.0]]), np.array([[5.0, 7.0, 5.0]])) == pytest.approx(0.0)
    assert dialect_entrainment_slope(np.ones((2, 3)), np.random.rand(2, 3)) is None  # constant question side
    assert dialect_entrainment_slope(np.zeros((0, 16)), np.zeros((0, 16))) is None


def test_dialectal_variance_is_trace_of_ddof1_covariance():
    a = np.array([[0.0, 1.0], [2.0, 1.0], [4.0, 4.0]])
    # column 0: mean 2, var ddof1 = (4+0+4)/2 = 4; column 1: mean 2, (1+1+4)/2 = 3 -> trace 7
    assert dialectal_variance(a) == pytest.approx(7.0)
    assert dialectal_variance(a[:1]) == 0.0  # one answer: upstream answer_total_variance gives 0.0
    assert dialectal_variance(a[:0]) is None


def test_language_decision_thresholds():
    en = ["eng"]
    assert language_decision(0.99, "eng", 0.99, en) == ("too_short", None)
    assert language_decision(1.0, "eng", 0.49, en) == ("low_confidence", None)
    assert language_decision(1.0, "eng", 0.5, en) == ("ok", True)
    assert language_decision(3.0, "fra", 0.9, en) == ("ok", False)


def test_avd_correlation_and_dev_shift():
    # benchmark_line.avd_correlation: Pearson r over rows with both values
    assert avd_correlation([1, 2, 3], [2, 4, 7]) == pytest.approx(np.corrcoef([1, 2, 3], [2, 4, 7])[0, 1])
    assert avd_correlation([1, 2, None, 4], [2, 4, 9, None]) == pytest.approx(1.0)  # pairs with a None are dropped
    assert avd_correlation([0.5, 0.5, 0.5], [0.1, 0.2, 0.3]) is None  # constant question side -> null (NaN upstream)
    assert avd_correlation([0.1, 0.2, 0.3], [0.4, 0.4, 0.4]) is None  # constant answer side
    assert avd_correlation([0.1, None], [0.2, 0.3]) is None  # one pair
    assert avd_correlation([], []) is None
    logits = np.arange(101, dtype=float) - 10.0  # -10 .. 90, 1st percentile = -9
    c = dev_shift(logits)
    assert c == pytest.approx(9.0)
    assert np.mean(logits + c > 0) >= 0.98 and np.quantile(logits + c, 0.01) == pytest.approx(0.0)


def test_question_turn_cut_as_spear():
    x = np.arange(100, dtype=np.float32)
    # round(0.125 * 100) = 12 (half to even), round(0.5 * 100) = 50
    assert list(question_turn(x, 0.125, 0.5, sr=100)[[0, -1]]) == [12.0, 49.0]
    assert len(question_turn(x, 0.9, 2.0, sr=100)) == 10  # end capped at the clip's length
    assert len(question_turn(x, 0.6, 0.5, sr=100)) == 0  # an end before the start gives an empty turn


def test_future_vad_labels_by_hand():
    T = 150
    vad = np.zeros((T, 2), np.int8)
    vad[:, 0] = 1  # speaker 0 always active -> bits 0..3 set
    vad[60:, 1] = 1  # speaker 1 from 50 Hz frame 60 (1.2 s)
    lab = future_vad_labels(vad, 80, 80)  # 50 Hz model: anchor of frame i = i + 1
    assert (lab[50:] == -1).all() and (lab[:50] >= 0).all()  # a target needs anchor + 100 <= 150
    # frame 0: bins [1,11) [11,31) [31,61) [61,101); speaker 1 is active 1/30 of bin 2, all of bin 3
    assert lab[0] == 0b1111 | (1 << 7)
    # frame 39: bin 1 = [50,70) holds frames 60..69 = 10/20 = 0.5 >= 0.5 (SPEAR's threshold_ratio) -> bit 5
    assert lab[39] == 0b1111 | (1 << 5) | (1 << 6) | (1 << 7)
    assert (future_vad_labels(vad, 80, 30)[30:] == -1).all()  # frames past the audio have no target
    # 12.5 Hz model (24 kHz backbones): anchor = 4 (i + 1) -> frame 9 looks at 50 Hz frames [40, 140)
    lab12 = future_vad_labels(vad, 20, 20, frame_hz=12.5)
    assert lab12[9] == 0b1111 | (1 << 5) | (1 << 6) | (1 << 7) and lab12[12] == -1


def test_vad_frames_and_dualturn_clean_up_by_hand():
    # segments in samples: frames [start // 320, end // 320); a 100-sample segment inside frame 20 marks nothing
    v = vad_frames([(0, 3200), (6400, 6500)], 16000)
    assert len(v) == 50 and v[:10].all() and v[10:].sum() == 0
    x = np.array([1] * 5 + [0] * 3 + [1] * 10 + [0] * 4 + [1] * 10 + [0] * 20 + [1] * 3, np.int8)
    c = clean_vad(x)  # 7 frames = 140 ms minimum
    assert c[:8].sum() == 0  # 5-frame speech run removed (the 8 frames of silence it leaves stay)
    assert c[8:32].all()  # the 4-frame silence between two runs is filled
    assert c[32:52].sum() == 0 and c[52:].all()  # long silence kept; a short run at the very end is kept
    lead = clean_vad(np.array([0] * 3 + [1] * 10 + [0] * 3, np.int8))
    assert lead[:13].all() and lead[13:].sum() == 0  # a short leading silence is filled, a trailing one is not


def test_utterance_units_by_hand():
    vad = np.zeros((500, 2), np.int8)  # 10 s at 50 Hz
    vad[50:150, 0] = 1  # speaker 0: 1.0-3.0 s
    vad[160:250, 0] = 1  # and 3.2-5.0 s: merged with the first (0.2 s gap, speaker 1 silent)
    vad[300:320, 1] = 1  # speaker 1: 0.4 s, shorter than 0.5 s -> no unit
    vad[400:450, 1] = 1  # speaker 1: 8.0-9.0 s
    units = [(u["kind"], round(u["start_s"], 6), round(u["end_s"], 6), u["speaker"]) for u in utterance_units(vad, 10.0)]
    assert units == [("utterance_start", 0.0, 1.0, 0), ("utterance_end", 3.0, 5.0, 0),
                     ("utterance_start", 6.0, 8.0, 1), ("utterance_end", 7.0, 9.0, 1)]
    vad[150:160, 1] = 1  # speaker 1 talks in speaker 0's gap: no merge, so 4 units for speaker 0 (its 2nd island is 1.8 s)
    assert sum(u["speaker"] == 0 for u in utterance_units(vad, 10.0)) == 4


def test_unit_nlls_and_dialog_nll_by_hand():
    nll = np.array([1.0] * 200 + [3.0] * 200)  # 8 s at 50 Hz
    units = [{"start_s": 0.0, "end_s": 1.0}, {"start_s": 3.0, "end_s": 5.0}, {"start_s": 6.0, "end_s": 8.0},
             {"start_s": 2.9, "end_s": 3.05}]
    vm = np.zeros((400, 2), np.int8)
    # unit 0 lies in the 3 s context; unit 3 keeps frames 150..152 (< 5); unit 1 = frames 150..249 -> 2.0; unit 2 -> 3.0
    assert unit_nlls(nll, units, vm) == [2.0, 3.0]
    d = dialog_nll([2.0, 3.0])
    assert d["dialog_nll"] == pytest.approx(0.5 * 2.5 + 0.5 * 3.0) and d["n_units"] == 2  # worst ceil(0.25*2)=1 unit
    assert dialog_nll([]) is None
    vm[250:, 0] = 1  # no unit: fallback to frames within 2 s (100 frames) of the VAD change at frame 250
    assert unit_nlls(nll, [], vm) == [pytest.approx((50 * 1.0 + 151 * 3.0) / 201)]  # frames 150..350
    assert unit_nlls(nll, [], np.zeros((400, 2), np.int8)) == [pytest.approx((50 * 1.0 + 200 * 3.0) / 250)]  # all after 3 s


def test_spear_dialog_placement_by_hand():
    clip = np.zeros((2, 16000), np.float32)
    ans = stereo_at(np.ones((1, 8000), np.float32), 16000, 16000)  # mono -> both channels
    d, start = spear_dialog(clip, ans, -0.25, 16000)
    assert start == 16000 + round(-0.25 * 16000) == 12000
    assert d.shape == (2, 20000) and d[0, 12000] == d[1, 12000] == 1.0 and d[:, 11999].sum() == 0
    d, start = spear_dialog(clip, ans, -2.0, 16000)  # before the clip's start: placed at 0, not cut
    assert start == 0 and d.shape == (2, 16000) and d[:, :8000].all()
    assert spear_dialog(clip, ans, None, 16000)[1] == 16000
    loud = np.full((2, 16000), 0.8, np.float32)
    d, _ = spear_dialog(loud, 0.5 * ans, -0.5, 16000)  # 0.8 + 0.5 = 1.3 > 1 -> divided by 1.3
    assert np.abs(d).max() == pytest.approx(1.0) and d[0, 0] == pytest.approx(0.8 / 1.3)
    d, _ = spear_dialog(loud, 0.1 * ans, -0.5, 16000)  # peak 0.9: untouched
    assert d[0, 0] == pytest.approx(0.8) and d[0, 12000] == pytest.approx(0.9)
    three = np.stack([np.full(100, v, np.float32) for v in (0.1, 0.2, 0.3)])
    assert list(stereo_at(three, 16000, 16000)[:, 0]) == pytest.approx([0.1, 0.2])  # first two channels kept
    assert stereo_at(np.zeros((1, 24000), np.float32), 24000, 16000).shape == (2, 16000)


def test_response_offset():
    assert response_offset_s(-0.5, [(0.3, 1.0), (2.0, 3.0)]) == pytest.approx(-0.2)
    assert response_offset_s(None, [(0.4, 1.0)]) == pytest.approx(0.4)
    assert response_offset_s(0.2, []) is None


def test_duration_batches_cover_every_item_once():
    lengths = [5, 100, 7, 100, 50, 1]
    b = duration_batches(lengths, max_items=2)
    assert sorted(i for x in b for i in x) == list(range(6)) and all(len(x) <= 2 for x in b)
    assert b[0] == [1, 3]  # longest first
    b = duration_batches(lengths, max_items=10, max_padded_samples=150)
    assert all(len(x) * max(lengths[i] for i in x) <= 150 or len(x) == 1 for x in b)


# ---------------------------------------------------------------- tiny models, real code paths


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, real_dir):
    root = tmp_path_factory.mktemp("tiny")
    models = tiny_models(root / "models")
    (root / "data").mkdir()
    md = five_rows(STEREO_DIALOGUE, root / "data")
    return models, md


def _columns(md: Path) -> dict:
    import csv

    rows = list(csv.DictReader(open(md)))
    cols = {k: [r[k] for r in rows] for k in rows[0]}
    cols["answer_start_time"] = [None if v == "" else float(v) for v in cols["answer_start_time"]]
    for k in ("context_end_time", "question_end_time"):
        cols[k] = [float(v) for v in cols[k]]
    return cols


def test_model_dims_batched_equals_unbatched(tiny):
    from spear_metrics.core.scoring import score_columns

    models, md = tiny
    cols = _columns(md)
    opts = dict(models, offset_reference=str(md), offset_reference_onset="none")
    big = score_columns("language_dialect,emotions,turn_taking", cols, base_dir=md.parent, batch_size=5, model_batch_size=4, vap_batch_size=4, **opts)
    one = score_columns("language_dialect,emotions,turn_taking", cols, base_dir=md.parent, batch_size=1, model_batch_size=1, vap_batch_size=1, **opts)
    assert big["n_scored"] == 5 and big["n_failed"] == 0
    ps = big["per_sample"]
    assert ps[0]["language_status"] == "too_short" and ps[0]["english_answer"] is None  # 0.6 s answer
    assert all(p["english_answer"] is True for p in ps[1:])  # the tiny LID's bias says "eng"
    assert all(len(p["answer_dialect_logscores"]) == 16 for p in ps[1:])
    assert all(math.isclose(sum(math.exp(v) for v in p["answer_dialect_logscores"]), 1.0, rel_tol=1e-4) for p in ps[1:])
    assert all(0.0 <= p["answer_arousal"] <= 1.0 for p in ps)
    assert all(p["turn_taking_naturalness"] < 0 and p["vap_units"] > 0 for p in ps)
    assert ps[1]["response_offset_s"] == pytest.approx(-0.5 + 0.0, abs=0.11)  # real speech from the answer's start
    for key in ("english_answers_%", "dialectal_variance", "dialectal_entrainment_spearman", "arousal_question_answer_corr",
                "turn_taking_naturalness", "turn_taking_offset_loglik"):
        assert big[key] is not None, key
        assert big[key] == pytest.approx(one[key], rel=1e-4, abs=1e-5), key
    assert big["english_answers_%"] == 100.0  # 4 English of 4 known (the too-short answer is excluded)
    assert big["emotional_naturalness_logit"] is None and "naturalness" in big["emotional_naturalness_logit_note"]
    assert big["turn_taking_offset_reference"]["n"] == 4  # one row has an empty answer_start_time


def test_naturalness_classifier_plugs_in(tiny, tmp_path):
    import torch
    from safetensors.torch import save_file

    from spear_metrics.core.scoring import score_columns

    models, md = tiny
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    (tmp_path / "config.json").write_text(json.dumps({"type": "spear_naturalness_mlp", "input_dim": 16, "hidden": [4], "shift": 100.0}))
    save_file({f"net.{k}": v for k, v in net.state_dict().items()}, str(tmp_path / "model.safetensors"))
    r = score_columns("emotions", _columns(md), base_dir=md.parent, emotion_model=models["emotion_model"], naturalness_classifier=str(tmp_path))
    vals = [p["emotional_naturalness_logit"] for p in r["per_sample"]]
    assert all(v is not None and 99 < v < 101 for v in vals)  # shift 100 + a small random logit
    assert r["emotional_naturalness_logit"] == pytest.approx(np.mean(vals))


def test_missing_model_stops_with_one_line_naming_it(tiny, monkeypatch):
    """No row is at fault when the model cannot be had: the metric fails as a whole, in one line."""
    from spear_metrics.core.models import ModelUnavailableError
    from spear_metrics.core.scoring import score_columns

    _, md = tiny
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailableError) as e:
        score_columns("emotions", _columns(md), base_dir=md.parent, emotion_model="nobody/no-such-emotion-model")
    assert "nobody/no-such-emotion-model" in str(e.value) and "\n" not in str(e.value)


def test_evaluate_load_is_offline_and_fast(tiny):
    """Every module loads without touching a model; the first compute loads it."""
    code = (
        "import time, evaluate; t=time.time(); "
        "ms=[evaluate.load('spear_metrics/'+n) for n in ('language_dialect','emotions','turn_taking','stances')]; "
        "print(round(time.time()-t, 2)); import sys; "
        "print(any(m.startswith('transformers.models.whisper') for m in sys.modules))"
    )
    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    load_s, whisper_imported = out.stdout.split()[-2:]
    assert whisper_imported == "False"
    assert float(load_s) < 30.0


def test_evaluate_module_computes_with_tiny_model(tiny):
    import evaluate

    models, md = tiny
    cols = _columns(md)
    m = evaluate.load(str(REPO / "spear_metrics" / "turn_taking"))
    r = m.compute(audio_path=[str(md.parent / p) for p in cols["audio_path"]],
                  answer_audio_path=[str(md.parent / p) for p in cols["answer_audio_path"]],
                  context_end_time=cols["context_end_time"], question_end_time=cols["question_end_time"],
                  answer_start_time=cols["answer_start_time"], speakers=cols["speakers"],
                  transcript_question=cols["transcript_question"], vap_model=models["vap_model"])
    assert r["n_scored"] == 5 and r["turn_taking_naturalness"] is not None
    assert r["turn_taking_offset_loglik"] is None and "offset_reference" in r["turn_taking_offset_loglik_note"]


def test_emotions_score_whole_turns_of_the_averaged_clip(tiny):
    """Each side is one forward pass of the whole turn: the question is the input clip with both
    channels averaged, cut at context_end_time..question_end_time (not the questioner's channel)."""
    from spear_datasets.audio import load_audio
    from spear_metrics.core.scoring import score_columns
    from spear_metrics.core.vox_whisper import EMOTION_DIM_HEADS, VoxWhisper

    models, md = tiny
    cols = _columns(md)
    r = score_columns("emotions", cols, base_dir=md.parent, emotion_model=models["emotion_model"], model_batch_size=3)
    assert r["n_scored"] == 5 and r["emotions_n_pairs"] == 5 and r["emotions_min_question_s"] == 1.0
    # r over the 5 pairs, recomputed on each bootstrap resample; counts and settings get no interval
    assert r["arousal_question_answer_corr_n"] == 5 and "arousal_question_answer_corr_ci95" in r
    assert "emotions_n_pairs_ci95" not in r and "emotions_min_question_s_n" not in r
    vox = VoxWhisper(models["emotion_model"], EMOTION_DIM_HEADS, positions="checkpoint")
    k = 4  # question turn 4.0 .. 15.48 s of the stereo AMI clip (both speakers talk in it)
    clip = load_audio(md.parent / cols["audio_path"][k])  # (2, n)
    q_mix = question_turn(clip.mean(axis=0), cols["context_end_time"][k], cols["question_end_time"][k])
    q_ch0 = question_turn(clip[0], cols["context_end_time"][k], cols["question_end_time"][k])
    one = vox.predict([q_mix], padding="mel")[0]
    assert r["per_sample"][k]["question_arousal"] == pytest.approx(round(float(one["arousal_layer"][0]), 6), abs=2e-6)
    ch0 = vox.predict([q_ch0], padding="mel")[0]
    assert abs(float(ch0["arousal_layer"][0]) - float(one["arousal_layer"][0])) > 1e-6  # the channel matters
    answer = load_audio(md.parent / cols["answer_audio_path"][k], channels="mix")[0]
    a_one = vox.predict([answer], padding="mel")[0]  # the whole 9 s answer, one pass
    assert r["per_sample"][k]["answer_valence"] == pytest.approx(round(float(a_one["valence_layer"][0]), 6), abs=2e-6)


def test_emotions_min_question_length_is_an_option_recorded_in_the_summary(tiny):
    from spear_metrics.core.scoring import score_columns

    models, md = tiny
    cols = _columns(md)
    # question turns: 6.74, 9.48, 5.48, 3.48, 11.48 s -> with a 5 s minimum row 3 is not scored
    r = score_columns("emotions", cols, base_dir=md.parent, emotion_model=models["emotion_model"], min_question_s=5.0)
    ps = r["per_sample"]
    assert r["emotions_min_question_s"] == 5.0 and r["emotions_n_pairs"] == 4
    assert ps[3]["emotions_question_too_short"] is True and ps[3]["question_arousal"] is None and ps[3]["answer_arousal"] is None
    assert all(ps[i]["question_arousal"] is not None for i in (0, 1, 2, 4))
    pairs = [(p["question_valence"], p["answer_valence"]) for i, p in enumerate(ps) if i != 3]
    assert r["valence_question_answer_corr"] == pytest.approx(avd_correlation(*zip(*pairs)))
    from spear_metrics.core.dimension import OptionError

    with pytest.raises(OptionError):
        score_columns("emotions", cols, base_dir=md.parent, emotion_model=models["emotion_model"], min_question_s="long")


def test_whole_turn_log_mel_is_zero_padded_after_the_turn(tiny, real_dir):
    """SPEAR's forward_fast: log-mel of the turn alone, then zeros up to 1500 frames (not the
    log-mel of padded silence, as the wrapper's own forward gives)."""
    from spear_datasets.audio import load_audio
    from spear_metrics.core.vox_whisper import EMOTION_DIM_HEADS, VoxWhisper

    models, _ = tiny
    vox = VoxWhisper(models["emotion_model"], EMOTION_DIM_HEADS, positions="checkpoint")
    x = load_audio(STEREO_DIALOGUE, channels="mix")[0]
    two_s = x[16000 * 2: 16000 * 4]
    mel = vox._whole_mel(two_s).numpy()
    assert mel.shape == (128, 1500)
    assert np.all(mel[:, 200:] == 0.0) and np.abs(mel[:, :200]).sum() > 0  # 2 s = 200 frames of 10 ms
    wrapper = vox.features([two_s], sampling_rate=16000, return_tensors="np").input_features[0]
    assert not np.all(wrapper[:, 200:] == 0.0)  # the wrapper pads the audio: log-mel of silence there
    long = x[: 16000 * 20]  # 20 s: frames beyond 15 s are cut
    assert vox._whole_mel(long).shape == (128, 1500)
    mel_r = vox.predict([two_s], padding="mel")[0]["arousal_layer"][0]
    audio_r = vox.predict([two_s], padding="audio")[0]["arousal_layer"][0]
    assert mel_r != audio_r
    assert vox.predict([np.zeros(0, np.float32)], padding="mel") == [None]  # an empty turn has no score


def test_turn_taking_dialog_and_vad_on_the_real_dialogue(tiny):
    """SPEAR's dialog on the stereo AMI clip: the answer (MEO015's turn, a mono file) lands on
    BOTH channels at len(q) + round(answer_start_time * sr); Silero sees FEE016 talking in the
    question on channel 0 only, and the answer on both channels."""
    from spear_datasets.audio import load_audio
    from spear_metrics.core.dimension import Sample
    from spear_metrics.core.scoring import prepare_rows
    from spear_metrics.turn_taking.definition import TurnTaking, spear_vad50

    models, md = tiny
    import csv

    prep = prepare_rows(list(csv.DictReader(open(md))), md.parent)
    s: Sample = prep.samples[1]  # answer_start_time -0.5 s, 2 s answer
    q = load_audio(s.audio_path)
    a = load_audio(s.answer_audio_path)[0]
    item = TurnTaking(vap_model=models["vap_model"]).prepare(s, 16000)
    start = item["answer_start"]
    assert start == q.shape[1] + round(-0.5 * 16000)
    d = item["audio"]
    assert np.abs(d).max() <= 1.0 and d.shape[1] == start + len(a)
    for c in (0, 1):  # dialog minus the question = the answer, on each channel
        np.testing.assert_allclose(d[c, start:] - np.pad(q[c, start:], (0, len(a) - (q.shape[1] - start))), a, atol=1e-6)
    vad = item["vad"]
    assert vad.shape == (d.shape[1] // 320, 2)
    # FEE016 talks 0.78-15.48 s on channel 0 (channel 1 only hears headset crosstalk)
    assert vad[50:400, 0].mean() > 0.9 and vad[50:400, 1].mean() < vad[50:400, 0].mean()
    after_q = int(np.ceil(q.shape[1] / 320)) + 1  # past the question, both channels hold the same answer samples
    assert vad[after_q:].any() and np.array_equal(vad[after_q:, 0], vad[after_q:, 1])
    np.testing.assert_array_equal(vad, spear_vad50(d, backend="jit"))  # Silero's streaming call gives the same frames
    assert item["units"] and all(u["end_s"] - u["start_s"] <= 2.0 + 1e-9 for u in item["units"])
    at24 = TurnTaking(vap_model=models["vap_model"]).prepare(s, 24000)  # a 24 kHz backbone: VAD still at 16 kHz
    assert abs(at24["audio"].shape[1] - 1.5 * d.shape[1]) <= 2 and np.array_equal(at24["vad"], vad)


def test_turn_taking_naturalness_follows_the_units(tiny):
    from spear_metrics.core.scoring import score_columns

    models, md = tiny
    r = score_columns("turn_taking", _columns(md), base_dir=md.parent, vap_model=models["vap_model"])
    ps = r["per_sample"]
    assert all(p["turn_taking_naturalness"] < 0 and p["vap_units"] >= 1 for p in ps)
    assert r["turn_taking_naturalness"] == pytest.approx(np.mean([p["turn_taking_naturalness"] for p in ps]))


def test_turn_taking_separated_project_key(tiny):
    """The project key puts the answer on the answerer's channel only (MEO015, channel 1): past the
    question, channel 0 is silent; the published key is unchanged by the option."""
    import csv

    from spear_datasets.audio import load_audio
    from spear_metrics.core.scoring import prepare_rows, score_columns
    from spear_metrics.turn_taking.definition import TurnTaking

    models, md = tiny
    s = prepare_rows(list(csv.DictReader(open(md))), md.parent).samples[1]
    q = load_audio(s.audio_path)
    item = TurnTaking(vap_model=models["vap_model"]).prepare(s, 16000, separated=True)
    d, start = item["audio"], item["answer_start"]
    assert start == q.shape[1] - 8000 and not d[0, q.shape[1]:].any() and d[1, q.shape[1]:].any()
    cols = _columns(md)
    plain = score_columns("turn_taking", cols, base_dir=md.parent, vap_model=models["vap_model"])
    sep = score_columns("turn_taking", cols, base_dir=md.parent, vap_model=models["vap_model"], vap_separated="true")
    assert plain["turn_taking_naturalness_separated"] is None and "vap_separated" in plain["turn_taking_naturalness_separated_note"]
    assert sep["turn_taking_naturalness"] == plain["turn_taking_naturalness"]
    assert sep["turn_taking_naturalness_separated"] is not None
    assert sep["turn_taking_naturalness_separated"] != sep["turn_taking_naturalness"]


def test_offset_reference_uses_the_runs_vad_backend(tiny):
    """The human offsets are found with the scored side's VAD settings (an unknown backend is
    refused up front), and upstream's streaming call gives the same offsets as the default
    batched one on these real answers."""
    from spear_metrics.turn_taking.definition import OffsetReference

    _, md = tiny
    batched = OffsetReference(str(md), onset="vad")
    jit = OffsetReference(str(md), onset="vad", vad_backend="jit")
    assert len(batched.offsets) == 4 and np.array_equal(batched.offsets, jit.offsets)
    with pytest.raises(ValueError, match="unknown VAD backend 'onnx'"):
        OffsetReference(str(md), onset="vad", vad_backend="onnx")
