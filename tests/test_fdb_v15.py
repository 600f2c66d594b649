"""Full-Duplex-Bench v1.5 (spear_metrics.full_duplex_v15): timing on real recordings with latencies
known by construction (tests/_fdb_v15_samples.py), the behaviour judge through a loopback fake,
hand-computed tag distributions, features and significance tests, the CLI, and inference of both
halves through the loopback Realtime fake, resumable after kill -9."""

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

import _fdb_v15_samples as S
from helpers import FakeChatServer
from spear_datasets.sources.fdb import Chunk
from spear_metrics.full_duplex_v15 import behaviour as bh
from spear_metrics.full_duplex_v15 import features as ft
from spear_metrics.full_duplex_v15 import significance as sg
from spear_metrics.full_duplex_v15 import timing as tm

#: one Silero frame (512 samples at 16 kHz), plus the 3-decimal rounding of both bounds
VAD_FRAME_S = 512 / 16000 + 0.002


@pytest.fixture(scope="module")
def v15_root(tmp_path_factory):
    """Three v1.5 samples in two subsets, with latencies known by construction."""
    root = tmp_path_factory.mktemp("v15") / "v1_5"
    c = S.clips()
    built = {
        "user_interruption/1": S.build_sample(root / "user_interruption" / "1", c, stop_after_s=0.8, resp_after_s=0.7),
        "user_interruption/2": S.build_sample(root / "user_interruption" / "2", c, stop_after_s=0.5, resp_after_s=1.1),
        "user_backchannel/1": S.build_sample(root / "user_backchannel" / "1", c, overlap="backchannel",
                                             stop_after_s=None, resp_after_s=0.9),
    }
    return root, built


# ----------------------------------------------------------------------------- timing


def test_upstream_timing_lists_on_hand_cases():
    assert tm.merge_segments([(1.5, 2.0), (0.0, 1.0)], 0.5) == [(0.0, 2.0)]  # gap 0.5 <= 0.5: merged (sorted first)
    assert tm.merge_segments([(0.0, 1.0), (1.625, 2.0)], 0.6) == [(0.0, 1.0), (1.625, 2.0)]
    user, model = [(1.0, 3.0), (5.0, 6.0)], [(2.0, 4.0), (5.5, 7.0)]
    assert tm.stop_intervals(user, model) == [[2.0, 3.0], [5.5, 6.0]]
    # a user end with no later model start has no response; the next start after 3.0 is 5.5
    assert tm.response_intervals(user, model) == [[3.0, 5.5]]
    # two user ends before the same model start: the later one is kept (the shorter gap)
    assert tm.response_intervals([(1.0, 2.0), (3.0, 4.0)], [(5.0, 6.0)]) == [[4.0, 5.0]]
    # project keys read at the overlap window (t0, t1) = (5.0, 6.0)
    assert tm.overlap_latencies([[2.0, 3.0], [5.5, 6.0]], [[3.0, 5.5], [6.0, 6.8]], (5.0, 6.0)) == \
        {"stop_latency_s": 0.5, "response_latency_s": 0.8}
    assert tm.overlap_latencies([], [], (5.0, 6.0)) == {"stop_latency_s": None, "response_latency_s": None}


@pytest.mark.slow
def test_stop_and_response_latency_equal_the_constructed_ones_within_a_vad_frame(v15_root):
    from spear_metrics.full_duplex_v15.data import read_metadata

    _, built = v15_root
    for key, b in built.items():
        m = read_metadata(b.dir / "metadata.json")
        r = tm.sample_timing(b.dir / "input.wav", b.dir / "output.wav", (m.overlap_start_s, m.overlap_end_s))
        assert abs(r["stop_latency_s"] - b.stop_s) <= VAD_FRAME_S, (key, r, b)
        assert abs(r["response_latency_s"] - b.resp_s) <= VAD_FRAME_S, (key, r, b)
        assert len(r["user_segments"]) == 2 and len(r["model_segments"]) == 2  # context + overlap; two replies


# ----------------------------------------------------------------------------- behaviour judge


def _transcripts():
    w = {"text": "hi there", "chunks": [{"text": "hi", "timestamp": [0.1, 0.3]}, {"text": "there", "timestamp": [0.4, 0.7]}]}
    return w, w, {"text": "", "chunks": []}, w


