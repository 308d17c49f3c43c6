"""The row layout of a ferrymq read, for Spark (StructType) and for Arrow (what `read()` yields).

Rows go to Spark as Arrow record batches built column by column from the stored record bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ferrymq._native import load
from ferrymq.protocol.compression import decompress
from ferrymq.protocol.errors import MessageDecodeError, ProtocolError
from ferrymq.protocol.message_id import offset_msg_id
from ferrymq.protocol.properties import Prop, decode_properties
from ferrymq.protocol.record import MAGIC_V1, MAGIC_V2, POS_SYSFLAG, fixed_struct
from ferrymq.protocol.sys_flag import COMPRESSED_FLAG

SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("broker_name", StringType()),
        StructField("queue_id", IntegerType()),
        StructField("queue_offset", LongType()),
        StructField("commitlog_offset", LongType()),
        StructField("msg_id", StringType()),
        StructField("keys", ArrayType(StringType())),
        StructField("tags", StringType()),
        StructField("properties", MapType(StringType(), StringType())),
        StructField("body", BinaryType()),
        StructField("born_timestamp", TimestampType()),
        StructField("store_timestamp", TimestampType()),
        StructField("reconsume_times", IntegerType()),
    ]
)

# Spark checks the yielded batches against exactly these Arrow types (microsecond UTC timestamps,
# list items named "element").
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_ARROW_FIELDS: list[tuple[str, pa.DataType]] = [
    ("topic", pa.string()),
    ("broker_name", pa.string()),
    ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()),
    ("commitlog_offset", pa.int64()),
    ("msg_id", pa.string()),
    ("keys", pa.list_(pa.field("element", pa.string()))),
    ("tags", pa.string()),
    ("properties", pa.map_(pa.string(), pa.string())),
    ("body", pa.binary()),
    ("born_timestamp", _TIMESTAMP),
    ("store_timestamp", _TIMESTAMP),
    ("reconsume_times", pa.int32()),
]
ARROW_SCHEMA = pa.schema(_ARROW_FIELDS)


def records_to_batch(buffers: Sequence[bytes | memoryview], broker_name: str) -> pa.RecordBatch:
    """One Arrow batch of the stored records in `buffers` (PULL_MESSAGE bodies of one queue).

    The read's hot path: the C scan (ferrymq._native.rows) fills the column buffers when it can, and
    the Python loop below, the reference, parses everything else. Raises MessageDecodeError for
    bytes that are not whole records.
    """
    scanned = _c.scan(buffers) if _c is not None else None
    if scanned is not None:
        return _scanned_batch(scanned, broker_name)
    return _python_batch(buffers, broker_name)


def _scanned_batch(scanned: tuple, broker_name: str) -> pa.RecordBatch:
    """The batch over the buffers the C scan made (their order is in rows.c), with no row copies."""
    n, *raw = scanned
    b = [pa.py_buffer(x) for x in raw]
    string, props = pa.string(), ARROW_SCHEMA.field("properties").type

    def fixed(kind: pa.DataType, at: int) -> pa.Array:
        return pa.Array.from_buffers(kind, n, [None, b[at]])

    def var(kind: pa.DataType, at: int, valid: pa.Buffer | None = None) -> pa.Array:
        return pa.Array.from_buffers(kind, len(b[at]) // 4 - 1, [valid, b[at], b[at + 1]])

    keys = pa.Array.from_buffers(
        ARROW_SCHEMA.field("keys").type, n, [None, b[15]], children=[var(string, 16)]
    )
    entries = pa.StructArray.from_arrays(
        [var(string, 19), var(string, 21)], fields=[props.key_field, props.item_field]
    )
    columns = [
        var(string, 6),
        pa.array([broker_name] * n, string),
        fixed(pa.int32(), 0),
        fixed(pa.int64(), 1),
        fixed(pa.int64(), 2),
        var(string, 8),
        keys,
        var(string, 10, valid=b[12]),
        pa.Array.from_buffers(props, n, [None, b[18]], children=[entries]),
        var(pa.binary(), 13),
        fixed(_TIMESTAMP, 3),
        fixed(_TIMESTAMP, 4),
        fixed(pa.int32(), 5),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def _python_batch(buffers: Sequence[bytes | memoryview], broker_name: str) -> pa.RecordBatch:
    fixed, topics, msg_ids, tags, bodies = [], [], [], [], []
    keys: list[str] = []
    prop_names: list[str] = []
    prop_values: list[str] = []
    key_offsets, prop_offsets = [0], [0]
    for answer in buffers:
        buf = bytes(answer)  # one copy of the answer, so that every slice below is bytes
        pos, end = 0, len(buf)
        while pos < end:
            f, topic, body_start, body_end, props_start, size = _parse(buf, pos, end)
            body = buf[body_start:body_end]
            props = decode_properties(buf[props_start : pos + size])
            msg_id = props.get(Prop.UNIQ_KEY) or offset_msg_id(f[11], f[6])
            if f[7] & COMPRESSED_FLAG:
                body = _decompressed(body, f, topic, msg_id)
            fixed.append(f)
            topics.append(topic)
            msg_ids.append(msg_id)
            tags.append(props.get(Prop.TAGS))
            bodies.append(body)
            keys += props.get(Prop.KEYS, "").split()
            key_offsets.append(len(keys))
            prop_names += props.keys()
            prop_values += props.values()
            prop_offsets.append(len(prop_names))
            pos += size
    # TOTALSIZE, MAGIC, CRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG, BORNTIMESTAMP,
    # BORNHOST, STORETIMESTAMP, STOREHOST, RECONSUMETIMES, PreparedTransactionOffset, BODYLEN
    cols = list(zip(*fixed, strict=True)) if fixed else [()] * 15
    string = pa.string()
    columns = [
        pa.array(topics, string),
        pa.array([broker_name] * len(topics), string),
        pa.array(cols[3], pa.int32()),
        pa.array(cols[5], pa.int64()),
        pa.array(cols[6], pa.int64()),
        pa.array(msg_ids, string),
        pa.ListArray.from_arrays(pa.array(key_offsets, pa.int32()), pa.array(keys, string),
                                 type=ARROW_SCHEMA.field("keys").type),
        pa.array(tags, string),
        # pyarrow-stubs know neither maps' int32 offsets nor keys and items given with their type
        pa.MapArray.from_arrays(pa.array(prop_offsets, pa.int32()), pa.array(prop_names, string),  # type: ignore[call-overload]
                                pa.array(prop_values, string), type=ARROW_SCHEMA.field("properties").type),
        pa.array(bodies, pa.binary()),
        _millis(cols[8]),
        _millis(cols[10]),
        pa.array(cols[12], pa.int32()),
    ]  # fmt: skip
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


_c = load("rows")
_SYSFLAG = struct.Struct(">i")
_USHORT = struct.Struct(">H")
_TOPICS: dict[bytes, str] = {}


def _parse(buf: bytes, pos: int, end: int) -> tuple[tuple, str, int, int, int, int]:
    """(fixed fields, topic, body start, body end, properties start, record size) of a record."""
    try:
        sys_flag = _SYSFLAG.unpack_from(buf, pos + POS_SYSFLAG)[0]
        fixed = fixed_struct(sys_flag)
        f = fixed.unpack_from(buf, pos)
        size, magic = f[0], f[1]
        body_start = pos + fixed.size
        p = body_end = body_start + f[14]
        if magic == MAGIC_V1:
            topic_len, p = buf[p], p + 1
        else:
            topic_len, p = _USHORT.unpack_from(buf, p)[0], p + 2
        raw_topic = buf[p : p + topic_len]
        props_start = p + topic_len + 2
    except (struct.error, IndexError, KeyError):
        raise MessageDecodeError(f"no valid message record at position {pos} of a pull answer") from None
    if magic not in (MAGIC_V1, MAGIC_V2) or f[14] < 0 or pos + size > end or props_start > pos + size:
        raise MessageDecodeError(f"no valid message record at position {pos} of a pull answer")
    topic = _TOPICS.get(raw_topic)
    if topic is None:
        topic = _TOPICS[raw_topic] = raw_topic.decode(errors="replace")
    return f, topic, body_start, body_end, props_start, size


def _decompressed(body: bytes, f: tuple, topic: str, msg_id: str) -> bytes:
    """The content of a compressed body; a body that does not decompress fails the read, naming it."""
    try:
        return decompress(body, f[7])
    except ProtocolError as e:
        raise MessageDecodeError(
            f"message {msg_id} ({topic} queue {f[3]} offset {f[5]}) has a body that does not decompress: {e}"
        ) from None


def _millis(values: Sequence[int]) -> pa.Array:
    return pc.multiply(pa.array(values, pa.int64()), 1000).cast(_TIMESTAMP)
