"""The admin codes of mqadmin, rocketmq-dashboard and rocketmq-exporter, through the SDK's Admin
and as raw requests, against a real in-process NameServer and Broker: answers, and error paths."""

from __future__ import annotations

import time

import pytest

from ferrymq.client import Admin, AdminRefused, ClientError, Message, Producer, PullConsumer
from ferrymq.net import RemotingClient
from ferrymq.protocol.bodies import (
    ConsumerData,
    ConsumerRunningInfo,
    HeartbeatData,
    SubscriptionData,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicList,
    decode_body,
    encode_body,
)
from ferrymq.protocol.codes import RequestCode, ResponseCode

from ..broker.conftest import make_cluster  # noqa: F401  (fixture)
from .test_admin import _has, eventually

# Every runtime-info key rocketmq-exporter's BrokerRuntimeStats parses, and how it parses it.
EXPORTER_LONGS = [
    "msgPutTotalTodayNow",
    "msgGetTotalTodayNow",
    "msgPutTotalTodayMorning",
    "msgGetTotalTodayMorning",
    "msgPutTotalYesterdayMorning",
    "msgGetTotalYesterdayMorning",
    "sendThreadPoolQueueHeadWaitTimeMills",
    "queryThreadPoolQueueHeadWaitTimeMills",
    "pullThreadPoolQueueHeadWaitTimeMills",
    "queryThreadPoolQueueSize",
    "pullThreadPoolQueueSize",
    "sendThreadPoolQueueCapacity",
    "pullThreadPoolQueueCapacity",
    "commitLogMinOffset",
    "commitLogMaxOffset",
    "bootTimestamp",
    "dispatchMaxBuffer",
    "pageCacheLockTimeMills",
    "getMessageEntireTimeMax",
    "putMessageTimesTotal",
    "sendThreadPoolQueueSize",
    "startAcceptSendRequestTimeStamp",
    "putMessageEntireTimeMax",
    "earliestMessageTimeStamp",
    "remainTransientStoreBufferNumbs",
    "queryThreadPoolQueueCapacity",
    "putMessageSizeTotal",
    "dispatchBehindBytes",
    "brokerVersion",
]
EXPORTER_DOUBLES = ["consumeQueueDiskRatio", "commitLogDiskRatio", "putMessageAverageSize"]
EXPORTER_TPS = ["putTps", "getMissTps", "getTransferedTps", "getTotalTps", "getFoundTps"]


def parse_like_the_exporter(table: dict[str, str]) -> None:
    for key in EXPORTER_LONGS:
        int(table[key])
    for key in EXPORTER_DOUBLES:
        float(table[key])
    for key in EXPORTER_TPS:
        assert len([float(x) for x in table[key].split(" ")]) == 3
    size, unit = table["remainHowManyDataToFlush"].split(" ")
    float(size), "BKMGTPE".index(unit[0])
    parts = table["commitLogDirCapacity"].split(" ")  # "Total : 20.0 GiB, Free : 5.5 GiB."
    float(parts[2]), float(parts[6])
    assert parts[3][-1] == "," and parts[7][-1] == "."
    for item in table["putMessageDistributeTime"].split(" "):
        int(item.split(":")[1])
    assert table["runtime"].startswith("[ ") and table["brokerVersionDesc"]


