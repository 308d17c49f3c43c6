"""One client connection: a socket, the protocol state machine and the clock between them. It reads,
feeds, writes, ticks on the state machine's deadlines, and answers what the state machine leaves to
its owner: login and vhost through the authenticator, channel methods and content through each
channel's `Channel`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from pamqp import commands

from ferrymq.amqp.access import Access, Permits
from ferrymq.amqp.acl import AclAccess, login_refusal
from ferrymq.amqp.auth import Authenticator
from ferrymq.amqp.channel import Channel
from ferrymq.amqp.flow import PublisherThrottle
from ferrymq.auth import audit
from ferrymq.messaging.api import MessagingError
from ferrymq.meta.entities import Permission
from ferrymq.meta.errors import MetaError, NotFound
from ferrymq.protocol.amqp import events as ev
from ferrymq.protocol.amqp import fast
from ferrymq.protocol.amqp.connection import CLOSE_OK_TIMEOUT, ServerConnection
from ferrymq.protocol.amqp.errors import AMQPError, ChannelException, ConnectionException, ReplyCode
from ferrymq.protocol.caller import CALLER

if TYPE_CHECKING:
    from ferrymq.amqp.gateway import Gateway

log = logging.getLogger(__name__)
READ_SIZE = 4096  # bytes handled per loop turn: a busy connection holds the event loop briefly
STREAMING_WRITE_S = 0.002  # while the peer streams (reads come full), what goes to it waits this long
# at most, so that the confirms of many reads share one write (each write is a costly system call)
WRITE_BUFFER_HIGH = 1 << 20  # bytes waiting for the peer past which its connection is not read from


class Session:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        gateway: Gateway,
        authenticator: Authenticator,
        *,
        heartbeat: int = 60,
        clock=time.monotonic,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._auth = authenticator
        self._clock = clock
        self.gateway = gateway
        self.connection = ServerConnection(clock(), heartbeat=heartbeat)
        self.channels: dict[int, Channel] = {}
        self.owner = gateway.connection_owner()  # of this connection's exclusive queues
        self.owned: set[str] = set()  # their names
        self.access: Permits = Access(Permission(user="", vhost="", configure="", write="", read=""))
        self._acl_user = False  # logged in as a user of the cluster's ACL
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "-"
        self._write: asyncio.Handle | None = None  # the write to come, on the next turn or a timer
        self._streaming = False  # the last read came full: more is on its way
        self._timer: asyncio.TimerHandle | None = None
        self._closed_by_peer = False
        self._timer_at = 0.0
        self.published = False  # whether it ever published (the resource alarm blocks only publishers)
        self.throttle = PublisherThrottle(self.blocked, self.unblocked)  # over a quota: this one waits
        gateway.session_started(self)

    async def run(self) -> None:
        """Serve the connection until it ends, whatever the peer sends."""
        try:
            await self._serve()
            if self._closed_by_peer:  # as RabbitMQ: the client closes the socket after close-ok
                await asyncio.wait_for(self._discard_until_eof(), CLOSE_OK_TIMEOUT)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the peer went away
        finally:
            self.gateway.session_ended(self)
            await self._release()
            self._writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await self._writer.wait_closed()

    async def _discard_until_eof(self) -> None:
        """Read what the peer still sends after its close (closing with unread data would reset the
        connection under the peer's last writes)."""
        while await self._reader.read(READ_SIZE):
            pass

    async def shutdown(self) -> None:
        """Close the connection as a stopping server does: 320 CONNECTION_FORCED."""
        error = ConnectionException(
            ReplyCode.CONNECTION_FORCED, "broker forced connection closure with reason 'shutdown'"
        )
        await self._handle(self.connection.close(error, self._clock()))

    async def _serve(self) -> None:
        connection, alarm = self.connection, self.gateway.alarm
        self._arm()
        try:
            while not connection.closed:
                if alarm.on and self.published:  # a blocked publisher is not read from (RabbitMQ's way)
                    await alarm.wait_cleared()
                    connection.paused(self._clock())
                    continue
                if self.throttle.on:  # nor one whose puts wait on flow control
                    await self.throttle.wait()
                    connection.paused(self._clock())
                    continue
                data = await self._reader.read(READ_SIZE)
                if not data:
                    return
                self._streaming = len(data) == READ_SIZE
                await self._handle(connection.receive_data(data, self._clock()))
                self._arm()
                if self._streaming:  # more is likely read already: the others' turn first
                    await asyncio.sleep(0)
            await self._flush()
        finally:
            if self._timer is not None:
                self._timer.cancel()

    def _arm(self) -> None:
        """Have `_tick` run by the state machine's next deadline (a timer per connection rather than a
        timeout per read: idle connections cost one timer per heartbeat interval)."""
        deadline = self.connection.next_deadline()
        if deadline is None or (self._timer is not None and self._timer_at <= deadline):
            return  # no deadline, or the timer set fires early enough (and looks again then)
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = deadline
        self._timer = asyncio.get_running_loop().call_later(max(0.0, deadline - self._clock()), self._tick)

    def _tick(self) -> None:
        self._timer = None
        connection, now = self.connection, self._clock()
        if (self.gateway.alarm.on and self.published) or self.throttle.on:
            connection.paused(now)  # its silence while blocked is ours, not a missed heartbeat
        events = connection.tick(now)
        self._write_pending()
        if events:
            self.gateway.tasks.spawn(self._handle(events), "connection ticked")
        if connection.closed:
            self._writer.close()  # ends the read the serving loop waits in
        else:
            self._arm()

    async def _handle(self, events: list[ev.Event]) -> None:
        while events:
            event = events.pop(0)
            try:
                events += await self._answer(event)
            except ChannelException as e:
                self.close_channel(getattr(event, "channel", 0), e)
            except ConnectionException as e:
                events += self.connection.close(e, self._clock())
            except (MetaError, MessagingError) as e:  # a service the gateway needs is unavailable
                error = ConnectionException(ReplyCode.INTERNAL_ERROR, str(e))
                events += self.connection.close(error, self._clock())
        for channel in self.channels.values():
            channel.flush()
        if self.connection.closed:
            await self._flush()
            return
        self.send(b"")  # one write a turn with the deliveries of that turn (a write is a system call)
        if self._writer.transport.get_write_buffer_size() > WRITE_BUFFER_HIGH:
            await self._writer.drain()  # a peer that does not read is not read from either

    async def _answer(self, event: ev.Event) -> list[ev.Event]:
        connection, now = self.connection, self._clock
        if isinstance(event, ev.ContentReceived):
            self.published = True
            channel = self.channels.get(event.channel)
            if channel is not None:
                channel.publish(event)
        elif isinstance(event, ev.MethodReceived):
            channel = self.channels.get(event.channel)
            if channel is not None:
                if isinstance(event.method, fast.Ack | fast.Nack | fast.Reject):
                    channel.acknowledge(event.method)
                else:
                    await channel.handle(event.method)
        elif isinstance(event, ev.ChannelOpened):
            self.channels[event.channel] = Channel(self, event.channel)
        elif isinstance(event, ev.ChannelClosed):
            closed = self.channels.pop(event.channel, None)
            if closed is not None:  # stored, confirmed and handed back before the close-ok
                await closed.close()
            if event.reply:  # after the answers to its earlier methods
                connection.send_frames(event.reply, now())
        elif isinstance(event, ev.LoginRequested):
            refusal = await self._login(event.username, event.password)
            if refusal is None:
                CALLER.set(event.username)  # its puts count for the user's quotas
                return connection.accept_login(event.username, now())
            audit.refused(event.username, "amqp=connection.start-ok", self.peer, refusal)
            return connection.refuse_login(event.mechanism, now())
        elif isinstance(event, ev.VhostRequested):
            over = await self.gateway.over_connection_limit(connection.username)
            if over is not None:
                audit.refused(connection.username, "amqp=connection.open", self.peer, over)
                return connection.refuse_vhost(over, now())
            access = await self._access(connection.username, event.vhost)
            if access is not None:
                self.access = access
                return connection.open_vhost(now())
            return connection.refuse_vhost(f"vhost {event.vhost} not found", now())
        elif isinstance(event, ev.SecretUpdated):
            # RabbitMQ's internal users take any new secret (it matters to token backends only)
            connection.accept_secret(now())
        elif isinstance(event, ev.ConnectionClosed):
            self._closed_by_peer = event.by_peer
            if event.code != ReplyCode.REPLY_SUCCESS:
                log.info("AMQP connection closed: %s %s", event.code, event.text)
            await self._release()
        return []

    async def _login(self, username: str, password: str) -> str | None:
        """None when the credentials are good; else why not. A user of the cluster's ACL logs in with
        its secret key, whatever the metadata service holds under the same name."""
        acl = self.gateway.acl
        if acl is not None and username in acl.users:
            self._acl_user = True
            return login_refusal(acl, username, password)
        self._acl_user = False
        return None if await self._auth.login(username, password) else "wrong username or password"

    async def _access(self, username: str, vhost: str) -> Permits | None:
        acl = self.gateway.acl
        if acl is not None and self._acl_user:
            try:
                await self.gateway.catalog.get(vhost)
            except NotFound:
                return None
            return AclAccess(acl, username, vhost, self.peer)
        permission = await self._auth.permission(username, vhost)
        return Access(permission) if permission is not None else None

    async def _release(self) -> None:
        """The connection is over: its channels give back what they hold, its exclusive queues go."""
        channels, self.channels = list(self.channels.values()), {}
        for channel in channels:
            await channel.close()
        owned, self.owned = list(self.owned), set()
        if owned:
            topology = await self.gateway.catalog.get(self.connection.vhost)
            for name in owned:
                queue = topology.queue(name)
                if queue is not None:
                    with contextlib.suppress(MetaError, MessagingError):
                        await self.gateway.delete_queue(queue, self.owner)

    def send(self, data: bytes) -> None:
        """Frames from a channel's own work (deliveries, confirms): written on the next loop turn, or
        while the peer streams, a moment later with what follows."""
        if data:
            self.connection.send_frames(data, self._clock())
        write = self._write
        if write is not None and (self._streaming or not isinstance(write, asyncio.TimerHandle)):
            return
        if write is not None:  # the peer stopped streaming: what waits goes on the next turn
            write.cancel()
        loop = asyncio.get_running_loop()
        if self._streaming:
            self._write = loop.call_later(STREAMING_WRITE_S, self._write_pending)
        else:
            self._write = loop.call_soon(self._write_pending)

    def _write_pending(self) -> None:
        if self._write is not None:  # (a tick writes before the write scheduled)
            self._write.cancel()
            self._write = None
        data = self.connection.data_to_send()
        if data and not self._writer.is_closing():
            self._writer.write(data)

    def blocked(self, reason: str) -> None:
        if self._understands("connection.blocked"):
            self.connection.send_method(0, commands.Connection.Blocked(reason), self._clock())
            self.send(b"")

    def unblocked(self) -> None:
        if self._understands("connection.blocked"):
            self.connection.send_method(0, commands.Connection.Unblocked(), self._clock())
            self.send(b"")

    def _understands(self, capability: str) -> bool:
        capabilities = self.connection.client_properties.get("capabilities")
        return isinstance(capabilities, dict) and capabilities.get(capability) is True

    def fail(self, number: int, error: AMQPError) -> None:
        """An error found outside the reading loop (while storing publishes)."""
        if isinstance(error, ChannelException):
            self.close_channel(number, error)
            return
        events = self.connection.close(error, self._clock())
        self.send(b"")
        if events:
            self.gateway.tasks.spawn(self._handle(events), "connection closed")

    def close_channel(self, number: int, error: ChannelException) -> None:
        channel = self.channels.get(number)
        if channel is not None:
            channel.closing = True
        self.connection.close_channel(number, error, self._clock())
        self.send(b"")

    async def _flush(self) -> None:
        data = self.connection.data_to_send()
        if data and not self._writer.is_closing():
            self._writer.write(data)
            await self._writer.drain()
