"""Client membership: HEART_BEAT, UNREGISTER_CLIENT, who is in a group (GET_CONSUMER_LIST_BY_GROUP,
GET_CONSUMER_CONNECTION_LIST, GET_PRODUCER_CONNECTION_LIST, GET_ALL_PRODUCER_INFO), queue locks."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ferrymq.broker.clients import Channel, ClientRegistry, Member
from ferrymq.broker.filters import TAG_TYPE, FilterCache, FilterError
from ferrymq.broker.groups import SubscriptionGroupManager
from ferrymq.broker.locks import RebalanceLockManager
from ferrymq.broker.processors.common import error, ok
from ferrymq.broker.topics import PERM_READ, PERM_WRITE, RETRY_GROUP_PREFIX, TopicConfigManager
from ferrymq.net.connection import Connection
from ferrymq.net.errors import RemotingError
from ferrymq.protocol.admin_bodies import ProducerInfo, ProducerTableInfo
from ferrymq.protocol.bodies import (
    CheckClientRequestBody,
    ClientConnection,
    ConsumerConnection,
    ConsumerData,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    ProducerConnection,
    UnlockBatchRequestBody,
    decode_body,
    encode_body,
)
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.headers import (
    ConsumerGroupRequestHeader,
    ProducerGroupRequestHeader,
    UnregisterClientRequestHeader,
)
from ferrymq.protocol.remoting import RemotingCommand

log = logging.getLogger(__name__)


class ClientProcessor:
    def __init__(
        self, topics: TopicConfigManager, groups: SubscriptionGroupManager, clients: ClientRegistry,
        filters: FilterCache, locks: RebalanceLockManager, *, topics_changed: Callable[[], None],
        members_changed: Callable[[str], None],
    ) -> None:  # fmt: skip
        """`topics_changed`: tell the NameServers soon; `members_changed(group)`: tell the group's
        consumers to rebalance."""
        self.topics = topics
        self.groups = groups
        self.clients = clients
        self.filters = filters
        self.locks = locks
        self._topics_changed = topics_changed
        self._members_changed = members_changed

    def register(self, server) -> None:
        server.register(RequestCode.HEART_BEAT, self.heartbeat)
        server.register(RequestCode.UNREGISTER_CLIENT, self.unregister)
        server.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, self.consumer_list)
        server.register(RequestCode.GET_CONSUMER_CONNECTION_LIST, self.consumer_connections)
        server.register(RequestCode.GET_PRODUCER_CONNECTION_LIST, self.producer_connections)
        server.register(RequestCode.GET_ALL_PRODUCER_INFO, self.all_producers)
        server.register(RequestCode.LOCK_BATCH_MQ, self.lock)
        server.register(RequestCode.UNLOCK_BATCH_MQ, self.unlock)
        server.register(RequestCode.CHECK_CLIENT_CONFIG, self.check_client_config)

    async def heartbeat(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        data = decode_body(HeartbeatData, request.body)
        for consumer in data.consumer_data_set:
            group = self.groups.get(consumer.group_name)
            retry_topic = RETRY_GROUP_PREFIX + consumer.group_name
            if (
                group is not None
                and group.retry_queue_nums > 0
                and self.topics.ensure(retry_topic, group.retry_queue_nums, PERM_READ | PERM_WRITE)
            ):
                self._topics_changed()  # consumers find the retry topic's route at once
            self._compile_filters(data.client_id, consumer)
            if self.clients.heartbeat_consumer(data.client_id, conn, consumer, request.language):
                log.info("consumer %s joined group %s", data.client_id, consumer.group_name)
                self._members_changed(consumer.group_name)
        for producer in data.producer_data_set:
            self.clients.heartbeat_producer(data.client_id, conn, producer.group_name, request.language)
        return ok(request)

    def _compile_filters(self, client_id: str, consumer: ConsumerData) -> None:
        """Compile SQL92 subscriptions now (pulls then find them cached); say so if one cannot be."""
        for sub in consumer.subscription_data_set:
            if sub.expression_type and sub.expression_type.upper() != TAG_TYPE:
                try:
                    self.filters.get(sub.sub_string, sub.expression_type)
                except FilterError as e:
                    log.warning("%s of group %s subscribes to %s with a filter this broker cannot use: %s",
                                client_id, consumer.group_name, sub.topic, e)  # fmt: skip

    async def unregister(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = UnregisterClientRequestHeader.from_ext_fields(request.ext_fields)
        if self.clients.unregister(h.client_id, h.producer_group, h.consumer_group) and h.consumer_group:
            log.info("consumer %s left group %s", h.client_id, h.consumer_group)
            self._members_changed(h.consumer_group)
        return ok(request)

    async def consumer_list(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = ConsumerGroupRequestHeader.from_ext_fields(request.ext_fields)
        ids = self.clients.consumer_ids(h.consumer_group)
        if not ids:
            return error(
                request, ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {h.consumer_group}"
            )
        return ok(request, body=encode_body(GetConsumerListByGroupResponseBody(consumer_id_list=ids)))

    async def consumer_connections(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = ConsumerGroupRequestHeader.from_ext_fields(request.ext_fields)
        group = self.clients.consumers.get(h.consumer_group)
        if group is None or not group.members:
            return error(
                request, ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group {h.consumer_group} not online"
            )
        body = ConsumerConnection(
            connection_set=[_connection(m) for m in group.members.values()],
            subscription_table=dict(group.subscriptions), consume_type=_name(group.consume_type),
            message_model=_name(group.message_model), consume_from_where=_name(group.consume_from_where),
        )  # fmt: skip
        return ok(request, body=encode_body(body))

    async def producer_connections(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = ProducerGroupRequestHeader.from_ext_fields(request.ext_fields)
        members = self.clients.producers.get(h.producer_group)
        if not members:
            return error(
                request, ResponseCode.SYSTEM_ERROR, f"the producer group {h.producer_group} not exist"
            )
        body = ProducerConnection(connection_set=[_connection(m) for m in members.values()])
        return ok(request, body=encode_body(body))

    async def all_producers(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Every producer group with its connected producers (rocketmq-exporter counts them)."""
        wall_minus_monotonic = time.time() - time.monotonic()
        table = ProducerTableInfo({
            group: [
                ProducerInfo(m.client_id, m.connection.remote_address, m.language.name, 0,
                             int((m.last_heartbeat + wall_minus_monotonic) * 1000))
                for m in members.values()
            ]
            for group, members in self.clients.producers.items() if members
        })  # fmt: skip
        return ok(request, body=encode_body(table))

    async def lock(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        body = decode_body(LockBatchRequestBody, request.body)
        granted = self.locks.lock(body.consumer_group, body.client_id, body.mq_set)
        return ok(request, body=encode_body(LockBatchResponseBody(lock_ok_mq_set=granted)))

    async def unlock(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        body = decode_body(UnlockBatchRequestBody, request.body)
        self.locks.unlock(body.consumer_group, body.client_id, body.mq_set)
        return ok(request)

    async def check_client_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Can this broker evaluate the subscription? Clients ask before they subscribe."""
        sub = decode_body(CheckClientRequestBody, request.body).subscription_data
        try:
            self.filters.get(sub.sub_string, sub.expression_type)
        except FilterError as e:
            return error(request, e.code, str(e))
        return ok(request)


def _connection(member: Member) -> ClientConnection:
    return ClientConnection(member.client_id, member.connection.remote_address, member.language.name)


def _name(value: str | int | None) -> str | None:
    return None if value is None else str(value)


async def notify_ids_changed(connections: list[Channel], group: str) -> None:
    """Tell every member of `group` to rebalance now (oneway NOTIFY_CONSUMER_IDS_CHANGED)."""
    for conn in connections:
        command = RemotingCommand(
            RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ext_fields={"consumerGroup": group}
        )
        try:
            await conn.send_oneway(command)
        except RemotingError as e:
            log.debug("could not notify %s of group %s change: %s", conn, group, e)
