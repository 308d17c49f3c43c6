"""Where topics and groups stand, as consoles and exporters ask it: GET_TOPIC_STATS_INFO,
GET_CONSUME_STATS, QUERY_CONSUME_QUEUE, QUERY_TOPIC_CONSUME_BY_WHO, QUERY_TOPICS_BY_CONSUMER,
VIEW_BROKER_STATS_DATA.

Shapes and rules are RocketMQ's AdminBrokerProcessor's: topic stats walk the write queues, consume
stats the read queues; an offset the group never committed counts as 0."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ferrymq.broker.clients import ClientRegistry
from ferrymq.broker.groups import SubscriptionGroupManager
from ferrymq.broker.offsets import ConsumerOffsetManager
from ferrymq.broker.processors.common import error, ok
from ferrymq.broker.stats_windows import StatsWindows
from ferrymq.broker.topics import TopicConfigManager
from ferrymq.net.connection import Connection
from ferrymq.protocol.admin_bodies import (
    BrokerStatsData,
    BrokerStatsItem,
    ConsumeQueueData,
    GroupList,
    OffsetWrapper,
    QueryConsumeQueueResponseBody,
    TopicOffset,
    encode_mq_table,
)
from ferrymq.protocol.bodies import MessageQueue, TopicList, encode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.headers import (
    GetConsumeStatsRequestHeader,
    GroupRequestHeader,
    QueryConsumeQueueRequestHeader,
    TopicRequestHeader,
    ViewBrokerStatsDataRequestHeader,
)
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.store import MessageStore

MAX_CQ_ENTRIES = 10_000  # most ConsumeQueue entries one QUERY_CONSUME_QUEUE returns


class StatsProcessor:
    def __init__(
        self, broker_name: str, topics: TopicConfigManager, groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager, store: MessageStore, clients: ClientRegistry,
        pulled: Mapping[tuple[str, str, int], int], consume_tps: Callable[[str, str], float],
        windows: StatsWindows,
    ) -> None:  # fmt: skip
        """`pulled`: (topic, group, queue) → the next offset the group pulled (its pull offset);
        `consume_tps(topic, group)`: messages per second the group takes from the topic;
        `windows`: counts over the last minute, hour and day."""
        self.broker_name = broker_name
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.store = store
        self.clients = clients
        self.pulled = pulled
        self.consume_tps = consume_tps
        self.windows = windows

    def register(self, server) -> None:
        server.register(RequestCode.GET_TOPIC_STATS_INFO, self.topic_stats)
        server.register(RequestCode.GET_CONSUME_STATS, self.consume_stats)
        server.register(RequestCode.QUERY_CONSUME_QUEUE, self.query_consume_queue)
        server.register(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, self.consumed_by)
        server.register(RequestCode.QUERY_TOPICS_BY_CONSUMER, self.topics_of_group)
        server.register(RequestCode.VIEW_BROKER_STATS_DATA, self.broker_stats)

    async def topic_stats(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = TopicRequestHeader.from_ext_fields(request.ext_fields)
        tc = self.topics.get(h.topic)
        if tc is None:
            return error(request, ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        store, table = self.store, {}
        for queue_id in range(tc.write_queue_nums):
            max_offset = max(store.get_max_offset(h.topic, queue_id), 0)
            last = store.get_message_store_timestamp(h.topic, queue_id, max_offset - 1) if max_offset else 0
            table[MessageQueue(h.topic, self.broker_name, queue_id)] = TopicOffset(
                max(store.get_min_offset(h.topic, queue_id), 0), max_offset, max(last, 0)
            )
        return ok(request, body=encode_mq_table(table))

    def _group_known(self, group: str) -> bool:
        return (
            self.groups.find(group) is not None
            or bool(self.offsets.topics_of(group))
            or group in self.clients.consumers
        )

    async def consume_stats(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = GetConsumeStatsRequestHeader.from_ext_fields(request.ext_fields)
        group = h.consumer_group
        online = self.clients.consumers.get(group)
        if h.topic:
            if self.topics.get(h.topic) is None:
                return error(request, ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
            names = [h.topic]
        elif not self._group_known(group):
            return error(
                request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"the consumer group {group} does not exist on broker {self.broker_name}",
            )  # fmt: skip
        elif h.topic_list:
            names = [t for t in h.topic_list.split(";") if t]
        else:
            names = sorted(self.offsets.topics_of(group) | set(online.subscriptions if online else ()))
        store, table, tps = self.store, {}, 0.0
        for topic in names:
            tc = self.topics.get(topic)
            if tc is None or (online and online.subscriptions and topic not in online.subscriptions):
                continue  # gone, or no longer subscribed by the online group (as RocketMQ skips it)
            tps += self.consume_tps(topic, group)
            for queue_id in range(tc.read_queue_nums):
                key = (topic, group, queue_id)
                broker_offset = max(store.get_max_offset(topic, queue_id), 0)
                consumer_offset = max(self.offsets.query(group, topic, queue_id) or 0, 0)
                last = (
                    store.get_message_store_timestamp(topic, queue_id, consumer_offset - 1)
                    if consumer_offset
                    else 0
                )
                table[MessageQueue(topic, self.broker_name, queue_id)] = OffsetWrapper(
                    broker_offset, consumer_offset, self.pulled.get(key, consumer_offset),
                    max(last, 0),
                )  # fmt: skip
        return ok(request, body=encode_mq_table(table, consumeTps=round(tps, 2)))

    async def query_consume_queue(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = QueryConsumeQueueRequestHeader.from_ext_fields(request.ext_fields)
        cq = self.store.queues.get(h.topic, h.queue_id)
        if cq is None:
            return error(request, ResponseCode.SYSTEM_ERROR, f"{h.queue_id}@{h.topic} is not exist!")
        if not 0 < h.count <= MAX_CQ_ENTRIES:
            return error(
                request, ResponseCode.INVALID_PARAMETER, f"count must be 1..{MAX_CQ_ENTRIES}, not {h.count}"
            )
        body = QueryConsumeQueueResponseBody(max_queue_index=cq.max_offset, min_queue_index=cq.min_offset)
        if h.consumer_group is not None:
            body.subscription_data = self.clients.subscription(h.consumer_group, h.topic)
            if body.subscription_data is None:
                body.filter_data = f"{h.consumer_group}@{h.topic} is not online!"
        for index in range(max(h.index, cq.min_offset), min(h.index + h.count, cq.max_offset)):
            entry = cq.entry(index)
            if entry is not None:
                body.queue_data.append(
                    ConsumeQueueData(physic_offset=entry[0], physic_size=entry[1], tags_code=entry[2])
                )
        return ok(request, body=encode_body(body))

    async def consumed_by(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Groups with offsets on the topic, and online groups subscribed to it."""
        h = TopicRequestHeader.from_ext_fields(request.ext_fields)
        groups = self.offsets.groups_of(h.topic)
        groups.update(name for name, g in self.clients.consumers.items() if h.topic in g.subscriptions)
        return ok(request, body=encode_body(GroupList(sorted(groups))))

    async def topics_of_group(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = GroupRequestHeader.from_ext_fields(request.ext_fields)
        return ok(request, body=encode_body(TopicList(sorted(self.offsets.topics_of(h.group)))))

    async def broker_stats(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = ViewBrokerStatsDataRequestHeader.from_ext_fields(request.ext_fields)
        figures = self.windows.figures(h.stats_name, h.stats_key)
        if figures is None:
            return error(
                request, ResponseCode.SYSTEM_ERROR, f"The stats <{h.stats_name}> <{h.stats_key}> not exist"
            )
        items = {name: BrokerStatsItem(f.sum, round(f.tps, 2)) for name, f in figures.items()}
        body = BrokerStatsData(items["statsMinute"], items["statsHour"], items["statsDay"])
        return ok(request, body=encode_body(body))
