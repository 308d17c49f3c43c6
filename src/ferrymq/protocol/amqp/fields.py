"""Field tables and basic properties, with pamqp as the codec.

RabbitMQ accepts the field types t b B s u I i l f d D S A T F V x; pamqp's decoder reads all of
them. Its encoder would pick the unsigned types u and i for some integers, which not every client
reads, so the gateway switches pamqp to RabbitMQ's own choice (b s I l) when this module loads.
Decoding failures of any kind come out as ValueError."""

from __future__ import annotations

import struct
from typing import Any

from pamqp import commands, common, decode, encode

encode.support_deprecated_rabbitmq(True)

DECODE_ERRORS = (ValueError, TypeError, struct.error, KeyError, IndexError, OverflowError, RecursionError)


def decode_table(data: bytes) -> tuple[int, common.FieldTable]:
    """(octets read, table) of the field table at the start of `data`."""
    try:
        return decode.field_table(data)
    except DECODE_ERRORS as e:
        raise ValueError(f"bad field table: {e}") from None


def encode_table(table: common.FieldTable) -> bytes:
    return encode.field_table(table)


def decode_properties(raw: bytes) -> commands.Basic.Properties:
    """Basic properties from their wire form (flag words, then the present values)."""
    flags, offset, index = 0, 0, 0
    while True:
        if offset + 2 > len(raw):
            raise ValueError("content header flags are truncated")
        word = int.from_bytes(raw[offset : offset + 2], "big")
        flags |= (word & 0xFFFE) << (16 * index)
        offset += 2
        index += 1
        if not word & 1:
            break
    properties = commands.Basic.Properties()
    try:
        properties.unmarshal(flags, raw[offset:])
    except DECODE_ERRORS as e:
        raise ValueError(f"bad basic properties: {e}") from None
    return properties


def encode_properties(properties: commands.Basic.Properties | None = None, **values: Any) -> bytes:
    """The wire form of basic properties (given, or built from keyword values)."""
    return (properties or commands.Basic.Properties(**values)).marshal()