def test_judge_messages_are_upstreams_prompt_and_template():
    msgs = bh.messages(*_transcripts())
    assert msgs[0]["role"] == "system" and msgs[0]["content"].startswith("Goal\n------------\nAfter a overlap begins")
    user = msgs[1]["content"]
    compact = '{"text":"hi there","chunks":[{"text":"hi","timestamp":[0.1,0.3]},{"text":"there","timestamp":[0.4,0.7]}]}'
    assert user == ("\n        {\n            \"input_clean\": " + compact + ",\n            \"input_noisy\": " + compact +
                    ",\n            \"output_clean\": {\"text\":\"\",\"chunks\":[]},\n            \"output_noisy\": " +
                    compact + "\n        }\n        ")


def test_reply_parsing_follows_upstreams_extract_json():
    assert bh.parse_behaviour('{ "behaviour": ["C_RESUME"] }') == ["C_RESUME"]
    # prose around it, a first object without the key, a broken brace before it
    assert bh.parse_behaviour('Reasoning {"note": 1} then { oops {"behaviour": ["C_UNKNOWN"]}') == ["C_UNKNOWN"]
    for bad in ("no json here", '{"behavior": ["C_RESPOND"]}', '{"behaviour": "C_RESPOND"}', '{"behaviour": ["X_1"]}'):
        with pytest.raises(ValueError):
            bh.parse_behaviour(bad)
    # an object past the decoder's limits (5000 digits: a plain ValueError; deep nesting: RecursionError) is
    # skipped like one that is not JSON: the later object is read, and without one the reply is refused (retried)
    for odd in ('{"n": ' + "1" * 5000 + "}", '{"a": ' + "[" * 100_000):
        assert bh.parse_behaviour(odd + ' {"behaviour": ["C_RESUME"]}') == ["C_RESUME"]
        with pytest.raises(ValueError, match="No JSON object"):
            bh.parse_behaviour(odd)


def _judge(url, **kw):
    """The behaviour judge as the command builds it (the shared judge client and its reply cache,
    which the test suite keeps in a temporary folder)."""
    from spear_metrics.core.judge import JudgeConfig, make_judge

    base = make_judge(JudgeConfig(url=url, model="gpt-4o-2024-08-06", key_env="none", temperature=None, retries=0,
                                  timeout_s=kw.pop("timeout", 30.0), cache=kw.pop("cache", "readwrite")))
    return bh.BehaviourJudge(base, retry_sleep_s=0.0, **kw)


@pytest.mark.parametrize("tag", bh.TAGS)
def test_each_tag_through_the_loopback_judge(tag):
    with FakeChatServer([(200, '{ "behaviour": ["%s"] }' % tag)]) as srv:
        v = _judge(srv.url).ask(bh.messages(*_transcripts()))
    assert v.tags == [tag] and v.seed == 1 and len(srv.requests) == 1
    req = srv.requests[0]
    assert req["seed"] == 1 and "temperature" not in req and req["model"] == "gpt-4o-2024-08-06"
    assert req["messages"][0]["content"] == bh.instruction()


def test_garbage_reply_is_retried_with_the_next_seed_and_only_the_usable_reply_is_cached():
    replies = [(200, "I would say they respond."), (200, 'Sure. {"behaviour": ["C_RESPOND"]}')]
    msgs = bh.messages(*_transcripts())
    with FakeChatServer(replies) as srv:
        first = _judge(srv.url)
        v = first.ask(msgs)
        assert v.tags == ["C_RESPOND"] and v.seed == 2
        assert [r["seed"] for r in srv.requests] == [1, 2]
        assert v.attempts[0]["error"].startswith("malformed reply") and v.attempts[0]["reply"] == replies[0][1]
        # what summary.json's judge_calls says: one sample (call), answered once, by two requests
        rep = first.judge.report()
        assert (rep["calls"], rep["answers"], rep["requests"], rep["answers_from_cache"]) == (1, 1, 2, 0)
        assert rep["cache"]["writes"] == 1  # the reply that parsed; the garbage one was not stored
        second = _judge(srv.url)
        # a rerun: seed 1 is asked again (its garbage reply was not stored); the server now answers it
        again = second.ask(msgs)
        assert again.tags == ["C_RESPOND"] and again.seed == 1 and [r["seed"] for r in srv.requests] == [1, 2, 1]
        assert [a["cached"] for a in again.attempts] == [False]
        rep = second.judge.report()
        assert (rep["calls"], rep["answers"], rep["requests"], rep["answers_from_cache"]) == (1, 1, 1, 0)
        third = _judge(srv.url)  # and seed 1's usable reply now answers from the cache
        assert third.ask(msgs).attempts == [{"seed": 1, "reply": replies[1][1], "error": None, "cached": True}]
        assert len(srv.requests) == 3


