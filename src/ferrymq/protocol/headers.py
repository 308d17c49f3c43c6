"""Custom headers: the typed view of a command's ``extFields``, one struct per Java header class.

Each class only declares fields; ``CustomHeader`` does the rest. The wire name is the Java field
name (the attribute in camelCase, or ``msgspec.field(name=...)`` where Java's name is irregular), a
field without a default is mandatory (Java's ``@CFNotNull``, which a 5.x broker no longer enforces
itself), and unknown keys are ignored: the ACL fields of the C++ client (``AccessKey``,
``Signature``, ``OnsChannel``) and the 5.x RPC extras (``ns``, ``nsd``, ``bname``, ``oway``, ``lo``;
only the send header keeps ``bname``, which SEND_MESSAGE_V2 carries as ``n`` and reads instead).
Decoding is one ``msgspec.convert`` call, cheap enough to run on every request.
"""

from __future__ import annotations

from typing import Annotated, Any, Self

import msgspec

from ferrymq.protocol.codes import RequestCode
from ferrymq.protocol.remoting import RemotingProtocolError, ext_str

Int = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
"""A Java ``Integer`` field."""

Long = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
"""A Java ``Long`` field."""


class CustomHeader(msgspec.Struct, rename="camel", gc=False):
    """Base of every header: turns ``extFields`` into a struct and back."""

    @classmethod
    def from_ext_fields(cls, ext: dict[str, Any]) -> Self:
        """Parse and coerce ``ext`` ("5" → 5, "true" → True); raise naming a missing or bad field."""
        try:
            return msgspec.convert(ext, cls, strict=False)
        except msgspec.ValidationError as exc:
            if any(type(value) is not str for value in ext.values()):  # e.g. a JSON number for a str field
                return cls.from_ext_fields({k: ext_str(v) for k, v in ext.items() if v is not None})
            raise RemotingProtocolError(f"{cls.__name__}: {exc}") from None

    def to_ext_fields(self) -> dict[str, str]:
        """All fields that are not None, stringified as Java does."""
        return {
            key: value if type(value) is str else ext_str(value)
            for key, value in msgspec.to_builtins(self).items()
            if value is not None
        }


# --- Shapes shared by several requests --------------------------------------------------------


class TopicRequestHeader(CustomHeader):
    """DELETE_TOPIC_IN_BROKER, GET_TOPIC_STATS_INFO, GET_TOPIC_CONFIG, REGISTER_TOPIC_IN_NAMESRV,
    QUERY_TOPIC_CONSUME_BY_WHO."""

    topic: str


class TopicQueueRequestHeader(CustomHeader):
    """GET_MIN_OFFSET and GET_EARLIEST_MSG_STORETIME."""

    topic: str
    queue_id: Int


class ConsumerGroupRequestHeader(CustomHeader):
    """GET_CONSUMER_LIST_BY_GROUP, NOTIFY_CONSUMER_IDS_CHANGED, GET_CONSUMER_CONNECTION_LIST."""

    consumer_group: str


class OffsetResponseHeader(CustomHeader):
    """Answer of QUERY_CONSUMER_OFFSET, GET_MAX_OFFSET, GET_MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP."""

    offset: Long


class BrokerRequestHeader(CustomHeader):
    """A broker's identity: UNREGISTER_BROKER and QUERY_DATA_VERSION."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: Long


class BrokerNameRequestHeader(CustomHeader):
    """WIPE_WRITE_PERM_OF_BROKER and ADD_WRITE_PERM_OF_BROKER."""

    broker_name: str


class KVConfigRequestHeader(CustomHeader):
    """GET_KV_CONFIG and DELETE_KV_CONFIG."""

    namespace: str
    key: str


# --- Producing --------------------------------------------------------------------------------


class SendMessageRequestHeader(CustomHeader):
    """SEND_MESSAGE (long names), SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE (letters ``a``–``n``)."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: Int
    queue_id: Int
    sys_flag: Int
    born_timestamp: Long
    flag: Int
    properties: str | None = None
    reconsume_times: Int = 0
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: Int | None = None  # None: the consumer group's setting
    broker_name: str | None = msgspec.field(default=None, name="bname")

    @classmethod
    def from_ext_fields(cls, ext: dict[str, Any]) -> Self:
        """Either key set, never a mix, as RocketMQ's broker reads them: a frame with the mandatory
        ``a`` is SEND_MESSAGE_V2's (SendMessageRequestHeaderV2 declares the letters only, ``n`` the
        broker name), so its long names, ``bname`` among them, are ignored; any other frame is read
        by its long names (SendMessageRequestHeader), its letters ignored. The letters go in one
        ``convert`` (a renaming loop cost as much); what that does not read goes the long way, which
        names the field at fault."""
        if "a" in ext:
            try:
                v2 = msgspec.convert(ext, _SendMessageRequestHeaderV2, strict=False)
                return cls(*msgspec.structs.astuple(v2))
            except msgspec.ValidationError:
                ext = {_V2_TO_LONG[key]: value for key, value in ext.items() if key in _V2_TO_LONG}
        return super().from_ext_fields(ext)

    def to_ext_fields_v2(self) -> dict[str, str]:
        """The one-letter keys of SEND_MESSAGE_V2, which save bytes on every message."""
        return {
            _LONG_TO_V2.get(key, key): value if type(value) is str else ext_str(value)
            for key, value in msgspec.to_builtins(self).items()
            if value is not None
        }


