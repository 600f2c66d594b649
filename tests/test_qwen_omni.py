"""The ``qwen-omni`` adapter on tiny randomly initialised Qwen2.5-Omni and Qwen3-Omni checkpoints
(``tests/model_fixtures.py``), loaded through the real code (``resolve_model``, ``config.json`` ->
class, ``from_pretrained``, the processors, ``generate`` with the talker and speech decoder), on
clips of the real stereo AMI dialogue: SPEAR's onset rule (clip duration + measured time to the
first text), the 24 kHz answer written at 16 kHz by ``spearbench infer``, the mono mix the model
hears, and the one-line refusals of a model that cannot be had.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import STEREO_DIALOGUE
from helpers import CONTEXT_END, QUESTION_END, SR, row, write_rows
from model_fixtures import tiny_qwen3_omni, tiny_qwen25_omni

from spear_datasets.audio import decode, load_audio, write_wav
from spear_metrics.agents import GenerationConfig, load_agent
from spear_metrics.agents.qwen_omni import (
    OUTPUT_SR,
    SPEAR_INSTRUCTION,
    SYSTEM_PROMPTS,
    build_messages,
    prepare_inputs,
)
from spear_metrics.cli import main

#: the second clip runs this long past the question end (s): its onset must still count from the clip end
LONG_CLIP_S = 20.0


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread: the tiny models gain nothing from two, and lose much on a loaded machine."""
    from spear_metrics.core.batching import one_torch_thread

    with one_torch_thread():
        yield


def _need_torchvision() -> None:
    pytest.importorskip("torchvision", reason="transformers' Qwen-Omni processors need torchvision (pip install torchvision)")


@pytest.fixture(scope="module")
def qwen25(tmp_path_factory) -> Path:
    _need_torchvision()
    # a folder named like the other model: the class must come from config.json, not from the name
    return tiny_qwen25_omni(tmp_path_factory.mktemp("models") / "Qwen3-Omni-30B-A3B-Instruct")


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory) -> Path:
    import transformers

    _need_torchvision()
    if not hasattr(transformers, "Qwen3OmniMoeConfig"):
        pytest.skip(f"transformers {transformers.__version__} has no Qwen3-Omni")
    return tiny_qwen3_omni(tmp_path_factory.mktemp("models") / "Qwen2.5-Omni-7B")


@pytest.fixture(scope="module")
def dialogue(real_dir) -> np.ndarray:
    return load_audio(STEREO_DIALOGUE)  # (2, n) 16 kHz, FEE016 left, MEO015 right


@pytest.fixture(scope="module")
def spear_csv(dialogue, tmp_path_factory) -> Path:
    """Two rows: clip 0-15.48 s (ends at FEE016's question end) and clip 0-20 s (4.52 s past it)."""
    root = tmp_path_factory.mktemp("spear_csv")
    rows = []
    for name, end in [("q_end.wav", QUESTION_END), ("q_long.wav", LONG_CLIP_S)]:
        write_wav(root / name, dialogue[:, : round(end * SR)])
        rows.append(row(name, None, None, context_end_time=CONTEXT_END))
    return write_rows(root / "metadata.csv", rows)


class RecordingProcessor:
    """The real processor, recording the audio each call is given."""

    def __init__(self, processor):
        self._p, self.audio = processor, []

    def __call__(self, *args, **kwargs):
        if kwargs.get("audio") is not None:
            self.audio.append(kwargs["audio"])
        return self._p(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._p, name)


def _answer(agent, clip: np.ndarray, *, max_answer_s: float, seed: int = 0):
    meta = row("clip.wav", None, None, context_end_time=CONTEXT_END, question_end_time=clip.shape[1] / SR)
    return agent.respond(clip, meta, GenerationConfig(max_answer_s=max_answer_s, seed=seed))


def _check_onset(ans, clip_s: float, timing: dict) -> None:
    assert ans.response_time_s is not None and ans.response_time_s > 0
    # SPEAR's rule: clip duration + wall time from the generate call to the first text fragment
    assert ans.onset == pytest.approx(clip_s + ans.response_time_s, abs=1e-9)
    assert ans.onset > clip_s
    # causal order inside one generate call: first token <= first text fragment <= end of generate
    assert 0 < timing["first_token_s"] <= timing["first_text_s"] == ans.response_time_s <= timing["generate_s"]


