"""SpeechRole-Eval: the judge protocol's exact texts and message layout, the reply parsers on the
released judge outputs, the aggregation recomputed by hand from those files, the data check on
hand-made test data around real recordings, and the judge client against a loopback server."""

from __future__ import annotations

import base64
import io
import json
import shutil
import time
from pathlib import Path

import pytest
import soundfile as sf

from conftest import FIXTURES
from helpers import FakeChatServer
from speechrole_fixtures import SHREK_PROMPT, make_eval_root
from spear_metrics.core.judge import Judge, JudgeError
from spear_metrics.speechrole import protocol as P
from spear_metrics.speechrole.aggregate import aggregate_rows, read_judge_results
from spear_metrics.speechrole.data import (
    read_model_outputs,
    read_test_data,
    unknown_roles,
    validate_dialogues,
)

RELEASED = FIXTURES / "speechrole"


@pytest.fixture(scope="module")
def released() -> Path:
    if not RELEASED.is_dir():
        pytest.fail(f"SpeechRole fixtures not found at {RELEASED} (tests/fixtures is incomplete)")
    return RELEASED


# ----------------------------------------------------------------------------- protocol texts


V1_FLUENCY_INSTRUCTION = (
    "\n\n## **[Model B's Response End]**\n\n\n## **[Instruction]**\n\nThe task instruction of the two models is to "
    "directly role-play as Shrek.\n\nPlease evaluate the following aspect of each model's response:\nSpeech Fluency: "
    "Are the responses delivered fluently, with smooth articulation, appropriate pacing, and minimal disfluencies such "
    "as stuttering or unnatural pauses?\n\nPlease provide a brief qualitative evaluation for the relative performance "
    "of the two models, followed by paired quantitative scores from 1 to 10, where 1 indicates poor performance and 10 "
    "indicates excellent performance.\n\nThe output should be in the following format:\n{Qualitative Evaluation}, "
    "[Scores]: ({the score of Model A}, {the score of Model B})\n\nPlease ensure that your evaluations are unbiased and "
    "that the order in which the responses were presented does not affect your judgment.")

V2_JSON_EXAMPLE = "{\n" + ",\n".join(
    f'  "{a}": {{\n    "reason": "Your qualitative evaluation text here",\n    "score_a": 8,\n    "score_b": 9\n  }}'
    for a in ("Instruction_Adherence", "Speech_Fluency", "Conversational_Coherence", "Speech_Naturalness",
              "Prosodic_Consistency", "Emotion_Appropriateness", "Personality_Consistency",
              "Knowledge_Consistency")) + "\n}"


def test_v1_instruction_is_the_scripts_text_verbatim():
    assert P.instruction_text("v1", "Shrek", "Speech_Fluency") == V1_FLUENCY_INSTRUCTION


def test_v2_instruction_lists_every_aspect_and_the_json_template():
    text = P.instruction_text("v2", "Thor")
    head = ("\n\n## **[Model B's Response End]**\n\n\n## **[Instruction]**\n\nThe task instruction of the two models "
            "is to directly role-play as Thor.\n\nPlease evaluate the following aspects of each model's response:\n\n"
            "### Instruction_Adherence:\nInstruction Adherence: Do the spoken responses strictly follow the task "
            "instruction, remaining fully in character without any out-of-role explanations or assistant-like "
            "meta-comments?\n\n### Speech_Fluency:\nSpeech Fluency: ")
    tail = ("### Knowledge_Consistency:\nKnowledge Consistency: Are the responses grounded in the character's "
            "established background, knowledge, and relationships, without fabricating out-of-character facts?\n\n"
            "For each aspect, please provide a brief qualitative evaluation for the relative performance of the two "
            "models, followed by paired quantitative scores from 1 to 10, where 1 indicates poor performance and 10 "
            "indicates excellent performance.\n\nYou must output your response in JSON format only, with the following "
            "structure:\n" + V2_JSON_EXAMPLE + "\n\nPlease ensure that your evaluations are unbiased and that the "
            "order in which the responses were presented does not affect your judgment. Output only valid JSON, no "
            "additional text or markdown formatting.")
    assert text.startswith(head) and text.endswith(tail)
    assert P.v2_json_example() == V2_JSON_EXAMPLE
    assert text.count("### ") == 8


