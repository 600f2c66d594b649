"""The OpenAI-compatible judge against a real HTTP server on 127.0.0.1 (fixed replies, some malformed)."""

from __future__ import annotations

import pytest

from helpers import FakeChatServer
from spear_metrics.core.judge import Judge, JudgeError, parse_json_reply


MSG = [{"role": "user", "content": "rate it"}]


def judge(url, **kw):
    kw.setdefault("backoff_s", 0.0)
    kw.setdefault("timeout", 60.0)  # no test here is about the request limit: one no loaded machine reaches
    return Judge(url, "test-judge", **kw)


def test_plain_json_reply_and_request_shape(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeChatServer([(200, '{"analysis": "on topic", "rating": 4}')]) as srv:
        out = judge(srv.url).ask_json(MSG, ["analysis", "rating"])
    assert out == {"analysis": "on topic", "rating": 4}
    assert len(srv.requests) == 1
    body = srv.requests[0]
    # deterministic settings travel with the request, as FDB's judge call (seed 0)
    assert body["model"] == "test-judge" and body["temperature"] == 0.0 and body["seed"] == 0
    assert body["messages"] == MSG
    assert "Authorization" not in srv.headers[0] and "authorization" not in {k.lower() for k in srv.headers[0]}


def test_fenced_block_and_api_key():
    reply = 'Here you go:\n```json\n{"analysis": "ok", "rating": 5}\n```\n'
    with FakeChatServer([(200, reply)]) as srv:
        out = judge(srv.url, api_key="sk-test").ask_json(MSG, ["rating"])
    assert out["rating"] == 5
    auth = {k.lower(): v for k, v in srv.headers[0].items()}["authorization"]
    assert auth == "Bearer sk-test"


def test_malformed_then_good_is_retried():
    replies = [(200, "I would rate it 4."), (200, '{"analysis": "x"}'), (200, '{"analysis": "x", "rating": 3}')]
    with FakeChatServer(replies) as srv:
        out = judge(srv.url, max_retries=3).ask_json(MSG, ["analysis", "rating"])
    assert out["rating"] == 3
    assert len(srv.requests) == 3  # prose, then a reply missing "rating", then a good one


def test_http_500_then_good():
    with FakeChatServer([(500, "overloaded"), (200, '{"rating": 2, "analysis": ""}')]) as srv:
        out = judge(srv.url).ask_json(MSG, ["rating"])
    assert out["rating"] == 2 and len(srv.requests) == 2


def test_gives_up_after_retries_with_one_line_reason():
    with FakeChatServer([(200, "not json {")]) as srv:
        with pytest.raises(JudgeError) as ei:
            judge(srv.url, max_retries=2).ask_json(MSG, ["rating"])
    assert len(srv.requests) == 3  # 1 + max_retries
    msg = str(ei.value)
    assert "\n" not in msg and "3 attempt" in msg and "not JSON" in msg


def test_auth_error_is_not_retried():
    with FakeChatServer([(401, "bad key")]) as srv:
        with pytest.raises(JudgeError, match="HTTP 401"):
            judge(srv.url, max_retries=3).ask_json(MSG, ["rating"])
    assert len(srv.requests) == 1


def test_only_the_adapters_retryable_statuses_are_retried():
    """The judge retries what the network adapters retry (spear_metrics.agents.net.retryable_status):
    a 503 or a 409 is asked again, a 413 (request too large: the same audio again cannot help) or a
    501 fails at once, with every attempt kept."""
    ok = (200, '{"rating": 1}')
    for status, requests in ((503, 2), (409, 2), (413, 1), (501, 1)):
        with FakeChatServer([(status, "no"), ok]) as srv:
            j = judge(srv.url, max_retries=3)
            if requests == 2:
                assert j.ask_json(MSG, ["rating"]) == {"rating": 1}
            else:
                with pytest.raises(JudgeError, match=f"HTTP {status}") as ei:
                    j.ask_json(MSG, ["rating"])
                assert ei.value.fatal and ei.value.status == status and len(ei.value.attempts) == 1
        assert len(srv.requests) == requests, status


def test_backoff_is_the_adapters_rule_without_jitter():
    j = judge("http://127.0.0.1:9/v1", backoff_s=0.5, max_wait_s=3.0)
    assert [j._sleep_before(k, None) for k in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 3.0]
    assert j._sleep_before(1, 0.0) == 0.0 and j._sleep_before(2, 2.5) == 2.5  # Retry-After as the server said


def test_unreachable_server():
    with FakeChatServer([(200, "{}")]) as srv:
        url = srv.url
    with pytest.raises(JudgeError, match="failed"):  # the port is closed now
        judge(url, max_retries=1).ask_json(MSG, ["rating"])


def test_parse_json_reply_is_strict():
    assert parse_json_reply(' {"a": 1} ', ["a"]) == {"a": 1}
    assert parse_json_reply("```\n{\"a\": [1, 2]}\n```", ["a"]) == {"a": [1, 2]}
    for bad in ("", "[1, 2]", '{"a": NaN}', "{'a': 1}", '{"a": 1} trailing'):
        with pytest.raises(ValueError):
            parse_json_reply(bad, ["a"])
    with pytest.raises(ValueError, match="lacks key"):
        parse_json_reply('{"b": 1}', ["a"])


def test_constructor_needs_url_and_model():
    with pytest.raises(ValueError):
        Judge("", "m")
    with pytest.raises(ValueError):
        Judge("http://127.0.0.1:1/v1", "")


def test_extra_body_and_spear_400_fallbacks():
    """SPEAR's stance client: a 400 naming max_completion_tokens retries with max_tokens, one
    naming response_format retries without it."""
    replies = [(400, "Unsupported parameter: 'max_completion_tokens'"), (400, "response_format json_schema is not supported"),
               (200, '{"choice": "P", "probability": 0.5}')]
    extra = {"max_completion_tokens": 128, "response_format": {"type": "json_schema"}, "modalities": ["text"]}
    with FakeChatServer(replies) as srv:
        out = judge(srv.url, max_retries=3, seed=None).ask_json(MSG, ["choice"], extra_body=extra)
    assert out["choice"] == "P" and len(srv.requests) == 3
    first, second, third = srv.requests
    assert first["max_completion_tokens"] == 128 and "seed" not in first and first["modalities"] == ["text"]
    assert "max_completion_tokens" not in second and second["max_tokens"] == 128 and "response_format" in second
    assert "response_format" not in third and third["max_tokens"] == 128
    assert extra["max_completion_tokens"] == 128  # the caller's dict is not changed


def test_outer_braces_only_when_asked():
    text = 'Sure. {"choice": "N", "probability": 0.8} Hope this helps.'
    with pytest.raises(ValueError):
        parse_json_reply(text, ["choice"])
    assert parse_json_reply(text, ["choice"], outer_braces=True)["choice"] == "N"