async def test_topic_and_consume_stats_cq_clone_and_who_consumes(make_cluster):  # noqa: F811
    cluster = await make_cluster()
    async with Admin(cluster.namesrv_addr) as admin:
        await admin.create_topic("Stats", queue_nums=2)
        await eventually(lambda: _has(admin, "Stats"), "the topic's route")
        async with Producer("PG", cluster.namesrv_addr) as producer:
            for i in range(6):
                await producer.send(Message("Stats", f"{i}".encode()))
            await producer.instance.heartbeat_all()
            assert [c.client_id for c in (await admin.producer_connections("PG")).connection_set]
        await cluster.settled()

        stats = await admin.topic_stats("Stats")
        assert [mq.queue_id for mq in stats] == [0, 1]
        assert sum(o.max_offset for o in stats.values()) == 6
        assert all(o.min_offset == 0 and o.last_update_timestamp > 0 for o in stats.values())
        raw = await cluster.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Stats"})
        assert bytes(raw.body).startswith(
            b'{"offsetTable":{{"topic":"Stats","brokerName":"broker-a","queueId":'
        )

        cluster.broker.group_rates.sample()
        async with PullConsumer("Readers", cluster.namesrv_addr, consume_from="first") as consumer:
            await consumer.subscribe("Stats")
            got = []
            while len(got) < 6:
                got += await consumer.poll(2.0)
            await consumer.commit()
            cluster.broker.group_rates.sample()
            connection = await admin.consumer_connections("Readers")
            assert "Stats" in connection.subscription_table and len(connection.connection_set) == 1
        progress = await admin.consume_stats("Readers")
        stats_queues = [mq for mq in progress.offsets if mq.topic == "Stats"]
        assert len(stats_queues) == 2 and progress.diff == 0 and progress.consume_tps > 0
        assert sum(progress.offsets[mq].consumer_offset for mq in stats_queues) == 6
        assert all(progress.offsets[mq].last_timestamp > 0 for mq in stats_queues)
        assert "Readers" in await admin.topic_consumed_by("Stats")
        topics = await cluster.call(RequestCode.QUERY_TOPICS_BY_CONSUMER, {"group": "Readers"})
        assert "Stats" in decode_body(TopicList, topics.body).topic_list

        assert await admin.clone_group_offset("Readers", "Copies", "Stats") == ["broker-a"]
        copied = await admin.consume_stats("Copies", "Stats")
        assert copied.consume_tps == 0  # offsets cloned, nothing consumed
        assert sum(w.consumer_offset for w in copied.offsets.values()) == 6
        all_stats = await admin.all_consume_stats()
        assert {"Readers", "Copies"} <= set(all_stats) and all_stats["Copies"].diff == 0

        cq = await admin.query_consume_queue("Stats", 0, 0, 10)
        assert cq.min_queue_index == 0 and cq.max_queue_index == len(cq.queue_data) > 0
        assert all(e.physic_size > 0 for e in cq.queue_data)
        assert [e.physic_offset for e in cq.queue_data] == sorted(e.physic_offset for e in cq.queue_data)
        assert (await admin.query_consume_queue("Stats", 0, 0, 10, group="Others")).filter_data == (
            "Others@Stats is not online!"
        )

        # Unknown names: RocketMQ's codes, with remarks that say what is missing.
        with pytest.raises(AdminRefused, match=r"topic\[Nope\] not exist") as e:
            await admin.consume_stats("Readers", "Nope")
        assert e.value.code == ResponseCode.TOPIC_NOT_EXIST
        with pytest.raises(AdminRefused, match="Nobody does not exist") as e:
            await admin.consume_stats("Nobody")
        assert e.value.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        with pytest.raises(AdminRefused, match="Nobody has no offsets"):
            await admin.clone_group_offset("Nobody", "Copies2")
        with pytest.raises(AdminRefused, match="does not exist"):
            await admin.topic_stats("Nope")
        missing = await cluster.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Nope"})
        assert (missing.code, missing.remark) == (ResponseCode.TOPIC_NOT_EXIST, "topic[Nope] not exist")
        with pytest.raises(AdminRefused, match="7@Stats is not exist!"):
            await admin.query_consume_queue("Stats", 7, 0, 10)
        with pytest.raises(AdminRefused, match="count must be") as e:
            await admin.query_consume_queue("Stats", 0, 0, 0)
        assert e.value.code == ResponseCode.INVALID_PARAMETER
        with pytest.raises(AdminRefused, match="not online") as e:
            await admin.consumer_connections("Nobody")
        assert e.value.code == ResponseCode.CONSUMER_NOT_ONLINE


@pytest.mark.parametrize(
    ("code", "ext"),
    [
        (RequestCode.GET_TOPIC_STATS_INFO, {}),
        (RequestCode.GET_CONSUME_STATS, {"topic": "T"}),
        (RequestCode.QUERY_CONSUME_QUEUE, {"topic": "T", "queueId": "x", "index": "0", "count": "1"}),
        (RequestCode.CLONE_GROUP_OFFSET, {"srcGroup": "a"}),
        (RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {}),
        (RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {}),
    ],
)
async def test_malformed_headers_are_refused_clearly(make_cluster, code, ext):  # noqa: F811
    cluster = await make_cluster()
    answer = await cluster.call(code, ext)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert "RequestHeader" in answer.remark and "Traceback" not in answer.remark
    assert (
        await cluster.call(RequestCode.GET_BROKER_RUNTIME_INFO)
    ).code == ResponseCode.SUCCESS  # still serving


