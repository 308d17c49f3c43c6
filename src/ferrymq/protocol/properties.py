"""Message properties: well-known keys (MessageConst) and the codec: key 0x01 value 0x02, repeated."""

from __future__ import annotations

from collections.abc import Mapping

from ferrymq._native import load
from ferrymq.protocol.errors import MessageDecodeError

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
MAX_PROPERTIES_SIZE = 32767  # the properties length is an int16


class Prop:
    """Well-known property keys (MessageConst)."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT = "WAIT"
    DELAY = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QID = "REAL_QID"
    TRAN_MSG = "TRAN_MSG"
    PGROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    UNIQ_KEY = "UNIQ_KEY"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    RECONSUME_TIME = "RECONSUME_TIME"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    TRANSACTION_ID = "__transactionId__"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
    TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
    TIMER_DELAY_MS = "TIMER_DELAY_MS"
    SHARDING_KEY = "__SHARDINGKEY"


def encode_properties(props: Mapping[str, str]) -> str:
    """Encode properties the way the Java client does, trailing separator included."""
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items())


def decode_properties(text: str | bytes | memoryview) -> dict[str, str]:
    """Decode a properties string, skipping malformed pieces as RocketMQ does."""
    if not isinstance(text, str):
        try:
            text = bytes(text).decode()
        except UnicodeDecodeError as e:
            raise MessageDecodeError(f"properties are not UTF-8: {e}") from None
    props = {}
    for piece in text.split(PROPERTY_SEPARATOR):
        key, sep, value = piece.partition(NAME_VALUE_SEPARATOR)
        if sep and key:
            props[key] = value
    return props


def py_find_property(props: bytes, key: bytes) -> bytes | None:
    """One property's raw value from an encoded properties string, without decoding the rest.

    `key` must end with the \\x01 separator (b"TAGS\\x01").
    """
    pos = props.find(key)
    while pos > 0 and props[pos - 1] != 2:  # matched the tail of a longer key: look further
        pos = props.find(key, pos + 1)
    if pos < 0:
        return None
    start = pos + len(key)
    end = props.find(b"\x02", start)
    return props[start:end] if end >= 0 else props[start:]


_native = load("put")
if _native is not None:
    _native.bind_find_property(py_find_property)
find_property = py_find_property if _native is None else _native.find_property
"""One property's raw value: in C where built (the put path looks up TAGS and UNIQ_KEY per message)."""
