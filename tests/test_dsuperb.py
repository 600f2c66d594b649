"""Dynamic-SUPERB Phase-2: task instances in the Hub schema built from real recordings, inference
through the shared adapters into upstream's prediction layout, scoring with a loopback judge and
a tiny local judge, hand-computed metric values, upstream's file formats, results datasets."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pytest

from dsuperb_fixtures import AMI_TEXT, ASR, CLS, JFK_TEXT, REG, VCTK_TEXT, build_instances
from helpers import FakeChatServer
from spear_datasets.ownership import OutFolderError
from spear_metrics.dynamic_superb import metrics as M
from spear_metrics.dynamic_superb.infer import WORK, DSuperbInferError, read_failures, run_dsuperb_inference
from spear_metrics.dynamic_superb.scoring import (
    DSuperbScoreError,
    read_predictions,
    read_submission,
    score_predictions,
    score_texts,
)
from spear_metrics.dynamic_superb.tasks import ManifestError, load_manifest, open_instance

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-dsuperb-test-0123456789abcdef"

# what the scripted model answers, by row id ("<instance>/<file>")
ANSWERS = {
    f"{ASR}/jfk": "And so my fellow Americans ask not what your country can do for you",  # 8 words deleted
    f"{ASR}/p225_002": "ask her to bring these things with her from the store",  # exact
    f"{ASR}/ES2011a_40_46": "I am Abigail Claflin, you can call me Abby",  # m->am, abbie->abby
    f"{CLS}/p225_002": "female [yes]",
    f"{CLS}/p226_002": "female [no]",
    f"{CLS}/jfk": "male [garbage]",
    f"{CLS}/ES2011a_40_46": "female [429]",
    f"{CLS}/ami_dialogue": "female and male [500]",
    f"{REG}/s1": "I'd say 6 out of 10.",
    f"{REG}/s2": "9",
    f"{REG}/s3": "Fluency: 3.5 (hesitant)",
    f"{REG}/s4": "I cannot rate this recording.",
    f"{REG}/s5": "8 points",
}


class Scripted:
    """A local text adapter (TextAgent) that answers from ANSWERS and records what it was sent."""

    def __init__(self, stop_after: int | None = None):
        self.requests = []
        self.stop_after = stop_after

    def respond_text(self, request):
        if self.stop_after is not None and len(self.requests) >= self.stop_after:
            raise KeyboardInterrupt  # stops the run like Ctrl-C (a rerun resumes)
        self.requests.append(request)
        return ANSWERS[request.row_id]


class JudgeScript:
    """The loopback judge's behaviour, read from the marker in the model's response."""

    def __init__(self):
        self.times: dict[str, list[float]] = {}

    def __call__(self, body):
        text = body["messages"][0]["content"]
        # the project's prompt ("Model's response:\n...") or upstream's ("Model's Response: ...")
        resp = text.split("Model's response:\n", 1)[1] if "Model's response:\n" in text else \
            text.split("Model's Response: ", 1)[1]
        marker = resp[resp.index("[") + 1: resp.index("]")]
        self.times.setdefault(marker, []).append(time.monotonic())
        n = len(self.times[marker])
        if marker == "yes":
            return 200, "The answer matches the ground truth.\nResult: YES"
        if marker == "no":
            return 200, "The response names the wrong sex.\nRESULT:   no"
        if marker == "garbage":
            return 200, "I would rather not decide this one."
        if marker == "429":
            return (429, "rate limited", {"headers": {"Retry-After": "1"}}) if n == 1 else (200, "ok\nResult: YES")
        if marker == "500":
            return 500, "internal error"
        if marker == "refuse":
            return 403, "this request was refused by the content policy"
        if marker == "hang":
            return 200, "late\nResult: YES", {"delay_s": 20.0}
        raise AssertionError(marker)


def _header(headers: dict, name: str):
    return next((v for k, v in headers.items() if k.lower() == name), None)


@pytest.fixture(scope="module")
def data(tmp_path_factory, real_dir):
    return build_instances(real_dir, tmp_path_factory.mktemp("dsuperb") / "data")


@pytest.fixture(scope="module")
def pred(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("pred")
    agent = Scripted()
    info = run_dsuperb_inference("scripted", [ASR, CLS, REG], out, agent=agent, data_root=data, progress=False)
    return out, agent, info


@pytest.fixture(scope="module")
def scored(pred, tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    script = JudgeScript()
    from spear_metrics.core.judge import Judge

    with FakeChatServer(script) as srv:
        judge = Judge(srv.url, "loopback-judge", api_key=KEY, seed=None, max_retries=2, timeout=10.0, backoff_s=0.0)
        summary = score_predictions(pred[0], out, judge=judge, judge_concurrency=3, n_resamples=500, seed=0,
                                    seen=[ASR], progress=False)
        judge.close()
    return out, summary, script, srv


# --------------------------------------------------------------------------- the manifest


def test_manifest_rows_and_overrides(tmp_path):
    specs = load_manifest()
    assert len(specs) == 231  # every instance of upstream's taskname_to_metrics
    assert specs[ASR].metric == "word_error_rate" and specs[ASR].revision == "1832d234ffe7ee15b513d3f342d0dab87470310b"
    assert specs["SuperbOODAsrZh_CommonVoice7-Test"].metric == "character_error_rate"
    assert specs["NamedEntityRecognition_SLUE-VoxPopuli"].hub_path == "DynamicSuperb/Named_Entity_Recognition_SLUE-VoxPopuli"
    assert specs["SpeakerCounting_LibriTTS-TestClean"].revision == ""  # not pinned anywhere public
    assert sum(s.metric in M.PROJECT_METRICS for s in specs.values()) == 200
    extra = tmp_path / "m.csv"
    extra.write_text("instance,metric,category\nMyTask_MyData,sacre_bleu,\n" + f"{ASR},mix_error_rate,asr\n")
    specs = load_manifest(extra)
    assert specs["MyTask_MyData"].hub_path == "DynamicSuperb/MyTask_MyData" and specs["MyTask_MyData"].category == "translation"
    assert specs[ASR].metric == "mix_error_rate" and specs[ASR].category == "asr" and specs[ASR].revision == ""
    bad = tmp_path / "bad.csv"
    bad.write_text("instance,hub_path\nX,Y\n")
    with pytest.raises(ManifestError, match="missing column"):
        load_manifest(bad)


def test_instance_reader_checks_rows(data):
    specs = load_manifest()
    asr = open_instance(specs[ASR], data)
    assert [r.file for r in asr.rows] == ["jfk", "p225_002", "ES2011a_40_46", "broken", "nolabel"]
    assert asr.rows[4].error == "row 4 (nolabel) has an empty label" and asr.rows[0].error is None
    assert asr.rows[0].audio == ("audio", "audio2") and asr.rows[0].labels == (JFK_TEXT,)
    assert asr.audio_cell(3, "audio")["path"] == "broken.wav"  # read when asked for, bytes as stored
    cls = open_instance(specs[CLS], data)
    assert cls.rows[4].labels == ("female", "male") and cls.rows[0].labels == ("female",)
    # an instance without a required column: every row fails with that reason
    from datasets import load_from_disk

    load_from_disk(str(data / REG)).remove_columns(["instruction"]).save_to_disk(str(data.parent / "noinstr" / REG))
    reg = open_instance(specs[REG], data.parent / "noinstr")
    assert all(r.error == f"instance {REG} has no 'instruction' column" for r in reg.rows)


# --------------------------------------------------------------------------- inference


def test_infer_writes_upstream_layout(pred, data):
    out, agent, info = pred
    assert info["n_rows"] == 15 and info["n_answered"] == 13 and info["n_failed"] == 2
    by_id = {r.row_id: r for r in agent.requests}
    jfk = by_id[f"{ASR}/jfk"]  # every channel and the native rate kept, audio2 carried
    assert jfk.audio.shape == (2, 485100) and jfk.sample_rate == 44100 and jfk.modalities == ("text",)
    assert jfk.audio2.shape == (1, 227408) and jfk.audio2_sample_rate == 48000
    assert by_id[f"{ASR}/p225_002"].audio2.shape[0] == 2  # the stereo clip as the second audio
    assert jfk.instructions == "Transcribe the first recording verbatim."
    assert by_id[f"{CLS}/ami_dialogue"].audio.shape == (2, 496000)
    preds = json.loads((out / f"{ASR}.json").read_text())
    assert list(preds) == ["jfk", "p225_002", "ES2011a_40_46"]  # answered rows only, in dataset order
    assert preds["jfk"] == {"file": "jfk", "instruction": "Transcribe the first recording verbatim.",
                            "label": JFK_TEXT, "sllm_response": ANSWERS[f"{ASR}/jfk"]}
    cls = json.loads((out / f"{CLS}.json").read_text())
    assert cls["ami_dialogue"]["label"] == "female" and cls["ami_dialogue"]["label2"] == "male"
    fails = read_failures(out, ASR)
    assert [f["file"] for f in fails] == ["broken", "nolabel"]
    assert "broken.wav" in fails[0]["error"] and "/tmp" not in fails[0]["error"]  # the cell, not a temp path


def test_infer_resumes_after_interrupt_and_retries_failed(data, tmp_path):
    out = tmp_path / "pred"
    first = Scripted(stop_after=2)
    with pytest.raises(KeyboardInterrupt):
        run_dsuperb_inference("scripted", [ASR], out, agent=first, data_root=data, progress=False)
    assert len(first.requests) == 2
    second = Scripted()
    info = run_dsuperb_inference("scripted", [ASR], out, agent=second, data_root=data, progress=False)
    assert [r.row_id for r in second.requests] == [f"{ASR}/ES2011a_40_46"]  # only the row without a record
    assert info["n_answered"] == 3 and info["n_failed"] == 2
    log = [json.loads(x) for x in (out / WORK / ASR / "rank-0.jsonl").read_text().splitlines()]
    # the row the Ctrl-C interrupted: started, then stopped (that start is no process end); the rest finished
    assert [r["status"] for r in log if r["status"] in ("started", "stopped")].count("stopped") == 1
    log = [r for r in log if r["status"] in ("ok", "failed")]
    assert sorted(r["row"] for r in log) == [0, 1, 2, 3, 4]  # each row once: nothing lost, nothing twice
    third = Scripted()
    run_dsuperb_inference("scripted", [ASR], out, agent=third, data_root=data, progress=False, retry_failed=True)
    assert third.requests == []  # the failed rows fail again before reaching the adapter (bad audio, no label)
    with pytest.raises(DSuperbInferError, match="answers of another infer run"):
        run_dsuperb_inference("other", [ASR], out, agent=Scripted(), data_root=data, progress=False)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / f"{ASR}.json").write_text("{}")
    with pytest.raises(OutFolderError, match="holds files this tool did not write"):
        run_dsuperb_inference("scripted", [ASR], foreign, agent=Scripted(), data_root=data, progress=False)
    assert (foreign / f"{ASR}.json").read_text() == "{}" and not (foreign / WORK).exists()


def test_infer_through_openai_compatible_server(data, tmp_path):
    """openai-audio (the adapters' Chat Completions client) asking for text only, two rows at once."""
    seen = []

    def reply(body):
        seen.append(body)
        return 200, "transcript from the server"

    with FakeChatServer(reply) as srv:
        info = run_dsuperb_inference("openai-audio", [ASR], tmp_path / "pred", data_root=data, progress=False,
                                     agent_options={"base_url": srv.url, "model": "omni", "api_key_env": "none",
                                                    "system_prompt": "none"}, concurrency=2)
        headers = list(srv.headers)
    assert info["n_answered"] == 3 and info["n_failed"] == 2
    assert len(seen) == 3
    for body in seen:
        assert body["modalities"] == ["text"] and "audio" not in body and body["model"] == "omni"
        parts = body["messages"][-1]["content"]
        assert [p["type"] for p in parts] == ["text", "input_audio", "input_audio"]  # instruction, audio, audio2
        assert parts[0]["text"] == "Transcribe the first recording verbatim."
    ids = {v for h in headers for k, v in h.items() if k.lower() == "x-client-request-id"}
    assert ids == {f"{ASR}/jfk", f"{ASR}/p225_002", f"{ASR}/ES2011a_40_46"}  # the row travels as the request id
    preds = json.loads((tmp_path / "pred" / f"{ASR}.json").read_text())
    assert {v["sllm_response"] for v in preds.values()} == {"transcript from the server"}


# --------------------------------------------------------------------------- output folders (docs/safety.md)


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` but the lock files (relative path -> bytes)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.endswith(".lock")}


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def _cli_infer(data: Path, out: Path, text: str, tasks: str, *extra: str) -> int:
    from spear_metrics.cli import main

    return main(["dsuperb", "infer", "--agent", "fixed-text", "-a", f"text={text}", "--tasks", tasks,
                 "--data", str(data), "--out", str(out), "--no-progress", *extra])


def test_overwrite_keeps_what_this_tool_did_not_write(data, tmp_path, capsys):
    """``dsuperb infer --overwrite`` (another adapter setting) removes only what the earlier run of
    the instance recorded and is unchanged: a user's files in PRED/ (a note, another system's
    prediction file, a file in the instance's work folder) stay byte for byte, the other instance's
    answers stay; a prediction file the user edited is never replaced (one line, exit 2). ``score
    --overwrite`` likewise; PRED/ itself is not score's folder."""
    from spear_metrics.cli import main

    out = tmp_path / "pred"
    assert _cli_infer(data, out, "first", f"{ASR},{REG}") == 0
    mine = {"notes.txt": b"my notes\n", "MyOtherSystem_Task.json": b'{"x": {"label": "a", "sllm_response": "b"}}',
            f"{WORK}/{ASR}/mine.txt": b"kept"}
    for rel, blob in mine.items():
        (out / rel).write_bytes(blob)
    reg_before = (out / f"{REG}.json").read_bytes()
    assert _cli_infer(data, out, "second", ASR, "--overwrite") == 0
    for rel, blob in mine.items():
        assert (out / rel).read_bytes() == blob, rel
    preds = json.loads((out / f"{ASR}.json").read_text())
    assert list(preds) == ["jfk", "p225_002", "ES2011a_40_46"] and {v["sllm_response"] for v in preds.values()} == {"second"}
    assert (out / f"{REG}.json").read_bytes() == reg_before  # another instance's run: not this overwrite's
    assert [f["file"] for f in read_failures(out, ASR)] == ["broken", "nolabel"]  # rewritten by the new run
    # an answer file the user changed is theirs now: refused before anything is removed or asked
    (out / f"{ASR}.json").write_text('{"edited": true}')
    before = _tree(out)
    capsys.readouterr()
    assert _cli_infer(data, out, "third", ASR, "--overwrite") == 2
    line = _one_line(capsys)
    assert f"{ASR}.json exists and was not written by this tool" in line, line
    assert _tree(out) == before

    (out / f"{ASR}.json").unlink()
    res = tmp_path / "results"
    assert main(["dsuperb", "score", "--pred", str(out), "--out", str(res), "--tasks", REG, "--bootstrap", "0",
                 "--no-progress"]) == 0
    (res / "notes.txt").write_text("my notes")
    manifest = tmp_path / "m.csv"
    manifest.write_text("instance,metric\nMyOtherSystem_Task,word_error_rate\n")
    other = ["dsuperb", "score", "--pred", str(out), "--out", str(res), "--tasks", f"{REG},MyOtherSystem_Task",
             "--manifest", str(manifest), "--bootstrap", "0", "--no-progress"]
    capsys.readouterr()
    assert main(other) == 2  # other predictions: another run
    assert "holds results of another run" in _one_line(capsys)
    assert main([*other, "--overwrite"]) == 0
    assert (res / "notes.txt").read_text() == "my notes"
    tasks = json.loads((res / "summary.json").read_text())["tasks"]
    assert set(tasks) == {REG, "MyOtherSystem_Task"} and tasks["MyOtherSystem_Task"]["WER"] == 1.0  # "b" for "a"
    capsys.readouterr()
    assert main(["dsuperb", "score", "--pred", str(out), "--out", str(out), "--bootstrap", "0", "--no-progress"]) == 2
    assert "holds the output of `spearbench dsuperb infer`" in _one_line(capsys)


def test_prediction_folder_of_an_earlier_version_is_scored(pred, data, tmp_path, capsys):
    """A PRED/ whose work state an earlier version kept in ``.spearbench-dsuperb/`` is scored with
    its failed rows (read, never written); infer does not take it as its own folder."""
    import shutil

    from spear_metrics.dynamic_superb.infer import LEGACY_WORK

    old = tmp_path / "old_pred"
    old.mkdir()
    shutil.copy2(pred[0] / f"{ASR}.json", old / f"{ASR}.json")
    shutil.copytree(pred[0] / WORK / ASR, old / LEGACY_WORK / ASR)
    t = score_predictions(old, tmp_path / "res", tasks=[ASR], n_resamples=0, progress=False)["tasks"][ASR]
    assert t["n_rows"] == 5 and t["n_failed"] == 2 and t["WER"] == pytest.approx(10 / 42)
    before = _tree(old)
    capsys.readouterr()
    assert _cli_infer(data, old, "x", ASR) == 2
    assert "holds files this tool did not write" in _one_line(capsys)
    assert _tree(old) == before


BLOCKER = """
import time
from pathlib import Path


class Blocker:
    \"\"\"Answers each row once the file <gate>/release exists (it says <gate>/started first).\"\"\"

    def __init__(self, gate: str):
        self.gate = Path(gate)

    def respond_text(self, request):
        (self.gate / "started").touch()
        deadline = time.monotonic() + 120
        while not (self.gate / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        return "held answer"
"""


def test_second_infer_is_refused_while_one_holds_the_lock(data, tmp_path, capsys):
    """A ``dsuperb infer`` running in another process holds PRED/'s lock: a second one on the same
    folder (resume or ``--overwrite``) is refused with one line, exit 2, and changes nothing; once
    the first has finished, the folder is usable again."""
    import os
    import subprocess
    import sys

    gate = tmp_path / "gate"
    gate.mkdir()
    adapter = tmp_path / "blocker.py"
    adapter.write_text(BLOCKER)
    out = tmp_path / "pred"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1"}
    first = subprocess.Popen([sys.executable, "-m", "spear_metrics.cli", "dsuperb", "infer", "--agent",
                              f"{adapter}:Blocker", "-a", f"gate={gate}", "--tasks", REG, "--data", str(data),
                              "--out", str(out), "--no-progress"], env=env, cwd=str(tmp_path),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not (gate / "started").exists():  # the first run is inside a row, its lock held
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first infer never reached its adapter"
            time.sleep(0.05)
        before = _tree(out)
        capsys.readouterr()
        for extra in ((), ("--overwrite",)):
            assert _cli_infer(data, out, "intruder", REG, *extra) == 2
            line = _one_line(capsys)
            assert line.startswith("spearbench dsuperb: ") and f"{out} is being written by another live process" in line
            assert _tree(out) == before
        (gate / "release").touch()
        stdout, stderr = first.communicate(timeout=180)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=30)
    assert first.returncode == 0, stderr
    assert {v["sllm_response"] for v in json.loads((out / f"{REG}.json").read_text()).values()} == {"held answer"}
    assert _cli_infer(data, out, "after", REG, "--overwrite") == 0
    assert {v["sllm_response"] for v in json.loads((out / f"{REG}.json").read_text()).values()} == {"after"}


# --------------------------------------------------------------------------- metrics by hand


def test_error_rates_by_hand():
    e, n = M.edit_counts(M.tokens("HH AH L OW", "phonemes"), M.tokens("hh eh l ow w", "phonemes"))
    assert (e, n) == (2, 4)  # one substitution, one insertion
    assert M.tokens("I'M Abbie, ok?", "words") == ["i", "m", "abbie", "ok"]
    e, n = M.edit_counts(M.tokens("我想要一杯coffee please", "mixed"), M.tokens("我要一杯 coffee", "mixed"))
    assert (e, n) == (2, 7)  # 我 想 要 一 杯 coffee please: 想 and please deleted
    e, n = M.edit_counts(M.tokens("你好世界", "characters"), M.tokens("你好 世", "characters"))
    assert (e, n) == (1, 4)
    assert M.edit_counts([], ["a", "b"]) == (2, 0) and M.corpus_rate([2], [0]) is None
    assert M.corpus_rate([8, 0, 2], [22, 11, 9]) == pytest.approx(10 / 42)


def test_bleu_and_pearson_by_hand():
    stats = M.bleu_stats("the cat sat on the mat", "the cat sat on a mat")
    assert stats == [6, 6, 5, 3, 2, 1, 6, 5, 4, 3]  # lengths, clipped n-gram matches, n-gram totals
    assert M.bleu_from_stats([stats]) == pytest.approx(100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25)
    from sacrebleu.metrics import BLEU

    hyps, refs = ["the cat sat on the mat", "a dog ran in the park today"], ["the cat sat on a mat", "the dog ran in a park today"]
    rows = [M.bleu_stats(h, r) for h, r in zip(hyps, refs)]
    assert M.bleu_from_stats(rows) == pytest.approx(BLEU().corpus_score(hyps, [refs]).score)  # corpus = summed rows
    assert M.first_number("I'd say 6 out of 10.") == 6 and M.first_number("score: -3.5e1") == -35 and M.first_number("n/a") is None
    x, y = [7, 9, 4, 8], [6, 9, 3.5, 8]
    mx, my = sum(x) / 4, sum(y) / 4
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    r = sxy / math.sqrt(sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y))
    assert M.pearson(x, y) == pytest.approx(r) and r == pytest.approx(15.5 / math.sqrt(14 * 17.6875))
    assert M.pearson([1, 2], [3, 3]) is None  # a constant side: r does not exist


def test_judge_prompt_and_verdict_rule():
    single = M.judge_messages("Is it male?", ["male"], "It is a man.")[0]["content"]
    multi = M.judge_messages("Which?", ["female", "male"], "both")[0]["content"]
    assert "Ground-truth answer:\nmale\n" in single and M.SINGLE_CHOICE in single and M.MULTI_CHOICE not in single
    assert "Ground-truth answer:\nfemale, male\n" in multi and M.MULTI_CHOICE in multi
    assert M.parse_verdict("blah\nResult: YES") == "yes" and M.parse_verdict("RESULT:no") == "no"
    assert M.parse_verdict("result: no ... Result: YES") == "no"  # the first match, as re.search
    assert M.parse_verdict("Result: maybe") is None and M.verdict_value(None) == 0 and M.verdict_value("yes") == 1


def _upstream_llm_classification_restated(instruction, label, sllm_response, reply):
    """Upstream's llm_classification re-stated from reading it (Dynamic-SUPERB Phase-2 evaluation
    code: prompt INSTRUCTION_REFINE_COT_SINGLE_AND_MULTI_CHOICE, create_classification_prompt,
    read_result), given the judge's reply: (the user message, the row's score)."""
    import re

    head = ("You will be given a question, a corresponding correct answer(s), and a response from a model.\n"
            "The model's response is a reply to the question.")
    tail = f"Input Format:\nQuestion: {instruction}\nGround Truth Answer: {label}\nModel's Response: {sllm_response}"
    found = re.search(r"result:\s*(yes|no)", reply.lower().strip())
    return head, tail, (1.0 if (found.group(1) if found else None) == "yes" else 0.0)


@pytest.mark.parametrize("instruction,label,response,reply", [
    ("Is the speaker male or female?", "female", "  Female. ", "The response says female.\nResult: YES"),
    ("Which emotion?", "happy", "sad", "Mismatch.\n**Result:** NO"),          # markdown: no `result:` match -> 0.0
    ("Which emotion?", "happy", "happy", "  RESULT:YES  "),                       # upper case, no space: 1.0
    ("Which?", "a", "a", "result: no. On reflection, Result: YES"),               # the first match decides: 0.0
    ("Q {x}", "{label}", "{response}", "Result: maybe"),                          # braces in values are not re-read
])
def test_llm_classification_side_by_side(instruction, label, response, reply):
    head, tail, want = _upstream_llm_classification_restated(instruction, label, response, reply)
    msgs = M.upstream_classification_messages(instruction, label, response)
    assert len(msgs) == 1 and msgs[0]["role"] == "user"
    text = msgs[0]["content"]
    assert text.startswith(head) and text.endswith(tail) and len(text) == len(M.UPSTREAM_CLASSIFICATION_PROMPT) - len(
        "{instruction}{label}{response}") + len(instruction + label + response)
    assert M.upstream_classification_value(M.upstream_classification_verdict(reply)) == want


def test_llm_classification_label_only_and_non_text_label(tmp_path):
    """Upstream writes `label` only into its prompt (the label2 join is keyed on a name no task has),
    and a non-text label cell as str.format writes it."""
    from spear_metrics.dynamic_superb.scoring import read_predictions, upstream_classification

    f = tmp_path / "p.json"
    f.write_text(json.dumps({"a": {"instruction": "Which acts?", "label": "question", "label2": "statement",
                                   "sllm_response": "a question"},
                             "b": {"instruction": "Count?", "label": 2.0, "sllm_response": "two"}}))
    items, _ = read_predictions(f, CLS, "llm_classification", 0)

    class Echo:
        temperature = 0.0

        def __init__(self):
            self.sent = []

        def ask(self, messages, parse, extra_body=None):
            from spear_metrics.core.judge import JudgeAnswer

            self.sent.append((messages[0]["content"], extra_body))
            return JudgeAnswer(value=parse("Result: YES"), reply="Result: YES", attempts=[])

    judge = Echo()
    out = [upstream_classification(it, judge) for it in items]
    assert judge.sent[0][0].endswith("Ground Truth Answer: question\nModel's Response: a question")
    assert judge.sent[1][0].endswith("Ground Truth Answer: 2.0\nModel's Response: two")  # str.format of 2.0
    assert all(e == {"max_tokens": 512} for _, e in judge.sent)
    assert [o["llm_classification"] for o in out] == [1.0, 1.0]


def _upstream_row_rate_restated(fn, model_response_text, text_reference):
    """Upstream's word_error_rate / phoneme_error_rate / pos_estimation re-stated from reading them
    (the OpenAI port of the Phase-2 evaluation: ``normalization`` = ASCII punctuation deleted, lower
    case; ``pos_estimation``'s ``preprocess_text`` = punctuation only; then speech_metrics 0.2.2
    ``wer``/``per``: ``upper().split(" ")``, ``editdistance.eval`` / reference length), with a plain
    dynamic-programming edit distance: the row's score ``max(0, 1 - rate)`` and the rate."""
    import string

    def norm(t):
        t = t.translate(str.maketrans("", "", string.punctuation))
        return t if fn == "pos_estimation" else t.lower()

    h, r = norm(model_response_text).upper().split(" "), norm(text_reference).upper().split(" ")
    d = list(range(len(r) + 1))
    for i, hw in enumerate(h, 1):
        prev, d[0] = d[0], i
        for j, rw in enumerate(r, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (hw != rw))
    rate = d[len(r)] / len(r)
    return max(0.0, 1.0 - rate), rate


ROW_RATE_CASES = [  # (response, label): the fixtures' transcripts and the rule's corners
    (ANSWERS[f"{ASR}/jfk"], JFK_TEXT), (ANSWERS[f"{ASR}/p225_002"], VCTK_TEXT),
    (ANSWERS[f"{ASR}/ES2011a_40_46"], AMI_TEXT),
    ("don't  stop", "Don't stop."),            # apostrophe deleted (dont); two spaces make an empty word
    ("one\ntwo three", "one two three"),        # a newline does not separate words
    ("", "a b"), ("", ""), ("a b c d e f", "x"),  # empty response; empty label (one empty word); rate > 1 -> 0
    ("«Hello» — world’s", "hello worlds"),      # non-ASCII punctuation is kept
    ("STRASSE İstanbul", "straße istanbul"),    # case rules: lower() then upper() vs upper() alone
    ("HH AH0 L OW1", "HH AH0 L OW1 ."),         # phone symbols; a lone '.' becomes an empty trailing word
]


@pytest.mark.parametrize("fn", ["word_error_rate", "phoneme_error_rate", "pos_estimation"])
@pytest.mark.parametrize("response,label", ROW_RATE_CASES)
def test_upstream_row_rates_side_by_side(fn, response, label):
    want_score, want_rate = _upstream_row_rate_restated(fn, response, label)
    got = M.upstream_row_rate(fn, response, label)
    assert got[fn] == pytest.approx(want_score) and got[f"{fn}_rate"] == pytest.approx(want_rate)
    assert got[f"{fn}_edits"] / got[f"{fn}_ref_tokens"] == pytest.approx(want_rate)


def test_upstream_row_rates_by_hand():
    # AMI: "I'M ABIGAIL CLAFLIN YOU CAN CALL ME ABBIE" -> 8 words (IM one word); the answer: IM->I, +AM, ABBIE->ABBY
    got = M.upstream_row_rate("word_error_rate", ANSWERS[f"{ASR}/ES2011a_40_46"], AMI_TEXT)
    assert (got["word_error_rate_edits"], got["word_error_rate_ref_tokens"], got["word_error_rate"]) == (3, 8, 5 / 8)
    # two spaces: ['DONT', '', 'STOP'] against ['DONT', 'STOP']: one insertion over 2 words
    assert M.upstream_row_rate("word_error_rate", "don't  stop", "Don't stop.")["word_error_rate"] == 0.5
    assert M.upstream_row_rate("word_error_rate", "a b c", "x")["word_error_rate"] == 0.0  # 3 edits / 1: bounded at 0
    # "İ".lower().upper() is 'I' + combining dot (two characters), "İ".upper() stays one: word_error_rate
    # (lower case first) matches the decomposed spelling, pos_estimation (upper() alone) does not
    assert M.upstream_row_rate("word_error_rate", "İ", "I\u0307")["word_error_rate"] == 1.0
    assert M.upstream_row_rate("pos_estimation", "İ", "I\u0307")["pos_estimation"] == 0.0
    assert M.upstream_row_rate("pos_estimation", "NOUN, VERB", "noun verb")["pos_estimation"] == 1.0
    assert M.upstream_row_rate("word_error_rate", "x", 2.0) == {
        "word_error_rate": None, "word_error_rate_error": "label is float, not text: upstream's word_error_rate normalises text"}


def test_upstream_row_rate_tasks_and_their_checks():
    """pos_estimation (no project key) and phoneme_error_rate tasks get the published key as the mean of
    upstream's rows; the results checks recompute it and refuse an edited one."""
    from spear_metrics.dynamic_superb.results import check_summary_values, validate_summary
    from spear_metrics.results.validate import ResultsError

    pos = score_texts(["DET NOUN VERB", "DET, ADJ NOUN", None], ["DET NOUN VERB", "DET NOUN", "X"], ["q"] * 3,
                      task="PoS_Estimation_LibriTTS_PoS", n_resamples=0)
    assert pos["pos_estimation"] == pytest.approx((1 + 0.5) / 2) and pos["pos_estimation_n"] == 2  # +ADJ over 2 words
    assert pos["na_rate"] == pytest.approx(1 / 3) and pos["value_note"].startswith("no project key")
    assert pos["per_sample"][2]["status"] == "failed"
    pr = score_texts(["HH AH0 L OW1", "K AE1 T"], ["HH AH0 L OW1", "K AE1 T S"], ["q"] * 2,
                     task="SuperbPR_LibriSpeech-TestClean", n_resamples=0)
    assert pr["phoneme_error_rate"] == pytest.approx((1 + 0.75) / 2) and pr["PER"] == pytest.approx(1 / 8)
    tasks = {"PoS_Estimation_LibriTTS_PoS": {k: v for k, v in pos.items() if k != "per_sample"}}
    summary = {"benchmark": "dynamic_superb", "metrics_version": M.METRICS_VERSION, "n_samples": 3, "n_scored": 2,
               "n_failed": 1, "tasks": tasks}
    validate_summary(summary)
    check_summary_values(summary, pos["per_sample"])
    with pytest.raises(ResultsError, match="under upstream's key 'pos_estimation'"):  # version 2 never computed it
        validate_summary({**summary, "metrics_version": "2"})
    for bad in ([1], {"a": 1}):  # a hostile summary's metric that is no name (nor hashable): refused, not a TypeError
        t = {**tasks["PoS_Estimation_LibriTTS_PoS"], "metric": bad}
        with pytest.raises(ResultsError, match="metric is not a function name"):
            validate_summary({**summary, "tasks": {"PoS_Estimation_LibriTTS_PoS": t}})
    # the card and the Space's table show it (a task without a project key)
    import pandas as pd

    from spear_metrics.dynamic_superb.results import card_text, leaderboard_frame
    from spear_metrics.results.load import Results

    card = card_text(summary, model_name="m", inference_mode=None, open_weights=None, split="test", n_rows=3)
    assert "| PoS_Estimation_LibriTTS_PoS | pos_estimation | 0.7500 | - | - | 3 | 0.333 |" in card
    res = Results(source="local:m", model="m", inference_mode=None, open_weights=None, summary=summary,
                  samples=pd.DataFrame(pos["per_sample"]))
    frame = leaderboard_frame([res])
    assert frame["PoS_Estimation_LibriTTS_PoS (pos_estimation)"].tolist() == [pytest.approx(0.75)]
    tasks["PoS_Estimation_LibriTTS_PoS"]["pos_estimation"] = 0.9
    with pytest.raises(ResultsError, match="'pos_estimation' is 0.9 but its rows give 0.75"):
        check_summary_values(summary, pos["per_sample"])


# --------------------------------------------------------------------------- scoring


def test_score_values_judge_and_na(scored):
    out, summary, script, srv = scored
    t = summary["tasks"]
    asr, cls, reg = t[ASR], t[CLS], t[REG]
    # WER: (8 + 0 + 2) edits over (22 + 11 + 9) reference words; two rows infer failed
    assert asr["WER"] == pytest.approx(10 / 42) and asr["WER_n"] == 3 and asr["n_rows"] == 5 and asr["n_failed"] == 2
    assert asr["na_rate"] == pytest.approx(2 / 5)
    # the published key, upstream's rule per row: punctuation deleted (I'M -> IM, one word), max(0, 1 - WER):
    # jfk 8 of 22 words deleted -> 14/22; p225 exact -> 1; AMI IM->I, +AM, ABBIE->ABBY over 8 words -> 5/8
    assert asr["word_error_rate"] == pytest.approx((14 / 22 + 1 + 5 / 8) / 3) and asr["word_error_rate_n"] == 3
    assert asr["word_error_rate_note"] == M.upstream_row_rate_note("word_error_rate")
    lo, hi = asr["WER_ci95"]
    assert lo <= 10 / 42 <= hi
    # judge: yes 1, no 0, garbage 0 (flagged), 429 -> retried -> yes 1, 500 -> failed row (never a 0)
    assert cls["judge_accuracy"] == pytest.approx(0.5) and cls["judge_accuracy_n"] == 4
    assert cls["na_rate"] == pytest.approx(2 / 5) and cls["n_failed"] == 1
    # the published key: upstream's prompt per row (yes 1.0, "RESULT:   no" 0.0, garbage 0.0, 429 -> retried
    # -> yes 1.0; the 500 row failed on the project's prompt first and was not asked again): 2 / 4
    assert cls["llm_classification"] == pytest.approx(0.5) and cls["llm_classification_n"] == 4
    assert cls["llm_classification_note"] == M.UPSTREAM_CLASSIFICATION_NOTE
    rows = {r["file"]: r for r in map(json.loads, (out / "per_sample.jsonl").read_text().splitlines())
            if r["instance"] == CLS}
    assert rows["jfk"]["judge_unparsed"] is True and rows["jfk"]["judge_accuracy"] == 0
    assert rows["jfk"]["judge_reply"] == "I would rather not decide this one."
    assert rows["p226_002"]["judge_verdict"] == "no" and rows["ES2011a_40_46"]["judge_attempts"] == 2
    assert rows["ami_dialogue"]["status"] == "failed" and "HTTP 500" in rows["ami_dialogue"]["error"]
    assert rows["ami_dialogue"].get("judge_accuracy") is None
    assert script.times["429"][1] - script.times["429"][0] >= 1.0  # Retry-After: 1 honoured (a causal bound)
    assert len(script.times["500"]) == 3  # 1 + max_retries
    # the multi-label row asked for the full set; the single ones for one answer
    bodies = {b["messages"][0]["content"].split("Model's response:\n")[1].split("\n")[0]: b for b in srv.requests
              if "Model's response:\n" in b["messages"][0]["content"]}
    assert M.MULTI_CHOICE in bodies["female and male [500]"]["messages"][0]["content"]
    assert "female, male" in bodies["female and male [500]"]["messages"][0]["content"]
    assert all(b["temperature"] == 0.0 and b["max_tokens"] == 512 and "seed" not in b for b in srv.requests)
    upstream = [b["messages"][0]["content"] for b in srv.requests if "Model's Response: " in b["messages"][0]["content"]]
    assert len(upstream) == 4 and all(t.startswith("You will be given a question, a corresponding correct answer(s)")
                                      for t in upstream)
    # upstream passes `label` only: the multi-label row never reached it (failed first), and no request joins labels
    assert not any("female, male" in t or "female,male" in t for t in upstream)
    assert all(_header(h, "authorization") == f"Bearer {KEY}" for h in srv.headers)
    # Pearson over the 4 rows with a number; the row without one is N/A
    x, y = np.array([7, 9, 4, 8.0]), np.array([6, 9, 3.5, 8.0])
    assert reg["pearson_r"] == pytest.approx(float(np.corrcoef(x, y)[0, 1])) and reg["pearson_r_n"] == 4
    assert reg["na_rate"] == pytest.approx(1 / 5)
    # groups never mix keys; the judge and its prompt are recorded; no key anywhere on disk
    assert summary["overall"]["WER"] == {"mean": pytest.approx(10 / 42), "n_tasks": 1, "ci95": None}  # 1 task: no interval
    assert summary["categories"]["classification"]["judge_accuracy"]["n_tasks"] == 1
    j = summary["judge"]
    assert j["model"] == "loopback-judge" and j["prompt_version"] == M.JUDGE_PROMPT_VERSION
    assert j["prompt_sha256"] == M.judge_prompt_sha256() and j["temperature"] == 0.0 and j["max_tokens"] == 512
    assert j["upstream_prompt_sha256"] == M.upstream_classification_prompt_sha256() and j["upstream_decoding_ok"]
    for p in out.rglob("*"):
        if p.is_file():
            assert KEY not in p.read_text(errors="replace"), p


def test_score_resumes_and_submission_round_trip(scored, pred):
    out, summary, _, _ = scored
    sub = read_submission(out / "submission.json")
    by = {e["name"]: e["scores"][0] for e in sub}
    assert set(by) == {ASR, CLS, REG}
    # the answers came from a local folder, not from the Hub commit the manifest pins: no version claimed
    assert by[ASR] == {"metric": "WER", "value": pytest.approx(10 / 42), "version": None, "seen": True}
    assert by[CLS]["seen"] is False and by[CLS]["version"] is None and by[CLS]["metric"] == "judge_accuracy"
    # upstream's own example (docs/score_submission.md) reads back the same way
    example = [{"name": "SpeakerVerification_LibriSpeech-Test-Clean", "scores": [
        {"metric": "accuracy", "value": 0.95, "version": "61e77087c83b2b0b4e8ba713365db8be7806bdd4", "seen": True}]}]
    p = out.parent / "example.json"
    p.write_text(json.dumps(example, indent=4))
    assert read_submission(p) == example
    p.write_text(json.dumps([{"name": "x", "scores": [{"metric": "a", "value": "high", "version": None, "seen": False}]}]))
    with pytest.raises(DSuperbScoreError, match="not a number"):
        read_submission(p)
    # a rerun scores nothing again (no judge is even needed: every row is in the log)
    again = score_predictions(pred[0], out, judge=_DeadJudge(), judge_concurrency=3, n_resamples=500, seed=0,
                              seen=[ASR], progress=False)
    assert again["tasks"] == summary["tasks"]


class _DeadJudge:
    """A judge that must not be called (resume check); same identity as the run's judge."""

    model = "loopback-judge"
    temperature = 0.0
    seed = None
    timeout = 10.0
    max_retries = 2

    def __init__(self):
        self.base_url = None

    def ask(self, *a, **k):
        raise AssertionError("judge called on a resumed run")


def test_upstream_prediction_shapes(tmp_path):
    """Files of upstream's shapes score as ours: the Phase-2 baseline's (keys '<task>_<stem>.wav', every
    metadata column, sllm_name) and speechlm_eval's converted jsonl ({example_id: {..., messages}})."""
    pred = tmp_path / "pred"
    pred.mkdir()
    (pred / f"{ASR}.json").write_text(json.dumps({
        f"{ASR}_jfk.wav": {"file": "jfk.flac", "instruction": "Transcribe.", "label": JFK_TEXT,
                           "sllm_name": "Qwen/Qwen2-Audio-7B-Instruct",
                           "sllm_response": ANSWERS[f"{ASR}/jfk"]},
        f"{ASR}_p225_002.wav": {"file": "p225_002.wav", "instruction": "Transcribe.", "label": VCTK_TEXT,
                                "sllm_name": "Qwen/Qwen2-Audio-7B-Instruct", "sllm_response": VCTK_TEXT}}, indent=4))
    (pred / "SuperbPR_LibriSpeech-TestClean.json").write_text(json.dumps({
        "ex1": {"example_id": "ex1", "messages": [["user", "audio", "/x/ex1.wav"], ["user", "text", "Phonemes?"]],
                "instruction": "Phonemes?", "label": "HH AH L OW", "sllm_response": "hh eh l ow w"},
        "ex2": {"example_id": "ex2", "messages": [], "instruction": "Phonemes?", "label": "W ER L D",
                "sllm_response": 42}}))
    summary = score_predictions(pred, tmp_path / "res", n_resamples=0, progress=False)
    assert summary["tasks"][ASR]["WER"] == pytest.approx(8 / 33)
    # files dsuperb infer did not write: the manifest's pin, said to come from there
    assert summary["tasks"][ASR]["revision"] == "1832d234ffe7ee15b513d3f342d0dab87470310b"
    assert summary["tasks"][ASR]["revision_source"] == "manifest"
    per = summary["tasks"]["SuperbPR_LibriSpeech-TestClean"]
    assert per["PER"] == pytest.approx(2 / 4) and per["n_failed"] == 1 and per["PER_ci95"] is None
    rows = [json.loads(x) for x in (tmp_path / "res" / "per_sample.jsonl").read_text().splitlines()]
    assert any(r["status"] == "failed" and "sllm_response is int" in r["error"] for r in rows)
    # our own prediction file reads back entry for entry
    items, _ = read_predictions(pred / f"{ASR}.json", ASR, "word_error_rate", 0)
    assert [(i.file, i.labels, i.response) for i in items][1] == (f"{ASR}_p225_002.wav", (VCTK_TEXT,), VCTK_TEXT)
    (pred / "NotATask_X.json").write_text(json.dumps({"a": {"label": "x", "sllm_response": "y"}}))
    t = score_predictions(pred, tmp_path / "res4", n_resamples=0, progress=False)["tasks"]["NotATask_X"]
    assert t["n_rows"] == 1 and t["value_note"].startswith("unsupported: instance not in the manifest")
    (pred / "NotATask_X.json").write_text("[1, 2]")
    with pytest.raises(DSuperbScoreError, match="JSON object"):
        score_predictions(pred, tmp_path / "res5", tasks=["NotATask_X"], progress=False)


def test_upstream_row_rate_reads_the_label_cell_only(tmp_path):
    """Upstream's word_error_rate normalises the row's ``label`` cell (``str.translate``): a null
    ``label`` gives no value even when ``label1`` holds text (the project's WER reads the first
    label there is, ``label1``); a text ``label`` gives the rate by hand: "a b" vs "a c" = 1/2."""
    from spear_metrics.dynamic_superb.scoring import read_predictions, score_item

    f = tmp_path / "p.json"
    f.write_text(json.dumps({"x.wav": {"label": None, "label1": "a b", "sllm_response": "a c"},
                             "y.wav": {"label": "A, b!", "sllm_response": "a c"}}))
    items, _ = read_predictions(f, "T", "word_error_rate", 0)
    null_label, text_label = (score_item(it).values for it in items)
    assert null_label["word_error_rate"] is None and "not text" in null_label["word_error_rate_error"]
    assert null_label["WER"] == 0.5  # the project key reads label1
    assert text_label["word_error_rate"] == 0.5 and text_label["word_error_rate_rate"] == 0.5


def test_judge_timeout_fails_row_and_no_judge_is_said(tmp_path):
    from spear_metrics.core.judge import Judge

    script = JudgeScript()
    with FakeChatServer(script) as srv:
        # the hanging row alone under a short limit (the server sleeps 20 s: any load still times out);
        # the others under a limit no loaded machine reaches
        short = Judge(srv.url, "slow", api_key="", seed=None, max_retries=1, timeout=2.0, backoff_s=0.0)
        hung = score_texts(["x [hang]"], ["male"], ["q"], task=CLS, judge=short, n_resamples=0)
        short.close()
        judge = Judge(srv.url, "slow", api_key="", seed=None, max_retries=1, timeout=60.0, backoff_s=0.0)
        r = score_texts(["y [yes]", "z [refuse]"], ["male"] * 2, ["q"] * 2, task=CLS, judge=judge, n_resamples=0)
        judge.close()
    assert hung["per_sample"][0]["status"] == "failed" and "total time limit" in hung["per_sample"][0]["error"]
    assert hung["per_sample"][0]["judge_attempts"] == 2  # 1 + max_retries, each cut at the 2 s limit
    # the server saw the first request (it hangs there) and at most the retry: a retry that a loaded
    # machine keeps from reaching the server within its limit is cut before the server sees it
    assert 1 <= len(script.times["hang"]) <= 2 and hung["judge_accuracy"] is None and hung["na_rate"] == 1.0
    refused = r["per_sample"][1]
    assert refused["status"] == "failed" and "HTTP 403" in refused["error"] and refused["judge_attempts"] == 1
    assert len(script.times["refuse"]) == 1  # a refusal is not retried, and never counted as a NO
    assert r["judge_accuracy"] == 1.0 and r["judge_accuracy_n"] == 1 and r["na_rate"] == pytest.approx(1 / 2)
    none = score_texts(["a"], ["b"], ["q"], task=CLS, judge=None, n_resamples=0)
    assert none["judge_accuracy"] is None and "no judge given" in none["per_sample"][0]["error"]
    unsupported = score_texts(["2"], ["2"], ["q"], task="HEARSpeakerCountIdentification_LibriCount-Fold1")
    assert unsupported["value_note"].startswith("unsupported:") and unsupported["speaker_count"] is None


def _tiny_judge_model(root: Path) -> Path:
    """A randomly initialised 1-layer Llama and a word-level tokenizer built offline; lm_head is
    zeroed so that greedy decoding always picks token 0, whose text is 'Result: YES'."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = ["Result: YES", "</s>", "<s>", "[UNK]", "[PAD]", "user", "assistant", "the", "answer", "male", "female"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="</s>",
                                   bos_token="<s>")
    fast.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(words), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                      bos_token_id=2, eos_token_id=1, pad_token_id=4)
    lm = LlamaForCausalLM(cfg)
    with torch.no_grad():
        lm.lm_head.weight.zero_()
    lm.save_pretrained(root)
    fast.save_pretrained(root)
    return root


def test_local_judge_tiny_llama(tmp_path):
    from spear_metrics.core.judge import LocalJudge
    from spear_metrics.core.models import ModelUnavailableError

    judge = LocalJudge(str(_tiny_judge_model(tmp_path / "judge")), max_new_tokens=8, device="cpu")
    r = score_texts(["female [x]", "male [y]"], ["female", "male"], ["Sex?", "Sex?"], task=CLS, judge=judge,
                    judge_concurrency=2, n_resamples=0)
    assert [row["judge_verdict"] for row in r["per_sample"]] == ["yes", "yes"]
    assert r["per_sample"][0]["judge_reply"].lower().startswith("result: yes")
    assert r["judge_accuracy"] == 1.0 and r["na_rate"] == 0.0
    with pytest.raises(ModelUnavailableError):
        score_texts(["a"], ["b"], ["q"], task=CLS, judge=LocalJudge(str(tmp_path / "absent")))
    from spear_metrics.commands.dsuperb import _make_judge
    from argparse import Namespace

    made = _make_judge(Namespace(judge_local="some/model", judge_url=None, judge_model=None, judge_device=None))
    assert isinstance(made, LocalJudge) and made.max_new_tokens == 512  # the evaluator's open default


def test_local_judge_loads_on_the_process_device(tmp_path, monkeypatch):
    """Without --judge-device the local judge goes where accelerate puts this process (each rank
    its own GPU), as every model of the project does, not to a bare "cuda" (GPU 0 for every rank):
    here a process whose state says "meta" (torch's device without storage) gets its model there."""
    import types

    import spear_metrics.core.batching as batching
    from spear_metrics.core.judge import LocalJudge

    monkeypatch.setattr(batching, "distributed_state", lambda: types.SimpleNamespace(device="meta"))
    _, lm = LocalJudge(str(_tiny_judge_model(tmp_path / "judge")))._load()
    assert {p.device.type for p in lm.parameters()} == {"meta"}
    _, lm = LocalJudge(str(_tiny_judge_model(tmp_path / "judge2")), device="cpu")._load()
    assert {p.device.type for p in lm.parameters()} == {"cpu"}  # asked for: kept


# --------------------------------------------------------------------------- CLI, results dataset, evaluate


def test_cli_score_and_push_results(pred, data, tmp_path, monkeypatch, capsys):
    from spear_metrics.cli import main
    from spear_metrics.results import load_results_folder, write_results_dataset
    from spear_metrics.results.validate import ResultsError

    monkeypatch.setenv("DSUPERB_JUDGE_KEY", KEY)
    with FakeChatServer(JudgeScript()) as srv:
        rc = main(["dsuperb", "score", "--pred", str(pred[0]), "--out", str(tmp_path / "res"), "--judge-url", srv.url,
                   "--judge-model", "loopback", "--judge-api-key-env", "DSUPERB_JUDGE_KEY", "--judge-max-retries", "1",
                   "--bootstrap", "100", "--no-progress", "--tasks", f"{ASR},{CLS}"])
        assert {_header(h, "authorization") for h in srv.headers} == {f"Bearer {KEY}"}
    captured = capsys.readouterr()
    assert rc == 0 and "judge_accuracy" in captured.out and KEY not in captured.out + captured.err
    assert "failed row" in captured.err  # the failed rows are shown with their reasons
    assert main(["dsuperb", "score", "--pred", str(tmp_path / "nowhere"), "--out", str(tmp_path / "r2")]) == 2
    # infer: an instance that cannot be loaded is reported (exit 2) while the others are written
    import shutil

    shutil.copytree(data / REG, tmp_path / "data" / REG)
    (tmp_path / "data" / "Broken_Instance").mkdir()
    (tmp_path / "m.csv").write_text("instance,metric\nBroken_Instance,word_error_rate\n")
    capsys.readouterr()
    rc = main(["dsuperb", "infer", "--agent", "fixed-text", "-a", "text=7", "--tasks", f"Broken_Instance,{REG}",
               "--data", str(tmp_path / "data"), "--manifest", str(tmp_path / "m.csv"), "--out", str(tmp_path / "p2"),
               "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "Broken_Instance: not run: cannot load instance Broken_Instance" in err
    assert len(json.loads((tmp_path / "p2" / f"{REG}.json").read_text())) == 5
    # nothing loaded at all: no "next: score" of an empty folder
    rc = main(["dsuperb", "infer", "--agent", "fixed-text", "-a", "text=7", "--tasks", "Broken_Instance",
               "--data", str(tmp_path / "data"), "--manifest", str(tmp_path / "m.csv"), "--out", str(tmp_path / "p3"),
               "--no-progress"])
    printed = capsys.readouterr()
    assert rc == 2 and "next:" not in printed.out and "nothing to score" in printed.err
    assert main(["dsuperb", "score", "--pred", str(pred[0]), "--out", str(tmp_path / "r3"), "--judge-url", "http://x"]) == 2
    ds = write_results_dataset(tmp_path / "res", tmp_path / "ds", model_name="scripted")
    res = load_results_folder(ds, where="local:ds")
    assert res.summary["benchmark"] == "dynamic_superb" and len(res.samples) == 10
    from spear_metrics.dynamic_superb.results import leaderboard_frame

    frame = leaderboard_frame([res])
    # an error rate over 3 rows carries its few-events mark (the column is text, 3 decimals)
    assert frame.loc[0, f"{ASR} (WER)"] == f"{10 / 42:.3f} (few events: n = 3)"
    # the Space: its SPEAR table leaves the run out, its Dynamic-SUPERB table shows it
    import spear_metrics.space.tables as tables
    from spear_metrics.dynamic_superb.ui import SPACE_TAB
    from spear_metrics.results import SourcePolicy

    monkeypatch.setattr(tables, "POLICY", SourcePolicy([str(ds)]))
    rows, errors = tables.all_rows(["local:ds"])
    assert errors == [] and "scripted" not in {r["model"] for r in rows}
    table = tables.benchmark_table(SPACE_TAB, ["local:ds"])
    # shown as the leaderboard shows values; a share over 4 judged rows with its few-events mark
    assert table.loc[0, f"{CLS} (judge_accuracy)"] == "0.500 (few events: n = 4)"
    assert table.loc[0, f"{ASR} (WER)"] == f"{10 / 42:.3f} (few events: n = 3)"
    summary = json.loads((tmp_path / "res" / "summary.json").read_text())
    summary["tasks"][ASR]["WER"] = 0.01  # an edited figure is refused
    (tmp_path / "res" / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(ResultsError, match="its rows give"):
        write_results_dataset(tmp_path / "res", tmp_path / "ds2", model_name="scripted")


def test_evaluate_module():
    import evaluate

    m = evaluate.load(str(REPO / "spear_metrics" / "dynamic_superb" / "dynamic_superb.py"))
    r = m.compute(predictions=[ANSWERS[f"{ASR}/jfk"], "I am Abigail Claflin, you can call me Abby"],
                  references=[JFK_TEXT, AMI_TEXT], instructions=["Transcribe."] * 2, task=ASR, bootstrap=200)
    assert r["WER"] == pytest.approx(10 / 31) and r["WER_n"] == 2
    assert r["word_error_rate"] == pytest.approx((14 / 22 + 5 / 8) / 2)  # upstream's rows (test_score_values_judge_and_na)
    b = m.compute(predictions=["the cat sat on the mat"], references=["the cat sat on a mat"], instructions=["Translate."],
                  metric="sacre_bleu", bootstrap=0)
    assert b["BLEU"] == pytest.approx(100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25)
    with pytest.raises(ValueError, match="unknown task"):
        m.compute(predictions=["a"], references=["b"], instructions=["c"], task="NoSuchTask_X")


def test_infer_lowers_concurrency_to_the_adapters_max_concurrency(data, tmp_path, capsys):
    """A network adapter that serves one session at a time (``max_concurrency = 1``): ``concurrency=3``
    asks one row at a time, in one line on stderr for the whole run, and each instance records it."""
    from helpers import OneSessionAtATime

    agent = OneSessionAtATime()
    info = run_dsuperb_inference("one-at-a-time", [ASR, CLS], tmp_path / "pred", agent=agent, data_root=data,
                                 progress=False, concurrency=3)
    assert agent.sessions == info["n_answered"] > 3 and agent.most_open == 1
    assert {v["concurrency"] for v in info["instances"].values()} == {1}
    note = [x for x in capsys.readouterr().err.splitlines() if "note:" in x]
    assert note == ["spearbench dsuperb infer: note: one-at-a-time: --concurrency 3 lowered to 1: the adapter serves "
                    "at most 1 session at a time (its max_concurrency)"]
    preds = json.loads((tmp_path / "pred" / f"{ASR}.json").read_text())
    assert len(preds) == 3 and {v["sllm_response"] for v in preds.values()} == {"one at a time"}


def test_judge_prompts_choose_the_calls():
    """--judge-prompts: upstream only asks upstream's prompt (the published key, no judge_accuracy);
    project only leaves the published key null with the reason; an unknown name is refused."""
    from spear_metrics.core.judge import JudgeAnswer

    class Count:
        temperature = 0.0

        def __init__(self):
            self.prompts = []

        def ask(self, messages, parse, extra_body=None):
            text = messages[0]["content"]
            self.prompts.append("upstream" if text.startswith("You will be given a question") else "project")
            return JudgeAnswer(value=parse("ok\nResult: YES"), reply="ok\nResult: YES", attempts=[])

    j = Count()
    up = score_texts(["female"], ["female"], ["Sex?"], task=CLS, judge=j, judge_prompts=("upstream",), n_resamples=0)
    assert j.prompts == ["upstream"] and up["llm_classification"] == 1.0 and up["judge_accuracy"] is None
    j = Count()
    pr = score_texts(["female"], ["female"], ["Sex?"], task=CLS, judge=j, judge_prompts=("project",), n_resamples=0)
    assert j.prompts == ["project"] and pr["judge_accuracy"] == 1.0 and pr["llm_classification"] is None
    assert pr["llm_classification_note"].startswith("no row was judged with upstream's prompt")
    warm = Count()
    warm.temperature = 0.7  # not upstream's decoding: the published key is not asked
    r = score_texts(["female"], ["female"], ["Sex?"], task=CLS, judge=warm, n_resamples=0)
    assert warm.prompts == ["project"] and r["llm_classification"] is None
    with pytest.raises(DSuperbScoreError, match="--judge-prompts"):
        score_texts(["a"], ["b"], ["q"], task=CLS, judge=j, judge_prompts=("both",))