async def test_runtime_info_parses_as_the_exporter_does_and_counts_rates(make_cluster):  # noqa: F811
    cluster = await make_cluster()
    async with Admin(cluster.namesrv_addr) as admin:
        cluster.broker.stats.sample()
        cluster.broker.stats_windows.tick()
        async with Producer("PG", cluster.namesrv_addr) as producer:
            for i in range(5):
                await producer.send(Message("Rates", f"{i}".encode()))
            await producer.instance.heartbeat_all()
            (info,) = (await admin.all_producers(cluster.broker_addr)).data["PG"]
            assert info.client_id and info.remote_ip.startswith("127.0.0.1:") and info.language == "PYTHON"
            assert abs(info.last_update_timestamp / 1000 - time.time()) < 60
        put = await admin.broker_stats(cluster.broker_addr, "TOPIC_PUT_NUMS", "Rates")
        assert (
            put.stats_minute.sum == put.stats_hour.sum == put.stats_day.sum == 5 and put.stats_minute.tps > 0
        )
        size = await admin.broker_stats(cluster.broker_addr, "TOPIC_PUT_SIZE", "Rates")
        assert size.stats_minute.sum > 5 * 100  # whole records
        assert (
            await admin.broker_stats(cluster.broker_addr, "BROKER_PUT_NUMS", "DefaultCluster")
        ).stats_day.sum == 5
        with pytest.raises(AdminRefused, match=r"The stats <TOPIC_PUT_NUMS> <Nope> not exist") as e:
            await admin.broker_stats(cluster.broker_addr, "TOPIC_PUT_NUMS", "Nope")
        assert e.value.code == ResponseCode.SYSTEM_ERROR  # what rocketmq-exporter takes for "no stats"
        table = await admin.broker_runtime(cluster.broker_addr)
        parse_like_the_exporter(table)
        assert int(table["msgPutTotalTodayNow"]) == 5 == int(table["putMessageTimesTotal"])
        assert float(table["putTps"].split()[0]) > 0
        assert set(await admin.system_topics()) >= {
            "DefaultCluster",
            "broker-a",
            "TBW102",
            "SCHEDULE_TOPIC_XXXX",
        }
        assert "Rates" in await admin.topics_by_cluster("DefaultCluster")
        assert "Rates" in (await admin.all_topic_config(cluster.broker_addr)).topic_config_table
        assert "PG" not in (await admin.all_group_config(cluster.broker_addr)).subscription_group_table


async def test_broker_and_namesrv_settings_are_read_and_changed(make_cluster):  # noqa: F811
    cluster = await make_cluster()
    async with Admin(cluster.namesrv_addr) as admin:
        settings = await admin.broker_config(cluster.broker_addr)
        assert settings["brokerName"] == "broker-a" and settings["longPollingEnable"] == "true"
        assert "fileReservedTime" in settings  # store settings too, as in broker.conf
        assert await admin.update_broker_config({"longPollingEnable": "false"}) == [cluster.broker_addr]
        assert cluster.broker.config.long_polling_enable is False
        await admin.create_topic("ReadOnly", queue_nums=1)
        await admin.update_broker_config({"brokerPermission": "4"})  # read-only: routes lose the write bit

        async def read_only() -> bool:
            route = cluster.namesrv.routes.topic_route("ReadOnly")
            return route is not None and route.queue_datas[0].perm == 4

        await eventually(read_only, "the read-only broker's routes")
        async with Producer("PG", cluster.namesrv_addr) as producer:
            with pytest.raises(ClientError):
                await producer.send(Message("ReadOnly", b"refused"))
        await admin.update_broker_config({"brokerPermission": "6"})
        refusals = [
            ({"brokerName": "other"}, ResponseCode.NO_PERMISSION, "cannot be changed"),
            ({"noSuchSetting": "1"}, ResponseCode.INVALID_PARAMETER, "unknown setting .noSuchSetting."),
            ({"defaultTopicQueueNums": "many"}, ResponseCode.INVALID_PARAMETER, "many"),
            ({"brokerRole": "SLAVE"}, ResponseCode.NO_PERMISSION, "brokerRole"),
        ]
        for update, code, words in refusals:
            with pytest.raises(AdminRefused, match=words) as e:
                await admin.update_broker_config(update, broker_addr=cluster.broker_addr)
            assert e.value.code == code
        garbage = await cluster.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"not a setting line")
        assert garbage.code == ResponseCode.INVALID_PARAMETER and "not key=value" in garbage.remark
        assert cluster.broker.config.broker_name == "broker-a"

        (namesrv_settings,) = (await admin.namesrv_config()).values()
        assert namesrv_settings["brokerChannelExpiredTime"] == "120000"
        await admin.update_namesrv_config({"brokerChannelExpiredTime": "60000"})
        assert cluster.namesrv.routes.broker_timeout == 60.0
        with pytest.raises(AdminRefused, match="must be positive") as e:
            await admin.update_namesrv_config({"brokerChannelExpiredTime": "-1"})
        assert e.value.code == ResponseCode.INVALID_PARAMETER
        assert cluster.namesrv.config.broker_channel_expired_time == 60000  # all or nothing
        with pytest.raises(AdminRefused, match="listenPort") as e:
            await admin.update_namesrv_config({"listenPort": "1"})
        assert e.value.code == ResponseCode.NO_PERMISSION


