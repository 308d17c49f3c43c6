"""Draining a queue straight into the brokers behind the gateway: the RocketMQ topic the gateway maps
the queue to (read from its metadata) gets its messages in batch puts (up to half the prefetch window
each), with the records the gateway's own publish would make (its property mapping and the queue's
TTL), instead of an AMQP publish and confirm per message through the gateway. That saves the
gateway's frame parsing, routing and confirms, most of a drain's CPU beside RabbitMQ's. RabbitMQ's
messages are acknowledged only once the broker stored them, one batch at a time, so the queue keeps
RabbitMQ's order. Queues whose puts the gateway shapes further (length limits, priority levels,
tracing) or whose topic the gateway has not made yet are drained through the gateway as before."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from ferrymq.amqp.flow import flow_controlled
from ferrymq.amqp.queue_settings import QueueSettings, placed
from ferrymq.amqp.topology import Topology
from ferrymq.messaging.api import MessageQueue, MessagingError
from ferrymq.messaging.remote import RemoteMessageService
from ferrymq.migrate.definitions import metadata
from ferrymq.migrate.drain import DrainOptions, QueueDrain
from ferrymq.migrate.wire import Connection
from ferrymq.protocol.amqp import fast
from ferrymq.protocol.amqp.basic_properties import decode_basic_properties
from ferrymq.protocol.amqp.mapping import to_rocketmq
from ferrymq.protocol.batch import BATCH_OVERHEAD, encode_batch

BATCH_BYTES = 1 << 20  # a put's records at most (one larger message goes alone)
QUIET_S = 0.02  # RabbitMQ sent nothing this long (the queue's tail): what gathered is put however little
FLOW_CONTROL_WAIT_S = 30.0  # how long a put over a quota is tried again before the queue fails


@dataclass(frozen=True)
class BrokerAccess:
    """Where the gateway's brokers and metadata are: a NameServer, and the metadata service
    (host:port) or the database it keeps (a SQLAlchemy URL); with authentication on in the cluster,
    the user whose keys sign the puts (one allowed to publish to the queues' topics)."""

    namesrv: str
    meta: str | None = None
    meta_database: str | None = None
    access_key: str | None = None
    secret_key: str | None = None


@dataclass(frozen=True)
class Place:
    """Where a queue's messages are stored, and the settings its records depend on."""

    topic: str
    queue: MessageQueue
    settings: QueueSettings


class Brokers:
    """The brokers of the gateway, and its vhost's topology as the metadata had it when opened."""

    def __init__(self, service: RemoteMessageService, topology: Topology) -> None:
        self.service = service
        self.topology = topology

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, access: BrokerAccess, vhost: str) -> AsyncIterator[Brokers]:
        async with metadata(access.meta, access.meta_database) as meta:
            topology = Topology.from_snapshot(await meta.snapshot(vhost))
        service = RemoteMessageService(
            access.namesrv, access_key=access.access_key, secret_key=access.secret_key
        )
        async with service:
            yield cls(service, topology)

    async def place(self, name: str) -> Place | None:
        """Where queue `name` is stored, or None when its messages should go through the gateway."""
        queue = self.topology.queue(name)
        if queue is None:
            return None
        settings = QueueSettings(self.topology.effective_queue_args(queue))
        if settings.limited or settings.max_priority or settings.message_trace:
            return None
        try:
            if await self.service.topic_config(queue.topic) is None:
                return None
            route = await self.service.route(queue.topic)
        except MessagingError:
            return None
        if not route:
            return None
        return Place(queue.topic, MessageQueue(queue.topic, route[0].broker_name, 0), settings)

    async def put(self, place: Place, batch: bytes) -> None:
        """Store `batch` (a SEND_BATCH_MESSAGE body); over a quota, again until FLOW_CONTROL_WAIT_S."""
        deadline, pause = time.monotonic() + FLOW_CONTROL_WAIT_S, 0.01
        while True:
            outcome = await self.service.send_batch(place.topic, batch, queue=place.queue)
            if outcome.stored:
                return
            if not flow_controlled(outcome) or time.monotonic() + pause > deadline:
                raise MessagingError(f"the broker refused a put: {outcome.remark}", outcome.code)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.25)


