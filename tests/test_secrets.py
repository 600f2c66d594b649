"""Secrets are masked by their VALUE, whatever their shape and wherever they came from (an
environment variable, huggingface_hub's stored login token, a value the code was given), in
every message and file: servers on 127.0.0.1 that echo the credential back, a real Hub client
(huggingface_hub against ``HF_ENDPOINT``) and a real judge client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from conftest import REPO, STEREO_DIALOGUE
from helpers import FakeChatServer, LoopbackHTTP, make_clips, row, write_rows

from spear_metrics.core.secrets import MASK, SECRET_ENV_VARS, mask_secrets, mask_value, register_secret

#: Not shaped like a Hub token (``hf_`` + 8 letters/digits): a pattern would miss it.
ODD_TOKEN = "hf_FAKE_SECRET_123"


def test_mask_secrets_masks_values_from_every_source(monkeypatch):
    """Env vars of every API the project talks to, registered values and one call's extra values
    are masked whole (the longest first); a short value is not taken for a secret; files keep
    token-shaped text that is no known secret (``shapes=False``)."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        assert name in SECRET_ENV_VARS
        monkeypatch.setenv(name, f"value-of-{name}-0123")
        assert mask_secrets(f"x value-of-{name}-0123 y") == f"x {MASK} y"
    register_secret("adapter key with spaces 42")
    assert mask_secrets("got adapter key with spaces 42!") == f"got {MASK}!"
    assert mask_secrets("k=sk-test-ABCDEFGH", extra_values=["sk-test-ABCDEFGH"]) == f"k={MASK}"
    # a secret containing another is masked whole
    assert mask_secrets("long-secret-1234567 and long-secret-1234567-plus",
                        extra_values=["long-secret-1234567", "long-secret-1234567-plus"]) == f"{MASK} and {MASK}"
    assert mask_secrets("the test split", extra_values=["test"]) == "the test split"  # 4 chars: not a secret
    assert mask_secrets("path/hf_cachefolder1/x", shapes=False) == "path/hf_cachefolder1/x"
    assert mask_secrets("path/hf_cachefolder1/x") == f"path/{MASK}/x"
    assert mask_value({"a": [f"value-of-OPENAI_API_KEY-0123"], "n": 1.5}) == {"a": [MASK], "n": 1.5}


class _EchoHub(LoopbackHTTP):
    """A Hub API on 127.0.0.1 that refuses every request with 401 and echoes the credential it
    was sent, as a misbehaving server or proxy may."""

    def __init__(self):
        outer = self
        self.auth: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                auth = self.headers.get("Authorization", "")
                outer.auth.append(auth)
                body = json.dumps({"error": f"Invalid credentials in Authorization header: {auth}"}).encode()
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_HEAD = _answer  # noqa: N815

            def log_message(self, *a):
                pass

        self._serve(Handler)


@pytest.fixture(scope="module")
def scored_run(real_dir, tmp_path_factory):
    """A real scored RESULTS folder (one row of the AMI dialogue, interruptions)."""
    from spear_metrics.core.scoring import run_score

    root = tmp_path_factory.mktemp("secret_run")
    q, a = make_clips(STEREO_DIALOGUE, root)
    meta = write_rows(root / "m.csv", [row(q.name, a.name, 0.2)])
    run_score(meta, "interruptions", root / "RESULTS", progress=False, n_resamples=0)
    return root / "RESULTS"


def _push(scored_run: Path, tmp: Path, hub_url: str, **env: str) -> subprocess.CompletedProcess:
    """``spearbench push-results`` in a process of its own (huggingface_hub reads HF_ENDPOINT
    and HF_HOME when it is imported), against the echoing Hub."""
    e = {k: v for k, v in os.environ.items() if k not in SECRET_ENV_VARS and not k.startswith("HF_")}
    e.update(PYTHONPATH=str(REPO), HF_ENDPOINT=hub_url, HF_HOME=str(tmp / "hf_home"), HF_HUB_DISABLE_TELEMETRY="1",
             HF_HUB_ETAG_TIMEOUT="5", HF_HUB_DOWNLOAD_TIMEOUT="5", **env)
    return subprocess.run([sys.executable, "-m", "spear_metrics.cli", "push-results", str(scored_run), "--repo-id",
                           "me/toy-results", "--model-name", "toy"], env=e, capture_output=True, text=True, timeout=300)


