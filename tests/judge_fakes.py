"""A loopback OpenAI-compatible judge that counts its calls and answers with replies built from the
official ``openai`` SDK types (``ChatCompletion``, ``CompletionUsage``), and a judge that trickles
its reply byte by byte."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler

from openai.types.chat import ChatCompletion
from openai.types.completion_usage import CompletionUsage, PromptTokensDetails

from helpers import LoopbackHTTP


def completion(content: str, *, model: str = "judge-model-2024-08-06", fingerprint: str | None = "fp_loopback",
               prompt_tokens: int = 100, completion_tokens: int = 10, audio_tokens: int = 0,
               cached_tokens: int = 0) -> bytes:
    """A chat completion as the service sends it (the SDK's own model, serialised)."""
    c = ChatCompletion(id="chatcmpl-1", object="chat.completion", created=1_700_000_000, model=model,
                       system_fingerprint=fingerprint,
                       choices=[{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                       usage=CompletionUsage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                                             total_tokens=prompt_tokens + completion_tokens,
                                             prompt_tokens_details=PromptTokensDetails(audio_tokens=audio_tokens,
                                                                                       cached_tokens=cached_tokens)))
    return c.model_dump_json().encode()


class CountingJudge(LoopbackHTTP):
    """Answers ``POST /v1/chat/completions`` with ``reply(body) -> (status, bytes)`` (default: a
    ``Result: YES`` completion) and counts the requests (``calls``; bodies in ``requests``)."""

    def __init__(self, reply=None):
        self.reply = reply or (lambda body: (200, completion("The answer matches.\nResult: YES")))
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with outer._lock:
                    outer.requests.append(body)
                status, data = outer.reply(body)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self._serve(Handler, "/v1")

    @property
    def calls(self) -> int:
        with self._lock:
            return len(self.requests)


class TricklingJudge(LoopbackHTTP):
    """Sends the headers of a valid completion at once, then its body one byte every ``every_s``
    seconds (``sent``: bytes sent so far; ``size``: the whole body)."""

    def __init__(self, every_s: float = 0.2):
        self.body = completion("Result: YES")
        self.size = len(self.body)
        self.sent = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(outer.size))
                self.end_headers()
                try:
                    for b in outer.body:
                        self.wfile.write(bytes([b]))
                        self.wfile.flush()
                        outer.sent += 1
                        time.sleep(every_s)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *a):
                pass

        self._serve(Handler, "/v1")


class HugeJudge(LoopbackHTTP):
    """Answers with ``size`` bytes of a chat completion, without Content-Length (read to the end)."""

    def __init__(self, size: int):
        outer = self
        self.size = size

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                head = b'{"choices":[{"index":0,"message":{"role":"assistant","content":"'
                try:
                    self.wfile.write(head)
                    left = outer.size - len(head)
                    while left > 0:
                        n = min(left, 65536)
                        self.wfile.write(b"x" * n)
                        left -= n
                    self.wfile.write(b'"}}]}')
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *a):
                pass

        self._serve(Handler, "/v1")
