"""Full-Duplex-Bench v1.0 scoring on the real example samples of tests/fixtures/fdb (read in place).

Expected values are worked out by hand from the JSON files of the fixtures (quoted in comments),
not by running the code under test.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from spear_datasets.sources.fdb import Chunk, FDBSample, list_samples, read_reference_distribution
from spear_metrics.cli import main as cli_main
from spear_metrics.core.records import read_jsonl
from spear_metrics.core.stats import bootstrap_ci, paired_comparison
from spear_metrics.full_duplex.definition import (
    FDBInputError,
    FullDuplexScorer,
    backchannel_histogram,
    backchannel_walk,
    response_latency_s,
    score_samples,
    take_over,
    words_in_segment,
)

from test_judge import FakeChatServer


def ex(fdb_dir: Path, name: str) -> Path:
    return fdb_dir / "example_data" / name


def link_sample(dst: Path, src: Path, files) -> Path:
    """A sample folder in tmp_path made of symlinks to the real fixture files (nothing copied)."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in files:
        os.symlink(src / f, dst / f)
    return dst


# ------------------------------------------------------------------ TOR and latency, real examples


def test_examples_tor_and_latency(fdb_dir):
    # pause_handling_example/1/output.json: 12 words, first " A" starts 0.0, last " had." ends 4.68:
    # span 4.68 s >= 1 s -> TOR 1 (the model talks over the pause; pause handling: lower is better).
    (p,) = score_samples(list_samples(ex(fdb_dir, "pause_handling_example"), "pause_handling"),
                         FullDuplexScorer("pause_handling"))
    assert p.ok and p.values["tor"] == 1 and p.values["n_words"] == 12 and "latency_s" not in p.values

    # smooth_turn_taking_example/1: first word "Yes," starts 3.36; turn_taking.json timestamp[0]
    # = 2.0100000000000016 -> latency 3.36 - 2.01 = 1.35 s; 22 words over 3.36..10.38 -> TOR 1.
    (t,) = score_samples(list_samples(ex(fdb_dir, "smooth_turn_taking_example"), "smooth_turn_taking"),
                         FullDuplexScorer("smooth_turn_taking"))
    assert t.ok and t.values["tor"] == 1
    assert t.values["latency_s"] == pytest.approx(3.36 - 2.0100000000000016, abs=1e-12)
    assert t.values["latency_s"] == pytest.approx(1.35, abs=1e-9)

    # user_interruption_example/1: interrupt.json timestamp[1] = 13.144 (end of the interrupting
    # turn); output.json (already shifted to absolute time) first word "One," at 17.224 ->
    # latency 17.224 - 13.144 = 4.08 s; 32 words over 17.224..28.124 -> TOR 1.
    (u,) = score_samples(list_samples(ex(fdb_dir, "user_interruption_example"), "user_interruption"),
                         FullDuplexScorer("user_interruption"))
    assert u.ok and u.values["tor"] == 1 and u.values["n_words"] == 32
    assert u.values["latency_s"] == pytest.approx(4.08, abs=1e-9)
    assert u.values["relevance"] is None  # no judge configured: not invented


def test_take_over_rules():
    w = lambda s, e, t="w": Chunk(t, s, e)  # noqa: E731
    assert take_over([]) == 0  # no words: no take-over
    assert take_over([w(1.0, 1.3), w(1.3, 1.6), w(1.6, 1.9)]) == 0  # 0.9 s, 3 words: backchannel-like
    assert take_over([w(1.0, 1.2), w(1.2, 1.4), w(1.4, 1.6), w(1.6, 1.9)]) == 1  # 4 words
    assert take_over([w(1.0, 2.0)]) == 1  # span exactly 1 s is not "< 1 s"
    assert take_over([w(1.0, 1.2), w(3.0, None)]) == 1  # null last end: its start (3.0) is used, span 2 s
    with pytest.raises(FDBInputError, match="null start"):
        take_over([w(None, 1.0), w(1.0, 3.0)])
    # latency: negatives count as 0; TOR 0 -> no latency
    assert response_latency_s([w(1.5, 2.0), w(2.0, 3.0)], 2.0) == 0.0
    assert response_latency_s([w(1.5, 1.7)], 1.0) is None


# ------------------------------------------------------------------ backchannel


