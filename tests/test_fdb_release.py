"""`spearbench fdb --release`: a miniature FDB v1.0 model-outputs release, in the release layout,
built from the real FDB example samples of tests/fixtures/fdb (audio read in place; replies
re-encoded as 24 kHz FLAC padded or cut to their stimulus, as the release ships them).

Expected values are worked out from the fixtures' JSON files (quoted in comments) and, for FDB's
own reading of a 24 kHz reply, from Silero called the way FDB's eval_backchannel.py calls it.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from spear_datasets.audio import audio_info, load_audio
from spear_metrics.cli import main as cli_main
from spear_metrics.core.records import read_jsonl

from conftest import REPO

SPEARBENCH = [sys.executable, "-m", "spear_metrics.cli"]
RELEASE_SR = 24_000
#: smooth_turn_taking_example/1: first reply word "Yes," at 3.36 s, turn_taking.json timestamp[0] = 2.0100000000000016
TT_LATENCY = 3.36 - 2.0100000000000016
#: user_interruption_example/1: first reply word "One," at 17.224 s, interrupt.json timestamp[1] = 13.144
UI_LATENCY = 17.224 - 13.144


def ex(fdb_dir: Path, name: str) -> Path:
    return fdb_dir / "example_data" / name / "1"


def write_reply(src_wav: Path | None, stimulus_wav: Path, dst: Path, *, extra_s: float = 0.0) -> Path:
    """The release form of a reply: ``src_wav`` (None = silence) as 24 kHz mono FLAC, zero-padded or
    cut to the stimulus length (+ ``extra_s`` seconds, to make a bad row)."""
    n = int(round((audio_info(stimulus_wav).duration + extra_s) * RELEASE_SR))
    w = np.zeros(n, np.float32) if src_wav is None else load_audio(src_wav, sr=RELEASE_SR, channels="mix")[0]
    w = np.pad(w, (0, max(0, n - w.size)))[:n]
    dst.parent.mkdir(parents=True, exist_ok=True)
    sf.write(dst, w, RELEASE_SR, format="FLAC")
    return dst


def add_sample(release: Path, stimuli: Path, run: str, category: str, sid: str, src: Path, *, task_file: str | None,
               reply_wav: Path | None = "same", asr: str | dict | None = None, rating: dict | None = None,
               extra_s: float = 0.0, stimulus_from: Path | None = None) -> dict:
    """One stimulus folder (symlinks to the fixture) and its reply in ``data/<run>/<category>/<id>/``;
    returns the ``metadata/<run>.jsonl`` row."""
    stim = stimuli / category / sid
    if not stim.exists():
        stim.mkdir(parents=True)
        for f in ["input.wav"] + ([task_file] if task_file else []):
            os.symlink((stimulus_from or src) / f, stim / f)
    reply = release / "data" / run / category / sid
    write_reply(src / "output.wav" if reply_wav == "same" else reply_wav, stim / "input.wav", reply / "output.flac",
                extra_s=extra_s)
    if asr is None:
        os.symlink(src / "output.json", reply / "output.json")
    elif isinstance(asr, dict):
        (reply / "output.json").write_text(json.dumps(asr))
    else:
        (reply / "output.json").write_text(asr)
    text = json.loads((reply / "output.json").read_text()).get("text", "") if isinstance(asr, (dict, type(None))) else ""
    (reply / "model_text.json").write_text(json.dumps({"text": text}))
    if rating is not None:
        (reply / "rating.json").write_text(json.dumps(rating))
    return {"run": run, "label": "Example system", "model": "example", "model_id": "org/example", "category": category,
            "sample_id": sid, "stimulus": f"{category}/{sid}", "duration_s": audio_info(stim / "input.wav").duration,
            "sample_rate": RELEASE_SR, "audio": f"data/{run}/{category}/{sid}/output.flac",
            "asr": f"data/{run}/{category}/{sid}/output.json", "model_text": text,
            "rating": None if rating is None else rating.get("rating"),
            "rating_path": None if rating is None else f"data/{run}/{category}/{sid}/rating.json",
            "st_tor": None, "st_latency_s": None, "voice": None, "prompt_regime": "default", "seed": 0, "oracle": False}


def write_metadata(release: Path, run: str, rows: list, extra_lines: list[str] = ()) -> None:
    (release / "metadata").mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r) for r in rows] + list(extra_lines)
    (release / "metadata" / f"{run}.jsonl").write_text("\n".join(lines) + "\n")


def build_release(fdb_dir: Path, base: Path, run: str = "r1") -> tuple[Path, Path]:
    """One sample per category (the release's five), in the release layout."""
    release, stimuli = base / "release", base / "stimuli"
    ph, tt, ui = ex(fdb_dir, "pause_handling_example"), ex(fdb_dir, "smooth_turn_taking_example"), ex(fdb_dir, "user_interruption_example")
    rows = [
        add_sample(release, stimuli, run, "synthetic_pause_handling", "1", ph, task_file="pause.json"),
        # Candor pause: the same stimulus answered by silence (no ASR words -> TOR 0)
        add_sample(release, stimuli, run, "candor_pause_handling", "1", ph, task_file="pause.json", reply_wav=None,
                   asr={"text": "", "chunks": []}),
        add_sample(release, stimuli, run, "candor_turn_taking", "1", tt, task_file="turn_taking.json"),
        # ICC id "1" exists in icc_gt_distribution.json; built from the turn-taking sample's audio
        add_sample(release, stimuli, run, "icc_backchannel", "1", tt, task_file=None),
        add_sample(release, stimuli, run, "synthetic_user_interruption", "1", ui, task_file="interrupt.json",
                   rating=json.loads((ui / "rating.json").read_text())),
    ]
    write_metadata(release, run, rows)
    return release, stimuli


def fdb_reading_segments(flac: Path) -> list[list[float]]:
    """Silero called as FDB's eval_backchannel.py calls it: the file's samples, no rate given (so
    read as 16 kHz), library defaults, seconds."""
    import torch
    from silero_vad import get_speech_timestamps, load_silero_vad

    wav, _ = sf.read(flac, dtype="float32")
    segs = get_speech_timestamps(torch.from_numpy(wav), load_silero_vad(), return_seconds=True)
    return [[s["start"], s["end"]] for s in segs]


def hand_jsd(segments, duration_s: float, gt) -> float:
    """JSD distance (natural log) of the 0.2 s histogram of ``segments`` and the human one, by hand."""
    n = int(duration_s / 0.2) + 1
    h = np.zeros(n)
    for a, b in segments:
        for i in range(int(a / 0.2), int(b / 0.2) + 1):
            if i < n:
                h[i] += 1
    p = (h + 1e-10) / (h + 1e-10).sum()
    q = np.interp(np.linspace(0, 1, n), np.linspace(0, 1, len(gt)), gt)
    q = q / q.sum()
    m = (p + q) / 2
    kl = lambda x, y: float(np.sum(np.where(x > 0, x * np.log(x / y), 0.0)))  # noqa: E731
    return math.sqrt((kl(p, m) + kl(q, m)) / 2)


def rel_args(release, stimuli, out, *more):
    return ["fdb", "score", "--release", str(release), "--run", "r1", "--stimuli", str(stimuli), "--out", str(out),
            "--reference", str(FDB_GT), "--no-progress", *more]


FDB_GT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "fdb" / "icc_gt_distribution.json"


@pytest.fixture(scope="module")
def mini(fdb_dir, tmp_path_factory):
    return build_release(fdb_dir, tmp_path_factory.mktemp("mini"))


# ------------------------------------------------------------------ the reproduced figures


def test_release_figures_default_reading(mini, tmp_path, capsys):
    release, stimuli = mini
    out = tmp_path / "out"
    assert cli_main(rel_args(release, stimuli, out)) == 0
    s = json.loads((out / "r1" / "summary.json").read_text())
    assert (s["n_samples"], s["n_scored"], s["n_failed"]) == (5, 5, 0)
    assert s["compat"] == "none" and "resampled to 16 kHz" in s["reply_reading"]
    # pause_handling_example: 12 words over 0.0..4.68 s -> TOR 1; the silent Candor reply -> TOR 0
    assert s["pause_tor_synthetic"] == 1.0 and s["pause_tor_candor"] == 0.0
    assert s["turn_taking_tor"] == 1.0 and s["turn_taking_latency_s"] == pytest.approx(TT_LATENCY, abs=1e-12)
    # interruption: 32 words over 17.224..28.124 s -> TOR 1; latency 17.224 - 13.144; rating.json says 4
    assert s["interruption_tor"] == 1.0 and s["interruption_latency_s"] == pytest.approx(UI_LATENCY, abs=1e-12)
    assert s["interruption_rating"] == 4.0 and s["n_interruption_ratings_from_rating_json"] == 1
    # backchannel, the reply resampled back to 16 kHz: Silero finds the 16 kHz original's segments
    # 3.4-3.8, 4.5-6.4, 7.0-8.2, 8.4-10.4 s (none over 3 s: 4 counted) over 10.4 s; JSD 0.5113 (FDB_PROTOCOL.md)
    assert s["backchannel_tor"] == 1.0 and s["backchannel_frequency"] == pytest.approx(4 / 10.4)
    assert s["backchannel_jsd"] == pytest.approx(0.5113, abs=5e-5)
    for k in ("pause_tor_synthetic", "pause_tor_candor", "backchannel_tor", "backchannel_frequency", "backchannel_jsd",
              "turn_taking_tor", "turn_taking_latency_s", "interruption_tor", "interruption_rating", "interruption_latency_s"):
        assert s[f"{k}_n"] == 1 and s[f"{k}_ci95"] is None, k  # one sample per category: no interval exists
        assert f"n_{k}" not in s
    assert s["categories"]["icc_backchannel"] == {"n_samples": 1, "n_scored": 1, "n_failed": 0}
    assert s["label"] == "Example system"
    rows = list(read_jsonl(out / "r1" / "per_sample.jsonl"))
    assert [r["category"] for r in rows] == ["synthetic_pause_handling", "candor_pause_handling", "candor_turn_taking",
                                             "icc_backchannel", "synthetic_user_interruption"]
    assert rows[3]["vad_segments"] == [[3.4, 3.8], [4.5, 6.4], [7.0, 8.2], [8.4, 10.4]]
    assert rows[3]["answer_audio_path"] == "data/r1/icc_backchannel/1/output.flac"
    board = (out / "leaderboard.md").read_text()
    # a take-over rate from one sample carries its few-events mark
    assert ("| r1 | Example system | 1.000 (n=1) (few events: n = 1) | 0.000 (n=1) (few events: n = 1) |" in board
            and "| none |" in board)


def test_release_figures_upstream_reading(mini, tmp_path):
    """--compat upstream: the 24 kHz reply's samples go to the VAD as if 16 kHz (FDB's reading):
    every backchannel time comes out 1.5 x later, TOR/latency (from the ASR JSON) do not move."""
    release, stimuli = mini
    out = tmp_path / "out"
    assert cli_main(rel_args(release, stimuli, out, "--compat", "upstream")) == 0
    s = json.loads((out / "r1" / "summary.json").read_text())
    assert s["compat"] == "upstream" and "without resampling" in s["reply_reading"]
    row = [r for r in read_jsonl(out / "r1" / "per_sample.jsonl") if r["category"] == "icc_backchannel"][0]
    fdb = fdb_reading_segments(release / "data" / "r1" / "icc_backchannel" / "1" / "output.flac")
    assert row["vad_segments"] == fdb  # the same segments as Silero called FDB's way
    default = [[3.4, 3.8], [4.5, 6.4], [7.0, 8.2], [8.4, 10.4]]
    assert len(fdb) == 4 and all(abs(a - 1.5 * b) <= 0.11 for seg, ref in zip(fdb, default) for a, b in zip(seg, ref))
    # still 4 segments of at most 3 s (the longest, 8.4-10.4 s, becomes ~2.9 s): 4 counted over the
    # true 10.4 s, so the frequency does not change; the last segment (~12.6-15.6 s) lies past the
    # end of the 53-bin histogram and drops out of it, so the JSD does
    assert s["backchannel_frequency"] == pytest.approx(4 / 10.4)
    gt = json.loads(FDB_GT.read_text())["1"]
    assert s["backchannel_jsd"] == pytest.approx(hand_jsd(fdb, 10.4, gt), abs=1e-9)
    assert abs(s["backchannel_jsd"] - 0.5113) > 0.05
    assert s["turn_taking_latency_s"] == pytest.approx(TT_LATENCY, abs=1e-12)
    assert s["interruption_latency_s"] == pytest.approx(UI_LATENCY, abs=1e-12)
    # another reading in the same --out is another run: refused without --overwrite
    assert cli_main(rel_args(release, stimuli, out)) == 2


def test_comparison_with_fdb_printouts(fdb_dir, tmp_path, capsys):
    release, stimuli = build_release(fdb_dir, tmp_path)
    res = release / "results" / "r1"
    res.mkdir(parents=True)
    tt_path = stimuli / "candor_turn_taking" / "1" / "output.json"
    # FDB's smooth-turn-taking printout: the path, "the TOR is", "the latency is" (raw), then the means
    (res / "smooth_turn_taking.txt").write_text(
        f"input ['{stimuli}/candor_turn_taking/1/turn_taking.json']\noutput.json\n{tt_path}\nthe TOR is 1\n"
        f"the latency is {TT_LATENCY}\n---------------------------------------------------\n[Result]\n"
        f"Average take turn:  1.0\nAverage latency:  {TT_LATENCY}\n---------------------------------------------------\n")
    gt = json.loads(FDB_GT.read_text())["1"]
    fdb_jsd = hand_jsd(fdb_reading_segments(release / "data" / "r1" / "icc_backchannel" / "1" / "output.flac"), 10.4, gt)
    (res / "backchannel.txt").write_text(
        f"duration is 0.5\nJSD: {fdb_jsd}\n---------------------------------------------------\n[Result]\n"
        f"JSD - Mean: {fdb_jsd:.4f} ± 0.0000\nTOR - Mean: 1.0000 ± 0.0000\nFrequency - Mean: {4 / 10.4:.4f} ± 0.0000\n")
    (res / "pause_candor.txt").write_text("[Result]\nAverage take turn:  0.0\n")

    for compat, jsd_diff_small in (("none", False), ("upstream", True)):
        out = tmp_path / f"out-{compat}"
        capsys.readouterr()
        assert cli_main(rel_args(release, stimuli, out, "--compat", compat)) == 0
        printed = capsys.readouterr().out
        comp = json.loads((out / "r1" / "vs_release.json").read_text())
        c = comp["categories"]
        tt = c["candor_turn_taking"]
        assert tt["keys"]["turn_taking_latency_s"]["diff"] == pytest.approx(0.0, abs=1e-12)
        assert tt["keys"]["turn_taking_tor"] == {"ours": 1.0, "theirs": 1.0, "diff": 0.0}
        assert tt["per_sample"] == {"n_identified": 1, "n_compared": 1, "n_agree": 1, "differing": [], "not_scored_by_us": []}
        assert c["candor_pause_handling"]["keys"]["pause_tor_candor"]["diff"] == 0.0
        assert not c["synthetic_pause_handling"]["present"] and "(no results/r1/pause_synthetic.txt)" in printed
        bc = c["icc_backchannel"]["keys"]
        assert bc["backchannel_frequency"]["diff"] == pytest.approx(0.0, abs=5e-5)
        # FDB printed its JSD from its own reading: only --compat upstream reproduces it (to the 4 printed decimals)
        assert (abs(bc["backchannel_jsd"]["diff"]) < 5e-5) is jsd_diff_small
        # the unlabelled per-sample "JSD:" line is not attributed to any sample
        assert c["icc_backchannel"]["per_sample"] is None
        line = next(ln for ln in printed.splitlines() if "turn_taking_latency_s" in ln and "+0.0000" in ln)
        assert "candor_turn_taking" in line and f"{TT_LATENCY:.4f}" in line
        assert "per sample: 1 of 1 agree" in printed


# ------------------------------------------------------------------ bad input


def test_bad_release_rows_fail_with_reasons(fdb_dir, tmp_path, capsys):
    release, stimuli = tmp_path / "release", tmp_path / "stimuli"
    ph, tt, ui = ex(fdb_dir, "pause_handling_example"), ex(fdb_dir, "smooth_turn_taking_example"), ex(fdb_dir, "user_interruption_example")
    rating = json.loads((ui / "rating.json").read_text())
    rows = [
        add_sample(release, stimuli, "r1", "candor_turn_taking", "1", tt, task_file="turn_taking.json"),           # 0 ok
        add_sample(release, stimuli, "r1", "candor_turn_taking", "2", tt, task_file="turn_taking.json", extra_s=-0.6),  # 1 0.6 s short
        add_sample(release, stimuli, "r1", "candor_turn_taking", "3", tt, task_file="turn_taking.json", extra_s=0.4),   # 2 0.4 s long: ok
        add_sample(release, stimuli, "r1", "candor_turn_taking", "4", tt, task_file="turn_taking.json"),           # 3 stimulus removed below
        add_sample(release, stimuli, "r1", "synthetic_user_interruption", "1", ui, task_file="interrupt.json", rating=rating),  # 4 ok
        add_sample(release, stimuli, "r1", "synthetic_user_interruption", "2", ui, task_file="interrupt.json",
                   rating={"analysis": "x", "rating": 7}),                                                        # 5 rating 7
        add_sample(release, stimuli, "r1", "synthetic_pause_handling", "1", ph, task_file="pause.json", asr="{not json"),  # 6
        add_sample(release, stimuli, "r1", "synthetic_pause_handling", "2", ph, task_file="pause.json"),           # 7 ok
        add_sample(release, stimuli, "r1", "candor_pause_handling", "1", ph, task_file="pause.json"),              # 8 no ASR
    ]
    (release / "data" / "r1" / "candor_pause_handling" / "1" / "output.json").unlink()
    for f in (stimuli / "candor_turn_taking" / "4").iterdir():
        f.unlink()
    (stimuli / "candor_turn_taking" / "4").rmdir()
    rows.append(dict(rows[7]))  # 9: the same <category>/<id> again
    rows.append({**rows[7], "category": "no_such_category"})  # 10
    write_metadata(release, "r1", rows, extra_lines=['{"category": "icc_backchannel", "sample_id": ', "[1, 2]"])  # 11, 12
    out = tmp_path / "out"
    assert cli_main(rel_args(release, stimuli, out)) == 0
    res = list(read_jsonl(out / "r1" / "per_sample.jsonl"))
    assert [r["row"] for r in res] == list(range(13))
    ok = [r["row"] for r in res if r["status"] == "ok"]
    assert ok == [0, 2, 4, 7]
    err = {r["row"]: r["error"] for r in res if r["status"] != "ok"}
    assert "output.flac lasts 9.800 s but its stimulus input.wav 10.400 s" in err[1]
    assert err[3].startswith("stimulus folder missing: ") and err[3].endswith("candor_turn_taking/4")
    assert "rating 7 is not an integer from 0 to 5" in err[5]
    assert "not valid JSON" in err[6] and "output.json" in err[6]
    # the release ships its ASR: a missing output.json fails the row (nothing transcribed in its place)
    assert err[8].startswith("missing file: ") and err[8].endswith("candor_pause_handling/1/output.json")
    assert err[9] == "duplicate of row 7 (same synthetic_pause_handling/2)"
    assert "unknown category 'no_such_category'" in err[10]
    assert "r1.jsonl line 12 is not valid JSON" in err[11] and "line 13 is not a JSON object" in err[12]
    assert all("\n" not in e for e in err.values())
    s = json.loads((out / "r1" / "summary.json").read_text())
    assert (s["n_samples"], s["n_scored"], s["n_failed"]) == (13, 4, 9)
    # the rows that scored still give their figures: turn-taking rows 0 and 2 (same reply, 1.35 s each)
    assert s["turn_taking_latency_s_n"] == 2 and s["turn_taking_latency_s"] == pytest.approx(TT_LATENCY)
    assert s["turn_taking_latency_s_ci95"] == pytest.approx([TT_LATENCY, TT_LATENCY])
    assert s["interruption_rating"] == 4.0 and s["interruption_rating_n"] == 1
    assert s["backchannel_tor"] is None and s["backchannel_tor_n"] == 0  # no backchannel row scored: null, not 0
    assert s["categories"]["candor_turn_taking"] == {"n_samples": 4, "n_scored": 2, "n_failed": 2}


def test_whole_run_problems_exit_2_with_one_line(mini, tmp_path, capsys):
    release, stimuli = mini
    cases = [
        (["--run", "nope"], "no metadata/<run>.jsonl for run(s) nope"),
        (["--run", "../r1"], "is not a plain name"),
        (["--stimuli", str(tmp_path / "none")], "--stimuli"),
        (["--task", "backchannel"], "not both"),
    ]
    for more, words in cases:
        args = rel_args(release, stimuli, tmp_path / "o", *more)
        capsys.readouterr()
        assert cli_main(args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err and "Traceback" not in err, (more, err)
    capsys.readouterr()
    assert cli_main(["fdb", "score", "--release", str(tmp_path / "no_such"), "--run", "r1", "--stimuli", str(stimuli),
                     "--out", str(tmp_path / "o")]) == 2
    assert "no such folder, and not a Hub dataset id" in capsys.readouterr().err


# ------------------------------------------------------------------ Hub ids (a loopback Hub: the real client)


def _hub_env(monkeypatch, tmp_path, url: str, offline: str = "0") -> None:
    for k in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", offline)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")


@pytest.mark.slow
def test_hub_id_fetches_only_the_requested_runs(mini, tmp_path, monkeypatch):
    """The release by Hub id through the real Hub client (in the deadline's child process)
    against a loopback Hub holding runs r1 and r9: only r1's files (and the card) are fetched; with
    HF_HUB_OFFLINE=1 and the Hub gone, the cache serves it; a run the release lacks is refused."""
    from helpers import FakeHub

    release, stimuli = mini
    files = {p.relative_to(release).as_posix(): p.read_bytes() for p in sorted(release.rglob("*")) if p.is_file()}
    files.update({f.replace("/r1", "/r9", 1): b for f, b in files.items() if "/r1" in f})  # another run, not asked
    files["README.md"] = b"# the release card\n"
    with FakeHub("MagicLuke/fdb-v1-outputs-v1", files) as hub:
        _hub_env(monkeypatch, tmp_path, hub.url)
        out = tmp_path / "out"
        assert cli_main(["fdb", "score", "--release", "MagicLuke/fdb-v1-outputs-v1", "--run", "r1", "--stimuli",
                         str(stimuli), "--out", str(out), "--no-progress", "--bootstrap", "0", "--deadline-s", "300"]) == 0
        asked = {path.split("/resolve/", 1)[1].split("/", 1)[1] for _, path in hub.requests if "/resolve/" in path}
    want = {f for f in files if f == "README.md" or f.startswith(("data/r1/", "results/r1/", "metadata/r1."))}
    assert asked == want  # r9's files never asked for
    snap = tmp_path / "hf_home" / "hub" / "datasets--MagicLuke--fdb-v1-outputs-v1" / "snapshots" / FakeHub.SHA
    assert {p.relative_to(snap).as_posix() for p in snap.rglob("*") if p.is_file()} == want
    assert json.loads((out / "r1" / "summary.json").read_text())["n_scored"] == 5
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the Hub is gone: the cache holds r1
    assert cli_main(["fdb", "score", "--release", "MagicLuke/fdb-v1-outputs-v1", "--run", "r1", "--stimuli", str(stimuli),
                     "--out", str(tmp_path / "o2"), "--no-progress", "--bootstrap", "0"]) == 0
    assert cli_main(["fdb", "score", "--release", "MagicLuke/fdb-v1-outputs-v1", "--run", "r1,r2", "--stimuli", str(stimuli),
                     "--out", str(tmp_path / "o3"), "--no-progress"]) == 2  # r2 is not in this release


@pytest.mark.parametrize("offline,refuse,words", [
    ("1", None, "HF_HUB_OFFLINE is set and it is not in the Hugging Face cache"),
    ("0", (403, "GatedRepo"), "is gated: accept its terms at https://huggingface.co/datasets/MagicLuke/fdb-v1-outputs-v1"),
    ("0", (404, "RepoNotFound"), "no such Hub dataset"),
])
def test_hub_errors_are_one_line(mini, tmp_path, monkeypatch, capsys, offline, refuse, words):
    from helpers import FakeHub

    _, stimuli = mini
    with FakeHub("MagicLuke/fdb-v1-outputs-v1", {}, refuse=refuse) as hub:
        _hub_env(monkeypatch, tmp_path, hub.url, offline)
        capsys.readouterr()
        assert cli_main(["fdb", "score", "--release", "MagicLuke/fdb-v1-outputs-v1", "--run", "r1", "--stimuli",
                         str(stimuli), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()  # refused before anything was written


def test_a_release_download_is_cut_at_its_total_deadline(mini, tmp_path, monkeypatch, capsys):
    """A Hub that trickles the release's files (every read in time, no end): --deadline-s ends the
    command in one line, exit 2, nothing scored."""
    from helpers import FakeHub

    _, stimuli = mini
    with FakeHub("MagicLuke/fdb-v1-outputs-v1", {"metadata/r1.jsonl": b"{}\n" * 100_000}, trickle=True) as hub:
        _hub_env(monkeypatch, tmp_path, hub.url)
        assert cli_main(["fdb", "score", "--release", "MagicLuke/fdb-v1-outputs-v1", "--run", "r1", "--stimuli",
                         str(stimuli), "--out", str(tmp_path / "o"), "--deadline-s", "4"]) == 2
        err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the Hub download ran past its 4 s deadline" in err, err
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------ kill -9 and resume


def test_kill_and_resume_gives_the_same_files(fdb_dir, tmp_path):
    """20 backchannel rows (ICC ids 0-19, each the turn-taking sample's audio) scored one per
    logged batch with the streaming VAD; killed after 3 rows, rerun: the same files as a clean run."""
    release, stimuli = tmp_path / "release", tmp_path / "stimuli"
    tt = ex(fdb_dir, "smooth_turn_taking_example")
    rows = [add_sample(release, stimuli, "r1", "icc_backchannel", str(i), tt, task_file=None) for i in range(20)]
    write_metadata(release, "r1", rows)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [*SPEARBENCH, *rel_args(release, stimuli, "OUT", "--batch-size", "1", "--vad-backend", "jit", "--bootstrap", "200")]
    ref = tmp_path / "ref"
    subprocess.run([a if a != "OUT" else str(ref) for a in cmd], check=True, env=env, capture_output=True)

    out = tmp_path / "killed"
    killed = [a if a != "OUT" else str(out) for a in cmd]
    proc = subprocess.Popen(killed, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = out / "r1" / ".work" / "rank-0.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and (not log.exists() or len(log.read_text().splitlines()) < 3):
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = len(log.read_text().splitlines())
    assert 3 <= done_before < 20 and not (out / "r1" / "summary.json").exists()

    subprocess.run(killed, check=True, env=env, capture_output=True)
    for f in ("per_sample.jsonl", "summary.json"):
        a, b = (out / "r1" / f).read_text(), (ref / "r1" / f).read_text()
        assert a == b.replace(str(ref), str(out)), f
    assert (out / "leaderboard.md").read_text() == (ref / "leaderboard.md").read_text()
    info = json.loads((out / "r1" / "run_info.json").read_text())
    assert info["rows_resumed"] == done_before and info["rows_scored_this_run"] == 20 - done_before
    logged = [json.loads(line)["row"] for line in log.read_text().splitlines()]
    assert sorted(logged) == list(range(20))  # every row logged exactly once across the two runs
    s = json.loads((ref / "r1" / "summary.json").read_text())
    assert s["backchannel_frequency"] == pytest.approx(4 / 10.4) and s["backchannel_frequency_n"] == 20


# ------------------------------------------------------------------ accelerate: two processes write what one writes


def test_two_processes_equal_one(fdb_dir, tmp_path):
    """Two runs of the release (5 rows each: 3 + 2 on the two ranks) under
    ``ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes 2`` (gloo)."""
    release, stimuli = build_release(fdb_dir, tmp_path)
    build_release(fdb_dir, tmp_path, run="r2")  # same stimuli, a second run of replies
    venv = Path(sys.executable).parent
    env = {**os.environ, "PYTHONPATH": str(REPO), "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}

    def args(out):
        return ["fdb", "score", "--release", str(release), "--run", "r1,r2", "--stimuli", str(stimuli), "--out", str(out),
                "--reference", str(FDB_GT), "--no-progress", "--batch-size", "1"]

    one, two = tmp_path / "one", tmp_path / "two"
    p = subprocess.run([str(venv / "spearbench"), *args(one)], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    p = subprocess.run([str(venv / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                        "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29519",
                        str(venv / "spearbench"), *args(two)], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    for run in ("r1", "r2"):
        s1 = json.loads((one / run / "summary.json").read_text())
        s2 = json.loads((two / run / "summary.json").read_text())
        assert (s1.pop("n_processes"), s2.pop("n_processes")) == (1, 2)
        assert s1 == s2
        assert (one / run / "per_sample.jsonl").read_text() == (two / run / "per_sample.jsonl").read_text()
        logs = sorted(p.name for p in (two / run / ".work").glob("rank-*.jsonl"))
        assert logs == ["rank-0.jsonl", "rank-1.jsonl"]
        assert [len((two / run / ".work" / n).read_text().splitlines()) for n in logs] == [3, 2]  # rows[rank::2]
    board = (two / "leaderboard.md").read_text()
    assert board.count("| Example system |") == 2


def test_parse_printout_forms():
    from spear_metrics.full_duplex.printout import parse_printout

    # user interruption: "Processing <folder> ...", the judge's raw answer, the parsed dict, then the means
    p = parse_printout("Processing /x/synthetic_user_interruption/7 ...\nAnalysis: ok.\nI would rate the AI's response as 4.\n"
                       "{'analysis': 'ok.', 'rating': 4}\nProcessing /x/synthetic_user_interruption/8 ...\n"
                       "---------------------------------------------------\n[Result]\nAverage rating:  4.0\n"
                       "Average take turn:  0.5\nAverage latency:  0.75\n")
    assert p.per_sample == {"7": {"relevance": 4.0}}
    assert p.aggregates == {"relevance": 4.0, "tor": 0.5, "latency_s": 0.75}
    # backchannel, the older printout: labelled by "Processing output file", means as "JSD : x" / "BCR : x"
    p = parse_printout("Processing output file /d/icc_backchannel/12/output.json\nduration is 0.4\nJSD: 0.25\n"
                       "Processing output file /d/icc_backchannel/13/output.json\nJSD: 1\n"
                       "len(jsd_list) 2\n---\n[Result]\n\n  JSD : 0.6250\n\n  TOR : 0.5000\n\n  BCR : 0.1200\n")
    assert p.per_sample == {"12": {"jsd": 0.25}, "13": {"jsd": 1.0}}
    assert p.aggregates == {"jsd": 0.625, "tor": 0.5, "backchannel_frequency": 0.12}
    # smooth turn-taking with TOR 0: latency printed as None
    p = parse_printout("/r/candor_turn_taking/5/output.json\nthe TOR is 0\nthe latency is None\n[Result]\n"
                       "Average take turn:  0.0\n")
    assert p.per_sample == {"5": {"tor": 0.0, "latency_s": None}}


def test_rating_json_first_then_the_configured_judge(fdb_dir, tmp_path):
    """Sample 1 carries the release's rating.json (4); sample 2 has none, so the judge is asked (2)."""
    from test_judge import FakeChatServer

    release, stimuli = tmp_path / "release", tmp_path / "stimuli"
    ui = ex(fdb_dir, "user_interruption_example")
    rows = [add_sample(release, stimuli, "r1", "synthetic_user_interruption", "1", ui, task_file="interrupt.json",
                       rating=json.loads((ui / "rating.json").read_text())),
            add_sample(release, stimuli, "r1", "synthetic_user_interruption", "2", ui, task_file="interrupt.json")]
    write_metadata(release, "r1", rows)
    with FakeChatServer([(200, '{"analysis": "partly on topic", "rating": 2}')]) as srv:
        assert cli_main(["fdb", "score", "--release", str(release), "--run", "r1", "--stimuli", str(stimuli), "--out",
                         str(tmp_path / "out"), "--no-progress", "--judge-url", srv.url, "--judge-model", "judge-x"]) == 0
    assert len(srv.requests) == 1  # only the sample without rating.json
    assert "fiction books" in srv.requests[0]["messages"][1]["content"]
    res = {r["id"]: r for r in read_jsonl(tmp_path / "out" / "r1" / "per_sample.jsonl")}
    assert (res["1"]["relevance"], res["1"]["relevance_source"]) == (4, "rating.json")
    assert res["2"]["relevance"] == 2 and res["2"]["relevance_source"] is None
    s = json.loads((tmp_path / "out" / "r1" / "summary.json").read_text())
    assert s["interruption_rating"] == 3.0 and s["interruption_rating_n"] == 2
    assert (s["n_interruption_ratings_from_rating_json"], s["n_interruption_ratings_from_judge"]) == (1, 1)
    assert "rating.json" in s["models"]["interruption_rating"] and "judge-x @ " in s["models"]["interruption_rating"]
