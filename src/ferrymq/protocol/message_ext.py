"""MessageExt, a decoded stored message, and the consumer-side decoder of records into it.

A consumer decodes every message it receives, so decoding is one struct call per record and leaves
the properties as text until asked for; the C version (ferrymq/_native/records.c) does the same loop
when it is built, and py_decode_records stays its reference.
"""

from __future__ import annotations

import struct

from isal.isal_zlib import crc32

from ferrymq._native import load
from ferrymq.protocol.compression import decompress
from ferrymq.protocol.errors import MessageDecodeError, ProtocolError
from ferrymq.protocol.message_id import offset_msg_id
from ferrymq.protocol.properties import Prop, decode_properties, encode_properties
from ferrymq.protocol.record import (
    FIXED,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    fixed_struct,
    host_sys_flags,
    pack_host,
    record_size,
    topic_block,
    unpack_host,
    write_record,
)
from ferrymq.protocol.sys_flag import BORNHOST_V6_FLAG, COMPRESSED_FLAG, STOREHOST_V6_FLAG

_SHORT = struct.Struct(">h")
_USHORT = struct.Struct(">H")
_TOPICS: dict[bytes, str] = {}  # decoded topic names: a consumer sees few, and records repeat them

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
        # None until first read when a decoder leaves the properties as their text
        self._properties: dict[str, str] | None = {} if properties is None else properties
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

    __hash__ = None  # type: ignore[assignment]  # mutable, so unhashable like the dataclass it replaces

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


class CompressedBodyError(MessageDecodeError):
    """A stored message whose compressed body does not decompress; `message` holds it as stored."""

    def __init__(self, message: MessageExt, reason: str) -> None:
        super().__init__(
            f"message {message.msg_id} ({message.topic} queue {message.queue_id} offset "
            f"{message.queue_offset}) has a body that does not decompress: {reason}"
        )
        self.message = message


def decompress_body(msg: MessageExt) -> MessageExt:
    """Give a message its body's content if the producer compressed it, and clear the COMPRESSED bit
    (the body is no longer compressed), as RocketMQ's client decoder does. CompressedBodyError if
    the body does not decompress; the message is then left as it was."""
    if msg.sys_flag & COMPRESSED_FLAG:
        try:
            msg.body = decompress(msg.body, msg.sys_flag)
        except ProtocolError as e:
            raise CompressedBodyError(msg, str(e)) from None
        msg.sys_flag &= ~COMPRESSED_FLAG
    return msg


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
    if _records_c is not None:
        return _records_c.decode_records(raw, verify_crc)
    return py_decode_records(raw, verify_crc)


def py_decode_records(raw: bytes, verify_crc: bool = False) -> list[MessageExt]:
    """decode_records in Python: the reference for the C version used when it is built."""
    out = []
    pos, end = 0, len(raw)
    while pos < end:
        msg = _decode_at(raw, pos, end, verify_crc)
        out.append(msg)
        pos += msg.store_size
    return out


_V4_FIXED = FIXED[8 + 2 * 8]
_new_message = MessageExt.__new__


def _decode_at(raw: bytes, pos: int, end: int, verify_crc: bool) -> MessageExt:
    """One record of `raw` (bytes) at `pos`: one struct call for the fixed part, checks as strict
    as read_record_meta's, and no work for what the reader may never look at (the properties)."""
    fixed = _V4_FIXED
    try:
        f = fixed.unpack_from(raw, pos)
        if f[7] & 0x30:  # an IPv6 host: a wider layout
            fixed = fixed_struct(f[7])
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


_records_c = load("records")
if _records_c is not None:
    _records_c.bind(
        MessageExt, ("topic", "body", "_properties", "_properties_text", *_FIELDS[3:]), MessageDecodeError,
        _TOPICS, _host, crc32,
    )  # fmt: skip
