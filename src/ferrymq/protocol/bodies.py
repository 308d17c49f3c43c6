"""JSON bodies of remoting commands, as structs with RocketMQ's camelCase field names.

Decoding is tolerant the way fastjson is: unknown fields are ignored, missing ones take Java's
defaults, numbers sent as strings are coerced (the C++ client sends ``subVersion`` as a string and
enums as ordinals), and the non-standard fastjson form with unquoted integer map keys
(``{0:"host:port"}``, written by Java NameServers for old clients) is accepted. Encoding always
produces standard JSON.
"""

from __future__ import annotations

import functools
import re
from typing import Any, TypeVar

import msgspec

from ferrymq.protocol.remoting import BAD_JSON_ERRORS, RemotingProtocolError


class Body(msgspec.Struct, rename="camel"):
    """Base of every body: camelCase names as fastjson writes them."""


B = TypeVar("B", bound=Body)


def decode_body(cls: type[B], data: bytes | bytearray | memoryview) -> B:
    """Parse a JSON body into ``cls``; raise ``RemotingProtocolError`` on bad JSON or wrong types."""
    decoder = _decoder(cls)
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise RemotingProtocolError(f"bad {cls.__name__} body: {exc}") from None
    except BAD_JSON_ERRORS:
        pass  # not JSON: perhaps fastjson's unquoted keys; checked only on this slow path
    try:
        return decoder.decode(_quote_bare_int_keys(bytes(data)))
    except BAD_JSON_ERRORS as exc:
        raise RemotingProtocolError(f"bad {cls.__name__} body: {exc}") from None


def encode_body(body: Body) -> bytes:
    """Standard JSON (map keys always quoted)."""
    return _ENCODER.encode(body)


@functools.cache
def _decoder(cls: type[Body]) -> msgspec.json.Decoder:
    return msgspec.json.Decoder(cls, strict=False)


_ENCODER = msgspec.json.Encoder()

# A whole string literal (left untouched), or an integer object key that lacks its quotes.
_STRING_OR_BARE_KEY = re.compile(rb'"(?:[^"\\]|\\.)*"|(?<=[{,])(\s*)(-?\d+)(?=\s*:)', re.DOTALL)


def _quote_bare_int_keys(data: bytes) -> bytes:
    """``{0:"a",1:"b"}`` → ``{"0":"a","1":"b"}``, leaving string contents alone."""

    def quote(match: re.Match[bytes]) -> bytes:
        if match.group(2) is None:
            return match.group(0)
        return match.group(1) + b'"' + match.group(2) + b'"'

    return _STRING_OR_BARE_KEY.sub(quote, data)


def _enum_name(value: str | int | None, names: tuple[str, ...]) -> str | None:
    """Java enums arrive as names (fastjson) or as ordinals (the C++ client)."""
    if not isinstance(value, int):
        return value
    if 0 <= value < len(names):
        return names[value]
    raise ValueError(f"unknown enum ordinal {value}, expected one of {names}")


# --- Routes -----------------------------------------------------------------------------------


class QueueData(Body):
    broker_name: str
    read_queue_nums: int = 0
    write_queue_nums: int = 0
    perm: int = 0
    topic_sys_flag: int = 0


class BrokerData(Body):
    broker_name: str
    cluster: str | None = None
    broker_addrs: dict[int, str] = {}  # broker id (0 = master) → "host:port"
    enable_acting_master: bool = False
    zone_name: str | None = None


class TopicRouteData(Body):
    """Answer of GET_ROUTEINFO_BY_TOPIC."""

    queue_datas: list[QueueData] = []
    broker_datas: list[BrokerData] = []
    filter_server_table: dict[str, list[str]] = {}
    order_topic_conf: str | None = None
    topic_queue_mapping_by_broker: dict[str, Any] | None = None  # static topics; passed through


class ClusterInfo(Body):
    """Answer of GET_BROKER_CLUSTER_INFO."""

    broker_addr_table: dict[str, BrokerData] = {}
    cluster_addr_table: dict[str, list[str]] = {}  # cluster → broker names


# --- Client heartbeats and queue locks --------------------------------------------------------

CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY", "CONSUME_POP")  # pull, push, pop
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM_WHERE = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)
"""Java enum names in ordinal order, so that an ordinal sent by the C++ client maps to its name."""


