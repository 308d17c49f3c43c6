"""The AMQP 0-9-1 gateway's listener: one `Session` per accepted connection, all owned by the server
so that closing it closes them (with 320 CONNECTION_FORCED, as RabbitMQ does on shutdown)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from ferrymq.amqp.auth import Authenticator, MetaAuthenticator
from ferrymq.amqp.session import Session
from ferrymq.net.listener import TLSServer, start_stream_server
from ferrymq.net.tls import ServerTLS
from ferrymq.protocol.amqp.connection import CLOSE_OK_TIMEOUT

if TYPE_CHECKING:
    from ferrymq.amqp.gateway import Gateway


AMQPS_PORT = 5671  # RabbitMQ's TLS port


class AMQPServer:
    """Serves `gateway` to AMQP clients; who may log in is the metadata service's to say unless an
    `authenticator` is given.

    With `tls`, `port` follows its mode (permissive: TLS and plaintext, enforcing: TLS only) and
    `tls_port`, if given, is an AMQPS port that takes TLS only, as RabbitMQ's 5671 does."""

    def __init__(
        self,
        host: str,
        port: int,
        gateway: Gateway,
        authenticator: Authenticator | None = None,
        *,
        heartbeat: int = 60,
        tls: ServerTLS | None = None,
        tls_port: int | None = None,
    ) -> None:
        if tls_port is not None and tls is None:
            raise ValueError("an AMQPS port needs TLS settings (tls_server_mode and its certificate)")
        self.gateway = gateway
        self.tls = tls
        self.tls_port = tls_port
        self.host = host
        self.port = port
        self._auth = authenticator or MetaAuthenticator(gateway.metadata)
        self._heartbeat = heartbeat
        self._servers: list[asyncio.Server | TLSServer] = []
        self._sessions: dict[Session, asyncio.Task] = {}

    async def start(self) -> int:
        """Listen; return the bound port (useful when asked for port 0)."""
        server = await start_stream_server(self._accept, self.host, self.port, tls=self.tls)
        self._servers.append(server)
        if self.tls_port is not None:
            amqps = await start_stream_server(
                self._accept, self.host, self.tls_port, tls=self.tls, tls_only=True
            )
            self._servers.append(amqps)
            self.tls_port = amqps.sockets[0].getsockname()[1]
        self.port = server.sockets[0].getsockname()[1]
        return self.port

    @property
    def serving(self) -> bool:
        return bool(self._servers) and all(s.is_serving() for s in self._servers)

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for session in list(self._sessions):
            with contextlib.suppress(ConnectionError, OSError):
                await session.shutdown()
        tasks = list(self._sessions.values())
        if tasks:  # let clients answer close-ok, then stop whoever did not
            await asyncio.wait(tasks, timeout=CLOSE_OK_TIMEOUT)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        await self.gateway.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session = Session(reader, writer, self.gateway, self._auth, heartbeat=self._heartbeat)
        task = asyncio.current_task()
        assert task is not None
        self._sessions[session] = task
        try:
            await session.run()
        finally:
            self._sessions.pop(session, None)