def test_message_layout_with_input_audio_parts():
    users = ["Are onions like ogres?", "Then what about parfaits?"]
    a = [P.audio_part(b"RIFF-a0"), P.audio_part(b"RIFF-a1")]
    b = [P.audio_part(b"RIFF-b0"), P.audio_part(b"RIFF-b1")]
    msgs = P.build_messages("v1", system_prompt=SHREK_PROMPT, users=users, role=P.role_name(SHREK_PROMPT),
                            audio_a=a, audio_b=b, aspect="Speech_Fluency")
    assert msgs[0] == {"role": "system", "content": "You are a helpful assistant."}
    content = msgs[1]["content"]
    assert msgs[1]["role"] == "user" and [p["type"] for p in content] == [
        "text", "input_audio", "input_audio", "text", "input_audio", "input_audio", "text"]
    assert content[0]["text"] == (
        "## **[Question Start]**\n\n" + SHREK_PROMPT + "There are multiple rounds of questions, divided by ###:\n"
        "Are onions like ogres?\n###\nThen what about parfaits?\n\n## **[Question End]**\n\n\n## **[Model A's "
        "response start, with one answer audio in each round]**\n\n")
    assert content[3]["text"] == ("\n\n## **[Model A's Response End]**\n\n\n## **[Model B's response start, with one "
                                  "answer audio in each round]**\n\n")
    assert content[6]["text"] == V1_FLUENCY_INSTRUCTION
    assert content[1] == {"type": "input_audio", "input_audio": {
        "data": "data:audio/wav;base64," + base64.b64encode(b"RIFF-a0").decode(), "format": "wav"}}
    assert content[5]["input_audio"]["data"].endswith(base64.b64encode(b"RIFF-b1").decode())
    bare = P.audio_part(b"xyz", "base64")["input_audio"]["data"]
    assert bare == base64.b64encode(b"xyz").decode()
    with pytest.raises(ValueError):
        P.audio_part(b"x", "url")


def test_role_name_as_the_script_derives_it():
    assert P.role_name(SHREK_PROMPT) == "Shrek"
    assert P.role_name("I want you to act like 胡桃 from 原神.\nmore") == "胡桃 from 原神"
    assert P.role_name("You are Thor.") == "You are Thor"  # no phrase: the whole line minus its last character


def test_prompt_versions_differ_and_name_the_protocol():
    v1, v2 = P.prompt_version("v1"), P.prompt_version("v2")
    assert v1.startswith("v1-") and v2.startswith("v2-") and v1[3:] != v2[3:] and len(v1) == 15


# ----------------------------------------------------------------------------- parsers


def test_v1_parser_reads_every_released_reason_as_its_score(released):
    n = 0
    for f in sorted(released.glob("*/*/*.json")):
        for item in json.loads(f.read_text(encoding="utf-8")):
            obj = item[0] if isinstance(item, list) else item
            for a in P.ASPECTS:
                res = obj[f"{a}_results"]
                got = P.parse_v1(res["reason"])
                assert got["score"] == list(res["score"]), (f.name, a)
                assert got["reason"] == res["reason"].strip()
                n += 1
    assert n == 5 * 2 * 8  # five role files, two dialogues each, eight aspects


def test_v1_parser_edge_cases():
    assert P.parse_v1("good, [Scores]: (6,9)")["score"] == [6, 9]
    assert P.parse_v1("[Scores]: (10, 2) then [Scores]: (1, 1)")["score"] == [10, 2]  # the first match, as re.search
    with pytest.raises(ValueError, match="no '\\[Scores\\]"):
        P.parse_v1("**Scores**: 6 and 9")
    with pytest.raises(ValueError):
        P.parse_v1("[Scores]: (6.5, 9)")


def _v2(obj) -> str:
    return json.dumps(obj)


