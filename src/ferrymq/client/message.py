"""What users send and get back: Message, SendResult, and the received MessageExt."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ferrymq.protocol.bodies import MessageQueue
from ferrymq.protocol.message_ext import MessageExt
from ferrymq.protocol.properties import Prop

__all__ = ["RETRY_PREFIX", "Message", "MessageExt", "MessageQueue", "SendResult", "SendStatus"]

RETRY_PREFIX = "%RETRY%"  # `%RETRY%<group>`: where a consumer group's failed messages come back from


@dataclass
class Message:
    """A message to send. `keys` become KEYS (space-separated); `properties` are user properties.

    To deliver it later: `delay_level` (1-18, RocketMQ's levels 1s ... 2h), or a delivery time to the
    second, `deliver_time_ms` (epoch ms) or `delay_ms` (from when the broker stores it).
    """

    topic: str
    body: bytes
    tags: str | None = None
    keys: list[str] | str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    delay_level: int = 0
    deliver_time_ms: int = 0
    delay_ms: int = 0

    @property
    def scheduled(self) -> bool:
        """Held back by the broker until due (such messages cannot travel in a batch)."""
        return bool(self.delay_level or self.deliver_time_ms or self.delay_ms)

    @property
    def bare(self) -> bool:
        """No properties of its own, not even tags or keys, and not held back: what a producer sends
        is then only its body and id."""
        return not (
            self.properties
            or self.tags
            or self.keys
            or self.delay_level
            or self.deliver_time_ms
            or self.delay_ms
        )

    def system_properties(self) -> dict[str, str]:
        props = dict(self.properties)
        if self.tags:
            props[Prop.TAGS] = self.tags
        if self.keys:
            props[Prop.KEYS] = self.keys if isinstance(self.keys, str) else " ".join(self.keys)
        if self.delay_level:
            props[Prop.DELAY] = str(self.delay_level)
        if self.deliver_time_ms:
            props[Prop.TIMER_DELIVER_MS] = str(self.deliver_time_ms)
        if self.delay_ms:
            props[Prop.TIMER_DELAY_MS] = str(self.delay_ms)
        return props


class SendStatus(enum.Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass
class SendResult:
    status: SendStatus
    msg_id: str  # the UNIQ_KEY the producer gave the message (comma-joined for a batch)
    offset_msg_id: str  # the broker's id: where it is stored
    message_queue: MessageQueue
    queue_offset: int
    region_id: str = "DefaultRegion"  # the broker's MSG_REGION
    trace_on: bool = True  # the broker's TRACE_ON: message trace skips sends to brokers that say false
    to_standby: bool = False  # the primary cluster could not take it: stored on the standby cluster
