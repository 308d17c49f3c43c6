"""RocketMQ's stored-message record layout, shared by the CommitLog and PULL_MESSAGE answers.

The record layout is both the CommitLog's on-disk format and the body of a PULL_MESSAGE answer, so
the same bytes travel from disk to the wire untouched. Everything here is big-endian, like Java's
ByteBuffer. The writer puts records straight into a caller's buffer (an mmap in the store) so the
hot path makes no intermediate copies; the reader parses what the broker needs without copying the
body. The consumer-side decoder into MessageExt lives in message_ext.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from enum import Enum
from typing import Final, Literal, NamedTuple

from isal.isal_zlib import crc32

from ferrymq._native import load
from ferrymq.protocol.sys_flag import BORNHOST_V6_FLAG, STOREHOST_V6_FLAG

# Magic codes as signed 32-bit ints, the way Java writes them.
MAGIC_V1 = -626843481  # 0xDAA320A7: topic length in one byte
MAGIC_V2 = -626843477  # 0xDAA320AB: topic length in two bytes (topics over 127 bytes)
BLANK_MAGIC = -875286124  # 0xCBD43194: end-of-segment filler
BLANK_MIN_SIZE = 8  # TOTALSIZE + MAGIC: the smallest blank record
MAX_TOPIC_V1_SIZE = 127


# ---------------------------------------------------------------------------------------------
# Hosts: 4-byte IPv4 or 16-byte IPv6 address followed by an int32 port.


def pack_host(ip: str, port: int) -> bytes:
    """Pack an address as the record stores it (8 bytes for IPv4, 20 for IPv6)."""
    addr = ipaddress.ip_address(ip).packed
    return addr + struct.pack(">i", port)


def unpack_host(raw: bytes | memoryview) -> tuple[str, int]:
    addr = bytes(raw[:-4])
    family = socket.AF_INET if len(addr) == 4 else socket.AF_INET6
    return socket.inet_ntop(family, addr), struct.unpack(">i", raw[-4:])[0]


def host_sys_flags(born_host: bytes, store_host: bytes) -> int:
    """The BORNHOST_V6/STOREHOST_V6 bits implied by the packed host lengths."""
    return (BORNHOST_V6_FLAG if len(born_host) == 20 else 0) | (
        STOREHOST_V6_FLAG if len(store_host) == 20 else 0
    )


# ---------------------------------------------------------------------------------------------
# The record.

_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_USHORT = struct.Struct(">H")
CQ_ENTRY = struct.Struct(">qiq")  # a ConsumeQueue entry: CommitLog offset, record size, tag hash
HEAD_SIZE = 48  # TOTALSIZE .. BORNTIMESTAMP, the part before the first host
MIN_RECORD_SIZE = HEAD_SIZE + 8 + 8 + 8 + 4 + 8 + 4 + 1 + 2  # 91: IPv4 hosts, empty body/topic/props

# Field positions that do not depend on host widths.
POS_TOTALSIZE = 0
POS_MAGIC = 4
POS_BODYCRC = 8
POS_QUEUEID = 12
POS_FLAG = 16
POS_QUEUEOFFSET = 20
POS_PHYSICALOFFSET = 28
POS_SYSFLAG = 36
POS_BORNTIMESTAMP = 40
POS_BORNHOST = 48


# The fixed part of a record (TOTALSIZE .. BODYLEN) in one struct per host-width combination,
# keyed by born width + 2 * store width (8+16, 20+16, 8+40, 20+40: all distinct).
# Index with FIXED[len(born_host) + 2 * len(store_host)] for packed hosts, or fixed_struct(sys_flag).
FIXED = {b + 2 * s: struct.Struct(f">iiiiiqqiq{b}sq{s}siqi") for b in (8, 20) for s in (8, 20)}


def fixed_struct(sys_flag: int) -> struct.Struct:
    return FIXED[(20 if sys_flag & BORNHOST_V6_FLAG else 8) + (40 if sys_flag & STOREHOST_V6_FLAG else 16)]


def store_timestamp_pos(sys_flag: int) -> int:
    return POS_BORNHOST + (20 if sys_flag & BORNHOST_V6_FLAG else 8)


def body_crc(body) -> int:
    """BODYCRC as RocketMQ stores it: CRC32 of the body with the top bit masked off."""
    return crc32(body) & 0x7FFFFFFF


def topic_block(topic: bytes) -> bytes:
    """The topic as a record stores it: its length (1 byte; 2 bytes past 127, magic v2), then the bytes."""
    n = len(topic)
    return (bytes((n,)) if n <= MAX_TOPIC_V1_SIZE else _USHORT.pack(n)) + topic


def record_size(body_len: int, topic_len: int, props_len: int, born_len: int = 8, store_len: int = 8) -> int:
    topic_width = 1 if topic_len <= MAX_TOPIC_V1_SIZE else 2
    return HEAD_SIZE + born_len + 8 + store_len + 16 + body_len + topic_width + topic_len + 2 + props_len


def py_write_record(
    buf,
    pos: int,
    topic_block: bytes,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    reconsume_times: int,
    prepared_transaction_offset: int,
    body,
    properties: bytes,
) -> int:
    """Write one record into `buf` at `pos` and return its size. `buf` must have room (see record_size).

    `topic_block` comes from topic_block(); hosts are packed (pack_host) and their widths must
    agree with the V6 bits of `sys_flag`. This is the put hot path: three copies and one pack.
    """
    body_len = len(body)
    tail = topic_block + _SHORT.pack(len(properties)) + properties
    fixed = FIXED[len(born_host) + 2 * len(store_host)]
    head = fixed.size
    size = head + body_len + len(tail)
    fixed.pack_into(
        buf, pos, size, MAGIC_V2 if len(topic_block) > MAX_TOPIC_V1_SIZE + 1 else MAGIC_V1,
        crc32(body) & 0x7FFFFFFF, queue_id, flag, queue_offset, physical_offset, sys_flag, born_timestamp,
        born_host, store_timestamp, store_host, reconsume_times, prepared_transaction_offset, body_len,
    )  # fmt: skip
    p = pos + head
    buf[p : p + body_len] = body
    p += body_len
    buf[p : pos + size] = tail
    return size


_native = load("put")
if _native is not None:
    _native.bind(crc32)
write_record = py_write_record if _native is None else _native.write_record
"""The record writer: the C one where built (one call per put), else py_write_record (the reference)."""


def write_blank(buf, pos: int, size: int) -> None:
    """Fill the unused tail of a segment with RocketMQ's end-of-file blank record."""
    _INT.pack_into(buf, pos, size)
    _INT.pack_into(buf, pos + 4, BLANK_MAGIC)