def test_qwen25_answers_with_spear_onset_mono_mix_and_24k_speech(qwen25, dialogue):
    agent = load_agent("qwen-omni", model=str(qwen25), max_new_tokens=4)
    assert agent.model_type == "qwen2_5_omni" and agent.system_prompt == SYSTEM_PROMPTS["qwen2_5_omni"]
    clip = dialogue[:, : round(QUESTION_END * SR)]
    agent.load()
    assert type(agent.model).__name__ == "Qwen2_5OmniForConditionalGeneration"  # from config.json, not the folder name
    spy = agent.processor = RecordingProcessor(agent.processor)
    ans = _answer(agent, clip, max_answer_s=0.1)

    # the model heard both channels mixed to mono by averaging (librosa's mix, as the proxies load clips)
    (heard,) = spy.audio[0]
    np.testing.assert_array_equal(heard, clip.mean(axis=0))
    assert heard.shape == (clip.shape[1],)

    _check_onset(ans, QUESTION_END, agent.last_timing)
    # 24 kHz speech from DiT + BigVGAN: 2 mel frames x 240 samples = 480 samples per code; the talker
    # is capped at ceil(0.1 s * 24000 / 480) = 5 codes
    assert ans.sample_rate == OUTPUT_SR and ans.audio.ndim == 1
    assert ans.audio.size % 480 == 0 and 0 < ans.audio.size <= 5 * 480
    assert np.isfinite(ans.audio).all() and np.abs(ans.audio).max() <= 1.0
    assert ans.text and ans.finish_reason == "length"  # 4 text tokens (the tiny thinker never ends) and capped speech

    # the same seed gives the same answer (thinker sampling and the DiT's noise are seeded per row)
    again = _answer(agent, clip, max_answer_s=0.1)
    assert again.text == ans.text
    np.testing.assert_array_equal(again.audio, ans.audio)


def test_qwen3_answers_with_spear_onset(qwen3, dialogue):
    agent = load_agent("qwen-omni", model=str(qwen3), max_new_tokens=3, speaker="Aiden")
    assert agent.model_type == "qwen3_omni_moe" and agent.system_prompt == SYSTEM_PROMPTS["qwen3_omni_moe"]
    agent.load()
    assert type(agent.model).__name__ == "Qwen3OmniMoeForConditionalGeneration"
    clip = dialogue[:, : round(LONG_CLIP_S * SR)]
    ans = _answer(agent, clip, max_answer_s=0.5)
    _check_onset(ans, LONG_CLIP_S, agent.last_timing)
    # code2wav: 1920 samples per code (80 ms), talker capped at ceil(0.5 * 24000 / 1920) = 7 codes
    assert ans.sample_rate == OUTPUT_SR and 0 < ans.audio.size <= 7 * 1920
    assert ans.text


def test_processor_inputs_follow_the_proxies(qwen25, qwen3, dialogue):
    """The chat the proxies build (system prompt, clip, SPEAR's instruction after it) through each
    real processor; a 31 s clip is cut to 30 s by Qwen2.5-Omni's processor, not by Qwen3-Omni's."""
    from transformers import AutoProcessor

    mono = dialogue.mean(axis=0)  # the whole 31 s fixture
    assert mono.shape[0] == 31 * SR
    frames, tokens = {}, {}
    for folder, model_type, audio_token in [(qwen25, "qwen2_5_omni", "<|AUDIO|>"), (qwen3, "qwen3_omni_moe", "<|audio_pad|>")]:
        processor = AutoProcessor.from_pretrained(str(folder))
        messages = build_messages(model_type, SYSTEM_PROMPTS[model_type], SPEAR_INSTRUCTION, mono)
        inputs = prepare_inputs(processor, messages, mono)
        text = processor.tokenizer.decode(inputs["input_ids"][0])
        # the instruction follows the audio in the user turn, byte for byte (4 spaces between sentences)
        assert f"{SYSTEM_PROMPTS[model_type]}<|im_end|>" in text
        assert text.endswith(f"{SPEAR_INSTRUCTION}<|im_end|>\n<|im_start|>assistant\n")
        assert "conversation.    Answer when" in text
        frames[model_type] = int(inputs["feature_attention_mask"].sum())
        tokens[model_type] = int((inputs["input_ids"] == processor.tokenizer.convert_tokens_to_ids(audio_token)).sum())
    assert frames == {"qwen2_5_omni": 3000, "qwen3_omni_moe": 3100}  # 10 ms mel frames: 30 s vs the whole 31 s
    # audio placeholders the model attends to: 25 per second of the 30 s kept (two stride-2 stages),
    # 13 per 1 s chunk of the 31 s (Qwen3-Omni's encoder)
    assert tokens == {"qwen2_5_omni": 750, "qwen3_omni_moe": 31 * 13}


