"""The CLI's one top-level handler: Ctrl-C and unexpected errors end a command with one line.

The interrupt is a real SIGINT sent to a real ``spearbench infer`` process group (as a terminal's
Ctrl-C is) while its adapter is answering the second row; the rerun of the same command
resumes: every row answered once, none twice.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_hub_dataset import OFFSETS, build_spear_source

from spear_metrics import cli

REPO = Path(__file__).resolve().parents[1]

AGENT = '''
import os, time
from pathlib import Path
import numpy as np
from spear_metrics.agents import AgentAnswer


class Slow:
    """Answers 0.5 s of a tone; with SPEAR_TEST_BLOCK set, blocks on the second row it is asked."""

    def respond(self, audio, row, config):
        calls = Path(os.environ["SPEAR_TEST_CALLS"])
        with open(calls, "a") as f:
            f.write(Path(row.audio_path).stem.rsplit("_", 1)[1] + "\\n")
        if os.environ.get("SPEAR_TEST_BLOCK") and len(calls.read_text().split()) == 2:
            Path(os.environ["SPEAR_TEST_BLOCK"]).write_text("blocked")
            time.sleep(120)
        t = np.arange(8000) / 16000
        return AgentAnswer((0.1 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 16000)
'''


def _child_setup():  # a new process group, SIGINT at its default (Python then installs KeyboardInterrupt)
    os.setsid()
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_is_one_line_and_the_rerun_resumes(real_dir, tmp_path):
    info = build_spear_source(real_dir, tmp_path / "src", bad_rows=False)
    (tmp_path / "slow_agent.py").write_text(AGENT)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "spear_metrics.cli", "infer", "--agent", f"{tmp_path / 'slow_agent.py'}:Slow",
           "--data", str(info["improvised_csv"]), "--out", str(out), "--no-progress"]
    calls, marker = tmp_path / "calls.txt", tmp_path / "blocked"
    env = dict(os.environ, PYTHONPATH=str(REPO), SPEAR_TEST_CALLS=str(calls), SPEAR_TEST_BLOCK=str(marker),
               PYTHONWARNINGS="ignore", HF_HUB_OFFLINE="1")
    env.pop(cli.DEBUG_ENV, None)
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_child_setup)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():  # the adapter is inside its second row
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the adapter never reached its second row"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == cli.EXIT_INTERRUPTED == 130
    assert err.strip().splitlines() == ["spearbench infer: interrupted; rerun the same command to resume"], err
    assert calls.read_text().split() == ["0", "1"]

    # the same command again (the adapter no longer blocks): row 0 is kept, rows 1.. answered once
    env.pop("SPEAR_TEST_BLOCK")
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    n = len(OFFSETS)
    assert calls.read_text().split() == ["0", "1"] + [str(k) for k in range(1, n)]
    with open(out / "metadata.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == n and all(r["answer_audio_path"] for r in rows)
    assert len({r["audio_path"] for r in rows}) == n


def test_unexpected_error_is_one_line_with_its_type_and_the_traceback_on_demand(monkeypatch, capsys, tmp_path):
    from spear_metrics.commands import compare

    def boom(args):
        raise ValueError("bad state\n  in two lines")

    monkeypatch.setattr(compare, "run", boom)
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == cli.EXIT_UNEXPECTED == 1
    err = capsys.readouterr().err
    assert err.splitlines() == ["spearbench compare: unexpected error: ValueError: bad state in two lines "
                                f"({cli.DEBUG_ENV}=1 prints the traceback)"]
    monkeypatch.setenv(cli.DEBUG_ENV, "1")
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "in boom" in err
    assert err.splitlines()[-1] == "spearbench compare: unexpected error: ValueError: bad state in two lines"
    # argparse's own usage errors keep their SystemExit(2)
    with pytest.raises(SystemExit) as e:
        cli.main(["compare"])
    assert e.value.code == 2


def test_a_reader_that_leaves_early_is_no_error(tmp_path):
    """``spearbench infer --list-agents | head -1``: once the reader of stdout has gone, the command
    stops with the shell's status for it (141) and says nothing; before, every such pipe ended with
    "spearbench infer: [Errno 32] Broken pipe" and status 2. The pipe's read end is closed before
    the command starts, so its first output meets no reader (no race)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONWARNINGS="ignore", HF_HUB_OFFLINE="1")
    env.pop(cli.DEBUG_ENV, None)
    try:
        done = subprocess.run([sys.executable, "-m", "spear_metrics.cli", "infer", "--list-agents"], cwd=REPO, env=env,
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write_end)
    assert done.returncode == cli.EXIT_BROKEN_PIPE == 141 and done.stderr == ""


def test_a_broken_pipe_elsewhere_is_still_one_line(monkeypatch, capsys, tmp_path):
    """A ``BrokenPipeError`` that is not stdout's (a server's socket closed under a write) is a
    whole-run problem like any OSError: one line, status 2."""
    from spear_metrics.commands import compare

    def closed(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(compare, "run", closed)
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 2
    assert capsys.readouterr().err.splitlines() == ["spearbench compare: [Errno 32] Broken pipe"]
