"""The judge's reply cache, total time limit, size limit, returned model id, usage and cost,
against loopback judges that count their calls (replies built from the official openai SDK types)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsuperb_fixtures import CLS
from judge_fakes import CountingJudge, HugeJudge, TricklingJudge, completion
from spear_metrics.core.judge import Judge, JudgeConfig, JudgeError, make_judge, moving_alias
from spear_metrics.core.judge_cache import JudgeCache, request_key
from spear_metrics.core.usage import PriceTable, PriceTableError, Usage, UsageTally, normalize_usage

REPO = Path(__file__).resolve().parents[1]


def yes(text: str) -> str:
    if "YES" not in text:
        raise ValueError("no verdict")
    return "yes"


def ask(judge: Judge, q: str, **extra):
    return judge.ask([{"role": "user", "content": q}], yes, extra_body=extra or None)


def make(url: str, cache: JudgeCache | None, **kw) -> Judge:
    kw.setdefault("timeout", 60.0)  # no test here but the trickle is about the time limit
    kw.setdefault("backoff_s", 0.0)
    kw.setdefault("model", "judge-model-2024-08-06")
    return Judge(url, api_key="", cache=cache, **kw)


def test_second_judge_on_the_same_cache_makes_no_call(tmp_path):
    with CountingJudge() as srv:
        with make(srv.url, JudgeCache("readwrite", tmp_path / "c")) as j1:
            first = [ask(j1, f"question {k}") for k in range(3)]
        assert srv.calls == 3
        with make(srv.url, JudgeCache("readwrite", tmp_path / "c")) as j2:
            second = [ask(j2, f"question {k}") for k in range(3)]
            rep = j2.report()
    assert srv.calls == 3  # every answer came from the cache
    assert [a.reply for a in second] == [a.reply for a in first]
    assert all(a.meta.cached for a in second) and not any(a.meta.cached for a in first)
    assert rep["answers"] == 3 and rep["answers_from_cache"] == 3 and rep["requests"] == 0
    assert rep["cache"]["hits"] == 3
    # what the service answered with travels with the cached reply
    assert second[0].meta.model == "judge-model-2024-08-06" and second[0].meta.system_fingerprint == "fp_loopback"
    assert rep["usage"]["total"]["input_tokens"] == 0  # nothing billed


def test_changed_prompt_parameter_or_model_misses(tmp_path):
    cache_dir = tmp_path / "c"
    with CountingJudge() as srv:
        with make(srv.url, JudgeCache("readwrite", cache_dir)) as j:
            ask(j, "q")
            ask(j, "q")  # the same: a hit
            assert srv.calls == 1
            ask(j, "q ")  # another prompt
            ask(j, "q", max_tokens=17)  # another decoding parameter
            assert srv.calls == 3
        with make(srv.url, JudgeCache("readwrite", cache_dir), seed=7) as j:
            ask(j, "q")  # another seed
        with make(srv.url, JudgeCache("readwrite", cache_dir), temperature=0.5) as j:
            ask(j, "q")  # another temperature
        with make(srv.url, JudgeCache("readwrite", cache_dir), model="other-judge-2025-01-01") as j:
            ask(j, "q")  # another model id
        assert srv.calls == 6
        with make(srv.url, JudgeCache("read", cache_dir)) as j:
            ask(j, "never asked")  # read: used, never written
        with make(srv.url, JudgeCache("read", cache_dir)) as j:
            ask(j, "never asked")
        assert srv.calls == 8
        with make(srv.url, None) as j:  # off
            ask(j, "q")
        assert srv.calls == 9


def test_audio_enters_the_key_by_its_hash():
    import base64

    audio = base64.b64encode(bytes(range(256)) * 8).decode()
    msg = lambda data: [{"role": "user", "content": [{"type": "input_audio",  # noqa: E731
                                                      "input_audio": {"data": data, "format": "wav"}}]}]
    k1, mat = request_key({"model": "m", "messages": msg(audio)})
    k2, _ = request_key({"model": "m", "messages": msg(audio[:-4] + "AAAA")})
    assert k1 != k2
    part = mat["request"]["messages"][0]["content"][0]["input_audio"]["data"]
    import hashlib

    assert part == {"sha256": hashlib.sha256(bytes(range(256)) * 8).hexdigest()}


_WRITER = """
import sys
from spear_metrics.core.judge_cache import JudgeCache
c = JudgeCache("readwrite", sys.argv[1])
for k in range(200):
    c.put("ab" + "0" * 62, {"endpoint": "chat.completions"}, {"content": sys.argv[2] * 5000, "model": "m",
          "system_fingerprint": None, "usage": None})
