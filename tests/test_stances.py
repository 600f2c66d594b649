"""Stances: SPEAR's STANCE protocol against a local OpenAI-compatible server (127.0.0.1), with
hand-made STANCE files of SPEAR's schema and rows cut from the real stereo AMI dialogue."""

from __future__ import annotations

import base64
import csv
import io
import json
import wave
from pathlib import Path

import numpy as np
import pytest

from conftest import STEREO_DIALOGUE
from helpers import QUESTION_END, SR, FakeChatServer, dialogue, row, write_rows

from spear_datasets.audio import load_audio, write_wav
from spear_metrics.core.dimension import OptionError
from spear_metrics.core.scoring import score_columns
from spear_metrics.stances.definition import (compare_oriented, infer_target_speaker, known_reference,
                                              patch_question_answer, stance_label, stance_score)

QUESTIONS = {"outside_judge": [
    {"index": 0, "question": "Is the TARGET speaker warm toward the partner?", "related_categories": ["Warmth", "Coldness"],
     "positive_defination": "warm, friendly", "negative_defination": "cold, distant", "positive_followups": ["a"], "negative_followups": ["b"]},
    {"index": 9, "question": "Does the TARGET speaker stay calm?", "related_categories": ["Calmness", "Aggression"],
     "positive_defination": "calm", "negative_defination": "aggressive", "positive_followups": ["a"], "negative_followups": ["b"]},
    {"index": 42, "question": "Not one of SPEAR's ten", "related_categories": ["Coldness"],
     "positive_defination": "x", "negative_defination": "y"},
]}
CATEGORY_ROLES = [("Warmth", "Friendly, Warm"), ("Coldness", "Aloof, Distant"), ("Calmness", "Stable, Steady"),
                  ("Aggression", "Aggressive, Cruel")]
# (file id of participant A, role_a, role_b, explicit category_b)
ASSETS = [("V00_S0001_I00000001_P0001", "Friendly", "Distant", ""),   # row 0: target P0002 -> Coldness
          ("V00_S0002_I00000002_P0003", "Steady", "Aggressive", ""),  # row 1: -> Aggression (flipped label)
          ("V00_S0004_I00000004_P0007", "Aloof", "Friendly", ""),    # row 3: -> Warmth, the judge never answers JSON
          ("V00_S0005_I00000005_P0009", "Aloof", "Warm", "Other")]   # row 4: role fits Q0, category "Other": no reference
STEMS = ["V00_S0001_I00000001_P0001_P0002_0", "V00_S0002_I00000002_P0003_P0004_0", "V01_S0003_I00000003_P0005_P0006_0",
         "V00_S0004_I00000004_P0007_P0008_0", "V00_S0005_I00000005_P0009_P0010_0"]
ANSWER_START = [-0.5, 0.25, 0.0, 0.0, None]


def _answers_for(body: dict) -> tuple[int, str]:
    text = body["messages"][-1]["content"][0]["text"]
    if "TARGET speaker id: P0008" in text:
        return 200, "I think it is positive."  # never JSON: that row fails
    if "Question: Is the TARGET speaker warm" in text:
        return 200, '{"choice": "N", "probability": 0.8, "evidence": ["flat tone", "short reply"]}'  # -> -2
    return 200, 'Here: {"choice": "P", "probability": 0.9, "evidence": ["even pace", "soft voice"]} done'  # -> +2