def test_a_refused_judge_reply_is_never_cached():
    """An HTTP error, a reply that does not parse and a content refusal (through the loopback judge
    of tests/judge_fakes.py, replies built from the openai SDK's types): none enters the reply
    cache, so the same sample asked again asks the service again; the reply that parses is stored
    and answers every later ask without a request."""
    from judge_fakes import CountingJudge, completion

    from spear_metrics.core.judge_cache import JudgeCache

    answers = iter([(500, b'{"error": {"message": "overloaded"}}'),                       # HTTP error (retryable)
                    (200, completion("The behaviour is C_RESPOND, I think.")),            # does not parse
                    (200, completion("I'm sorry, but I can't help with that request.")),  # a content refusal
                    (401, b'{"error": {"message": "bad key"}}')])                          # fatal HTTP error
    msgs = bh.messages(*_transcripts())
    with CountingJudge(lambda body: next(answers, (200, completion('{"behaviour": ["C_RESUME"]}')))) as srv:
        url = srv.url
        v = _judge(url, max_attempts=3).ask(msgs)  # seeds 1, 2, 3: HTTP 500, garbage, refusal
        assert v.tags is None and srv.calls == 3
        assert "HTTP 500" in v.attempts[0]["error"] and v.attempts[1]["error"].startswith("malformed reply")
        assert v.attempts[2]["reply"].startswith("I'm sorry")
        cache = JudgeCache("read")
        assert not any(cache.folder.rglob("*.json"))  # nothing stored
        v = _judge(url, max_attempts=3).ask(msgs)  # asked again: the 401 stops it at once, nothing stored
        assert v.tags is None and srv.calls == 4 and "HTTP 401" in v.error and not any(cache.folder.rglob("*.json"))
        v = _judge(url, max_attempts=3).ask(msgs)  # the service answers: stored
        assert v.tags == ["C_RESUME"] and v.seed == 1 and srv.calls == 5 and len(list(cache.folder.rglob("*.json"))) == 1
        v = _judge(url, max_attempts=3).ask(msgs)  # and answered from the cache from now on
        assert v.tags == ["C_RESUME"] and v.attempts[0]["cached"] and srv.calls == 5


def test_garbage_forever_and_a_hang_are_bounded():
    with FakeChatServer([(200, "no tag, ever")]) as srv:
        v = _judge(srv.url, max_attempts=3).ask(bh.messages(*_transcripts()))
    assert v.tags is None and len(srv.requests) == 3 and "after 3 request(s)" in v.error
    with FakeChatServer([(200, '{"behaviour": ["C_RESUME"]}', {"delay_s": 2.0})]) as srv:
        t0 = time.monotonic()
        v = _judge(srv.url, max_attempts=2, timeout=0.3, cache="off").ask(bh.messages(*_transcripts()))
        assert time.monotonic() - t0 < 30  # generous: two timed-out requests, never the server's pace
    assert v.tags is None and "time limit" in v.error and len(v.attempts) == 2
    with FakeChatServer([(401, "bad key")]) as srv:  # a retry cannot help: one request
        v = _judge(srv.url, max_attempts=5, cache="off").ask(bh.messages(*_transcripts()))
    assert v.tags is None and len(srv.requests) == 1 and "HTTP 401" in v.error


def test_tag_distribution_hand_computed():
    tags = [["C_RESPOND"], ["C_RESUME"], ["C_RESPOND"], ["C_UNKNOWN"]]
    assert bh.upstream_ratios(tags) == {"C_RESPOND": 0.5, "C_RESUME": 0.25, "C_UNKNOWN": 0.25}
    assert bh.upstream_ratios([["C_RESPOND"], ["C_RESPOND"], ["C_UNKNOWN"]]) == {"C_RESPOND": 0.67, "C_UNKNOWN": 0.33}
    from spear_metrics.full_duplex_v15.scoring import aggregate

    agg = aggregate([{"behaviour": t} for t in tags] + [{"behaviour": None}], n_resamples=200)
    assert agg["C_RESPOND"] == 0.5 and agg["C_RESUME"] == 0.25 and agg["C_UNCERTAIN_HANDLING"] == 0.0
    assert agg["C_RESPOND_n"] == 4 and agg["n_judged"] == 4
    lo, hi = agg["C_RESPOND_ci95"]
    assert 0.0 <= lo <= 0.5 <= hi <= 1.0
    same = aggregate([{"behaviour": ["C_RESUME"]}] * 3, n_resamples=200)
    assert same["C_RESUME"] == 1.0 and same["C_RESUME_ci95"] == [1.0, 1.0]  # every resample: all C_RESUME


