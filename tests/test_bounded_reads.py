"""Every JSON file a command reads goes through spear_datasets.files.read_limited / read_json: a
pipe or a device is refused before it is opened (an open FIFO without a writer blocks for ever; a
device whose stat size is 0 would be read for ever), and never more than the limit is read."""

from __future__ import annotations

import json
import os

import pytest

from spear_datasets.files import read_json, read_limited


@pytest.fixture
def fifo(tmp_path):
    p = tmp_path / "named.json"
    os.mkfifo(p)  # no writer: an open() would block, and its stat size is 0 like a device's
    return p


def test_read_limited_refuses_a_pipe_and_a_file_over_the_limit(tmp_path, fifo):
    with pytest.raises(ValueError, match="named.json is not a regular file"):
        read_limited(fifo, 10)
    with pytest.raises(ValueError, match="is not a regular file"):
        read_limited(tmp_path, 10)  # a folder
    p = tmp_path / "a.json"
    p.write_bytes(b"0123456789")
    assert read_limited(p, 10) == b"0123456789"  # exactly the limit: read
    with pytest.raises(ValueError, match="a.json is over the 9-byte limit"):
        read_limited(p, 9)
    with pytest.raises(FileNotFoundError):
        read_limited(tmp_path / "missing.json", 10)


def test_read_json_one_line_for_bad_json_and_deep_nesting(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"a": [1, 2]}))
    assert read_json(p, 100) == {"a": [1, 2]}
    p.write_text("[" * 100_000)  # past the parser's depth: RecursionError inside json
    with pytest.raises(ValueError, match="t.json is not JSON"):
        read_json(p, 10 ** 6)
    p.write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match="t.json is not JSON"):
        read_json(p, 100)


def test_a_summary_nested_past_the_parser_or_over_the_limit_is_one_line(tmp_path, monkeypatch):
    """A results folder whose summary.json (or a per_sample.jsonl line) is JSON nested 100,000 deep
    (json raises RecursionError, which the readers did not catch: a crash) or larger than the limit:
    one ResultsError line from the results loader and the run files' reader, a problem line from
    the report's reader."""
    import spear_metrics.results.validate as validate
    from spear_metrics.reports.runs import load_run
    from spear_metrics.results.load import load_results_folder
    from spear_metrics.results.validate import ResultsError, read_run_files

    d = tmp_path / "results"
    (d / "data").mkdir(parents=True)
    (d / "data" / "train-00000.parquet").write_bytes(b"PAR1")
    (d / "summary.json").write_text("[" * 100_000)
    with pytest.raises(ResultsError, match="summary.json is not valid JSON: summary.json is not JSON"):
        load_results_folder(d, where="hub/x")
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "summary.json").write_text("[" * 100_000)
    (raw / "per_sample.jsonl").write_text(json.dumps({"row": 0, "status": "ok", "audio_path": "a.wav"}) + "\n")
    with pytest.raises(ResultsError, match="summary.json is not valid JSON"):
        read_run_files(raw)
    run = load_run(raw)
    assert any(p.startswith("summary.json is not valid JSON") for p in run.problems) and run.summary == {}
    monkeypatch.setattr(validate, "MAX_SUMMARY_BYTES", 10)
    (raw / "summary.json").write_text(json.dumps({"benchmark": "spear"}))
    with pytest.raises(ResultsError, match="is over the 10-byte limit"):
        read_run_files(raw)
    monkeypatch.setattr(validate, "MAX_SUMMARY_BYTES", 1000)
    # a per-sample line nested past the parser's depth: one line from the checker, left out by the report
    (raw / "per_sample.jsonl").write_text(json.dumps({"row": 0, "status": "ok", "audio_path": "a.wav"}) + "\n"
                                          + "[" * 100_000 + "\n")
    with pytest.raises(ResultsError, match="per_sample.jsonl line 2 is not valid JSON"):
        read_run_files(raw)
    run = load_run(raw)
    assert "per_sample.jsonl line 2 is not valid JSON (left out)" in run.problems and len(run.rows) == 1


def test_dynamic_superb_prediction_and_submission_files_nested_or_piped_are_one_line(tmp_path, fifo):
    from spear_metrics.dynamic_superb.scoring import DSuperbScoreError, read_predictions, read_submission

    deep = tmp_path / "Deep.json"
    deep.write_text("{" + '"a": [' * 100_000)  # json raises RecursionError before it sees the end
    with pytest.raises(DSuperbScoreError, match="Deep.json: not a readable JSON prediction file"):
        read_predictions(deep, "Deep", "accuracy", start=0)
    with pytest.raises(DSuperbScoreError, match="not a readable JSON prediction file: .*not a regular file"):
        read_predictions(fifo, "Fifo", "accuracy", start=0)
    deep.write_text("[" * 100_000)
    with pytest.raises(DSuperbScoreError, match="not readable JSON"):
        read_submission(deep)


def test_judge_replies_nested_past_the_parser_are_refused_replies_not_crashes():
    """A judge (a server) that answers JSON nested 100,000 deep: the reply parsers refuse it as
    they refuse any reply that is not JSON (ValueError), and the client's response reader as a
    response that is not a chat completion (JudgeError), never a RecursionError."""
    from judge_fakes import CountingJudge

    from spear_metrics.core.judge import Judge, JudgeError, parse_json_reply
    from spear_metrics.full_duplex_v2.score import parse_judge_reply

    deep = "[" * 100_000
    with pytest.raises(ValueError, match="reply is not JSON"):
        parse_json_reply(deep)
    with pytest.raises(ValueError):
        parse_judge_reply('{"Turn-taking event and score": ' + "[" * 10_000)

    with CountingJudge(lambda body: (200, deep.encode())) as srv:
        with pytest.raises(JudgeError, match="response is not a chat completion"):
            Judge(srv.url, "m", max_retries=0, backoff_s=0.0, timeout=10.0).request([{"role": "user", "content": "q"}])


def test_a_results_card_over_its_limit_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    import spear_metrics.results.load as load
    from spear_metrics.results.validate import ResultsError

    d = tmp_path / "results"
    (d / "data").mkdir(parents=True)
    (d / "data" / "train-00000.parquet").write_bytes(b"PAR1")
    (d / "summary.json").write_text(json.dumps({"benchmark": "spear"}))
    (d / "README.md").write_text("---\nspearbench: {}\n---\n" + "x" * 100)
    monkeypatch.setattr(load, "MAX_CARD_BYTES", 50)
    with pytest.raises(ResultsError, match="hub/x: README.md card is over the 50-byte limit: not read"):
        load.load_results_folder(d, where="hub/x")
