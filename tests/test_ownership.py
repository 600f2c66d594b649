"""What a command owns in its output folder: the one rule for what ``--out`` may hold, the record
of what a run wrote (the only paths ``--overwrite`` removes), and the live lock that
``--overwrite`` respects. Real clips cut from the stereo AMI dialogue; every command runs
through the CLI (``spearbench ...``) as a user would."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import STEREO_DIALOGUE
from helpers import make_clips, row, write_rows

from spear_metrics.cli import main


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` (relative path -> sha256 of its bytes)."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def _upstream_data(root: Path, n: int = 2) -> Path:
    """An upstream-layout data folder ``root/inputs/test/improvised/`` (clips, human answers,
    metadata.csv) with ``n`` real rows; returns the metadata CSV."""
    sub = root / "inputs" / "test" / "improvised"
    sub.mkdir(parents=True)
    rows = []
    for k in range(n):
        q, a = make_clips(STEREO_DIALOGUE, sub, name=f"clip{k}", answer_s=3.0 + k)
        rows.append(row(q.name, a.name, -0.02))
    return write_rows(sub / "metadata.csv", rows)


def _infer(data: Path, out: Path, *extra: str) -> int:
    return main(["infer", "--agent", "fixed-delay", "--data", str(data), "--out", str(out), "--no-progress", *extra])


def _score(meta: Path, out: Path, metrics: str, *extra: str) -> int:
    return main(["score", "--metadata", str(meta), "--metrics", metrics, "--out", str(out), "--no-progress", *extra])


# ----------------------------------------------------------------------------------------------
# 1. --overwrite removes exactly what the run recorded, never a folder it found


def test_infer_into_an_upstream_data_folder_touches_nothing(tmp_path, real_dir, capsys):
    """``--data DATA/inputs/test/improvised/metadata.csv --out DATA``: DATA holds the input data,
    so it is refused (one line, exit 2) with or without ``--overwrite``; not one byte changes."""
    data = tmp_path / "DATA"
    meta = _upstream_data(data)
    before = _tree(data)
    capsys.readouterr()
    assert _infer(meta, data) == 2
    assert "holds files this tool did not write (inputs)" in _one_line(capsys)
    assert _infer(meta, data, "-a", "delay=0.3", "--overwrite") == 2
    _one_line(capsys)
    assert _tree(data) == before


def test_overwrite_removes_only_the_recorded_outputs(tmp_path, real_dir, capsys):
    """infer: a user's files inside the run's folders (``audio/mine.wav``, ``inputs/keep.wav``,
    ``notes.txt``) survive ``--overwrite``; the replaced run's answers that the new run does not
    write again are gone. score: a ``report/`` and a ``missing_answers.txt`` the earlier run
    never wrote survive ``score --overwrite``; its own outputs are rewritten."""
    data = tmp_path / "DATA"
    meta2 = _upstream_data(data, n=2)
    meta1 = write_rows(meta2.with_name("one.csv"), [row("clip0.wav", "answer_pad0.wav", -0.02)])
    out = tmp_path / "answers"
    assert _infer(meta2, out) == 0
    assert sorted(p.name for p in (out / "audio").iterdir()) == ["clip0.wav", "clip1.wav"]
    mine = {"audio/mine.wav": b"user audio", "inputs/keep.wav": b"user input", "notes.txt": b"user notes"}
    for rel, data_bytes in mine.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data_bytes)
    assert _infer(meta1, out, "--overwrite") == 0  # other --data: another run, replaced
    for rel, data_bytes in mine.items():
        assert (out / rel).read_bytes() == data_bytes, rel
    assert sorted(p.name for p in (out / "audio").iterdir()) == ["clip0.wav", "mine.wav"]  # clip1's answer removed
    assert len((out / "metadata.csv").read_text().splitlines()) == 2  # header + the one row

    res = tmp_path / "scores"
    assert _score(out / "metadata.csv", res, "interruptions") == 0
    (res / "report").mkdir()
    (res / "report" / "index.html").write_text("<p>my own notes</p>")
    (res / "missing_answers.txt").write_text("mine\n")
    assert _score(out / "metadata.csv", res, "explainable_features", "--overwrite") == 0
    assert (res / "report" / "index.html").read_text() == "<p>my own notes</p>"
    assert (res / "missing_answers.txt").read_text() == "mine\n"
    assert json.loads((res / "summary.json").read_text())["metrics"] == ["explainable_features"]


def _entries(root: Path) -> dict[str, str]:
    """Every entry under ``root``, links not followed: a link by its target, a folder as such, a
    file by the sha256 of its bytes."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            out[rel] = "link -> " + str(p.readlink())
        elif p.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.mark.parametrize("swap", ["link", "folder", "edited"])
def test_overwrite_checks_every_recorded_path_before_removing_any(tmp_path, real_dir, capsys, swap):
    """``score --overwrite`` into a folder score wrote, whose recorded ``summary.json`` is now a
    link to a user's file, a folder of the user's, or a file edited since: refused with one line
    naming it (exit 2) before anything is removed or written: every entry of the folder is as it
    was (the old ``per_sample.jsonl`` included), the user's file untouched; once the path is
    moved away, the overwrite goes through."""
    data = tmp_path / "DATA"
    meta = _upstream_data(data, n=1)
    res = tmp_path / "scores"
    assert _score(meta, res, "interruptions") == 0
    summary = res / "summary.json"
    old_rows = (res / "per_sample.jsonl").read_bytes()
    user = tmp_path / "users_file.json"
    user.write_text('{"mine": true}\n')
    summary.unlink()
    if swap == "link":
        summary.symlink_to(user)
    elif swap == "folder":
        summary.mkdir()
        (summary / "keep.txt").write_text("mine\n")
    else:
        summary.write_text('{"edited": true}\n')
    before = _entries(res)
    capsys.readouterr()
    assert _score(meta, res, "explainable_features", "--overwrite") == 2
    line = _one_line(capsys)
    assert _entries(res) == before
    assert (res / "per_sample.jsonl").read_bytes() == old_rows
    assert f"{summary} exists and was not written by this tool" in line and "removed nothing" in line, line
    assert user.read_text() == '{"mine": true}\n'
    moved = tmp_path / "moved_away"
    summary.rename(moved)
    assert _score(meta, res, "explainable_features", "--overwrite") == 0
    assert json.loads(summary.read_text())["metrics"] == ["explainable_features"]
    assert user.read_text() == '{"mine": true}\n'


