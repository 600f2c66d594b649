"""`accelerate launch` with 2 CPU processes (gloo) writes what one process writes.

Launched as the README says: ``ACCELERATE_USE_CPU=true accelerate launch --multi_gpu
--num_processes 2 --num_machines 1 ...`` (``--cpu --num_processes 2`` silently starts ONE
process). 5 rows (odd: 3 + 2 on the ranks), every dimension that runs offline, tiny models.
Floats compare to 1e-5 relative: the two runs batch different rows together, and padded
batched float kernels are not bit-reproducible across batch compositions.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import STEREO_DIALOGUE
from model_fixtures import five_rows, tiny_models

VENV_BIN = Path(sys.executable).parent
METRICS = "interruptions,explainable_features,language_dialect,emotions,turn_taking"


def _cmd(md: Path, out: Path, models: dict, n_proc: int) -> list[str]:
    score = [str(VENV_BIN / "spearbench"), "score", "--metadata", str(md), "--metrics", METRICS, "--out", str(out),
             "--batch-size", "2", "--no-progress", "-o", f"offset_reference={md}", "-o", "offset_reference_onset=none"]
    for k, v in models.items():
        score += ["-o", f"{k}={v}"]
    if n_proc == 1:
        return score
    return [str(VENV_BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", str(n_proc), "--num_machines", "1",
            "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29517", *score]


def _run(cmd, cwd):
    env = dict(os.environ, ACCELERATE_USE_CPU="true", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    return p


def _close(a, b, path="") -> None:
    if isinstance(a, float) or isinstance(b, float):
        assert a is not None and b is not None, path
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6), path
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]")
    else:
        assert a == b, (path, a, b)


@pytest.fixture(scope="module")
def setup(tmp_path_factory, real_dir):
    root = tmp_path_factory.mktemp("acc")
    models = tiny_models(root / "models")
    (root / "data").mkdir()
    return root, models, five_rows(STEREO_DIALOGUE, root / "data")


def test_two_processes_equal_one(setup):
    root, models, md = setup
    _run(_cmd(md, root / "one", models, 1), root)
    _run(_cmd(md, root / "two", models, 2), root)
    s1 = json.loads((root / "one" / "summary.json").read_text())
    s2 = json.loads((root / "two" / "summary.json").read_text())
    assert (s1.pop("n_processes"), s2.pop("n_processes")) == (1, 2)
    _close(s1, s2, "summary")
    p1 = [json.loads(l) for l in (root / "one" / "per_sample.jsonl").read_text().splitlines()]
    p2 = [json.loads(l) for l in (root / "two" / "per_sample.jsonl").read_text().splitlines()]
    assert [r["row"] for r in p1] == [r["row"] for r in p2] == [0, 1, 2, 3, 4]
    _close(p1, p2, "per_sample")
    # every row scored exactly once, split 3 + 2 over the ranks
    logs = {p.name: [json.loads(l)["row"] for l in p.read_text().splitlines()] for p in (root / "two" / ".work").glob("rank-*.jsonl")}
    assert sorted(len(v) for v in logs.values()) == [2, 3]
    assert sorted(r for v in logs.values() for r in v) == [0, 1, 2, 3, 4]
    assert s1["n_scored"] == 5 and s1["latency_ms"] is not None and s1["turn_taking_naturalness"] is not None
    info = json.loads((root / "two" / "run_info.json").read_text())
    assert info["n_processes"] == 2 and info["rows_scored_this_run"] == 5


def test_two_processes_resume(setup):
    """Rank 1's log lost after a crash: a rerun on 2 processes scores only its rows again."""
    root, models, md = setup
    out = root / "resume"
    if not (root / "two").exists():
        pytest.skip("needs test_two_processes_equal_one")
    shutil.copytree(root / "two", out)
    lost = [json.loads(l)["row"] for l in (out / ".work" / "rank-1.jsonl").read_text().splitlines()]
    (out / ".work" / "rank-1.jsonl").unlink()
    (out / "summary.json").unlink()
    _run(_cmd(md, out, models, 2), root)
    info = json.loads((out / "run_info.json").read_text())
    assert info["rows_scored_this_run"] == len(lost) and info["rows_resumed"] == 5 - len(lost)
    s_ref = json.loads((root / "two" / "summary.json").read_text())
    s = json.loads((out / "summary.json").read_text())
    _close(s_ref, s, "summary")
    p_ref = (root / "two" / "per_sample.jsonl").read_text().splitlines()
    p = (out / "per_sample.jsonl").read_text().splitlines()
    _close([json.loads(l) for l in p_ref], [json.loads(l) for l in p], "per_sample")