def test_v2_parser():
    full = {a: {"reason": f"r {a}", "score_a": 5, "score_b": 9} for a in P.ASPECTS}
    out = P.parse_v2(_v2(full))
    assert out["Speech_Fluency"] == {"reason": "r Speech_Fluency", "score": [5, 9]}
    fenced = "Here:\n```json\n" + _v2({**full, "Thor": 1}) + "\n```"
    assert P.parse_v2(fenced)["Knowledge_Consistency"]["score"] == [5, 9]
    alt = {**full, "Speech_Fluency": {"reason": "x", "score": ["7", 8.0]}}
    assert P.parse_v2(_v2(alt))["Speech_Fluency"]["score"] == [7, 8]
    missing = {k: v for k, v in full.items() if k != "Emotion_Appropriateness"}
    with pytest.raises(ValueError, match="Emotion_Appropriateness"):
        P.parse_v2(_v2(missing))
    with pytest.raises(ValueError, match="score_b"):
        P.parse_v2(_v2({**full, "Speech_Fluency": {"reason": "x", "score_a": 3}}))
    with pytest.raises(ValueError, match="not an integer"):
        P.parse_v2(_v2({**full, "Speech_Fluency": {"score_a": 8.7, "score_b": 9}}))
    with pytest.raises(ValueError):
        P.parse_v2("I think A is better.")


# ----------------------------------------------------------------------------- aggregation on released files


def _copy_mode(src: Path, dst: Path, mode: str, names=None) -> None:
    (dst / mode).mkdir(parents=True, exist_ok=True)
    for f in src.glob("*.json"):
        if names is None or f.stem in names:
            shutil.copyfile(f, dst / mode / f.name)


def test_aggregate_ali_cloud_shrek_by_hand(released, tmp_path):
    _copy_mode(released / "ali_cloud" / "single", tmp_path, "single", {"Shrek"})
    rows, info = read_judge_results(tmp_path)
    assert info["shapes"] == {"nested": 1} and [r["dialogue"] for r in rows] == [0, 1]
    s = aggregate_rows(rows, n_resamples=200, seed=0)
    # Instruction_Adherence: dialogue 0 (7, 10), dialogue 1 (9, 10)
    assert s["single_Instruction_Adherence_mean_A"] == (7 + 9) / 2
    assert s["single_Instruction_Adherence_mean_B"] == (10 + 10) / 2
    assert s["single_Instruction_Adherence_ratio_100_sumA_over_sumB"] == pytest.approx(100 * (7 + 9) / (10 + 10))
    # Knowledge_Consistency: (9, 10) and (10, 9): sums equal
    assert s["single_Knowledge_Consistency_ratio_100_sumA_over_sumB"] == pytest.approx(100.0)
    # every pair of the file: dialogue 0 A 7+6+9+5+4+4+7+9, B 10+9+10+9+8+9+10+10; dialogue 1 A 9+6+9+6+6+5+8+10,
    # B 10+9+10+8+9+8+10+9
    sum_a = (7 + 6 + 9 + 5 + 4 + 4 + 7 + 9) + (9 + 6 + 9 + 6 + 6 + 5 + 8 + 10)
    sum_b = (10 + 9 + 10 + 9 + 8 + 9 + 10 + 10) + (10 + 9 + 10 + 8 + 9 + 8 + 10 + 9)
    assert s["single_all_aspects_ratio_100_sumA_over_sumB"] == pytest.approx(100 * sum_a / sum_b)
    assert s["single_all_aspects_mean_A"] == pytest.approx(sum_a / 16)
    assert s["overall_all_aspects_ratio_100_sumA_over_sumB"] == s["single_all_aspects_ratio_100_sumA_over_sumB"]
    assert s["single_Instruction_Adherence_mean_A_n"] == 2 and s["single_all_aspects_mean_A_n"] == 2
    lo, hi = s["single_Instruction_Adherence_mean_A_ci95"]
    assert 7 <= lo <= 8 <= hi <= 9  # resampled means of two dialogues lie in [7, 9]
    assert s["single_n_pairs_scored"] == 16 and s["single_all_aspects_na_share"] == 0.0
    assert s["headline_note"].startswith("unsupported:") and s["dimensions_note"].startswith("unsupported:")
    assert not any(k.startswith("speechrole") or k.endswith("_score") for k in s)


