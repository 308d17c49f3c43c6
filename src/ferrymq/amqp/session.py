"""One client connection: a socket, the protocol state machine and the clock between them. It reads,
feeds, writes, ticks on the state machine's deadlines, and answers what the state machine leaves to
its owner (login, vhost, and for now every channel method with 540 NOT_IMPLEMENTED)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from ferrymq.amqp.auth import Authenticator
from ferrymq.protocol.amqp import events as ev
from ferrymq.protocol.amqp.connection import ServerConnection
from ferrymq.protocol.amqp.errors import ChannelException, ConnectionException, ReplyCode
from ferrymq.protocol.amqp.fast import ACK_METHODS, BASIC, PUBLISH
from ferrymq.protocol.amqp.methods import ids_of

log = logging.getLogger(__name__)
READ_SIZE = 65536


class Session:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        authenticator: Authenticator,
        *,
        heartbeat: int = 60,
        clock=time.monotonic,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._auth = authenticator
        self._clock = clock
        self.connection = ServerConnection(clock(), heartbeat=heartbeat)

    async def run(self) -> None:
        """Serve the connection until it ends, whatever the peer sends."""
        try:
            await self._serve()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the peer went away
        finally:
            self._writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await self._writer.wait_closed()

    async def shutdown(self) -> None:
        """Close the connection as a stopping server does: 320 CONNECTION_FORCED."""
        error = ConnectionException(
            ReplyCode.CONNECTION_FORCED, "broker forced connection closure with reason 'shutdown'"
        )
        await self._handle(self.connection.close(error, self._clock()))

    async def _serve(self) -> None:
        connection = self.connection
        while not connection.closed:
            deadline = connection.next_deadline()
            timeout = None if deadline is None else max(0.0, deadline - self._clock())
            try:
                data = await asyncio.wait_for(self._reader.read(READ_SIZE), timeout)
            except TimeoutError:
                await self._handle(connection.tick(self._clock()))
                continue
            if not data:
                return
            await self._handle(connection.receive_data(data, self._clock()))
        await self._flush()

    async def _handle(self, events: list[ev.Event]) -> None:
        while events:
            event = events.pop(0)
            events += await self._answer(event)
        await self._flush()

    async def _answer(self, event: ev.Event) -> list[ev.Event]:
        connection, now = self.connection, self._clock
        if isinstance(event, ev.LoginRequested):
            if await self._auth.login(event.username, event.password):
                return connection.accept_login(event.username, now())
            return connection.refuse_login(event.mechanism, now())
        if isinstance(event, ev.VhostRequested):
            if await self._auth.may_open(connection.username, event.vhost):
                return connection.open_vhost(now())
            return connection.refuse_vhost(f"vhost {event.vhost} not found", now())
        if isinstance(event, ev.MethodReceived | ev.ContentReceived):
            self._not_implemented(event)
        elif isinstance(event, ev.ConnectionClosed) and event.code != ReplyCode.REPLY_SUCCESS:
            log.info("AMQP connection closed: %s %s", event.code, event.text)
        return []

    def _not_implemented(self, event: ev.MethodReceived | ev.ContentReceived) -> None:
        if isinstance(event, ev.ContentReceived):
            name, (class_id, method_id) = "basic.publish", (BASIC, PUBLISH)
        elif hasattr(event.method, "index"):
            name, (class_id, method_id) = event.method.name.lower(), ids_of(event.method)
        else:  # a fast acknowledgement
            name = f"basic.{type(event.method).__name__.lower()}"
            class_id, method_id = BASIC, ACK_METHODS[type(event.method)]
        error = ChannelException(
            ReplyCode.NOT_IMPLEMENTED, f"{name} is not implemented by this gateway yet", class_id, method_id
        )
        self.connection.close_channel(event.channel, error, self._clock())

    async def _flush(self) -> None:
        data = self.connection.data_to_send()
        if data:
            self._writer.write(data)
            await self._writer.drain()
