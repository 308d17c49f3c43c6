"""The AMQP 0-9-1 gateway's listener: one `Session` per accepted connection, all owned by the server
so that closing it closes them (with 320 CONNECTION_FORCED, as RabbitMQ does on shutdown)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from ferrymq.amqp.auth import Authenticator, MetaAuthenticator
from ferrymq.amqp.session import Session
from ferrymq.protocol.amqp.connection import CLOSE_OK_TIMEOUT

if TYPE_CHECKING:
    from ferrymq.amqp.gateway import Gateway


class AMQPServer:
    """Serves `gateway` to AMQP clients; who may log in is the metadata service's to say unless an
    `authenticator` is given."""

    def __init__(
        self,
        host: str,
        port: int,
        gateway: Gateway,
        authenticator: Authenticator | None = None,
        *,
        heartbeat: int = 60,
    ) -> None:
        self.gateway = gateway
        self.host = host
        self.port = port
        self._auth = authenticator or MetaAuthenticator(gateway.metadata)
        self._heartbeat = heartbeat
        self._server: asyncio.Server | None = None
        self._sessions: dict[Session, asyncio.Task] = {}

    async def start(self) -> int:
        """Listen; return the bound port (useful when asked for port 0)."""
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        return self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for session in list(self._sessions):
            with contextlib.suppress(ConnectionError, OSError):
                await session.shutdown()
        tasks = list(self._sessions.values())
        if tasks:  # let clients answer close-ok, then stop whoever did not
            await asyncio.wait(tasks, timeout=CLOSE_OK_TIMEOUT)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
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