_V2_TO_LONG = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "bname",
}
_LONG_TO_V2 = {long: short for short, long in _V2_TO_LONG.items()}
_SendMessageRequestHeaderV2 = msgspec.defstruct(
    "_SendMessageRequestHeaderV2",
    [
        (_LONG_TO_V2[f.encode_name], f.type)
        if f.required
        else (_LONG_TO_V2[f.encode_name], f.type, f.default)
        for f in msgspec.structs.fields(SendMessageRequestHeader)
    ],
    gc=False,
)
"""SendMessageRequestHeader's fields in its order, under their SEND_MESSAGE_V2 letters."""


class SendMessageResponseHeader(CustomHeader):
    msg_id: str  # the offset message id; comma-joined for a batch
    queue_id: Int
    queue_offset: Long
    transaction_id: str | None = None
    batch_uniq_id: str | None = None
    recall_handle: str | None = None
    msg_region: str | None = msgspec.field(default=None, name="MSG_REGION")
    trace_on: bool | None = msgspec.field(default=None, name="TRACE_ON")


class RecallMessageRequestHeader(CustomHeader):
    topic: str
    recall_handle: str
    producer_group: str | None = None


class RecallMessageResponseHeader(CustomHeader):
    msg_id: str


class EndTransactionRequestHeader(CustomHeader):
    producer_group: str
    tran_state_table_offset: Long
    commit_log_offset: Long
    commit_or_rollback: Int  # MessageSysFlag: 0 unknown, 8 commit, 12 rollback
    msg_id: str
    topic: str | None = None
    from_transaction_check: bool = False
    transaction_id: str | None = None


class CheckTransactionStateRequestHeader(CustomHeader):
    tran_state_table_offset: Long
    commit_log_offset: Long
    topic: str | None = None
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None


# --- Consuming --------------------------------------------------------------------------------


class PullMessageRequestHeader(CustomHeader):
    """PULL_MESSAGE and LITE_PULL_MESSAGE."""

    consumer_group: str
    topic: str
    queue_id: Int
    queue_offset: Long
    max_msg_nums: Int
    sys_flag: Int
    commit_offset: Long
    suspend_timeout_millis: Long
    sub_version: Long
    subscription: str | None = None
    expression_type: str | None = None  # TAG or SQL92
    max_msg_bytes: Int | None = None
    request_source: Int | None = None
    proxy_froward_client_id: str | None = None  # sic


class PullMessageResponseHeader(CustomHeader):
    suggest_which_broker_id: Long
    next_begin_offset: Long
    min_offset: Long
    max_offset: Long
    offset_delta: Long | None = None
    topic_sys_flag: Int | None = None
    group_sys_flag: Int | None = None
    forbidden_type: Int | None = None


class QueryConsumerOffsetRequestHeader(CustomHeader):
    consumer_group: str
    topic: str
    queue_id: Int
    set_zero_if_not_found: bool | None = None


class UpdateConsumerOffsetRequestHeader(CustomHeader):
    consumer_group: str
    topic: str
    queue_id: Int
    commit_offset: Long


class GetMaxOffsetRequestHeader(TopicQueueRequestHeader):
    committed: bool = True


class SearchOffsetRequestHeader(TopicQueueRequestHeader):
    timestamp: Long
    boundary_type: str | None = None  # "lower" (the default) or "upper", case-insensitive


class GetEarliestMsgStoretimeResponseHeader(CustomHeader):
    timestamp: Long


class ConsumerSendMsgBackRequestHeader(CustomHeader):
    offset: Long  # commitlog offset of the message that failed
    group: str
    delay_level: Int  # 0: the broker chooses
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: Int | None = None


class UnregisterClientRequestHeader(CustomHeader):
    client_id: str = msgspec.field(name="clientID")
    producer_group: str | None = None
    consumer_group: str | None = None


class ViewMessageRequestHeader(CustomHeader):
    offset: Long  # commitlog offset
    topic: str | None = None


class QueryMessageRequestHeader(CustomHeader):
    topic: str
    key: str
    max_num: Int
    begin_timestamp: Long
    end_timestamp: Long


