"""THE connection plumbing of the WebSocket adapters (``openai-realtime``, ``gemini-live``,
``moshi``): closing a session, the receiver task, and how a receiver error or a lost connection
reaches the session.

:class:`WebSocketConnection` is the base of each adapter's connection class. It holds the open
socket (``ws``, a ``websockets`` client connection opened with ``max_queue=None``), the receiver
task that reads it, and the session's :class:`~spear_metrics.agents.duplex.OutputSink`. A
subclass opens the socket (its own handshake and set-up), starts :meth:`_receive` as a task and
supplies the hooks. Its ``open()`` opens the socket with :meth:`_handshake` (the one place of the
WebSocket handshake and of how a refused or failed one becomes a :class:`NetError`).

The hooks:

- :meth:`_messages`: one received frame -> the messages :meth:`_handle` takes (decoding);
- :meth:`_handle`: one message -> the sink (raises ``AgentError`` to fail the session);
- :meth:`_setup_event`: the event its ``open()`` waits on for the server's answer to the set-up
  (``None`` when the receiver starts only after the set-up);
- :attr:`message_words`: what a message is called in the error of a handler bug;
- :meth:`_lost_after_setup`: the error for a connection that closed after the set-up.
"""

from __future__ import annotations

import asyncio
from typing import Any, Iterable, Optional

from spear_metrics.agents.base import AgentError
from spear_metrics.agents.duplex import AudioRequest, OutputSink, ProtocolError
from spear_metrics.agents.net import RETRY_CLOSE_CODES, NetError, close_reason, http_error, mask_secrets, within

#: THE frame limit of the WebSocket adapters (bytes, websockets' ``max_size``): a bigger frame is
#: refused by the client as it arrives (close code 1009) and fails the row with that reason.
#: 16 MiB holds minutes of base64 PCM in one event, far beyond what a real-time server sends.
MAX_FRAME_BYTES = 2 ** 24
#: close code 1009 "message too big" (RFC 6455): what websockets sends when a frame passes ``max_size``
CLOSE_TOO_BIG = 1009


