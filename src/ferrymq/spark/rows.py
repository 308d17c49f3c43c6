"""The row layout of a ferrymq read, for Spark (StructType) and for Arrow (what `read()` yields).

Rows go to Spark as Arrow record batches built column by column: per message only attribute
reads, no per-row tuple or dict is made for Spark to convert again.
"""

from __future__ import annotations

import pyarrow as pa
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

from ferrymq.protocol.message import MessageExt, Prop

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


def to_record_batch(messages: list[MessageExt], broker_name: str) -> pa.RecordBatch:
    """One Arrow batch of `messages` (all from one queue of `broker_name`)."""
    n = len(messages)
    props = [m.properties for m in messages]
    columns = [
        pa.array([m.topic for m in messages], pa.string()),
        pa.array([broker_name] * n, pa.string()),
        pa.array([m.queue_id for m in messages], pa.int32()),
        pa.array([m.queue_offset for m in messages], pa.int64()),
        pa.array([m.commitlog_offset for m in messages], pa.int64()),
        pa.array([m.msg_id for m in messages], pa.string()),
        pa.array([p.get(Prop.KEYS, "").split() for p in props], ARROW_SCHEMA.field("keys").type),
        pa.array([p.get(Prop.TAGS) for p in props], pa.string()),
        pa.array(props, ARROW_SCHEMA.field("properties").type),
        pa.array([m.body for m in messages], pa.binary()),
        pa.array([m.born_timestamp * 1000 for m in messages], _TIMESTAMP),
        pa.array([m.store_timestamp * 1000 for m in messages], _TIMESTAMP),
        pa.array([m.reconsume_times for m in messages], pa.int32()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
