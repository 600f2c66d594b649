"""``spearbench infer --shard K/N`` (the tasks of a job array), its Slurm recipe
(scripts/slurm/submitit_shards.py) and an answers folder scored on another machine
(``--copy-inputs``).

Shards split the rows by row id, log to ``.work/rank-K.jsonl``, run beside each other (at the same
time too), resume after a kill, and a run without ``--shard`` afterwards writes the metadata a
one-process run writes, byte for byte. The replayed human answers (agent ``human``) make every
run's answers the same.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, STEREO_DIALOGUE
from model_fixtures import five_rows
from spear_metrics.agents.harness import InferError, run_inference
from spear_metrics.cli import main as cli

SCRIPT = REPO / "scripts" / "slurm" / "submitit_shards.py"


@pytest.fixture
def data(tmp_path) -> Path:
    (tmp_path / "data").mkdir()
    return five_rows(STEREO_DIALOGUE, tmp_path / "data")


def _rows_in(log: Path, status: str = "ok") -> list[int]:
    return [json.loads(x)["row"] for x in log.read_text().splitlines() if json.loads(x)["status"] == status]


def _script():
    spec = importlib.util.spec_from_file_location("submitit_shards", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_shards_split_by_row_id_resume_and_merge_into_the_one_process_metadata(data, tmp_path):
    out, one = tmp_path / "out", tmp_path / "one"
    run_inference("human", str(data), one, progress=False)

    def stop(rec):
        raise KeyboardInterrupt  # a kill after shard 0's first row

    with pytest.raises(KeyboardInterrupt):
        run_inference("human", str(data), out, progress=False, shard=(0, 2), on_row=stop)
    assert _rows_in(out / ".work" / "rank-0.jsonl") == [0]
    s1 = run_inference("human", str(data), out, progress=False, shard=(1, 2))
    assert (s1["shard"], s1["rows_run_this_time"], s1["n_answered"], s1["rows_left"]) == ("1/2", 2, 2, 2)
    s0 = run_inference("human", str(data), out, progress=False, shard=(0, 2))  # resumes: row 0 is not run again
    assert (s0["rows_run_this_time"], s0["n_answered"], s0["rows_left"]) == (2, 2, 0)
    assert not (out / "metadata.csv").exists()  # the shards write no metadata
    assert _rows_in(out / ".work" / "rank-0.jsonl") == [0, 2, 4]
    assert _rows_in(out / ".work" / "rank-1.jsonl") == [1, 3]
    merged = run_inference("human", str(data), out, progress=False)
    assert (merged["rows_run_this_time"], merged["rows_resumed"], merged["n_answered"]) == (0, 5, 5)
    assert (out / "metadata.csv").read_bytes() == (one / "metadata.csv").read_bytes()
    for r in range(5):
        name = f"audio/q{r}.wav"
        assert (out / name).read_bytes() == (one / name).read_bytes()


def test_shard_refusals(data, tmp_path, capsys):
    with pytest.raises(InferError, match="--overwrite"):
        run_inference("human", str(data), tmp_path / "o", progress=False, shard=(0, 2), overwrite=True)
    with pytest.raises(InferError, match="0 <= K < N"):
        run_inference("human", str(data), tmp_path / "o", progress=False, shard=(2, 2))
    with pytest.raises(SystemExit) as e:  # argparse's usage error
        cli(["infer", "--agent", "human", "--data", str(data), "--out", str(tmp_path / "o"), "--shard", "3/2"])
    assert e.value.code == 2
    assert "--shard takes K/N" in capsys.readouterr().err
    # another run's folder: refused, not mixed
    run_inference("human", str(data), tmp_path / "o", progress=False, shard=(0, 2))
    with pytest.raises(InferError, match="another run"):
        run_inference("silence", str(data), tmp_path / "o", progress=False, shard=(1, 2))


def test_a_shard_is_refused_beside_a_live_run_of_the_whole_folder_not_beside_a_shard(data, tmp_path):
    """A run without --shard runs every row: a shard started while it lives (here from its first
    row's callback, so it is live for certain) would run its rows a second time, so it is refused;
    a shard started while another shard lives runs beside it."""
    from spear_datasets.ownership import OutFolderError

    seen: list[object] = []

    def start_shard(out: Path, shard: tuple[int, int]):
        def on_row(rec):
            if not seen:
                try:
                    seen.append(run_inference("human", str(data), out, progress=False, shard=shard))
                except OutFolderError as e:
                    seen.append(e)
        return on_row

    run_inference("human", str(data), tmp_path / "whole", progress=False, on_row=start_shard(tmp_path / "whole", (1, 2)))
    assert isinstance(seen[0], OutFolderError) and "whole folder" in str(seen[0])
    assert not (tmp_path / "whole" / ".work" / "rank-1.jsonl").exists()  # the refused shard ran nothing
    seen.clear()
    run_inference("human", str(data), tmp_path / "sharded", progress=False, shard=(0, 2),
                  on_row=start_shard(tmp_path / "sharded", (1, 2)))
    assert isinstance(seen[0], dict) and (seen[0]["shard"], seen[0]["n_answered"]) == ("1/2", 2)


@pytest.mark.slow
def test_two_shards_at_once_then_the_merge(data, tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    base = [sys.executable, "-m", "spear_metrics.cli", "infer", "--agent", "human", "--data", str(data), "--out",
            str(out), "--no-progress"]
    procs = [subprocess.Popen([*base, "--shard", f"{k}/2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for k in (0, 1)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    merged = subprocess.run(base, env=env, capture_output=True, text=True, timeout=600)
    assert merged.returncode == 0, merged.stderr
    info = json.loads((out / "run_info.json").read_text())
    assert (info["rows_run_this_time"], info["n_answered"]) == (0, 5)


def test_submitit_recipe_without_slurm(data, tmp_path, monkeypatch, capsys):
    mod = _script()
    # the shard tasks of a command, each its own --shard; commands without --shard refused
    tasks = mod.shard_tasks(["infer", "--agent", "human"], 3)
    assert [t.command()[-2:] for t in tasks] == [["--shard", "0/3"], ["--shard", "1/3"], ["--shard", "2/3"]]
    assert len(mod.shard_tasks(["dsuperb", "infer", "--agent", "openai-audio"], 2)) == 2  # the other infer commands
    for bad in (["score", "--metadata", "m.csv"], ["infer", "--shard", "0/2"], ["dsuperb", "score"]):
        with pytest.raises(SystemExit) as e:
            mod.shard_tasks(bad, 2)
        assert e.value.code == 2
    # without submitit: one line, exit 2
    monkeypatch.setitem(sys.modules, "submitit", None)
    with pytest.raises(SystemExit) as e:
        mod.require_submitit()
    assert e.value.code == 2 and "pip install submitit" in capsys.readouterr().err
    monkeypatch.delitem(sys.modules, "submitit")
    submitit = pytest.importorskip("submitit")
    # a preempted task is requeued as the same shard (it resumes from its log)
    again = tasks[1].checkpoint()
    assert isinstance(again, submitit.helpers.DelayedSubmission)
    assert again.function.command() == tasks[1].command()
    # the whole recipe with submitit's in-process executor: the shards, then the merge
    out = tmp_path / "out"
    status = mod.main(["--shards", "2", "--executor", "debug", "--logs", str(tmp_path / "logs"), "--",
                       "infer", "--agent", "human", "--data", str(data), "--out", str(out), "--no-progress"])
    assert status == 0
    assert sorted(_rows_in(out / ".work" / "rank-0.jsonl")) == [0, 2, 4]
    assert sorted(_rows_in(out / ".work" / "rank-1.jsonl")) == [1, 3]
    info = json.loads((out / "run_info.json").read_text())
    assert (info["rows_run_this_time"], info["n_answered"]) == (0, 5)
    # --no-wait prints the merge as this environment's spearbench runs it (the command() rule)
    from spear_metrics.commands import runnable

    capsys.readouterr()
    assert mod.main(["--shards", "2", "--executor", "debug", "--logs", str(tmp_path / "logs2"), "--no-wait", "--",
                     "infer", "--agent", "human", "--data", str(data), "--out", str(tmp_path / "o 2")]) == 0
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("when every task has ended")][0]
    assert line.endswith(f"merge: {runnable('spearbench')} infer --agent human --data {data} --out '{tmp_path / 'o 2'}'")


def test_an_answers_folder_with_copied_inputs_is_scored_on_another_machine(data, tmp_path):
    """``--copy-inputs``: OUT holds the inputs as well as the answers, every path relative to it;
    moved elsewhere with the source data gone, ``score`` reads every row."""
    out = tmp_path / "out"
    info = run_inference("human", str(data), out, progress=False, copy_inputs=True)
    assert info["n_answered"] == 5
    rows = (out / "metadata.csv").read_text().splitlines()[1:]
    assert all(r.startswith("inputs/q") for r in rows)
    elsewhere = tmp_path / "other-machine" / "answers"
    shutil.copytree(out, elsewhere)
    shutil.rmtree(tmp_path / "data")  # the source clips are not there
    shutil.rmtree(out)
    status = cli(["score", "--metadata", str(elsewhere / "metadata.csv"), "--metrics", "interruptions",
                  "--out", str(tmp_path / "results"), "--no-progress", "--bootstrap", "0"])
    assert status == 0
    per = [json.loads(x) for x in (tmp_path / "results" / "per_sample.jsonl").read_text().splitlines()]
    assert len(per) == 5 and not [p for p in per if p.get("error")]


def test_the_record_rule_of_every_log_reader():
    """core.records.replaces, read by every inference command's log reader: the latest record of a
    unit wins, but an ok is never replaced by a failure (the logs are read shards first, whatever
    order the runs had)."""
    from spear_metrics.core.records import replaces

    ok, failed = {"status": "ok"}, {"status": "failed"}
    assert replaces(None, failed) and replaces(None, ok)
    assert replaces(failed, ok) and replaces(failed, failed) and replaces(ok, ok)
    assert not replaces(ok, failed)
