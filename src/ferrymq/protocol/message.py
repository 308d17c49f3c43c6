"""RocketMQ's stored-message record (MessageExt), batch bodies, properties and message ids.

The record layout is both the CommitLog's on-disk format and the body of a PULL_MESSAGE answer, so
the same bytes travel from disk to the wire untouched. Everything here is big-endian, like Java's
ByteBuffer. The encoder writes straight into a caller's buffer (an mmap in the store) so the hot
path makes no intermediate copies.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from typing import NamedTuple

from isal.isal_zlib import crc32

from ferrymq._native import load
from ferrymq.protocol.errors import MessageDecodeError

# Magic codes as signed 32-bit ints, the way Java writes them.
MAGIC_V1 = -626843481  # 0xDAA320A7: topic length in one byte
MAGIC_V2 = -626843477  # 0xDAA320AB: topic length in two bytes (topics over 127 bytes)
BLANK_MAGIC = -875286124  # 0xCBD43194: end-of-segment filler
BLANK_MIN_SIZE = 8  # TOTALSIZE + MAGIC: the smallest blank record

# MessageSysFlag bits.
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
TRANSACTION_TYPE_MASK = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20
NEED_UNWRAP_FLAG = 0x40
INNER_BATCH_FLAG = 0x80
COMPRESSION_TYPE_MASK = 0x700
COMPRESSION_ZLIB = 0x300

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
MAX_PROPERTIES_SIZE = 32767  # the properties length is an int16
MAX_TOPIC_V1_SIZE = 127


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


# ---------------------------------------------------------------------------------------------
# Java String.hashCode, for tag hashes and index keys.

_UTF16 = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"
_BASE31 = b"0123456789abcdefghijklmnopqrstu"
_HIGH_DIGIT = bytes(_BASE31[b // 31] for b in range(256))
_LOW_DIGIT = bytes(_BASE31[b % 31] for b in range(256))
_FAST_HASH_MAX_LEN = 639  # int() parses up to 640 digits whatever sys.set_int_max_str_digits says


def java_hash(s: str) -> int:
    """Java's String.hashCode as a signed 32-bit int.

    For ASCII the hash is the bytes read as a base-31 number (mod 2**32); splitting each byte into
    two base-31 digits (b = 31*high + low) lets int() do that sum in C. It runs for every tag and
    index key the dispatcher sees, so it is worth the trick.
    """
    if s.isascii() and len(s) <= _FAST_HASH_MAX_LEN:
        raw = s.encode()
        h = (
            int(b"0" + raw.translate(_HIGH_DIGIT), 31) * 31 + int(b"0" + raw.translate(_LOW_DIGIT), 31)
        ) & 0xFFFFFFFF
    else:
        h = 0
        for unit in memoryview(s.encode(_UTF16)).cast("H"):  # UTF-16 code units, as Java counts them
            h = (h * 31 + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=1 << 16)
def tag_hash(tag: bytes) -> int:
    """The ConsumeQueue hash of a raw TAGS value (Java's hashCode), cached: topics reuse few tags."""
    return java_hash(tag.decode(errors="replace"))


# ---------------------------------------------------------------------------------------------
# Properties: key \x01 value \x02, repeated.


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


def find_property(props: bytes, key: bytes) -> bytes | None:
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
_LONG = struct.Struct(">q")
_SHORT = struct.Struct(">h")
_UBYTE = struct.Struct(">B")
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
_FIXED = {b + 2 * s: struct.Struct(f">iiiiiqqiq{b}sq{s}siqi") for b in (8, 20) for s in (8, 20)}


def _fixed_struct(sys_flag: int) -> struct.Struct:
    return _FIXED[(20 if sys_flag & BORNHOST_V6_FLAG else 8) + (40 if sys_flag & STOREHOST_V6_FLAG else 16)]


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


def write_record(
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
    fixed = _FIXED[len(born_host) + 2 * len(store_host)]
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


BLANK = "BLANK"  # read_record_meta's answer for the end-of-segment filler


def read_record_meta(buf, pos: int, limit: int) -> RecordMeta | str | None:
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
    fixed = _FIXED[(20 if sys_flag & BORNHOST_V6_FLAG else 8) + (40 if sys_flag & STOREHOST_V6_FLAG else 16)]
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


_FIELDS = (
    "topic", "body", "properties", "queue_id", "flag", "queue_offset", "commitlog_offset", "sys_flag",
    "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
    "prepared_transaction_offset", "body_crc", "store_size",
)  # fmt: skip


class MessageExt:
    """A decoded stored message (RocketMQ's MessageExt).

    A consumer decodes every message it receives, so the properties stay as their (validated)
    text until first asked for: most consumers read only bodies, and splitting the properties into
    a dict was the largest part of decoding.
    """

    __slots__ = (*(f for f in _FIELDS if f != "properties"), "_properties", "_properties_text")

    def __init__(
        self,
        topic: str,
        body: bytes,
        properties: dict[str, str] | None = None,
        queue_id: int = 0,
        flag: int = 0,
        queue_offset: int = 0,
        commitlog_offset: int = 0,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: tuple[str, int] = ("127.0.0.1", 0),
        store_timestamp: int = 0,
        store_host: tuple[str, int] = ("127.0.0.1", 0),
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
        body_crc: int = 0,
        store_size: int = 0,
    ) -> None:
        self.topic = topic
        self.body = body
        self._properties = {} if properties is None else properties
        self._properties_text = ""
        self.queue_id = queue_id
        self.flag = flag
        self.queue_offset = queue_offset
        self.commitlog_offset = commitlog_offset
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.store_timestamp = store_timestamp
        self.store_host = store_host
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        self.body_crc = body_crc
        self.store_size = store_size

    @property
    def properties(self) -> dict[str, str]:
        props = self._properties
        if props is None:
            props = self._properties = decode_properties(self._properties_text)
        return props

    @properties.setter
    def properties(self, value: dict[str, str]) -> None:
        self._properties = value

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not MessageExt:
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in _FIELDS)

    __hash__ = None  # mutable, like the dataclass it replaces

    def __repr__(self) -> str:
        fields = ", ".join(f"{f}={getattr(self, f)!r}" for f in _FIELDS)
        return f"MessageExt({fields})"

    @property
    def tags(self) -> str | None:
        return self.properties.get(Prop.TAGS)

    @property
    def keys(self) -> list[str]:
        return self.properties.get(Prop.KEYS, "").split()

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(Prop.UNIQ_KEY)

    @property
    def offset_msg_id(self) -> str:
        return offset_msg_id(pack_host(*self.store_host), self.commitlog_offset)

    @property
    def msg_id(self) -> str:
        """The id a RocketMQ client shows: UNIQ_KEY when the producer set one, else the offset id."""
        return self.uniq_key or self.offset_msg_id

    def encode(self) -> bytes:
        """The stored-record bytes of this message (fields as they are, CRC recomputed)."""
        topic = self.topic.encode()
        props = encode_properties(self.properties).encode()
        born = pack_host(*self.born_host)
        store = pack_host(*self.store_host)
        sys_flag = (self.sys_flag & ~(BORNHOST_V6_FLAG | STOREHOST_V6_FLAG)) | host_sys_flags(born, store)
        buf = bytearray(record_size(len(self.body), len(topic), len(props), len(born), len(store)))
        write_record(
            buf, 0, topic_block(topic), self.queue_id, self.flag, self.queue_offset, self.commitlog_offset,
            sys_flag, self.born_timestamp, born, self.store_timestamp, store, self.reconsume_times,
            self.prepared_transaction_offset, self.body, props,
        )  # fmt: skip
        return bytes(buf)


def decode_record(buf, pos: int = 0, *, verify_crc: bool = False) -> MessageExt:
    """Decode the record at `pos`; raise MessageDecodeError for anything that is not a whole record."""
    if not isinstance(buf, bytes | bytearray | memoryview):
        raise MessageDecodeError(f"expected bytes, got {type(buf).__name__}")
    return _decode_at(buf if type(buf) is bytes else bytes(buf), pos, len(buf), verify_crc)


def decode_records(buf, *, verify_crc: bool = False) -> list[MessageExt]:
    """Decode concatenated records, such as a PULL_MESSAGE answer body."""
    if not isinstance(buf, bytes | bytearray | memoryview):
        raise MessageDecodeError(f"expected bytes, got {type(buf).__name__}")
    raw = buf if type(buf) is bytes else bytes(buf)  # slices of bytes are the cheapest bodies
    out = []
    pos, end = 0, len(raw)
    while pos < end:
        msg = _decode_at(raw, pos, end, verify_crc)
        out.append(msg)
        pos += msg.store_size
    return out


_V4_FIXED = _FIXED[8 + 2 * 8]
_new_message = MessageExt.__new__


def _decode_at(raw: bytes, pos: int, end: int, verify_crc: bool) -> MessageExt:
    """One record of `raw` (bytes) at `pos`: one struct call for the fixed part, checks as strict
    as read_record_meta's, and no work for what the reader may never look at (the properties)."""
    fixed = _V4_FIXED
    try:
        f = fixed.unpack_from(raw, pos)
        if f[7] & 0x30:  # an IPv6 host: a wider layout
            fixed = _fixed_struct(f[7])
            f = fixed.unpack_from(raw, pos)
    except struct.error:
        raise MessageDecodeError(f"no valid message record at position {pos}") from None
    size, magic, crc = f[0], f[1], f[2]
    body_start = pos + fixed.size
    body_len = f[14]
    p = body_start + body_len
    record_end = pos + size
    if (
        (magic != MAGIC_V1 and magic != MAGIC_V2)
        or size < MIN_RECORD_SIZE
        or record_end > end
        or body_len < 0
        or p + 3 > record_end
    ):
        raise MessageDecodeError(f"no valid message record at position {pos}")
    body = raw[body_start:p]
    if verify_crc and crc32(body) & 0x7FFFFFFF != crc:
        raise MessageDecodeError(f"body CRC mismatch in record at position {pos}")
    if magic == MAGIC_V1:
        topic_end = p + 1 + raw[p]
        raw_topic = raw[p + 1 : topic_end]
    else:
        topic_end = p + 2 + _USHORT.unpack_from(raw, p)[0]
        raw_topic = raw[p + 2 : topic_end]
    if topic_end + 2 > record_end or _SHORT.unpack_from(raw, topic_end)[0] != record_end - topic_end - 2:
        raise MessageDecodeError(f"record at position {pos} has inconsistent lengths")
    topic = _TOPICS.get(raw_topic)
    try:
        if topic is None:
            topic = raw_topic.decode()
            if len(_TOPICS) > 10_000:
                _TOPICS.clear()
            _TOPICS[raw_topic] = topic
        props_text = raw[topic_end + 2 : record_end].decode()
    except UnicodeDecodeError as e:
        raise MessageDecodeError(f"record at position {pos} is not UTF-8 where it must be: {e}") from None
    msg = _new_message(MessageExt)
    msg.topic, msg.body, msg._properties, msg._properties_text = topic, body, None, props_text
    (msg.store_size, _, msg.body_crc, msg.queue_id, msg.flag, msg.queue_offset, msg.commitlog_offset,
     msg.sys_flag, msg.born_timestamp, born, msg.store_timestamp, store, msg.reconsume_times,
     msg.prepared_transaction_offset, _) = f  # fmt: skip
    msg.born_host = _HOSTS.get(born) or _host(born)
    msg.store_host = _HOSTS.get(store) or _host(store)
    return msg


_HOSTS: dict[bytes, tuple[str, int]] = {}  # packed host -> (ip, port): a consumer sees few hosts


def _host(raw: bytes) -> tuple[str, int]:
    host = _HOSTS.get(raw)
    if host is None:
        if len(_HOSTS) > 10_000:
            _HOSTS.clear()
        host = _HOSTS[raw] = unpack_host(raw)
    return host


# ---------------------------------------------------------------------------------------------
# SEND_BATCH_MESSAGE bodies: TOTALSIZE, MAGICCODE(0), BODYCRC(0), FLAG, BODYLEN+body, PROPLEN+props.

_BATCH_HEAD = struct.Struct(">iiiii")  # TOTALSIZE, MAGICCODE, BODYCRC, FLAG, BODYLEN
BATCH_OVERHEAD = _BATCH_HEAD.size + 2


def py_encode_batch(entries: list[tuple[bytes, bytes, int]]) -> bytes:
    """Encode (body, encoded properties, flag) triples as a SEND_BATCH_MESSAGE body (the reference for
    the C version that `encode_batch` is when it is built)."""
    parts = []
    for body, props, flag in entries:
        size = BATCH_OVERHEAD + len(body) + len(props)
        parts += (_BATCH_HEAD.pack(size, 0, 0, flag, len(body)), body, _SHORT.pack(len(props)), props)
    return b"".join(parts)


def py_scan_batch(data: bytes | memoryview) -> tuple[int, int, int]:
    """Validate a whole batch body; return (message count, largest body, largest properties).

    Runs for every SEND_BATCH_MESSAGE, so the checks are inline rather than a call per entry. The
    reference for the C version (ferrymq/_native/batch.c) that `scan_batch` is when it is built.
    """
    view = memoryview(data)
    unpack_head, unpack_short, head_size = _BATCH_HEAD.unpack_from, _SHORT.unpack_from, _BATCH_HEAD.size
    pos, end = 0, len(view)
    count = largest_body = largest_props = 0
    while pos < end:
        if end - pos < BATCH_OVERHEAD:
            raise MessageDecodeError(f"truncated batch entry at {pos}")
        size, _magic, _crc, _flag, body_len = unpack_head(view, pos)
        props_len_pos = pos + head_size + body_len
        if body_len < 0 or size < BATCH_OVERHEAD or pos + size > end or props_len_pos + 2 > pos + size:
            raise MessageDecodeError(f"batch entry at {pos} has inconsistent lengths")
        props_len = unpack_short(view, props_len_pos)[0]
        if props_len < 0 or props_len_pos + 2 + props_len != pos + size:
            raise MessageDecodeError(f"batch entry at {pos} has inconsistent properties length")
        count += 1
        if body_len > largest_body:
            largest_body = body_len
        if props_len > largest_props:
            largest_props = props_len
        pos += size
    return count, largest_body, largest_props


def iter_batch(data: bytes | memoryview) -> Iterator[tuple[int, memoryview, bytes]]:
    """Split a batch body into (flag, body, properties) per message; MessageDecodeError if malformed."""
    scan_batch(data)
    view = memoryview(data)
    pos, end = 0, len(view)
    while pos < end:
        size, _, _, flag, body_len = _BATCH_HEAD.unpack_from(view, pos)
        body_end = pos + _BATCH_HEAD.size + body_len
        yield flag, view[pos + _BATCH_HEAD.size : body_end], bytes(view[body_end + 2 : pos + size])
        pos += size


def batch_records_size(
    batch_size: int, count: int, topic_block: bytes, born_host: bytes, store_host: bytes
) -> int:
    """The CommitLog bytes a validated batch becomes: each entry gains the record fields and topic."""
    head = _FIXED[len(born_host) + 2 * len(store_host)].size
    return batch_size + count * (head + len(topic_block) - _BATCH_HEAD.size)


def py_write_batch_records(
    buf,
    pos: int,
    batch: bytes | memoryview,
    count: int,
    topic_block: bytes,
    queue_id: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
) -> bytearray:
    """Write the `count` entries of a batch body (checked by scan_batch) as records.

    Returns their ConsumeQueue entries (CQ_ENTRY each: CommitLog offset, size, tag hash), built
    here while every field is at hand so the dispatcher need not parse the records back.
    Body and properties are copied straight from the request into `buf`: no per-message objects.
    The reference for the C version that `write_batch_records` is when it is built.
    """
    view = memoryview(batch)
    raw = batch if type(batch) is bytes else bytes(view)  # for bytes.find, which a view lacks
    find = raw.find
    fixed = _FIXED[len(born_host) + 2 * len(store_host)]
    pack_into, unpack_head, entry_into = fixed.pack_into, _BATCH_HEAD.unpack_from, CQ_ENTRY.pack_into
    head = fixed.size
    block_len = len(topic_block)
    magic = MAGIC_V2 if block_len > MAX_TOPIC_V1_SIZE + 1 else MAGIC_V1
    grow = head + block_len - _BATCH_HEAD.size
    entries = bytearray(count * CQ_ENTRY.size)
    bpos = 0
    for epos in range(0, len(entries), CQ_ENTRY.size):
        size, _, _, flag, body_len = unpack_head(view, bpos)
        body_start = bpos + _BATCH_HEAD.size
        body_end = body_start + body_len
        body = view[body_start:body_end]
        record_size = size + grow
        record_end = pos + record_size
        pack_into(
            buf, pos, record_size, magic, crc32(body) & 0x7FFFFFFF, queue_id, flag, queue_offset,
            physical_offset, sys_flag, born_timestamp, born_host, store_timestamp, store_host, 0, 0, body_len,
        )  # fmt: skip
        p = pos + head
        buf[p : p + body_len] = body
        p += body_len
        buf[p : p + block_len] = topic_block
        buf[p + block_len : record_end] = view[body_end : bpos + size]  # PROPLEN + properties
        tag = 0
        if find(_TAGS_KEY, body_end + 2, bpos + size) >= 0:  # rarely worth a closer look
            found = find_property(raw[body_end + 2 : bpos + size], _TAGS_KEY)
            tag = tag_hash(found) if found else 0
        entry_into(entries, epos, physical_offset, record_size, tag)
        physical_offset += record_size
        queue_offset += 1
        pos = record_end
        bpos += size
    return entries


_TAGS_KEY = b"TAGS\x01"
_batch_c = load("batch")


def _c_scan_batch(data: bytes | memoryview) -> tuple[int, int, int]:
    found = _batch_c.scan_batch(data)
    if found.__class__ is str:
        raise MessageDecodeError(found)
    return found


def _c_write_batch_records(*args) -> bytearray:
    """write_batch_records's arguments, with isal's CRC-32 and the tag hash for the C loop to call."""
    return _batch_c.write_batch_records(*args, crc32, tag_hash)


encode_batch = py_encode_batch if _batch_c is None else _batch_c.encode_batch
scan_batch = py_scan_batch if _batch_c is None else _c_scan_batch
write_batch_records = py_write_batch_records if _batch_c is None else _c_write_batch_records


# ---------------------------------------------------------------------------------------------
# Message ids.


def offset_msg_id(store_host: bytes, physical_offset: int) -> str:
    """The broker-made id: store host address + port + CommitLog offset, as uppercase hex."""
    return (store_host + _LONG.pack(physical_offset)).hex().upper()


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


class UniqKeyGenerator:
    """Client-made UNIQ_KEY ids as the Java client makes them (MessageClientIDSetter).

    16 bytes for IPv4: IP(4) + pid(2) + a per-process random int(4) + ms since the start of the
    month(4) + counter(2), as 32 uppercase hex digits. Ids sort by time within a month.
    """

    def __init__(self, ip: str = "127.0.0.1") -> None:
        salt = id(self) & 0x7FFFFFFF
        prefix = ipaddress.ip_address(ip).packed + struct.pack(">hi", os.getpid() & 0x7FFF, salt)
        self._prefix = prefix.hex().upper()
        self._lock = threading.Lock()
        self._counter = 0
        self._set_month_start(time.time())

    def _set_month_start(self, now: float) -> None:
        t = time.localtime(now)
        year, month = t.tm_year + t.tm_mon // 12, t.tm_mon % 12 + 1
        self._month_start_ms = int(time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1)) * 1000)
        self._next_month_ms = int(time.mktime((year, month, 1, 0, 0, 0, 0, 0, -1)) * 1000)

    def next(self) -> str:
        return self.next_many(1)[0]

    def next_many(self, count: int) -> list[str]:
        """`count` ids at once (a batch's): one clock read and one lock for all of them."""
        now_ms = time.time_ns() // 1_000_000
        with self._lock:
            if now_ms >= self._next_month_ms:
                self._set_month_start(now_ms / 1000)
            first = self._counter + 1
            self._counter = (self._counter + count) & 0xFFFF
        stem = f"{self._prefix}{(now_ms - self._month_start_ms) & 0xFFFFFFFF:08X}"
        return [f"{stem}{c & 0xFFFF:04X}" for c in range(first, first + count)]
