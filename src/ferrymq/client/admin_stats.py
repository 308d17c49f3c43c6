"""Admin look-ups and settings that mqadmin, rocketmq-dashboard and rocketmq-exporter use: topic
and consume stats, broker runtime figures, group connections, broker and NameServer settings,
offset cloning, ConsumeQueue look-ups, write permission of a broker, whole-table listings, and
topics and groups created many at a time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from ferrymq.client.instance import ClientError, ClientInstance
from ferrymq.client.message import MessageQueue
from ferrymq.net import RemotingError
from ferrymq.protocol.admin_bodies import (
    BrokerStatsData,
    CreateTopicListRequestBody,
    GroupList,
    OffsetWrapper,
    ProducerTableInfo,
    QueryConsumeQueueResponseBody,
    SubscriptionGroupList,
    TopicOffset,
    decode_consume_tps,
    decode_mq_table,
    decode_properties,
    encode_properties,
)
from ferrymq.protocol.bodies import (
    ConsumerConnection,
    ConsumerOffsetSerializeWrapper,
    ConsumerRunningInfo,
    KVTable,
    ProducerConnection,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    decode_body,
    encode_body,
)
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.errors import ProtocolError
from ferrymq.protocol.remoting import RemotingCommand

CONCURRENCY = 64  # requests in flight when a listing asks every group or broker
BULK_TIMEOUT_S, BULK_TIMEOUT_PER_TOPIC_S = 3.0, 0.01  # a broker makes each new topic's ConsumeQueue files


class AdminRefused(ClientError):
    """A server answered an admin call with an error: its response code and remark."""

    def __init__(self, what: str, code: int, remark: str | None) -> None:
        super().__init__(f"{what}: {remark or 'refused'} (code {code})")
        self.code = code
        self.remark = remark


@dataclass
class ConsumeStats:
    """A group's progress per queue over every broker (RocketMQ's ConsumeStats, merged)."""

    consume_tps: float = 0.0
    offsets: dict[MessageQueue, OffsetWrapper] = field(default_factory=dict)

    @property
    def diff(self) -> int:
        """Messages not consumed yet: the sum of broker offset minus consumer offset."""
        return sum(max(w.broker_offset - w.consumer_offset, 0) for w in self.offsets.values())


class AdminStats:
    """Mixed into Admin (which provides `instance`, `_masters` and `_ask_namesrv`)."""

    instance: ClientInstance
    _masters: Callable[[str | None], Awaitable[dict[str, str]]]
    _chosen_masters: Callable[[str | None, Iterable[str] | None], Awaitable[dict[str, str]]]
    _ask_namesrv: Callable[..., Awaitable[RemotingCommand]]

    async def _call(self, addr: str, code: int, ext: dict[str, str] | None = None, body: bytes = b"",
                    *, what: str, timeout: float | None = None) -> RemotingCommand:  # fmt: skip
        """One request to `addr`; AdminRefused when it answers with an error."""
        try:
            request = RemotingCommand(code, ext_fields=ext or {}, body=body)
            response = await self.instance.invoke(addr, request, timeout)
        except RemotingError as e:
            raise ClientError(f"{what} on {addr}: {e}") from None
        if response.code != ResponseCode.SUCCESS:
            raise AdminRefused(f"{what} on {addr}", response.code, response.remark)
        return response

    async def _each_master(self, code: int, ext: dict[str, str] | None = None, *, what: str,
                           cluster: str | None = None) -> dict[str, RemotingCommand]:  # fmt: skip
        """Ask every master (of `cluster`); broker name → answer."""
        masters = await self._masters(cluster)
        if not masters:
            raise ClientError("no master broker is registered")
        answers = await asyncio.gather(*(self._call(a, code, ext, what=what) for a in masters.values()))
        return dict(zip(masters, answers, strict=True))

    # --- topics --------------------------------------------------------------------------------

    async def topic_stats(self, topic: str) -> dict[MessageQueue, TopicOffset]:
        """Min and max offset and last store time of each of `topic`'s queues (mqadmin topicStatus)."""
        route = await self.instance.existing_route(topic)
        if route is None:
            raise AdminRefused(
                f"topic {topic}", ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} does not exist"
            )
        table: dict[MessageQueue, TopicOffset] = {}
        for addr in route.masters.values():
            response = await self._call(
                addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic}, what="topic stats"
            )
            table.update(decode_mq_table(response.body, TopicOffset))
        return dict(sorted(table.items(), key=lambda kv: (kv[0].broker_name, kv[0].queue_id)))

    async def create_topics(self, configs: list[TopicConfig], *, cluster: str | None = None) -> None:
        """Create or update many topics on every master (of `cluster`), one request per broker
        (UPDATE_AND_CREATE_TOPIC_LIST)."""
        body = encode_body(CreateTopicListRequestBody(configs))
        for addr in (await self._masters(cluster)).values():
            await self._call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC_LIST, body=body, what="create topics",
                             timeout=BULK_TIMEOUT_S + len(configs) * BULK_TIMEOUT_PER_TOPIC_S)  # fmt: skip

    async def create_groups(
        self, configs: list[SubscriptionGroupConfig], *, cluster: str | None = None,
        brokers: Iterable[str] | None = None,
    ) -> None:  # fmt: skip
        """Create or update many subscription groups on every master (of `cluster`, or of the broker
        groups in `brokers`), one request per broker (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST)."""
        body = encode_body(SubscriptionGroupList(configs))
        for addr in (await self._chosen_masters(cluster, brokers)).values():
            await self._call(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST, body=body,
                             what="create groups")  # fmt: skip

    async def delete_group(self, group: str, broker_addrs: list[str], *, clean_offset: bool = False) -> None:
        """Delete a subscription group from the given brokers (mqadmin deleteSubGroup)."""
        ext = {"groupName": group, "cleanOffset": str(clean_offset).lower()}
        for addr in broker_addrs:
            await self._call(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, ext, what=f"delete group {group}")

    async def topics_by_cluster(self, cluster: str) -> list[str]:
        response = await self._ask_namesrv(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": cluster})
        return sorted(decode_body(TopicList, response.body).topic_list)

    async def system_topics(self) -> list[str]:
        """The NameServers' system topics (cluster and broker names) and the brokers' own."""
        listed = decode_body(
            TopicList, (await self._ask_namesrv(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS)).body
        )
        names = set(listed.topic_list)
        if listed.broker_addr:
            response = await self._call(listed.broker_addr, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER,
                                        what="system topics")  # fmt: skip
            names.update(decode_body(TopicList, response.body).topic_list)
        return sorted(names)

    async def topic_consumed_by(self, topic: str) -> list[str]:
        """Groups that consume `topic` (with offsets on it, or online and subscribed)."""
        answers = await self._each_master(
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic}, what="groups"
        )
        return sorted({g for r in answers.values() for g in decode_body(GroupList, r.body).group_list})

    async def all_topic_config(self, broker_addr: str) -> TopicConfigSerializeWrapper:
        response = await self._call(broker_addr, RequestCode.GET_ALL_TOPIC_CONFIG, what="topic configs")
        return decode_body(TopicConfigSerializeWrapper, response.body)

    async def all_group_config(self, broker_addr: str) -> SubscriptionGroupWrapper:
        response = await self._call(
            broker_addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, what="group configs"
        )
        return decode_body(SubscriptionGroupWrapper, response.body)

    async def query_consume_queue(self, topic: str, queue_id: int, index: int, count: int = 10, *,
                                  group: str | None = None, broker_addr: str | None = None,
                                  ) -> QueryConsumeQueueResponseBody:  # fmt: skip
        """ConsumeQueue entries `index`.. of a queue (mqadmin queryCq); on the topic's first master
        unless `broker_addr` is given."""
        if broker_addr is None:
            route = await self.instance.existing_route(topic)
            if route is None or not route.masters:
                raise AdminRefused(
                    f"topic {topic}", ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} does not exist"
                )
            broker_addr = sorted(route.masters.items())[0][1]
        ext = {"topic": topic, "queueId": str(queue_id), "index": str(index), "count": str(count)}
        if group:
            ext["consumerGroup"] = group
        response = await self._call(broker_addr, RequestCode.QUERY_CONSUME_QUEUE, ext, what="ConsumeQueue")
        return decode_body(QueryConsumeQueueResponseBody, response.body)

    # --- groups --------------------------------------------------------------------------------

    async def consume_stats(self, group: str, topic: str | None = None, *, cluster: str | None = None,
                            brokers: Iterable[str] | None = None) -> ConsumeStats:  # fmt: skip
        """`group`'s offsets on every master (of `cluster` or of `brokers`; on `topic`, or all it
        consumes; mqadmin consumerProgress). AdminRefused (SUBSCRIPTION_GROUP_NOT_EXIST or
        TOPIC_NOT_EXIST) when no broker knows it."""
        return await self._consume_stats(await self._chosen_masters(cluster, brokers), group, topic)

    async def commit_group_offset(self, broker_addr: str, group: str, mq: MessageQueue, offset: int) -> None:
        """Set `group`'s committed offset of one queue on its broker (UPDATE_CONSUMER_OFFSET)."""
        ext = {"consumerGroup": group, "topic": mq.topic, "queueId": str(mq.queue_id),
               "commitOffset": str(offset)}  # fmt: skip
        await self._call(broker_addr, RequestCode.UPDATE_CONSUMER_OFFSET, ext, what=f"offset of {group}")

    async def _consume_stats(
        self, masters: dict[str, str], group: str, topic: str | None = None
    ) -> ConsumeStats:
        ext = {"consumerGroup": group, **({"topic": topic} if topic else {})}
        stats, refusals = ConsumeStats(), []
        for addr in masters.values():
            try:
                response = await self._call(
                    addr, RequestCode.GET_CONSUME_STATS, ext, what=f"consume stats of {group}"
                )
            except AdminRefused as e:
                refusals.append(e)
                continue
            stats.consume_tps += decode_consume_tps(response.body)
            stats.offsets.update(decode_mq_table(response.body, OffsetWrapper))
        if refusals and len(refusals) == len(masters):
            raise refusals[0]
        stats.offsets = dict(sorted(stats.offsets.items(), key=lambda kv: (kv[0].topic, kv[0].broker_name,
                                                                            kv[0].queue_id)))  # fmt: skip
        return stats

    async def groups(self, *, cluster: str | None = None) -> list[str]:
        """Every group the masters know: with a subscription config, or with committed offsets."""
        configs = await self._each_master(
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, what="groups", cluster=cluster
        )
        offsets = await self._each_master(
            RequestCode.GET_ALL_CONSUMER_OFFSET, what="offsets", cluster=cluster
        )
        names: set[str] = set()
        for r in configs.values():
            names.update(decode_body(SubscriptionGroupWrapper, r.body).subscription_group_table)
        for r in offsets.values():
            names.update(
                key.partition("@")[2]
                for key in decode_body(ConsumerOffsetSerializeWrapper, r.body).offset_table
            )
        return sorted(names)

    async def all_consume_stats(self, *, cluster: str | None = None) -> dict[str, ConsumeStats]:
        """Consume stats of every group (mqadmin consumerProgress without -g), asked concurrently."""
        limit = asyncio.Semaphore(CONCURRENCY)
        masters = await self._masters(cluster)

        async def one(group: str) -> ConsumeStats:
            async with limit:
                try:
                    return await self._consume_stats(masters, group)
                except AdminRefused:
                    return ConsumeStats()

        names = await self.groups(cluster=cluster)
        return dict(zip(names, await asyncio.gather(*(one(g) for g in names)), strict=True))

    async def producer_connections(self, group: str) -> ProducerConnection:
        """The producers of `group` connected to any master (mqadmin producerConnection)."""
        merged = ProducerConnection()
        for addr in (await self._masters(None)).values():
            try:
                response = await self._call(
                    addr, RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group}, what="producers"
                )
            except AdminRefused:
                continue
            seen = {c.client_id for c in merged.connection_set}
            found = decode_body(ProducerConnection, response.body).connection_set
            merged.connection_set += [c for c in found if c.client_id not in seen]
        if not merged.connection_set:
            raise AdminRefused(
                f"producer group {group}",
                ResponseCode.SYSTEM_ERROR,
                f"the producer group {group} is not online",
            )
        return merged

    async def consumer_connections(self, group: str) -> ConsumerConnection:
        """The members of `group` connected to any master and what they subscribe (consumerConnection)."""
        merged: ConsumerConnection | None = None
        for addr in (await self._masters(None)).values():
            try:
                response = await self._call(
                    addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group}, what="consumers"
                )
            except AdminRefused:
                continue
            found = decode_body(ConsumerConnection, response.body)
            if merged is None:
                merged = found
            else:
                seen = {c.client_id for c in merged.connection_set}
                merged.connection_set += [c for c in found.connection_set if c.client_id not in seen]
                merged.subscription_table.update(found.subscription_table)
        if merged is None:
            raise AdminRefused(
                f"consumer group {group}",
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"the consumer group {group} not online",
            )
        return merged

    async def consumer_running_info(
        self, group: str, client_id: str, *, jstack: bool = False
    ) -> ConsumerRunningInfo:
        """What one consumer reports of itself, relayed by a broker it is connected to (consumerStatus)."""
        ext = {"consumerGroup": group, "clientId": client_id, "jstackEnable": str(jstack).lower()}
        last: ClientError | None = None
        for addr in (await self._masters(None)).values():
            try:
                response = await self._call(
                    addr, RequestCode.GET_CONSUMER_RUNNING_INFO, ext, what="running info"
                )
            except ClientError as e:
                last = e
                continue
            return decode_body(ConsumerRunningInfo, response.body)
        raise last or ClientError("no master broker is registered")

    async def clone_group_offset(self, src_group: str, dest_group: str, topic: str | None = None, *,
                                 offline: bool = False) -> list[str]:  # fmt: skip
        """Give `dest_group` `src_group`'s offsets (on `topic`, or every topic); the brokers that did."""
        ext = {"srcGroup": src_group, "destGroup": dest_group, "offline": str(offline).lower()}
        if topic:
            ext["topic"] = topic
        done, refusals = [], []
        for name, addr in (await self._masters(None)).items():
            try:
                await self._call(addr, RequestCode.CLONE_GROUP_OFFSET, ext, what="clone offsets")
                done.append(name)
            except AdminRefused as e:
                refusals.append(e)
        if not done and refusals:
            raise refusals[0]
        return done

    # --- brokers and NameServers ---------------------------------------------------------------

    async def broker_runtime(self, broker_addr: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's table (mqadmin brokerStatus)."""
        response = await self._call(broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO, what="runtime info")
        return decode_body(KVTable, response.body).table

    async def broker_stats(self, broker_addr: str, stats_name: str, stats_key: str) -> BrokerStatsData:
        """One of the broker's stats over the last minute, hour and day (VIEW_BROKER_STATS_DATA):
        TOPIC_PUT_NUMS / TOPIC_PUT_SIZE of a topic, GROUP_GET_NUMS / GROUP_GET_SIZE of "topic@group",
        BROKER_PUT_NUMS / BROKER_GET_NUMS of the cluster name."""
        ext = {"statsName": stats_name, "statsKey": stats_key}
        response = await self._call(broker_addr, RequestCode.VIEW_BROKER_STATS_DATA, ext, what="broker stats")
        return decode_body(BrokerStatsData, response.body)

    async def all_producers(self, broker_addr: str) -> ProducerTableInfo:
        """Every producer group connected to a broker, with its producers (GET_ALL_PRODUCER_INFO)."""
        response = await self._call(broker_addr, RequestCode.GET_ALL_PRODUCER_INFO, what="producers")
        return decode_body(ProducerTableInfo, response.body)

    async def broker_config(self, broker_addr: str) -> dict[str, str]:
        response = await self._call(broker_addr, RequestCode.GET_BROKER_CONFIG, what="broker config")
        try:
            return decode_properties(response.body)
        except ProtocolError as e:
            raise ClientError(f"broker config of {broker_addr}: {e}") from None

    async def update_broker_config(self, settings: dict[str, str], *, broker_addr: str | None = None,
                                   cluster: str | None = None) -> list[str]:  # fmt: skip
        """Change settings on one broker, or on every master (of `cluster`); the addresses changed."""
        addrs = [broker_addr] if broker_addr else list((await self._masters(cluster)).values())
        for addr in addrs:
            await self._call(addr, RequestCode.UPDATE_BROKER_CONFIG, body=encode_properties(settings),
                             what="update broker config")  # fmt: skip
        return addrs

    async def namesrv_config(self) -> dict[str, dict[str, str]]:
        """Each NameServer's settings, by address."""
        configs = {}
        for addr in self.instance.namesrvs:
            response = await self._call(addr, RequestCode.GET_NAMESRV_CONFIG, what="NameServer config")
            configs[addr] = decode_properties(response.body)
        return configs

    async def update_namesrv_config(self, settings: dict[str, str]) -> list[str]:
        for addr in self.instance.namesrvs:
            await self._call(addr, RequestCode.UPDATE_NAMESRV_CONFIG, body=encode_properties(settings),
                             what="update NameServer config")  # fmt: skip
        return list(self.instance.namesrvs)

    async def wipe_write_perm(self, broker_name: str) -> dict[str, int]:
        """Take write permission from `broker_name`'s topics on every NameServer (before maintenance);
        NameServer → topics changed."""
        return await self._write_perm(RequestCode.WIPE_WRITE_PERM_OF_BROKER, broker_name, "wipeTopicCount")

    async def add_write_perm(self, broker_name: str) -> dict[str, int]:
        """Give `broker_name`'s topics their write permission back on every NameServer."""
        return await self._write_perm(RequestCode.ADD_WRITE_PERM_OF_BROKER, broker_name, "addTopicCount")

    async def _write_perm(self, code: int, broker_name: str, count_field: str) -> dict[str, int]:
        counts = {}
        for addr in self.instance.namesrvs:
            response = await self._call(addr, code, {"brokerName": broker_name}, what="write permission")
            counts[addr] = int((response.ext_fields or {}).get(count_field, 0))
        return counts