class WebSocketConnection:
    """One WebSocket session of a network adapter (see the module docstring for the hooks).

    Attributes:
        agent: the adapter that opened it; request: the row's request; sink: the session's output.
        ws: the open connection (``None`` before ``open()`` and after :meth:`close`).
    """

    #: what a server message is called in the masked error of a handler bug ("cannot handle a <words>: ...")
    message_words = "server message"

    def __init__(self, agent: Any, request: AudioRequest, sink: OutputSink):
        self.agent, self.request, self.sink = agent, request, sink
        self.ws: Any = None
        self._receiver: Optional[asyncio.Task] = None
        self._closing = False  # set by _abort: what still arrives is ignored
        self._open_error: Optional[AgentError] = None  # the receiver's error during the set-up
        self._max_size: Optional[int] = MAX_FRAME_BYTES  # the frame limit the socket was opened with

    # ------------------------------------------------------------------ hooks
    def _setup_event(self) -> Optional[asyncio.Event]:
        """The event ``open()`` waits on: set by the server's answer to the set-up, or by the
        receiver's first error (then :attr:`_open_error` holds it). ``None`` (the default): the
        receiver starts only once the set-up is over."""
        return None

    def _messages(self, raw: Any) -> Iterable[Any]:
        """The messages one received frame ``raw`` (``str`` or ``bytes``) holds, for :meth:`_handle`
        (default: the frame itself).

        Raises:
            ProtocolError: a frame that cannot be read.
        """
        return (raw,)

    def _handle(self, msg: Any) -> None:
        """Take one server message (output to the sink, session state).

        Raises:
            AgentError: the message fails the session (set-up: ``open()`` raises it)."""
        raise NotImplementedError

    def _lost_after_setup(self, code: Optional[int], why: str) -> None:
        """The connection closed after the set-up (close ``code`` or ``None``, ``why`` in words):
        fail the sink, unless the session had ended normally."""
        raise NotImplementedError

    # ------------------------------------------------------------------ opening
    async def _handshake(self, url: str, where: str, headers: dict[str, str], *, timeout_s: float,
                         max_size: Optional[int]) -> None:
        """Open the WebSocket to ``url`` and keep it in :attr:`ws` (one try; the caller retries).

        The connection: ``additional_headers=headers``, frames of at most ``max_size`` bytes
        (``None``: no limit), no keep-alive pings, an unbounded queue (``max_queue=None``, see
        :meth:`_abort`), a 2 s close timeout, per-message deflate only when the adapter's
        ``ws_compression`` is on; the whole handshake bounded by ``timeout_s`` seconds.

        Args:
            where: the server as errors name it (an address without secrets).

        Raises:
            NetError: the handshake refused (its HTTP status, ``Retry-After`` and masked body, via
                :func:`~spear_metrics.agents.net.http_error`); a network error (retryable) or an
                invalid handshake (not retryable), masked; no answer within ``timeout_s``.
        """
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidHandshake, InvalidStatus

        self._max_size = max_size
        try:
            self.ws = await within(timeout_s,
                                   connect(url, additional_headers=headers, max_size=max_size, open_timeout=None,
                                           ping_interval=None, close_timeout=2, max_queue=None,
                                           compression="deflate" if self.agent.ws_compression else None),
                                   f"WebSocket handshake with {where}")
        except InvalidStatus as e:
            r = e.response
            # websockets returns the body as bytes or bytearray (its own limit bounds its size)
            body = bytes(r.body).decode("utf-8", "replace") if isinstance(r.body, (bytes, bytearray, memoryview)) else ""
            raise http_error(r.status_code, body, dict(r.headers.raw_items()), what=f"{where} (WebSocket handshake)") from None
        except (OSError, InvalidHandshake) as e:
            raise NetError(f"cannot open a WebSocket to {where}: {type(e).__name__}: {mask_secrets(str(e))[:160]}",
                           retryable=isinstance(e, OSError)) from None

    # ------------------------------------------------------------------ closing
    async def close(self) -> None:
        """Close the WebSocket and wait for the receiver to stop (never raises)."""
        await self._abort()
        if self._receiver is not None:
            try:
                await self._receiver
            except BaseException:
                pass

    async def _abort(self) -> None:
        """Close the WebSocket (at most 2 s), then stop the receiver (which ignores what still
        arrives). The connection's queue is unbounded (``max_queue=None``): with 16 unread frames
        queued (a receiver stopped by an error) websockets would stop reading the socket, and the
        close would wait its whole ``close_timeout`` for the server's close frame."""
        self._closing = True
        if self.ws is not None:
            try:
                await asyncio.wait_for(self.ws.close(), 2)
            except BaseException:
                pass
        if self._receiver is not None:
            self._receiver.cancel()
        self.ws = None

    # ------------------------------------------------------------------ receiving
    async def _receive(self) -> None:
        """The receiver task: every frame to :meth:`_handle` (until :meth:`_abort`); the end of the
        stream or a ``ConnectionClosed`` -> :meth:`_lost`; an ``AgentError`` -> :meth:`_fail`; any
        other exception (a handler bug) -> :meth:`_fail` with a masked one-line ``ProtocolError``."""
        from websockets.exceptions import ConnectionClosed

        try:
            async for raw in self.ws:
                if self._closing:
                    continue
                for msg in self._messages(raw):
                    self._handle(msg)
            code, why = None, "closed"
            if self.ws is not None and self.ws.close_code is not None:
                code = self.ws.close_code
                why = f"code {code}" + (f" ({self.ws.close_reason})" if self.ws.close_reason else "")
            if not self._closing:
                self._lost(code, why)
        except ConnectionClosed as e:
            sent = getattr(e, "sent", None)
            if getattr(sent, "code", None) == CLOSE_TOO_BIG and not getattr(e, "rcvd_then_sent", False):
                # the client itself refused a frame over max_size: say so, not "server closed"
                self._fail(ProtocolError(f"the server sent a message over the {self._max_size} byte "
                                         f"limit; refused by the client (close code 1009: {sent.reason})"))
            elif not self._closing:
                self._lost(*close_reason(e))
        except asyncio.CancelledError:
            raise
        except AgentError as e:
            self._fail(e)
        except Exception as e:  # a bug in a handler must not hang the session
            self._fail(ProtocolError(f"cannot handle a {self.message_words}: {type(e).__name__}: "
                                     f"{mask_secrets(str(e))[:120]}"))

    def _fail(self, err: AgentError) -> None:
        """During the set-up: keep ``err`` for ``open()`` (which raises it and may retry) and
        release its wait; after it: fail the sink."""
        ready = self._setup_event()
        if ready is not None and not ready.is_set():
            self._open_error = err
            ready.set()
            return
        self.sink.fail(err)

    def _lost(self, code: Optional[int], why: str) -> None:
        """The connection closed (close ``code`` or ``None``, ``why`` in words). During the set-up:
        a :class:`NetError` for ``open()``, retryable for the "try later" codes
        (:data:`~spear_metrics.agents.net.RETRY_CLOSE_CODES`); after it:
        :meth:`_lost_after_setup`."""
        ready = self._setup_event()
        if ready is not None and not ready.is_set():
            self._fail(NetError(f"server closed the connection during the session set-up ({why})",
                                retryable=code in RETRY_CLOSE_CODES, status=code))
            return
        self._lost_after_setup(code, why)