@pytest.fixture(scope="module")
def stance_data(tmp_path_factory, real_dir):
    root = tmp_path_factory.mktemp("stances")
    (root / "assets").mkdir()
    (root / "questions_main.json").write_text(json.dumps(QUESTIONS))
    with open(root / "category_roles.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["category_name", "Adjectives assigned"])
        w.writerows(CATEGORY_ROLES)
    with open(root / "assets" / "interactions_role_ABmapped.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["a_id", "b_id", "role_a", "role_b", "category_b", "participant_a_prompt_text", "participant_b_prompt_text",
                    "interaction_type", "prompt_id_unique"])
        for a_id, ra, rb, cb in ASSETS:
            b_id = a_id[:-1] + str(int(a_id[-1]) + 1)
            w.writerow([a_id, b_id, ra, rb, cb, f"You are {ra.lower()}.", f"You are {rb.lower()}.", "improvised", "p1"])
    with open(root / "assets" / "relationships.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["vendor_id", "session_id", "relationship_detail"])
        w.writerow(["V00", "0001", "colleagues at work"])
    x = dialogue(STEREO_DIALOGUE)
    q = x[:, : int(QUESTION_END * SR)]
    rows = []
    for k, stem in enumerate(STEMS):
        p1, p2 = stem.split("_")[3], stem.split("_")[4]
        write_wav(root / f"{stem}.wav", q)
        write_wav(root / f"answer_{stem}.wav", x[1, int(15.46 * SR): int(17.46 * SR)])
        rows.append(row(f"{stem}.wav", f"answer_{stem}.wav", ANSWER_START[k], speakers=f"{p1}|{p2}", conversation_id=stem[:19],
                        transcript_question=f"{p1}: so what do you think?", transcript_answer=f"{p2}: well I think so"))
    md = write_rows(root / "metadata.csv", rows)
    raw = list(csv.DictReader(open(md)))
    cols = {k: [r[k] for r in raw] for k in raw[0]}
    cols["answer_start_time"] = [None if v == "" else float(v) for v in cols["answer_start_time"]]
    for k in ("context_end_time", "question_end_time"):
        cols[k] = [float(v) for v in cols[k]]
    opts = dict(stance_questions=str(root / "questions_main.json"), stance_assets=str(root / "assets"),
                stance_category_roles=str(root / "category_roles.csv"), judge_retries=1, judge_backoff_s=0)
    return root, cols, opts


def test_spear_rules_by_hand():
    assert [stance_score("P", p) for p in (0.1, 0.45, 0.74, 0.75, 1.0)] == [0, 1, 1, 2, 2]
    assert [stance_score("n", p) for p in (0.44, 0.5, 0.9)] == [0, -1, -2]
    assert stance_score("P", 1.5) == 2 and stance_score("N", -0.3) == 0  # clamped to [0, 1], as SPEAR
    for bad in (("X", 0.5), ("P", "high"), ("P", None)):
        with pytest.raises((ValueError, TypeError)):
            stance_score(*bad)
    assert known_reference("coldness", ["Warmth", "Coldness"]) == -2 and known_reference("Warmth ", ["warmth"]) == 2
    assert known_reference("Other", ["Warmth", "Coldness"]) is None and known_reference("", ["Warmth"]) is None
    assert stance_label("Aggression", ["Calmness", "Aggression"], "q") == "aggression"
    assert stance_label("", ["Disorganization/Chaos", "x"], "q") == "disorganization"
    # an override label flips both: +2 judged against -2 is "higher" unflipped, "lower" flipped
    assert compare_oriented(2, -2, False) == {"same_sign": False, "lower": False, "higher": True}
    assert compare_oriented(2, -2, True) == {"same_sign": False, "lower": True, "higher": False}
    assert compare_oriented(0, 2, False)["same_sign"] is False and compare_oriented(None, 2, False)["lower"] is None
    assert infer_target_speaker("P1: hi. P2: how are you?<...>P1: fine", "P1|P2") == "P1"
    assert infer_target_speaker("P1: hello there", "P1|P2") == "P1"  # no question: the last turn's speaker
    assert infer_target_speaker("", "P1|P2") == "P2"  # no transcript: the last listed speaker


def test_patched_track_on_real_audio(real_dir):
    x = load_audio(STEREO_DIALOGUE)  # 16-bit PCM, stereo
    q, a = x[:, :16000], x[1:, 20000:28000]
    ints = np.floor(q * 32768).astype(np.int64)
    track, sr = patch_question_answer(q, 16000, a, 16000, -0.25)
    assert sr == 16000 and track.dtype == np.int16 and len(track) == 12000 + 8000  # start = 16000 + round(-0.25 * 16000)
    mono = np.floor((ints[0] + ints[1]) / 2)
    assert np.array_equal(track[:12000], mono[:12000])  # the question alone: floor of the channel mean
    both = np.clip(mono[12000:16000] + np.floor(a[0, :4000] * 32768), -32768, 32767)
    assert np.array_equal(track[12000:16000], both)  # overlap: 16-bit sum
    # starts 0.5 s before the clip: the question is delayed by 0.5 s of silence and the answer sits at 0
    early, _ = patch_question_answer(q, 16000, a, 16000, -1.5)
    assert len(early) == 8000 + 16000
    assert np.array_equal(early[:8000], np.floor(a[0] * 32768)) and np.array_equal(early[8000:], mono)
    a24 = load_audio(STEREO_DIALOGUE, sr=24000)[1:, 30000:42000]  # a 24 kHz answer is brought to 16 kHz (audioop.ratecv)
    t24, _ = patch_question_answer(q, 16000, a24, 24000, 0.0)
    assert len(t24) == 16000 + 8000


def test_stances_spear_protocol_with_local_judge(stance_data):
    root, cols, opts = stance_data
    with FakeChatServer(_answers_for) as srv:
        r = score_columns("stances", cols, base_dir=root, judge_url=srv.url, judge_model="fake-audio-judge", **opts)
    ps = r["per_sample"]
    assert [p["status"] for p in ps] == ["ok", "ok", "ok", "failed", "ok"]
    # row 0: target P0002 "Distant" -> Coldness = Q0's second category -> reference -2; judge N 0.8 -> -2: same sign
    assert ps[0]["stance_q0_reference"] == -2 and ps[0]["stance_q0_score"] == -2 and ps[0]["stance_q0_flip"] is False
    assert "stance_q9_reference" not in ps[0] or ps[0]["stance_q9_reference"] is None  # Q9 not usable for a Distant target
    # row 1: "Aggressive" -> Aggression = Q9's second category -> -2; judge P 0.9 (JSON inside prose) -> +2;
    # label "aggression" flips both: reference +2, score -2 -> lower
    assert ps[1]["stance_q9_reference"] == -2 and ps[1]["stance_q9_score"] == 2 and ps[1]["stance_q9_flip"] is True
    assert ps[1]["stance_lower_n"] == 1 and ps[1]["stance_higher_n"] == 0
    assert ps[2]["stance_pairs"] == 0  # no asset row for its file id: no usable question, no pair
    assert "gave no usable answer after 2 attempt(s)" in ps[3]["error"] and "\n" not in ps[3]["error"]
    assert ps[4]["stance_q0_reference"] is None and ps[4]["stance_q0_score"] is None and ps[4]["stance_pairs"] == 0
    assert r["stance_n_pairs"] == 2 and r["stance_same_as_question_%_n"] == 2  # (row, question) pairs, not rows
    assert "stance_n_pairs_ci95" not in r
    assert r["stance_same_as_question_%"] == 50.0 and r["stance_more_negative_%"] == 50.0 and r["stance_more_positive_%"] == 0.0
    # the requests: SPEAR's prompt fields, schema, temperature 0, no seed; only pairs with a reference are judged
    texts = [b["messages"][-1]["content"][0]["text"] for b in srv.requests]
    assert len(srv.requests) == 2 + 2  # row 0 (Q0), row 1 (Q9), row 3 (Q0, tried twice)
    body = srv.requests[0]
    assert body["model"] == "fake-audio-judge" and body["temperature"] == 0.0 and "seed" not in body
    assert body["max_completion_tokens"] == 128 and body["modalities"] == ["text"]
    assert body["response_format"]["json_schema"]["name"] == "stance_judge_output"
    assert body["response_format"]["json_schema"]["schema"]["required"] == ["choice", "probability", "evidence"]
    assert body["messages"][0]["content"].startswith("You are a careful dialogue analyst.")
    t0 = texts[0]
    for part in ("TARGET speaker id: P0002", "TARGET role: Distant", "TARGET category: Coldness",
                 "The original dialogue/question ends at 15.48 seconds", "Question: Is the TARGET speaker warm",
                 "Definition N:\ncold, distant", "Relationship/context: colleagues at work",
                 "Participant A prompt: You are friendly.", "Participant B prompt: You are distant.",
                 "Transcript: P0001: so what do you think?<...>P0002: well I think so"):
        assert part in t0, part
    audio = body["messages"][-1]["content"][1]
    assert audio["type"] == "input_audio" and audio["input_audio"]["format"] == "wav"
    with wave.open(io.BytesIO(base64.b64decode(audio["input_audio"]["data"]))) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 16000)
        n = w.getnframes()
    nq, na = int(QUESTION_END * SR), 2 * SR
    assert n == max(nq, nq + round(-0.5 * SR) + na)  # row 0: answer 0.5 s before the question's end


