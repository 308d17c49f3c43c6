"""RocketMQ 5 pop consumption on the wire: headers, the receipt handle, bitmaps and record stamping.

A pop hands out messages with a receipt handle (RocketMQ's ``POP_CK`` property, built like
``ExtraInfoUtil.buildExtraInfo``): space-separated ``startOffset popTime invisibleTime reviveQid
topicType brokerName queueId offset``. The handle names everything an ack needs (which checkpoint,
which broker, queue and offset), so any proxy can route it and a restarted broker can match it.
Everything here is pure; decoders raise only ``ProtocolError``.
"""

from __future__ import annotations

import base64
import binascii
import struct
from typing import NamedTuple

import msgspec

from ferrymq._native import load
from ferrymq.protocol.errors import ProtocolError
from ferrymq.protocol.headers import CustomHeader, Int, Long
from ferrymq.protocol.record import MAGIC_V1, POS_BORNHOST, POS_QUEUEOFFSET, POS_SYSFLAG
from ferrymq.protocol.sys_flag import BORNHOST_V6_FLAG, STOREHOST_V6_FLAG

POP_CK = "POP_CK"
RETRY_PREFIX = "%RETRY%"
NORMAL_TOPIC, RETRY_TOPIC_V1, RETRY_TOPIC_V2 = "0", "1", "2"
ORDER_REVIVE_QUEUE = 999  # KeyBuilder.POP_ORDER_REVIVE_QUEUE: the revive qid of FIFO handles
INIT_MODE_MIN, INIT_MODE_MAX = 0, 1  # ConsumeInitMode: a new group starts at the first / last message


def pop_retry_topic(group: str, topic: str) -> str:
    """The retry topic of a pop group for one topic (RocketMQ 5's v1 name, KeyBuilder)."""
    return f"{RETRY_PREFIX}{group}_{topic}"


def topic_type(topic: str) -> str:
    """ExtraInfoUtil.getRetry: "2" for a v2 retry topic (with '+'), "1" for any other retry topic."""
    if topic.startswith(RETRY_PREFIX):
        return RETRY_TOPIC_V2 if "+" in topic else RETRY_TOPIC_V1
    return NORMAL_TOPIC


def real_topic(kind: str, topic: str, group: str) -> str:
    """The topic a handle's queue and offset belong to (ExtraInfoUtil.getRealTopic)."""
    if kind == NORMAL_TOPIC:
        return topic
    if kind == RETRY_TOPIC_V1:
        return f"{RETRY_PREFIX}{group}_{topic}"
    if kind == RETRY_TOPIC_V2:
        return f"{RETRY_PREFIX}{group}+{topic}"
    raise ProtocolError(f"receipt handle topic type must be 0, 1 or 2, not {kind!r}")


# --- the receipt handle ---------------------------------------------------------------------------


class ReceiptHandle(NamedTuple):
    """One popped message: its checkpoint (start offset + pop time), when it becomes visible again,
    and where it lives."""

    start_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    kind: str  # NORMAL_TOPIC / RETRY_TOPIC_V1 / RETRY_TOPIC_V2
    broker_name: str
    queue_id: int
    offset: int

    @property
    def visible_at(self) -> int:
        return self.pop_time + self.invisible_time

    def encode(self) -> str:
        return (
            f"{self.start_offset} {self.pop_time} {self.invisible_time} {self.revive_qid} {self.kind} "
            f"{self.broker_name} {self.queue_id} {self.offset}"
        )

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle:
        """Parse a handle; a 7-field handle (no message offset) is refused: an ack must name one."""
        if not isinstance(text, str) or len(text) > 512:
            raise ProtocolError("a receipt handle is a string of at most 512 characters")
        parts = text.split(" ")
        if len(parts) != 8:
            raise ProtocolError(f"a receipt handle has 8 space-separated fields, not {len(parts)}: {text!r}")
        start, pop_time, invisible, revive_qid, kind, broker, queue_id, offset = parts
        if kind not in (NORMAL_TOPIC, RETRY_TOPIC_V1, RETRY_TOPIC_V2) or not broker:
            raise ProtocolError(f"bad receipt handle {text!r}")
        numbers = [_integer(v, text) for v in (start, pop_time, invisible, revive_qid, queue_id, offset)]
        if min(numbers) < 0 or numbers[5] < numbers[0] or numbers[4] > 2**31 - 1 or numbers[3] > 2**31 - 1:
            raise ProtocolError(f"bad receipt handle {text!r}")
        return cls(numbers[0], numbers[1], numbers[2], numbers[3], kind, broker, numbers[4], numbers[5])


