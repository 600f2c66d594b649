"""FDB v2 conversation engine: a live examiner (Role A) and an examinee (Role B), both network
adapters, audio relayed both ways in real time on the engine's clock.

Upstream (``DanielLin94144/Full-Duplex-Bench`` ``v2/orchestrator.js``, ``v2/adapters/gptRealtime_adapter.js``,
``v2/run_dataset.sh``) relays 48 kHz PCM over WebRTC: each role's audio is buffered for the other
side and a 100 ms pacer emits ten 10 ms frames per tick (zero-filled when the buffer is short);
``A.wav``/``B.wav`` record what each role produced, ``combined.wav`` is the stereo mix (A left, B
right). This engine does the same on the shared session code
(:mod:`spear_metrics.agents.duplex`): every ``tick_ms`` on an absolute schedule (tick ``k`` at
``t0 + k * tick``) it moves ``tick`` seconds of each side's output (FIFO, zero-filled) to the
other side's :meth:`~spear_metrics.agents.duplex.DuplexConnection.send_audio` and records it:
sample ``i`` of ``A.wav`` is what the examinee heard at ``i / wire_rate`` s, and likewise for
``B.wav``, so both channels share one time axis.

Rules (upstream's task ``settings``; upstream's scripts carry them in the prompt only, this engine
enforces them, :class:`Rules`):

- an examiner *turn* is a run of examiner speech (ticks whose RMS level is at or above
  ``speech_dbfs``) with no gap of ``turn_gap_s`` or more; the conversation ends when the examiner starts turn
  ``turn_limit + 1`` (that turn is neither relayed nor recorded), or after the examiner's
  ``turn_limit``-th turn once both sides have been quiet ``end_silence_s``;
- ``max_duration_sec``: the conversation ends at this stream time (``--max-duration-s`` overrides;
  upstream's runner stops after ``DEFAULT_DURATION`` = 120 s);
- ``examiner_is_interruptible = false``: while the examiner is in a turn, the examinee's audio
  is recorded in ``B.wav`` but the examiner is sent zeros (it cannot be barged in on);
- ``examiner_can_interrupt = false``: while the examinee is in a turn (same definition) and the
  examiner is not, the examiner's audio waits in its buffer (it cannot start over the examinee).

Relay delay of an output chunk: the wall time its first sample was sent to the other side minus
the time it would start in an ideal playback (``max(its arrival, the end of the previous
chunk)``, the arrival rule of :func:`spear_metrics.agents.duplex.playback_timeline`), in s; held
chunks (``examiner_can_interrupt = false``) are left out.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import math
import os
import resource
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from spear_metrics.agents.base import AgentError
from spear_metrics.agents.duplex import AudioRequest, LiveInput, OutputSink, SessionConfig
from spear_metrics.agents.openai_realtime import REALTIME_RATE, OpenAIRealtimeAgent, RealtimeConnection
from spear_metrics.full_duplex_v2.tasks import EXAMINEE_SYSTEM_PROMPT, RUN_LOG, Settings, Task

#: upstream's examiner model (``v2/.env.example`` ``OPENAI_REALTIME_MODEL``)
UPSTREAM_EXAMINER_MODEL = "gpt-realtime-2025-08-28"
#: upstream's voices (``v2/.env.example`` ``VOICE_A`` / ``VOICE_B``)
UPSTREAM_VOICE_A, UPSTREAM_VOICE_B = "echo", "shimmer"
#: upstream's wire rate (Hz, ``WIRE_SAMPLE_RATE``); this engine's default is 24 kHz (see docs)
UPSTREAM_WIRE_RATE = 48_000
DEFAULT_WIRE_RATE = 24_000
#: upstream's examiner turn detection per ``--examiner-mode`` (``gptRealtime_adapter.js``);
#: ``slow`` leaves threshold/padding/silence to the server's defaults
VAD_MODES: dict[str, dict[str, Any]] = {
    "slow": {"type": "server_vad", "create_response": True, "interrupt_response": True},
    "fast": {"type": "server_vad", "create_response": True, "interrupt_response": False, "threshold": 0.6,
             "prefix_padding_ms": 1200, "silence_duration_ms": 600},
}


class ConversationError(AgentError):
    """A conversation could not finish (one line); its unit fails with this reason."""


# ----------------------------------------------------------------------------- the examiner


class ExaminerConnection(RealtimeConnection):
    """A Realtime session as upstream's examiner: records the model id the service returns
    (``session.created`` / ``session.updated`` ``session.model``)."""

    served_model: Optional[str] = None

    def _handle(self, ev: dict[str, Any]) -> None:
        if ev.get("type") in ("session.created", "session.updated"):
            model = (ev.get("session") or {}).get("model")
            if isinstance(model, str) and model:
                self.served_model = model[:200]
        super()._handle(ev)


class ExaminerRealtimeAgent(OpenAIRealtimeAgent):
    """``openai-realtime`` as upstream's examiner (Role A): the session's instructions are the
    task's (:meth:`Task.examiner_instructions`) with nothing prepended, upstream's voice and turn
    detection per ``vad_mode`` (:data:`VAD_MODES`), and a ``response.create`` once the session is
    set up, so the examiner speaks first (upstream's ``autostart``). Other options as
    :class:`~spear_metrics.agents.openai_realtime.OpenAIRealtimeAgent` (its ``vad_*`` options are
    replaced by ``vad_mode``'s turn detection).

    Raises:
        ValueError: an unknown ``vad_mode``.
    """

    def __init__(self, model: str = UPSTREAM_EXAMINER_MODEL, voice: str = UPSTREAM_VOICE_A, vad_mode: str = "slow",
                 **kw: Any):
        if vad_mode not in VAD_MODES:
            raise ValueError(f"vad_mode must be one of {', '.join(VAD_MODES)}, got {vad_mode!r}")
        super().__init__(model=model, voice=voice, **kw)
        self.vad_mode = vad_mode
        self.vad = dict(VAD_MODES[vad_mode])

    def session_update(self, request: AudioRequest) -> dict[str, Any]:
        session: dict[str, Any] = {
            "type": "realtime",
            "instructions": request.instructions or "",
            "audio": {
                "input": {"format": {"type": "audio/pcm", "rate": REALTIME_RATE}, "turn_detection": dict(self.vad)},
                "output": {"format": {"type": "audio/pcm", "rate": REALTIME_RATE}, "voice": self.voice},
            },
        }
        return {"type": "session.update", "session": session}

    async def connect(self, request: AudioRequest, sink: OutputSink, config: SessionConfig) -> ExaminerConnection:
        from spear_metrics.agents.net import with_retries

        conn = ExaminerConnection(self, request, sink, b"")
        await with_retries(conn.open, self.retry)
        await conn._send({"type": "response.create"})  # upstream's autostart: the examiner opens
        return conn


# ----------------------------------------------------------------------------- rules and relay


@dataclass(frozen=True)
class Rules:
    """How one conversation runs (durations in s; levels in dBFS). See the module docstring."""

    turn_limit: int = 5
    max_duration_s: float = 60.0
    examiner_can_interrupt: bool = True
    examiner_is_interruptible: bool = False
    speech_dbfs: float = -40.0
    turn_gap_s: float = 1.0
    end_silence_s: float = 4.0

    @classmethod
    def from_settings(cls, settings: Settings, *, max_duration_s: Optional[float] = None, **kw: Any) -> "Rules":
        return cls(turn_limit=settings.turn_limit,
                   max_duration_s=float(max_duration_s if max_duration_s is not None else settings.max_duration_sec),
                   examiner_can_interrupt=settings.examiner_can_interrupt,
                   examiner_is_interruptible=settings.examiner_is_interruptible, **kw)

    def __post_init__(self) -> None:
        if not (self.max_duration_s > 0 and math.isfinite(self.max_duration_s)):
            raise ValueError(f"max_duration_s must be > 0, got {self.max_duration_s}")
        if self.turn_limit < 1:
            raise ValueError(f"turn_limit must be >= 1, got {self.turn_limit}")


def frame_loud(x: np.ndarray, dbfs: float) -> bool:
    """``True`` when the RMS level of ``x`` (float samples, full scale 1.0) is at or above ``dbfs``."""
    if x.size == 0:
        return False
    rms = float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))
    return rms > 0 and 20.0 * math.log10(rms) >= dbfs


class _Fifo:
    """One side's output on its way to the other side: wire-rate mono samples, with each output
    chunk's arrival time for the relay delay."""

    def __init__(self) -> None:
        self.parts: collections.deque = collections.deque()  # [samples, arrival_s, ideal_start_s or None if started]
        self.n = 0
        self.ideal_end = 0.0

    def push(self, x: np.ndarray, arrival_s: float, rate: int) -> None:
        if x.size == 0:
            return
        ideal = max(arrival_s, self.ideal_end)
        self.ideal_end = ideal + x.size / rate
        self.parts.append([x, arrival_s, ideal])
        self.n += x.size

    def take(self, n: int, sent_s: float, delays: Optional[list]) -> np.ndarray:
        out = np.zeros(n, np.float32)
        i = 0
        while i < n and self.parts:
            part = self.parts[0]
            if part[2] is not None:
                if delays is not None:
                    delays.append(sent_s - part[2])
                part[2] = None
            x = part[0]
            k = min(n - i, x.size)
            out[i:i + k] = x[:k]
            i += k
            if k == x.size:
                self.parts.popleft()
            else:
                part[0] = x[k:]
        self.n -= i
        return out


@dataclass
class _Side:
    role: str  # "A" (examiner) or "B" (examinee)
    agent: Any
    sink: OutputSink
    conn: Any = None
    fifo: _Fifo = field(default_factory=_Fifo)
    seen: int = 0  # output chunks of the sink moved into the fifo
    conv: Optional[LiveInput] = None
    last_loud_s: float = -1e9
    recorded: list = field(default_factory=list)

    def pull(self, rate: int) -> None:
        chunks = self.sink.result.chunks
        while self.seen < len(chunks):
            c = chunks[self.seen]
            self.seen += 1
            if self.conv is None or self.conv.rate_in != c.sample_rate:
                self.conv = LiveInput(c.sample_rate, rate)
            self.fifo.push(self.conv.take(c.audio), c.received_s, rate)


def _stats(xs: list[float]) -> dict[str, Any]:
    if not xs:
        return {"n": 0, "median_s": None, "p99_s": None, "max_s": None}
    a = np.asarray(xs, np.float64)
    return {"n": int(a.size), "median_s": round(float(np.median(a)), 4), "p99_s": round(float(np.percentile(a, 99)), 4),
            "max_s": round(float(a.max()), 4)}


@dataclass
class Conversation:
    """What one conversation produced: ``a``/``b`` the recorded channels (float32 mono at
    ``wire_rate``), ``manifest`` (JSON-able)."""

    a: np.ndarray
    b: np.ndarray
    wire_rate: int
    manifest: dict[str, Any]


async def _timed(aw: Any, seconds: float, what: str) -> Any:
    try:
        return await asyncio.wait_for(aw, seconds)
    except asyncio.TimeoutError:
        raise ConversationError(f"{what} took longer than {seconds:g} s") from None


async def run_conversation(task: Task, examiner: Any, examinee: Any, rules: Rules, *, wire_rate: int = DEFAULT_WIRE_RATE,
                           tick_ms: float = 40.0, examinee_instructions: str = EXAMINEE_SYSTEM_PROMPT,
                           connect_timeout_s: float = 60.0, send_timeout_s: float = 5.0,
                           clock: Callable[[], float] = time.monotonic) -> Conversation:
    """Run one conversation (module docstring) between network adapters ``examiner`` and ``examinee``.

    Args:
        task: the task (its examiner instructions go to the examiner's request).
        examiner, examinee: network adapters (``async connect``), each given a live
            :class:`~spear_metrics.agents.duplex.AudioRequest` at ``wire_rate``.
        rules: :class:`Rules`.
        wire_rate: the relay's rate (Hz) and the recordings' rate.
        tick_ms: relay tick (ms).
        connect_timeout_s: longest time for both sides to connect (s).
        send_timeout_s: longest time one tick's send may take (s): a side that stops reading fails
            the conversation instead of stalling it.

    Returns:
        :class:`Conversation`.

    Raises:
        ConversationError / AgentError: a side failed (refused, dropped, protocol error, hung,
            more than the cap + 60 s of audio buffered ahead of playback), or an adapter without
            live-input support (``live_input``).
    """
    for who, agent in (("examiner", examiner), ("examinee", examinee)):
        if not getattr(agent, "live_input", False):
            raise ConversationError(f"the {who} adapter ({type(agent).__name__}) cannot take live input "
                                    "(no live_input support: it would stream its placeholder instead of the other side)")
    hop = max(1, round(tick_ms * wire_rate / 1000.0))
    tick = hop / wire_rate
    placeholder = np.zeros((1, hop), np.float32)
    req_a = AudioRequest(placeholder, wire_rate, instructions=task.examiner_instructions(), row_id=f"{task.id}.A", live=True)
    req_b = AudioRequest(placeholder, wire_rate, instructions=examinee_instructions, row_id=f"{task.id}.B", live=True)
    cfg = SessionConfig(chunk_ms=tick * 1000.0, paced=True, time_synchronous=True)
    A = _Side("A", examiner, OutputSink(wire_rate, clock=clock, live=True))
    B = _Side("B", examinee, OutputSink(wire_rate, clock=clock, live=True))
    events: list[dict[str, Any]] = []
    delays: list[float] = []
    wall0 = time.time()
    try:
        conns = await _timed(asyncio.gather(examiner.connect(req_a, A.sink, cfg), examinee.connect(req_b, B.sink, cfg),
                                            return_exceptions=True), connect_timeout_s, "connecting both sides")
        for side, c in zip((A, B), conns):
            if not isinstance(c, BaseException):
                side.conn = c
        for side, c in zip((A, B), conns):
            if isinstance(c, BaseException):
                raise ConversationError(f"{'examiner' if side.role == 'A' else 'examinee'} could not connect: "
                                        f"{' '.join(str(c).split())[:200] or type(c).__name__}") from None
        t0 = A.sink.start()
        B.sink._t0 = t0  # one clock for both sides
        B.sink.result.started_at = t0
        turns = 0
        in_turn_a = False
        held = False
        end_reason = "max_duration"
        n_ticks = int(math.ceil(rules.max_duration_s / tick - 1e-9))
        backlog_limit = int((rules.max_duration_s + 60.0) * wire_rate)  # samples buffered ahead of playback
        lag_max = 0.0
        k = 0
        for k in range(n_ticks):
            due = t0 + k * tick
            delay = due - clock()
            await asyncio.sleep(delay if delay > 0 else 0)
            for _ in range(2):
                await asyncio.sleep(0)
            now = clock() - t0
            lag_max = max(lag_max, now - k * tick)
            stream_s = k * tick
            A.sink.check()
            B.sink.check()
            A.pull(wire_rate)
            B.pull(wire_rate)
            for side in (A, B):  # a server sending far faster than real time would grow the buffer without end
                if side.fifo.n > backlog_limit:
                    raise ConversationError(f"the {'examiner' if side.role == 'A' else 'examinee'} sent "
                                            f"{side.fifo.n / wire_rate:.0f} s of audio ahead of the conversation "
                                            f"(limit {backlog_limit / wire_rate:.0f} s)")
            # B's frame first: whether the examinee is in a turn decides whether A may start
            b_frame = B.fifo.take(hop, now, delays)
            b_loud = frame_loud(b_frame, rules.speech_dbfs)
            if b_loud:
                B.last_loud_s = stream_s
            b_in_turn = stream_s - B.last_loud_s < rules.turn_gap_s
            a_in_turn_before = stream_s - A.last_loud_s < rules.turn_gap_s
            hold = not rules.examiner_can_interrupt and b_in_turn and not a_in_turn_before
            if hold != held:
                events.append({"event": "examiner_held" if hold else "examiner_released", "stream_s": round(stream_s, 3),
                               "wall_s": round(now, 4)})
                held = hold
            a_frame = np.zeros(hop, np.float32) if hold else A.fifo.take(hop, now, delays)
            a_loud = frame_loud(a_frame, rules.speech_dbfs)
            if a_loud and not a_in_turn_before:
                if turns >= rules.turn_limit:
                    end_reason = "turn_limit"
                    events.append({"event": "examiner_turn_refused", "turn": turns + 1, "stream_s": round(stream_s, 3),
                                   "wall_s": round(now, 4)})
                    break
                turns += 1
                events.append({"event": "examiner_turn_start", "turn": turns, "stream_s": round(stream_s, 3),
                               "wall_s": round(now, 4)})
            if a_loud:
                A.last_loud_s = stream_s
            a_in_turn = stream_s - A.last_loud_s < rules.turn_gap_s
            if in_turn_a and not a_in_turn:
                events.append({"event": "examiner_turn_end", "turn": turns, "stream_s": round(A.last_loud_s + tick, 3),
                               "wall_s": round(now, 4)})
            in_turn_a = a_in_turn
            to_a = b_frame
            if not rules.examiner_is_interruptible and a_in_turn and b_loud:
                to_a = np.zeros(hop, np.float32)  # recorded in B.wav, not heard by the examiner
                if not events or events[-1]["event"] != "examinee_masked":
                    events.append({"event": "examinee_masked", "stream_s": round(stream_s, 3), "wall_s": round(now, 4)})
            A.recorded.append(a_frame)
            B.recorded.append(b_frame)
            await _timed(asyncio.gather(A.conn.send_audio(to_a[None, :]), B.conn.send_audio(a_frame[None, :])),
                         send_timeout_s, "relaying one tick")
            A.sink.sent(hop)
            B.sink.sent(hop)
            quiet = min(stream_s - A.last_loud_s, stream_s - B.last_loud_s)
            if turns >= rules.turn_limit and not a_in_turn and quiet >= rules.end_silence_s:
                end_reason = "turn_limit"
                k += 1
                break
        else:
            k = n_ticks
        events.append({"event": "end", "reason": end_reason, "stream_s": round(len(A.recorded) * tick, 3),
                       "wall_s": round(clock() - t0, 4)})
        A.sink.check()
        B.sink.check()
    finally:
        await asyncio.gather(*(_close(s.conn) for s in (A, B) if s.conn is not None))
    a = np.concatenate(A.recorded) if A.recorded else np.zeros(0, np.float32)
    b = np.concatenate(B.recorded) if B.recorded else np.zeros(0, np.float32)
    ra, rb = A.sink.finished(), B.sink.finished()

    def side_info(side: _Side, res: Any) -> dict[str, Any]:
        info = {"served_model": getattr(side.conn, "served_model", None), "text": res.text}
        capped(info, "text_events", res.text_events,
               lambda e: {"text": e.text, "wall_s": round(e.received_s, 4), "stream_s": round(e.input_sent_s, 4)})
        capped(info, "output_chunks", res.chunks,
               lambda c: [round(c.received_s, 4), round(c.input_sent_s, 4), int(c.audio.shape[1]), c.sample_rate])
        return info

    manifest = {
        "task_id": task.id, "split": task.split, "wire_rate_hz": wire_rate, "tick_s": tick,
        "duration_s": round(a.size / wire_rate, 4), "end_reason": end_reason, "examiner_turns": turns,
        "rules": asdict(rules), "started_utc": wall0,
        "relay_delay": _stats(delays), "send_lag_max_s": round(lag_max, 4),
        "events": events,
        "clocks": "wall_s: seconds since t0 on the monotonic clock; stream_s: seconds of audio relayed",
        "examiner": side_info(A, ra), "examinee": side_info(B, rb),
    }
    capped(manifest, "relay_delays_s", delays, lambda d: round(d, 4))
    return Conversation(a, b, wire_rate, manifest)


#: most entries a manifest keeps of each per-chunk list (each side's ``output_chunks`` and
#: ``text_events``, ``relay_delays_s``): a side sending audio or text in tiny pieces would
#: otherwise grow the manifest without bound
MAX_MANIFEST_ENTRIES = 10_000


def capped(into: dict[str, Any], key: str, items: Sequence[Any], entry: Callable[[Any], Any]) -> None:
    """``into[key]`` = ``entry(x)`` of the first :data:`MAX_MANIFEST_ENTRIES` of ``items``; when
    there are more, ``into[key + "_capped"]`` = ``{"kept", "total"}`` records that the cap was hit
    (the statistics, e.g. ``relay_delay``, are computed from all of them)."""
    into[key] = [entry(x) for x in items[:MAX_MANIFEST_ENTRIES]]
    if len(items) > MAX_MANIFEST_ENTRIES:
        into[f"{key}_capped"] = {"kept": MAX_MANIFEST_ENTRIES, "total": len(items)}


async def _close(conn: Any) -> None:
    try:
        await asyncio.wait_for(conn.close(), 5.0)
    except BaseException:
        pass


# ----------------------------------------------------------------------------- a run of conversations


def adapter_description(name: str, agent: Any, options: dict[str, Any]) -> dict[str, Any]:
    """What the manifest says of an adapter: its name, options (secrets masked), and the settings
    that shape a conversation where the adapter has them (model, voice, VAD, seeds)."""
    from spear_metrics.core.secrets import mask_secrets

    out: dict[str, Any] = {"adapter": name, "options": {k: mask_secrets(str(v)) for k, v in sorted(options.items())}}
    for attr in ("model", "voice", "vad_mode", "vad", "seed", "text_seed", "audio_seed", "url", "base_url"):
        v = getattr(agent, attr, None)
        if v is not None and not callable(v):
            out[attr] = mask_secrets(v) if isinstance(v, str) else v
    return out


def write_wav(path: Path, x: np.ndarray, rate: int) -> None:
    """``x`` ``(n,)`` or ``(n, C)`` float in [-1, 1] -> 16-bit PCM WAV at ``rate`` Hz."""
    import soundfile as sf

    sf.write(str(path), np.clip(x, -1.0, 1.0), rate, subtype="PCM_16")


def save_conversation(conv: Conversation, folder: Path) -> None:
    """Write ``A.wav``, ``B.wav``, ``combined.wav`` (stereo, A left, B right, as upstream's mix)
    and, last, ``manifest.json`` into ``folder`` (created), each file atomically and recorded in
    the output folder's manifest when one is open (:func:`spear_datasets.files.atomic_path`): a
    file there that this tool did not write is never replaced (``OutFolderError``, the unit fails).
    A conversation is whole when its ``manifest.json`` is there and its unit is logged ``ok``.

    Raises:
        spear_datasets.files.OutputError: a file cannot be written (or is not this tool's).
    """
    from spear_datasets.files import atomic_path

    for name, x in (("A.wav", conv.a), ("B.wav", conv.b), ("combined.wav", np.stack([conv.a, conv.b], axis=1))):
        with atomic_path(folder / name, tmp_suffix=".wav") as tmp:
            write_wav(tmp, x, conv.wire_rate)
    with atomic_path(folder / "manifest.json") as tmp:
        tmp.write_text(json.dumps(conv.manifest, indent=1, ensure_ascii=False), encoding="utf-8")


LOG = RUN_LOG


def shard_log(shard: int) -> str:
    """The log of shard ``K`` (``--shard K/N``) in the output folder: ``.work/rank-K.jsonl``."""
    from spear_datasets.ownership import WORK_DIR

    return f"{WORK_DIR}/rank-{int(shard)}.jsonl"


def read_log(out: Path, wanted: Optional[set[str]] = None, *, shards: bool = True) -> dict[str, dict[str, Any]]:
    """Last record per task id of the shards' logs (:func:`shard_log`, with ``shards``) and then
    ``out/conversations.jsonl`` (the run without ``--shard``), an ``ok`` never replaced by a
    ``failed`` (a shard may run a conversation again after the run without ``--shard`` failed it,
    and its log is read first), read by the project's bounded
    work-log reader (:func:`spear_metrics.core.records.read_jsonl`: one line at a time, a torn,
    non-object or over-long line skipped); with ``wanted``, only those task ids (what is kept in
    memory is bounded by the tasks asked for, whatever the files hold)."""
    from spear_metrics.core.records import read_jsonl, read_work_logs, replaces

    recs: dict[str, dict[str, Any]] = {}
    p = out / LOG
    logs = [read_work_logs(out / Path(shard_log(0)).parent)] if shards else []
    if p.is_file():
        logs.append(read_jsonl(p))
    for log in logs:
        for r in log:
            tid = r.get("task_id")
            if isinstance(tid, str) and r.get("status") in ("ok", "failed") and (wanted is None or tid in wanted):
                prev = recs.get(tid)  # a started/stopped record (:func:`process_ends`) finishes nothing
                if replaces(prev, r):
                    recs[tid] = r  # never an ok by a failure: the logs' order is not the order of the runs
    return recs


def process_ends(out: Path) -> Any:
    """The "process ended twice on this conversation" rule of every inference loop
    (:class:`spear_metrics.agents.rows.ProcessEnds`, keyed by ``task_id``) over the run's records:
    the ``started``/``stopped`` records of the work logs ``out/.work/rank-<r>.jsonl`` (the run
    without ``--shard`` writes its own to ``rank-0.jsonl``, a shard ``K`` beside its units in
    ``rank-K.jsonl``, :func:`shard_log`) and the finished units of ``out/conversations.jsonl``."""
    from spear_metrics.agents.rows import ProcessEnds
    from spear_metrics.core.records import read_jsonl, read_work_logs

    def records() -> Any:
        yield from read_work_logs(out / Path(shard_log(0)).parent)
        if (out / LOG).is_file():
            yield from read_jsonl(out / LOG)

    return ProcessEnds(records(), key="task_id")


def log_unit(out: Path, rec: dict[str, Any], name: str = LOG) -> None:
    """Append one finished unit's record to ``out/conversations.jsonl`` (or ``out/<name>``: a
    shard's log, :func:`shard_log`; flushed and fsynced; secrets masked; the file recorded as
    this tool's in the open output folder, before it is first written).

    Raises:
        spear_datasets.files.OutputError: the log cannot be written (a whole-run problem).
    """
    from spear_datasets.files import record_write
    from spear_metrics.core.records import AppendLog

    record_write(out / name)
    log = AppendLog(out / name)
    try:
        log.write([rec])
    finally:
        log.close()


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@dataclass
class ConversationJob:
    """One conversation as a unit of work (:meth:`run`): fresh adapters from ``make_examiner`` /
    ``make_examinee``, then :func:`run_conversation` with ``rules`` and ``kw``; run on this event
    loop or, whole, in a session process (:meth:`spear_metrics.agents.processes.SessionPool.run_job`:
    the job and the :class:`Conversation` it returns travel pickled)."""

    task: Task
    make_examiner: Callable[[], Any]
    make_examinee: Callable[[], Any]
    rules: Rules
    kw: dict[str, Any]

    async def run(self, agent: Any = None) -> Conversation:
        """The conversation (``agent``, the session process's adapter, is not used: each
        conversation builds its own two)."""
        return await run_conversation(self.task, self.make_examiner(), self.make_examinee(), self.rules, **self.kw)


class RunConflict(ValueError):
    """``out`` holds conversations of another run (other tasks file, adapters, rules or relay
    settings): one line; ``overwrite`` replaces them."""


def run_fingerprint(describe: Optional[dict[str, Any]], rules: Sequence[Rules], conversation_kw: dict[str, Any]
                    ) -> dict[str, Any]:
    """What binds a run to its output folder (``out/.work/run.json``): the adapters' and the tasks
    file's description (``describe``: adapters with their options, secrets masked, the tasks
    file's sha256...), the tasks' rules (each different one once) and the relay settings (wire rate, tick, the examinee's
    instructions). The same fingerprint resumes; another one is refused (:class:`RunConflict`)."""
    import hashlib

    instructions = conversation_kw.get("examinee_instructions", EXAMINEE_SYSTEM_PROMPT)
    distinct = sorted({json.dumps(asdict(r), sort_keys=True) for r in rules})
    return {"mode": "fdb v2 conversations", "describe": describe or {}, "rules": [json.loads(r) for r in distinct],
            "wire_rate": conversation_kw.get("wire_rate", DEFAULT_WIRE_RATE), "tick_ms": conversation_kw.get("tick_ms", 40.0),
            "examinee_instructions_sha256": hashlib.sha256(str(instructions).encode("utf-8")).hexdigest()}


async def run_conversations(tasks: list[Task], out: str | os.PathLike, make_examiner: Callable[[], Any],
                            make_examinee: Callable[[], Any], rules_for: Callable[[Task], Rules], *,
                            concurrency: int = 1, retry_failed: bool = False, overwrite: bool = False,
                            deadline_grace_s: float = 30.0, describe: Optional[dict[str, Any]] = None,
                            on_done: Optional[Callable[[dict], None]] = None,
                            bad: Sequence[tuple[str, str]] = (), shard: Optional[tuple[int, int]] = None,
                            slots: Sequence[Any] = (), sessions: Optional[Callable[..., Any]] = None,
                            **conversation_kw: Any) -> dict[str, Any]:
    """Run the conversations of ``tasks`` into ``out/<task id>/``, ``concurrency`` at a time, each a
    resumable unit logged in ``out/conversations.jsonl`` as it finishes (``ok`` or ``failed`` with a
    one-line ``reason``). A task already ``ok`` (log line and folder) is skipped; one ``failed`` is
    skipped unless ``retry_failed``. Each conversation has a total deadline: its duration cap +
    the connect timeout + ``deadline_grace_s``; past it the unit fails ("timed out").

    Each conversation is logged ``started`` (flushed) before it runs or is handed to a session
    process; one whose starts ended the process twice (``os._exit`` or a crash in an adapter, an
    OOM kill, kill -9: :func:`process_ends`, the rule of every inference loop) is logged failed with
    that reason instead of being run again (``retry_failed`` runs it again). A conversation
    stopped by Ctrl-C or by another session process's end is logged ``stopped``: not counted.

    ``out`` is owned by the run for its duration (:func:`spear_metrics.core.records.claim_out`,
    the rule of every output folder): it must be new, empty or this command's; a live process
    already writing it is refused; a run with another fingerprint (:func:`run_fingerprint`) is
    refused unless ``overwrite``, which first removes exactly what earlier runs recorded as
    written there. Every file written is recorded.

    Args:
        make_examiner / make_examinee: build a fresh adapter per conversation.
        rules_for: the :class:`Rules` of a task.
        describe: adapter descriptions for the manifests (``examiner``/``examinee`` keys).
        bad: ``(position, reason)`` of unreadable task entries: each logged once as a failed unit.
        shard: ``(k, n)`` (``--shard k/n``): only the tasks of shard ``k``
            (:func:`spear_metrics.core.records.in_shard` of the task id), beside the other shards,
            which may write ``out`` at the same time (:func:`spear_metrics.core.records.claim_shard`),
            logged to ``.work/rank-k.jsonl`` (:func:`shard_log`). The run without ``shard`` reads
            every shard's log, runs what no shard finished and copies the shards' records that
            ``conversations.jsonl`` lacks into it.
        slots: :class:`~spear_metrics.agents.processes.ProviderSlots` a conversation holds, one
            slot of each at once (its examiner's and examinee's caps, ``--provider-limit``;
            :func:`~spear_metrics.agents.processes.hold_together`) before its time limit starts.
        sessions: ``sessions(concurrency=, n_rows=)`` makes where the conversations run
            (:func:`spear_metrics.agents.processes.sessions_for`, ``--processes``): each
            conversation whole (:class:`ConversationJob`: both of its sessions and the relay
            between them) in one session process, this process the one writer of ``out``
            (``make_examiner``/``make_examinee`` must then be picklable, e.g.
            :func:`functools.partial` of a class); default: this event loop.

    Returns:
        ``{"ok", "failed", "skipped", "wall_s", "cpu_s", "conversation_s"}`` of this call (``cpu_s``:
        this process's), with ``session_processes``, ``loop_lag_ms`` and ``session_process_stats``
        (:meth:`~spear_metrics.agents.processes.SessionPool.stats`) when a conversation ran.

    Raises:
        RunConflict: ``out`` holds another run's conversations (without ``overwrite``).
        spear_metrics.agents.rows.ProcessLost: a session process ended with conversations in
            flight (the run stops; those not logged run again on resume).
        spear_datasets.files.OutputError: ``out`` cannot be used (another command's or the user's
            files, a live process writing it, unwritable) or the log cannot be written.
    """
    from spear_metrics.core.records import claim_out, claim_shard, in_shard

    outp = Path(out)
    fp = run_fingerprint(describe, [rules_for(t) for t in tasks], conversation_kw)
    conflict = RunConflict(f"{outp} holds conversations of another run (other tasks file, adapters, rules or relay "
                           "settings); use a new --out folder or --overwrite")
    if shard is not None and overwrite:
        raise RunConflict("--shard does not take --overwrite (other shards may be writing the folder): give a new "
                          "--out folder, or --overwrite without --shard first")
    claim = claim_shard(outp, fp, shard=shard[0], of=shard[1], conflict=conflict, command="fdb2-infer") if shard is not None else \
        claim_out(outp, fp, overwrite=overwrite, conflict=conflict, command="fdb2-infer", activity="written")
    log = LOG if shard is None else shard_log(shard[0])
    with claim:
        tasks = [t for t in tasks if in_shard(t.id, shard)]
        bad = [(pos, why) for pos, why in bad if in_shard(pos, shard)]
        wanted = {t.id for t in tasks} | {pos for pos, _ in bad}
        done = read_log(outp, wanted)
        if shard is None:  # the shards' records this log lacks: copied, so that it lists every unit
            mine = read_log(outp, wanted, shards=False)
            for tid, rec in done.items():
                if mine.get(tid) != rec:  # a copy: the starts its shard's record ended are not ended twice
                    log_unit(outp, {**rec, "ends_starts": 0})
        for pos, why in bad:  # an unreadable task entry is a failed unit, logged once
            if pos not in done:
                log_unit(outp, {"task_id": pos, "status": "failed", "reason": f"unreadable task entry: {why}"}, log)
        return await _run_claimed(tasks, outp, done, make_examiner, make_examinee, rules_for, concurrency=concurrency,
                                  retry_failed=retry_failed, deadline_grace_s=deadline_grace_s, describe=describe,
                                  on_done=on_done, log=log, slots=slots, sessions=sessions, **conversation_kw)


async def _run_claimed(tasks: list[Task], outp: Path, done: dict[str, dict[str, Any]], make_examiner: Callable[[], Any],
                       make_examinee: Callable[[], Any], rules_for: Callable[[Task], Rules], *, concurrency: int,
                       retry_failed: bool, deadline_grace_s: float, describe: Optional[dict[str, Any]],
                       on_done: Optional[Callable[[dict], None]], log: str = LOG, slots: Sequence[Any] = (),
                       sessions: Optional[Callable[..., Any]] = None, **conversation_kw: Any) -> dict[str, Any]:
    """:func:`run_conversations` once ``outp`` is claimed (``done``: the logged units; ``log``:
    where this run logs them)."""
    from spear_datasets.files import record_write
    from spear_metrics.agents.processes import LocalSessions, hold_together
    from spear_metrics.agents.rows import ProcessLost, RowJournal, RowTimeout
    from spear_metrics.core.records import AppendLog

    todo = []
    skipped = 0
    for t in tasks:
        r = done.get(t.id)
        if r and r.get("status") == "ok" and (outp / t.id / "manifest.json").exists():
            skipped += 1
        elif r and r.get("status") == "failed" and not retry_failed:
            skipped += 1
        else:
            todo.append(t)
    counts = {"ok": 0, "failed": 0, "skipped": skipped, "conversation_s": 0.0}
    ends = process_ends(outp)
    for t in [t for t in todo if ends.blocked(t.id)]:  # ended the process twice: failed, not run again
        rec = ends.ended_record(t.id, split=t.split)
        rec["reason"] = rec.pop("error")  # this log's name of a unit's one-line reason
        log_unit(outp, rec, log)
        counts["failed"] += 1
        if on_done:
            on_done(rec)
    todo = [t for t in todo if not ends.blocked(t.id)]
    sem = asyncio.Semaphore(max(1, int(concurrency)))
    cpu0, wall0 = _cpu_s(), time.monotonic()
    connect_s = float(conversation_kw.get("connect_timeout_s", 60.0))

    pool = sessions(concurrency=int(concurrency), n_rows=len(todo)) if sessions is not None and todo \
        else LocalSessions(None)

    async def one(task: Task) -> None:
        async with sem, hold_together(slots):  # --provider-limit: both sides' slots, before the deadline starts
            rules = rules_for(task)
            journal.start(task.id)  # flushed before the conversation is run or handed to a session process
            started = time.monotonic()
            rec: dict[str, Any] = {"task_id": task.id, "split": task.split}
            try:
                job = ConversationJob(task, make_examiner, make_examinee, rules, dict(conversation_kw))
                conv = await pool.run_job(job, rules.max_duration_s + connect_s + deadline_grace_s, tag=task.id)
                for k, v in (describe or {}).items():  # adapter settings join what each side did
                    if isinstance(v, dict) and isinstance(conv.manifest.get(k), dict):
                        conv.manifest[k] = {**v, **conv.manifest[k]}
                    else:
                        conv.manifest[k] = v
                conv.manifest["wall_s"] = round(time.monotonic() - started, 3)
                await asyncio.to_thread(save_conversation, conv, outp / task.id)
                rec.update(status="ok", duration_s=conv.manifest["duration_s"], end_reason=conv.manifest["end_reason"],
                           examiner_turns=conv.manifest["examiner_turns"], relay_delay=conv.manifest["relay_delay"],
                           wall_s=conv.manifest["wall_s"])
                counts["ok"] += 1
                counts["conversation_s"] += conv.manifest["duration_s"]
            except ProcessLost:  # the run stops: this conversation is not logged, a rerun runs it again
                raise
            except RowTimeout:
                rec.update(status="failed", reason=f"timed out after {time.monotonic() - started:.1f} s "
                                                   f"(deadline {rules.max_duration_s + connect_s + deadline_grace_s:g} s)")
                counts["failed"] += 1
            except Exception as e:  # noqa: BLE001 - any failure of one conversation is its unit's failure
                from spear_metrics.core.secrets import mask_secrets

                rec.update(status="failed", reason=mask_secrets(" ".join(str(e).split()))[:300] or type(e).__name__)
                counts["failed"] += 1
            log_unit(outp, rec, log)
            journal.finish(task.id)
            if on_done:
                on_done(rec)

    # this run's started/stopped records: a shard's beside its units, the run without --shard's in .work/rank-0.jsonl
    # (conversations.jsonl lists finished units only)
    jpath = outp / (log if log != LOG else shard_log(0))
    if todo:
        record_write(jpath)
    with contextlib.ExitStack() as stack:
        journal = RowJournal(stack.enter_context(AppendLog(jpath)), ends) if todo else None
        async with pool:
            # a session process that ends stops every conversation (ProcessLost, raised as it is; the
            # conversations it ran keep their open start, the others in flight are logged stopped), as Ctrl-C does
            with journal.stopping() if journal is not None else contextlib.nullcontext():
                try:
                    async with asyncio.TaskGroup() as tg:
                        for t in todo:
                            tg.create_task(one(t))
                except BaseExceptionGroup as eg:
                    raise eg.exceptions[0] from None
    if todo:
        counts.update(pool.stats())  # session_processes, loop_lag_ms (docs/multiprocess.md)
    counts["wall_s"] = round(time.monotonic() - wall0, 3)
    counts["cpu_s"] = round(_cpu_s() - cpu0, 3)
    return counts
