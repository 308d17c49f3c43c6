"""Topics, groups and look-ups: the requests admin tools and consoles send."""

from __future__ import annotations

from collections.abc import Callable

from ferrymq.broker.consumption import ConsumptionControl
from ferrymq.broker.groups import SubscriptionGroupManager
from ferrymq.broker.offsets import ConsumerOffsetManager
from ferrymq.broker.processors.common import error, ok
from ferrymq.broker.services.topic_admin import TopicAdmin
from ferrymq.broker.topics import TopicConfigManager
from ferrymq.net.connection import Connection
from ferrymq.protocol.admin_bodies import CreateTopicListRequestBody, SubscriptionGroupList
from ferrymq.protocol.bodies import (
    KVTable,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicList,
    decode_body,
    encode_body,
)
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.headers import (
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    GroupRequestHeader,
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    TopicRequestHeader,
    ViewMessageRequestHeader,
)
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.protocol.topic_attributes import MIXED, AttributeChangeError, altered, topic_message_type
from ferrymq.protocol.topic_names import SYSTEM_TOPICS, is_system_topic, topic_problem
from ferrymq.store import MessageStore


class AdminProcessor:
    def __init__(
        self, cluster_name: str, topics: TopicConfigManager, groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager, store: MessageStore, consumption: ConsumptionControl,
        topic_admin: TopicAdmin, *, runtime_info: Callable[[], dict[str, str]],
        mixed_message_type: bool = False,
    ) -> None:  # fmt: skip
        """`runtime_info`: the broker's figures;
        `mixed_message_type`: whether a topic may take every message type (RocketMQ's
        enableMixedMessageType)."""
        self.cluster_name = cluster_name
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.store = store
        self.consumption = consumption
        self.topic_admin = topic_admin
        self._runtime_info = runtime_info
        self.mixed_message_type = mixed_message_type

    def register(self, server) -> None:
        server.register(RequestCode.UPDATE_AND_CREATE_TOPIC, self.create_topic)
        server.register(RequestCode.DELETE_TOPIC_IN_BROKER, self.delete_topic)
        server.register(RequestCode.GET_ALL_TOPIC_CONFIG, self.all_topics)
        server.register(RequestCode.GET_TOPIC_CONFIG, self.topic_config)
        server.register(RequestCode.UPDATE_AND_CREATE_TOPIC_LIST, self.create_topics)
        server.register(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, self.create_group)
        server.register(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST, self.create_groups)
        server.register(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, self.all_groups)
        server.register(RequestCode.DELETE_SUBSCRIPTIONGROUP, self.delete_group)
        server.register(RequestCode.VIEW_MESSAGE_BY_ID, self.view_message)
        server.register(RequestCode.QUERY_MESSAGE, self.query_message)
        server.register(RequestCode.GET_BROKER_RUNTIME_INFO, self.runtime_info)
        server.register(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, self.group_config)
        server.register(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER, self.system_topics)

    async def create_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = CreateTopicRequestHeader.from_ext_fields(request.ext_fields)
        if h.topic == h.default_topic:
            return error(request, ResponseCode.INVALID_PARAMETER, f"topic {h.topic} is reserved")
        current = self.topics.get(h.topic)
        try:
            attributes = altered(current.attributes if current else {}, h.attributes)
        except AttributeChangeError as e:
            return error(request, ResponseCode.INVALID_PARAMETER, str(e))
        config = TopicConfig(
            h.topic, h.read_queue_nums, h.write_queue_nums, h.perm, h.topic_filter_type,
            h.topic_sys_flag or 0, h.order, attributes,
        )  # fmt: skip
        problem = self._topic_problem(config)
        if problem:
            return error(request, ResponseCode.INVALID_PARAMETER, problem)
        self.topic_admin.create(config)
        await self.topics.saved()
        return ok(request)

    async def create_topics(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """UPDATE_AND_CREATE_TOPIC_LIST: every topic checked first; none created if one is refused."""
        configs = decode_body(CreateTopicListRequestBody, request.body).topic_config_list
        if not configs:
            return error(request, ResponseCode.INVALID_PARAMETER, "topicConfigList is empty")
        for config in configs:
            problem = self._topic_problem(config)
            if problem:
                return error(request, ResponseCode.INVALID_PARAMETER, f"{config.topic_name}: {problem}")
        await self.topic_admin.create_many_off_loop(configs)
        await self.topics.saved()
        return ok(request)

    def _topic_problem(self, config: TopicConfig) -> str | None:
        """Why this broker refuses to create the topic, or None."""
        problem = topic_problem(config.topic_name)
        if problem:
            return problem
        if config.topic_name == self.cluster_name:
            return f"topic {config.topic_name} is reserved"
        if not (0 < config.read_queue_nums <= 1024 and 0 < config.write_queue_nums <= 1024):
            return "queue numbers must be between 1 and 1024"
        if topic_message_type(config.attributes) == MIXED and not self.mixed_message_type:
            return "MIXED message type is not supported"
        return None

    async def delete_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = TopicRequestHeader.from_ext_fields(request.ext_fields)
        self.topic_admin.delete(h.topic)
        await self.topics.saved()
        return ok(request)

    async def topic_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """One topic's config, attributes included (what a 5.x proxy reads message.type from)."""
        h = TopicRequestHeader.from_ext_fields(request.ext_fields)
        config = self.topics.get(h.topic)
        if config is None:
            return error(request, ResponseCode.TOPIC_NOT_EXIST, f"topic {h.topic} does not exist")
        return ok(request, body=encode_body(config))

    async def all_topics(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return ok(request, body=encode_body(self.topics.wrapper()))

    async def create_group(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return await self._create_groups(request, [decode_body(SubscriptionGroupConfig, request.body)])

    async def create_groups(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST: many groups, one write of the group file."""
        configs = decode_body(SubscriptionGroupList, request.body).group_config_list
        if not configs:
            return error(request, ResponseCode.INVALID_PARAMETER, "groupConfigList is empty")
        return await self._create_groups(request, configs)

    async def _create_groups(
        self, request: RemotingCommand, configs: list[SubscriptionGroupConfig]
    ) -> RemotingCommand:
        if not all(c.group_name for c in configs):
            return error(request, ResponseCode.INVALID_PARAMETER, "groupName is empty")
        self.groups.put_many(configs)
        for config in configs:
            self.consumption.update(config)
        await self.groups.saved()
        return ok(request)

    async def all_groups(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return ok(request, body=encode_body(self.groups.wrapper()))

    async def group_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = GroupRequestHeader.from_ext_fields(request.ext_fields)
        config = self.groups.find(h.group)
        if config is None:
            return error(
                request,
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group {h.group} does not exist",
            )
        return ok(request, body=encode_body(config))

    async def system_topics(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """RocketMQ's system topic set, and the system topics this broker has made."""
        names = SYSTEM_TOPICS | {t for t in self.topics.topics if is_system_topic(t)}
        return ok(request, body=encode_body(TopicList(sorted(names))))

    async def delete_group(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = DeleteSubscriptionGroupRequestHeader.from_ext_fields(request.ext_fields)
        self.groups.delete(h.group_name)
        self.consumption.remove(h.group_name)
        if h.clean_offset:
            self.offsets.remove_group(h.group_name)
        await self.groups.saved()
        return ok(request)

    async def view_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = ViewMessageRequestHeader.from_ext_fields(request.ext_fields)
        record = self.store.look_message_by_offset(h.offset)
        if record is None:
            return error(request, ResponseCode.SYSTEM_ERROR, f"no message at CommitLog offset {h.offset}")
        return ok(request, body=bytes(record))

    async def query_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = QueryMessageRequestHeader.from_ext_fields(request.ext_fields)
        store = self.store
        records = store.query_message(h.topic, h.key, h.max_num, h.begin_timestamp, h.end_timestamp)
        if not records:
            return error(request, ResponseCode.QUERY_NOT_FOUND, f"no message with key {h.key} in {h.topic}")
        header = QueryMessageResponseHeader(
            index_last_update_timestamp=store.dispatcher.last_store_timestamp,
            index_last_update_phyoffset=store.dispatcher.offset,
        )
        return ok(request, header, b"".join(records))

    async def runtime_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return ok(request, body=encode_body(KVTable(table=self._runtime_info())))