async def test_write_permission_is_wiped_and_restored_on_the_namesrv(make_cluster):  # noqa: F811
    cluster = await make_cluster()
    async with Admin(cluster.namesrv_addr) as admin:
        await admin.create_topic("Perm", queue_nums=1)
        await eventually(lambda: _has(admin, "Perm"), "the topic's route")
        (wiped,) = (await admin.wipe_write_perm("broker-a")).values()
        assert wiped > 0
        route = cluster.namesrv.routes.topic_route("Perm")
        assert route is not None and not route.queue_datas[0].perm & 2
        (added,) = (await admin.add_write_perm("broker-a")).values()
        assert added == wiped
        route = cluster.namesrv.routes.topic_route("Perm")
        assert route is not None and route.queue_datas[0].perm & 2


async def test_consumer_running_info_is_relayed_to_the_client(make_cluster):  # noqa: F811
    cluster = await make_cluster()
    consumer = RemotingClient()
    asked = []

    async def running_info(connection, request):
        asked.append(dict(request.ext_fields))
        info = ConsumerRunningInfo(properties={"consumeType": "CONSUME_PASSIVELY"})
        return request.make_response(ResponseCode.SUCCESS, body=encode_body(info))

    consumer.register(RequestCode.GET_CONSUMER_RUNNING_INFO, running_info)
    heartbeat = HeartbeatData(
        client_id="10.0.0.9@7",
        consumer_data_set=[ConsumerData("Live", "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET",
                                        [SubscriptionData("Live", "*")])],
    )  # fmt: skip
    try:
        from ferrymq.protocol.remoting import RemotingCommand

        answer = await consumer.invoke(
            cluster.broker_addr, RemotingCommand(RequestCode.HEART_BEAT, body=encode_body(heartbeat))
        )
        assert answer.code == ResponseCode.SUCCESS
        async with Admin(cluster.namesrv_addr) as admin:
            info = await admin.consumer_running_info("Live", "10.0.0.9@7", jstack=True)
            assert info.properties == {"consumeType": "CONSUME_PASSIVELY"}
            assert asked == [{"consumerGroup": "Live", "clientId": "10.0.0.9@7", "jstackEnable": "true"}]
            with pytest.raises(AdminRefused, match="not online"):
                await admin.consumer_running_info("Live", "someone-else")
    finally:
        await consumer.close()


async def test_topics_and_groups_are_created_in_bulk_all_or_nothing(make_cluster):  # noqa: F811
    cluster = await make_cluster()
    async with Admin(cluster.namesrv_addr) as admin:
        await admin.create_topics([TopicConfig(f"Bulk{i}", 2, 2) for i in range(50)])
        table = (await admin.all_topic_config(cluster.broker_addr)).topic_config_table
        assert all(table[f"Bulk{i}"].write_queue_nums == 2 for i in range(50))
        assert cluster.broker.store.queues.get("Bulk49", 1) is not None  # ConsumeQueues made at creation
        await eventually(lambda: _has(admin, "Bulk49"), "the topics' routes")
        with pytest.raises(AdminRefused, match="Bad Name: the topic name") as e:
            await admin.create_topics([TopicConfig("Fine"), TopicConfig("Bad Name")])
        assert e.value.code == ResponseCode.INVALID_PARAMETER
        with pytest.raises(AdminRefused, match="queue numbers"):
            await admin.create_topics([TopicConfig("Huge", 5000, 5000)])
        assert "Fine" not in (await admin.all_topic_config(cluster.broker_addr)).topic_config_table

        await admin.create_groups([SubscriptionGroupConfig(f"G{i}", retry_max_times=3) for i in range(30)])
        groups = (await admin.all_group_config(cluster.broker_addr)).subscription_group_table
        assert groups["G29"].retry_max_times == 3
        assert {f"G{i}" for i in range(30)} <= set(await admin.groups())
        empty = await cluster.call(
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST, body=b'{"groupConfigList":[]}'
        )
        assert empty.code == ResponseCode.INVALID_PARAMETER and "empty" in empty.remark
        garbage = await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC_LIST, body=b"{not json")
        assert garbage.code == ResponseCode.SYSTEM_ERROR and "CreateTopicListRequestBody" in garbage.remark