def _integer(value: str, text: str) -> int:
    if not value.isascii() or not value.isdigit() or len(value) > 19:
        raise ProtocolError(f"bad receipt handle {text!r}")
    number = int(value)
    if number >= 2**63:
        raise ProtocolError(f"bad receipt handle {text!r}")
    return number


# --- bitmaps: which offsets of a checkpoint are meant ----------------------------------------------


def bits_of(bitmap: int) -> list[int]:
    """The indexes of the set bits, lowest first."""
    out = []
    while bitmap:
        low = bitmap & -bitmap
        out.append(low.bit_length() - 1)
        bitmap ^= low
    return out


def java_bitset_encode(bitmap: int) -> str:
    """A Java BitSet as fastjson writes it (BitSet.toByteArray, little-endian, base64)."""
    return base64.b64encode(bitmap.to_bytes((bitmap.bit_length() + 7) // 8, "little")).decode()


def java_bitset_decode(text: str) -> int:
    if not isinstance(text, str) or len(text) > 8192:
        raise ProtocolError("a bit set is a base64 string of at most 8192 characters")
    try:
        return int.from_bytes(base64.b64decode(text, validate=True), "little")
    except (binascii.Error, ValueError):
        raise ProtocolError(f"bad base64 bit set {text[:40]!r}") from None


# --- header info strings (ExtraInfoUtil.build*Info) -----------------------------------------------


def start_offset_info(parts: list[tuple[str, int, int]]) -> str:
    """ "type qid startOffset" per (topic, queue id, start offset), ';'-joined."""
    return ";".join(f"{topic_type(t)} {q} {s}" for t, q, s in parts)


def msg_offset_info(parts: list[tuple[str, int, str]]) -> str:
    """ "type qid o1,o2,..." per (topic, queue id, comma-joined offsets), ';'-joined."""
    return ";".join([f"{topic_type(t)} {q} {joined}" for t, q, joined in parts])


def order_count_info(parts: list[tuple[str, int, int]]) -> str:
    return ";".join(f"{topic_type(t)} {q} {count}" for t, q, count in parts)


# --- headers and bodies (RocketMQ's field names) --------------------------------------------------


class PopMessageRequestHeader(CustomHeader):
    consumer_group: str
    topic: str
    queue_id: Int
    max_msg_nums: Int
    invisible_time: Long
    poll_time: Long
    born_time: Long
    init_mode: Int
    exp_type: str | None = None
    exp: str | None = None
    order: bool | None = False
    attempt_id: str | None = None


def pop_response_fields(
    pop_time: int,
    invisible_time: int,
    revive_qid: int,
    rest_num: int,
    start_offset_info: str,
    msg_offset_info: str,
    order_count_info: str | None,
) -> dict[str, str]:
    """PopMessageResponseHeader's extFields, built directly: a pop answers with it every time."""
    fields = {
        "popTime": str(pop_time),
        "invisibleTime": str(invisible_time),
        "reviveQid": str(revive_qid),
        "restNum": str(rest_num),
        "startOffsetInfo": start_offset_info,
        "msgOffsetInfo": msg_offset_info,
    }
    if order_count_info is not None:
        fields["orderCountInfo"] = order_count_info
    return fields


class AckMessageRequestHeader(CustomHeader):
    consumer_group: str
    topic: str
    queue_id: Int
    extra_info: str
    offset: Long


class ChangeInvisibleTimeRequestHeader(CustomHeader):
    consumer_group: str
    topic: str
    queue_id: Int
    extra_info: str
    offset: Long
    invisible_time: Long


class ChangeInvisibleTimeResponseHeader(CustomHeader):
    pop_time: Long
    invisible_time: Long
    revive_qid: Int


class NotificationRequestHeader(CustomHeader):
    consumer_group: str
    topic: str
    queue_id: Int
    poll_time: Long
    born_time: Long
    order: bool | None = False
    attempt_id: str | None = None


class NotificationResponseHeader(CustomHeader):
    has_msg: bool
    polling_full: bool = False


class BatchAck(msgspec.Struct):
    """One checkpoint's acks in a BATCH_ACK_MESSAGE body (fastjson short names)."""

    consumer_group: str = msgspec.field(name="c")
    topic: str = msgspec.field(name="t")
    retry: str = msgspec.field(name="r")  # the handle's topic type
    start_offset: int = msgspec.field(name="so")
    queue_id: int = msgspec.field(name="q")
    revive_queue_id: int = msgspec.field(name="rq")
    pop_time: int = msgspec.field(name="pt")
    invisible_time: int = msgspec.field(name="it")
    bit_set: str = msgspec.field(name="b")  # offsets as start_offset + bit index (java_bitset_encode)


class BatchAckMessageRequestBody(msgspec.Struct, rename="camel"):
    broker_name: str | None = None
    acks: list[BatchAck] = []


def decode_batch_ack_body(data: bytes | memoryview) -> BatchAckMessageRequestBody:
    try:
        return _batch_ack_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ProtocolError(f"bad BatchAckMessageRequestBody: {exc}") from None


_batch_ack_decoder = msgspec.json.Decoder(BatchAckMessageRequestBody, strict=False)


def encode_batch_ack_body(body: BatchAckMessageRequestBody) -> bytes:
    return msgspec.json.encode(body)


# --- stamping a stored record for a pop answer ----------------------------------------------------

_SIZE = struct.Struct(">i")
_SIZE_MAGIC = struct.Struct(">ii")
_SIZE_MAGIC_FLAG = struct.Struct(">ii28xi")  # total size, magic, sys flag (at 36)
# where reconsume times lie, by the born/store host IPv6 flags (0x10, 0x20) of the sys flag
_RECONSUME_AT = {
    f: POS_BORNHOST + (20 if f & BORNHOST_V6_FLAG else 8) + 8 + (20 if f & STOREHOST_V6_FLAG else 8)
    for f in (0, 0x10, 0x20, 0x30)
}
_LONG = struct.Struct(">q")
_SHORT = struct.Struct(">h")
_USHORT = struct.Struct(">H")


class RecordLayout(NamedTuple):
    """Where the parts of a stored record that a pop changes lie (relative to its start)."""

    v1: bool  # MAGIC_V1: a one-byte topic length
    reconsume_at: int
    topic_at: int  # the topic length field
    props_len_at: int


def record_layout(record: bytes | memoryview) -> RecordLayout:
    """Locate the reconsume-times field, the topic and the properties of one stored record."""
    end = len(record)
    if end < 60:
        raise ProtocolError("a stored record is at least 60 bytes")
    size, magic = _SIZE_MAGIC.unpack_from(record, 0)
    if size != end:
        raise ProtocolError(f"record size {size} does not match its {end} bytes")
    sys_flag = _SIZE.unpack_from(record, POS_SYSFLAG)[0]
    born_end = POS_BORNHOST + (20 if sys_flag & BORNHOST_V6_FLAG else 8)
    reconsume_at = born_end + 8 + (20 if sys_flag & STOREHOST_V6_FLAG else 8)
    body_len_at = reconsume_at + 4 + 8
    if body_len_at + 4 > end:
        raise ProtocolError("record too short for its header")
    body_len = _SIZE.unpack_from(record, body_len_at)[0]
    topic_at = body_len_at + 4 + body_len
    if body_len < 0 or topic_at + 3 > end:
        raise ProtocolError("record body runs past its end")
    v1 = magic == MAGIC_V1
    if v1:
        props_len_at = topic_at + 1 + record[topic_at]
    else:
        props_len_at = topic_at + 2 + _USHORT.unpack_from(record, topic_at)[0]
    if props_len_at + 2 > end or props_len_at + 2 + _SHORT.unpack_from(record, props_len_at)[0] != end:
        raise ProtocolError("record properties do not end the record")
    return RecordLayout(v1, reconsume_at, topic_at, props_len_at)


def queue_offset_of(record: bytes | memoryview) -> int:
    return _LONG.unpack_from(record, POS_QUEUEOFFSET)[0]


def stamp_record(
    record: bytes | memoryview,
    handle: str,
    *,
    topic: bytes | None = None,
    reconsume_times: int | None = None,
) -> bytes:
    """The stored `record` as a pop hands it out: POP_CK = `handle` appended to its properties, and
    optionally its topic replaced (a retry message shows its original topic, as RocketMQ's broker
    does) and its reconsume times set. The body CRC covers the body only, so it stays valid.
    Runs once per popped message: positions are found with as few steps as the layout allows."""
    end = len(record)
    if end < 64:
        raise ProtocolError("a stored record is at least 64 bytes")
    size, magic, sys_flag = _SIZE_MAGIC_FLAG.unpack_from(record, 0)
    reconsume_at = _RECONSUME_AT[sys_flag & 0x30]
    if reconsume_at + 19 > end:
        raise ProtocolError("record too short for its header")
    body_len = _SIZE.unpack_from(record, reconsume_at + 12)[0]
    topic_at = reconsume_at + 16 + body_len
    if size != end or body_len < 0 or topic_at + 3 > end:
        raise ProtocolError("not a whole stored record")
    v1 = magic == MAGIC_V1
    props_len_at = (
        topic_at + 1 + record[topic_at] if v1 else topic_at + 2 + _USHORT.unpack_from(record, topic_at)[0]
    )
    if props_len_at + 2 > end:
        raise ProtocolError("record properties do not end the record")
    props = record[props_len_at + 2 :]
    added = f"{POP_CK}\x01{handle}\x02".encode()
    if props and props[-1] != 2:
        added = b"\x02" + added
    new_props_len = len(props) + len(added)
    if new_props_len > 32767:
        raise ProtocolError("properties too long to add a receipt handle")
    if topic is None:
        block = record[topic_at:props_len_at]
    elif v1 and len(topic) < 128:
        block = bytes((len(topic),)) + topic
    elif not v1 and len(topic) < 65536:
        block = _USHORT.pack(len(topic)) + topic
    else:
        raise ProtocolError("topic name does not fit the record's format")
    new_size = topic_at + len(block) + 2 + new_props_len
    head: tuple[bytes | memoryview, ...]
    if reconsume_times is None:
        head = (_SIZE.pack(new_size), record[4:topic_at])
    else:
        head = (
            _SIZE.pack(new_size),
            record[4:reconsume_at],
            _SIZE.pack(reconsume_times),
            record[reconsume_at + 4 : topic_at],
        )
    return b"".join((*head, block, _SHORT.pack(new_props_len), props, added))


def py_stamp_batch(
    buffers: list, prefix: bytes, topic: bytes | None = None, reconsume_times: int | None = None
) -> tuple[bytes, list[int], str]:
    """Every record of `buffers` (runs of whole stored records) stamped as `stamp_record` does,
    with POP_CK = `prefix` + its queue offset: the stamped records joined, their queue offsets
    relative to the first one's (a checkpoint's form), and the offsets comma-joined (msgOffsetInfo's).
    The reference for the C version (ferrymq/_native/pop.c) that `stamp_batch` is when built."""
    handle_prefix = prefix.decode()
    parts = []
    offsets = []
    for run in buffers:
        pos, end = 0, len(run)
        while pos < end:
            if end - pos < 64:
                raise ProtocolError("a stored record is at least 64 bytes")
            size = _SIZE.unpack_from(run, pos)[0]
            if size < 64 or size > end - pos:
                raise ProtocolError(f"record size {size} does not fit its buffer")
            record = run[pos : pos + size]
            offset = _LONG.unpack_from(record, POS_QUEUEOFFSET)[0]
            parts.append(
                stamp_record(
                    record, handle_prefix + str(offset), topic=topic, reconsume_times=reconsume_times
                )
            )
            offsets.append(offset)
            pos += size
    first = offsets[0] if offsets else 0
    return b"".join(parts), [o - first for o in offsets], ",".join(map(str, offsets))


_pop_c = load("pop")
if _pop_c is not None:  # the wrapper below is installed only then
    _c_stamp = _pop_c.stamp_batch


def _c_stamp_batch(
    buffers: list, prefix: bytes, topic: bytes | None = None, reconsume_times: int | None = None
) -> tuple[bytes, list[int], str]:
    try:
        return _c_stamp(buffers, prefix, topic, reconsume_times is not None, reconsume_times or 0)
    except ValueError as e:
        raise ProtocolError(str(e)) from None


stamp_batch = py_stamp_batch if _pop_c is None else _c_stamp_batch
