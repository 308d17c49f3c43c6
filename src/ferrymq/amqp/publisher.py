"""Storing a channel's publishes: route each through its vhost's topology, put it into the topic of
every queue it reaches (the messages of one read go as one batch per topic), return the unroutable
mandatory ones (basic.return before their confirm, as RabbitMQ) and confirm in order. Batches of one
channel are stored one after the other, so a queue sees a channel's messages in publish order."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from pamqp import commands

from ferrymq.amqp.access import Permits
from ferrymq.amqp.direct_reply import REPLY_PREFIX, REPLY_TO, DirectReplies
from ferrymq.amqp.flow import PublisherThrottle, flow_controlled
from ferrymq.amqp.queue_settings import placed
from ferrymq.amqp.topology import Topology
from ferrymq.messaging.api import MessagingError, SendOutcome
from ferrymq.meta.entities import Queue
from ferrymq.protocol.amqp import fast
from ferrymq.protocol.amqp.basic_properties import BasicProperties, decode_basic_properties
from ferrymq.protocol.amqp.errors import AMQPError, ChannelException, ConnectionException, ReplyCode
from ferrymq.protocol.amqp.events import ContentReceived
from ferrymq.protocol.amqp.mapping import to_rocketmq
from ferrymq.protocol.amqp.methods import encode_method
from ferrymq.protocol.batch import encode_batch

if TYPE_CHECKING:
    from ferrymq.amqp.gateway import Gateway

log = logging.getLogger(__name__)
_PUBLISH = (fast.BASIC, fast.PUBLISH)
FLOW_CONTROL_WAIT_S = 30.0  # how long a put over a quota is tried again before its publish is nacked


Entry = tuple[int, ContentReceived, str]  # index in its batch, the publish, its RocketMQ properties


class PublishOutput(Protocol):
    """What the publisher sends back on its channel, and how it fails the channel."""

    number: int
    reply_token: str | None  # of the channel's direct reply-to consumer

    @property
    def access(self) -> Permits: ...

    @property
    def frame_max(self) -> int: ...

    def send(self, data: bytes) -> None: ...

    def fail(self, error: AMQPError) -> None: ...

    @property
    def throttle(self) -> PublisherThrottle: ...


@dataclass(slots=True)
class _Routed:
    """A batch routed through the topology at `version`: its entries by (topic, queue id), the frames
    and direct replies it sends, and the error that cut it short (`batch`: the publishes before it)."""

    version: int
    batch: Sequence[ContentReceived]
    by_place: dict[tuple[str, int], tuple[Queue, list[Entry]]] = field(default_factory=dict)
    frames: list[bytes] = field(default_factory=list)
    replies: list[tuple[ContentReceived, bytes]] = field(default_factory=list)
    error: AMQPError | None = None


class Publisher:
    """One task per channel stores, each round taking every publish flushed meanwhile (up to ROUND):
    a channel whose reads come faster than their puts has them merged, never a chain of tasks each
    waiting for the one before, which falls further behind with every read on a busy loop."""

    ROUND = 512  # publishes stored in one round; then the others' turn

    def __init__(self, gateway: Gateway, vhost: str, out: PublishOutput) -> None:
        self.gateway = gateway
        self.vhost = vhost
        self.out = out
        self._batch: list[ContentReceived] = []  # added since the last flush
        self._waiting: list[ContentReceived] = []  # flushed, to store in the next round
        self._storing: asyncio.Task | None = None
        # the last publish's properties (wire form), exchange and routing key, decoded and mapped:
        # many clients (pika's users, a migration's source) publish alike message after message
        self._last_key: tuple[bytes, str, str] | None = None
        self._last: tuple[BasicProperties, str] = (BasicProperties(), "")
        self._missed = False  # a publish of the batch being routed found no queue (or no exchange)

    def add(self, event: ContentReceived) -> None:
        self._batch.append(event)

    def flush(self) -> None:
        """Have what came since the last flush stored, after what is being stored already."""
        if self._batch:
            self._waiting += self._batch
            self._batch = []
            if self._storing is None or self._storing.done():
                self._storing = self.gateway.tasks.spawn(self._store_waiting(), "store publishes")

    async def settled(self) -> None:
        """Wait until every publish added so far is stored (or refused)."""
        self.flush()
        if self._storing is not None and not self._storing.done():
            await asyncio.shield(self._storing)

    async def store(self, batch: Sequence[ContentReceived]) -> None:
        """Store `batch` now (a transaction's commit), after what is being stored, and confirm it."""
        await self.settled()
        await self._store(batch)

    async def _store_waiting(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting[: self.ROUND], self._waiting[self.ROUND :]
            try:
                await self._store(batch)
            except Exception:  # (its channel heard of it, if it was the client's doing)
                log.exception("storing %d publishes", len(batch))
            if self._waiting:
                await asyncio.sleep(0)

    async def _store(self, batch: Sequence[ContentReceived]) -> None:
        """Route and store the publishes up to the first that fails the channel (or connection), confirm
        those, then fail."""
        catalog, since = self.gateway.catalog, asyncio.get_running_loop().time()
        topology = await catalog.get(self.vhost)
        self.gateway.counts.received += len(batch)
        now_ms = int(time.time() * 1000)
        self._missed = False
        routed = self._route_batch(topology, batch, now_ms)
        if self._missed:  # declared through another gateway a moment ago, not yet here by the watch?
            fresh = await catalog.current(self.vhost, since)
            if fresh is not topology or fresh.version != routed.version:
                topology, routed = fresh, self._route_batch(fresh, batch, now_ms)
        by_place, frames, replies, error, batch = (
            routed.by_place,
            routed.frames,
            routed.replies,
            routed.error,
            routed.batch,
        )
        for event, wire in replies:
            delivered = await self.gateway.replies.reply(event.publish.routing_key, wire, event.body)
            if not delivered and event.publish.mandatory:
                frames.append(self._returned(event))
        if frames:  # returns go before any confirm
            self.out.send(b"".join(frames))
        for queue, _ in by_place.values():
            await self.gateway.ensure_topic(queue, known=True)
        stored = [True] * len(batch)
        limited = {
            place: v for place, v in by_place.items() if self.gateway.settings.of(topology, v[0]).limited
        }
        for place, (queue, entries) in limited.items():
            by_place[place] = (queue, await self.gateway.queue_limits.admit(topology, queue, entries, stored))
        puts = [self._put(place, queue, entries, topology) for place, (queue, entries) in by_place.items()]
        if len(puts) == 1 or self.gateway.service.in_process:  # (most go to one queue)
            results = [await put for put in puts]
        else:
            results = await asyncio.gather(*puts)
        for (_, entries), ok in zip(by_place.values(), results, strict=True):
            if not ok:
                for index, _, _ in entries:
                    stored[index] = False
        for queue, _ in limited.values():
            await self.gateway.queue_limits.trim(topology, queue)
        for queue, _ in by_place.values():
            self.gateway.expiry.wake(queue)
        self.out.send(self._confirms(batch, stored))
        if error is not None:
            self.out.fail(error)

    def _route_batch(self, topology: Topology, batch: Sequence[ContentReceived], now_ms: int) -> _Routed:
        """Route the publishes up to the first that fails the channel (or connection)."""
        routed = _Routed(topology.version, batch)
        for index, event in enumerate(batch):
            try:
                routes = self._routes(topology, event, routed.frames, routed.replies, now_ms)
            except AMQPError as e:
                routed.error, routed.batch = e, batch[:index]
                break
            for queue, queue_id, properties in routes:
                routed.by_place.setdefault((queue.topic, queue_id), (queue, []))[1].append(
                    (index, event, properties)
                )
        return routed

    def _routes(
        self,
        topology: Topology,
        event: ContentReceived,
        frames: list[bytes],
        replies: list[tuple[ContentReceived, bytes]],
        now_ms: int,
    ) -> list[tuple[Queue, int, str]]:
        """(queue, queue id or -1, RocketMQ properties) for each queue the publish reaches; a direct
        reply goes to `replies` instead, a mandatory publish no queue takes to `frames` (returned)."""
        publish, size = event.publish, len(event.body)
        if size > self.gateway.max_message_size:
            raise ChannelException(
                ReplyCode.PRECONDITION_FAILED,
                f"message size {size} is larger than configured max size {self.gateway.max_message_size}",
                *_PUBLISH,
            )
        if publish.immediate:
            raise ConnectionException(ReplyCode.NOT_IMPLEMENTED, "immediate=true", *_PUBLISH)
        self.out.access.check("write", "exchange", publish.exchange, *_PUBLISH)
        key = (event.properties, publish.exchange, publish.routing_key)
        if key == self._last_key:  # published like the last one: decoded and mapped already
            decoded, properties = self._last
            return self._placed(topology, publish, decoded, properties, event, frames, now_ms)
        try:
            decoded = decode_basic_properties(event.properties)
        except ValueError as e:
            raise ConnectionException(
                ReplyCode.FRAME_ERROR, f"cannot decode content header: {e}", *_PUBLISH
            ) from None
        wire = event.properties
        if decoded.reply_to == REPLY_TO:
            if self.out.reply_token is None:
                raise ChannelException(
                    ReplyCode.PRECONDITION_FAILED, "fast reply consumer does not exist", *_PUBLISH
                )
            wire = DirectReplies.rewritten(decoded, self.out.reply_token)
            decoded.reply_to = REPLY_PREFIX + self.out.reply_token
        if not publish.exchange and publish.routing_key.startswith(REPLY_PREFIX):
            replies.append((event, wire))
            return []
        properties = to_rocketmq(publish.exchange, publish.routing_key, wire, decoded)
        if wire is event.properties:  # (a direct reply-to request's are rewritten per channel)
            self._last_key, self._last = key, (decoded, properties)
        return self._placed(topology, publish, decoded, properties, event, frames, now_ms)

    def _placed(
        self,
        topology: Topology,
        publish: fast.Publish,
        decoded: BasicProperties,
        properties: str,
        event: ContentReceived,
        frames: list[bytes],
        now_ms: int,
    ) -> list[tuple[Queue, int, str]]:
        """The routes of a publish whose properties are decoded and mapped (see `_routes`)."""
        routed = topology.route(publish.exchange, publish.routing_key, decoded.headers)
        queues = routed.queues
        if not queues:
            self._missed = True
        if routed.error is not None:
            raise routed.error
        self.out.access.check_routed(queues, *_PUBLISH)
        if not queues:
            if publish.mandatory:
                frames.append(self._returned(event))
            return []
        settings_of = self.gateway.settings.of
        return [
            (queue, *placed(settings_of(topology, queue), properties, decoded, now_ms)) for queue in queues
        ]

    def _returned(self, event: ContentReceived) -> bytes:
        method = commands.Basic.Return(
            reply_code=ReplyCode.NO_ROUTE, reply_text="NO_ROUTE",
            exchange=event.publish.exchange, routing_key=event.publish.routing_key,
        )  # fmt: skip
        number = self.out.number
        return encode_method(number, method) + fast.encode_content(
            number, event.properties, event.body, self.out.frame_max
        )

    async def _put(
        self, place: tuple[str, int], queue: Queue, entries: list[Entry], topology: Topology
    ) -> bool:
        if not entries:
            return True
        service, (topic, queue_id) = self.gateway.service, place
        target = None if queue_id < 0 else await self.gateway.broker_queue(topic, queue_id)
        throttle, held = self.out.throttle, False
        deadline, pause = time.monotonic() + FLOW_CONTROL_WAIT_S, 0.01
        try:
            while True:
                try:
                    if len(entries) == 1:
                        _, event, properties = entries[0]
                        outcome: SendOutcome = await service.send(topic, event.body, properties, queue=target)
                    else:
                        batch = encode_batch([(e.body, p.encode(), 0) for _, e, p in entries])
                        outcome = await service.send_batch(topic, batch, queue=target)
                except MessagingError:
                    return False
                if not flow_controlled(outcome) or time.monotonic() + pause > deadline:
                    break
                if not held:  # over a quota: the connection is blocked, the put goes again soon
                    throttle.hold(outcome)
                    held = True
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.25)
        finally:
            if held:
                throttle.let_go()
        if not held:  # a put given up on flow control is no lack of resources
            self.gateway.alarm.check(outcome)
        if outcome.stored:
            self.gateway.note_stored(topic, outcome.queue_id, outcome.queue_offset + len(entries))
        if self.gateway.settings.of(topology, queue).message_trace:
            events = [e for _, e, _ in entries]
            self.gateway.tracer.published(
                queue, outcome, [e.publish.routing_key for e in events], [len(e.body) for e in events]
            )
        return outcome.stored

    def _confirms(self, batch: Sequence[ContentReceived], stored: list[bool]) -> bytes:
        """basic.ack / basic.nack for the confirm-mode publishes of `batch` (one ack with multiple when
        all of them were stored)."""
        sequences = [(e.sequence, ok) for e, ok in zip(batch, stored, strict=True) if e.sequence]
        if not sequences:
            return b""
        self.gateway.counts.confirmed += sum(ok for _, ok in sequences)
        number = self.out.number
        if all(ok for _, ok in sequences):
            last = sequences[-1][0]
            return fast.encode_ack(number, fast.Ack(last, len(sequences) > 1))
        return b"".join(
            fast.encode_ack(number, fast.Ack(seq, False) if ok else fast.Nack(seq, False, False))
            for seq, ok in sequences
        )
