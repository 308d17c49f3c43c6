"""Message ids made by the broker: store host + CommitLog offset (RocketMQ's offset message id).

Client-made ids (UNIQ_KEY) need a clock, a pid and a counter, so they are made by the client
(ferrymq.client.uniq_key); here they are only a property.
"""

from __future__ import annotations

import functools
import struct

from ferrymq._native import load
from ferrymq.protocol.errors import MessageDecodeError
from ferrymq.protocol.record import CQ_ENTRY, unpack_host

_LONG = struct.Struct(">q")


def py_offset_msg_id(store_host: bytes, physical_offset: int) -> str:
    """The broker-made id: store host address + port + CommitLog offset, as uppercase hex."""
    return (store_host + _LONG.pack(physical_offset)).hex().upper()


_native = load("put")
offset_msg_id = py_offset_msg_id if _native is None else _native.offset_msg_id
"""The offset message id: in C where built (every send's answer carries one)."""


def offset_msg_ids(store_host: bytes, entries: bytes | bytearray) -> str:
    """The comma-joined offset ids of the records whose ConsumeQueue entries (CQ_ENTRY) are given.

    Done in bulk, as a batch's answer needs one per message: the packed CommitLog offsets are cut out
    of the entries by one struct call, interleaved with the host by one join, and hexed in one go.
    """
    if not entries:
        return ""
    offsets = _entry_offsets(len(entries) // CQ_ENTRY.size).unpack(entries)
    return (store_host + store_host.join(offsets)).hex(",", len(store_host) + 8).upper()


@functools.lru_cache(maxsize=256)
def _entry_offsets(count: int) -> struct.Struct:
    """Cuts the packed CommitLog offset out of each of `count` ConsumeQueue entries."""
    return struct.Struct("8s12x" * count)


def parse_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """Split an offset message id into (ip, port, CommitLog offset)."""
    if not isinstance(msg_id, str) or len(msg_id) not in (32, 56):
        raise MessageDecodeError(f"not an offset message id: {msg_id!r}")
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise MessageDecodeError(f"not an offset message id: {msg_id!r}") from None
    ip, port = unpack_host(raw[:-8])
    return ip, port, _LONG.unpack(raw[-8:])[0]