def test_aggregate_flat_shape_cosyvoice2_and_a_ratio_above_100(released, tmp_path):
    _copy_mode(released / "cosyvoice2" / "single", tmp_path, "single")
    rows, info = read_judge_results(tmp_path)
    assert info["shapes"] == {"flat": 1}
    s = aggregate_rows(rows, n_resamples=0)
    # Instruction_Adherence: idx 0 (1, 10), idx 1 (9, 10)
    assert s["single_Instruction_Adherence_mean_A"] == (1 + 9) / 2
    assert s["single_Instruction_Adherence_ratio_100_sumA_over_sumB"] == pytest.approx(100 * (1 + 9) / (10 + 10))
    # Conversational_Coherence: (10, 9) and (1, 1) -> 100 * 11 / 10
    assert s["single_Conversational_Coherence_ratio_100_sumA_over_sumB"] == pytest.approx(110.0)
    assert s["single_Instruction_Adherence_mean_A_ci95"] is None  # no resamples asked


def test_aggregate_modes_overall_na_share_and_position_bias(released, tmp_path):
    _copy_mode(released / "ali_cloud" / "single", tmp_path, "single", {"Shrek"})
    _copy_mode(released / "ali_cloud" / "multi", tmp_path, "multi", {"Thor"})
    # one Thor pair unparsed in our own flat form; a swapped file for single/Shrek (reference first)
    thor = json.loads((tmp_path / "multi" / "Thor.json").read_text(encoding="utf-8"))
    thor[1][0]["Speech_Fluency_results"] = {"reason": "no numbers", "score": None, "error": "malformed reply",
                                            "status": "unparsed"}
    (tmp_path / "multi" / "Thor.json").write_text(json.dumps(thor), encoding="utf-8")
    swapped = [{"idx": i, **{f"{a}_results": {"reason": "", "score": [10, s_sys]} for a in P.ASPECTS}}
               for i, s_sys in ((0, 6), (1, 8))]
    (tmp_path / "swapped" / "single").mkdir(parents=True)
    (tmp_path / "swapped" / "single" / "Shrek.json").write_text(json.dumps(swapped), encoding="utf-8")
    rows, info = read_judge_results(tmp_path)
    assert info["swapped"] and [r["mode"] for r in rows] == ["single", "single", "multi", "multi"]
    s = aggregate_rows(rows, n_resamples=200)
    # multi Thor Speech_Fluency: dialogue 0 (5, 9); dialogue 1 unparsed -> one pair of two replied is na
    assert s["multi_Speech_Fluency_mean_A"] == 5 and s["multi_Speech_Fluency_mean_A_n"] == 1
    assert s["multi_Speech_Fluency_na_share"] == pytest.approx(1 / 2)
    assert s["multi_n_pairs_unparsed"] == 1 and s["overall_all_aspects_na_share"] == pytest.approx(1 / 32)
    # overall Instruction_Adherence: Shrek (7, 10), (9, 10); Thor (9, 10), (8, 10)
    assert s["overall_Instruction_Adherence_ratio_100_sumA_over_sumB"] == pytest.approx(100 * 33 / 40)
    # position bias of the system, Instruction_Adherence: first (7, 9) minus second (6, 8) -> 1 on average
    assert s["single_Instruction_Adherence_position_bias_system"] == pytest.approx(((7 - 6) + (9 - 8)) / 2)
    # the reference: first 10 (swapped) minus second 10 (benchmark order) -> 0
    assert s["single_Instruction_Adherence_position_bias_reference"] == pytest.approx(0.0)
    # Speech_Fluency of Shrek: system first 6 and 6, second 6 and 8 -> ((6-6) + (6-8)) / 2
    assert s["single_Speech_Fluency_position_bias_system"] == pytest.approx(-1.0)
    assert s["single_Speech_Fluency_position_bias_system_n"] == 2
    # multi has no swapped calls: no pair, no bias
    assert s["multi_Instruction_Adherence_position_bias_system"] is None


