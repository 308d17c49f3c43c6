"""The row layout of a ferrymq read, for Spark (StructType) and for Arrow (what `read()` yields).

Rows go to Spark as Arrow record batches built column by column from the stored record bytes.
"""

from __future__ import annotations

import zlib

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

from ferrymq.protocol.errors import MessageDecodeError
from ferrymq.protocol.message import (
    COMPRESSED_FLAG,
    Prop,
    RecordMeta,
    decode_properties,
    fixed_struct,
    offset_msg_id,
    read_record_meta,
)

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
ARROW_SCHEMA = pa.schema(
    [
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
)


def records_to_batch(buffers: list[bytes], broker_name: str) -> pa.RecordBatch:
    """One Arrow batch of the stored records in `buffers` (PULL_MESSAGE bodies of one queue).

    Records are parsed straight into columns, without a message object per record: the read's
    hot path. Raises MessageDecodeError for bytes that are not whole records.
    """
    topics, queue_ids, queue_offsets, commitlog_offsets, msg_ids = [], [], [], [], []
    tags, bodies, born, stored, reconsumes = [], [], [], [], []
    keys, key_offsets, prop_names, prop_values, prop_offsets = [], [0], [], [], [0]
    for buf in buffers:
        pos, end = 0, len(buf)
        while pos < end:
            meta = read_record_meta(buf, pos, end)
            if not isinstance(meta, RecordMeta):
                raise MessageDecodeError(f"no valid message record at position {pos} of a pull answer")
            f = fixed_struct(meta.sys_flag).unpack_from(buf, pos)
            body = buf[meta.body_start : meta.body_start + meta.body_len]
            if meta.sys_flag & COMPRESSED_FLAG:
                body = zlib.decompress(body)
            props = decode_properties(buf[meta.props_start : meta.props_end])
            topics.append(meta.topic)
            queue_ids.append(meta.queue_id)
            queue_offsets.append(meta.queue_offset)
            commitlog_offsets.append(meta.physical_offset)
            msg_ids.append(props.get(Prop.UNIQ_KEY) or offset_msg_id(f[11], meta.physical_offset))
            tags.append(props.get(Prop.TAGS))
            bodies.append(body)
            born.append(f[8])
            stored.append(meta.store_timestamp)
            reconsumes.append(f[12])
            keys += props.get(Prop.KEYS, "").split()
            key_offsets.append(len(keys))
            prop_names += props.keys()
            prop_values += props.values()
            prop_offsets.append(len(prop_names))
            pos += meta.size
    string = pa.string()
    columns = [
        pa.array(topics, string),
        pa.array([broker_name] * len(topics), string),
        pa.array(queue_ids, pa.int32()),
        pa.array(queue_offsets, pa.int64()),
        pa.array(commitlog_offsets, pa.int64()),
        pa.array(msg_ids, string),
        pa.ListArray.from_arrays(pa.array(key_offsets, pa.int32()), pa.array(keys, string),
                                 type=ARROW_SCHEMA.field("keys").type),
        pa.array(tags, string),
        pa.MapArray.from_arrays(pa.array(prop_offsets, pa.int32()), pa.array(prop_names, string),
                                pa.array(prop_values, string), type=ARROW_SCHEMA.field("properties").type),
        pa.array(bodies, pa.binary()),
        _millis(born),
        _millis(stored),
        pa.array(reconsumes, pa.int32()),
    ]  # fmt: skip
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def _millis(values: list[int]) -> pa.Array:
    return pc.multiply(pa.array(values, pa.int64()), 1000).cast(_TIMESTAMP)
