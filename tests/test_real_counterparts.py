"""The ``moshi`` adapter against Kyutai's real ``moshi.server`` (PyPI ``moshi``, pinned in
constraints.txt) on 127.0.0.1, serving a tiny randomly initialised LM and Mimi built by the
package's own loaders (``tests/fakes/moshi_real_server.py``): the handshake, Ogg-Opus both ways,
one LM step per 80 ms input frame and ``LMGen``'s one-step delay are Kyutai's code.

The reply is scripted (the launcher replaces the decoded frame and the text token after the real
computation): output frame ``ONSET_FRAME`` onwards is a tone, the answer's words come with its
first frames, and one word of "inner monologue" comes long before. Two servers run: one at its
natural pace, one slowed to at least ``SLOW_FRAME_S`` per frame (1.4x slower than real time: a
backlog that grows through the session). Every assertion is frame-exact, from frame indices, and
holds on a loaded machine: the frame rule places output frame ``j`` at ``(j + 1) x 80 ms``
whatever its arrival, so both servers give the same onsets, the same FDB reply channel, every
reply frame, and SPEAR's onset and FDB's placement agree. Only the slowed server's lag is asserted
(a lower bound its sleep guarantees: >= 32 ms more per frame than the client's 80 ms pacing).
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from spear_datasets.audio import decode
from spear_metrics.agents.moshi import FRAME_S, FRAME_SAMPLES, frame_levels_dbfs
from spear_metrics.cli import main
from test_adapters_openai import name, records, sources, write_csv

pytestmark = pytest.mark.slow

LAUNCHER = Path(__file__).parent / "fakes" / "moshi_real_server.py"
#: the scripted answer: a tone from this output frame on, for 12 frames; its words with its first frames
ONSET_FRAME = 36
SLOW_FRAME_S = 0.112  # 1.4 x 80 ms
#: the frame rule: output frame j at (j + 1) x 80 ms
ONSET_S = (ONSET_FRAME + 1) * FRAME_S


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RealMoshi:
    """Kyutai's ``moshi.server`` in a subprocess (the launcher), on a free loopback port."""

    def __init__(self, workdir: Path, slow_frame_s: float = 0.0):
        self.port = _free_port()
        self.log = workdir / "server.log"
        env = dict(os.environ, OMP_NUM_THREADS="1", NO_TORCH_COMPILE="1", MOSHI_SCRIPT_ONSET_FRAME=str(ONSET_FRAME),
                   MOSHI_SLOW_FRAME_S=str(slow_frame_s))
        self.proc = subprocess.Popen([sys.executable, str(LAUNCHER), str(workdir / "model"), str(self.port)],
                                     stdout=open(self.log, "wb"), stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"moshi.server exited ({self.proc.returncode}): {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
                    return
            except OSError:
                time.sleep(0.5)
        pytest.fail(f"moshi.server did not listen within {timeout_s:g} s: {self.log.read_text()[-2000:]}")

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/api/chat"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """``{"real_time": RealMoshi, "slowed": RealMoshi}``, started together."""
    made = {k: RealMoshi(tmp_path_factory.mktemp(k), slow) for k, slow in (("real_time", 0.0), ("slowed", SLOW_FRAME_S))}
    try:
        for s in made.values():
            s.wait_ready()
        yield made
    finally:
        for s in made.values():
            s.stop()


def _infer(url: str, csv_path: Path, out: Path) -> None:
    assert main(["infer", "--agent", "moshi", "--data", str(csv_path), "--out", str(out), "--no-progress",
                 "-a", f"url={url}", "-a", "handshake_timeout_s=120", "-a", "drain_s=10"]) == 0


def test_spear_onsets_are_the_model_decision_on_a_real_and_a_slowed_server(servers, real_dir, tmp_path, capsys):
    """Items 1 and 6: ``answer_start_time`` is the scripted frame's place, ``(36 + 1) x 80 ms = 2.96 s``
    from the clip's start, on both servers: after the AMI question's end (2.48 s: +0.48 s) and inside
    the ES one (3.60 s: -0.64 s, an interruption); ``transcript_answer`` holds the answer's words,
    not the monologue word sent at frame 2. The slowed server's rows are flagged for their lag."""
    src = sources(real_dir)
    rows = [(name(0), src["ami"][0]), (name(1), src["es"][0])]
    csv_path = write_csv(tmp_path / "data", rows)
    got = {}
    for kind, server in servers.items():
        out = tmp_path / kind
        _infer(server.url, csv_path, out)
        got[kind] = (out, records(out))
    for kind, (out, recs) in got.items():
        meta = {Path(r["audio_path"]).name: r for r in csv.DictReader(open(out / "metadata.csv"))}
        for k, (row, clip) in enumerate(rows):
            r = recs[row]
            assert r["status"] == "ok" and r["onset"] == pytest.approx(ONSET_S, abs=1e-9), (kind, r)
            q_end = clip.shape[1] / 16_000
            assert float(meta[row]["answer_start_time"]) == pytest.approx(ONSET_S - q_end, abs=1e-6)
            assert meta[row]["transcript_answer"] == "hello world"
            # the answer audio: the 12 tone frames (24 kHz -> 16 kHz: 80 ms = 1280 samples), and the frame
            # after them when Opus's decay keeps it above -40 dBFS
            wav, sr = decode(out / r["answer_audio_path"])
            assert sr == 16_000 and wav.shape[1] in (12 * 1280, 13 * 1280)
            # every reply frame arrived: one per input frame sent, less the server's one-step delay
            assert r["frames_received"] == r["frames_expected"] > ONSET_FRAME + 12
        assert float(meta[rows[0][0]]["answer_start_time"]) == pytest.approx(0.48, abs=1e-6)
        assert float(meta[rows[1][0]]["answer_start_time"]) == pytest.approx(-0.64, abs=1e-6)
    # the slowed server: >= 112 ms per frame against the client's 80 ms: after the answer's 36 + 12 + 25
    # frames (its tail of quiet) the backlog is >= 73 x 32 ms = 2.3 s, past the 1 s bound
    out, recs = got["slowed"]
    for row, _ in rows:
        assert recs[row]["server_lag_max_s"] > 73 * (SLOW_FRAME_S - FRAME_S) - 0.1 and recs[row]["server_lag_flagged"]
    with open(out / "response_times.csv") as f:
        assert all(r["server_lag_flagged"] == "True" for r in csv.DictReader(f))
    info = json.loads((out / "run_info.json").read_text())
    assert info["n_server_lag_flagged"] == 2 and info["server_lag_bound_s"] == 1.0 and info["onset_kind"] == "frame"
    assert info["n_reply_incomplete"] == 0  # the backlog was drained: every reply frame came
    assert "row(s) had output frames arrive more than 1.0 s after the input frames" in capsys.readouterr().err


def test_fdb_reply_channel_is_complete_and_placed_by_the_frame_rule(servers, fdb_dir, tmp_path):
    """Items 2 and 3: ``fdb-infer`` on FDB's pause-handling stimulus (4.72 s): every reply frame arrives
    from both servers (the slowed one's backlog drained), the tone's first frame sits at
    ``(36 + 1) x 80 ms``, the place SPEAR's onset gives it, and the two channels are the same."""
    n_in = round(4.72 * 24_000)
    expected = math.ceil(n_in / FRAME_SAMPLES) - 1
    replies = {}
    for kind, server in servers.items():
        root = tmp_path / kind
        shutil.copytree(fdb_dir / "example_data" / "pause_handling_example", root / "pause_handling")
        for f in ("output.wav", "output.json"):
            (root / "pause_handling" / "1" / f).unlink()
        assert main(["fdb", "infer", "--agent", "moshi", "--root", str(root), "--no-asr", "--no-progress",
                     "-a", f"url={server.url}", "-a", "handshake_timeout_s=120", "-a", "drain_s=10"]) == 0
        (rec,) = [r for r in map(json.loads, (root / "pause_handling" / ".spearbench-fdb-infer" / "rank-0.jsonl")
                  .read_text().splitlines()) if r.get("status") in ("ok", "failed")]  # the journal logs starts too
        assert rec["status"] == "ok" and "note" not in rec, rec
        assert (rec["frames_received"], rec["frames_expected"]) == (expected, expected)
        y, sr = decode(root / "pause_handling" / "1" / "output.wav")
        frame = round(FRAME_S * sr)
        assert y.shape[1] == round(4.72 * sr)
        voiced = np.flatnonzero(frame_levels_dbfs(y[0], frame) >= -40)
        assert voiced[0] == ONSET_FRAME + 1 and voiced[0] * FRAME_S == pytest.approx(ONSET_S)
        assert voiced[-1] in (ONSET_FRAME + 12, ONSET_FRAME + 13)  # 12 tone frames (and Opus's decay)
        assert not y[0, :frame].any()  # the lead: one frame of zeros
        replies[kind] = y[0]
    assert np.array_equal(replies["real_time"], replies["slowed"])