class RecordMeta(NamedTuple):
    """What the dispatcher and recovery need from a record, parsed without copying the body."""

    size: int
    body_crc: int
    queue_id: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    store_timestamp: int
    body_start: int
    body_len: int
    topic: str
    props_start: int
    props_end: int


class Blank(Enum):
    """BLANK's type: a singleton of its own, so that `meta is BLANK` narrows read_record_meta's answer
    for type checkers at the cost of one identity test."""

    BLANK = "BLANK"


BLANK: Final = Blank.BLANK  # read_record_meta's answer for the end-of-segment filler


def read_record_meta(buf, pos: int, limit: int) -> RecordMeta | Literal[Blank.BLANK] | None:
    """Parse the record at `pos` (absolute in `buf`, which holds valid bytes up to `limit`).

    Returns RecordMeta, BLANK for the end-of-segment filler, or None when the bytes at `pos` are
    not a whole, well-formed record (a zeroed or torn tail). The body CRC is not checked here.
    """
    if limit - pos < 8:
        return None
    size, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    if magic == BLANK_MAGIC:
        return BLANK if BLANK_MIN_SIZE <= size <= limit - pos else None
    if (magic != MAGIC_V1 and magic != MAGIC_V2) or size < MIN_RECORD_SIZE or size > limit - pos:
        return None
    sys_flag = _INT.unpack_from(buf, pos + POS_SYSFLAG)[0]
    fixed = FIXED[(20 if sys_flag & BORNHOST_V6_FLAG else 8) + (40 if sys_flag & STOREHOST_V6_FLAG else 16)]
    body_start = pos + fixed.size
    end = pos + size
    if body_start + 3 > end:
        return None
    _, _, crc, queue_id, _, queue_offset, phys, sys_flag, _, _, store_ts, _, _, _, body_len = (
        fixed.unpack_from(buf, pos)
    )
    p = body_start + body_len
    if body_len < 0 or p + 3 > end:
        return None
    if magic == MAGIC_V1:
        topic_len = buf[p]
        p += 1
    else:
        topic_len = _USHORT.unpack_from(buf, p)[0]
        p += 2
    topic_end = p + topic_len
    if topic_end + 2 > end:
        return None
    raw_topic = bytes(buf[p:topic_end])  # no copy when `buf` is an mmap: its slices are bytes
    topic = _TOPICS.get(raw_topic)
    if topic is None:
        try:
            topic = raw_topic.decode()
        except UnicodeDecodeError:
            return None
        if len(_TOPICS) > 10_000:
            _TOPICS.clear()
        _TOPICS[raw_topic] = topic
    props_len = _SHORT.unpack_from(buf, topic_end)[0]
    props_start = topic_end + 2
    if props_len < 0 or props_start + props_len != end:
        return None
    return _new_meta(
        RecordMeta, (size, crc, queue_id, queue_offset, phys, sys_flag, store_ts, body_start, body_len, topic,
                     props_start, end),
    )  # fmt: skip


_SIZE_MAGIC = struct.Struct(">ii")
_new_meta = tuple.__new__  # builds a RecordMeta without its Python-level __new__: per record, it adds up
_TOPICS: dict[bytes, str] = {}  # decoded topic names: a store holds few, and records repeat them
