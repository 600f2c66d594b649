"""THE row executor (spear_metrics/agents/rows.py): the "process ended twice on this row" rule
counted from a work log, and applied by a benchmark's inference loop other than SPEAR's
(Dynamic-SUPERB's, on its real-audio instances)."""

from __future__ import annotations

import json

import pytest

from spear_metrics.agents.rows import ProcessEnds, RowTimeout, SyncCaller, failure_reason, run_row


def test_process_ends_counts_unfinished_starts():
    log = [{"row": 1, "status": "started"}, {"row": 1, "status": "ok"},  # finished
           {"row": 2, "status": "started"}, {"row": 2, "status": "started"},  # ended the process twice
           {"row": 3, "status": "started"}, {"row": 3, "status": "stopped"},  # Ctrl-C: not a process end
           {"row": 4, "status": "started"}, {"row": 4, "status": "started"},
           {"row": 4, "status": "failed", "ends_starts": 2},  # failed by the rule: --retry-failed counts afresh
           {"row": 4, "status": "started"},
           {"sample": "x", "status": "started"}]  # another key: not a row
    ends = ProcessEnds(log)
    assert [ends.ends(r) for r in (1, 2, 3, 4)] == [0, 2, 0, 1]
    assert [ends.blocked(r) for r in (1, 2, 3, 4)] == [False, True, False, False]
    rec = ends.ended_record(2, file="f")
    assert rec["status"] == "failed" and rec["ends_starts"] == 2 and "ended during this row twice" in rec["error"]
    assert ProcessEnds(log, key="sample").ends("x") == 1


def test_run_row_reasons_and_time_limit():
    caller = SyncCaller()
    try:
        rec = run_row({"row": 0}, lambda r: r.update(answer=caller.call(lambda: 42, 5.0)))
        assert rec["status"] == "ok" and rec["answer"] == 42
        import threading

        gate = threading.Event()
        rec = run_row({"row": 1}, lambda r: caller.call(gate.wait, 0.2))  # a call stuck past its limit
        gate.set()
        assert rec["status"] == "failed" and rec["error"] == "timed out after 0.2 s"
    finally:
        caller.close()
    assert failure_reason(TypeError("bad")) == "TypeError: bad"  # a foreign error is named
    assert failure_reason(RowTimeout("timed out after 3 s")) == "timed out after 3 s"
    with pytest.raises(KeyboardInterrupt):  # stops the run, never a failed row
        run_row({"row": 2}, lambda r: (_ for _ in ()).throw(KeyboardInterrupt()))


@pytest.mark.slow
def test_dsuperb_infer_fails_a_row_that_ended_the_process_twice(real_dir, tmp_path):
    from dsuperb_fixtures import ASR, build_instances
    from test_dsuperb import Scripted
    from spear_metrics.dynamic_superb.infer import WORK, read_failures, run_dsuperb_inference

    data = build_instances(real_dir, tmp_path / "data")
    out = tmp_path / "pred"
    with pytest.raises(KeyboardInterrupt):
        run_dsuperb_inference("scripted", [ASR], out, agent=Scripted(stop_after=2), data_root=data, progress=False)
    log_path = out / WORK / ASR / "rank-0.jsonl"
    stopped = [json.loads(x) for x in log_path.read_text().splitlines() if json.loads(x)["status"] == "stopped"]
    assert len(stopped) == 1
    row = stopped[0]["row"]
    with log_path.open("a") as f:  # two starts with no end: the process died twice during that row
        f.write(json.dumps({"row": row, "status": "started"}) + "\n" + json.dumps({"row": row, "status": "started"}) + "\n")
    again = Scripted()
    info = run_dsuperb_inference("scripted", [ASR], out, agent=again, data_root=data, progress=False)
    assert again.requests == []  # not run a third time
    fails = {f["row"]: f["error"] for f in read_failures(out, ASR)}
    assert "ended during this row twice" in fails[row] and info["n_failed"] == 3  # + the two rows the checks refused
    rerun = Scripted()  # --retry-failed runs it again (and the refused rows fail again by their checks)
    info = run_dsuperb_inference("scripted", [ASR], out, agent=rerun, data_root=data, progress=False, retry_failed=True)
    assert len(rerun.requests) == 1 and info["n_answered"] == 3