@pytest.fixture(scope="module")
def bc_root(fdb_dir, tmp_path_factory) -> Path:
    """A backchannel-task layout: ICC id "1" made of the smooth-turn-taking example's output."""
    root = tmp_path_factory.mktemp("bc")
    src = ex(fdb_dir, "smooth_turn_taking_example") / "1"
    link_sample(root / "1", src, ["input.wav", "output.wav", "output.json"])
    link_sample(root / "999", src, ["input.wav", "output.wav", "output.json"])  # not an ICC id
    (root / "2").mkdir()  # id present in the reference, but no output.wav
    return root


def test_backchannel_walk_frequency_and_jsd(fdb_dir, bc_root):
    ref = read_reference_distribution(fdb_dir / "icc_gt_distribution.json")
    res = score_samples(list_samples(bc_root, "backchannel"), FullDuplexScorer("backchannel", reference=ref))
    by_id = {r.values["id"]: r for r in res}
    one = by_id["1"]
    assert one.ok, one.error
    v = one.values
    # Silero (defaults, 0.1 s) on this output.wav: speech at 3.4-3.8, 4.5-6.4, 7.0-8.2, 8.4-10.4 s
    # (ms-resolution VAD: 3.394-3.838, 4.546-6.398, 6.978-8.158, 8.45-10.4; rounding gives these).
    assert v["vad_segments"] == [[3.4, 3.8], [4.5, 6.4], [7.0, 8.2], [8.4, 10.4]]
    # none is longer than 3 s, so all 4 are counted; words per segment from output.json:
    # "Yes," (1 word, 0.4 s -> TOR 0), "it is my first time doing this." (7 -> 1),
    # "I'm here to help you," (5 -> 1), "so please let me know how I can assist." (>3 -> 1): TOR 1.
    assert v["n_backchannels"] == 4 and v["tor"] == 1
    assert v["duration_s"] == pytest.approx(10.4)  # 166400 samples at 16 kHz
    assert v["backchannel_frequency"] == pytest.approx(4 / 10.4, rel=1e-12)
    # Histogram by hand: 53 bins (int(10.4/0.2) = 52, + 1). Float bins as upstream:
    # 3.4/0.2=17.0, 3.8/0.2=18.999.. -> 17..18; 4.5->22, 6.4->32; 7.0->35, 8.2/0.2=40.999.. -> 40;
    # 8.4->42, 10.4->52. JSD distance (natural log) written out, not scipy.
    gt = np.asarray(json.loads((fdb_dir / "icc_gt_distribution.json").read_text())["1"], float)

    def jsd(ranges):
        h = np.zeros(53)
        for a, b in ranges:
            h[a:b + 1] += 1
        p = (h + 1e-10) / (h + 1e-10).sum()
        q = np.interp(np.linspace(0, 1, 53), np.linspace(0, 1, gt.size), gt)
        q = q / q.sum()
        m = (p + q) / 2
        kl = lambda x, y: float(np.sum(np.where(x > 0, x * np.log(x / y), 0.0)))  # noqa: E731
        return math.sqrt((kl(p, m) + kl(q, m)) / 2)

    upstream = jsd([(17, 18), (22, 32), (35, 40), (42, 52)])
    exact_floor = jsd([(17, 19), (22, 32), (35, 41), (42, 52)])
    assert upstream == pytest.approx(0.5113, abs=5e-5)  # FDB_PROTOCOL.md: 0.5113 upstream
    assert exact_floor == pytest.approx(0.4863, abs=5e-5)  # ... vs 0.4863 with exact floors
    assert v["jsd"] == pytest.approx(upstream, abs=1e-9)
    # bad inputs fail their own row only, with the reason
    assert not by_id["999"].ok and "absent from the human backchannel distribution" in by_id["999"].error
    assert not by_id["2"].ok and "output.wav" in by_id["2"].error


def test_backchannel_pure_parts():
    # a word starting exactly at the segment end counts (upstream's <=), one ending at its start does not
    ws = [Chunk("a", 0.5, 1.0), Chunk("b", 2.0, 2.5), Chunk("c", None, 1.5), Chunk("d", 1.2, 1.4)]
    assert words_in_segment(ws, 1.0, 2.0) == ["b", "d"]
    # a > 3 s segment ends the walk: only the segment before it is counted
    assert backchannel_walk([(0.0, 0.5), (1.0, 4.5), (5.0, 5.5)], []) == (1, [(0.0, 0.5)])
    assert backchannel_walk([], []) == (0, [])
    h = backchannel_histogram([(8.2, 8.2)], 9.0)  # 8.2/0.2 = 40.999... -> bin 40, not 41
    assert int(np.argmax(h)) == 40 and h.size == 46


