"""What every connection of one gateway shares: the messaging core it stores into and pops from, the
metadata service, the vhosts' topologies and the queue feeds, and the limits RabbitMQ users know."""

from __future__ import annotations

import itertools
import secrets
from dataclasses import dataclass

from ferrymq.amqp.catalog import Metadata, VhostCatalog
from ferrymq.amqp.feeds import FeedRegistry
from ferrymq.messaging.api import MessageQueue, MessageService, MessagingError
from ferrymq.meta.entities import Queue
from ferrymq.net.tasks import BackgroundTasks
from ferrymq.protocol.pop import pop_retry_topic

DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024  # RocketMQ's maxMessageSize; RabbitMQ's is 128 MiB
CONSUMER_TIMEOUT_MS = 1_800_000  # RabbitMQ's consumer_timeout: 30 minutes


@dataclass(frozen=True)
class GatewayLimits:
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    consumer_timeout_ms: int = CONSUMER_TIMEOUT_MS


class Gateway:
    def __init__(
        self, service: MessageService, metadata: Metadata, limits: GatewayLimits | None = None
    ) -> None:
        self.service = service
        self.metadata = metadata
        self.limits = limits or GatewayLimits()
        self.max_message_size = min(self.limits.max_message_size, service.max_body_size)
        self.tasks = BackgroundTasks("AMQP gateway")
        self.catalog = VhostCatalog(metadata, self.tasks)
        self.feeds = FeedRegistry(service, self.tasks, self.limits.consumer_timeout_ms)
        self.catalog.on_queue_gone(self.feeds.queue_gone)
        self.id = secrets.token_hex(6)  # names this gateway in exclusive queues' owners
        self._connections = itertools.count(1)

    def connection_owner(self) -> str:
        """A name, unique across gateways, for a new connection's exclusive queues."""
        return f"{self.id}-{next(self._connections)}"

    async def ensure_topic(self, queue: Queue) -> None:
        """The queue's topic on the brokers: one queue, so a queue keeps RabbitMQ's order."""
        await self.service.create_topic(queue.topic, 1)

    async def _queues(self, queue: Queue) -> list[MessageQueue]:
        topics = (queue.topic, pop_retry_topic(queue.group, queue.topic))
        found = []
        for topic in topics:
            for data in await self.service.route(topic) or []:
                found += [MessageQueue(topic, data.broker_name, i) for i in range(data.read_queue_nums)]
        return found

    async def _backlog(self, queue: Queue) -> list[tuple[MessageQueue, int, int]]:
        """(broker queue, where the queue's group is, its end) for the queue's topic and retry topic."""
        service, found = self.service, []
        for mq in await self._queues(queue):
            low, high = await service.queue_bounds(mq)
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
        await self.catalog.refresh(queue.vhost)

    async def close(self) -> None:
        await self.tasks.close()