class SubscriptionData(Body):
    topic: str
    sub_string: str | None = None
    tags_set: list[str] = []
    code_set: list[int] = []
    sub_version: int = 0
    expression_type: str = "TAG"
    class_filter_mode: bool = False


class CheckClientRequestBody(Body):
    """CHECK_CLIENT_CONFIG: can the broker evaluate this subscription (SQL92 on, expression valid)?"""

    client_id: str
    group: str
    subscription_data: SubscriptionData
    namespace: str | None = None


class ProducerData(Body):
    group_name: str


class ConsumerData(Body):
    """One consumer group of a client. The enum fields hold names once decoded."""

    group_name: str
    consume_type: str | int | None = None
    message_model: str | int | None = None
    consume_from_where: str | int | None = None
    subscription_data_set: list[SubscriptionData] = []
    unit_mode: bool = False

    def __post_init__(self) -> None:
        self.consume_type = _enum_name(self.consume_type, CONSUME_TYPES)
        self.message_model = _enum_name(self.message_model, MESSAGE_MODELS)
        self.consume_from_where = _enum_name(self.consume_from_where, CONSUME_FROM_WHERE)


class HeartbeatData(Body):
    """Body of HEART_BEAT."""

    client_id: str = msgspec.field(name="clientID")
    producer_data_set: list[ProducerData] = []
    consumer_data_set: list[ConsumerData] = []
    heartbeat_fingerprint: int = 0
    without_sub: bool = False


class MessageQueue(Body, frozen=True):  # type: ignore[misc]  # msgspec allows a frozen subclass
    """Hashable, so that lock tables can be sets of queues."""

    topic: str
    broker_name: str
    queue_id: int


class LockBatchRequestBody(Body):
    """Body of LOCK_BATCH_MQ."""

    consumer_group: str
    client_id: str
    only_this_broker: bool = False
    mq_set: list[MessageQueue] = []


class UnlockBatchRequestBody(LockBatchRequestBody):
    """Body of UNLOCK_BATCH_MQ: the same shape as a lock request."""


class LockBatchResponseBody(Body):
    lock_ok_mq_set: list[MessageQueue] = msgspec.field(default_factory=list, name="lockOKMQSet")


class GetConsumerListByGroupResponseBody(Body):
    consumer_id_list: list[str] = []


class ClientConnection(Body):
    """One member of a group in GET_*_CONNECTION_LIST answers (RocketMQ's `Connection`)."""

    client_id: str
    client_addr: str
    language: str = "JAVA"
    version: int = 0


class ProducerConnection(Body):
    connection_set: list[ClientConnection] = []


class ConsumerConnection(Body):
    connection_set: list[ClientConnection] = []
    subscription_table: dict[str, SubscriptionData] = {}
    consume_type: str | None = None
    message_model: str | None = None
    consume_from_where: str | None = None


class ConsumerRunningInfo(Body):
    """A client's answer to GET_CONSUMER_RUNNING_INFO; `jstack` its threads' stacks when asked."""

    properties: dict[str, str] = {}
    subscription_set: list[SubscriptionData] = []
    mq_table: dict[str, dict] = {}
    status_table: dict[str, dict] = {}
    jstack: str | None = None


class ConsumeMessageDirectlyResult(Body):
    """A client's answer to CONSUME_MESSAGE_DIRECTLY; `consume_result` CR_SUCCESS, CR_LATER,
    CR_ROLLBACK, CR_COMMIT, CR_THROW_EXCEPTION or CR_RETURN_NULL."""

    order: bool = False
    auto_commit: bool = True
    consume_result: str | None = None
    remark: str | None = None
    spent_time_mills: int = 0


# --- Broker registration and administration ---------------------------------------------------


class TopicConfig(Body):
    """Defaults are Java's, which a missing field also means to a Java peer."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = 6  # PermName: PRIORITY 8, READ 4, WRITE 2, INHERIT 1
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict[str, str] = {}


class DataVersion(Body):
    state_version: int = 0
    timestamp: int = 0
    counter: int = 0


class TopicConfigSerializeWrapper(Body):
    """Topic table of REGISTER_BROKER and GET_ALL_TOPIC_CONFIG (with the 5.x static-topic maps)."""

    topic_config_table: dict[str, TopicConfig] = {}
    data_version: DataVersion = msgspec.field(default_factory=DataVersion)
    topic_queue_mapping_info_map: dict[str, Any] = {}
    topic_queue_mapping_detail_map: dict[str, Any] = {}
    mapping_data_version: DataVersion = msgspec.field(default_factory=DataVersion)


class RegisterBrokerBody(Body):
    """Body of REGISTER_BROKER when the header's ``compressed`` is false."""

    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = msgspec.field(
        default_factory=TopicConfigSerializeWrapper
    )
    filter_server_list: list[str] = []


