"""A loopback fake of Google's Gemini Live API (``BidiGenerateContent``), clocked by the samples it
receives.

Protocol as the ``google-genai`` SDK speaks it (``google/genai/live.py``, ``_live_converters.py``):
the client's first message is ``setup``; the server answers ``setupComplete`` (JSON in binary
frames, as Google's server sends them); the client sends ``realtimeInput`` messages (``audio``
``{data, mimeType}``, ``activityStart``, ``activityEnd``, ``audioStreamEnd``); the server sends
``serverContent`` (``modelTurn.parts[].inlineData``, ``outputTranscription``,
``generationComplete``, ``turnComplete``) and ``goAway``. Like the real server's proto3 JSON
parser it takes field names in lowerCamelCase or snake_case. The key must come in the
``x-goog-api-key`` header; a wrong one closes the session with code 1008 after ``setup``.

Every client message is validated against the SDK's ``google.genai.types.LiveClientMessage``
(from its JSON, so base64 audio is checked too; ``setup.realtimeInputConfig``, which the SDK's own
converter sends though ``LiveClientSetup`` lacks the field, against ``types.RealtimeInputConfig``);
a message the types refuse raises in the handler (surfaced in :attr:`FakeGeminiLive.errors`).
Every server message is built as ``types.LiveServerMessage`` and sent as the SDK serialises it
(``by_alias``: lowerCamelCase); only the ``malformed`` fault bypasses it.

When it answers (the whole answer at once, faster than real time, as the real server does):

- automatic activity detection: once the received input reaches ``speech end + delay_s`` (speech
  end: ``speech_end_s`` when given, else the end of the last received chunk whose RMS reached
  ``threshold_dbfs``), or ``barge_in_s`` (an interruption, before the input ends); both in
  input-sample time;
- push-to-talk: ``delay_s`` seconds (wall clock: no samples flow then) after ``activityEnd``.

Faults (``fault=``): ``refuse`` (HTTP 403 at the WebSocket handshake), ``mute`` (never answers),
``drop`` (TCP cut after a few answer chunks), ``malformed`` (a frame that is not JSON at answer
time), ``bad_rate`` (the answer's mimeType changes rate mid-answer: 24000 then 16000 Hz),
``goaway`` (``goAway`` with ``timeLeft`` 0s at answer time, then the connection closes),
``echo_key`` (closes with 1008 after ``setup``, the reason quoting the key it received),
``turn_first`` (a ``turnComplete`` before the answer's audio), ``late_audio`` (one more audio chunk
right after the final ``turnComplete``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Optional

import numpy as np

from fakes.server import ScenarioServer, row_of, speech_end_detector

PATH_RE = re.compile(r"^/ws/google\.ai\.generativelanguage\.(v1beta|v1alpha)\.GenerativeService\.BidiGenerateContent$")

#: the usage the fake reports with each turnComplete (the Live API's usageMetadata shape)
USAGE = {"promptTokenCount": 90, "responseTokenCount": 40, "totalTokenCount": 130,
         "promptTokensDetails": [{"modality": "AUDIO", "tokenCount": 60}, {"modality": "TEXT", "tokenCount": 30}],
         "responseTokensDetails": [{"modality": "AUDIO", "tokenCount": 35}, {"modality": "TEXT", "tokenCount": 5}]}


def camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def normalized(obj: Any) -> Any:
    """``obj`` with every dict key in lowerCamelCase (proto3 JSON accepts both spellings)."""
    if isinstance(obj, dict):
        return {camel(k): normalized(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [normalized(v) for v in obj]
    return obj


@dataclass
class GeminiScenario:
    """What the fake does (see the module docstring). ``answer``: (n,) float32 speech at 24 kHz."""

    answer: np.ndarray
    key: str = ""
    delay_s: float = 0.4
    speech_end_s: Optional[float] = None
    barge_in_s: Optional[float] = None
    threshold_dbfs: float = -35.0
    chunk_s: float = 0.1
    transcript: tuple[str, ...] = ("Sure, ", "I think ", "so.")
    fault: Optional[str] = None
    fault_after_chunks: int = 2
    #: a text part sent with the first audio chunk (what a native-audio model's thought part looks like)
    text_part: str = ""


@dataclass
class SessionLog:
    row: str = ""
    path: str = ""
    query: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    setup: Optional[dict] = None
    events: list[str] = field(default_factory=list)  # realtimeInput kinds in order ("audio", "activityStart"...)
    mime_types: set[str] = field(default_factory=set)
    chunk_samples: list[int] = field(default_factory=list)
    samples_in: int = 0
    speech_end_s: Optional[float] = None
    answer_input_s: Optional[float] = None  # input time received when the answer was sent


class FakeGeminiLive(ScenarioServer):
    """``with FakeGeminiLive(programs, default) as fake: GeminiLiveAgent(base_url=fake.url(""))``:
    the scenario of a session is ``programs[row]`` (row = its ``X-Client-Request-Id`` header), else
    ``default``; :attr:`sessions` lists each session's :class:`SessionLog`, :attr:`connections`
    counts handshakes per row."""

    refusal = "PERMISSION_DENIED: the caller does not have permission\n"

    def check_request(self, conn: Any, request: Any) -> Any:
        if not PATH_RE.match(request.path.partition("?")[0]):
            return conn.respond(HTTPStatus.NOT_FOUND, "no such method\n")
        return None

    async def _send(self, ws: Any, msg: dict) -> None:
        """``msg`` (lowerCamelCase JSON) built as the SDK's ``LiveServerMessage``, sent as it serialises."""
        from google.genai import types

        model = types.LiveServerMessage.model_validate_json(json.dumps(msg))
        # binary frames, as Google's server
        await ws.send(model.model_dump_json(by_alias=True, exclude_none=True).encode("utf-8"))

    @staticmethod
    def validate_client(raw: Any) -> dict:
        """A received client message, checked against the SDK's types (module docstring); returns it
        with lowerCamelCase keys.

        Raises:
            pydantic.ValidationError: a message the SDK's types refuse.
        """
        from google.genai import types

        msg = normalized(json.loads(raw))
        check = json.loads(json.dumps(msg))
        setup = check.get("setup")
        if isinstance(setup, dict) and "realtimeInputConfig" in setup:
            types.RealtimeInputConfig.model_validate_json(json.dumps(setup.pop("realtimeInputConfig")))
        types.LiveClientMessage.model_validate_json(json.dumps(check))
        return msg

    async def _answer(self, ws: Any, log: SessionLog, sc: GeminiScenario) -> None:
        log.answer_input_s = log.samples_in / 16_000
        if sc.fault == "malformed":
            await ws.send('{"serverContent": {"modelTurn": ')
            return
        if sc.fault == "goaway":
            await self._send(ws, {"goAway": {"timeLeft": "0s"}})
            await ws.close(1000)
            return
        step = max(1, int(sc.chunk_s * 24_000))
        pcm = np.round(np.clip(sc.answer, -1, 1) * 32767).astype("<i2")
        if sc.fault == "turn_first":  # a turnComplete before any audio (the audio follows at once)
            await self._send(ws, {"serverContent": {"turnComplete": True}})
        for k, s in enumerate(range(0, len(pcm), step)):
            rate = 16_000 if sc.fault == "bad_rate" and k >= 1 else 24_000
            part = {"inlineData": {"mimeType": f"audio/pcm;rate={rate}",
                                   "data": base64.b64encode(pcm[s:s + step].tobytes()).decode("ascii")}}
            parts = [part, {"text": sc.text_part}] if sc.text_part and k == 0 else [part]
            msg: dict[str, Any] = {"serverContent": {"modelTurn": {"parts": parts}}}
            if k < len(sc.transcript):
                msg["serverContent"]["outputTranscription"] = {"text": sc.transcript[k]}
            await self._send(ws, msg)
            if sc.fault == "drop" and k + 1 == sc.fault_after_chunks:
                ws.transport.abort()
                return
        await self._send(ws, {"serverContent": {"generationComplete": True}})
        await self._send(ws, {"serverContent": {"turnComplete": True}, "usageMetadata": USAGE})
        if sc.fault == "late_audio":  # one more chunk right after turnComplete (its first chunk again)
            part = {"inlineData": {"mimeType": "audio/pcm;rate=24000",
                                   "data": base64.b64encode(pcm[:step].tobytes()).decode("ascii")}}
            await self._send(ws, {"serverContent": {"modelTurn": {"parts": [part]}}})

    async def _handle(self, ws: Any) -> None:
        sc = self.program(ws.request.headers)
        path, _, query = ws.request.path.partition("?")
        log = SessionLog(row=row_of(ws.request.headers), path=path, query=query,
                         headers={k.lower(): v for k, v in ws.request.headers.raw_items()})
        self.sessions.append(log)
        first = self.validate_client(await ws.recv())
        log.setup = first.get("setup")
        if (sc.key and log.headers.get("x-goog-api-key") != sc.key) or sc.fault == "echo_key":
            # the reason echoes the key it got, as a careless server might (the adapter masks it)
            await ws.close(1008, f"API key not valid: {log.headers.get('x-goog-api-key', '')}")
            return
        await self._send(ws, {"setupComplete": {}})
        ptt = bool(((log.setup or {}).get("realtimeInputConfig") or {}).get("automaticActivityDetection", {}).get("disabled"))
        detect = speech_end_detector(sc.threshold_dbfs)
        answered = False
        async for raw in ws:
            msg = self.validate_client(raw)
            rt = msg.get("realtimeInput") or {}
            for kind in ("activityStart", "activityEnd", "audioStreamEnd"):
                if kind in rt:
                    log.events.append(kind)
            if "audio" in rt:
                log.events.append("audio")
                log.mime_types.add(rt["audio"].get("mimeType", ""))
                x = np.frombuffer(base64.b64decode(rt["audio"]["data"]), dtype="<i2").astype(np.float32) / 32768
                log.chunk_samples.append(len(x))
                log.samples_in += len(x)
                heard = detect(x, log.samples_in / 16_000)
                if answered or ptt or sc.fault == "mute":
                    continue
                log.speech_end_s = sc.speech_end_s if sc.speech_end_s is not None else heard
                due = sc.barge_in_s if sc.barge_in_s is not None else (
                    None if log.speech_end_s is None else log.speech_end_s + sc.delay_s)
                if due is not None and log.samples_in / 16_000 >= due - 1e-9:
                    answered = True
                    await self._answer(ws, log, sc)
            if ptt and "activityEnd" in rt and not answered and sc.fault != "mute":
                answered = True
                await asyncio.sleep(sc.delay_s)
                await self._answer(ws, log, sc)
