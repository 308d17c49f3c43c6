"""Bodies of the admin listings mqadmin, rocketmq-dashboard and rocketmq-exporter read: topic and
consume stats, group lists, ConsumeQueue look-ups, and broker/NameServer settings as text.

TopicStatsTable and ConsumeStats are maps keyed by MessageQueue objects, which fastjson writes with
object keys — ``{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"maxOffset":3,...}}}`` —
not standard JSON. Java tools read exactly that form, so it is written (and read back) here.
"""

from __future__ import annotations

import re
from typing import TypeVar

import msgspec

from ferrymq.protocol.bodies import (
    _ENCODER,
    Body,
    MessageQueue,
    SubscriptionData,
    SubscriptionGroupConfig,
    TopicConfig,
    decode_body,
)
from ferrymq.protocol.remoting import RemotingProtocolError


class TopicOffset(Body):
    """One queue of GET_TOPIC_STATS_INFO."""

    min_offset: int = 0
    max_offset: int = 0
    last_update_timestamp: int = 0


class OffsetWrapper(Body):
    """One queue of GET_CONSUME_STATS."""

    broker_offset: int = 0
    consumer_offset: int = 0
    pull_offset: int = 0
    last_timestamp: int = 0


class GroupList(Body):
    """Answer of QUERY_TOPIC_CONSUME_BY_WHO."""

    group_list: list[str] = msgspec.field(default_factory=list)


class ConsumeQueueData(Body):
    """One ConsumeQueue entry of QUERY_CONSUME_QUEUE."""

    physic_offset: int = 0
    physic_size: int = 0
    tags_code: int = 0
    extend_data_json: str | None = None
    bit_map: str | None = None
    eval: bool = False
    msg: str | None = None


class QueryConsumeQueueResponseBody(Body):
    subscription_data: SubscriptionData | None = None
    filter_data: str | None = None
    queue_data: list[ConsumeQueueData] = msgspec.field(default_factory=list)
    max_queue_index: int = 0
    min_queue_index: int = 0


class BrokerStatsItem(Body):
    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0


class BrokerStatsData(Body):
    """Answer of VIEW_BROKER_STATS_DATA: one stats item over the last minute, hour and day."""

    stats_minute: BrokerStatsItem = msgspec.field(default_factory=BrokerStatsItem)
    stats_hour: BrokerStatsItem = msgspec.field(default_factory=BrokerStatsItem)
    stats_day: BrokerStatsItem = msgspec.field(default_factory=BrokerStatsItem)


class ProducerInfo(Body):
    client_id: str
    remote_ip: str = msgspec.field(name="remoteIP")
    language: str = "JAVA"
    version: int = 0
    last_update_timestamp: int = 0


class ProducerTableInfo(Body):
    """Answer of GET_ALL_PRODUCER_INFO: producer group → its connected producers."""

    data: dict[str, list[ProducerInfo]] = msgspec.field(default_factory=dict)


class CreateTopicListRequestBody(Body):
    """Body of UPDATE_AND_CREATE_TOPIC_LIST: many topics in one request."""

    topic_config_list: list[TopicConfig] = msgspec.field(default_factory=list)


class SubscriptionGroupList(Body):
    """Body of UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST: many groups in one request."""

    group_config_list: list[SubscriptionGroupConfig] = msgspec.field(default_factory=list)


V = TypeVar("V", bound=Body)

_MQ_ENTRY = re.compile(rb"(\{[^{}]*\})\s*:\s*(\{[^{}]*\})")
_CONSUME_TPS = re.compile(rb'"consumeTps"\s*:\s*(-?[0-9.]+(?:[eE][-+]?\d+)?)')


def encode_mq_table(table: dict[MessageQueue, V], **fields: float) -> bytes:
    """``{<fields>,"offsetTable":{{mq}:{value},...}}`` in fastjson's object-key form."""
    head = b"".join(
        b'"' + name.encode() + b'":' + _ENCODER.encode(value) + b"," for name, value in fields.items()
    )
    entries = b",".join(_ENCODER.encode(mq) + b":" + _ENCODER.encode(value) for mq, value in table.items())
    return b"{" + head + b'"offsetTable":{' + entries + b"}}"


def decode_mq_table(data: bytes | bytearray | memoryview, cls: type[V]) -> dict[MessageQueue, V]:
    """The offsetTable of a TopicStatsTable or ConsumeStats, from fastjson's form (or ours)."""
    data = bytes(data)
    if b'"offsetTable"' not in data:
        raise RemotingProtocolError(f"bad {cls.__name__} table: no offsetTable")
    return {decode_body(MessageQueue, key): decode_body(cls, value) for key, value in _MQ_ENTRY.findall(data)}


def decode_consume_tps(data: bytes | bytearray | memoryview) -> float:
    match = _CONSUME_TPS.search(bytes(data))
    return float(match.group(1)) if match else 0.0


def encode_properties(settings: dict[str, str]) -> bytes:
    """Settings as Java's Properties text (``key=value`` lines), as GET_BROKER_CONFIG answers."""
    return "".join(f"{key}={value}\n" for key, value in settings.items()).encode()


def decode_properties(data: bytes | bytearray | memoryview) -> dict[str, str]:
    """``key=value`` (or ``key:value``) lines; blank lines and ``#``/``!`` comments skipped.

    Raises RemotingProtocolError on a line that has no separator, naming it."""
    settings = {}
    for number, raw in enumerate(bytes(data).decode("utf-8", errors="replace").splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if cut < 0:
            raise RemotingProtocolError(f"line {number} of the settings is not key=value: {line!r}")
        settings[line[:cut].strip()] = line[cut + 1 :].strip()
    return settings
