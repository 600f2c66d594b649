"""A loopback fake of Kyutai's Moshi server (``/api/chat``), clocked by the samples it receives.

Protocol as Kyutai's ``moshi/moshi/server.py``: after the WebSocket handshake the server sends
``0x00``; the client sends ``0x01`` + Ogg-Opus pages (24 kHz mono); the server decodes them into
80 ms frames and, for every input frame after its first ``lag_frames``, sends one output frame
(``0x01`` + Ogg-Opus) followed by that step's text token (``0x02`` + UTF-8) when there is one.

Behaviour: the output is faint noise (-70 dBFS) until the answer; the answer (real speech) starts
with the output frame produced for the first input frame that brings the received input to
``speech end + delay_s`` (speech end: ``speech_end_s`` when given, else the end of the last 80 ms
input frame whose RMS reached ``threshold_dbfs``), or to ``barge_in_s`` (an interruption: before
the input ends). Everything is in input-sample time: a loaded machine delays the fake's frames,
never changes which frame carries the answer. :attr:`FakeMoshi.sessions` logs each session.

Faults (``fault=``): ``refuse`` (HTTP 403 at the WebSocket handshake), ``no_handshake`` (never
sends 0x00), ``mute`` (handshake, then no output at all), ``drop`` (the TCP connection is cut
after a few answer frames), ``malformed`` (bytes that are not Ogg-Opus in an audio message,
mid-answer), ``error`` (a 0x05 error message mid-session).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import sphn

from fakes.server import ScenarioServer, row_of, speech_end_detector

SR = 24_000
FRAME = 1_920
FRAME_S = FRAME / SR


@dataclass
class MoshiScenario:
    """What the fake does (see the module docstring). ``answer``: (n,) float32 speech at 24 kHz."""

    answer: np.ndarray
    delay_s: float = 0.4
    speech_end_s: Optional[float] = None
    barge_in_s: Optional[float] = None
    threshold_dbfs: float = -35.0
    lag_frames: int = 1
    tokens: tuple[str, ...] = (" Sure", ",", " I", " think", " so", ".")
    handshake: bytes = b"\x00"
    fault: Optional[str] = None
    fault_after_frames: int = 3


@dataclass
class SessionLog:
    row: str = ""
    path: str = ""
    query: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    frames_in: int = 0
    frames_out: int = 0
    answer_input_s: Optional[float] = None  # input time received when the first answer frame was sent
    answer_frame: Optional[int] = None  # its index among the output frames (0-based)
    speech_end_s: Optional[float] = None


class FakeMoshi(ScenarioServer):
    """``with FakeMoshi(programs, default) as fake: MoshiAgent(url=fake.url("/api/chat"))``: the
    scenario of a session is ``programs[row]`` (row = its ``X-Client-Request-Id`` header), else
    ``default``; :attr:`sessions` lists each session's :class:`SessionLog`, :attr:`connections`
    counts handshakes per row."""

    refusal = "Forbidden: this server does not take new sessions\n"

    async def _handle(self, ws: Any) -> None:
        sc = self.program(ws.request.headers)
        path, _, query = ws.request.path.partition("?")
        log = SessionLog(row=row_of(ws.request.headers), path=path, query=query,
                         headers={k.lower(): v for k, v in ws.request.headers.raw_items()})
        self.sessions.append(log)
        if sc.fault == "no_handshake":  # never: until the client gives up or the fake closes
            await ws.wait_closed()
            return
        await ws.send(sc.handshake)
        reader, writer = sphn.OpusStreamReader(SR), sphn.OpusStreamWriter(SR)
        rng = np.random.default_rng(0)
        pending = np.zeros(0, np.float32)
        detect = speech_end_detector(sc.threshold_dbfs)
        answer_pos: Optional[int] = None  # samples of the answer already sent
        tokens = list(sc.tokens)
        async for msg in ws:
            if not isinstance(msg, bytes) or not msg or msg[0] != 1:
                continue
            pending = np.concatenate([pending, np.asarray(reader.append_bytes(msg[1:]), np.float32)])
            while len(pending) >= FRAME:
                frame, pending = pending[:FRAME], pending[FRAME:]
                k = log.frames_in
                log.frames_in += 1
                t_end = log.frames_in * FRAME_S  # input time received so far
                heard_end = detect(frame, t_end) if answer_pos is None else log.speech_end_s
                if answer_pos is None:
                    log.speech_end_s = sc.speech_end_s if sc.speech_end_s is not None else heard_end
                    due = (sc.barge_in_s if sc.barge_in_s is not None else
                           None if log.speech_end_s is None else log.speech_end_s + sc.delay_s)
                    if due is not None and t_end >= due - 1e-9 and sc.fault != "silent":
                        answer_pos = 0
                        log.answer_input_s = t_end
                        log.answer_frame = max(0, k - sc.lag_frames)
                if k < sc.lag_frames or sc.fault == "mute":
                    continue
                if answer_pos is not None and answer_pos < len(sc.answer):
                    out = sc.answer[answer_pos:answer_pos + FRAME]
                    out = np.concatenate([out, np.zeros(FRAME - len(out), np.float32)]).astype(np.float32)
                    answer_pos += FRAME
                else:
                    out = (rng.standard_normal(FRAME) * 10 ** (-70 / 20)).astype(np.float32)
                await ws.send(b"\x01" + bytes(writer.append_pcm(out)))
                log.frames_out += 1
                answering = answer_pos is not None and log.answer_frame is not None
                n_ans = log.frames_out - 1 - (log.answer_frame or 0) if answering else -1
                if answering and tokens and n_ans >= 0:
                    await ws.send(b"\x02" + tokens.pop(0).encode("utf-8"))
                if answering and n_ans == sc.fault_after_frames:
                    if sc.fault == "drop":
                        ws.transport.abort()
                        return
                    if sc.fault == "malformed":
                        await ws.send(b"\x01" + b"this is not an Ogg page")
                    if sc.fault == "error":  # echoes the caller's token, as a careless server might
                        token = log.headers.get("authorization", "")
                        await ws.send(b"\x05" + f"model overloaded ({token})".encode("utf-8"))
