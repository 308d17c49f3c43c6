"""The AMQP 0-9-1 gateway's listener: one `Session` per accepted connection, all owned by the server
so that closing it closes them (with 320 CONNECTION_FORCED, as RabbitMQ does on shutdown)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from ferrymq.amqp.auth import Authenticator, StaticAuthenticator
from ferrymq.amqp.session import Session
from ferrymq.protocol.amqp.connection import CLOSE_OK_TIMEOUT

if TYPE_CHECKING:
    from ferrymq.messaging.api import MessageService


class AMQPServer:
    """`service` is the messaging core the gateway will publish into and consume from; this first
    increment serves connections and channels only and does not call it yet."""

    def __init__(
        self,
        host: str,
        port: int,
        authenticator: Authenticator | None = None,
        *,
        heartbeat: int = 60,
        service: MessageService | None = None,
    ) -> None:
        self.service = service
        self.host = host
        self.port = port
        self._auth = authenticator or StaticAuthenticator()
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

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session = Session(reader, writer, self._auth, heartbeat=self._heartbeat)
        task = asyncio.current_task()
        assert task is not None
        self._sessions[session] = task
        try:
            await session.run()
        finally:
            self._sessions.pop(session, None)
