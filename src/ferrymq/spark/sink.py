"""Writing DataFrames to ferrymq topics, in batch and in Structured Streaming.

Columns: `body` (binary or string, required), `topic` (unless the "topic" option names one),
`keys` (string or array of strings), `tags` (string), `properties` (map of strings); others are
ignored, so a DataFrame read from ferrymq can be written back as it is. Every message gets a
UNIQ_KEY (its msg id) derived from where it comes from — query id, batch id, partition and row of
a stream; the write job, partition and row of a batch — unless its properties carry one already.
A batch that Spark replays after a failure, or a task it retries, therefore resends the same msg
ids, and consumers that drop repeated msg ids (as RocketMQ's idempotent consumers do) see each
message once.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from dataclasses import dataclass

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, MapType, StringType, StructType

from ferrymq.client.message import Message
from ferrymq.client.producer import Producer
from ferrymq.protocol.properties import Prop
from ferrymq.spark.errors import SparkSourceError
from ferrymq.spark.options import WriteOptions

SEND_WINDOW = 1024  # sends in flight per task; the producer batches them into SEND_BATCH_MESSAGE

_COLUMN_TYPES = {
    "body": (BinaryType(), StringType()),
    "topic": (StringType(),),
    "keys": (StringType(), ArrayType(StringType()), ArrayType(StringType(), False)),
    "tags": (StringType(),),
    "properties": (MapType(StringType(), StringType()), MapType(StringType(), StringType(), False)),
}


def check_write_schema(schema: StructType, opts: WriteOptions) -> None:
    """Fail on the driver, before any task runs, for a DataFrame that cannot be written."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "body" not in fields:
        raise SparkSourceError(f"writing to ferrymq needs a 'body' column; the columns are {list(fields)}")
    if opts.topic is None and "topic" not in fields:
        raise SparkSourceError('writing to ferrymq needs the "topic" option or a "topic" column')
    for name, allowed in _COLUMN_TYPES.items():
        if name in fields and fields[name] not in allowed:
            names = " or ".join(t.simpleString() for t in dict.fromkeys(allowed))
            raise SparkSourceError(f"column {name!r} must be {names}, not {fields[name].simpleString()}")


@dataclass
class Sent(WriterCommitMessage):
    partition: int
    count: int


def msg_id(prefix: str, row: int) -> str:
    """A 32-hex-digit id (the shape of RocketMQ's UNIQ_KEY) fixed by where the row comes from."""
    return hashlib.blake2b(f"{prefix}/{row}".encode(), digest_size=16).hexdigest().upper()


def to_message(row, topic: str | None, prefix: str, index: int) -> Message:
    d = row.asDict()
    body = d["body"]
    props = dict(d.get("properties") or {})
    props.setdefault(Prop.UNIQ_KEY, msg_id(prefix, index))
    topic = topic or d.get("topic")
    if not topic:
        raise SparkSourceError(f'row {index} has no topic: set the "topic" option or fill the topic column')
    return Message(
        topic=topic,
        body=body.encode() if isinstance(body, str) else bytes(body) if body is not None else b"",
        tags=d.get("tags") or props.pop(Prop.TAGS, None),
        keys=d.get("keys") or props.pop(Prop.KEYS, None),
        properties=props,
    )


async def send_all(opts: WriteOptions, rows, prefix: str) -> int:
    """Send every row, SEND_WINDOW at a time; the first failed send fails the task."""
    count = 0
    async with Producer(opts.group, opts.namesrv, auto_batch=True) as producer:
        pending = []
        for index, row in enumerate(rows):
            pending.append(producer.send(to_message(row, opts.topic, prefix, index)))
            if len(pending) >= SEND_WINDOW:
                await asyncio.gather(*pending)
                count, pending = count + len(pending), []
        await asyncio.gather(*pending)
    return count + len(pending)


def _task_context() -> TaskContext:
    """The context of the Spark task running a writer (there is none on the driver)."""
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("ferrymq writers run inside Spark tasks only")
    return context


def write_partition(opts: WriteOptions, rows, prefix: str) -> Sent:
    partition = _task_context().partitionId()
    count = asyncio.run(send_all(opts, rows, f"{prefix}/{partition}"))
    return Sent(partition, count)


class BatchWriter(DataSourceWriter):
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.job = uuid.uuid4().hex  # fixed on the driver: a retried task reuses its msg ids

    def write(self, iterator) -> Sent:
        return write_partition(self.opts, iterator, self.job)


class StreamWriter(DataSourceStreamWriter):
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator) -> Sent:
        # Spark sets both for every task of a micro-batch; the query id survives restarts.
        context = _task_context()
        query = context.getLocalProperty("sql.streaming.queryId")
        batch = context.getLocalProperty("streaming.sql.batchId")
        return write_partition(self.opts, iterator, f"{query}/{batch}")

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """The messages are on the broker already; nothing is left to make visible."""