def test_backchannel_without_reference_and_no_speech(fdb_dir, tmp_path):
    link_sample(tmp_path / "1", ex(fdb_dir, "smooth_turn_taking_example") / "1", ["output.wav", "output.json"])
    out = tmp_path / "out"
    assert cli_main(["fdb", "score", "--task", "backchannel", "--root", str(tmp_path), "--out", str(out), "--bootstrap", "0"]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["jsd"] is None and "jsd_note" in s  # no human distribution: null, with a note
    assert s["backchannel_frequency"] == pytest.approx(4 / 10.4)


# ------------------------------------------------------------------ bad inputs and the CLI


def make_turn_taking_root(fdb_dir: Path, root: Path) -> Path:
    src = ex(fdb_dir, "smooth_turn_taking_example") / "1"
    link_sample(root / "1", src, ["input.wav", "output.wav", "output.json", "turn_taking.json"])
    link_sample(root / "2", src, ["input.wav", "output.wav", "output.json"])  # no turn_taking.json
    link_sample(root / "3", src, ["input.wav", "output.wav", "output.json"])
    (root / "3" / "turn_taking.json").write_text("[]")  # empty task list
    link_sample(root / "4", src, ["input.wav", "output.wav", "turn_taking.json"])
    chunks = json.loads((src / "output.json").read_text())
    chunks["chunks"][0]["timestamp"][0] = None  # null first-word start
    (root / "4" / "output.json").write_text(json.dumps(chunks))
    link_sample(root / "5", src, ["input.wav", "output.wav", "output.json"])
    (root / "5" / "turn_taking.json").write_text('[{"text": "[TURN-TAKING]", "timestamp": [null, 2.4]}]')
    link_sample(root / "6", src, ["input.wav", "output.wav", "turn_taking.json"])
    (root / "6" / "output.json").write_text('{"text": "", "chunks": []}')  # silence: TOR 0, a valid score
    return root


def test_cli_bad_inputs_fail_their_rows(fdb_dir, tmp_path, capsys):
    root = make_turn_taking_root(fdb_dir, tmp_path / "tt")
    out = tmp_path / "out"
    rc = cli_main(["fdb", "score", "--task", "smooth_turn_taking", "--root", str(root), "--out", str(out), "--seed", "0"])
    assert rc == 0
    # the take-over rate rests on 2 samples: the console marks it (docs/statistics.md); latency is no rate
    printed = {ln.split()[0]: ln for ln in capsys.readouterr().out.splitlines() if ln.strip()}
    assert printed["tor"].endswith("(n=2) (few events: n = 2)") and printed["latency_s"].endswith("(n=1)")
    rows = {r["id"]: r for r in read_jsonl(out / "per_sample.jsonl")}
    assert [rows[i]["status"] for i in "123456"] == ["ok", "failed", "failed", "failed", "failed", "ok"]
    assert "missing file" in rows["2"]["error"] and "turn_taking.json" in rows["2"]["error"]
    assert "non-empty list" in rows["3"]["error"]
    assert "null start" in rows["4"]["error"]
    assert "null timestamp" in rows["5"]["error"]
    assert rows["6"]["tor"] == 0 and rows["6"]["latency_s"] is None
    s = json.loads((out / "summary.json").read_text())
    assert (s["n_samples"], s["n_scored"], s["n_failed"]) == (6, 2, 4)
    assert s["tor"] == 0.5 and s["tor_n"] == 2  # TOR 1 (sample 1) and 0 (sample 6)
    assert s["latency_s"] == pytest.approx(1.35) and s["latency_s_n"] == 1
    assert s["latency_s_ci95"] is None  # one value: no interval exists
    # TOR over {1, 0}: resampled means are 0, 0.5 or 1, so the 95 % interval is [0, 1]
    assert s["tor_ci95"] == [0.0, 1.0]


def test_cli_paired_comparison(fdb_dir, tmp_path):
    a = make_turn_taking_root(fdb_dir, tmp_path / "a")
    b = tmp_path / "b"  # system B: same samples, every reply 0.5 s later
    for d in sorted(a.iterdir()):
        (b / d.name).mkdir(parents=True)
        for f in d.iterdir():
            if f.name == "output.json":
                o = json.loads(f.read_text())
                for c in o["chunks"]:
                    c["timestamp"] = [None if t is None else t + 0.5 for t in c["timestamp"]]
                (b / d.name / f.name).write_text(json.dumps(o))
            else:
                os.symlink(f.resolve() if f.is_symlink() else f, b / d.name / f.name)
    args = ["fdb", "score", "--task", "smooth_turn_taking", "--bootstrap", "200", "--seed", "3"]
    assert cli_main(args + ["--root", str(b), "--out", str(tmp_path / "rb")]) == 0
    assert cli_main(args + ["--root", str(a), "--out", str(tmp_path / "ra"), "--compare", str(tmp_path / "rb")]) == 0
    comp = json.loads((tmp_path / "ra" / "comparison.json").read_text())
    assert comp["n_common"] == 2  # samples 1 and 6 scored in both
    lat = comp["keys"]["latency_s"]
    assert lat["n"] == 1 and lat["diff"] == pytest.approx(-0.5)  # 1.35 vs 1.85 s
    tor = comp["keys"]["tor"]
    assert tor["n"] == 2 and tor["diff"] == 0.0 and tor["diff_ci95"] == [0.0, 0.0] and tor["p_value"] == 1.0


# ------------------------------------------------------------------ statistics


def test_bootstrap_reproducible():
    x = [0.2, 1.4, 0.9, 0.0, 2.2, 0.7, None, 1.1]
    a = bootstrap_ci(x, n_resamples=500, seed=7)
    assert a == bootstrap_ci(x, n_resamples=500, seed=7)  # same seed, same interval
    assert a != bootstrap_ci(x, n_resamples=500, seed=8)
    mean = np.mean([v for v in x if v is not None])
    assert a[0] < mean < a[1]
    assert bootstrap_ci([1.0], seed=0) is None and bootstrap_ci([], seed=0) is None
    # paired: b = a + 1 exactly -> the difference is -1 in every resample
    pa = [0.1, 0.5, 0.9, 1.3]
    r = paired_comparison(pa, [v + 1 for v in pa], n_resamples=300, seed=0)
    # 4 pairs: too few for a bootstrap p-value (core.stats.SMALL_SAMPLE), the interval stays
    assert r["diff"] == pytest.approx(-1.0) and r["diff_ci95"] == pytest.approx([-1.0, -1.0]) and r["p_value"] is None
    r2 = paired_comparison([1, 2, None, 4], [1, 1, 5, 1], n_resamples=300, seed=1)
    assert r2["n"] == 3 and r2["diff"] == pytest.approx(4 / 3)
    assert r2 == paired_comparison([1, 2, None, 4], [1, 1, 5, 1], n_resamples=300, seed=1)


# ------------------------------------------------------------------ ASR fallback (injected backend)


class FakeASR:
    """An injected backend with spear_metrics.core.asr's API (load_asr's real Whisper takes ~20 s
    on CPU and its word times are its own): returns the words of the real output.json moved back
    to the cropped waveform's time line, so the crop and the shift back can be checked exactly."""

    def __init__(self, words, offset):
        self.words, self.offset, self.calls = words, offset, []

    def transcribe(self, waves, sr=16000, word_timestamps=True):
        self.calls.append((len(waves), waves[0].shape, sr, word_timestamps))
        W = lambda c: SimpleNamespace(text=c["text"], start=c["timestamp"][0] - self.offset,  # noqa: E731
                                      end=c["timestamp"][1] - self.offset)
        return [SimpleNamespace(text="fake", words=[W(c) for c in self.words], model="fake-asr")]


def test_missing_output_json_is_transcribed_cropped_and_shifted(fdb_dir, tmp_path):
    src = ex(fdb_dir, "user_interruption_example") / "1"
    link_sample(tmp_path / "1", src, ["input.wav", "output.wav", "interrupt.json"])
    words = json.loads((src / "output.json").read_text())["chunks"]
    asr = FakeASR(words, offset=13.144)
    (r,) = score_samples([FDBSample("1", "user_interruption", tmp_path / "1")], FullDuplexScorer("user_interruption", asr=asr))
    assert r.ok, r.error
    # output.wav is 28.16 s = 450560 samples; cropped at int(13.144 * 16000) = 210304 -> 240256 left
    assert asr.calls == [(1, (450560 - 210304,), 16000, True)]
    # words come back on the absolute time line: first at 17.224 s, latency 4.08 s as with output.json
    assert r.values["first_word_s"] == pytest.approx(17.224) and r.values["latency_s"] == pytest.approx(4.08)
    assert r.values["asr_source"] == "fake-asr" and r.values["tor"] == 1


# ------------------------------------------------------------------ relevance through a real judge client


def test_relevance_with_loopback_judge(fdb_dir, tmp_path):
    from spear_metrics.core.judge import Judge

    root = ex(fdb_dir, "user_interruption_example")
    replies = [(200, "Analysis: fine.\nI would rate the AI's response as 4."),  # upstream's free-text form: rejected
               (200, '```json\n{"analysis": "answers the fiction request", "rating": 4}\n```')]
    with FakeChatServer(replies) as srv:
        j = Judge(srv.url, "judge-x", backoff_s=0.0, timeout=5.0)
        (r,) = score_samples(list_samples(root, "user_interruption"), FullDuplexScorer("user_interruption", judge=j))
        j.close()
    assert r.ok and r.values["relevance"] == 4 and r.values["relevance_error"] is None
    assert len(srv.requests) == 2
    user_msg = srv.requests[0]["messages"][1]["content"]
    # the judge sees the context turn, the interrupting turn and the reply text from the real files
    assert "personal development" in user_msg and "fiction books" in user_msg and "Mockingbird" in user_msg

    with FakeChatServer([(200, '{"analysis": "x", "rating": 9}')]) as srv:  # out of scale: no rating, a reason
        j = Judge(srv.url, "judge-x", backoff_s=0.0, timeout=5.0, max_retries=0)
        (r,) = score_samples(list_samples(root, "user_interruption"), FullDuplexScorer("user_interruption", judge=j))
    assert r.ok and r.values["relevance"] is None and "0 to 5" in r.values["relevance_error"]


# ------------------------------------------------------------------ impossible times, missing files, CLI edges


def _tt_sample(root: Path, sid: str, src: Path, *, words=None, turn=None, files=("input.wav", "output.wav")) -> Path:
    """A turn-taking sample folder: symlinked audio; output.json / turn_taking.json from the real
    example, each optionally rewritten (``words``: chunks -> chunks, ``turn``: the timestamp pair)."""
    d = link_sample(root / sid, src, files)
    o = json.loads((src / "output.json").read_text())
    if words is not None:
        o["chunks"] = words(o["chunks"])
    (d / "output.json").write_text(json.dumps(o))  # json.dumps writes NaN / Infinity as Python's json reads them
    t = json.loads((src / "turn_taking.json").read_text())
    if turn is not None:
        t[0]["timestamp"] = turn
    (d / "turn_taking.json").write_text(json.dumps(t))
    return d


def _set(chunks, i, pos, value):
    chunks[i]["timestamp"][pos] = value
    return chunks


def _shift(chunks, dt):
    for c in chunks:
        c["timestamp"] = [t + dt for t in c["timestamp"]]
    return chunks


def test_impossible_times_fail_their_rows(fdb_dir, tmp_path):
    # smooth_turn_taking_example/1: output.wav and input.wav are both 166400 samples = 10.4 s;
    # words 3.36..10.38 s; turn_taking.json [2.01, 2.40]. Tolerance past the end: 0.5 s -> 10.9 s.
    src = ex(fdb_dir, "smooth_turn_taking_example") / "1"
    root = tmp_path / "tt"
    nan, inf = float("nan"), float("inf")
    cases = {
        "1": {},                                                     # untouched: latency 1.35 s
        "2": {"words": lambda c: _set(c, 0, 0, nan)},                # first word [NaN, 3.9]
        "3": {"turn": [nan, 3.0]},                                   # reference NaN
        "4": {"words": lambda c: _shift(c, 1e6)},                    # words 1e6 s past a 10.4 s wav
        "5": {"turn": [1e308, 1e308]},                               # reference far past input.wav
        "6": {"turn": [1e308, 2.4]},                                 # ... and ending before it starts
        "7": {"words": lambda c: _shift(c, -53.0)},                  # negative word times
        "8": {"words": lambda c: _set(c, -1, 1, inf)},               # last word end inf
        "9": {"words": lambda c: _set(c, 0, 1, 3.0)},                # first word [3.36, 3.0]
        "10": {"words": lambda c: _set(c, -1, 1, 10.85)},            # 0.45 s past the end: within tolerance
        "11": {"words": lambda c: _set(c, -1, 1, 10.95)},            # 0.55 s past the end: impossible
        "12": {"turn": [-1.0, 2.4]},                                 # negative reference
        "13": {"words": lambda c: _set(c, -1, 1, None)},             # null last end: its start, as before
    }
    for sid, kw in cases.items():
        _tt_sample(root, sid, src, **kw)
    res = {r.values["id"]: r for r in score_samples(list_samples(root, "smooth_turn_taking"),
                                                     FullDuplexScorer("smooth_turn_taking"))}
    assert res["1"].ok and res["1"].values["latency_s"] == pytest.approx(1.35)
    assert res["10"].ok and res["10"].values["latency_s"] == pytest.approx(1.35)
    # null last end: start of " assist." (10.02) is used -> span 6.66 s -> TOR 1, latency unchanged
    assert res["13"].ok and res["13"].values["tor"] == 1 and res["13"].values["latency_s"] == pytest.approx(1.35)
    reasons = {
        "2": ("output.json", "chunk 0 start", "not a finite time"),
        "3": ("turn_taking.json", "timestamp start", "not a finite time"),
        "4": ("output.json: word 0 start", "past the end of the audio (10.400 s)"),
        "5": ("turn_taking.json: timestamp start", "past the end of the audio (10.400 s)"),
        "6": ("turn_taking.json", "ends before it starts"),
        "7": ("output.json", "chunk 0 start", "negative time"),
        "8": ("output.json", "chunk 21 end", "not a finite time"),
        "9": ("output.json", "chunk 0 ends before it starts"),
        "11": ("output.json: word 21 end = 10.95 s", "past the end of the audio"),
        "12": ("turn_taking.json", "negative time"),
    }
    for sid, parts in reasons.items():
        r = res[sid]
        assert not r.ok, (sid, r.values)
        assert "\n" not in r.error and all(p in r.error for p in parts), (sid, r.error)
        assert "latency_s" not in r.values and "tor" not in r.values  # nothing made up for a failed row


def test_impossible_interrupt_end_and_asr_times_fail(fdb_dir, tmp_path):
    # user_interruption_example/1: input.wav and output.wav 450560 samples = 28.16 s.
    src = ex(fdb_dir, "user_interruption_example") / "1"
    d = link_sample(tmp_path / "ui" / "1", src, ["input.wav", "output.wav", "output.json"])
    it = json.loads((src / "interrupt.json").read_text())
    it[0]["timestamp"][1] = 1e9  # the interrupting turn "ends" 1e9 s into a 28.16 s input.wav
    (d / "interrupt.json").write_text(json.dumps(it))
    (r,) = score_samples(list_samples(tmp_path / "ui", "user_interruption"), FullDuplexScorer("user_interruption"))
    assert not r.ok and "interrupt.json: timestamp end = 1000000000.0 s is past the end of the audio (28.160 s)" in r.error

    # the ASR path is checked as well: a backend whose words land 1e6 s late fails the sample
    d2 = link_sample(tmp_path / "asr" / "1", src, ["input.wav", "output.wav", "interrupt.json"])
    words = json.loads((src / "output.json").read_text())["chunks"]
    asr = FakeASR(words, offset=13.144 - 1e6)
    (r2,) = score_samples([FDBSample("1", "user_interruption", d2)], FullDuplexScorer("user_interruption", asr=asr))
    assert len(asr.calls) == 1 and not r2.ok
    assert "fake-asr: word 0 start" in r2.error and "past the end of the audio (28.160 s)" in r2.error


def test_missing_wavs_fail_pause_json_optional(fdb_dir, tmp_path):
    tt = ex(fdb_dir, "smooth_turn_taking_example") / "1"
    link_sample(tmp_path / "tt" / "1", tt, ["input.wav", "output.json", "turn_taking.json"])  # no output.wav
    link_sample(tmp_path / "tt" / "2", tt, ["output.wav", "output.json", "turn_taking.json"])  # no input.wav
    res = score_samples(list_samples(tmp_path / "tt", "smooth_turn_taking"), FullDuplexScorer("smooth_turn_taking"))
    assert [r.ok for r in res] == [False, False]
    assert res[0].error.startswith("output.wav missing: ") and res[1].error.startswith("input.wav missing: ")

    ph = ex(fdb_dir, "pause_handling_example") / "1"
    link_sample(tmp_path / "ph" / "1", ph, ["output.json", "pause.json"])  # output.json alone is not a sample
    link_sample(tmp_path / "ph" / "2", ph, ["input.wav", "output.wav", "output.json"])  # pause.json is never read
    link_sample(tmp_path / "ph" / "3", ph, ["input.wav", "output.json", "pause.json"])
    res = score_samples(list_samples(tmp_path / "ph", "pause_handling"), FullDuplexScorer("pause_handling"))
    assert not res[0].ok and "missing" in res[0].error and ".wav" in res[0].error
    assert res[1].ok and res[1].values["tor"] == 1  # 12 words over 0.0..4.68 s, as in the full example
    assert not res[2].ok and res[2].error.startswith("output.wav missing: ")


def test_reference_with_empty_entry_fails_only_that_id(fdb_dir, tmp_path, capsys):
    gt = json.loads((fdb_dir / "icc_gt_distribution.json").read_text())
    src = ex(fdb_dir, "smooth_turn_taking_example") / "1"
    root = tmp_path / "bc"
    for sid in ("0", "1", "7"):
        link_sample(root / sid, src, ["output.wav", "output.json"])
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"0": [], "1": gt["1"], "7": ["a", 1]}))
    out = tmp_path / "out"
    rc = cli_main(["fdb", "score", "--task", "backchannel", "--root", str(root), "--out", str(out), "--reference", str(ref),
                   "--bootstrap", "0", "--no-progress"])
    assert rc == 0
    rows = {r["id"]: r for r in read_jsonl(out / "per_sample.jsonl")}
    assert rows["0"]["status"] == "failed" and "not a non-empty list of numbers" in rows["0"]["error"]
    assert rows["7"]["status"] == "failed" and "not a non-empty list of numbers" in rows["7"]["error"]
    assert rows["1"]["status"] == "ok" and rows["1"]["jsd"] == pytest.approx(0.5113, abs=5e-5)  # as upstream
    # a reference that is not an object at all is an unusable run: exit 2, one line
    ref.write_text("[1, 2]")
    capsys.readouterr()
    assert cli_main(["fdb", "score", "--task", "backchannel", "--root", str(root), "--out", str(out), "--reference", str(ref)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--reference" in err and "Traceback" not in err


def test_cli_out_is_a_file_and_progress_flag(fdb_dir, tmp_path, capsys):
    root = make_turn_taking_root(fdb_dir, tmp_path / "tt")
    not_a_dir = tmp_path / "results.txt"
    not_a_dir.write_text("keep me")
    args = ["fdb", "score", "--task", "smooth_turn_taking", "--root", str(root), "--bootstrap", "0"]
    capsys.readouterr()
    assert cli_main(args + ["--out", str(not_a_dir)]) == 2
    err = capsys.readouterr().err
    assert err == f"spearbench fdb score: --out {not_a_dir} exists and is not a folder\n"
    assert not_a_dir.read_text() == "keep me"
    assert cli_main(args + ["--out", str(not_a_dir / "sub")]) == 2  # a file in the way of the parent
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "cannot create the folder" in err

    # progress: a tqdm bar over the 6 samples on stderr by default, none with --no-progress
    assert cli_main(args + ["--out", str(tmp_path / "o1")]) == 0
    err = capsys.readouterr().err
    assert "fdb smooth_turn_taking" in err and "6/6" in err
    assert cli_main(args + ["--out", str(tmp_path / "o2"), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "fdb smooth_turn_taking" not in err and "6/6" not in err
    assert err.count("failed") == 4  # the bad rows are still named, one line each
    assert (tmp_path / "o2" / "per_sample.jsonl").read_text() == (tmp_path / "o1" / "per_sample.jsonl").read_text()