class QueryMessageResponseHeader(CustomHeader):
    index_last_update_timestamp: Long
    index_last_update_phyoffset: Long


class ResetOffsetRequestHeader(CustomHeader):
    """RESET_CONSUMER_CLIENT_OFFSET (broker→client) and INVOKE_BROKER_TO_RESET_OFFSET."""

    group: str
    topic: str
    timestamp: Long
    is_force: bool
    queue_id: Int = -1
    offset: Long | None = None


class GetConsumerRunningInfoRequestHeader(CustomHeader):
    consumer_group: str
    client_id: str
    jstack_enable: bool = False


class ConsumeMessageDirectlyResultRequestHeader(CustomHeader):
    """CONSUME_MESSAGE_DIRECTLY: the body is the stored message for the client to consume."""

    consumer_group: str
    client_id: str | None = None
    msg_id: str | None = None
    broker_name: str | None = None
    topic: str | None = None


class GetConsumeStatsRequestHeader(CustomHeader):
    consumer_group: str
    topic: str | None = None
    topic_list: str | None = None


# --- Topics, groups and administration --------------------------------------------------------


class CreateTopicRequestHeader(CustomHeader):
    topic: str
    default_topic: str
    read_queue_nums: Int
    write_queue_nums: Int
    perm: Int
    topic_filter_type: str  # SINGLE_TAG or MULTI_TAG
    order: bool = False
    topic_sys_flag: Int | None = None
    attributes: str | None = None  # e.g. "+message.type=FIFO"
    force: bool = False


class DeleteTopicFromNamesrvRequestHeader(CustomHeader):
    topic: str
    cluster_name: str | None = None


class DeleteSubscriptionGroupRequestHeader(CustomHeader):
    group_name: str
    clean_offset: bool = False


class GroupRequestHeader(CustomHeader):
    """GET_SUBSCRIPTIONGROUP_CONFIG, QUERY_TOPICS_BY_CONSUMER."""

    group: str


class ProducerGroupRequestHeader(CustomHeader):
    """GET_PRODUCER_CONNECTION_LIST."""

    producer_group: str


class GetTopicsByClusterRequestHeader(CustomHeader):
    cluster: str


class CloneGroupOffsetRequestHeader(CustomHeader):
    """CLONE_GROUP_OFFSET: copy `src_group`'s offsets on `topic` (all its topics if None) to
    `dest_group`; unless `offline`, only topics the source group, if online, subscribes to."""

    src_group: str
    dest_group: str
    topic: str | None = None
    offline: bool = False


class QueryConsumeQueueRequestHeader(CustomHeader):
    topic: str
    queue_id: Int
    index: Long
    count: Int
    consumer_group: str | None = None


class ViewBrokerStatsDataRequestHeader(CustomHeader):
    """VIEW_BROKER_STATS_DATA: e.g. TOPIC_PUT_NUMS of a topic, GROUP_GET_NUMS of "topic@group"."""

    stats_name: str
    stats_key: str


class GetBrokerConfigResponseHeader(CustomHeader):
    """The broker's config data version, as DataVersion JSON."""

    version: str | None = None


# --- NameServer -------------------------------------------------------------------------------


class RegisterBrokerRequestHeader(BrokerRequestHeader):
    ha_server_addr: str
    heartbeat_timeout_millis: Long | None = None
    enable_acting_master: bool | None = None
    compressed: bool = False
    body_crc32: Int = 0  # CRC32 of the body, checked when not 0


class RegisterBrokerResponseHeader(CustomHeader):
    ha_server_addr: str | None = None
    master_addr: str | None = None  # filled for slaves so they find their master


class QueryDataVersionResponseHeader(CustomHeader):
    changed: bool


class GetRouteInfoRequestHeader(CustomHeader):
    topic: str
    accept_standard_json_only: bool | None = None


class PutKVConfigRequestHeader(KVConfigRequestHeader):
    value: str


class GetKVConfigResponseHeader(CustomHeader):
    value: str | None = None


class GetKVListByNamespaceRequestHeader(CustomHeader):
    namespace: str


class WipeWritePermOfBrokerResponseHeader(CustomHeader):
    wipe_topic_count: Int


class AddWritePermOfBrokerResponseHeader(CustomHeader):
    add_topic_count: Int


class BrokerHeartbeatRequestHeader(CustomHeader):
    """BROKER_HEARTBEAT, to a NameServer or a controller."""

    cluster_name: str
    broker_addr: str
    broker_name: str
    broker_id: Long | None = None
    epoch: Int | None = None
    max_offset: Long | None = None
    confirm_offset: Long | None = None
    heartbeat_timeout_mills: Long | None = None
    election_priority: Int | None = None


