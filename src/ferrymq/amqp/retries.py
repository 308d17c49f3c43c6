"""Graded retry, what RabbitMQ lacks, for queues with x-graded-retry (or the graded-retry policy key):
a message nacked or rejected with requeue comes back after the queue's consumer group's retry delays
(RocketMQ's ladder: 10 s, 30 s, 1 min, ... unless the group says otherwise) instead of at once, and
after its last attempt goes to the queue's dead-letter exchange, or without one to the group's
RocketMQ dead-letter queue (%DLQ%<group>)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferrymq.amqp.queue_settings import QueueSettings
from ferrymq.messaging.api import MessagingError
from ferrymq.meta.entities import Queue
from ferrymq.protocol.bodies import GroupRetryPolicy
from ferrymq.protocol.message_ext import MessageExt
from ferrymq.protocol.retry_policy import next_delay_ms

if TYPE_CHECKING:
    from ferrymq.amqp.gateway import Gateway

DEFAULT_MAX_RETRIES = 16  # RocketMQ's maxReconsumeTimes


class GradedRetries:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    async def give_back(
        self, queue: Queue, settings: QueueSettings, message: MessageExt, handle: str
    ) -> None:
        service = self.gateway.service
        config = await service.consumer_group(queue.group, queue.topic)
        policy = config.group_retry_policy if config is not None else GroupRetryPolicy()
        limit = settings.max_retries
        if limit is None:
            limit = config.retry_max_times if config is not None else DEFAULT_MAX_RETRIES
        attempts = message.reconsume_times
        try:
            if attempts < limit:
                await service.change_invisible_time(
                    queue.group, queue.topic, handle, next_delay_ms(policy, attempts)
                )
            elif settings.dead_letter_exchange is not None:
                await self.gateway.dead_letters.send(queue, message, "rejected")
                self.gateway.feeds.settle(queue, [handle])
            else:
                await service.dead_letter(queue.group, queue.topic, handle)
        except MessagingError:
            pass  # the handle went stale (redelivered meanwhile): the message comes back anyway