def test_results_folder_problems_are_reported_not_fatal(tmp_path):
    (tmp_path / "single").mkdir()
    (tmp_path / "single" / "Bad.json").write_text("{not json", encoding="utf-8")
    (tmp_path / "single" / "Odd.json").write_text(json.dumps([[{"idx": 0}, {"idx": 0}]]), encoding="utf-8")
    rows, info = read_judge_results(tmp_path)
    assert rows == [] and len(info["problems"]) == 2


# ----------------------------------------------------------------------------- data check


@pytest.fixture()
def eval_root(tmp_path, real_dir) -> Path:
    return make_eval_root(tmp_path, real_dir)


def test_validate_real_schema_ok_and_reference_sets(eval_root):
    dialogues = read_test_data(eval_root, "single")
    assert [d.key for d in dialogues] == ["single/Shrek/0", "single/Shrek/1", "single/Thor/0"]
    outs = read_model_outputs(eval_root / "model_output" / "sys", "single")
    cases = validate_dialogues(dialogues, outs)
    assert all(c.ok for c in cases), [c.error for c in cases]
    assert cases[0].reference_audio[0].name == "Shrek_0_0.wav" and "role_speech1" in str(cases[0].reference_audio[0])
    assert cases[1].system_audio[0].suffix == ".flac"
    cases2 = validate_dialogues(dialogues, outs, reference_key="role_speech_path2")
    assert "role_speech2" in str(cases2[0].reference_audio[0])
    # the test_data folder itself is accepted too, paths still relative to the dataset root
    assert [c.ok for c in validate_dialogues(read_test_data(eval_root / "test_data", "single"), outs)] == [True] * 3


def test_validate_failures_are_dialogues_with_reasons(eval_root, tmp_path):
    out_json = eval_root / "model_output" / "sys" / "single_result" / "json"
    shrek = json.loads((out_json / "Shrek.json").read_text())
    # dialogue 1 lost, dialogue 0 with a second turn the test dialogue does not have
    shrek.pop("dialogue_1")
    shrek["dialogue_0"].append(shrek["dialogue_0"][0])
    (out_json / "Shrek.json").write_text(json.dumps(shrek))
    (out_json / "Thor.json").unlink()
    (out_json / "Gaston.json").write_text(json.dumps({"role": "Gaston", "dialogue_0": []}))
    dialogues = read_test_data(eval_root, "single")
    outs = read_model_outputs(eval_root / "model_output" / "sys", "single")
    cases = validate_dialogues(dialogues, outs)
    errors = [c.error for c in cases]
    assert "turn counts differ: test dialogue 1, model output 2" in errors[0]
    assert "no dialogue_1" in errors[1]
    assert "no model output for role Thor" in errors[2]
    assert unknown_roles(outs, dialogues) == ["Gaston"]


def test_validate_bad_audio_and_escaping_paths(eval_root):
    out_json = eval_root / "model_output" / "sys" / "single_result" / "json"
    shrek = json.loads((out_json / "Shrek.json").read_text())
    bad = eval_root / "model_output" / "sys" / "single_result" / "audio" / "Shrek" / "broken.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00WAVEnot really audio")
    shrek["dialogue_0"][0]["model_output"]["audio_path"] = str(bad)
    shrek["dialogue_1"][0]["model_output"]["audio_path"] = "../../../../etc/passwd"
    (out_json / "Shrek.json").write_text(json.dumps(shrek))
    thor = json.loads((out_json / "Thor.json").read_text())
    thor["dialogue_0"][0]["model_output"]["audio_path"] = "model_output/sys/single_result/audio/Thor/missing.wav"
    (out_json / "Thor.json").write_text(json.dumps(thor))
    cases = validate_dialogues(read_test_data(eval_root, "single"),
                               read_model_outputs(eval_root / "model_output" / "sys", "single"))
    assert cases[0].error.startswith("output turn 0 audio:") and "broken.wav" in cases[0].error
    assert "escapes its folder" in cases[1].error
    assert "audio file not found" in cases[2].error and "missing.wav" in cases[2].error
    assert all("\n" not in c.error for c in cases)