# ----------------------------------------------------------------------------- features


def test_split_partition_and_wpm_hand_computed():
    ch = [Chunk("a", 0.0, 0.5), Chunk("b", 0.6, 1.0), Chunk("c", 1.2, 1.5)]
    assert ft.split_time(0.8, ch) == 0.6     # inside word b: its start
    assert ft.split_time(1.1, ch) == 1.2     # between words: the next start
    assert ft.split_time(2.0, ch) == 1.5     # after every word: the last end
    assert ft.split_time(2.0, []) == 2.0
    pre, post = ft.partition(ch, 0.6)
    assert pre == [ch[0]] and post == ch[1:]
    assert ft.words_per_minute(ch) == 3 / (1.5 / 60) == 120.0
    assert ft.words_per_minute([Chunk("a", 1.0, 1.0)]) == 0.0


def test_trimmed_mean_hand_computed():
    # 1..20: P5 = 1.95, P95 = 19.05 (linear) -> 2..19 kept, mean 10.5
    assert ft.trimmed_mean(list(range(1, 21))) == 10.5
    assert ft.trimmed_mean([1.0, 2.0]) == 1.5            # fewer than 3: nothing trimmed
    assert ft.trimmed_mean([None, float("nan")]) is None


def test_sudden_cutoff_at_an_abrupt_stop_of_real_speech():
    c = S.clips()
    x = c.reply1.copy()
    hop = 480
    frames = len(x) // hop
    loud = int(np.argmax([np.sqrt(np.mean(x[i * hop:(i + 1) * hop] ** 2)) for i in range(frames)]))
    cut = (loud + 1) * hop                               # the speech stops dead after its loudest frame
    x[cut:] = 0.0
    assert round((loud + 1) * 0.03, 6) in [round(t, 6) for t in ft.sudden_cutoffs(x)]


def test_segment_features_on_real_speech():
    c = S.clips()
    f = ft.segment_features(c.reply1, [Chunk("a", 1.4, 1.8), Chunk("b", 2.0, 4.2)])
    assert f["utmosv2"] is None and f["wpm"] == pytest.approx(2 / (2.8 / 60))
    assert 70 < f["mean_pitch"] < 250 and f["std_pitch"] > 0  # a male voice
    assert f["mean_intensity"] > 30 and f["std_intensity"] > 0
    assert ft.segment_features(c.reply1[:0], []) == {}


# ----------------------------------------------------------------------------- significance


def test_paired_t_test_with_mad_trimming_hand_computed():
    # d = [1, 2, 2, 5]: median 2, MAD 0.5, kept within 2 +- 3.5 * 1.4826 * 0.5 -> 5 dropped
    r = sg.paired_compare([1, 2, 3, 4], [2, 4, 5, 9])
    assert r["n_valid"] == 4 and r["n_used"] == 3 and r["n_dropped"] == 1
    assert r["mean_diff"] == pytest.approx(5 / 3)
    assert r["t"] == pytest.approx(5.0)                  # (5/3) / (sqrt(1/3) / sqrt(3))
    assert r["df"] == 2
    # t(2) two-sided: p = 1 - t / sqrt(t^2 + 2)
    assert r["p_t"] == pytest.approx(1 - 5 / math.sqrt(27))
    assert r["cohen_dz"] == pytest.approx((5 / 3) / math.sqrt(1 / 3))
    with pytest.raises(sg.SkippedTest):
        sg.paired_compare([1, float("nan")], [2, 3])


def test_holm_hand_computed():
    assert sg.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert sg.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    # a NaN p-value (all-zero differences) stays NaN and counts in m, as statsmodels' multipletests
    # (upstream's call) sorts it last: m = 3, 3 * 0.01 = 0.03, max(0.03, 2 * 0.04) = 0.08
    adj = sg.holm([0.01, float("nan"), 0.04])
    assert adj[0] == pytest.approx(0.03) and adj[2] == pytest.approx(0.08) and np.isnan(adj[1])


