"""Stances against a local OpenAI-compatible server (127.0.0.1) returning fixed replies,
including malformed ones; text path through a registered ASR backend, audio path with
``input_audio`` parts."""

from __future__ import annotations

import csv
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import STEREO_DIALOGUE
from model_fixtures import five_rows

from spear_metrics.core.asr import ASRBackend, Transcript, register_asr
from spear_metrics.core.runner import score_columns

# question text -> replies in order (the last one repeats)
REPLIES = {
    "Q0": ['{"choice": "P", "probability": 0.9}'],                        # +2, reference +1 -> same sign, more positive
    "Q1": ['```json\n{"choice": "N", "probability": 0.6}\n```'],          # -1, reference +1 -> more negative
    "Q2": ["I think it is positive."],                                   # never JSON -> row fails
    "Q3": ["{not json", '{"choice": "N", "probability": 0.2}'],           # retried, then 0; reference 0 -> same sign
    "Q4": ['{"choice": "P"}'],                                           # lacks probability -> row fails
}


class _Handler(BaseHTTPRequestHandler):
    calls: dict[str, int] = {}
    bodies: list[dict] = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.bodies.append(body)
        content = body["messages"][-1]["content"]
        text = content[0]["text"] if isinstance(content, list) else content
        q = next(k for k in REPLIES if f"Question: {k}" in text)
        n = _Handler.calls.get(q, 0)
        _Handler.calls[q] = n + 1
        reply = REPLIES[q][min(n, len(REPLIES[q]) - 1)]
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": reply}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


class _FixedASR(ASRBackend):
    name = "fixed"

    def transcribe(self, waves, sr=16000, word_timestamps=False):
        return [Transcript(text=f"answer of {len(w)} samples", model="fixed") for w in waves]


@pytest.fixture(scope="module")
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()


@pytest.fixture(scope="module")
def data(tmp_path_factory, real_dir):
    root = tmp_path_factory.mktemp("stances")
    md = five_rows(STEREO_DIALOGUE, root)
    rows = list(csv.DictReader(open(md)))
    with open(root / "stance_questions.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["audio_path", "stance_question", "positive_definition", "negative_definition", "reference_score"])
        w.writeheader()
        for k, r in enumerate(rows):
            w.writerow({"audio_path": r["audio_path"], "stance_question": f"Q{k}", "positive_definition": "agrees",
                        "negative_definition": "disagrees", "reference_score": 0 if k == 3 else 1})
    cols = {k: [r[k] for r in rows] for k in rows[0]}
    cols["answer_start_time"] = [None if v == "" else float(v) for v in cols["answer_start_time"]]
    for k in ("context_end_time", "question_end_time"):
        cols[k] = [float(v) for v in cols[k]]
    return root, cols


@pytest.mark.parametrize("audio", [False, True])
def test_stances_with_local_judge(server, data, audio):
    root, cols = data
    _Handler.calls.clear()
    _Handler.bodies.clear()
    register_asr("fixed", lambda **kw: _FixedASR())
    r = score_columns("stances", cols, base_dir=root, judge_base_url=server, judge_model="fake-judge", judge_audio=audio,
                      asr_model="fixed", stance_questions=str(root / "stance_questions.csv"), judge_max_retries=2, judge_backoff_s=0)
    ps = r["per_sample"]
    assert [p["status"] for p in ps] == ["ok", "ok", "failed", "ok", "failed"]
    assert [p["stance_score"] for p in ps[:2]] + [ps[3]["stance_score"]] == [2, -1, 0]
    assert "judge fake-judge gave no usable answer after 3 attempt(s)" in ps[2]["error"] and "\n" not in ps[2]["error"]
    assert "probability" in ps[4]["error"]
    assert _Handler.calls["Q3"] == 2  # one malformed reply, then a good one
    # judged ok rows: Q0 (+2 vs +1), Q1 (-1 vs +1), Q3 (0 vs 0)
    assert r["stance_same_as_question_%"] == pytest.approx(200 / 3)
    assert r["stance_more_negative_%"] == pytest.approx(100 / 3)
    assert r["stance_more_positive_%"] == pytest.approx(100 / 3)
    user = _Handler.bodies[0]["messages"][-1]["content"]
    kinds = [p["type"] for p in user]
    if audio:
        assert kinds == ["text", "input_audio"] and user[1]["input_audio"]["format"] == "wav"
    else:
        assert kinds == ["text"] and "Transcript of the TARGET answer: answer of" in user[0]["text"]
    assert _Handler.bodies[0]["temperature"] == 0.0 and _Handler.bodies[0]["model"] == "fake-judge"


def test_stances_without_questions_is_null_with_note(data):
    root, cols = data
    r = score_columns("stances", cols, base_dir=root)
    assert r["n_scored"] == 5
    assert r["stance_same_as_question_%"] is None and "stance_questions" in r["stances_note"]