class KVTable(Body):
    table: dict[str, str] = {}


class TopicList(Body):
    topic_list: list[str] = []
    broker_addr: str | None = None


class ExponentialRetryPolicy(Body):
    initial: int = 5_000  # ms
    max: int = 7_200_000
    multiplier: int = 2


RETRY_LADDER_MS = (
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000,
    420_000, 480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
)  # fmt: skip


class CustomizedRetryPolicy(Body):
    next: list[int] = msgspec.field(default_factory=lambda: list(RETRY_LADDER_MS))


class GroupRetryPolicy(Body):
    """RocketMQ 5's groupRetryPolicy: how long a nacked pop message stays invisible (ms)."""

    type: str = "CUSTOMIZED"  # or "EXPONENTIAL"
    exponential_retry_policy: ExponentialRetryPolicy | None = None
    customized_retry_policy: CustomizedRetryPolicy | None = None


class SubscriptionGroupConfig(Body):
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP's body and the broker's subscriptionGroup.json entries."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    consume_message_orderly: bool = False
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    attributes: dict[str, str] = {}  # RocketMQ 5.x group attributes; ferrymq keeps consumption control here
    group_retry_policy: GroupRetryPolicy = msgspec.field(default_factory=GroupRetryPolicy)


# Group attributes through which ferrymq brokers control consumption (ferrymq.broker.consumption).
PAUSED = "ferrymq.paused"  # "true": no client of the group gets messages
PAUSED_CLIENTS = "ferrymq.pausedClients"  # "id1,id2": these clients get none
RATE_LIMIT = "ferrymq.consumeRateLimit"  # messages per second for the whole group


class SubscriptionGroupWrapper(Body):
    """GET_ALL_SUBSCRIPTIONGROUP_CONFIG's answer, and subscriptionGroup.json."""

    subscription_group_table: dict[str, SubscriptionGroupConfig] = {}
    data_version: DataVersion = msgspec.field(default_factory=DataVersion)


class ConsumerOffsetSerializeWrapper(Body):
    """consumerOffset.json and GET_ALL_CONSUMER_OFFSET: "topic@group" → {queue id: offset}."""

    offset_table: dict[str, dict[int, int]] = {}


# --- ResetOffsetBody: a map keyed by MessageQueue objects ------------------------------------------
# fastjson writes Map<MessageQueue, Long> with object keys — {"offsetTable":{{"brokerName":"b",
# "queueId":0,"topic":"T"}:12}} — which is not standard JSON. Java brokers send it so and Java
# clients read it so; these two functions write and read that form.

_MQ_KEY = re.compile(rb"(\{[^{}]*\})\s*:\s*(-?\d+)")


def encode_reset_offset_body(offsets: dict[MessageQueue, int]) -> bytes:
    entries = b",".join(_ENCODER.encode(mq) + b":" + str(offset).encode() for mq, offset in offsets.items())
    return b'{"offsetTable":{' + entries + b"}}"


class _MessageQueueForC(Body):
    topic: str
    broker_name: str
    queue_id: int
    offset: int


class _ResetOffsetBodyForC(Body):
    offset_table: list[_MessageQueueForC]


def encode_reset_offset_body_for_c(offsets: dict[MessageQueue, int]) -> bytes:
    """The form Java brokers send C++ clients (ResetOffsetBodyForC): a plain list of queues."""
    table = [
        _MessageQueueForC(mq.topic, mq.broker_name, mq.queue_id, offset) for mq, offset in offsets.items()
    ]
    return _ENCODER.encode(_ResetOffsetBodyForC(table))


def decode_reset_offset_body(data: bytes | bytearray | memoryview) -> dict[MessageQueue, int]:
    """The queue → offset table; RemotingProtocolError when the body is not such a table."""
    data = bytes(data)
    if b'"offsetTable"' not in data:
        raise RemotingProtocolError("bad ResetOffsetBody: no offsetTable")
    table = {}
    for key, offset in _MQ_KEY.findall(data):
        table[decode_body(MessageQueue, key)] = int(offset)
    return table
