"""x-max-length and x-max-length-bytes (RabbitMQ counts ready messages only) with x-overflow:
drop-head (the default) lets the publish in and drops the oldest ready messages after it, dead-
lettered as "maxlen"; reject-publish refuses what does not fit (the publisher gets basic.nack);
reject-publish-dlx also dead-letters the refused message."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferrymq.amqp.topology import Topology
from ferrymq.messaging.api import MessagingError
from ferrymq.meta.entities import Queue
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.message_ext import decode_records
from ferrymq.protocol.pop import INIT_MODE_MIN, POP_CK

if TYPE_CHECKING:
    from ferrymq.amqp.gateway import Gateway
    from ferrymq.amqp.publisher import Entry

REJECTING = ("reject-publish", "reject-publish-dlx")
TRIM_POP = 32


class QueueLimits:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    async def admit(
        self, topology: Topology, queue: Queue, entries: list[Entry], stored: list[bool]
    ) -> list[Entry]:
        """The entries that fit a rejecting queue; the others are marked not stored (nack)."""
        settings = self.gateway.settings.of(topology, queue)
        if settings.overflow not in REJECTING:
            return entries
        count, size = await self.gateway.usage(queue, settings.max_length_bytes is not None)
        admitted = []
        for entry in entries:
            index, event, _ = entry
            body = len(event.body)
            over_count = settings.max_length is not None and count + 1 > settings.max_length
            over_bytes = settings.max_length_bytes is not None and size + body > settings.max_length_bytes
            if over_count or over_bytes:
                stored[index] = False
                if settings.overflow == "reject-publish-dlx":
                    publish = event.publish
                    await self.gateway.dead_letters.send_content(
                        queue, event.body, event.properties, publish.exchange, publish.routing_key, "maxlen"
                    )
                continue
            count, size = count + 1, size + body
            admitted.append(entry)
        return admitted

    async def trim(self, topology: Topology, queue: Queue) -> None:
        """Drop (and dead-letter) the oldest ready messages of a drop-head queue over its limits."""
        gateway = self.gateway
        settings = gateway.settings.of(topology, queue)
        if settings.overflow in REJECTING:
            return
        while True:
            count, size = await gateway.usage(queue, settings.max_length_bytes is not None)
            excess = count - settings.max_length if settings.max_length is not None else 0
            if settings.max_length_bytes is not None and size > settings.max_length_bytes:
                excess = max(excess, 1)
            if excess <= 0:
                return
            try:
                outcome = await gateway.service.pop(
                    queue.group, queue.topic, min(excess, TRIM_POP), gateway.feeds.invisible_ms,
                    init_mode=INIT_MODE_MIN,
                )  # fmt: skip
            except MessagingError:
                return
            if outcome.code != ResponseCode.SUCCESS:
                return
            dropped = decode_records(outcome.body)
            for message in dropped:
                await gateway.dead_letters.send(queue, message, "maxlen")
            await gateway.service.ack_batch(queue.group, queue.topic, [m.properties[POP_CK] for m in dropped])
