"""Two machine ranks on 127.0.0.1, launched by the Slurm recipe's per-node script
(``scripts/slurm/node_launch.sh``, what ``srun`` runs on each node of ``spearbench.sbatch``),
write what one process writes: the same ``per_sample.jsonl`` byte for byte and the same
``summary.json`` but for ``n_processes``.

The node script is run twice, as Slurm would run it on two nodes (``SLURM_NNODES=2``,
``SLURM_NODEID`` 0 and 1), with ``MAIN_PROCESS_IP=127.0.0.1`` in place of the allocation's first
host and one CPU process per "node". The dimensions without models keep it short.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, STEREO_DIALOGUE
from model_fixtures import five_rows

VENV_BIN = Path(sys.executable).parent
METRICS = "interruptions,explainable_features"
NODE = REPO / "scripts" / "slurm" / "node_launch.sh"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _score(md: Path, out: Path) -> list[str]:
    return ["score", "--metadata", str(md), "--metrics", METRICS, "--out", str(out), "--no-progress"]


@pytest.mark.slow
def test_two_machine_ranks_equal_one_process(tmp_path):
    (tmp_path / "data").mkdir()
    md = five_rows(STEREO_DIALOGUE, tmp_path / "data")
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               SLURM_NNODES="2", MAIN_PROCESS_IP="127.0.0.1", MAIN_PROCESS_PORT=str(_free_port()),
               PROCS_PER_NODE="1", SPEARBENCH=str(VENV_BIN / "spearbench"), ACCELERATE=str(VENV_BIN / "accelerate"),
               PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("SLURM_JOB_NODELIST", None)
    procs = [subprocess.Popen(["bash", str(NODE), *_score(md, tmp_path / "two_nodes")], cwd=tmp_path,
                              env=dict(env, SLURM_NODEID=str(r)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for r in (0, 1)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=600)[0])
        finally:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], [o[-3000:] for o in outs]
    one = subprocess.run([str(VENV_BIN / "spearbench"), *_score(md, tmp_path / "one")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]

    two_dir, one_dir = tmp_path / "two_nodes", tmp_path / "one"
    assert (two_dir / "per_sample.jsonl").read_bytes() == (one_dir / "per_sample.jsonl").read_bytes()
    s2 = json.loads((two_dir / "summary.json").read_text())
    s1 = json.loads((one_dir / "summary.json").read_text())
    assert (s1.pop("n_processes"), s2.pop("n_processes")) == (1, 2)
    assert s1 == s2
    # each machine rank scored its round-robin share (5 rows: 3 + 2), each row exactly once
    logs = {p.name: [json.loads(l)["row"] for l in p.read_text().splitlines()]
            for p in (two_dir / ".work").glob("rank-*.jsonl")}
    assert sorted(logs) == ["rank-0.jsonl", "rank-1.jsonl"]
    assert sorted(r for v in logs.values() for r in v) == [0, 1, 2, 3, 4]
    assert sorted(len(v) for v in logs.values()) == [2, 3]


@pytest.mark.parametrize("env,said", [
    ({}, "missing spearbench (not on PATH) and accelerate (not on PATH)"),
    ({"SPEARBENCH": "/no/such/spearbench"}, "missing spearbench (SPEARBENCH=/no/such/spearbench is no program) and "
                                            "accelerate (not on PATH)"),
    ({"SPEARBENCH": str(VENV_BIN / "spearbench")}, "missing accelerate (not on PATH)"),
    ({"SPEARBENCH": str(VENV_BIN / "spearbench"), "ACCELERATE": str(VENV_BIN / "accelerate")},
     "no rendezvous host: set MAIN_PROCESS_IP"),
])
def test_node_script_names_what_is_missing_in_one_line(tmp_path, env, said):
    """Without spearbench or accelerate on PATH (nor SPEARBENCH/ACCELERATE), or without a rendezvous
    host outside Slurm, the node script says what is missing in one line and exits 2, starting nothing."""
    bare = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env}
    done = subprocess.run(["bash", str(NODE), "score", "--help"], cwd=tmp_path, env=bare, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("node_launch.sh: ") and said in line