REQUEST_HEADERS: dict[int, type[CustomHeader]] = {
    RequestCode.SEND_MESSAGE: SendMessageRequestHeader,
    RequestCode.SEND_MESSAGE_V2: SendMessageRequestHeader,
    RequestCode.SEND_BATCH_MESSAGE: SendMessageRequestHeader,
    RequestCode.SEND_REPLY_MESSAGE: SendMessageRequestHeader,
    RequestCode.SEND_REPLY_MESSAGE_V2: SendMessageRequestHeader,
    RequestCode.PULL_MESSAGE: PullMessageRequestHeader,
    RequestCode.LITE_PULL_MESSAGE: PullMessageRequestHeader,
    RequestCode.QUERY_MESSAGE: QueryMessageRequestHeader,
    RequestCode.VIEW_MESSAGE_BY_ID: ViewMessageRequestHeader,
    RequestCode.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetRequestHeader,
    RequestCode.UPDATE_CONSUMER_OFFSET: UpdateConsumerOffsetRequestHeader,
    RequestCode.UPDATE_AND_CREATE_TOPIC: CreateTopicRequestHeader,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: SearchOffsetRequestHeader,
    RequestCode.GET_MAX_OFFSET: GetMaxOffsetRequestHeader,
    RequestCode.GET_MIN_OFFSET: TopicQueueRequestHeader,
    RequestCode.GET_EARLIEST_MSG_STORETIME: TopicQueueRequestHeader,
    RequestCode.UNREGISTER_CLIENT: UnregisterClientRequestHeader,
    RequestCode.CONSUMER_SEND_MSG_BACK: ConsumerSendMsgBackRequestHeader,
    RequestCode.END_TRANSACTION: EndTransactionRequestHeader,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: ConsumerGroupRequestHeader,
    RequestCode.CHECK_TRANSACTION_STATE: CheckTransactionStateRequestHeader,
    RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: ConsumerGroupRequestHeader,
    RequestCode.PUT_KV_CONFIG: PutKVConfigRequestHeader,
    RequestCode.GET_KV_CONFIG: KVConfigRequestHeader,
    RequestCode.DELETE_KV_CONFIG: KVConfigRequestHeader,
    RequestCode.REGISTER_BROKER: RegisterBrokerRequestHeader,
    RequestCode.UNREGISTER_BROKER: BrokerRequestHeader,
    RequestCode.GET_ROUTEINFO_BY_TOPIC: GetRouteInfoRequestHeader,
    RequestCode.GET_TOPIC_STATS_INFO: TopicRequestHeader,
    RequestCode.GET_CONSUMER_CONNECTION_LIST: ConsumerGroupRequestHeader,
    RequestCode.GET_PRODUCER_CONNECTION_LIST: ProducerGroupRequestHeader,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: BrokerNameRequestHeader,
    RequestCode.ADD_WRITE_PERM_OF_BROKER: BrokerNameRequestHeader,
    RequestCode.DELETE_SUBSCRIPTIONGROUP: DeleteSubscriptionGroupRequestHeader,
    RequestCode.GET_CONSUME_STATS: GetConsumeStatsRequestHeader,
    RequestCode.DELETE_TOPIC_IN_BROKER: TopicRequestHeader,
    RequestCode.DELETE_TOPIC_IN_NAMESRV: DeleteTopicFromNamesrvRequestHeader,
    RequestCode.REGISTER_TOPIC_IN_NAMESRV: TopicRequestHeader,
    RequestCode.GET_KVLIST_BY_NAMESPACE: GetKVListByNamespaceRequestHeader,
    RequestCode.RESET_CONSUMER_CLIENT_OFFSET: ResetOffsetRequestHeader,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: ResetOffsetRequestHeader,
    RequestCode.GET_TOPICS_BY_CLUSTER: GetTopicsByClusterRequestHeader,
    RequestCode.GET_CONSUMER_RUNNING_INFO: GetConsumerRunningInfoRequestHeader,
    RequestCode.CONSUME_MESSAGE_DIRECTLY: ConsumeMessageDirectlyResultRequestHeader,
    RequestCode.QUERY_DATA_VERSION: BrokerRequestHeader,
    RequestCode.GET_TOPIC_CONFIG: TopicRequestHeader,
    RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG: GroupRequestHeader,
    RequestCode.CLONE_GROUP_OFFSET: CloneGroupOffsetRequestHeader,
    RequestCode.VIEW_BROKER_STATS_DATA: ViewBrokerStatsDataRequestHeader,
    RequestCode.QUERY_CONSUME_QUEUE: QueryConsumeQueueRequestHeader,
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: TopicRequestHeader,
    RequestCode.QUERY_TOPICS_BY_CONSUMER: GroupRequestHeader,
    RequestCode.BROKER_HEARTBEAT: BrokerHeartbeatRequestHeader,
}
"""The request header of each request code that has one (HEART_BEAT, LOCK_BATCH_MQ and the like carry
only a body)."""