def test_a_hub_token_echoed_by_the_server_is_never_printed(scored_run, tmp_path):
    """The token from HF_TOKEN and the one ``hf auth login`` stored (not Hub-token shaped), sent
    by the real huggingface_hub client and echoed back in a 401: one line, exit 2, the token
    masked by its value."""
    (tmp_path / "hf_home").mkdir()
    with _EchoHub() as hub:
        done = _push(scored_run, tmp_path, hub.url, HF_TOKEN=ODD_TOKEN)
        assert hub.auth and ODD_TOKEN in hub.auth[0]  # the client did send it: the server echoed it
        stored = "stored-login-token-not-hf-shaped-42"
        (tmp_path / "hf_home" / "token").write_text(stored)
        from_login = _push(scored_run, tmp_path, hub.url)
        assert stored in hub.auth[-1]
    for p, secret in ((done, ODD_TOKEN), (from_login, stored)):
        out = p.stdout + p.stderr
        assert p.returncode == 2, out
        assert secret not in out and "Invalid credentials" in out and MASK in out, out
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_a_judge_key_echoed_by_the_server_is_masked_in_rows_files_and_messages(fdb_dir, tmp_path, monkeypatch, capsys):
    """OPENAI_API_KEY of any shape, echoed by a judge server in its 401 body: the failed rating's
    reason in per_sample.jsonl, the summary and everything printed carry it masked."""
    from spear_metrics.cli import main

    key = "sk-proj_odd.Shape-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    srv_box = []

    def reply(body):
        return 401, f"bad key: {srv_box[0].headers[-1].get('Authorization')}"

    with FakeChatServer(reply) as srv:
        srv_box.append(srv)
        rc = main(["fdb", "score", "--task", "user_interruption", "--root", str(fdb_dir / "example_data" / "user_interruption_example"),
                   "--out", str(tmp_path / "out"), "--no-progress", "--bootstrap", "0",
                   "--judge-url", srv.url, "--judge-model", "judge-x"])
        assert srv.headers and key in srv.headers[0]["Authorization"]  # the key was sent, and echoed
    printed = capsys.readouterr()
    assert rc == 0
    (rec,) = [json.loads(line) for line in (tmp_path / "out" / "per_sample.jsonl").read_text().splitlines()]
    assert "HTTP 401" in rec["relevance_error"] and MASK in rec["relevance_error"]
    for text in (printed.out + printed.err, *(p.read_text() for p in (tmp_path / "out").rglob("*") if p.is_file())):
        assert key not in text


def test_a_key_at_the_length_limit_is_masked_whole_before_the_message_is_cut():
    """An echoed key that straddles the 200-character cut of an error message: masked whole first,
    so no piece of it survives (a key cut in two is no longer recognised by its value). The judge
    client against a loopback server, and the adapters' HTTP errors (agents.net re-exports the one
    masking function)."""
    from spear_metrics.agents import net
    from spear_metrics.core.judge import Judge, JudgeError

    assert net.mask_secrets is mask_secrets and net.register_secret is register_secret
    key = "sk-cut-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    register_secret(key)
    body = "x" * 150 + " echoed: " + key  # the key spans character 200 of the message
    with FakeChatServer([(401, body)]) as srv, Judge(srv.url, "judge-x", max_retries=0, backoff_s=0) as judge:
        with pytest.raises(JudgeError) as e:
            judge.ask([{"role": "user", "content": "hi"}], str)
    for text in (str(e.value), e.value.body):
        assert key[:12] not in text and MASK in text
    err = net.http_error(401, "y" * 170 + key)
    assert key[:12] not in str(err) and str(err).endswith(MASK)


def test_credentials_typed_inside_a_url_are_found():
    """What url_secrets takes from a URL: the password (or a user name standing alone), the values of
    parameters named like credentials, as typed and percent-decoded; nothing else."""
    from spear_metrics.core.secrets import url_secrets

    assert url_secrets("wss://h/v1/realtime?model=gpt&api_key=sk-a%2Bb-123456") == ["sk-a%2Bb-123456", "sk-a+b-123456"]
    assert url_secrets("https://me:pa%40ss-word-99@h:8443/v1") == ["pa%40ss-word-99", "pa@ss-word-99"]
    assert url_secrets("wss://tok-as-user-0123456@h/x") == ["tok-as-user-0123456"]
    assert url_secrets("https://h/x?X-Goog-Signature=abc123def456&access_token=t0k3n-value") == [
        "abc123def456", "t0k3n-value"]
    # no credential: PersonaPlex's prompts, plain hosts, text that is not a URL
    assert url_secrets("ws://127.0.0.1:8998/api/chat?text_prompt=You+enjoy+it&voice_prompt=NATF2.pt&seed=42") == []
    assert url_secrets("wss://api.openai.com/v1/realtime") == [] and url_secrets("key=value") == []
    assert mask_value({"base_url": "wss://me:secret-pass-77@h/v1?key=kkkkkkkkkk9"},
                      extra_values=url_secrets("wss://me:secret-pass-77@h/v1?key=kkkkkkkkkk9")) == {
        "base_url": f"wss://me:{MASK}@h/v1?key={MASK}"}


