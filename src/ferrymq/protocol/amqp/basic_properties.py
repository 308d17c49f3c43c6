"""A hand-written codec for basic properties (the property section of a content header: one flag word,
then the present values), byte for byte equal to pamqp's Basic.Properties at a fraction of its cost,
for the publish path.

The headers table goes through pamqp (fields.py) except for the common cases, done here with the same
result: decoding a table of strings, numbers, booleans and voids, and encoding one of strings.

Short strings are text decoded with "surrogateescape", so that any bytes a client sent (RabbitMQ does
not insist on UTF-8) encode back to themselves. Timestamps are seconds since the epoch, as on the wire.
Anything malformed is a ValueError."""

from __future__ import annotations

import struct
from dataclasses import dataclass, fields
from typing import Any

from ferrymq.protocol.amqp.fields import decode_table, encode_table

_SHORT, _OCTET, _TIMESTAMP, _TABLE = "short", "octet", "timestamp", "table"
_TIMESTAMP_STRUCT = struct.Struct(">Q")
_LENGTH = struct.Struct(">I")
# field value types with a fixed size, read as pamqp reads them (it reads 'L' as signed too)
_FIXED = {ord(kind): struct.Struct(">" + code) for kind, code in zip("bBsuIilLfd", "bBhHiIqqfd", strict=True)}
_STRING, _BOOLEAN, _VOID = ord("S"), ord("t"), ord("V")


@dataclass(slots=True)
class BasicProperties:
    content_type: str | None = None
    content_encoding: str | None = None
    headers: dict[str, Any] | None = None
    delivery_mode: int | None = None
    priority: int | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    expiration: str | None = None
    message_id: str | None = None
    timestamp: int | None = None
    type: str | None = None
    user_id: str | None = None
    app_id: str | None = None
    cluster_id: str | None = None


_KINDS = {"headers": _TABLE, "delivery_mode": _OCTET, "priority": _OCTET, "timestamp": _TIMESTAMP}
# (name, kind, flag bit) in wire order: the first property has the highest bit of the flag word
_LAYOUT = tuple(
    (f.name, _KINDS.get(f.name, _SHORT), 1 << (15 - i)) for i, f in enumerate(fields(BasicProperties))
)
_UNUSED_FLAGS = 0x0003  # bit 1 names no property; bit 0 would continue the flags into a second word


_PLANS: dict[int, tuple[tuple[str, str], ...]] = {}  # flag word → the (name, kind) it flags, in order


def _plan(flags: int) -> tuple[tuple[str, str], ...]:
    plan = _PLANS.get(flags)
    if plan is None:
        if flags & _UNUSED_FLAGS:
            raise ValueError(f"basic properties flag word {flags:#06x} flags no known property")
        plan = _PLANS[flags] = tuple((name, kind) for name, kind, bit in _LAYOUT if flags & bit)
    return plan


def decode_basic_properties(raw: bytes) -> BasicProperties:
    """Basic properties from their wire form, which must hold exactly the flagged values."""
    end = len(raw)
    if end < 2:
        raise ValueError("basic properties are shorter than their flag word")
    values: dict[str, Any] = {}
    at = 2
    for name, kind in _plan((raw[0] << 8) | raw[1]):
        if kind is _SHORT:
            stop = at + 1 + (raw[at] if at < end else 0)
            if at >= end or stop > end:
                raise ValueError(f"basic property {name} runs past the end")
            values[name] = raw[at + 1 : stop].decode("utf-8", "surrogateescape")
        elif kind is _OCTET:
            if at >= end:
                raise ValueError(f"basic property {name} runs past the end")
            values[name], stop = raw[at], at + 1
        elif kind is _TIMESTAMP:
            stop = at + 8
            if stop > end:
                raise ValueError(f"basic property {name} runs past the end")
            values[name] = _TIMESTAMP_STRUCT.unpack_from(raw, at)[0]
        else:
            stop = at + 4 + int.from_bytes(raw[at : at + 4], "big")
            if at + 4 > end or stop > end:
                raise ValueError(f"basic property {name} runs past the end")
            table = _plain_table(raw, at + 4, stop)
            values[name] = table if table is not None else decode_table(raw[at:stop])[1]
        at = stop
    if at != end:
        raise ValueError(f"{end - at} bytes follow the last basic property")
    return BasicProperties(**values)


def _plain_table(raw: bytes, at: int, stop: int) -> dict[str, Any] | None:
    """The field table in raw[at:stop] when it holds only strings, fixed-size numbers, booleans and
    voids (what pamqp would make of it); None when it holds another type (pamqp's then)."""
    table: dict[str, Any] = {}
    while at < stop:
        key_end = at + 1 + raw[at]
        if key_end >= stop:
            raise ValueError("bad field table: a field runs past the table's end")
        key = raw[at + 1 : key_end].decode()
        kind, at = raw[key_end], key_end + 1
        value: Any
        if kind == _STRING:
            end = at + 4 + _LENGTH.unpack_from(raw, at)[0] if at + 4 <= stop else stop + 1
            if end > stop:
                raise ValueError("bad field table: a field runs past the table's end")
            data = raw[at + 4 : end]
            try:
                value = data.decode()
            except UnicodeDecodeError:
                value = data
            at = end
        elif kind == _VOID:
            value = None
        elif kind == _BOOLEAN:
            if at >= stop:
                raise ValueError("bad field table: a field runs past the table's end")
            value, at = bool(raw[at]), at + 1
        else:
            fixed = _FIXED.get(kind)
            if fixed is None:
                return None
            if at + fixed.size > stop:
                raise ValueError("bad field table: a field runs past the table's end")
            value, at = fixed.unpack_from(raw, at)[0], at + fixed.size
        table[key] = value
    return table


def _string_table(table: dict[str, Any]) -> bytes:
    """A table of strings as pamqp encodes it: names sorted, each value a long string."""
    parts: list[bytes] = []
    for key, value in sorted(table.items()):
        name, data = key.encode(), value.encode()
        if len(name) > 128:
            return encode_table(table)  # pamqp cuts the name, and says so
        parts += (bytes((len(name),)), name, b"S", _LENGTH.pack(len(data)), data)
    body = b"".join(parts)
    return _LENGTH.pack(len(body)) + body


def encode_basic_properties(properties: BasicProperties) -> bytes:
    """The wire form; as pamqp, a property that is None or an empty string is left out."""
    flags = 0
    parts = [b""]
    for name, kind, bit in _LAYOUT:
        value = getattr(properties, name)
        if value is None or value == "":
            continue
        flags |= bit
        if kind is _SHORT:
            data = value.encode("utf-8", "surrogateescape")
            if len(data) > 255:
                raise ValueError(f"basic property {name} is {len(data)} bytes, over 255")
            parts.append(bytes((len(data),)) + data)
        elif kind is _OCTET:
            parts.append(bytes((value,)))
        elif kind is _TIMESTAMP:
            parts.append(_TIMESTAMP_STRUCT.pack(value))
        else:
            try:
                strings = all(type(v) is str for v in value.values())
                parts.append(_string_table(value) if strings else encode_table(value))
            except TypeError as e:  # pamqp's word for a value it has no type for
                raise ValueError(f"basic property {name}: {e}") from None
    parts[0] = flags.to_bytes(2, "big")
    return b"".join(parts)
