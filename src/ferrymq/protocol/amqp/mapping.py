"""An AMQP message as a RocketMQ message and back, so that what one kind of client publishes the other
can read (the table is in docs/amqp.md, "Property mapping").

AMQP to RocketMQ keeps the basic properties exactly as they came on the wire (base64 in AMQP_PROPS),
which is what AMQP consumers get back byte for byte, and adds readable copies for RocketMQ consumers:
the exchange and routing key, the routing key as TAGS when it is a usable tag, the message id as KEYS,
content type and encoding, and each header with a plain value as a user property of its own name
(unless RocketMQ reserves the name). A message RocketMQ clients wrote (no AMQP_PROPS) gets basic
properties made from its properties: persistent, the message id, the born time, and its user
properties as headers. Values that would break the properties text (its separators \\x01 and \\x02)
are never copied; exact values travel base64 instead."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from ferrymq.protocol.amqp.basic_properties import (
    BasicProperties,
    decode_basic_properties,
    encode_basic_properties,
)
from ferrymq.protocol.properties import Prop

AMQP_PROPS = "AMQP_PROPS"  # base64 of the wire form; its presence marks a message published over AMQP
AMQP_EXCHANGE = "AMQP_EXCHANGE"
AMQP_ROUTING_KEY = "AMQP_ROUTING_KEY"
AMQP_CONTENT_TYPE = "AMQP_CONTENT_TYPE"
AMQP_CONTENT_ENCODING = "AMQP_CONTENT_ENCODING"
_BASE64_SUFFIX = "_B64"  # AMQP_EXCHANGE_B64 / AMQP_ROUTING_KEY_B64: a name holding \x01 or \x02
_AMQP_PREFIX = "AMQP_"
PERSISTENT = 2
_FIELD_NAME_MAX = 128  # bytes in a field table's names (AMQP 0-9-1; pamqp cuts longer ones)
# Names RocketMQ itself gives meaning to (MessageConst): a header of such a name is not copied, and
# a property of such a name is no header.
ROCKETMQ_KEYS = frozenset(
    value for name, value in vars(Prop).items() if not name.startswith("_") and isinstance(value, str)
) | frozenset(
    ("TRACE_ON", "MSG_REGION", "BUYER_ID", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG",
     "CONSUME_START_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "DLQ_ORIG_TOPIC", "DLQ_ORIG_MSG_ID",
     "CHECK_IMMUNITY_TIME_IN_SECONDS", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL",
     "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME",
     "__STARTDELIVERTIME", "__RETRY_TOPIC", "INNER_MULTI_QUEUE_OFFSET", "INNER_NUM", "INNER_BASE",
     "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY")
)  # fmt: skip


def _plain(text: str) -> bool:
    """Whether `text` can be a property value as it is: no separator, nothing but UTF-8."""
    if "\x01" in text or "\x02" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate: bytes that were not UTF-8
        return False
    return True


def _usable_tag(key: str) -> bool:
    """RocketMQ subscribes by "tag || tag" expressions and "*": a tag must be non-blank, hold no '|',
    and have no surrounding blanks (expressions are trimmed)."""
    return bool(key) and key != "*" and "|" not in key and key.strip() == key and _plain(key)


def _header_text(value: Any) -> str | None:
    """A header value as property text, for values that have an obvious one (no tables or bytes)."""
    if isinstance(value, str):
        return value if _plain(value) else None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | Decimal):
        return str(value)
    return None


def _copyable_name(name: str) -> bool:
    return bool(name) and name not in ROCKETMQ_KEYS and not name.startswith(_AMQP_PREFIX) and _plain(name)


def _name(key: str, name: str) -> str:
    """The property holding an exchange or routing key (RocketMQ's parser drops empty values, so an
    empty name is no property: absence means "")."""
    if _plain(name):
        return f"{key}\x01{name}\x02" if name else ""
    return (
        f"{key}{_BASE64_SUFFIX}\x01{base64.b64encode(name.encode('utf-8', 'surrogateescape')).decode()}\x02"
    )


def _get_name(properties: Mapping[str, str], key: str) -> str:
    encoded = properties.get(key + _BASE64_SUFFIX)
    if encoded is None:
        return properties.get(key, "")
    return _unbase64(key, encoded).decode("utf-8", "surrogateescape")


def _unbase64(key: str, text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ValueError(f"property {key} is not base64: {e}") from None


def to_rocketmq(
    exchange: str, routing_key: str, properties: bytes, decoded: BasicProperties | None = None
) -> str:
    """The RocketMQ properties text for a message published to `exchange` with `routing_key` and
    basic properties `properties` (wire form). Pass `decoded` if the caller decoded them already.
    Other properties (UNIQ_KEY, ...) can be appended: the text ends with a separator. ValueError if
    the properties are malformed."""
    if decoded is None:
        decoded = decode_basic_properties(properties)
    parts = [
        f"{AMQP_PROPS}\x01{base64.b64encode(properties).decode()}\x02",
        _name(AMQP_EXCHANGE, exchange),
        _name(AMQP_ROUTING_KEY, routing_key),
    ]
    if _usable_tag(routing_key):
        parts.append(f"{Prop.TAGS}\x01{routing_key}\x02")
    copies = (
        (Prop.KEYS, decoded.message_id),
        (AMQP_CONTENT_TYPE, decoded.content_type),
        (AMQP_CONTENT_ENCODING, decoded.content_encoding),
    )
    parts += (f"{key}\x01{value}\x02" for key, value in copies if value and value.strip() and _plain(value))
    if decoded.headers:
        for name, value in decoded.headers.items():
            text = _header_text(value)
            if text and _copyable_name(name):
                parts.append(f"{name}\x01{text}\x02")
    return "".join(parts)


def is_from_amqp(properties: Mapping[str, str]) -> bool:
    return AMQP_PROPS in properties


def from_rocketmq(
    properties: Mapping[str, str], born_timestamp: int | None = None, message_id: str | None = None
) -> tuple[str, str, bytes]:
    """(exchange, routing key, basic properties in wire form) to deliver a stored message with.

    A message published over AMQP gets back what it was published with (its properties are checked,
    since any RocketMQ client could have set AMQP_PROPS). Another gets exchange "", its tag as routing
    key, and properties made from `properties`: delivery mode 2, message id (`message_id`, else
    UNIQ_KEY, else KEYS), timestamp from `born_timestamp` (ms), user properties as string headers.
    A tag or id over AMQP's 255 bytes, or a property name over 128, is left out. ValueError if
    AMQP_PROPS is malformed."""
    stored = properties.get(AMQP_PROPS)
    if stored is not None:
        wire = _unbase64(AMQP_PROPS, stored)
        decode_basic_properties(wire)
        return _get_name(properties, AMQP_EXCHANGE), _get_name(properties, AMQP_ROUTING_KEY), wire
    tag = properties.get(Prop.TAGS, "")
    identity = message_id or properties.get(Prop.UNIQ_KEY) or properties.get(Prop.KEYS)
    headers = {
        name: value
        for name, value in properties.items()
        if name not in ROCKETMQ_KEYS
        and not name.startswith(_AMQP_PREFIX)
        and len(name.encode()) <= _FIELD_NAME_MAX
    }
    made = BasicProperties(
        headers=headers or None,
        delivery_mode=PERSISTENT,
        message_id=identity if identity and len(identity.encode()) <= 255 else None,
        timestamp=born_timestamp // 1000 if born_timestamp is not None else None,
    )
    return "", tag if len(tag.encode()) <= 255 else "", encode_basic_properties(made)
