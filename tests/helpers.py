"""Factories that build small real SPEAR inputs from the stereo AMI dialogue fixture.

The dialogue (31 s, 16 kHz, one speaker per channel): FEE016 (channel 0) speaks 0.78-15.48 s,
MEO015 (channel 1) backchannels and then takes the floor at 15.46 s and speaks to the end.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

from spear_datasets.audio import load_audio, write_wav
from spear_datasets.schema import SpearRow, write_metadata

SR = 16_000
QUESTION_END = 15.48  # end of FEE016's long turn (RTTM)
CONTEXT_END = 8.74  # end of MEO015's "Menu, alright." backchannel
ANSWER_START = 15.46  # MEO015 takes the floor


def dialogue(stereo_path: Path) -> np.ndarray:
    return load_audio(stereo_path)  # (2, n)


def make_clips(stereo_path: Path, out: Path, *, pad_s: float = 0.0, answer_s: float = 6.0, name: str = "in") -> tuple[Path, Path]:
    """Write the input clip (0 - 15.48 s, stereo) as ``<name>.wav`` and MEO015's answer
    (15.46 s + answer_s) with ``pad_s`` seconds of digital silence before it; returns their paths."""
    x = dialogue(stereo_path)
    q = out / f"{name}.wav"
    if not q.exists():
        write_wav(q, x[:, : int(QUESTION_END * SR)])
    ans = x[1, int(ANSWER_START * SR) : int((ANSWER_START + answer_s) * SR)]
    ans = np.concatenate([np.zeros(int(round(pad_s * SR)), np.float32), ans])
    a = out / f"answer_pad{pad_s:g}.wav"
    write_wav(a, ans)
    return q, a


def row(audio: str, answer: str, ast: float | None, **kw) -> SpearRow:
    base = dict(audio_path=audio, answer_audio_path=answer, context_end_time=CONTEXT_END, question_end_time=QUESTION_END,
                answer_duration=None, speakers="FEE016|MEO015", conversation_id="ES2004a",
                transcript_question="FEE016: ... a little L_C_D_ display?", transcript_answer="MEO015: Right, I was thinking",
                answer_start_time=ast)
    base.update(kw)
    return SpearRow(**base)


def write_rows(path: Path, rows) -> Path:
    return write_metadata(path, rows)


def known_asr(name: str, texts):
    """A stand-in ASR backend class named ``name`` whose transcripts are ``texts`` in order (cycled
    over the waves of a call); register it under ``name`` in ``spear_metrics.core.asr.ASR_BACKENDS``
    (monkeypatch). For checks of what is done with transcripts, not of the models."""
    from spear_metrics.core.asr import ASRBackend, Transcript

    class Known(ASRBackend):
        def __init__(self, **_):
            pass

        def load(self):
            pass

        def transcribe(self, waves, sr=16000, word_timestamps=False):
            return [Transcript(texts[i % len(texts)], [], name) for i in range(len(waves))]

    Known.name = name
    return Known


class LoopbackHTTP:
    """An HTTP fake on a free loopback port (127.0.0.1) serving ``handler`` (a
    ``BaseHTTPRequestHandler`` class) in a thread: :meth:`_serve` binds it and sets :attr:`url`
    (``http://127.0.0.1:PORT`` + ``path``); the server runs while the object is used as a
    context manager."""

    def _serve(self, handler: type, path: str = "") -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{path}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def hub_env(monkeypatch, tmp_path, url: str) -> None:
    """The Hub client of the download's child process talks to ``url`` only, with a cache and no
    token of this machine's."""
    for k in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")


class FakeHub(LoopbackHTTP):
    """The Hugging Face Hub's file API on a free loopback port, for ``huggingface_hub``'s
    ``snapshot_download`` (``HF_ENDPOINT`` or ``endpoint=``): one dataset at revision
    :attr:`SHA` holding ``files`` (path -> bytes): its info (with ``siblings``, as older clients
    read it), its tree (as newer ones list it), and each file by ``resolve/`` (HEAD and GET).
    ``trickle``: file bodies are sent one byte every 0.1 s until the server is closed (a server
    whose every read arrives in time and whose download never ends). ``refuse``: every request is
    answered ``(status, X-Error-Code)``, e.g. ``(403, "GatedRepo")``, ``(404, "RepoNotFound")``,
    as the Hub answers a gated or unknown repository. Records every request."""

    SHA = "5" * 40

    def __init__(self, repo_id: str, files: dict[str, bytes], *, trickle: bool = False,
                 refuse: tuple[int, str] | None = None):
        outer = self
        self.requests: list[tuple[str, str]] = []
        self.closed = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _send(self, code: int, body: bytes, headers=(), head: bool = False) -> None:
                self.send_response(code)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if head:
                    return
                if not trickle or code != 200 or "/resolve/" not in self.path:
                    self.wfile.write(body)
                    return
                for k in range(len(body)):
                    if outer.closed.wait(0.1):
                        return
                    self.wfile.write(body[k : k + 1])
                    self.wfile.flush()

            def _answer(self, head: bool) -> None:
                outer.requests.append((self.command, self.path))
                if refuse is not None:
                    body = json.dumps({"error": f"{refuse[1]}: {repo_id}"}).encode()
                    return self._send(refuse[0], body, [("X-Error-Code", refuse[1]),
                                                        ("Content-Type", "application/json")], head)
                api = f"/api/datasets/{repo_id}"
                listing = [{"type": "file", "path": f, "size": len(d), "oid": "b" * 40} for f, d in files.items()]
                if self.path.startswith(api + "/tree/"):
                    return self._send(200, json.dumps(listing).encode(), [("Content-Type", "application/json")], head)
                if self.path.startswith(api):
                    info = {"id": repo_id, "sha": outer.SHA, "siblings": [{"rfilename": f} for f in files]}
                    return self._send(200, json.dumps(info).encode(), [("Content-Type", "application/json")], head)
                prefix = f"/datasets/{repo_id}/resolve/"
                if self.path.startswith(prefix):
                    name = self.path[len(prefix):].split("/", 1)[1]
                    if name in files:
                        return self._send(200, files[name], [("X-Repo-Commit", outer.SHA), ("ETag", f'"{hashlib.sha1(files[name]).hexdigest()}"'),
                                                             ("Content-Type", "application/octet-stream")], head)
                self._send(404, b'{"error": "not found"}', [("X-Error-Code", "EntryNotFound")], head)

            def do_GET(self):  # noqa: N802
                self._answer(False)

            def do_HEAD(self):  # noqa: N802
                self._answer(True)

        self._serve(Handler)

    def __exit__(self, *exc):
        self.closed.set()
        super().__exit__(*exc)


class FakeChatServer(LoopbackHTTP):
    """A chat-completions server on a free loopback port (127.0.0.1) answering from a list of
    ``(status, content)`` (the last entry repeats) or from a function ``body -> (status,
    content)``. An entry may carry a third element ``{"headers": {...}, "delay_s": s}``: response
    headers (e.g. ``Retry-After``) and a sleep before answering (a hanging server). Records every
    request body and header. Use as a context manager."""

    def __init__(self, replies):
        self.replies = replies if callable(replies) else list(replies)
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                n = int(self.headers.get("Content-Length", 0))
                outer.requests.append(json.loads(self.rfile.read(n)))
                outer.headers.append(dict(self.headers))
                if callable(outer.replies):
                    entry = outer.replies(outer.requests[-1])
                else:
                    entry = outer.replies[min(len(outer.requests) - 1, len(outer.replies) - 1)]
                status, content = entry[0], entry[1]
                opts = entry[2] if len(entry) > 2 else {}
                if opts.get("delay_s"):
                    time.sleep(opts["delay_s"])
                if status == 200:
                    body = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]})
                else:
                    body = json.dumps({"error": {"message": content}})
                data = body.encode()
                try:
                    self.send_response(status)
                    for k, v in (opts.get("headers") or {}).items():
                        self.send_header(k, str(v))
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting (timeout)
                    pass

            def log_message(self, *a):
                pass

        self._serve(Handler, "/v1")


