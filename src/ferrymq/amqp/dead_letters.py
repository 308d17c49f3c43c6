"""Dead-lettering as RabbitMQ 3.10 does it: a message rejected without requeue, expired, pushed out
of a full queue or past its delivery limit is published to the queue's dead-letter exchange (with
its dead-letter routing key, or the message's own keys), carrying an `x-death` history: one entry per
(queue, reason) with a count, newest first, and `x-first-death-*` headers set once. The per-message
`expiration` moves into the entry as `original-expiration` so the copy does not expire again."""

from __future__ import annotations

import datetime
import time
from typing import TYPE_CHECKING, Any, Literal

from pamqp import commands

from ferrymq.amqp.queue_settings import placed
from ferrymq.meta.entities import Queue
from ferrymq.protocol.amqp.fields import decode_properties, encode_properties
from ferrymq.protocol.amqp.mapping import from_rocketmq, to_rocketmq
from ferrymq.protocol.message_ext import MessageExt

if TYPE_CHECKING:
    from ferrymq.amqp.gateway import Gateway

Reason = Literal["rejected", "expired", "maxlen", "delivery_limit"]


def _death(
    queue: str, reason: Reason, exchange: str, keys: list[str], when: datetime.datetime
) -> dict[str, Any]:
    return {
        "count": 1,
        "reason": reason,
        "queue": queue,
        "time": when,
        "exchange": exchange,
        "routing-keys": keys,
    }


def dead_lettered(
    properties: bytes, reason: Reason, queue: str, exchange: str, routing_keys: list[str], now_s: float
) -> bytes:
    """The wire-form properties of the dead-lettered copy of a message with `properties`, last
    published to `exchange` with `routing_keys` and leaving `queue` for `reason`."""
    decoded: commands.Basic.Properties = decode_properties(properties)
    headers = dict(decoded.headers or {})
    when = datetime.datetime.fromtimestamp(int(now_s), datetime.UTC).replace(tzinfo=None)
    deaths = headers.get("x-death")
    history = [dict(d) for d in deaths if isinstance(d, dict)] if isinstance(deaths, list) else []
    entry = next((d for d in history if d.get("queue") == queue and d.get("reason") == reason), None)
    if entry is None:
        entry = _death(queue, reason, exchange, routing_keys, when)
    else:
        history.remove(entry)
        count = entry.get("count")
        entry.update(count=(count if isinstance(count, int) else 0) + 1, time=when)
    if decoded.expiration is not None:
        entry["original-expiration"] = decoded.expiration
        decoded.expiration = None
    headers["x-death"] = [entry, *history]
    headers.setdefault("x-first-death-exchange", exchange)
    headers.setdefault("x-first-death-queue", queue)
    headers.setdefault("x-first-death-reason", reason)
    decoded.headers = headers
    return encode_properties(decoded)


class DeadLetters:
    """Publishes dead-lettered copies through the vhost's topology into the queues the dead-letter
    exchange routes them to (a missing exchange drops them, as RabbitMQ does)."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    async def send(self, queue: Queue, message: MessageExt, reason: Reason) -> None:
        """Dead-letter `message` popped from `queue` if the queue has a dead-letter exchange (the
        caller settles the original afterwards either way)."""
        exchange, routing_key, properties = from_rocketmq(message.properties)
        await self.send_content(queue, message.body, properties, exchange, routing_key, reason)

    async def send_content(
        self, queue: Queue, body: bytes, properties: bytes, exchange: str, routing_key: str, reason: Reason
    ) -> None:
        """Dead-letter a message of `queue` given by its content and where it was published."""
        gateway = self.gateway
        topology = await gateway.catalog.get(queue.vhost)
        settings = gateway.settings.of(topology, queue)
        target_exchange = settings.dead_letter_exchange
        if target_exchange is None:
            return
        key = settings.dead_letter_routing_key
        copy = dead_lettered(properties, reason, queue.name, exchange, [routing_key], time.time())
        decoded = decode_properties(copy)
        now_ms = int(time.time() * 1000)
        for target_key in [key] if key is not None else [routing_key]:
            routed = topology.route(target_exchange, target_key, decoded.headers)
            if routed.error is not None:
                continue
            stored = to_rocketmq(target_exchange, target_key, copy)
            for target in routed.queues:
                queue_id, properties_there = placed(
                    gateway.settings.of(topology, target), stored, decoded, now_ms
                )
                place = None if queue_id < 0 else await gateway.broker_queue(target.topic, queue_id)
                await gateway.service.send(target.topic, body, properties_there, queue=place)