# ----------------------------------------------------------------------------------------------
# 2. one rule for what --out may hold (infer, score, fdb, demo)


def test_out_holding_what_this_tool_did_not_write_is_refused(tmp_path, real_dir, fdb_dir, capsys):
    """A folder holding another run's ``metadata.csv`` (a data folder, not a folder this tool
    wrote) is refused by every command (one line, exit 2) and left as it was; a folder another
    command wrote is refused too; a file a user put where a run would write, inside its own
    folder, stops the run instead of being replaced; a resumed run rewrites its own files."""
    data = tmp_path / "DATA"
    meta = _upstream_data(data, n=1)
    other = tmp_path / "other_run"
    other.mkdir()
    (other / "metadata.csv").write_bytes(meta.read_bytes())
    (other / "audio").mkdir()
    before = _tree(other)
    capsys.readouterr()
    for argv in (
        ["infer", "--agent", "fixed-delay", "--data", str(meta), "--out", str(other), "--no-progress"],
        ["score", "--metadata", str(meta), "--metrics", "interruptions", "--out", str(other), "--no-progress"],
        ["fdb", "score", "--task", "pause_handling", "--root", str(fdb_dir / "example_data" / "pause_handling_example"), "--out", str(other),
         "--no-progress"],
        ["demo", "--out", str(other)],
    ):
        assert main(argv) == 2, argv
        assert f"{other} holds files this tool did not write" in _one_line(capsys), argv
    assert _tree(other) == before

    out = tmp_path / "answers"
    assert _infer(meta, out) == 0
    capsys.readouterr()
    assert _score(meta, out, "interruptions") == 2  # infer's folder is not score's to use
    assert "holds the output of `spearbench infer`" in _one_line(capsys)
    assert _infer(meta, out) == 0  # the same run again: it rewrites the files it recorded
    (out / "failures.jsonl").unlink()
    (out / "failures.jsonl").write_text("a user's file\n")  # not this run's any more
    assert _infer(meta, out, "--overwrite", "-a", "delay=0.2") == 2
    assert "failures.jsonl exists and was not written by this tool" in _one_line(capsys)
    assert (out / "failures.jsonl").read_text() == "a user's file\n"


# ----------------------------------------------------------------------------------------------
# 3. --overwrite respects a live lock


class _LiveHolder:
    """Another live process holding ``lock`` (an exclusive flock), as a running rank does."""

    def __init__(self, lock: Path):
        code = ("import fcntl, sys, time\nf = open(sys.argv[1], 'a+')\nfcntl.flock(f, fcntl.LOCK_EX)\n"
                "print('held', flush=True)\ntime.sleep(120)\n")
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "held"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait(timeout=30)


@pytest.mark.parametrize("rank", [0, 1])
def test_overwrite_is_refused_while_a_live_process_holds_a_lock(tmp_path, real_dir, capsys, rank):
    """``score --overwrite`` and ``infer --overwrite`` on a folder one of whose locks a live process
    holds (rank 0, or another rank left running by a killed launcher): one line, exit 2, nothing
    removed (work folder, lock file, outputs); once that process is gone the overwrite goes through."""
    data = tmp_path / "DATA"
    meta = _upstream_data(data, n=1)
    ans = tmp_path / "answers"
    res = tmp_path / "scores"
    assert _infer(meta, ans) == 0
    assert _score(ans / "metadata.csv", res, "interruptions") == 0
    for out, again in ((res, lambda: _score(ans / "metadata.csv", res, "explainable_features", "--overwrite")),
                       (ans, lambda: _infer(meta, ans, "-a", "delay=0.2", "--overwrite"))):
        lock = out / ".work" / f"rank-{rank}.lock"
        before = _tree(out)
        with _LiveHolder(lock):
            capsys.readouterr()
            assert again() == 2
            line = _one_line(capsys)
            assert f"{out} is being" in line and "another live process" in line, line
            assert lock.exists() and (out / ".work" / "run.json").is_file()
            assert {k: v for k, v in _tree(out).items() if not k.endswith(".lock")} == \
                {k: v for k, v in before.items() if not k.endswith(".lock")}
        assert again() == 0


def test_manifest_lines_past_the_json_parsers_limits_are_skipped_like_torn_ones(tmp_path):
    """A manifest line nested past the parser's depth (RecursionError) or holding a 5000-digit
    number (a plain ValueError) is skipped like a line cut by a kill; the good lines still count."""
    from spear_datasets.ownership import _read_manifest_entries

    work = tmp_path / ".work"
    work.mkdir()
    good = json.dumps({"path": "a.txt", "kind": "file", "id": [1, 2]})
    (work / "written-0.jsonl").write_text("[" * 100_000 + "\n" + '{"path": "b", "n": ' + "1" * 5000 + "}\n" + good + "\n")
    assert _read_manifest_entries(work) == {"a.txt": ("file", [1, 2])}
