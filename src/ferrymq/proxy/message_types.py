"""Per-topic message types (RocketMQ 5's topic attribute `message.type`, NORMAL when unset): routes
tell clients what a topic accepts, and a send of another type is refused with
MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, as RocketMQ's proxy does (enableTopicMessageTypeCheck, on by
default). Retry and dead-letter topics take what they are given."""

from __future__ import annotations

from ferrymq.messaging.api import TopicConfig
from ferrymq.protocol.properties import decode_properties
from ferrymq.protocol.topic_attributes import MIXED, NORMAL, accepts, message_type, topic_message_type
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


def refusal(topic: str, kind: str, properties: str) -> pb.Status | None:
    """Why a message stored with `properties` may not go to `topic` of `kind`, None if it may."""
    if topic.startswith(_UNCHECKED_PREFIXES):
        return None
    sent = message_type(decode_properties(properties))
    if accepts(kind, sent):
        return None
    return status(
        pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, f"topic {topic} takes {kind} messages, this one is {sent}"
    )
