"""Listening sockets that speak TLS, plaintext, or both on one port.

A plaintext listener is asyncio's own server. A TLS one accepts sockets itself so that it can look
at each connection's first byte before choosing (``MSG_PEEK`` leaves the byte for whoever reads
next): 0x16 starts a handshake with the context current at that moment (so rotated certificates
apply to new connections), anything else is plaintext — served in permissive mode, refused with a
log line in enforcing mode. A connection that stays silent or fails its handshake is closed after
``handshake_timeout`` and logged; none of it reaches the protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable

from ferrymq.net.tasks import BackgroundTasks
from ferrymq.net.tls import TLS_HANDSHAKE, ServerTLS, handshake_failure

log = logging.getLogger(__name__)

ProtocolFactory = Callable[[], asyncio.BaseProtocol]
_ACCEPT_ERROR_PAUSE = 0.1  # seconds to wait after accept fails (e.g. out of file descriptors)


class TLSServer:
    """The part of ``asyncio.Server`` that our servers use, over our own accept loop."""

    def __init__(
        self, factory: ProtocolFactory, sock: socket.socket, tls: ServerTLS, *, tls_only: bool = False
    ) -> None:
        """``tls_only``: refuse plaintext even when ``tls`` is permissive (a port like AMQP's 5671)."""
        self._factory = factory
        self._sock = sock
        self.tls = tls
        self._plaintext = tls.permissive and not tls_only
        self._port = sock.getsockname()[1]
        self.sockets = [sock]
        self._tasks = BackgroundTasks("TLS listener")
        self._accepting = self._tasks.spawn(self._accept_loop(), name="TLS accept")

    def is_serving(self) -> bool:
        return not self._accepting.done()

    def close(self) -> None:
        """Stop accepting (connections already made stay open, as with asyncio's servers); the
        listening socket closes as the accept loop ends (at the latest in ``wait_closed``), and
        connections still being admitted finish within their handshake timeout or end at ``wait_closed``."""
        self._accepting.cancel()

    async def wait_closed(self) -> None:
        await self._tasks.close()
        self._sock.close()  # again, for an accept loop cancelled before it ever ran

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    conn, peer = await loop.sock_accept(self._sock)
                except OSError as exc:
                    log.warning("accepting a connection failed: %s", exc)
                    await asyncio.sleep(_ACCEPT_ERROR_PAUSE)
                    continue
                self._tasks.spawn(self._admit(conn, _peer_name(peer)), name="TLS admit")
        finally:
            self._sock.close()

    async def _admit(self, conn: socket.socket, peer: str) -> None:
        loop = asyncio.get_running_loop()
        conn.setblocking(False)
        served = False
        try:
            async with asyncio.timeout(self.tls.handshake_timeout):
                first = await _peek(loop, conn)
                if not first:
                    return  # connected and left without a word (a port probe)
                if first[0] == TLS_HANDSHAKE:
                    context = self.tls.context()
                    await loop.connect_accepted_socket(
                        self._factory, conn, ssl=context, ssl_handshake_timeout=self.tls.handshake_timeout
                    )
                elif self._plaintext:
                    await loop.connect_accepted_socket(self._factory, conn)
                else:
                    log.warning("refused a plaintext connection from %s: this port (%d) is TLS only",
                                peer, self._port)  # fmt: skip
                    return
                served = True
        except TimeoutError:
            log.info("closed %s: no TLS handshake within %g s", peer, self.tls.handshake_timeout)
        except OSError as exc:  # ssl.SSLError included
            log.warning("%s", handshake_failure(peer, exc))
        finally:
            if not served:
                conn.close()


def bound_socket(host: str | None, port: int) -> socket.socket:
    """A TCP socket bound to host:port (port 0: any free one), not listening yet."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


async def start_server(
    factory: ProtocolFactory,
    host: str | None = None,
    port: int = 0,
    *,
    sock: socket.socket | None = None,
    tls: ServerTLS | None = None,
    tls_only: bool = False,
    backlog: int = 1024,
) -> asyncio.Server | TLSServer:
    """Listen on ``sock`` or ``host:port`` (0: a free port): asyncio's server when ``tls`` is None
    (``tls_only``: see TLSServer)."""
    loop = asyncio.get_running_loop()
    if tls is None:
        if sock is not None:
            return await loop.create_server(factory, sock=sock, backlog=backlog)
        return await loop.create_server(factory, host, port, backlog=backlog)
    if sock is None:
        sock = bound_socket(host, port)
    sock.listen(backlog)
    sock.setblocking(False)
    return TLSServer(factory, sock, tls, tls_only=tls_only)


async def start_stream_server(
    callback: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    host: str,
    port: int,
    *,
    tls: ServerTLS | None = None,
    tls_only: bool = False,
) -> asyncio.Server | TLSServer:
    """``asyncio.start_server`` with an optional TLS (or permissive) listener."""
    loop = asyncio.get_running_loop()

    def factory() -> asyncio.BaseProtocol:
        return asyncio.StreamReaderProtocol(asyncio.StreamReader(loop=loop), callback, loop=loop)

    return await start_server(factory, host, port, tls=tls, tls_only=tls_only)


async def _peek(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> bytes:
    """The connection's first byte, left unread; b"" when the peer closed first."""
    while True:
        try:
            return conn.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            pass
        readable = loop.create_future()
        loop.add_reader(conn.fileno(), _resolve, readable)
        try:
            await readable
        finally:
            with contextlib.suppress(ValueError, OSError):
                loop.remove_reader(conn.fileno())


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _peer_name(peer: object) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)
