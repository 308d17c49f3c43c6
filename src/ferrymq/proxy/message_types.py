"""Per-topic message types (RocketMQ 5's topic attribute `message.type`, NORMAL when unset): routes
tell clients what a topic accepts, and a send of another type is refused with
MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, as RocketMQ's proxy does (enableTopicMessageTypeCheck, on by
default). Retry and dead-letter topics take what they are given."""

from __future__ import annotations

from ferrymq.messaging.api import TopicConfig
from ferrymq.protocol.topic_attributes import (
    DELAY,
    FIFO,
    MIXED,
    NORMAL,
    TRANSACTION,
    accepts,
    topic_message_type,
)
from ferrymq.proxy.status import status
from ferrymq.proxy.v2 import messaging_pb2 as pb

_V2_TYPES: dict[str, pb.MessageType] = {
    "NORMAL": pb.NORMAL,
    "FIFO": pb.FIFO,
    "DELAY": pb.DELAY,
    "TRANSACTION": pb.TRANSACTION,
}
_UNCHECKED_PREFIXES = ("%RETRY%", "%DLQ%")


def topic_type(config: TopicConfig | None) -> str:
    return topic_message_type(config.attributes) if config is not None else NORMAL


def accepted(kind: str) -> list[pb.MessageType]:
    """The v2 message types a topic of `kind` accepts (QueryRoute's accept_message_types)."""
    if kind == MIXED:
        return list(_V2_TYPES.values())
    return [_V2_TYPES.get(kind, pb.MESSAGE_TYPE_UNSPECIFIED)]


def sent_type(sp: pb.SystemProperties) -> str:
    """The kind of a message, as RocketMQ's proxy judges it: a half message is TRANSACTION, then one
    with a delivery time DELAY, then one with a group FIFO. Read from the system properties, which
    alone set the keys that say so (a user property may not carry them)."""
    if sp.message_type == pb.TRANSACTION:
        return TRANSACTION
    if sp.HasField("delivery_timestamp"):
        return DELAY
    if sp.HasField("message_group"):
        return FIFO
    return NORMAL


def refusal(topic: str, kind: str, sp: pb.SystemProperties) -> pb.Status | None:
    """Why a message with system properties `sp` may not go to `topic` of `kind`, None if it may."""
    if topic.startswith(_UNCHECKED_PREFIXES):
        return None
    sent = sent_type(sp)
    if accepts(kind, sent):
        return None
    return status(
        pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, f"topic {topic} takes {kind} messages, this one is {sent}"
    )