def test_legacy_single_dialogue_key_is_dialogue_0_only(eval_root):
    out_json = eval_root / "model_output" / "sys" / "single_result" / "json"
    shrek = json.loads((out_json / "Shrek.json").read_text())
    (out_json / "Shrek.json").write_text(json.dumps({"role": "Shrek", "dialogue": shrek["dialogue_0"]}))
    cases = validate_dialogues(read_test_data(eval_root, "single", roles=["Shrek"]),
                               read_model_outputs(eval_root / "model_output" / "sys", "single"))
    assert cases[0].ok and "legacy 'dialogue' list counts as dialogue_0 only" in cases[1].error


def test_broken_test_data_role_file_is_one_failed_row(eval_root):
    (eval_root / "test_data" / "single_turn" / "Thor.json").write_text("[1, 2]")
    dialogues = read_test_data(eval_root, "single")
    assert dialogues[-1].role == "Thor" and dialogues[-1].index == -1 and "not a non-empty list" in dialogues[-1].error
    cases = validate_dialogues(dialogues, read_model_outputs(eval_root / "model_output" / "sys", "single"))
    assert [c.ok for c in cases] == [True, True, False]


# ----------------------------------------------------------------------------- judge client


MSG = [{"role": "user", "content": [{"type": "text", "text": "rate"},
                                    {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}]


def test_judge_honours_retry_after_on_429_and_keeps_attempts():
    with FakeChatServer([(429, "slow down", {"headers": {"Retry-After": "1"}}), (200, "ok [Scores]: (3, 4)")]) as srv:
        j = Judge(srv.url, "judge", backoff_s=0.0, max_retries=2, timeout=5.0, temperature=None)
        t0 = time.monotonic()
        ans = j.ask(MSG, P.parse_v1)
        waited = time.monotonic() - t0
    assert ans.value["score"] == [3, 4] and waited >= 1.0  # slept at least Retry-After (a causal lower bound)
    assert [a.status for a in ans.attempts] == [429, None] and ans.attempts[1].waited_s == 1.0
    assert "temperature" not in srv.requests[0] and "seed" in srv.requests[0]
    assert srv.requests[0]["messages"] == MSG  # content parts travel as given


def test_judge_retry_after_is_capped_and_an_echoed_key_is_masked():
    key = "sk-judge-SECRET-0123456789"
    with FakeChatServer([(401, f"Incorrect API key provided: {key}")]) as srv:
        with pytest.raises(JudgeError) as ei:
            Judge(srv.url, "judge", api_key=key, backoff_s=0.0).ask(MSG, P.parse_v1)
    assert ei.value.status == 401 and key not in str(ei.value) and "***" in str(ei.value) and key not in ei.value.body
    assert all(key not in (a.error or "") for a in ei.value.attempts) and len(srv.requests) == 1
    j = Judge("http://127.0.0.1:9/v1", "m", backoff_s=1.0, max_wait_s=3.0)
    assert j._sleep_before(1, None) == 1.0 and j._sleep_before(3, None) == 3.0 and j._sleep_before(1, 3600.0) == 3.0


def test_judge_500_malformed_and_hang():
    replies = [(500, "boom"), (200, "no numbers here"), (200, "fine [Scores]: (5, 9)")]
    with FakeChatServer(replies) as srv:
        ans = Judge(srv.url, "judge", backoff_s=0.0, max_retries=3, timeout=5.0).ask(MSG, P.parse_v1)
    assert ans.value["score"] == [5, 9] and [a.error is None for a in ans.attempts] == [False, False, True]
    with FakeChatServer([(200, "still no numbers")]) as srv:
        with pytest.raises(JudgeError) as ei:
            Judge(srv.url, "judge", backoff_s=0.0, max_retries=1, timeout=5.0).ask(MSG, P.parse_v1)
    assert ei.value.kind == "malformed" and len(ei.value.attempts) == 2 and "\n" not in str(ei.value)
    assert ei.value.attempts[-1].reply == "still no numbers"
    with FakeChatServer([(200, "late [Scores]: (1, 1)", {"delay_s": 3.0})]) as srv:
        t0 = time.monotonic()
        with pytest.raises(JudgeError) as ei:
            Judge(srv.url, "judge", backoff_s=0.0, max_retries=1, timeout=0.3).ask(MSG, P.parse_v1)
        assert time.monotonic() - t0 < 30  # bounded: two timed-out attempts, not a wait on the server
    assert ei.value.kind == "no_reply" and "total time limit" in str(ei.value) and len(ei.value.attempts) == 2


def test_encoded_audio_v1_bytes_v2_cut_at_60_s(real_dir, tmp_path):
    from spear_datasets.audio import decode, write_wav
    from spear_metrics.speechrole.judging import encoded_wav

    p225 = real_dir / "speechbrain__p225_002.wav"
    assert encoded_wav(str(p225), "v1") == p225.read_bytes()  # v1: the file's own bytes
    flac = encoded_wav(str(real_dir / "faster-whisper__jfk.flac"), "v1")  # not a WAV: sent as 16-bit WAV
    info = sf.info(io.BytesIO(flac))
    assert (info.format, info.subtype, info.samplerate, info.channels) == ("WAV", "PCM_16", 44100, 2)
    assert info.frames == sf.info(real_dir / "faster-whisper__jfk.flac").frames
    long = tmp_path / "long.wav"  # 60 s + 6 s of real speech
    import numpy as np

    a, _ = decode(real_dir / "pyannote-audio__seriously_mixture.wav")
    b, _ = decode(real_dir / "lhotse__ES2011a.Headset-0-40s-46s.wav")
    write_wav(long, np.concatenate([a, b], axis=1), 16000)
    cut = sf.info(io.BytesIO(encoded_wav(str(long), "v2")))
    assert cut.frames == 60 * 16000 and cut.samplerate == 16000
    assert sf.info(io.BytesIO(encoded_wav(str(long), "v1"))).frames == 66 * 16000


def test_test_data_fetch_goes_through_the_bounded_hub_download(tmp_path, monkeypatch):
    """fetch_test_data through the real Hub client in hub_snapshot's child process, against a
    loopback Hub: the role's JSON, then only the reference audio it names (not the other file);
    a Hub that trickles its bytes is cut at the deadline, one line."""
    from helpers import FakeHub, hub_env

    from spear_metrics.speechrole.data import SpeechRoleDataError, fetch_test_data

    role = [{"system_prompt": "You are Shrek.", "dialogue": [{"role_speech_path1": "audio/ref1.wav"}]}]
    files = {"test_data/single_turn/Shrek.json": json.dumps(role).encode(), "audio/ref1.wav": b"RIFF-1",
             "audio/unused.wav": b"RIFF-2"}
    with FakeHub("me/speechrole-mini", files) as hub:
        hub_env(monkeypatch, tmp_path, hub.url)
        root = fetch_test_data("me/speechrole-mini", ["single"], deadline_s=300)
    assert (root / "test_data/single_turn/Shrek.json").is_file() and (root / "audio/ref1.wav").read_bytes() == b"RIFF-1"
    assert not (root / "audio/unused.wav").exists()
    with FakeHub("me/slow", {"test_data/single_turn/A.json": b"[]" * 500_000}, trickle=True) as hub:
        hub_env(monkeypatch, tmp_path / "slow", hub.url)
        with pytest.raises(SpeechRoleDataError, match="HubDeadlineError"):
            fetch_test_data("me/slow", ["single"], deadline_s=3)


def test_aggregate_a_fifo_result_file_is_a_problem_not_a_hang(released, tmp_path):
    """A ``<mode>/<role>.json`` that is a FIFO (whose plain read blocks until a writer comes) is
    listed in ``problems`` and the other files are read (the bounded reader refuses it at once)."""
    import os

    _copy_mode(released / "cosyvoice2" / "single", tmp_path, "single")
    os.mkfifo(tmp_path / "single" / "Zz_fifo.json")
    rows, info = read_judge_results(tmp_path)
    assert any(p.startswith("single/Zz_fifo.json: not JSON") and "not a regular file" in p for p in info["problems"])
    assert info["shapes"] == {"flat": 1} and rows