"""


def test_two_processes_writing_one_entry_leave_one_valid_entry(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), ch], env=env) for ch in "AB"]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    c = JudgeCache("read", tmp_path)
    got = c.get("ab" + "0" * 62)
    assert got is not None and got["content"] in ("A" * 5000, "B" * 5000)
    assert [p.name for p in (tmp_path / "ab").iterdir()] == ["ab" + "0" * 62 + ".json"]  # no temporary left
    assert c.corrupt == 0


def test_corrupted_entry_is_ignored_and_rewritten(tmp_path):
    cache = JudgeCache("readwrite", tmp_path)
    with CountingJudge() as srv:
        with make(srv.url, cache) as j:
            ask(j, "q")
        key, _ = request_key({"model": "judge-model-2024-08-06", "messages": [{"role": "user", "content": "q"}],
                              "temperature": 0.0, "seed": 0})
        p = cache.path(key)
        entry = json.loads(p.read_text())
        entry["reply"]["content"] = "Result: NO, edited"  # the checksum no longer matches
        p.write_text(json.dumps(entry))
        with make(srv.url, cache) as j:
            a = ask(j, "q")
        assert srv.calls == 2 and not a.meta.cached and cache.corrupt == 1
        assert json.loads(p.read_text())["reply"]["content"].endswith("Result: YES")  # rewritten whole
        p.write_bytes(b'{"format": "spearbench-judge-cache/1", "key": "trunc')  # a torn file
        with make(srv.url, cache) as j:
            ask(j, "q")
        assert srv.calls == 3 and cache.corrupt == 2
        with make(srv.url, cache) as j:
            assert ask(j, "q").meta.cached  # and read back once rewritten
        assert srv.calls == 3


def test_a_malformed_reply_is_never_cached(tmp_path):
    replies = iter([(200, completion("I cannot say")), (200, completion("Result: YES"))])
    with CountingJudge(lambda body: next(replies)) as srv:
        with make(srv.url, JudgeCache("readwrite", tmp_path), max_retries=1) as j:
            a = ask(j, "q")
    assert srv.calls == 2 and a.reply == "Result: YES"
    (entry,) = list(tmp_path.rglob("*.json"))
    assert json.loads(entry.read_text())["reply"]["content"] == "Result: YES"


def test_trickling_judge_is_cut_at_the_total_time_limit():
    # one byte every 0.2 s: each read is quick, the whole reply would take minutes; the limit is on
    # the whole request (short here: this test is about it)
    with TricklingJudge(every_s=0.2) as srv:
        j = make(srv.url, None, timeout=1.0, max_retries=0)
        with pytest.raises(JudgeError, match="1 s total time limit"):
            ask(j, "q")
        j.close()
        assert srv.sent < srv.size  # cut off before the reply was whole


def test_a_reply_over_the_size_limit_is_refused_as_it_arrives():
    with HugeJudge(size=2_000_000) as srv:
        j = make(srv.url, None, max_retries=0, max_reply_bytes=100_000)
        with pytest.raises(JudgeError, match="100000-byte limit"):
            ask(j, "q")
        j.close()


def test_usage_is_summed_across_retries_and_priced(tmp_path):
    # a malformed reply (billed: 100 in / 10 out), an HTTP 500 (no usage), then the answer (120 in / 8 out,
    # 20 of them audio, 30 cached)
    replies = iter([(200, completion("no verdict here", prompt_tokens=100, completion_tokens=10)),
                    (500, b'{"error": {"message": "overloaded"}}'),
                    (200, completion("Result: YES", prompt_tokens=120, completion_tokens=8, audio_tokens=20,
                                     cached_tokens=30))])
    with CountingJudge(lambda body: next(replies)) as srv:
        with make(srv.url, None, max_retries=2) as j:
            ask(j, "q")
            table = tmp_path / "prices.json"
            table.write_text(json.dumps({"currency": "USD", "models": {"judge-model-2024-08-06": {
                "input": 2.5, "output": 10.0, "audio_input": 40.0, "cached_input": 1.25}}}))
            rep = j.report(PriceTable(table))
    assert srv.calls == 3
    tot = rep["usage"]["total"]
    assert tot == {"input_tokens": 220, "output_tokens": 18, "audio_input_tokens": 20, "audio_output_tokens": 0,
                   "cached_input_tokens": 30}
    # by hand: text in (220 - 20 - 30) * 2.5 + cached 30 * 1.25 + audio 20 * 40 + out 18 * 10, per million
    assert rep["usage"]["cost"] == pytest.approx((170 * 2.5 + 30 * 1.25 + 20 * 40 + 18 * 10) / 1e6)
    assert rep["returned_models"] == {"judge-model-2024-08-06": 1} and rep["system_fingerprints"] == {"fp_loopback": 1}


def test_price_table_by_hand_and_its_refusals(tmp_path):
    p = tmp_path / "p.json"
    p.write_text(json.dumps({"models": {"m": {"input": 3.0, "output": 12.0}}}))
    t = PriceTable(p)
    assert t.cost("m", Usage(input_tokens=2_000_000, output_tokens=500_000)) == (pytest.approx(12.0), None)
    cost, why = t.cost("m", Usage(input_tokens=10, audio_input_tokens=5))
    assert cost is None and "no audio_input price" in why
    assert t.cost("other", Usage(1, 1))[0] is None
    p.write_text(json.dumps({"models": {"m": {"input": -1}}}))
    with pytest.raises(PriceTableError, match="non-negative"):
        PriceTable(p)
    p.write_text(json.dumps({"models": {"m": {"inptu": 1}}}))
    with pytest.raises(PriceTableError, match="unknown price 'inptu'"):
        PriceTable(p)
    # the documented example reads
    ex = PriceTable(REPO / "docs" / "price_table.example.json")
    assert ex.models and ex.currency


def test_usage_of_the_three_services():
    chat = normalize_usage({"prompt_tokens": 50, "completion_tokens": 7,
                            "prompt_tokens_details": {"audio_tokens": 30, "cached_tokens": 4},
                            "completion_tokens_details": {"audio_tokens": 5}})
    assert chat == Usage(50, 7, 30, 5, 4)
    realtime = normalize_usage({"total_tokens": 300, "input_tokens": 200, "output_tokens": 100,
                                "input_token_details": {"audio_tokens": 150, "text_tokens": 50, "cached_tokens": 0},
                                "output_token_details": {"audio_tokens": 80, "text_tokens": 20}})
    assert realtime == Usage(200, 100, 150, 80, 0)
    gemini = normalize_usage({"promptTokenCount": 90, "responseTokenCount": 40, "totalTokenCount": 130,
                              "promptTokensDetails": [{"modality": "AUDIO", "tokenCount": 60},
                                                      {"modality": "TEXT", "tokenCount": 30}],
                              "responseTokensDetails": [{"modality": "AUDIO", "tokenCount": 35}]})
    assert gemini == Usage(90, 40, 60, 35, 0)
    assert normalize_usage(None) is None and normalize_usage({"x": 1}) is None
    t = UsageTally()
    t.add("a", chat)
    t.add("a", None)
    t.add("b", gemini)
    j = t.to_json()
    assert j["total"]["input_tokens"] == 140 and j["by_model"]["a"]["n_replies_without_usage"] == 1


def test_moving_aliases_and_require_pinned(monkeypatch):
    for alias in ("gpt-4o", "gpt-4-turbo", "chatgpt-4o-latest", "gemini-2.5-pro-preview", "gemini-2.0-flash-exp",
                  "gpt-4o-audio-preview"):
        assert moving_alias(alias), alias
    for pinned in ("gpt-4o-2024-08-06", "gpt-4-0613", "gemini-1.5-pro-002", "gpt-4-1106-preview",
                   "gemini-2.5-pro-preview-05-06", "claude-3-5-sonnet-20241022", "gpt-audio-2025-08-28"):
        assert moving_alias(pinned) is None, pinned
    with pytest.raises(ValueError, match="require-pinned"):
        make_judge(JudgeConfig(url="http://127.0.0.1:9/v1", model="gpt-4o", require_pinned=True))
    said = []
    j = make_judge(JudgeConfig(url="http://127.0.0.1:9/v1", model="gpt-4o", key_env="none"), warn=said.append)
    assert len(said) == 1 and "gpt-4o" in said[0] and j.report()["moving_alias"]
    j.close()
    monkeypatch.delenv("NO_SUCH_JUDGE_KEY", raising=False)
    with pytest.raises(ValueError, match="NO_SUCH_JUDGE_KEY"):
        make_judge(JudgeConfig(url="http://127.0.0.1:9/v1", model="m-2024-01-01", key_env="NO_SUCH_JUDGE_KEY"))


def _predictions(folder: Path, n: int) -> Path:
    folder.mkdir()
    (folder / f"{CLS}.json").write_text(json.dumps({f"row{k}": {"instruction": "Is there speech?", "label": "yes",
                                                                 "sllm_response": f"answer {k}: yes"}
                                                    for k in range(n)}))
    return folder


def test_dsuperb_rerun_into_a_new_folder_pays_nothing(tmp_path, capsys):
    """Both prompts of a judged row (the project's, judge_accuracy; upstream's, llm_classification at
    temperature 0) are two cache entries: a rerun into a new folder asks neither again."""
    from spear_metrics.cli import main

    pred = _predictions(tmp_path / "pred", 5)
    with CountingJudge() as srv:
        base = ["dsuperb", "score", "--pred", str(pred), "--judge-url", srv.url, "--judge-model",
                "judge-model-2024-08-06", "--judge-key-env", "none", "--no-progress", "--bootstrap", "0"]
        assert main(base + ["--out", str(tmp_path / "r1")]) == 0
        assert srv.calls == 10  # 5 rows x 2 prompts
        assert main(base + ["--out", str(tmp_path / "r2")]) == 0
        assert srv.calls == 10
        bodies = list(srv.requests)
    # two questions per row, each at temperature 0, none the same as another (no prompt answers for the other)
    assert len({json.dumps(b["messages"], sort_keys=True) for b in bodies}) == 10
    assert all(b["temperature"] == 0 for b in bodies)
    assert len(list(Path(os.environ["SPEARBENCH_JUDGE_CACHE"]).rglob("*.json"))) == 10
    s1 = json.loads((tmp_path / "r1" / "summary.json").read_text())
    s2 = json.loads((tmp_path / "r2" / "summary.json").read_text())
    assert s2["judge_calls"]["answers_from_cache"] == 10 and s2["judge_calls"]["requests"] == 0
    each = {"n_judged": 5, "from_cache": 5, "returned_models": {"judge-model-2024-08-06": 5},
            "system_fingerprints": {"fp_loopback": 5}}
    assert s2["judge_replies"] == {**each, "llm_classification": each}
    assert s1["judge_replies"]["from_cache"] == s1["judge_replies"]["llm_classification"]["from_cache"] == 0
    assert s1["judge_calls"]["usage"]["total"]["input_tokens"] == 1000  # 10 replies of 100 prompt tokens
    assert s2["tasks"][CLS]["judge_accuracy"] == s1["tasks"][CLS]["judge_accuracy"] == 1.0
    assert s2["tasks"][CLS]["llm_classification"] == s1["tasks"][CLS]["llm_classification"] == 1.0
    rows = [json.loads(x) for x in (tmp_path / "r2" / "per_sample.jsonl").read_text().splitlines()]
    assert all(r["judge_cached"] and r["llm_classification_cached"] for r in rows)
    assert all(r["llm_classification_returned_model"] == "judge-model-2024-08-06" for r in rows)
    assert "10 from the cache" in capsys.readouterr().out


def test_dsuperb_upstream_prompt_asked_alone_is_reused_by_a_run_with_both(tmp_path):
    """A run asking only upstream's prompt fills the cache for it; a run asking both then asks only
    the project's prompt, and a third asks nothing."""
    from spear_metrics.cli import main

    pred = _predictions(tmp_path / "pred", 3)
    with CountingJudge() as srv:
        base = ["dsuperb", "score", "--pred", str(pred), "--judge-url", srv.url, "--judge-model",
                "judge-model-2024-08-06", "--judge-key-env", "none", "--no-progress", "--bootstrap", "0"]
        assert main(base + ["--out", str(tmp_path / "r1"), "--judge-prompts", "upstream"]) == 0
        assert srv.calls == 3
        assert main(base + ["--out", str(tmp_path / "r2")]) == 0
        assert srv.calls == 6
        assert main(base + ["--out", str(tmp_path / "r3")]) == 0
        assert srv.calls == 6
    s2 = json.loads((tmp_path / "r2" / "summary.json").read_text())
    assert s2["judge_replies"]["from_cache"] == 0 and s2["judge_replies"]["llm_classification"]["from_cache"] == 3