def test_spearbench_infer_runs_qwen_omni_on_a_spear_csv(qwen25, spear_csv, tmp_path):
    out = tmp_path / "qwen_out"
    rc = main(["infer", "--agent", "qwen-omni", "-a", f"model={qwen25}", "-a", "max_new_tokens=3",
               "--max-answer-s", "0.1", "--data", str(spear_csv), "--out", str(out), "--no-progress"])
    assert rc == 0
    with open(out / "metadata.csv", newline="") as f:
        meta = list(csv.DictReader(f))
    records = {r["row"]: r for r in map(json.loads, (out / ".work" / "rank-0.jsonl").read_text().splitlines())}
    assert len(meta) == 2 and all(records[i]["status"] == "ok" for i in range(2))
    for i, (r, clip_s) in enumerate(zip(meta, [QUESTION_END, LONG_CLIP_S])):
        rec = records[i]
        wav, sr = decode(out / r["answer_audio_path"])
        # 16 kHz mono, as long as the 24 kHz samples the model returned: n x 480 at 24 kHz = n x 320 at 16 kHz
        assert sr == 16_000 and wav.shape[0] == 1
        assert wav.shape[1] % 320 == 0 and 0 < wav.shape[1] <= 5 * 320
        assert float(r["answer_duration"]) == pytest.approx(wav.shape[1] / 16_000, abs=1e-9)
        # onset counts from the clip start: clip duration + time to first text (causal: > clip end)
        assert rec["onset"] > clip_s
        assert rec["onset"] - clip_s <= rec["elapsed_s"]
        q_end = float(r["question_end_time"])
        assert rec["answer_start_time"] == pytest.approx(rec["onset"] - q_end, abs=1e-9)
        assert float(r["answer_start_time"]) == pytest.approx(rec["answer_start_time"], abs=1e-9)
        assert r["transcript_answer"]
    # the long clip ran 4.52 s past the question end: its answer cannot start before that
    assert float(meta[1]["answer_start_time"]) > LONG_CLIP_S - QUESTION_END


def test_model_that_cannot_be_had_stops_the_run_with_one_line(spear_csv, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rc = main(["infer", "--agent", "qwen-omni", "-a", "model=spearbench-tests/qwen-omni-not-cached",
               "--data", str(spear_csv), "--out", str(tmp_path / "offline"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "spearbench-tests/qwen-omni-not-cached" in err[0] and "HF_HUB_OFFLINE" in err[0]
    assert "-a model=FOLDER" in err[0]  # the agent option that takes a local folder
    assert not (tmp_path / "offline").exists()

    # a checkpoint of another architecture is refused by its config.json model_type
    from transformers import WhisperConfig

    WhisperConfig(d_model=16, encoder_layers=1, decoder_layers=1).save_pretrained(tmp_path / "whisper")
    rc = main(["infer", "--agent", "qwen-omni", "-a", f"model={tmp_path / 'whisper'}",
               "--data", str(spear_csv), "--out", str(tmp_path / "wrong"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[0].startswith("loading Qwen-Omni model ") and len(err) == 2  # resolve_model's progress line
    err = err[1:]
    assert err[0].startswith("spearbench infer: ") and "'whisper' checkpoint" in err[0] and "qwen2_5_omni or qwen3_omni_moe" in err[0]

    # without torchvision the processors cannot be built: the run stops before any row, in one line
    import importlib.util

    from transformers import Qwen2_5OmniConfig

    Qwen2_5OmniConfig().save_pretrained(tmp_path / "qwen_config_only")
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchvision" else find_spec(name, *a))
    rc = main(["infer", "--agent", "qwen-omni", "-a", f"model={tmp_path / 'qwen_config_only'}",
               "--data", str(spear_csv), "--out", str(tmp_path / "no_tv"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1] == "spearbench infer: the Qwen-Omni processors of transformers need torchvision: pip install torchvision"
    assert not (tmp_path / "no_tv").exists()