class OneSessionAtATime:
    """An in-process half-duplex network adapter of a system that serves one session at a time
    (``max_concurrency = 1``, as Kyutai's Python Moshi server): each request is answered with the
    text ``"one at a time"`` and 0.5 s of a 16 kHz tone; ``most_open`` is the most sessions that
    were open at once (every session yields to the event loop while open, so sessions run
    concurrently whenever the loop that runs them allows it)."""

    paced = False
    tail_silence_s = 0.0
    max_wait_s = 10.0
    max_concurrency = 1
    onset_rule = "none (half-duplex: the answer is placed at the question end)"

    def __init__(self):
        self.open = 0
        self.most_open = 0
        self.sessions = 0

    def onset(self, result):
        return None

    async def connect(self, request, sink, config):
        import asyncio

        agent = self
        agent.open += 1
        agent.sessions += 1
        agent.most_open = max(agent.most_open, agent.open)

        class Connection:
            async def send_audio(self, chunk):
                await asyncio.sleep(0)

            async def end_input(self):
                await asyncio.sleep(0)
                sink.text("one at a time")
                sink.audio(0.1 * np.sin(np.arange(SR // 2) / 10.0).astype(np.float32), SR)
                sink.done("stop")

            async def close(self):
                agent.open -= 1

        return Connection()


@contextlib.contextmanager
def serve(demo):
    """A gradio app ``demo`` served on a free port of 127.0.0.1; yields its URL; the server is
    closed on exit, also when the block fails."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        demo.close()


@contextlib.contextmanager
def open_page(url: str, chromium: str, *, viewport: tuple[int, int] = (1400, 1000)):
    """A page of headless Chromium (``chromium``: the system browser's path) opened on ``url``
    (``domcontentloaded``); the browser is closed on exit, also when the block fails."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
            page.goto(url, wait_until="domcontentloaded")
            yield page
        finally:
            browser.close()


@contextlib.contextmanager
def served_page(demo, chromium: str, *, viewport: tuple[int, int] = (1400, 1000)):
    """A gradio app ``demo`` served on a free port of 127.0.0.1 (:func:`serve`) and a page of
    headless Chromium opened on it (:func:`open_page`); the browser and the server are closed on
    exit, also when the block fails."""
    with serve(demo) as url, open_page(url, chromium, viewport=viewport) as page:
        yield page
