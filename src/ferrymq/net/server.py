"""RemotingServer: accepts remoting connections and runs each request by its code's handler.

The shape of RocketMQ's ``NettyRemotingServer``: a code → processor table, a table of live
connections (processors keep the ones they must call back, e.g. a broker's clients), idle
connections closed after ``idle_timeout`` (Java's ``channelExpiredTimeout``, 120 s), and a stop that
lets running handlers finish before the connections close.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

from ferrymq.net.connection import DEFAULT_LIMITS, Connection, ConnectionLimits, Flusher, close_all
from ferrymq.net.dispatch import Guard, Handler, RequestDispatcher
from ferrymq.net.latency import RequestLatency
from ferrymq.net.listener import TLSServer, bound_socket, start_server
from ferrymq.net.tasks import BackgroundTasks
from ferrymq.net.tls import ServerTLS
from ferrymq.protocol.remoting import MAX_FRAME_SIZE

log = logging.getLogger(__name__)

_CANCEL_GRACE = 1.0  # seconds cancelled handlers get to unwind before the connections close


class RemotingServer:
    def __init__(
        self,
        host: str = "0.0.0.0",
        port: int = 0,
        *,
        max_frame_size: int = MAX_FRAME_SIZE,
        idle_timeout: float = 120.0,
        limits: ConnectionLimits = DEFAULT_LIMITS,
        tls: ServerTLS | None = None,
    ) -> None:
        """``tls``: serve TLS (and, if permissive, plaintext too) on the port; plaintext only if None."""
        self.host = host
        self.port = port
        """The port asked for; after ``bind`` or ``start`` the one bound (so 0 becomes a free port)."""
        self.idle_timeout = idle_timeout
        self._max_frame_size = max_frame_size
        self._limits = limits
        self._dispatcher = RequestDispatcher()
        self._flusher = Flusher()
        self._connections: set[Connection] = set()
        self._finishing: set[Connection] = set()  # closed, with handlers still running
        self._closed_callbacks: list[Callable[[Connection], None]] = []
        self._server: asyncio.Server | TLSServer | None = None
        self.tls = tls
        self._tasks = BackgroundTasks("remoting server")
        self._socket: socket.socket | None = None

    def register(self, code: int, handler: Handler, *, eager: bool = False, late: bool = False) -> None:
        """Answer requests with ``code`` by ``async def handler(connection, request)``
        (``eager`` and ``late``: see RequestDispatcher.register)."""
        self._dispatcher.register(code, handler, eager=eager, late=late)

    def register_default(self, handler: Handler) -> None:
        """Answer every code without its own handler by ``handler``."""
        self._dispatcher.register_default(handler)

    def set_guard(self, guard: Guard | None) -> None:
        """Check every request with ``guard`` before its handler (see dispatch.Guard); None: no check."""
        self._dispatcher.guards = () if guard is None else (guard,)

    def add_guard(self, guard: Guard) -> None:
        """Check every request with ``guard`` too, after the guards already set (if any)."""
        self._dispatcher.guards += (guard,)

    def on_connection_closed(self, callback: Callable[[Connection], None]) -> None:
        """Call ``callback(connection)`` whenever a connection ends, however it ends."""
        self._closed_callbacks.append(callback)

    @property
    def latency(self) -> RequestLatency:
        """How long answering took, by request and response code (read by the metrics collector)."""
        return self._dispatcher.latency

    @property
    def connections(self) -> frozenset[Connection]:
        return frozenset(self._connections)

    def bind(self) -> int:
        """Take the port now, before ``start`` listens on it: a port asked as 0 is then known (and
        kept from anyone else) while the owner gets ready, e.g. a broker recovering its store."""
        self._socket = sock = bound_socket(self.host, self.port)
        self.port = sock.getsockname()[1]
        return self.port

    async def start(self) -> None:
        sock, self._socket = self._socket, None
        self._server = await start_server(self._new_connection, self.host, self.port, sock=sock, tls=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        self._tasks.spawn(self._close_idle_connections(), name="remoting-idle-sweeper")
        mode = f" (TLS {self.tls.mode})" if self.tls is not None else ""
        log.info("remoting server listening on %s:%d%s", self.host, self.port, mode)

    async def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, give running handlers up to ``grace`` seconds to answer, then close all."""
        if self._server is None:
            return
        server, self._server = self._server, None
        server.close()
        await self._tasks.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while handlers := self._running_handlers():
            if loop.time() >= deadline:
                log.warning("stopping with %d handlers still running: cancelling them", len(handlers))
                for task in handlers:
                    task.cancel()
                await asyncio.wait(handlers, timeout=_CANCEL_GRACE)
                break
            await asyncio.wait(handlers, timeout=deadline - loop.time())
        await close_all(self._connections)
        await server.wait_closed()

    def _running_handlers(self) -> set[asyncio.Task[None]]:
        """Every handler still running, including those of connections that closed meanwhile."""
        self._finishing = {connection for connection in self._finishing if connection.handler_tasks}
        return {
            task for connection in (*self._connections, *self._finishing) for task in connection.handler_tasks
        }

    def _new_connection(self) -> Connection:
        return Connection(
            self._dispatcher.handle,
            max_frame_size=self._max_frame_size,
            limits=self._limits,
            on_open=self._connections.add,
            on_close=self._connection_closed,
            eager=self._dispatcher.is_eager,
            late=self._dispatcher.is_late,
            flusher=self._flusher,
        )

    def _connection_closed(self, connection: Connection) -> None:
        self._connections.discard(connection)
        self._finishing = {c for c in self._finishing if c.handler_tasks}
        if connection.handler_tasks:  # still the server's to wait for when it stops
            self._finishing.add(connection)
        for callback in self._closed_callbacks:
            try:
                callback(connection)
            except Exception:
                log.exception("connection-closed callback %r failed", callback)

    async def _close_idle_connections(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.idle_timeout / 4)
            quiet_since = loop.time() - self.idle_timeout
            for connection in list(self._connections):
                if connection.last_activity < quiet_since and not connection.handler_tasks:
                    log.info("closing %s: idle for %g s", connection.remote_address, self.idle_timeout)
                    connection.close()