class StoreDrain(QueueDrain):
    """A queue drained into its broker queue: delivered messages gather until they fill half the
    prefetch window (or half a batch, or the window is all ours), or RabbitMQ has sent nothing for
    QUIET_S; they wait while the put before them is stored, then go as one batch, and their upstream
    ack (multiple) follows the broker's answer. Half a window per put leaves RabbitMQ the other half
    to deliver meanwhile, and makes puts (and acks) few: each costs both sides far more than a
    message does."""

    def __init__(
        self, name: str, source: Connection, sink: Connection, options: DrainOptions, stop: asyncio.Event,
        brokers: Brokers, place: Place,
    ) -> None:  # fmt: skip
        super().__init__(name, source, sink, options, stop)
        self._brokers, self._place = brokers, place
        self._pending: list[tuple[int, bytes, bytes]] = []  # (upstream tag, properties, body)
        self._pending_bytes = 0  # of the bodies pending
        self._enough = max(1, options.prefetch // 2)  # messages that make a put without waiting
        self._quiet: asyncio.TimerHandle | None = None  # puts what gathered once RabbitMQ went quiet
        self._storing: asyncio.Task[None] | None = None
        self.progress.direct = True

    async def _open_sink(self) -> None:
        pass

    def _deliver(self, tag: int, redelivered: bool, properties: bytes, body: bytes) -> None:
        self._order.append(tag)
        self._pending.append((tag, properties, body))
        self._pending_bytes += len(body)
        if redelivered:
            self.progress.redelivered += 1

    def _gathered(self) -> bool:
        """Enough for a put, or all RabbitMQ may deliver before more is acknowledged."""
        return (
            len(self._pending) >= self._enough
            or self._pending_bytes >= BATCH_BYTES // 2
            or len(self._order) >= self._options.prefetch
        )

    def _flush_publishes(self) -> None:
        """After each read: put what gathered if it is enough, else once RabbitMQ stays quiet."""
        if not self._pending or self._failed or (self._storing is not None and not self._storing.done()):
            return
        if self._gathered():
            self._store()
        elif self._quiet is None:
            self._quiet = asyncio.get_running_loop().call_later(QUIET_S, self._store)

    def _store(self) -> None:
        if self._quiet is not None:
            self._quiet.cancel()
            self._quiet = None
        if self._pending and not self._failed and (self._storing is None or self._storing.done()):
            self._storing = asyncio.ensure_future(self._store_pending())

    def _detach(self) -> None:
        super()._detach()
        if self._quiet is not None:
            self._quiet.cancel()
        if self._storing is not None:  # (only after a failure: a drain settles its puts first)
            self._storing.cancel()

    async def _store_pending(self) -> None:
        order, progress = self._order, self.progress
        first = True
        while self._pending and not self._failed and (first or self._gathered()):
            first = False
            try:
                batch, last = self._taken()
                await self._brokers.put(self._place, batch)
            except (MessagingError, ValueError) as e:  # what was not acknowledged stays in RabbitMQ
                self._fail(f"storing messages of '{self.name}' failed: {e}")
                return
            if self._failed:
                return  # its channel is closing: RabbitMQ takes back what it delivered
            moved = 0
            while order and order[0] <= last:
                order.popleft()
                moved += 1
            self._source.write(fast.encode_ack(self._consuming.number, fast.Ack(last, True)))  # type: ignore[union-attr]
            progress.drained += moved
        if self._pending and not self._failed:  # too few to go now: they go with the next read, or soon
            self._quiet = self._quiet or asyncio.get_running_loop().call_later(QUIET_S, self._store)

    def _taken(self) -> tuple[bytes, int]:
        """The next put's batch body (the oldest pending messages, up to BATCH_BYTES) and the upstream
        tag of its last message. Messages published alike share their mapped properties."""
        pending, place, name = self._pending, self._place, self.name
        now_ms = int(time.time() * 1000)
        entries: list[tuple[bytes, bytes, int]] = []
        wire: bytes | None = None
        mapped, size, taken, bodies = b"", 0, 0, 0
        for _tag, properties, body in pending:
            if properties != wire:
                decoded = decode_basic_properties(properties)
                text = to_rocketmq("", name, properties, decoded)
                mapped, wire = placed(place.settings, text, decoded, now_ms)[1].encode(), properties
            size += BATCH_OVERHEAD + len(body) + len(mapped)
            if taken and size > BATCH_BYTES:
                break
            entries.append((body, mapped, 0))
            taken += 1
            bodies += len(body)
        last = pending[taken - 1][0]
        self._pending_bytes -= bodies
        del pending[:taken]
        return encode_batch(entries), last
