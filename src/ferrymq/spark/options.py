"""The data source's options, parsed once on the driver into plain picklable values.

Names follow Spark's Kafka source where the idea is the same (startingOffsets, endingOffsets,
startingTimestamp, maxMessagesPerTrigger, failOnDataLoss); offsets JSON names a queue
"brokerName:queueId" (or just "queueId" when one broker holds that id), because a RocketMQ topic's
queues are numbered per broker: `{"TopicA": {"broker-a:0": 42, "broker-a:1": -2}}`, -2 meaning
earliest and -1 latest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, TypeVar

from ferrymq.spark.errors import SparkSourceError

EARLIEST, LATEST = -2, -1
DEFAULT_GROUP = "ferrymq-spark"

# An offsets option: "earliest", "latest", ("timestamp", ms) or {topic: {queue key: offset}}.
NamedOffset = Literal["earliest", "latest"]
OffsetSpec = NamedOffset | tuple[str, int] | dict[str, dict[str, int]]
_NAMED_OFFSETS: dict[str, NamedOffset] = {"earliest": "earliest", "latest": "latest"}


@dataclass(frozen=True)
class ReadOptions:
    namesrv: str
    topics: tuple[str, ...]
    queues: frozenset[str] | None  # queue keys ("broker:id" or "id") to read; None: all
    starting: OffsetSpec
    ending: OffsetSpec
    group: str
    max_messages_per_trigger: int | None
    max_messages_per_partition: int
    fail_on_data_loss: bool


@dataclass(frozen=True)
class WriteOptions:
    namesrv: str
    topic: str | None  # None: every row names its topic in a "topic" column
    group: str


def _get(options: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    value = options.get(name, default)
    return value.strip() if isinstance(value, str) else value


def namesrv_of(options: Mapping[str, str]) -> str:
    value = _get(options, "namesrv") or _get(options, "namesrvAddr")
    if not value:
        raise SparkSourceError('option "namesrv" is required: NameServer addresses, "host:port[;host:port]"')
    return value


_Default = TypeVar("_Default", int, None)


def _positive_int(options: Mapping[str, str], name: str, default: _Default) -> int | _Default:
    value = _get(options, name)
    if value is None:
        return default
    if not value.isdigit() or int(value) <= 0:
        raise SparkSourceError(f'option "{name}" must be a positive integer, got {value!r}')
    return int(value)


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = _get(options, name)
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise SparkSourceError(f'option "{name}" must be true or false, got {value!r}')
    return value.lower() == "true"


def parse_timestamp(value: str, name: str) -> int:
    """Milliseconds since the epoch, given as such or as an ISO-8601 date-time (UTC if no zone)."""
    if value.lstrip("-").isdigit():
        return int(value)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise SparkSourceError(
            f'option "{name}" must be milliseconds since the epoch or an ISO-8601 date-time, got {value!r}'
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.now().astimezone().tzinfo).astimezone()
    return int(parsed.timestamp() * 1000)


def parse_offsets(value: str, name: str, topics: tuple[str, ...]) -> OffsetSpec:
    """ "earliest", "latest" or per-queue JSON, checked for shape (queues are checked later)."""
    named = _NAMED_OFFSETS.get(value.lower())
    if named is not None:
        return named
    try:
        spec = json.loads(value)
    except ValueError as e:
        raise SparkSourceError(
            f'option "{name}" must be "earliest", "latest" or JSON like '
            f'{{"TopicA": {{"broker-a:0": 42}}}}; it is not valid JSON ({e}): {value!r}'
        ) from None
    if not isinstance(spec, dict) or not all(isinstance(q, dict) for q in spec.values()):
        raise SparkSourceError(f'option "{name}" must map each topic to {{queue: offset}}, got {value!r}')
    for topic, queues in spec.items():
        if topic not in topics:
            read = ", ".join(topics)
            raise SparkSourceError(f'option "{name}" names topic {topic!r}, which is not read ({read})')
        for queue, offset in queues.items():
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < EARLIEST:
                raise SparkSourceError(
                    f'option "{name}": offset of {topic} {queue} must be an integer >= 0, '
                    f"or -2 (earliest) or -1 (latest), got {offset!r}"
                )
    return spec


def _offsets_option(options, name: str, ts_name: str, default: str, topics) -> OffsetSpec:
    value, ts = _get(options, name), _get(options, ts_name)
    if value is not None and ts is not None:
        raise SparkSourceError(f'give either "{name}" or "{ts_name}", not both')
    if ts is not None:
        return ("timestamp", parse_timestamp(ts, ts_name))
    return parse_offsets(value if value is not None else default, name, topics)


def read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    namesrv = namesrv_of(options)
    raw_topics = _get(options, "topics") or _get(options, "topic")
    if not raw_topics:
        raise SparkSourceError('option "topic" (or "topics", comma-separated) is required')
    topics = tuple(dict.fromkeys(t.strip() for t in raw_topics.split(",") if t.strip()))
    raw_queues = _get(options, "queues")
    queues = frozenset(q.strip() for q in raw_queues.split(",") if q.strip()) if raw_queues else None
    starting = _offsets_option(
        options, "startingOffsets", "startingTimestamp", "latest" if streaming else "earliest", topics
    )
    if streaming:
        for name in ("endingOffsets", "endingTimestamp"):
            if _get(options, name) is not None:
                raise SparkSourceError(f'option "{name}" is for batch reads only; a stream has no end')
        ending: OffsetSpec = "latest"
    else:
        ending = _offsets_option(options, "endingOffsets", "endingTimestamp", "latest", topics)
        if ending == "earliest":
            raise SparkSourceError('option "endingOffsets" cannot be "earliest": that reads nothing')
    return ReadOptions(
        namesrv=namesrv,
        topics=topics,
        queues=queues,
        starting=starting,
        ending=ending,
        group=_get(options, "consumerGroup") or DEFAULT_GROUP,
        max_messages_per_trigger=_positive_int(options, "maxMessagesPerTrigger", None),
        max_messages_per_partition=_positive_int(options, "maxMessagesPerPartition", 250_000),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
    )


def write_options(options: Mapping[str, str]) -> WriteOptions:
    return WriteOptions(
        namesrv=namesrv_of(options),
        topic=_get(options, "topic") or None,
        group=_get(options, "producerGroup") or DEFAULT_GROUP,
    )