def test_significance_keeps_c_respond_samples_and_masks_sentinels():
    def s(i, tag, pre, post, clean, pitch=(120.0, 130.0, 125.0)):
        return {"id": str(i), "behaviour": [tag],
                "general": {"pre": {"wpm": pre, "mean_pitch": pitch[0]}, "post": {"wpm": post, "mean_pitch": pitch[1]},
                            "clean": {"wpm": clean, "mean_pitch": pitch[2]}}}

    rows = [s(1, "C_RESPOND", 100, 110, 105), s(2, "C_RESPOND", 120, 150, 118), s(3, "C_RESPOND", 90, 95, 100),
            s(4, "C_RESUME", 100, 300, 100),            # not C_RESPOND: out
            s(5, "C_RESPOND", 0, 120, 100),             # a zero wpm: out (upstream's wpm filter)
            s(6, "C_RESPOND", 100, 104, 99, pitch=(0.0, 130.0, 125.0))]  # pitch 0 -> NaN for pitch only
    res = sg.run_tests(rows, ("wpm", "mean_pitch"))
    assert res["samples"] == ["1", "2", "3", "6"]
    t = {(x["pair"], x["metric"]): x for x in res["tests"]}
    assert t[("pre_vs_post", "wpm")]["n_valid"] == 4 and t[("pre_vs_post", "mean_pitch")]["n_valid"] == 3
    ps = [x["p_t"] for x in res["tests"]]
    assert [x["p_adj"] for x in res["tests"]] == pytest.approx(sg.holm(ps))


# ----------------------------------------------------------------------------- the command


@pytest.mark.slow
def test_score_command_on_v15_samples(v15_root, tmp_path, capsys):
    from spear_metrics.cli import main

    root, built = v15_root
    out = tmp_path / "res"
    # rows in order: user_backchannel/1 (a garbage reply first, then seed 2), user_interruption/1, /2
    replies = [(200, "hmm"), (200, '{"behaviour": ["C_RESUME"]}'), (200, '{"behaviour": ["C_RESPOND"]}'),
               (200, '{"behaviour": ["C_RESPOND"]}')]
    with FakeChatServer(replies) as srv:
        cmd = ["fdb", "score", "--root", str(root), "--out", str(out), "--no-progress", "--bootstrap", "200", "--mos", "none",
               "--judge-url", srv.url, "--judge-model", "gpt-4o-2024-08-06",
               "--judge-concurrency", "1"]  # one call at a time: the replies above go to the rows in order
        assert main(cmd) == 0
        table = capsys.readouterr().out
        assert len(srv.requests) == 4 and [r["seed"] for r in srv.requests] == [1, 2, 1, 1]
        assert main(cmd) == 0  # a rerun: everything resumed, the judge not asked again
        assert len(srv.requests) == 4
    print(table)
    assert "C_RESPOND" in table and "user_interruption" in table and "stop_latency_s" in table
    # a tag share from 2 samples is marked as resting on few events (docs/statistics.md); a latency is no rate
    line = {ln.split()[0]: ln for ln in table.splitlines() if ln.strip()}
    assert "(few events: n = 2)" in line["C_RESPOND"] and "few events" not in line["stop_latency_s"]
    # the judge's calls are said at the end, as every judged command says them: 4 requests (one retried)
    assert line["judge"].startswith("judge gpt-4o-2024-08-06: ") and "4 request(s) sent" in line["judge"]
    # it ends with the next command, the run's report, which runs as printed
    from spear_metrics.commands import runnable

    report = f"{runnable('spearbench')} report {out} --out {out / 'report'}"
    assert table.rstrip().endswith(f"\n  {report}")
    assert main(report.split()[1:]) == 0 and (out / "report" / "index.html").is_file()
    overall = json.loads((out / "summary.json").read_text())
    ui = json.loads((out / "user_interruption" / "summary.json").read_text())
    bc = json.loads((out / "user_backchannel" / "summary.json").read_text())
    assert ui["C_RESPOND"] == 1.0 and bc["C_RESUME"] == 1.0 and overall["C_RESPOND"] == pytest.approx(2 / 3)
    assert overall["behaviour_ratios_upstream"] == {"C_RESPOND": 0.67, "C_RESUME": 0.33}
    assert ui["pre_utmosv2"] is None and ui["pre_utmosv2_note"].startswith("unsupported:")
    assert ui["stop_latency_s_n"] == 2
    exp = np.mean([built["user_interruption/1"].stop_s, built["user_interruption/2"].stop_s])
    assert abs(ui["stop_latency_s"] - exp) <= VAD_FRAME_S
    rows = [json.loads(x) for x in (out / "per_sample.jsonl").read_text().splitlines()]
    assert all(r["status"] == "ok" for r in rows) and rows[0]["judge_seed"] == 2
    assert rows[0]["asr_source"] == {n: f"{n}.json" for n in ("input", "clean_input", "output", "clean_output")}
    assert {t["metric"] for t in ui["significance"]["tests"]} <= set(sg.UPSTREAM_METRICS)
    assert any(s["metric"] == "utmosv2" for s in ui["significance"]["skipped"])