def test_dsuperb_judge_added_later_judges_what_was_not_judged(tmp_path):
    from spear_metrics.cli import main

    pred = _predictions(tmp_path / "pred", 4)
    out = str(tmp_path / "r")
    rc = main(["dsuperb", "score", "--pred", str(pred), "--out", out, "--no-progress", "--bootstrap", "0"])
    assert rc == 0  # scored: its failed rows ("no judge given") are listed, not a whole-run problem
    s0 = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert s0["n_failed"] == 4
    with CountingJudge() as srv:
        common = ["dsuperb", "score", "--pred", str(pred), "--out", out, "--judge-url", srv.url, "--judge-key-env", "none",
                  "--no-progress", "--bootstrap", "0"]
        args = common + ["--judge-model", "judge-model-2024-08-06"]
        assert main(args) == 0
        assert srv.calls == 8  # 4 rows x 2 prompts (the project's and upstream's)
        s1 = json.loads((tmp_path / "r" / "summary.json").read_text())
        assert s1["n_failed"] == 0 and s1["tasks"][CLS]["judge_accuracy"] == 1.0
        # another judge into the judged folder is refused (exit 2), the same one resumes with no call
        assert main(common + ["--judge-model", "other-2025-01-01"]) == 2
        assert main(args + ["--judge-cache", "off"]) == 0
        assert srv.calls == 8


