"""``spearbench infer`` on a Hub-layout dataset cut from the REAL stereo dialogue (see
``test_hub_dataset.build_spear_source``): built-in agents give exactly the onsets they are told,
the scorer agrees, a killed run resumes without duplicates or holes, bad adapters fail rows
with reasons while the run goes on.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from test_hub_dataset import A_LEN, OFFSETS, build_spear_source

from spear_datasets.audio import decode
from spear_metrics.agents import AgentAnswer, GenerationConfig, register_agent, unregister_agent
from spear_metrics.agents.harness import run_inference
from spear_metrics.cli import main

N = len(OFFSETS)


@pytest.fixture(scope="module")
def data(real_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("spear_src")
    info = build_spear_source(real_dir, root)
    hub = tmp_path_factory.mktemp("hub") / "ds"
    assert main(["build-dataset", "--source", str(info["source"]), "--out", str(hub), "--no-progress"]) == 0
    info["hub"] = hub
    return info


def _rows(out: Path) -> list[dict[str, str]]:
    with open(out / "metadata.csv", newline="") as f:
        return list(csv.DictReader(f))


def _score(out: Path, tmp: Path) -> list[dict]:
    from spear_metrics.core.scoring import run_score

    res = tmp / (out.name + "_scores")
    run_score(out / "metadata.csv", "interruptions", res, progress=False)
    return [json.loads(line) for line in (res / "per_sample.jsonl").read_text().splitlines()]


def _infer(data, out, agent, *opts, extra=()):
    args = ["infer", "--agent", agent, "--data", str(data["hub"]), "--split", "test", "--subset", "improvised",
            "--out", str(out), "--no-progress", *extra]
    for o in opts:
        args += ["--agent-option", o]
    assert main(args) == 0


def test_reference_agents_onsets_and_scored_timing_agree(data, tmp_path):
    outs = {}
    for key, agent, opts in [("d07", "fixed-delay", ["delay=0.7"]), ("d00", "fixed-delay", ["delay=0"]),
                             ("barge", "barge-in", ["lead=1.0"]), ("human", "human", [])]:
        outs[key] = tmp_path / key
        _infer(data, outs[key], agent, *opts)
    meta = {k: _rows(v) for k, v in outs.items()}
    for k, rows in meta.items():
        assert len(rows) == N and [Path(r["audio_path"]).name for r in rows] == [f"V00_S0001_I00000001_P0016A_P0015_{i}.wav" for i in range(N)]
        for r in rows:
            assert r["audio_path"].startswith("inputs/") and r["answer_audio_path"].startswith("audio/")
            assert float(r["answer_duration"]) == pytest.approx(A_LEN, abs=1e-9)
    ast = {k: [float(r["answer_start_time"]) for r in rows] for k, rows in meta.items()}
    assert ast["d07"] == pytest.approx([0.7] * N, abs=1e-9)
    assert ast["d00"] == pytest.approx([0.0] * N, abs=1e-9)
    assert ast["barge"] == pytest.approx([-1.0] * N, abs=1e-9)
    assert ast["human"] == pytest.approx([data["answer_start_time"]] * N, abs=1e-9)  # -0.02 s, as in the source
    # inputs written as the dataset's embedded bytes: stereo, identical to the source clips
    for r in meta["d07"]:
        wav, sr = decode(outs["d07"] / r["audio_path"])
        assert sr == 16_000 and wav.shape[0] == 2
        np.testing.assert_array_equal(wav, data["expected"][Path(r["audio_path"]).name].astype(np.float32) / 32768.0)
        ans, _ = decode(outs["d07"] / r["answer_audio_path"])
        np.testing.assert_array_equal(ans, data["expected"]["answer:" + Path(r["audio_path"]).name].astype(np.float32) / 32768.0)

    scores = {k: _score(v, tmp_path) for k, v in outs.items() if k != "human"}
    for d07, d00, barge in zip(scores["d07"], scores["d00"], scores["barge"]):
        assert d07["status"] == d00["status"] == barge["status"] == "ok"
        # same answer file, placed 0.7 s later: the scored latency is exactly 700 ms longer
        assert d07["latency_ms"] - d00["latency_ms"] == pytest.approx(700.0, abs=1e-6)
        assert d07["interrupted_time_ms"] == 0.0 and d07["interruption"] is False
        # started 1 s before the question end while FEE016 still talks: an interruption shorter than the lead
        assert barge["interruption"] is True and 500.0 < barge["interrupted_time_ms"] <= 1000.0


def test_streaming_simulation_records_the_onset(data, tmp_path):
    out = tmp_path / "stream_barge"
    _infer(data, out, "barge-in", "lead=1.0", extra=["--mode", "streaming", "--chunk-ms", "20"])
    assert [float(r["answer_start_time"]) for r in _rows(out)] == pytest.approx([-1.0] * N, abs=1e-9)

    class EarlyTalker:
        """Full-duplex: starts speaking (onset None) in the chunk that reaches 5.0 s of input."""

        def respond(self, audio, row, config):  # pragma: no cover - streaming only
            raise AssertionError

        def stream(self, row, config):
            class S:
                def feed(self, chunk, start):
                    assert chunk.shape[0] == 2 and chunk.shape[1] == 320  # 20 ms at 16 kHz, both channels
                    if start >= 5.0 - 1e-9:
                        return AgentAnswer(np.full(8000, 0.1, np.float32), 16_000, None, "hm", "stop")
                    return None

                def finish(self, end):
                    raise AssertionError("spoke already")

            return S()

    out2 = tmp_path / "stream_early"
    info = run_inference("early", str(data["hub"]), out2, agent=EarlyTalker(), progress=False,
                         config=GenerationConfig(mode="streaming", chunk_ms=20))
    assert info["n_answered"] == N
    for r in _rows(out2):
        # harness-recorded onset = end of the 5.00-5.02 s chunk, well before the question end
        assert float(r["answer_start_time"]) == pytest.approx(5.02 - float(r["question_end_time"]), abs=1e-9)
        assert float(r["answer_start_time"]) < 0


def test_silence_agent_has_empty_start_time_and_scores_as_no_speech(data, tmp_path):
    out = tmp_path / "silence"
    _infer(data, out, "silence", "duration=1.5")
    rows = _rows(out)
    assert all(r["answer_start_time"] == "" for r in rows)  # "at question end", never a silent 0.0
    scores = _score(out, tmp_path)
    # SPEAR counts a silent answer's question gap as its latency (onset 0); no speech after the cut
    assert all(s["status"] == "ok" and s["latency_ms"] >= 0 and s["no_speech_answer"] is True
               and s["answer_speech_after_skip"] is False for s in scores)
    assert all(s["interrupted_time_ms"] is None for s in scores)


class Killed(KeyboardInterrupt):
    """Stands for SIGKILL: the one BaseException the harness does not turn into a failed row
    (any other, SystemExit included, fails its row only)."""


def test_kill_and_resume_leaves_no_duplicate_or_missing_row(data, tmp_path):
    state = {"calls": 0, "kill_after": 2}

    class Flaky:
        uses_reference_answer = True

        def respond(self, audio, row, config):
            if state["kill_after"] is not None and state["calls"] >= state["kill_after"]:
                raise Killed()
            state["calls"] += 1
            return AgentAnswer(audio[:1, :16000].copy(), 16_000, row.question_end_time + 0.25, None, "stop")

    register_agent("flaky-test", Flaky, replace=True)
    try:
        out = tmp_path / "resume"
        with pytest.raises(Killed):
            run_inference("flaky-test", str(data["hub"]), out, progress=False)
        assert not (out / "metadata.csv").exists()
        assert len(list((out / "audio").glob("*.wav"))) == 2
        state["kill_after"] = None
        info = run_inference("flaky-test", str(data["hub"]), out, progress=False)
        assert info["rows_run_this_time"] == N - 2 and state["calls"] == N
        rows = _rows(out)
        assert len(rows) == N and len({r["audio_path"] for r in rows}) == N
        assert sorted(Path(r["answer_audio_path"]).name for r in rows) == sorted(p.name for p in (out / "audio").glob("*.wav"))
        log = [json.loads(line) for line in (out / ".work/rank-0.jsonl").read_text().splitlines()]
        logged = [r["row"] for r in log if r["status"] in ("ok", "failed")]
        assert sorted(logged) == list(range(N))  # each row's answer logged exactly once
        # the killed row's start was closed as stopped (a Ctrl-C does not count against it)
        assert [r["row"] for r in log if r["status"] == "stopped"] == [2]
        assert [float(r["answer_start_time"]) for r in rows] == pytest.approx([0.25] * N, abs=1e-9)
        # a third run has nothing left to do
        assert run_inference("flaky-test", str(data["hub"]), out, progress=False)["rows_run_this_time"] == 0
    finally:
        unregister_agent("flaky-test")


GARBAGE = {
    0: ("raise", "RuntimeError: adapter exploded"),
    1: ("nan", "NaN or inf"),
    2: ("rate0", "invalid sample_rate 0"),
    3: ("empty", "empty (duration 0 s)"),
}
GARBAGE2 = {
    0: ("ok", None),
    1: ("onset_nan", "onset is not finite"),
    2: ("negative_onset", "onset is negative"),
    3: ("samples_first", "looks like (samples, channels)"),
}


def _garbage_agent(table, fixed):
    class Garbage:
        def respond(self, audio, row, config):
            k = int(Path(row.audio_path).stem.rsplit("_", 1)[1])
            kind = "ok" if fixed["on"] else table[k][0]
            good = np.zeros((1, 16000), np.float32)
            if kind == "raise":
                raise RuntimeError("adapter exploded")
            if kind == "nan":
                good[0, 10] = np.nan
            if kind == "empty":
                good = good[:, :0]
            if kind == "samples_first":
                good = np.zeros((16000, 2), np.float32)
            onset = {"onset_nan": math.nan, "negative_onset": -0.5}.get(kind)
            return AgentAnswer(good, 0 if kind == "rate0" else 16_000, onset, None, "stop")

    return Garbage


@pytest.mark.parametrize("table", [GARBAGE, GARBAGE2], ids=["raise-nan-rate-empty", "onset-shape"])
def test_bad_adapter_output_fails_rows_with_reasons_and_retry_fixes_them(data, tmp_path, table):
    fixed = {"on": False}
    register_agent("garbage-test", _garbage_agent(table, fixed), replace=True)
    try:
        out = tmp_path / "garbage"
        info = run_inference("garbage-test", str(data["hub"]), out, progress=False)
        bad = {k for k, (_, why) in table.items() if why}
        assert info["n_inputs"] == N and info["n_failed"] == len(bad)
        failures = {f["row"]: f["error"] for f in map(json.loads, (out / "failures.jsonl").read_text().splitlines())}
        assert set(failures) == bad
        for k in bad:
            assert table[k][1] in failures[k]
        rows = _rows(out)
        assert len(rows) == N  # every input keeps its row; failed ones have no answer
        assert [bool(r["answer_audio_path"]) for r in rows] == [k not in bad for k in range(N)]
        # a plain rerun does not retry failures; --retry-failed does, keeping the good answers
        assert run_inference("garbage-test", str(data["hub"]), out, progress=False)["rows_run_this_time"] == 0
        fixed["on"] = True
        info = run_inference("garbage-test", str(data["hub"]), out, progress=False, retry_failed=True)
        assert info["rows_run_this_time"] == len(bad) and info["n_failed"] == 0
        assert (out / "failures.jsonl").read_text() == ""
    finally:
        unregister_agent("garbage-test")


def test_csv_source_with_bad_rows_then_score_takes_it_as_is(data, tmp_path):
    out = tmp_path / "csv_human"
    args = ["infer", "--agent", "human", "--data", str(data["improvised_csv"]), "--out", str(out), "--no-progress"]
    assert main(args) == 0
    rows = _rows(out)
    assert len(rows) == N + 2
    failures = {f["row"]: f["error"] for f in map(json.loads, (out / "failures.jsonl").read_text().splitlines())}
    assert set(failures) == {N, N + 1}
    assert "not found" in failures[N] and "escapes the data root" in failures[N + 1]
    assert all(Path(r["audio_path"]).is_absolute() for r in rows[:N])
    res = tmp_path / "csv_scores"
    assert main(["score", "--metadata", str(out / "metadata.csv"), "--metrics", "interruptions", "--out", str(res),
                 "--no-progress"]) == 0
    summary = json.loads((res / "summary.json").read_text())
    assert summary["n_scored"] == N and summary["n_failed"] == 2


def test_cascade_with_injected_asr(data, tmp_path):
    """``spear_metrics.core.asr`` may not exist yet: a fake backend with its API is injected."""
    from spear_metrics.agents.cascade import CascadeAgent

    heard = []

    class Transcript:
        def __init__(self, text):
            self.text, self.words, self.model = text, [], "fake"

    class FakeASR:
        def transcribe(self, arrays, sr=16000, word_timestamps=False):
            heard.extend(arrays)
            assert sr == 16000 and all(a.ndim == 1 and a.dtype == np.float32 for a in arrays)
            return [Transcript("might be useful, so you've got a little LCD display?") for _ in arrays]

    out = tmp_path / "cascade"
    info = run_inference("cascade", str(data["hub"]), out, agent=CascadeAgent(asr_backend=FakeASR()), progress=False)
    assert info["n_answered"] == N
    rows = _rows(out)
    for r in rows:
        assert r["answer_start_time"] == ""  # half-duplex: onset None
        assert r["transcript_answer"] == "Good question. About you've got a little LCD display, I think that could work."
        assert 1.5 < float(r["answer_duration"]) < 10.0
        wav, sr = decode(out / r["answer_audio_path"])
        assert sr == 16000 and np.abs(wav).max() > 0.05  # espeak-ng really spoke
    # it heard the questioner's channel (channel 0, P0016A) from context end to question end
    assert len(heard[0]) == round((float(rows[0]["question_end_time"]) - float(rows[0]["context_end_time"])) * 16000)


def test_entry_point_agents_and_unknown_names(monkeypatch, capsys):
    import importlib.metadata as md

    from spear_metrics.agents import available_agents, load_agent

    ep = md.EntryPoint(name="third-party", value="spear_metrics.agents.reference:SilenceAgent", group="spearbench.agents")
    real = md.entry_points
    monkeypatch.setattr(md, "entry_points", lambda **kw: [ep] if kw.get("group") == "spearbench.agents" else real(**kw))
    assert "third-party" in available_agents()
    assert type(load_agent("third-party", duration=1.0)).__name__ == "SilenceAgent"
    assert main(["infer", "--agent", "nope", "--data", "x.csv", "--out", "o", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "metadata file not found" in err or "unknown agent" in err


def test_csv_rows_failed_at_input_keep_the_path_form_of_their_siblings(data, tmp_path):
    """A duplicate row and a row with a non-numeric time fail before inference; metadata.csv still
    names their input with the absolute path the rows that ran get (never a cell that would resolve
    against OUT/), and why infer failed them is in failures.jsonl."""
    src = Path(data["improvised_csv"])
    with open(src, newline="") as f:
        reader = csv.DictReader(f)
        header, cells = reader.fieldnames, list(reader)[:N]
    dup = dict(cells[0])  # the same input clip again
    bad_time = dict(cells[1], question_end_time="abc")
    csv_path = src.parent / "failed_at_input.csv"  # beside the original: relative paths resolve alike
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        w.writerows([*cells, dup, bad_time])
    out = tmp_path / "csv_failed_at_input"
    assert main(["infer", "--agent", "human", "--data", str(csv_path), "--out", str(out), "--no-progress"]) == 0
    rows = _rows(out)
    assert len(rows) == N + 2 and all(Path(r["audio_path"]).is_absolute() for r in rows)
    assert rows[N]["audio_path"] == rows[0]["audio_path"] and rows[N + 1]["audio_path"] == rows[1]["audio_path"]
    assert rows[N]["answer_audio_path"] == rows[N + 1]["answer_audio_path"] == ""
    failures = {f["row"]: f for f in map(json.loads, (out / "failures.jsonl").read_text().splitlines())}
    assert set(failures) == {N, N + 1}
    assert failures[N]["error"] == "duplicate of row 0 (same audio_path)"
    assert "question_end_time is not a number" in failures[N + 1]["error"]
    assert failures[N]["audio_path"] == rows[N]["audio_path"]
    # score keeps both rows, failed, with infer's own reason read from failures.jsonl beside the metadata
    res = tmp_path / "csv_failed_at_input_scores"
    assert main(["score", "--metadata", str(out / "metadata.csv"), "--metrics", "interruptions", "--out", str(res),
                 "--no-progress"]) == 0
    scored = [json.loads(line) for line in (res / "per_sample.jsonl").read_text().splitlines()]
    assert [s["status"] for s in scored] == ["ok"] * N + ["failed", "failed"]
    assert scored[N]["error"] == "infer failed: duplicate of row 0 (same audio_path)"
    assert scored[N + 1]["error"].startswith("infer failed: question_end_time is not a number")


def test_overwrite_removes_the_old_runs_timing_file_too(data, tmp_path):
    """--overwrite clears every output of the other run before the new one starts, its
    response_times.csv included (a new run killed before it finishes leaves none of the old run's
    timings beside its own answers)."""
    out = tmp_path / "out"
    _infer(data, out, "fixed-delay", "delay=0.7")
    assert (out / "response_times.csv").is_file()

    def kill(rec):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_inference("fixed-delay", str(data["hub"]), out, agent_options={"delay": "0.2"}, split="test",
                      subset="improvised", overwrite=True, progress=False, on_row=kill)
    assert not (out / "response_times.csv").exists() and not (out / "metadata.csv").exists()


def test_a_provider_limit_naming_another_adapter_is_refused_for_any_adapter(data, tmp_path, capsys):
    """--provider-limit with a misspelt adapter name was refused only for network adapters (whose
    sessions go through the provider slots); with a local adapter (fixed-delay) it was silently
    ignored. It is refused for every adapter, in one line, before anything is written."""
    out = tmp_path / "out"
    assert main(["infer", "--agent", "fixed-delay", "--data", str(data["hub"]), "--split", "test", "--subset",
                 "improvised", "--out", str(out), "--no-progress", "--provider-limit", "fixd-delay=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["spearbench infer: --provider-limit names fixd-delay, not this run's adapter 'fixed-delay': "
                   "give --provider-limit fixed-delay=N"]
    assert not out.exists()
    _infer(data, out, "fixed-delay", extra=("--provider-limit", "fixed-delay=1"))  # its own name: accepted
    assert len(_rows(out)) == N


def test_score_records_the_onset_rule_given_or_the_one_infer_recorded(data, tmp_path):
    """run_score's summary says the answers' onset rule: infer's record beside the metadata by
    default, or the one the caller states (the demo's replayed references share a folder that
    infer never wrote); a rule that does not exist is refused before anything is read."""
    from spear_metrics.core.runner import RunError
    from spear_metrics.core.scoring import run_score

    out = tmp_path / "out"
    _infer(data, out, "fixed-delay", "delay=0.7")
    recorded = run_score(out / "metadata.csv", "interruptions", tmp_path / "a", progress=False, n_resamples=0)
    assert recorded["onset_kind"] == "fixed_delay"
    stated = run_score(out / "metadata.csv", "interruptions", tmp_path / "b", progress=False, n_resamples=0,
                       onset_kind="reference")
    assert stated["onset_kind"] == "reference"
    with pytest.raises(RunError, match="onset_kind must be one of"):
        run_score(out / "metadata.csv", "interruptions", tmp_path / "c", progress=False, onset_kind="fast")
    assert not (tmp_path / "c").exists()