@pytest.mark.slow
def test_judge_concurrency_asks_the_behaviour_judge_in_parallel(v15_root, tmp_path):
    """--judge-concurrency 3: the three judged samples' questions are in flight at once (the
    loopback judge answers only once all three have arrived)."""
    import threading

    from spear_metrics.cli import main

    root, _ = v15_root
    out = tmp_path / "res"
    all_three = threading.Barrier(3, timeout=120)  # generous: reached at once when the three are asked together

    def answer(body):
        all_three.wait()
        return 200, '{"behaviour": ["C_RESPOND"]}'

    with FakeChatServer(answer) as srv:
        assert main(["fdb", "score", "--root", str(root), "--out", str(out), "--no-progress", "--bootstrap", "0",
                     "--mos", "none", "--judge-url", srv.url, "--judge-model", "gpt-4o-2024-08-06",
                     "--judge-concurrency", "3"]) == 0
        assert len(srv.requests) == 3
    rows = [json.loads(x) for x in (out / "per_sample.jsonl").read_text().splitlines()]
    assert [r["behaviour"] for r in rows] == [["C_RESPOND"]] * 3


def test_score_command_refuses_what_it_cannot_run(tmp_path, capsys):
    from spear_metrics.cli import main

    (tmp_path / "empty").mkdir()
    assert main(["fdb", "score", "--version", "1.5", "--root", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    assert "no FDB v1.5 sample folders" in capsys.readouterr().err
    # options of the other version are refused, not silently ignored
    assert main(["fdb", "score", "--version", "1.5", "--root", str(tmp_path / "empty"), "--out", str(tmp_path / "o"),
                 "--compat", "upstream"]) == 2
    assert "--compat are v1.0 options" in capsys.readouterr().err
    assert main(["fdb", "score", "--task", "pause_handling", "--root", str(tmp_path / "empty"), "--out",
                 str(tmp_path / "o"), "--mos", "distillmos"]) == 2
    assert "--mos is a v1.5 option" in capsys.readouterr().err
    # --judge-concurrency acts on v1.5 (the behaviour judge's calls overlap): tests/test_judge_cache.py


def test_infer_version_is_checked_against_the_folder(tmp_path, capsys):
    """``fdb infer --version 1.5`` on a v1.0 task folder (no clean_input.wav/metadata.json) is
    refused in one line before any session; it is not silently ignored."""
    from spear_metrics.cli import main

    (tmp_path / "v10" / "0").mkdir(parents=True)
    (tmp_path / "v10" / "0" / "input.wav").write_bytes(b"")
    assert main(["fdb", "infer", "--version", "1.5", "--agent", "openai-realtime", "--root", str(tmp_path / "v10")]) == 2
    err = capsys.readouterr().err
    assert "--version 1.5" in err and "no v1.5 samples" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_sample_without_a_reply_fails_alone(v15_root, tmp_path):
    import shutil

    from spear_metrics.full_duplex_v15.scoring import V15Scorer, V15Setup, score_v15

    root, _ = v15_root
    sub = tmp_path / "user_interruption"
    shutil.copytree(root / "user_interruption" / "1", sub / "1")
    shutil.copytree(root / "user_interruption" / "1", sub / "2")
    (sub / "2" / "output.wav").unlink()
    overall, per, results = score_v15(sub, tmp_path / "o", V15Setup(scorer=V15Scorer(mos_name=None), n_resamples=0,
                                                                    progress=False))
    assert [r.ok for r in results] == [True, False] and "output.wav missing" in results[1].error
    assert overall["n_scored"] == 1 and overall["behaviour_note"].startswith("no judge")


# ----------------------------------------------------------------------------- inference


KEY = "sk-test-FAKEKEY-fdb15-0123456789"


@pytest.mark.slow
def test_infer_writes_both_halves_and_resumes_after_kill_9(tmp_path, real_dir):
    """Two short v1.5 samples through openai-realtime against the loopback Realtime fake, in a
    subprocess killed with SIGKILL once a first half is logged; the rerun redoes only what was not
    logged, and every sample ends with output.wav and clean_output.wav as long as their inputs."""
    from openai_fakes import Program, RealtimeFake
    from spear_datasets.audio import decode, load_audio, write_wav
    from spear_metrics.full_duplex.infer import run_fdb_inference

    c = S.clips()
    sub = tmp_path / "user_interruption"
    for sid in ("1", "2"):
        d = sub / sid
        d.mkdir(parents=True)
        ctx = c.context[: int(1.6 * S.SR)]
        write_wav(d / "input.wav", np.concatenate([ctx, c.backchannel[: int(0.4 * S.SR)]]), S.SR)
        write_wav(d / "clean_input.wav", np.concatenate([ctx, np.zeros(int(0.4 * S.SR), np.float32)]), S.SR)
        (d / "metadata.json").write_text(json.dumps({"context_text": "", "current_turn_text": "", "timestamps": [1.6, 2.0]}))
    progs = {f"user_interruption_{sid}{h}": Program("reply", at_s=0.8, speech_end_s=0.6)
             for sid in ("1", "2") for h in ("", "_clean_")}
    answer = load_audio(real_dir / "speechbrain__p225_002.wav", sr=24_000, channels="mix")[0][:24000]
    fake = RealtimeFake(progs, answer, KEY)
    log = sub / ".spearbench-fdb-infer" / "rank-0.jsonl"
    env = {**os.environ, "OPENAI_API_KEY": KEY, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    try:
        p = subprocess.Popen([sys.executable, "-m", "spear_metrics.cli", "fdb", "infer", "--agent", "openai-realtime",
                              "--root", str(sub), "--no-asr", "--no-progress", "-a", f"base_url={fake.url}"],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120

        def finished() -> set[str]:  # the halves logged as done (the journal also logs each start)
            if not log.is_file():
                return set()
            recs = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
            return {r["sample"] for r in recs if r.get("status") in ("ok", "failed")}

        while time.monotonic() < deadline and p.poll() is None and not finished():
            time.sleep(0.05)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
        logged = finished()
        assert logged  # at least one half finished before the kill
        before = dict(fake.connections)
        os.environ["OPENAI_API_KEY"] = KEY
        try:
            info = run_fdb_inference("openai-realtime", sub, agent_options={"base_url": fake.url}, asr=None,
                                     asr_backend=_WordsASR(), progress=False)
        finally:
            os.environ.pop("OPENAI_API_KEY", None)
        assert info["n_done"] == 4 and info["n_failed"] == 0 and info["n_samples"] == 4
        for unit in logged:  # a logged half is never run again
            row = "user_interruption_" + unit.replace("/", "_")
            assert fake.connections[row] == before[row] == 1
    finally:
        fake.close()
    for sid in ("1", "2"):
        for prefix in ("", "clean_"):
            x, sr = decode(sub / sid / f"{prefix}input.wav")
            y, sr_out = decode(sub / sid / f"{prefix}output.wav")
            assert sr_out == sr and y.shape == x.shape and np.abs(y).max() > 0
            # the whole reply transcribed (a scripted recogniser: one word per second of audio it is handed)
            tr = json.loads((sub / sid / f"{prefix}output.json").read_text())
            assert len(tr["chunks"]) == int(x.shape[1] / sr) and tr["chunks"][0]["timestamp"] == [0.0, 0.5]


class _WordsASR:
    """A scripted recogniser with the ASR backend API: one word per whole second of the wave."""

    name = "scripted"

    def transcribe(self, waves, sr=16000, word_timestamps=False):
        from spear_metrics.core.asr import Transcript, Word

        out = []
        for w in waves:
            words = [Word(f"w{i}", float(i), i + 0.5) for i in range(int(len(w) / sr))]
            out.append(Transcript(" ".join(x.text for x in words), words, self.name))
        return out


@pytest.mark.slow
def test_bad_metadata_fails_alone_and_a_sample_without_clean_reply_is_not_judged(v15_root, tmp_path):
    """A malformed metadata.json is a failed row naming the file; a sample without clean_output.wav
    is scored without a behaviour tag (upstream judges only samples with all four transcripts) and
    without clean features; the judge is asked for the complete sample only."""
    import shutil

    from spear_metrics.full_duplex_v15.scoring import V15Scorer, V15Setup, score_v15

    root, _ = v15_root
    sub = tmp_path / "talking_to_other"
    for sid in ("1", "2", "3"):
        shutil.copytree(root / "user_interruption" / "1", sub / sid)
    (sub / "2" / "metadata.json").write_text('{"timestamps": [9.0, 2.0]}')  # ends before it starts
    for name in ("clean_output.wav", "clean_output.json"):
        (sub / "3" / name).unlink()
    with FakeChatServer([(200, '{"behaviour": ["C_UNCERTAIN_HANDLING"]}')]) as srv:
        judge = _judge(srv.url)
        overall, per, results = score_v15(sub, tmp_path / "o", V15Setup(scorer=V15Scorer(judge=judge, mos_name=None),
                                                                        judge=judge, n_resamples=0, progress=False))
        assert len(srv.requests) == 1
    assert [r.ok for r in results] == [True, False, True]
    assert "metadata.json" in results[1].error and "ends before it starts" in results[1].error
    assert results[0].values["behaviour"] == ["C_UNCERTAIN_HANDLING"]
    assert results[2].values["behaviour"] is None and "clean_output.wav" in results[2].values["behaviour_note"]
    assert "clean" not in results[2].values["general"] and results[2].values["general"]["post"]
    assert overall["C_UNCERTAIN_HANDLING"] == 1.0 and overall["C_UNCERTAIN_HANDLING_n"] == 1
    assert overall["clean_wpm_n"] == 1 and overall["post_wpm_n"] == 2


def test_an_overlap_outside_the_audio_a_short_reply_and_deep_metadata_fail_alone(v15_root, tmp_path):
    """An overlap window starting after input.wav ends (16 s sample, window [30, 40] s) had a
    post-overlap wpm of 0.0 (the features of no audio) entering the mean; an output.wav of 3 s
    ends before the window starts (not time-synchronous); a metadata.json nested past the JSON
    parser's limit was a RecursionError. Each is a failed row with its reason; the good sample is
    scored and the aggregate holds it alone."""
    import shutil

    import soundfile as sf

    from spear_metrics.full_duplex_v15.scoring import V15Scorer, V15Setup, score_v15

    root, _ = v15_root
    sub = tmp_path / "user_interruption"
    for sid in ("1", "2", "3", "4"):
        shutil.copytree(root / "user_interruption" / "1", sub / sid)
    (sub / "2" / "metadata.json").write_text(json.dumps({"timestamps": [30.0, 40.0]}))
    x, sr = sf.read(sub / "3" / "output.wav")
    sf.write(sub / "3" / "output.wav", x[: 3 * sr], sr)
    (sub / "4" / "metadata.json").write_text('{"timestamps": ' + "[" * 100_000)
    overall, _, results = score_v15(sub, tmp_path / "o", V15Setup(scorer=V15Scorer(mos_name=None), n_resamples=0,
                                                                   progress=False))
    assert [r.ok for r in results] == [True, False, False, False]
    assert "overlap window [30, 40] s starts at or after the end of input.wav (16.000 s)" in results[1].error
    assert "output.wav (3.000 s) ends before the overlap window" in results[2].error
    assert results[3].error.startswith("not valid JSON") and "metadata.json" in results[3].error
    assert overall["n_scored"] == 1 and overall["post_wpm_n"] == 1
    assert overall["post_wpm"] == pytest.approx(results[0].values["general"]["post"]["wpm"])


def test_a_sample_missing_clean_input_in_a_v15_folder_is_still_run_as_both_halves(tmp_path):
    """In a v1.5 folder, a sample folder without clean_input.wav was taken for a v1.0 sample
    (task 'backchannel', one half only): its clean half vanished from the run. It is now listed
    as both v1.5 halves; the clean half fails when its input is read (the run's reason)."""
    from spear_datasets.audio import write_wav
    from spear_metrics.full_duplex.infer import list_stimuli

    c = S.clips()
    for sid in ("1", "2"):
        d = tmp_path / "user_interruption" / sid
        d.mkdir(parents=True)
        write_wav(d / "input.wav", c.context[: S.SR], S.SR)
        (d / "metadata.json").write_text(json.dumps({"timestamps": [0.5, 0.8]}))
    write_wav(tmp_path / "user_interruption" / "1" / "clean_input.wav", c.context[: S.SR], S.SR)
    stims = list_stimuli(tmp_path / "user_interruption")
    assert [(s.unit, s.task, s.input_name) for s in stims] == [
        ("1", "v1.5", "input.wav"), ("1/clean_", "v1.5", "clean_input.wav"),
        ("2", "v1.5", "input.wav"), ("2/clean_", "v1.5", "clean_input.wav")]