def test_old_option_spellings_still_work(tmp_path, capsys):
    import argparse

    from spear_metrics.commands.judge_options import add_judge_options, judge_config_from_args

    p = argparse.ArgumentParser()
    add_judge_options(p)
    a = p.parse_args(["--judge-api-key-env", "MY_KEY", "--judge-max-retries", "5", "--judge-timeout", "7"])
    cfg = judge_config_from_args(a)
    assert (cfg.key_env, cfg.retries, cfg.timeout_s) == ("MY_KEY", 5, 7.0)
    err = capsys.readouterr().err
    assert err.count("deprecated") == 3 and "--judge-key-env" in err
    assert "--judge-api-key-env" not in p.format_help()


def test_stances_take_the_shared_judge_options(capsys, monkeypatch):
    from spear_metrics.core.options import OptionError
    from spear_metrics.stances.definition import Stances

    monkeypatch.setenv("STANCE_JUDGE_KEY", "sk-stance-0123456789")
    s = Stances(judge_base_url="http://127.0.0.1:9/v1", judge_timeout=7.0, judge_key_env="STANCE_JUDGE_KEY")
    cfg = s.judge_config()
    assert (cfg.url, cfg.timeout_s, cfg.key_env, cfg.retries) == ("http://127.0.0.1:9/v1", 7.0, "STANCE_JUDGE_KEY", 6)
    assert capsys.readouterr().err.count("deprecated") == 2
    with pytest.raises(OptionError, match="judge_key_env"):
        Stances(judge_url="http://127.0.0.1:9/v1", judge_api_key="sk-on-the-command-line-0123")


