"""Topics, groups and look-ups: the requests admin tools and consoles send."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferrymq.broker.processors.common import error, ok
from ferrymq.broker.topics import topic_problem
from ferrymq.net.connection import Connection
from ferrymq.protocol.bodies import KVTable, SubscriptionGroupConfig, TopicConfig, decode_body, encode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.headers import (
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    TopicRequestHeader,
    ViewMessageRequestHeader,
)
from ferrymq.protocol.remoting import RemotingCommand

if TYPE_CHECKING:
    from ferrymq.broker.server import Broker


class AdminProcessor:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def register(self, server) -> None:
        server.register(RequestCode.UPDATE_AND_CREATE_TOPIC, self.create_topic)
        server.register(RequestCode.DELETE_TOPIC_IN_BROKER, self.delete_topic)
        server.register(RequestCode.GET_ALL_TOPIC_CONFIG, self.all_topics)
        server.register(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, self.create_group)
        server.register(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, self.all_groups)
        server.register(RequestCode.DELETE_SUBSCRIPTIONGROUP, self.delete_group)
        server.register(RequestCode.VIEW_MESSAGE_BY_ID, self.view_message)
        server.register(RequestCode.QUERY_MESSAGE, self.query_message)
        server.register(RequestCode.GET_BROKER_RUNTIME_INFO, self.runtime_info)

    async def create_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = CreateTopicRequestHeader.from_ext_fields(request.ext_fields)
        problem = topic_problem(h.topic)
        if problem:
            return error(request, ResponseCode.INVALID_PARAMETER, problem)
        if h.topic == h.default_topic or h.topic == self.broker.config.broker_cluster_name:
            return error(request, ResponseCode.INVALID_PARAMETER, f"topic {h.topic} is reserved")
        if not (0 < h.read_queue_nums <= 1024 and 0 < h.write_queue_nums <= 1024):
            return error(request, ResponseCode.INVALID_PARAMETER, "queue numbers must be between 1 and 1024")
        self.broker.topics.put(
            TopicConfig(
                h.topic, h.read_queue_nums, h.write_queue_nums, h.perm, h.topic_filter_type,
                h.topic_sys_flag or 0, h.order,
            )
        )  # fmt: skip
        self.broker.schedule_registration()
        return ok(request)

    async def delete_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = TopicRequestHeader.from_ext_fields(request.ext_fields)
        broker = self.broker
        broker.topics.delete(h.topic)
        broker.store.delete_topic(h.topic)
        broker.offsets.remove_topic(h.topic)
        broker.schedule_registration()
        return ok(request)

    async def all_topics(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return ok(request, body=encode_body(self.broker.topics.wrapper()))

    async def create_group(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        config = decode_body(SubscriptionGroupConfig, request.body)
        if not config.group_name:
            return error(request, ResponseCode.INVALID_PARAMETER, "groupName is empty")
        self.broker.groups.put(config)
        self.broker.consumption.update(config)
        return ok(request)

    async def all_groups(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return ok(request, body=encode_body(self.broker.groups.wrapper()))

    async def delete_group(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = DeleteSubscriptionGroupRequestHeader.from_ext_fields(request.ext_fields)
        self.broker.groups.delete(h.group_name)
        self.broker.consumption.remove(h.group_name)
        if h.clean_offset:
            self.broker.offsets.remove_group(h.group_name)
        return ok(request)

    async def view_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = ViewMessageRequestHeader.from_ext_fields(request.ext_fields)
        record = self.broker.store.look_message_by_offset(h.offset)
        if record is None:
            return error(request, ResponseCode.SYSTEM_ERROR, f"no message at CommitLog offset {h.offset}")
        return ok(request, body=bytes(record))

    async def query_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = QueryMessageRequestHeader.from_ext_fields(request.ext_fields)
        store = self.broker.store
        records = store.query_message(h.topic, h.key, h.max_num, h.begin_timestamp, h.end_timestamp)
        if not records:
            return error(request, ResponseCode.QUERY_NOT_FOUND, f"no message with key {h.key} in {h.topic}")
        header = QueryMessageResponseHeader(
            index_last_update_timestamp=store.dispatcher.last_store_timestamp,
            index_last_update_phyoffset=store.dispatcher.offset,
        )
        return ok(request, header, b"".join(records))

    async def runtime_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return ok(request, body=encode_body(KVTable(table=self.broker.runtime_info())))
