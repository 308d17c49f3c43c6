"""The "ferrymq" Python data source: batch and streaming reads of topics, and writes to them.

Partitions are message queues (large ranges split), offsets are per-queue ConsumeQueue offsets, and
a stream keeps them in Spark's checkpoint as `{topic: {"brokerName:queueId": offset}}`. The
driver-side methods plan; `read()` runs on executors on a pickled copy, so it opens its own
connection and keeps nothing between calls.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ferrymq.client.message import MessageQueue
from ferrymq.spark.cluster import (
    PULL_SIZE,
    Blocking,
    QueueRange,
    json_offset,
    parse_queue,
    prefetched,
    queue_bounds,
    queue_key,
    read_range,
    resolve_offsets,
    topic_queues,
)
from ferrymq.spark.errors import DataLossError
from ferrymq.spark.options import ReadOptions, read_options, write_options
from ferrymq.spark.rows import SCHEMA, records_to_batch

Offsets = dict[str, dict[str, int]]  # what the checkpoint holds


@dataclass
class QueuePartition(InputPartition):
    """One Spark partition: a range of one queue (plain values, pickled to executors)."""

    namesrv: str
    group: str
    range: QueueRange


class FerryMQDataSource(DataSource):
    """`spark.read.format("ferrymq")`, `readStream`, `write` and `writeStream` (see the README)."""

    @classmethod
    def name(cls) -> str:
        return "ferrymq"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from ferrymq.spark.sink import BatchWriter, check_write_schema

        check_write_schema(schema, write_options(self.options))
        return BatchWriter(write_options(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from ferrymq.spark.sink import StreamWriter, check_write_schema

        check_write_schema(schema, write_options(self.options))
        return StreamWriter(write_options(self.options))


def read_partition(partition: InputPartition, ahead: bool):
    """Executor side: the partition's messages as Arrow record batches of about 4,096 rows, pulled on
    a thread of their own when `ahead` (batch reads) or else inline (micro-batches: see prefetched)."""
    if not isinstance(partition, QueuePartition):  # Spark's stand-in when planning found nothing
        return
    r = partition.range
    pending: list[bytes | memoryview] = []
    for buffers in pulls(partition, ahead):
        pending += buffers
        if len(pending) * PULL_SIZE >= 4096:
            yield records_to_batch(pending, r.mq.broker_name)
            pending = []
    if pending:
        yield records_to_batch(pending, r.mq.broker_name)


def pulls(partition: QueuePartition, ahead: bool):
    def answers(instance):
        return read_range(instance, partition.group, partition.range)

    if ahead:
        yield from prefetched(partition.namesrv, answers)
        return
    with Blocking(partition.namesrv) as cluster:
        yield from cluster.iterate(answers(cluster.instance))


def split(opts: ReadOptions, mq: MessageQueue, start: int, end: int) -> list[QueuePartition]:
    step, lossy = opts.max_messages_per_partition, opts.fail_on_data_loss
    return [
        QueuePartition(opts.namesrv, opts.group, QueueRange(mq, s, min(s + step, end), lossy))
        for s in range(start, end, step)
    ]


class BatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[QueuePartition]:
        opts = self.opts
        with Blocking(opts.namesrv) as cluster:
            queues = cluster.run(topic_queues, opts.topics, opts.queues)
            starts = cluster.run(resolve_offsets, queues, opts.starting, "startingOffsets")
            ends = cluster.run(resolve_offsets, queues, opts.ending, "endingOffsets")
            _check_kept(cluster, opts, queues)
        return [p for mq in queues for p in split(opts, mq, starts[mq], ends[mq])]

    def read(self, partition: InputPartition):
        return read_partition(partition, ahead=True)


def _check_kept(cluster: Blocking, opts: ReadOptions, queues: list[MessageQueue]) -> None:
    """An explicit start offset that retention already deleted is data loss, not a silent skip."""
    if not opts.fail_on_data_loss or not isinstance(opts.starting, dict):
        return
    for mq in queues:
        offset = json_offset(opts.starting, mq, None)
        if offset is None or offset < 0:
            continue
        low, _ = cluster.run(queue_bounds, mq)
        if offset < low:
            raise DataLossError(
                f"{mq.topic} {queue_key(mq)}: offsets {offset}..{low - 1} are gone (retention deleted them). "
                "Set failOnDataLoss=false to start at the earliest kept message."
            )


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Per-queue offsets; new queues of the topics are picked up from their first offset."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._cluster: Blocking | None = None
        self._target: Offsets | None = None  # availableNow: never read past this

    def __getstate__(self) -> dict:
        return {"opts": self.opts, "_cluster": None, "_target": None}

    @property
    def cluster(self) -> Blocking:
        if self._cluster is None:
            self._cluster = Blocking(self.opts.namesrv)
        return self._cluster

    def _latest(self) -> tuple[list[MessageQueue], Offsets]:
        queues = self.cluster.run(topic_queues, self.opts.topics, self.opts.queues)
        return queues, to_offsets(self.cluster.run(resolve_offsets, queues, "latest", "endingOffsets"))

    def initialOffset(self) -> Offsets:
        opts = self.opts
        queues = self.cluster.run(topic_queues, opts.topics, opts.queues)
        _check_kept(self.cluster, opts, queues)
        return to_offsets(self.cluster.run(resolve_offsets, queues, opts.starting, "startingOffsets"))

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()[1]

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_messages_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        latest = self._target if self._target is not None else self._latest()[1]
        ends = {t: {q: max(o, _get(start, t, q, 0)) for q, o in qs.items()} for t, qs in latest.items()}
        for t, qs in start.items():  # a queue that left the route keeps its offset
            for q, o in qs.items():
                ends.setdefault(t, {}).setdefault(q, o)
        if isinstance(limit, ReadMaxRows):
            ends = cap(start, ends, limit.max_rows)
        return ends

    def partitions(self, start: Offsets, end: Offsets) -> list[QueuePartition]:
        out = []
        for topic, queues in end.items():
            for key, stop in queues.items():
                first = _get(start, topic, key, 0)
                if stop > first:
                    out += split(self.opts, parse_queue(topic, key), first, stop)
        return out

    def read(self, partition: InputPartition):
        return read_partition(partition, ahead=False)

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


def _get(offsets: Offsets, topic: str, key: str, default: int) -> int:
    return offsets.get(topic, {}).get(key, default)


def to_offsets(by_queue: dict[MessageQueue, int]) -> Offsets:
    out: Offsets = {}
    for mq, offset in by_queue.items():
        out.setdefault(mq.topic, {})[queue_key(mq)] = offset
    return out


def cap(start: Offsets, ends: Offsets, max_rows: int) -> Offsets:
    """Ends that admit at most `max_rows` messages, shared among queues in proportion to their
    backlog (as Spark's Kafka source does), every queue with a backlog getting at least one."""
    backlog = {(t, q): e - _get(start, t, q, 0) for t, qs in ends.items() for q, e in qs.items()}
    total = sum(backlog.values())
    if total <= max_rows:
        return ends
    capped = {t: dict(qs) for t, qs in ends.items()}
    budget = max_rows
    for (t, q), n in sorted(backlog.items(), key=lambda kv: kv[1]):
        if n <= 0 or budget <= 0:
            if n > 0:
                capped[t][q] = _get(start, t, q, 0)
            continue
        take = min(n, budget, max(1, n * max_rows // total))
        capped[t][q] = _get(start, t, q, 0) + take
        budget -= take
    return capped
