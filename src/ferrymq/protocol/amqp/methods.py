"""Method frames on the cold path (connection, channel, declarations ...), coded by pamqp."""

from __future__ import annotations

import struct

from pamqp import base, commands

from ferrymq.protocol.amqp.errors import ConnectionException, ReplyCode
from ferrymq.protocol.amqp.fields import DECODE_ERRORS
from ferrymq.protocol.amqp.frames import FRAME_METHOD, frame

_IDS = struct.Struct(">HH")


def method_ids(payload: bytes) -> tuple[int, int]:
    """(class id, method id) of a method frame's payload."""
    if len(payload) < _IDS.size:
        raise ConnectionException(ReplyCode.FRAME_ERROR, f"method frame of {len(payload)} octets")
    return _IDS.unpack_from(payload)


def decode_method(payload: bytes) -> base.Frame:
    """The pamqp method of a method frame's payload.

    An unknown method is 540 NOT_IMPLEMENTED; arguments that do not decode are RabbitMQ's
    "FRAME_ERROR - cannot decode <<...>>", both connection errors."""
    class_id, method_id = method_ids(payload)
    cls = commands.INDEX_MAPPING.get((class_id << 16) | method_id)
    if cls is None:
        raise ConnectionException(
            ReplyCode.NOT_IMPLEMENTED,
            f"unknown method class {class_id} method {method_id}",
            class_id,
            method_id,
        )
    method = cls()
    args = payload[_IDS.size :]
    try:
        _check_length(cls, args)
        method.unmarshal(args)
    except DECODE_ERRORS:
        shown = ",".join(str(b) for b in payload[_IDS.size : _IDS.size + 32])
        raise ConnectionException(
            ReplyCode.FRAME_ERROR, f"cannot decode <<{shown}>>", class_id, method_id
        ) from None
    return method


_FIXED = {"octet": 1, "short": 2, "long": 4, "longlong": 8, "timestamp": 8}


def _check_length(cls: type[base.Frame], args: bytes) -> None:
    """Raise ValueError unless `args` holds exactly the arguments of `cls`: pamqp slices without
    looking, so a short string running past the end would come out silently cut."""
    offset, in_bits = 0, 0
    for name in cls.__slots__:
        kind = cls.amqp_type(name)
        if kind == "bit":
            if in_bits in (0, 8):
                offset, in_bits = offset + 1, 0
            in_bits += 1
            continue
        in_bits = 0
        if kind in _FIXED:
            offset += _FIXED[kind]
        elif kind == "shortstr":
            if offset >= len(args):
                raise ValueError("short string past the end")
            offset += 1 + args[offset]
        else:  # longstr, table
            if offset + 4 > len(args):
                raise ValueError(f"{kind} past the end")
            offset += 4 + int.from_bytes(args[offset : offset + 4], "big")
        if offset > len(args):
            raise ValueError(f"{name} runs past the end")
    if offset != len(args):
        raise ValueError(f"{len(args)} octets of arguments, expected {offset}")


def encode_method(channel: int, method: base.Frame) -> bytes:
    """One method frame."""
    return frame(FRAME_METHOD, channel, method.index.to_bytes(4, "big") + method.marshal())


def ids_of(method: base.Frame) -> tuple[int, int]:
    """(class id, method id) of a pamqp method."""
    return method.index >> 16, method.index & 0xFFFF