def test_fdb_relevance_rerun_into_a_new_folder_pays_nothing(fdb_dir, tmp_path, capsys):
    from spear_metrics.cli import main

    root = fdb_dir / "example_data" / "user_interruption_example"
    reply = completion('{"analysis": "answers the interrupting request", "rating": 4}')
    with CountingJudge(lambda body: (200, reply)) as srv:
        base = ["fdb", "score", "--task", "user_interruption", "--root", str(root), "--judge-url", srv.url, "--judge-model",
                "judge-model-2024-08-06", "--judge-key-env", "none", "--no-progress", "--bootstrap", "0"]
        assert main(base + ["--out", str(tmp_path / "r1")]) == 0
        n = srv.calls
        assert n >= 1
        assert main(base + ["--out", str(tmp_path / "r2")]) == 0
        assert srv.calls == n
    s2 = json.loads((tmp_path / "r2" / "summary.json").read_text())
    assert s2["judge_calls"]["answers_from_cache"] == n and s2["judge_calls"]["requests"] == 0
    assert "from the cache" in capsys.readouterr().out


class _StopsAtCall:
    """A judge (the real client inside) that stops the whole run at its ``n``-th call, as a kill would."""

    def __init__(self, judge: Judge, n: int):
        self.inner, self.n, self.calls = judge, n, 0
        self.model, self.temperature, self.seed = judge.model, judge.temperature, judge.seed
        self.base_url, self.timeout, self.max_retries = judge.base_url, judge.timeout, judge.max_retries

    def ask(self, *a, **k):
        self.calls += 1
        if self.calls == self.n:
            raise KeyboardInterrupt  # the run stops here
        return self.inner.ask(*a, **k)


