"""A queue's effective settings (x-arguments and policy combined, see policies.py) as the publish
and delivery paths read them, remembered per topology version so a publish pays one dict lookup."""

from __future__ import annotations

from typing import Any

from pamqp import commands

from ferrymq.amqp.topology import Topology
from ferrymq.meta.entities import Queue
from ferrymq.protocol.amqp.basic_properties import BasicProperties

MAX_PRIORITY = 10  # priorities above this share its level (RabbitMQ advises at most 10)


class QueueSettings:
    __slots__ = (
        "broadcast",
        "dead_letter_exchange",
        "dead_letter_routing_key",
        "delivery_limit",
        "expires",
        "graded_retry",
        "max_length",
        "max_length_bytes",
        "max_priority",
        "max_retries",
        "message_trace",
        "message_ttl",
        "overflow",
        "single_active_consumer",
    )  # fmt: skip

    def __init__(self, settings: dict[str, Any]) -> None:
        self.message_ttl: int | None = settings.get("message_ttl")
        self.expires: int | None = settings.get("expires")
        self.max_length: int | None = settings.get("max_length")
        self.max_length_bytes: int | None = settings.get("max_length_bytes")
        self.overflow: str = settings.get("overflow", "drop-head")
        self.dead_letter_exchange: str | None = settings.get("dead_letter_exchange")
        self.dead_letter_routing_key: str | None = settings.get("dead_letter_routing_key")
        priority = settings.get("max_priority")
        self.max_priority: int = min(priority, MAX_PRIORITY) if priority else 0
        self.single_active_consumer: bool = bool(settings.get("single_active_consumer"))
        self.delivery_limit: int | None = settings.get("delivery_limit")
        self.graded_retry: bool = bool(settings.get("graded_retry"))  # requeue after RocketMQ's delays
        self.max_retries: int | None = settings.get("max_retries")  # then dead letters (default: the group's)
        self.broadcast: bool = bool(settings.get("broadcast"))  # every consumer gets every message
        self.message_trace: bool = bool(settings.get("message_trace"))  # trace records, as RocketMQ's

    @property
    def limited(self) -> bool:
        return self.max_length is not None or self.max_length_bytes is not None


class SettingsCache:
    """Settings by queue, each kept while the queue (its arguments) and its vhost's policies stay
    as they were when it was read: declaring another queue changes neither."""

    LIMIT = 100_000  # queues remembered; past it the cache starts again

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], tuple[Queue, int, QueueSettings]] = {}

    def of(self, topology: Topology, queue: Queue) -> QueueSettings:
        key = (queue.vhost, queue.name)
        known = self._known.get(key)
        policies = topology.policies_version
        if (
            known is not None
            and known[1] == policies
            and (known[0] is queue or known[0].arguments == queue.arguments)
        ):
            return known[2]
        if len(self._known) >= self.LIMIT:
            self._known.clear()
        settings = QueueSettings(topology.effective_queue_args(queue))
        self._known[key] = (queue, policies, settings)
        return settings


EXPIRES = "AMQP_EXPIRES"  # RocketMQ property: when the message expires in its queue (ms since the epoch)


def placed(
    settings: QueueSettings,
    properties: str,
    decoded: BasicProperties | commands.Basic.Properties | None,
    now_ms: int,
) -> tuple[int, str]:
    """(queue id for the message's priority, or -1; its RocketMQ properties with its expiry in this
    queue added): the queue's message TTL and the message's own expiration, whichever ends first."""
    ttl = settings.message_ttl
    expiration = decoded.expiration if decoded is not None else None
    if expiration is not None and expiration.isdigit():
        ttl = int(expiration) if ttl is None else min(ttl, int(expiration))
    if ttl is not None:
        properties += f"{EXPIRES}\x01{now_ms + ttl}\x02"
    queue_id = -1
    if settings.max_priority:
        priority = (decoded.priority or 0) if decoded is not None else 0
        queue_id = min(priority, settings.max_priority)
    return queue_id, properties


def topic_queues(queue: Queue) -> int:
    """How many queues the queue's topic has: one (RabbitMQ's order), or one per priority level."""
    priority = queue.arguments.get("x-max-priority")
    if isinstance(priority, int) and not isinstance(priority, bool) and priority > 0:
        return min(priority, MAX_PRIORITY) + 1
    return 1