def test_a_key_typed_inside_base_url_never_reaches_a_file_or_the_console(fdb_dir, tmp_path, monkeypatch, capsys):
    """``-a base_url=ws://...?api_key=KEY``: fdb-infer records the URL with the key masked in its run
    record (run.json) and the failed sample's reason, although the server that refuses the handshake
    echoes the path it was asked for; nothing written or printed holds the key."""
    import shutil

    from fakes.server import LoopbackServer
    from spear_metrics.cli import main

    key = "url-typed-key-Q7x9Z2w4v"
    for env in SECRET_ENV_VARS:
        monkeypatch.delenv(env, raising=False)
    task = tmp_path / "pause_handling"
    (task / "1").mkdir(parents=True)
    for f in ("input.wav", "pause.json"):  # the stimulus alone (not the released model's reply)
        shutil.copy(fdb_dir / "example_data" / "pause_handling_example" / "1" / f, task / "1" / f)
    paths = []

    def refuse(conn, request):
        paths.append(request.path)
        return conn.respond(403, f"forbidden: {request.path}\n")

    async def never(ws):  # the handshake is refused first
        await ws.close()

    with LoopbackServer(never, process_request=refuse, session_timeout_s=20) as srv:
        url = srv.url(f"/v1/realtime?api_key={key}")
        rc = main(["fdb", "infer", "--agent", "openai-realtime", "--root", str(task), "--no-asr", "--no-progress",
                   "-a", f"base_url={url}", "-a", "api_key_env=none", "-a", "max_tries=1"])
    printed = capsys.readouterr()
    assert rc == 1 and paths and key in paths[0]  # the key did travel in the URL, and the server echoed it
    # (exit 1: the handshake was refused, so no reply was written)
    run = json.loads((task / ".spearbench-fdb-infer" / "run.json").read_text())
    assert run["agent_options"]["base_url"] == srv.url(f"/v1/realtime?api_key={MASK}")
    (fail,) = [json.loads(x) for x in (task / ".spearbench-fdb-infer" / "failures.jsonl").read_text().splitlines()]
    assert "HTTP 403" in fail["error"] and f"api_key={MASK}" in fail["error"]
    for text in (printed.out + printed.err, *(p.read_text(errors="replace") for p in task.rglob("*") if p.is_file())):
        assert key not in text


@pytest.mark.parametrize("agent,env,value", [
    ("openai-audio", "OPENAI_API_KEY", "sk-proj-abcdéfgh12345678"),
    ("openai-realtime", "OPENAI_API_KEY", "sk-proj-abcd\r\nX-Injected: 12345678"),
    ("gemini-live", "GEMINI_API_KEY", "AIzaSy-abcdefgh\u200b12345678"),
    ("moshi", "MOSHI_KEY", "moshi-key-abcdefgh\t12345678"),
], ids=["non-ascii", "crlf", "zero-width", "tab"])
def test_a_key_that_cannot_go_in_a_header_stops_infer_before_any_row(agent, env, value, tmp_path, monkeypatch, capsys):
    """Every request would fail the same way: one line naming the variable (never the value), exit 2,
    no answer written; the judge refuses such a key the same way."""
    from spear_metrics.cli import main
    from spear_metrics.core.judge import Judge

    from test_infer_limits import make_csv

    data = make_csv(tmp_path / "data", ["good", "good"])
    monkeypatch.setenv(env, value)
    opts = {"moshi": ["-a", "api_key_env=MOSHI_KEY", "-a", "url=ws://127.0.0.1:9/api/chat"],
            "openai-audio": ["-a", "base_url=http://127.0.0.1:9/v1"]}.get(agent, ["-a", "base_url=ws://127.0.0.1:9/v1"])
    out = tmp_path / "out"
    rc = main(["infer", "--agent", agent, *opts, "--data", str(data), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"environment variable {env} holds a" in err and len(err.strip().splitlines()) == 1
    assert value.split()[0][:12] not in err and value not in err
    assert not (out / "audio").exists() and not (out / "metadata.csv").exists()
    monkeypatch.setenv("OPENAI_API_KEY", value)
    with pytest.raises(ValueError, match=r"judge API key \(OPENAI_API_KEY\) holds a") as e:
        Judge("http://127.0.0.1:9/v1", "judge-model")
    assert value.split()[0][:12] not in str(e.value)
