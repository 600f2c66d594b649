"""A WebSocket server on 127.0.0.1 (port 0) running in its own thread and event loop, so that a
test's adapter (in the test's loop) and the fake never share a loop; every session is bounded in
time (``session_timeout_s``) and the server stops when the ``with`` block ends."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Awaitable, Callable, Optional

from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request, Response


class LoopbackServer:
    """``with LoopbackServer(handler) as srv:`` -> ``srv.port``, ``srv.url(path)``.

    Args:
        handler: ``async handler(connection)`` for one WebSocket session.
        process_request: websockets' hook (return a :class:`Response` to refuse the handshake).
        session_timeout_s: a session still open after this long is cut (no test can hang on it).
    """

    def __init__(self, handler: Callable[[ServerConnection], Awaitable[None]], *,
                 process_request: Optional[Callable[[ServerConnection, Request], Optional[Response]]] = None,
                 session_timeout_s: float = 60.0):
        self._handler = handler
        self._process_request = process_request
        self._timeout = session_timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="loopback-fake", daemon=True)
        self._server: Any = None
        self._tasks: set[asyncio.Task] = set()
        self.port = 0
        self.errors: list[BaseException] = []  # exceptions escaping the handler (a test checks it is empty)

    async def _session(self, conn: ServerConnection) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            await asyncio.wait_for(self._handler(conn), self._timeout)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            pass
        except Exception as e:  # noqa: BLE001 -- surfaced through .errors
            from websockets.exceptions import ConnectionClosed

            if not isinstance(e, ConnectionClosed):
                self.errors.append(e)
        finally:
            self._tasks.discard(task)

    async def _start(self) -> None:
        self._server = await serve(self._session, "127.0.0.1", 0, process_request=self._process_request,
                                   max_size=None, ping_interval=None)
        self.port = self._server.sockets[0].getsockname()[1]

    def url(self, path: str = "/") -> str:
        return f"ws://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> "LoopbackServer":
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    def __exit__(self, *exc: Any) -> None:
        async def stop() -> None:
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self._server.close()
            try:
                await asyncio.wait_for(self._server.wait_closed(), 5)
            except asyncio.TimeoutError:
                pass
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in rest:
                t.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()


class ScenarioServer(LoopbackServer):
    """A loopback fake that plays one scenario per session: ``programs[row]`` (row = the session's
    ``X-Client-Request-Id`` header, :func:`row_of`), else ``default``. :attr:`sessions` lists the
    subclass's per-session logs (each with a ``row``), :attr:`connections` counts handshakes per row.
    A scenario whose ``fault`` is ``"refuse"`` gets HTTP 403 with :attr:`refusal` at the handshake;
    :meth:`check_request` adds a subclass's own checks of the request."""

    refusal = "Forbidden\n"

    def __init__(self, programs: dict[str, Any], default: Any = None, **kw: Any):
        self.programs = dict(programs)
        self.default = default
        self.sessions: list[Any] = []
        self.connections: dict[str, int] = {}
        super().__init__(self._handle, process_request=self._process_request, **kw)

    async def _handle(self, ws: Any) -> None:
        raise NotImplementedError

    def program(self, headers: Any) -> Any:
        sc = self.programs.get(row_of(headers), self.default)
        if sc is None:
            raise KeyError(f"no program for row {row_of(headers)!r}")
        return sc

    def by_row(self) -> dict[str, Any]:
        return {s.row: s for s in self.sessions}

    def check_request(self, conn: Any, request: Any) -> Any:
        """A response refusing ``request`` for a reason of the subclass's protocol, else ``None``."""
        return None

    def _process_request(self, conn: Any, request: Any) -> Any:
        from http import HTTPStatus

        row = row_of(request.headers)
        self.connections[row] = self.connections.get(row, 0) + 1
        if self.program(request.headers).fault == "refuse":
            return conn.respond(HTTPStatus.FORBIDDEN, self.refusal)
        return self.check_request(conn, request)


def row_of(headers: Any) -> str:
    """The row a session belongs to: the ``X-Client-Request-Id`` header the adapters send."""
    return str(headers.get("X-Client-Request-Id", "") or "")


def speech_end_detector(threshold_dbfs: float):
    """A detector fed 1-D float frames in order: ``update(frame, end_s) -> last_loud_end_s`` (the
    end, in input time, of the last frame whose RMS reached ``threshold_dbfs``; ``None`` before
    any)."""
    import numpy as np

    state = {"last": None}

    def update(frame, end_s: float):
        x = np.asarray(frame, dtype=np.float64)
        if x.size and 20 * np.log10(max(np.sqrt((x * x).mean()), 1e-12)) >= threshold_dbfs:
            state["last"] = end_s
        return state["last"]

    return update