def test_dsuperb_logs_each_judge_result_as_it_finishes(tmp_path):
    from spear_metrics.dynamic_superb.scoring import score_predictions

    pred = _predictions(tmp_path / "pred", 6)
    out = tmp_path / "r"
    with CountingJudge() as srv:
        with make(srv.url, None, seed=None) as j:
            with pytest.raises(KeyboardInterrupt):
                # two prompts per row (the project's, upstream's): the 7th call is row 3's first
                score_predictions(pred, out, judge=_StopsAtCall(j, 7), n_resamples=0, progress=False)
        assert srv.calls == 6
        logged = [json.loads(x) for x in (out / ".work" / "rank-0.jsonl").read_text().splitlines()]
        assert sum(1 for r in logged if r.get("status") == "ok") == 3  # the 3 finished rows, none lost
        with make(srv.url, None, seed=None) as j:
            s = score_predictions(pred, out, judge=j, n_resamples=0, progress=False)
        assert srv.calls == 12 and s["n_scored"] == 6  # the rerun asked only the 3 unfinished rows (2 calls each)


def test_cli_refuses_a_moving_alias_when_pinned_is_required_and_a_bad_price_table(tmp_path, capsys):
    from spear_metrics.cli import main

    pred = _predictions(tmp_path / "pred", 2)
    bad = tmp_path / "prices.json"
    bad.write_text('{"models": {"gpt-4o": {"input": "two"}}}')
    with CountingJudge() as srv:
        base = ["dsuperb", "score", "--pred", str(pred), "--judge-url", srv.url, "--judge-key-env", "none",
                "--no-progress", "--bootstrap", "0"]
        assert main(base + ["--out", str(tmp_path / "r1"), "--judge-model", "gpt-4o", "--judge-require-pinned"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "require-pinned" in err[0] and "gpt-4o" in err[0]
        assert main(base + ["--out", str(tmp_path / "r2"), "--judge-model", "gpt-4o-2024-08-06",
                            "--price-table", str(bad)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "non-negative number" in err[0]
        # without --judge-require-pinned the alias is warned about in one line, and recorded
        assert main(base + ["--out", str(tmp_path / "r3"), "--judge-model", "gpt-4o"]) == 0
        warned = [x for x in capsys.readouterr().err.splitlines() if "warning" in x]
        assert len(warned) == 1 and "gpt-4o" in warned[0]
        assert srv.calls == 4  # only the last run asked (2 rows x 2 prompts)
    s = json.loads((tmp_path / "r3" / "summary.json").read_text())
    assert "no dated snapshot" in s["judge_calls"]["moving_alias"]


def _interruption_folder(fdb_dir: Path, dest: Path, n: int) -> Path:
    """``n`` copies of FDB's real user-interruption example, each with its own interrupting turn
    (so each asks the judge its own question)."""
    import shutil

    src = fdb_dir / "example_data" / "user_interruption_example" / "1"
    for k in range(1, n + 1):
        shutil.copytree(src, dest / str(k))
        (dest / str(k) / "rating.json").unlink(missing_ok=True)
        turns = json.loads((dest / str(k) / "interrupt.json").read_text())
        turns[0]["interrupt"] += f" (copy {k})"
        (dest / str(k) / "interrupt.json").write_text(json.dumps(turns))
    return dest


@pytest.mark.parametrize("concurrency", [1, 2])
def test_fdb_judge_concurrency_acts(fdb_dir, tmp_path, concurrency):
    """--judge-concurrency 2: two relevance questions are in flight at once (the loopback judge
    answers only once both have arrived); 1: never more than one in flight."""
    import threading

    from spear_metrics.cli import main

    root = _interruption_folder(fdb_dir, tmp_path / "ui", 2)
    both = threading.Barrier(2, timeout=120)  # generous: reached at once when both are asked together
    reply = completion('{"analysis": "answers the interrupting request", "rating": 4}')
    lock, now, most = threading.Lock(), [0], [0]

    def answer(body):
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        try:
            if concurrency == 2:
                both.wait()
            return 200, reply
        finally:
            with lock:
                now[0] -= 1

    with CountingJudge(answer) as srv:
        rc = main(["fdb", "score", "--task", "user_interruption", "--root", str(root), "--judge-url", srv.url,
                   "--judge-model", "judge-model-2024-08-06", "--judge-key-env", "none", "--no-progress", "--bootstrap",
                   "0", "--judge-concurrency", str(concurrency), "--out", str(tmp_path / "r")])
    assert rc == 0
    rows = [json.loads(x) for x in (tmp_path / "r" / "per_sample.jsonl").read_text().splitlines()]
    assert srv.calls == 2 and [r["relevance"] for r in rows] == [4, 4]
    assert most[0] == concurrency
    info = json.loads((tmp_path / "r" / "run_info.json").read_text())
    assert info["judge_concurrency"] == concurrency


def test_entries_and_price_tables_nested_too_deeply_or_huge_are_refused_in_one_line(tmp_path):
    """JSON nested deeper than the parser's recursion limit raises RecursionError (not ValueError):
    a cache entry like that is a miss counted as corrupt; a price table like that, or one larger
    than the limit (a sparse 10 GB file: never read whole), is a one-line PriceTableError."""
    from spear_metrics.core.usage import MAX_PRICE_TABLE_BYTES

    cache = JudgeCache("readwrite", tmp_path / "cache")
    key = "ab" * 32
    cache.path(key).parent.mkdir(parents=True)
    cache.path(key).write_text("[" * 100_000)
    assert cache.get(key) is None and cache.corrupt == 1 and cache.misses == 1
    cache.path(key).unlink()
    os.mkfifo(cache.path(key))  # an entry that is a FIFO: reading it would block forever
    assert cache.get(key) is None and cache.corrupt == 2
    deep = tmp_path / "deep.json"
    deep.write_text('{"models": ' + "[" * 100_000)
    with pytest.raises(PriceTableError, match="not readable JSON"):
        PriceTable(deep)
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as f:
        f.truncate(10 * 1024 ** 3)  # sparse: no disk used
    with pytest.raises(PriceTableError, match=f"over the {MAX_PRICE_TABLE_BYTES}-byte limit"):
        PriceTable(huge)


def test_a_usage_count_of_400_digits_reads_as_no_count_and_an_overflowing_cost_is_null(tmp_path):
    """A judge whose reply is fine but whose usage says prompt_tokens = 10**400: math.isfinite of
    that int raised OverflowError inside the judge call (the row failed for a billing field);
    it reads as 0 tokens (counts above MAX_TOKEN_COUNT are not believed), the answer stands. A
    price so large that tokens x price overflows a float gives cost null with the reason, never
    inf in a summary."""
    body = json.dumps({"id": "c1", "object": "chat.completion", "created": 1, "model": "judge-model-2024-08-06",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": "Result: YES"}}],
                       "usage": {"prompt_tokens": 10 ** 400, "completion_tokens": 7}}).encode()
    with CountingJudge(lambda b: (200, body)) as srv:
        with make(srv.url, None) as j:
            a = ask(j, "q")
            assert a.value == "yes"
            u = j.usage.to_json()["by_model"]["judge-model-2024-08-06"]
            assert u["input_tokens"] == 0 and u["output_tokens"] == 7
    p = tmp_path / "p.json"
    p.write_text(json.dumps({"models": {"m": {"input": 1e300, "output": 1.0}}}))
    cost, why = PriceTable(p).cost("m", Usage(input_tokens=10 ** 15, output_tokens=1))
    assert cost is None and "overflows" in why  # 1e15 tokens x 1e300 / 1e6 = 1e309 > float max


def test_an_unusable_cache_folder_is_said_once_and_the_run_goes_on_without_it(tmp_path, monkeypatch, capsys):
    """$SPEARBENCH_JUDGE_CACHE under a regular file (a folder that cannot be made): one line on
    stderr before any call, every row still judged, nothing cached, the summary says why."""
    from spear_metrics.cli import main

    (tmp_path / "afile").write_text("not a folder")
    monkeypatch.setenv("SPEARBENCH_JUDGE_CACHE", str(tmp_path / "afile" / "cache"))
    pred = _predictions(tmp_path / "pred", 3)
    with CountingJudge() as srv:
        base = ["dsuperb", "score", "--pred", str(pred), "--judge-url", srv.url, "--judge-model",
                "judge-model-2024-08-06", "--judge-key-env", "none", "--no-progress", "--bootstrap", "0"]
        assert main(base + ["--out", str(tmp_path / "r1")]) == 0
        assert srv.calls == 6  # 3 rows x 2 prompts, all asked
        err = [x for x in capsys.readouterr().err.splitlines() if "judge cache" in x]
        assert len(err) == 1 and "cannot be used (NotADirectoryError" in err[0]
        assert err[0].endswith("this run goes on without caching")
        # a rerun has no cache to answer from: it asks again (and says so again, once)
        assert main(base + ["--out", str(tmp_path / "r2")]) == 0
        assert srv.calls == 12
        assert sum("judge cache" in x for x in capsys.readouterr().err.splitlines()) == 1
    s = json.loads((tmp_path / "r2" / "summary.json").read_text())
    assert s["n_scored"] == 3 and s["judge_calls"]["requests"] == 6
    cache = s["judge_calls"]["cache"]
    assert cache["writes"] == cache["hits"] == cache["corrupt_entries_ignored"] == 0
    assert cache["unusable"].startswith("NotADirectoryError") and str(tmp_path) not in cache["unusable"]


def test_a_cache_folder_that_stops_taking_entries_ends_caching_in_one_line(tmp_path):
    lines = []
    folder = tmp_path / "c"
    with CountingJudge() as srv:
        with make(srv.url, JudgeCache("readwrite", folder, warn=lines.append)) as j:
            ask(j, "question 0")
            assert len(list(folder.rglob("*.json"))) == 1 and lines == []
            import shutil

            shutil.rmtree(folder)
            folder.write_text("a file now")  # the folder is gone: no entry can be written any more
            for k in range(1, 4):
                assert ask(j, f"question {k}").value == "yes"  # answered all the same
            rep = j.report()
    assert srv.calls == 4 and len(lines) == 1 and "cannot be used" in lines[0]
    assert rep["cache"]["write_errors"] == 1  # no write tried after the first failure
    assert rep["cache"]["unusable"].startswith("NotADirectoryError")


def test_an_entry_that_cannot_be_written_fails_alone_and_its_error_names_no_path(tmp_path):
    """A folder where one entry's file goes: that entry's write fails (counted), the cache stays on
    and the next answers are stored (one such entry turned caching off for the whole run), and the
    summary's ``last_write_error`` names the cache folder as ``$SPEARBENCH_JUDGE_CACHE`` (or
    ``<user cache folder>``), not by its path (which names the user)."""
    lines = []
    folder = tmp_path / "c"
    cache = JudgeCache("readwrite", folder, warn=lines.append)
    key, material = request_key({"model": "m", "messages": [{"role": "user", "content": "q0"}]})
    cache.path(key).mkdir(parents=True)
    cache.put(key, material, {"content": "yes"})
    for k in range(1, 4):
        other, m = request_key({"model": "m", "messages": [{"role": "user", "content": f"q{k}"}]})
        cache.put(other, m, {"content": "yes"})
        assert cache.get(other) == {"content": "yes"}
    rep = cache.to_json()
    assert lines == [] and "unusable" not in rep and rep["writes"] == 3 and rep["write_errors"] == 1
    assert rep["last_write_error"].startswith("IsADirectoryError") and str(tmp_path) not in rep["last_write_error"]
    assert "$SPEARBENCH_JUDGE_CACHE/" in rep["last_write_error"] or "<user cache folder>/" in rep["last_write_error"]