def test_stances_without_files_is_null_with_note(stance_data):
    root, cols, _ = stance_data
    r = score_columns("stances", cols, base_dir=root)
    assert r["n_scored"] == 5 and r["stance_n_pairs"] == 0
    assert r["stance_same_as_question_%"] is None and "stance_questions" in r["stances_note"]


def test_missing_stance_asset_is_a_whole_run_problem(stance_data, tmp_path, capsys):
    root, cols, opts = stance_data
    bad = dict(opts, stance_assets=str(tmp_path))  # a folder without interactions_role_ABmapped.csv
    with pytest.raises(OptionError, match="interactions_role_ABmapped.csv"):
        score_columns("stances", cols, base_dir=root, judge_url="http://127.0.0.1:9/v1", **bad)
    from spear_metrics.cli import main

    argv = ["score", "--metadata", str(root / "metadata.csv"), "--metrics", "stances", "--out", str(tmp_path / "out"),
            "-o", f"stance_questions={tmp_path / 'nope.json'}", "-o", f"stance_assets={root / 'assets'}",
            "-o", "judge_url=http://127.0.0.1:9/v1"]
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "nope.json" in err[0]


def test_stance_judge_calls_in_summary_and_a_rerun_pays_only_what_the_cache_lacks(stance_data, tmp_path, capsys):
    """``score -m stances`` records its judge calls in summary.json (``judge_calls``) as the other
    judged benchmarks do; a rerun into a new folder is answered from the reply cache, except the
    row whose replies were never JSON (malformed replies are never stored)."""
    from judge_fakes import CountingJudge, completion

    from spear_metrics.cli import main

    root, _, opts = stance_data

    def reply(body):
        status, text = _answers_for(body)
        return status, completion(text, model="judge-audio-2025-08-28", audio_tokens=60)

    with CountingJudge(reply) as srv:
        argv = ["score", "--metadata", str(root / "metadata.csv"), "--metrics", "stances", "--no-progress",
                "--bootstrap", "0", "-o", f"judge_url={srv.url}", "-o", "judge_model=judge-audio-2025-08-28",
                "-o", "judge_key_env=none"] + [a for k, v in opts.items() for a in ("-o", f"{k}={v}")]
        main(argv + ["--out", str(tmp_path / "r1")])
        assert srv.calls == 4  # row 0 (Q0), row 1 (Q9), row 3 (Q0, never JSON: tried twice)
        main(argv + ["--out", str(tmp_path / "r2")])
        assert srv.calls == 6  # only row 3 asked again
    c1 = json.loads((tmp_path / "r1" / "summary.json").read_text())["judge_calls"]
    c2 = json.loads((tmp_path / "r2" / "summary.json").read_text())["judge_calls"]
    assert (c1["requested_model"], c1["moving_alias"]) == ("judge-audio-2025-08-28", None)
    assert (c1["answers"], c1["answers_from_cache"], c1["requests"]) == (2, 0, 4)
    assert (c2["answers"], c2["answers_from_cache"], c2["requests"]) == (2, 2, 2)
    assert c1["returned_models"] == {"judge-audio-2025-08-28": 2}
    # every reply that reached the client is billed (row 3's malformed ones too), none from the cache
    u1, u2 = c1["usage"]["total"], c2["usage"]["total"]
    assert (u1["input_tokens"], u1["audio_input_tokens"], u1["output_tokens"]) == (400, 240, 40)
    assert (u2["input_tokens"], u2["audio_input_tokens"], u2["output_tokens"]) == (200, 120, 20)
    assert "2 from the cache" in capsys.readouterr().out


def test_stance_questions_fifo_and_an_asset_csv_over_its_limit_are_refused_in_one_line(tmp_path, monkeypatch):
    """A questions JSON that is a FIFO (whose plain open blocks until a writer comes) is an
    OptionError naming the file, at once; an asset CSV over the byte limit (lowered here to 64
    bytes) is one too, never read whole."""
    import os

    import spear_metrics.stances.definition as D
    from spear_metrics.core.dimension import OptionError

    os.mkfifo(tmp_path / "q.json")
    with pytest.raises(OptionError, match="stance_questions .*q.json.*not a regular file"):
        D.StanceAssets(tmp_path / "q.json", tmp_path)
    (tmp_path / "q2.json").write_text(json.dumps({"outside_judge": [{"index": 0, "question": "?"}]}))
    (tmp_path / "interactions_role_ABmapped.csv").write_text("a_id,b_id\n" + "x,y\n" * 40)  # 170 bytes
    monkeypatch.setattr(D, "MAX_ASSET_BYTES", 64)
    with pytest.raises(OptionError, match="stance_assets .*interactions_role_ABmapped.csv.*over the 64-byte limit"):
        D.StanceAssets(tmp_path / "q2.json", tmp_path)
