"""Hostile inputs on the newer surfaces, one test per class of failure found by a breaker pass:

- a judge-cache entry whose checksum matches but whose reply has another shape;
- side files that are not regular files (a FIFO blocks a plain ``open`` for ever, ``/dev/zero``
  never ends): price tables, FDB v2 tasks and prompts, ``per_sample.jsonl`` of judge-agreement;
  and a Seamless transcript read whole whatever its size;
- numbers that do not convert to a float (an integer of 400 digits) in a price table, an FDB
  timestamp or a results folder;
- text of a results folder drawn in a report's figure (a clip name of 200,000 characters);
- HTTP replies no attempt can read (a redirect loop, a body that is not its Content-Encoding),
  and a ``--sha256`` that is no sha256;
- live shards of one ``--out`` with different ``N`` (``0/2`` and ``1/3`` share row 4);
- output names made unique by a suffix that another row's clip already has;
- the same item twice in one run of ``compare`` / ``judge-agreement``.

Every server is a loopback fake; nothing depends on the machine's speed (the FIFO checks run
under a generous alarm only so that a regression fails instead of hanging the suite).
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import shutil
import signal
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from conftest import STEREO_DIALOGUE
from helpers import LoopbackHTTP
from judge_fakes import CountingJudge
from model_fixtures import five_rows
from test_judge_cache import ask, make
from spear_metrics.core.judge_cache import FORMAT, JudgeCache, _reply_check, request_key


@contextlib.contextmanager
def _no_hang(seconds: int = 60):
    """Fail (instead of blocking the suite for ever) when the block has not returned in ``seconds``."""
    def boom(*_):
        raise TimeoutError(f"blocked for {seconds} s")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ----------------------------------------------------------------------------- judge cache


def test_a_cache_entry_of_another_shape_is_ignored_and_the_judge_asked(tmp_path):
    """Entries whose checksum matches their reply (another tool wrote them, or someone edited and
    re-checksummed them) but whose usage counts are text, NaN, 1e400 or null, or whose model id is
    a list: each was returned as a hit, and turning it into a reply raised (int('abc'),
    int(nan)...) or put a list where a model id goes. Each is now an ignored entry: the judge is
    asked, and the entry rewritten whole."""
    cache = JudgeCache("readwrite", tmp_path)
    key, material = request_key({"model": "judge-model-2024-08-06", "messages": [{"role": "user", "content": "q"}],
                                 "temperature": 0.0, "seed": 0})
    good = {"content": "Result: YES", "model": "m", "system_fingerprint": None, "usage": {"input_tokens": 3}}
    hostile = [{"input_tokens": "abc"}, {"input_tokens": float("nan")}, {"input_tokens": 1e400},
               {"input_tokens": None}, {"input_tokens": -1}, {"input_tokens": True}, "12"]
    replies = [{**good, "usage": u} for u in hostile] + [{**good, "model": ["a"]}, {**good, "system_fingerprint": {}}]
    with CountingJudge() as srv:
        for k, reply in enumerate(replies, start=1):
            cache.path(key).parent.mkdir(parents=True, exist_ok=True)
            cache.path(key).write_text(json.dumps({"format": FORMAT, "key": key, "request": material, "reply": reply,
                                                   "check": _reply_check(reply)}))
            with make(srv.url, cache) as j:
                a = ask(j, "q")
            assert not a.meta.cached and srv.calls == k and cache.corrupt == k, reply
        with make(srv.url, cache) as j:
            assert ask(j, "q").meta.cached and srv.calls == len(replies)  # the rewritten entry reads back
    # the shape check does not refuse what put() writes
    cache.put(key, material, good)
    assert cache.get(key) == good


# ----------------------------------------------------------------------------- side files


def test_side_files_that_are_not_regular_files_are_refused_at_once(tmp_path):
    """A FIFO (no writer: a plain open() blocks for ever) or /dev/zero given as a price table, an
    FDB v2 tasks or judge prompts file, or judge-agreement's per_sample.jsonl: one line naming the
    file, at once, instead of a command that never ends."""
    from spear_metrics.core.agreement import AgreementError, agreement, judged_values
    from spear_metrics.core.usage import PriceTable, PriceTableError
    from spear_metrics.full_duplex_v2.score import ScoreSetupError, load_eval_prompts
    from spear_metrics.full_duplex_v2.tasks import TasksError, load_tasks

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "run").mkdir()
    os.mkfifo(tmp_path / "run" / "per_sample.jsonl")
    with _no_hang():
        for path in (fifo, Path("/dev/zero"), tmp_path):
            with pytest.raises(PriceTableError, match="is not a regular file"):
                PriceTable(path)
            with pytest.raises(ScoreSetupError, match="is not a regular file"):
                load_eval_prompts(path)
        with pytest.raises(TasksError, match="is not a regular file"):
            load_tasks(fifo)
        with pytest.raises(AgreementError, match="is not a regular file"):
            agreement(tmp_path / "run", tmp_path / "run")
        with pytest.raises(AgreementError, match="is not a regular file"):  # the file itself, not its folder
            judged_values(fifo)
    # a Seamless transcript over its limit (sparse: no disk used) is refused, not read whole (a 2 GB one
    # took 29 s and 4 GB of memory before its conversation failed on the JSON)
    from spear_datasets.sources.seamless import MAX_TRANSCRIPT_BYTES, read_transcript

    with open(tmp_path / "t.json", "wb") as f:
        f.truncate(MAX_TRANSCRIPT_BYTES + 1)
    with pytest.raises(OSError, match=f"over the {MAX_TRANSCRIPT_BYTES}-byte limit"):
        read_transcript(tmp_path / "t.json", "P0001")


def test_integers_that_do_not_convert_to_a_float_are_refused_not_raised(tmp_path):
    """A price of 400 digits passed the type check and raised OverflowError in math.isfinite; an
    FDB timestamp of 400 digits raised it in float(). The price table is refused in one line and
    the FDB file is a format error naming it (its sample fails alone); so is a currency that is
    not text."""
    from spear_datasets.sources.fdb import FDBFormatError, read_turn_taking
    from spear_metrics.core.usage import PriceTable, PriceTableError

    big = "9" * 400
    (tmp_path / "p.json").write_text('{"models": {"m": {"input": ' + big + '}}}')
    with pytest.raises(PriceTableError, match="input must be a non-negative number"):
        PriceTable(tmp_path / "p.json")
    (tmp_path / "c.json").write_text('{"currency": {"a": 1}, "models": {"m": {"input": 1}}}')
    with pytest.raises(PriceTableError, match="currency"):
        PriceTable(tmp_path / "c.json")
    (tmp_path / "turn_taking.json").write_text('[{"timestamp": [' + big + ", " + big + "1]}]")
    with pytest.raises(FDBFormatError, match="turn_taking.json: timestamp start is not a finite time"):
        read_turn_taking(tmp_path / "turn_taking.json")
    # a results folder's value of 400 digits: not a number for the checks, missing for the statistics
    # (report and compare raised OverflowError out of the command, exit 1)
    from spear_metrics.core.stats import as_number, compare_runs
    from spear_metrics.results.validate import is_number, value_kind

    assert as_number(10 ** 400) is None and not is_number(10 ** 400) and value_kind(10 ** 400) == "invalid"
    rows = [{"audio_path": f"{k}.wav", "k": float(k)} for k in range(3)]
    comp = compare_runs([dict(rows[0], k=10 ** 400), *rows[1:]], rows, match=lambda r: r["audio_path"], n_resamples=0)
    assert comp["keys"]["k"]["n"] == 2 and comp["keys"]["k"]["mean_a"] == pytest.approx(1.5)


# ----------------------------------------------------------------------------- downloads


class _Lying(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        if self.path == "/loop":  # redirects to itself for ever
            self.send_response(302)
            self.send_header("Location", "/loop")
            self.end_headers()
            return
        self.send_response(200)  # says gzip, sends bytes that are not
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", "100")
        self.end_headers()
        self.wfile.write(b"x" * 100)


class _LyingServer(LoopbackHTTP):
    def __init__(self):
        self._serve(_Lying)


def test_replies_no_attempt_can_read_end_the_download_in_one_line(tmp_path, capsys):
    """A redirect loop and a body that is not its Content-Encoding raised httpx's TooManyRedirects /
    DecodingError out of the command (exit 1, "unexpected error"); a --sha256 that is not 64 hex
    digits was compared only after the whole download. Each is now one line and exit 2."""
    from spear_metrics.cli import main

    with _LyingServer() as s:
        for path, said in (("/loop", "TooManyRedirects"), ("/gzip", "DecodingError")):
            assert main(["data", "download", "--url", s.url + path, "--out", str(tmp_path / "f.bin"),
                         "--retries", "0"]) == 2
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and said in err and "unexpected" not in err
        assert main(["data", "download", "--url", s.url + "/gzip", "--out", str(tmp_path / "g.bin"),
                     "--sha256", "zz"]) == 2
        assert "--sha256 must be 64 hexadecimal digits" in capsys.readouterr().err
    assert not (tmp_path / "g.bin.part").exists()  # refused before any request


# ----------------------------------------------------------------------------- infer


@pytest.fixture
def data(tmp_path) -> Path:
    (tmp_path / "data").mkdir()
    return five_rows(STEREO_DIALOGUE, tmp_path / "data")


@pytest.mark.slow  # three infer runs: over 10 s on a loaded machine
def test_a_live_shard_of_another_shard_count_is_refused(data, tmp_path):
    """Shard 0/2 runs rows 0, 2, 4; shard 1/3 runs rows 1, 4: started while 0/2 lives (from its
    first row's callback, so live for certain) both ran row 4, two ok records of one row. It is
    refused now; once 0/2 has ended, 1/3 runs only what has no record (row 1)."""
    from spear_datasets.ownership import OutFolderError
    from spear_metrics.agents.harness import run_inference

    out, seen = tmp_path / "out", []

    def on_row(rec):
        if not seen:
            try:
                seen.append(run_inference("human", str(data), out, progress=False, shard=(1, 3)))
            except OutFolderError as e:
                seen.append(e)

    run_inference("human", str(data), out, progress=False, shard=(0, 2), on_row=on_row)
    assert isinstance(seen[0], OutFolderError) and "another shard count (0/2, this one 1/3)" in str(seen[0])
    later = run_inference("human", str(data), out, progress=False, shard=(1, 3))
    assert (later["rows_run_this_time"], later["n_answered"]) == (1, 1)
    ok = [json.loads(x)["row"] for f in sorted((out / ".work").glob("rank-*.jsonl"))
          for x in f.read_text().splitlines() if json.loads(x)["status"] == "ok"]
    assert sorted(ok) == [0, 1, 2, 4]  # each row once


def test_a_made_unique_name_that_another_clip_already_has_is_made_unique_again(data, tmp_path):
    """Clips x.wav, x__row2.wav and b/x.wav: row 2's name, made unique as x__row2.wav, was row 1's
    own; every row ran, then the run ended with "two rows share an answer file" (exit 2), and so
    did every rerun. Now every row has its own answer and input copy."""
    from spear_metrics.agents.harness import run_inference

    d = data.parent
    (d / "b").mkdir()
    for src, dst in (("q0.wav", "x.wav"), ("q1.wav", "x__row2.wav"), ("q2.wav", "b/x.wav")):
        shutil.copy(d / src, d / dst)
    rows = list(csv.DictReader(data.open()))
    for r, clip in zip(rows, ("x.wav", "x__row2.wav", "b/x.wav")):
        r["audio_path"] = clip
    with data.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    info = run_inference("human", str(data), tmp_path / "out", progress=False, copy_inputs=True)
    assert (info["n_answered"], info["n_failed"]) == (5, 0)
    meta = list(csv.DictReader((tmp_path / "out" / "metadata.csv").open()))
    answers = [r["answer_audio_path"] for r in meta]
    assert answers[:3] == ["audio/x.wav", "audio/x__row2.wav", "audio/x__row2_1.wav"]
    assert len(set(answers)) == 5 and len({r["audio_path"] for r in meta}) == 5


# ----------------------------------------------------------------------------- compare / agreement


def test_an_item_repeated_within_a_run_is_counted_and_said(tmp_path):
    """compare kept the first row of a repeated input and dropped the others in silence;
    judge-agreement kept the last (so the two commands paired different rows). Both keep the first
    now, count the others (n_repeated_a / n_repeated_b) and say so."""
    from spear_metrics.core.agreement import agreement
    from spear_metrics.core.stats import compare_runs

    a = [{"audio_path": "x.wav", "k": 1.0}, {"audio_path": "x.wav", "k": 5.0}, {"audio_path": "y.wav", "k": 2.0}]
    b = [{"audio_path": "x.wav", "k": 1.5}, {"audio_path": "y.wav", "k": 2.5}, {"audio_path": "y.wav", "k": 9.0},
         {"audio_path": "y.wav", "k": 9.0}]
    comp = compare_runs(a, b, match=lambda r: r["audio_path"], n_resamples=0)
    assert (comp["n_common"], comp["n_repeated_a"], comp["n_repeated_b"]) == (2, 1, 2)
    assert comp["keys"]["k"]["mean_a"] == pytest.approx(1.5)  # (1 + 2) / 2: the first x.wav row
    assert any(n.startswith("1 scored row(s) of A repeat the pairing id of an earlier row") for n in comp["notes"])
    assert any(n.startswith("2 scored row(s) of B repeat the pairing id of an earlier row") for n in comp["notes"])
    for name, verdicts in (("A", ["yes", "no", "yes"]), ("B", ["yes", "yes"])):
        (tmp_path / name).mkdir()
        ids = ["1", "1", "2"] if name == "A" else ["1", "2"]
        (tmp_path / name / "per_sample.jsonl").write_text("".join(
            json.dumps({"task": "t", "id": i, "status": "ok", "judge_verdict": v}) + "\n" for i, v in zip(ids, verdicts)))
    st = agreement(tmp_path / "A", tmp_path / "B", n_resamples=0)["fields"]["judge_verdict"]
    assert (st["n_items"], st["n_repeated_a"], st["n_repeated_b"], st["agreement_%"]) == (2, 1, 0, 100.0)


def test_text_drawn_in_a_figure_is_cut_first():
    """A report drew a results row's clip name in a timeline title glyph by glyph: 200,000
    characters took a minute and a half, 20 MB hours. Every text of a figure is cut at
    MAX_FIGURE_TEXT characters before it is drawn (titles wrapped by fit_title too)."""
    from matplotlib.text import Text

    from spear_metrics.reports import plots

    long = "x" * 5000
    fig = plots.histogram(long, long, [(long, [1.0, 2.0, 3.0])])
    assert plots.png(fig).startswith(b"\x89PNG")
    texts = [t.get_text() for t in fig.findobj(Text)]
    assert max(map(len, texts)) <= plots.MAX_FIGURE_TEXT and any(t.endswith("…") for t in texts)
    assert len(plots.fit_title("a " * 5000, 7.0)) <= plots.MAX_FIGURE_TEXT + 200  # + the line breaks


def test_a_refusal_quoting_a_huge_value_of_a_results_file_is_cut():
    """A summary.json whose metric version is 1,000,000 characters: push-results, report and compare
    echoed the whole value in their "one line" (5 MB on stderr). A results refusal is cut at
    MAX_MESSAGE_CHARS, whatever value it quotes."""
    from spear_metrics.results.validate import MAX_MESSAGE_CHARS, ResultsError, validate_summary

    s = {"n_samples": 1, "n_scored": 1, "n_failed": 0, "n_processes": 1, "metrics": ["interruptions"],
         "metric_versions": {"interruptions": "v" * 10 ** 6}}
    with pytest.raises(ResultsError, match="unknown metric version interruptions='vvv") as e:
        validate_summary(s, where="run")
    assert len(str(e.value)) == MAX_MESSAGE_CHARS + 1 and str(e.value).endswith("…") and "\n" not in str(e.value)


def test_a_second_run_into_an_out_that_a_run_of_this_process_holds_is_refused(data, tmp_path):
    """Two runs of one process into one --out (a second call from inside the first, as another
    thread would make it): the folder's lock is this process's own, so the second run re-entered
    the folder and ran rows 1-4 while the first was to run them too. It is refused now; the first
    run answers every row once."""
    from spear_datasets.ownership import OutFolderError
    from spear_metrics.agents.harness import run_inference

    out, seen = tmp_path / "out", []

    def on_row(rec):
        if not seen:
            try:
                seen.append(run_inference("human", str(data), out, progress=False))
            except OutFolderError as e:
                seen.append(e)

    info = run_inference("human", str(data), out, progress=False, on_row=on_row)
    assert isinstance(seen[0], OutFolderError) and "another run of this process" in str(seen[0])
    assert (info["rows_run_this_time"], info["n_answered"]) == (5, 5)
    ok = [json.loads(x)["row"] for x in (out / ".work" / "rank-0.jsonl").read_text().splitlines()
          if json.loads(x)["status"] == "ok"]
    assert sorted(ok) == [0, 1, 2, 3, 4]
    assert run_inference("human", str(data), out, progress=False)["rows_resumed"] == 5  # released at the end


def test_server_messages_past_the_json_parsers_limits_are_protocol_errors():
    """A server frame holding a 5000-digit number (Python's json: a plain ValueError, int()'s digit
    limit) or nested past the parser's depth (RecursionError) is the adapters' one-line
    ProtocolError (the row fails with it), as any frame that is not JSON."""
    from spear_metrics.agents.duplex import ProtocolError
    from spear_metrics.agents.gemini_live import _message
    from spear_metrics.agents.openai_realtime import RealtimeConnection

    for raw in ('{"type": "x", "n": ' + "1" * 5000 + "}", "[" * 100_000):
        with pytest.raises(ProtocolError, match="not JSON"):
            _message(raw)
        with pytest.raises(ProtocolError, match="not JSON"):
            RealtimeConnection._messages(None, raw)  # reads no state of its connection
