"""What every connection of one gateway shares: the messaging core it stores into and pops from, the
metadata service, the vhosts' topologies and the queue feeds, and the limits RabbitMQ users know."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from ferrymq.amqp.alarm import ResourceAlarm
from ferrymq.amqp.catalog import Metadata, VhostCatalog
from ferrymq.amqp.counts import MessageCounts
from ferrymq.amqp.dead_letters import DeadLetters, Reason
from ferrymq.amqp.direct_reply import DirectReplies
from ferrymq.amqp.expiry import ExpirySweeper
from ferrymq.amqp.feeds import FeedRegistry
from ferrymq.amqp.limits import QueueLimits
from ferrymq.amqp.queue_settings import EXPIRES, SettingsCache, topic_queues
from ferrymq.amqp.retries import GradedRetries
from ferrymq.amqp.tracing import Tracer
from ferrymq.auth.registry import AuthRegistry
from ferrymq.messaging.api import MessageQueue, MessageService, MessagingError
from ferrymq.meta.entities import Queue
from ferrymq.net.tasks import BackgroundTasks
from ferrymq.protocol.amqp.errors import ChannelException, ReplyCode
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.message_ext import MessageExt, decode_records
from ferrymq.protocol.pop import POP_CK, pop_retry_topic

if TYPE_CHECKING:
    from ferrymq.amqp.channel import Channel
    from ferrymq.amqp.session import Session

log = logging.getLogger(__name__)

DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024  # RocketMQ's maxMessageSize; RabbitMQ's is 128 MiB
CONSUMER_TIMEOUT_MS = 1_800_000  # RabbitMQ's consumer_timeout: 30 minutes
CONSUMER_TIMEOUT_CHECK_S = 60.0  # how often channels are checked for it (RabbitMQ: once a minute)


@dataclass(frozen=True)
class GatewayLimits:
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    consumer_timeout_ms: int = CONSUMER_TIMEOUT_MS


class Gateway:
    def __init__(
        self,
        service: MessageService,
        metadata: Metadata,
        limits: GatewayLimits | None = None,
        *,
        acl: AuthRegistry | None = None,
    ) -> None:
        """``acl``: the cluster's users and rules, when its users may log in (acl.py)."""
        self.service = service
        self.metadata = metadata
        self.acl = acl
        self.limits = limits or GatewayLimits()
        self.max_message_size = min(self.limits.max_message_size, service.max_body_size)
        self.tasks = BackgroundTasks("AMQP gateway")
        self.catalog = VhostCatalog(metadata, self.tasks)
        self.feeds = FeedRegistry(self)
        self.catalog.on_queue_gone(self.feeds.queue_gone)
        self.settings = SettingsCache()
        self.dead_letters = DeadLetters(self)
        self.queue_limits = QueueLimits(self)
        self.retries = GradedRetries(self)
        self.tracer = Tracer(self)
        self.alarm = ResourceAlarm(self)
        self._sessions: set[Session] = set()
        self.counts = MessageCounts()
        self.expiry = ExpirySweeper(self)
        self.tasks.spawn(self.expiry.run(), "expire messages")
        self.channels: set[Channel] = set()
        self.replies = DirectReplies(self)
        self.tasks.spawn(self._consumer_timeouts(), "consumer timeouts")
        self._broker_queues: dict[tuple[str, int], MessageQueue] = {}
        self._topics: set[str] = set()  # queues' topics known to exist on the brokers
        self._stored_ends: dict[tuple[str, int], int] = {}  # (topic, queue id): end of our last put
        self.catalog.on_queue_gone(self._forget)
        self.id = secrets.token_hex(6)  # names this gateway in exclusive queues' owners
        self._connections = itertools.count(1)
        if acl is not None:
            acl.listeners.append(self._rules_changed)

    def _rules_changed(self) -> None:
        """The cluster's users or rules changed: consumers that may no longer read are cancelled."""
        for channel in list(self.channels):
            channel.rules_changed()

    def session_started(self, session: Session) -> None:
        self._sessions.add(session)

    def session_ended(self, session: Session) -> None:
        self._sessions.discard(session)

    def sessions(self) -> list[Session]:
        return list(self._sessions)

    async def over_connection_limit(self, username: str) -> str | None:
        """Why a connection of `username` may not open now (RabbitMQ's words for a user's
        max-connections), or None. The limit is the brokers' connections quota of the user;
        connections count once open (past connection.open)."""
        try:
            limit = await self.service.user_connection_limit(username)
        except MessagingError as e:
            log.warning("connection limit of %s unknown, not applied: %s", username, e)
            return None
        if limit is None:
            return None
        opened = sum(1 for s in self._sessions if s.access.user == username)
        if opened < limit:
            return None
        return f"Connection refused for user '{username}': user connection limit ({limit}) is reached"

    def connection_owner(self) -> str:
        """A name, unique across gateways, for a new connection's exclusive queues."""
        return f"{self.id}-{next(self._connections)}"

    async def ensure_topic(self, queue: Queue, known: bool = False) -> None:
        """The queue's topic on the brokers, created unless `known` to exist or found: one queue, so a
        queue keeps RabbitMQ's order (one per priority level for a priority queue). A queue can come
        through the metadata alone (an import of definitions): its first publish or consumer
        creates it here, never the broker's auto-creation with its default queue count. A priority
        queue's retry topic gets a queue per level too, so that a requeued message goes back to its
        level, ahead of those waiting there (as in RabbitMQ), not ahead of higher levels."""
        if queue.topic in self._topics:
            return
        levels = topic_queues(queue)
        if not known or await self.service.topic_config(queue.topic) is None:
            await self.service.create_topic(queue.topic, levels)
        if levels > 1:
            retry = pop_retry_topic(queue.group, queue.topic)
            config = await self.service.topic_config(retry)
            if config is None or config.read_queue_nums != levels:
                await self.service.create_topic(retry, levels)
        self._topics.add(queue.topic)

    async def broker_queue(self, topic: str, queue_id: int) -> MessageQueue:
        """Queue `queue_id` of `topic` on its (first) broker: where a priority level lives."""
        known = self._broker_queues.get((topic, queue_id))
        if known is None:
            route = await self.service.route(topic)
            if not route:
                raise MessagingError(f"topic {topic} has no route")
            known = self._broker_queues[(topic, queue_id)] = MessageQueue(
                topic, route[0].broker_name, queue_id
            )
        return known

    async def broadcast_view(self, queue: Queue, consumer: str) -> Queue:
        """The queue as one broadcast consumer reads it: in a consumer group of its own, which starts
        at the messages arriving from now on."""
        digest = hashlib.sha256(f"{queue.group}/{consumer}".encode()).hexdigest()[:24]
        view = msgspec.structs.replace(queue, group=f"AMQP_BC-{digest}")
        for place in await self.queue_places(view):
            await self.service.commit_offset(view.group, place, (await self.service.queue_bounds(place))[1])
        return view

    async def screen(self, queue: Queue, messages: list[MessageExt]) -> list[MessageExt]:
        """The popped messages still to deliver; those expired or past the queue's delivery limit
        are dead-lettered and settled."""
        settings = self.settings.of(await self.catalog.get(queue.vhost), queue)
        now_ms, limit = int(time.time() * 1000), settings.delivery_limit
        live: list[MessageExt] = []
        dead: list[tuple[MessageExt, Reason]] = []
        for message in messages:
            expires = message.properties.get(EXPIRES)
            if expires is not None and int(expires) <= now_ms:
                dead.append((message, "expired"))
            elif limit is not None and message.reconsume_times > limit:
                dead.append((message, "delivery_limit"))
            else:
                live.append(message)
        for message, reason in dead:
            await self.dead_letters.send(queue, message, reason)
        if dead:
            await self.service.ack_batch(queue.group, queue.topic, [m.properties[POP_CK] for m, _ in dead])
        return live

    def _forget(self, queue: Queue) -> None:
        """A queue went (through any gateway): what this one remembered of its topic goes too."""
        topic = queue.topic
        self._broker_queues = {k: v for k, v in self._broker_queues.items() if k[0] != topic}
        self._stored_ends = {k: v for k, v in self._stored_ends.items() if k[0] != topic}
        self._topics.discard(topic)

    def note_stored(self, topic: str, queue_id: int, end: int) -> None:
        """A put through this gateway ended at offset `end` of a queue: counts see it before the
        broker's dispatch has (a publish and then a declare or a length check must agree)."""
        key = (topic, queue_id)
        if end > self._stored_ends.get(key, 0):
            self._stored_ends[key] = end

    async def undispatched(self, queue: Queue) -> bool:
        """Whether a put through this gateway to the queue is not visible to pops yet."""
        for mq in await self.queue_places(queue):
            end = self._stored_ends.get((mq.topic, mq.queue_id))
            if end is not None and end > (await self.service.queue_bounds(mq))[1]:
                return True
        return False

    async def usage(self, queue: Queue, with_bytes: bool) -> tuple[int, int]:
        """(ready messages, their body bytes if asked, else 0) of the queue."""
        count = size = 0
        for mq, at, high in await self._backlog(queue):
            count += max(0, high - at)
            while with_bytes and at < high:
                read = await self.service.read(queue.group, mq, at, 32)
                records = decode_records(read.body()) if read.code == ResponseCode.SUCCESS else []
                if not records:
                    break
                size += sum(len(m.body) for m in records)
                at = records[-1].queue_offset + 1
        return count, size

    async def queue_places(self, queue: Queue, with_retry: bool = False) -> list[MessageQueue]:
        """The broker queues of the queue's topic (and of its retry topic, when asked)."""
        topics = (queue.topic, pop_retry_topic(queue.group, queue.topic)) if with_retry else (queue.topic,)
        found = []
        for topic in topics:
            for data in await self.service.route(topic) or []:
                found += [MessageQueue(topic, data.broker_name, i) for i in range(data.read_queue_nums)]
        return found

    async def _backlog(self, queue: Queue) -> list[tuple[MessageQueue, int, int]]:
        """(broker queue, where the queue's group is, its end) for the queue's topic and retry topic."""
        service, found = self.service, []
        for mq in await self.queue_places(queue, with_retry=True):
            low, high = await service.queue_bounds(mq)
            high = max(high, self._stored_ends.get((mq.topic, mq.queue_id), 0))
            offset = await service.query_offset(queue.group, mq)
            found.append((mq, max(low, offset if offset is not None else low), high))
        return found

    async def ready_count(self, queue: Queue) -> int:
        """The messages of the queue not yet delivered (RabbitMQ's message_count)."""
        try:
            return sum(max(0, high - at) for _, at, high in await self._backlog(queue))
        except MessagingError:
            return 0

    async def purge(self, queue: Queue) -> int:
        """Drop the queue's messages not yet delivered; how many there were."""
        purged = 0
        for mq, at, high in await self._backlog(queue):
            if high > at:
                await self.service.commit_offset(queue.group, mq, high)
                purged += high - at
        return purged

    async def delete_queue(self, queue: Queue, owner: str | None) -> None:
        """The queue, its bindings and its messages (the consumers hear it from the catalog)."""
        await self.metadata.delete_queue(queue.vhost, queue.name, owner)
        for topic in (queue.topic, pop_retry_topic(queue.group, queue.topic)):
            await self.service.delete_topic(topic)
        self._forget(queue)
        await self.catalog.refresh(queue.vhost)

    async def _consumer_timeouts(self) -> None:
        """Close channels holding a delivery unacknowledged past the consumer timeout, as RabbitMQ."""
        timeout_ms = self.limits.consumer_timeout_ms
        while True:
            await asyncio.sleep(min(CONSUMER_TIMEOUT_CHECK_S, timeout_ms / 2000))
            now = time.monotonic()
            for channel in [c for c in self.channels if c.overdue(timeout_ms / 1000, now)]:
                channel.fail(
                    ChannelException(
                        ReplyCode.PRECONDITION_FAILED,
                        f"delivery acknowledgement on channel {channel.number} timed out. Timeout value "
                        f"used: {timeout_ms} ms. This timeout value can be configured, see consumers doc "
                        "guide to learn more",
                    )
                )

    async def close(self) -> None:
        if self.acl is not None and self._rules_changed in self.acl.listeners:
            self.acl.listeners.remove(self._rules_changed)
        self.feeds.close()
        await self.tasks.close()
