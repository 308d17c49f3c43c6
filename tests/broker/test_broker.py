"""Every request the Broker serves, over real sockets, answered as a RocketMQ broker would."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferrymq.broker.persisted import load_json
from ferrymq.net import RemotingClient
from ferrymq.protocol.batch import encode_batch
from ferrymq.protocol.bodies import (
    PAUSED,
    ConsumerData,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    KVTable,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    ProducerData,
    SubscriptionData,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
    decode_body,
    encode_body,
)
from ferrymq.protocol.codes import RequestCode as Req
from ferrymq.protocol.codes import ResponseCode as Res
from ferrymq.protocol.message_ext import decode_record, decode_records
from ferrymq.protocol.message_id import parse_offset_msg_id
from ferrymq.protocol.properties import encode_properties
from ferrymq.protocol.remoting import RemotingCommand

SUSPEND_AND_SUBSCRIPTION = 0x2 | 0x4


def send_ext(topic: str, queue_id: int = 0, props: dict | None = None, **extra) -> dict:
    ext = {
        "producerGroup": "PG",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "queueId": queue_id,
        "sysFlag": 0,
        "bornTimestamp": int(time.time() * 1000),
        "flag": 0,
        "properties": encode_properties(props or {}),
    }
    ext.update(extra)
    return ext


def v2(ext: dict) -> dict:
    letters = dict(
        zip(
            [
                "producerGroup",
                "topic",
                "defaultTopic",
                "defaultTopicQueueNums",
                "queueId",
                "sysFlag",
                "bornTimestamp",
                "flag",
                "properties",
            ],
            "abcdefghi",
            strict=True,
        )
    )
    return {letters.get(k, k): v for k, v in ext.items()}


def pull_ext(
    topic: str, queue_id: int, offset: int, *, group="CG", sub="*", suspend_ms=0, sys_flag=None
) -> dict:
    return {
        "consumerGroup": group,
        "topic": topic,
        "queueId": queue_id,
        "queueOffset": offset,
        "maxMsgNums": 32,
        "sysFlag": sys_flag if sys_flag is not None else (SUSPEND_AND_SUBSCRIPTION if suspend_ms else 0x4),
        "commitOffset": -1,
        "suspendTimeoutMillis": suspend_ms,
        "subVersion": 0,
        "subscription": sub,
        "expressionType": "TAG",
    }


async def send(cluster, topic="T", queue_id=0, body=b"hello", props=None, code=Req.SEND_MESSAGE):
    ext = send_ext(topic, queue_id, props)
    return await cluster.call(code, v2(ext) if code == Req.SEND_MESSAGE_V2 else ext, body)


async def test_send_all_three_ways_and_read_back(cluster):
    one = await send(cluster, body=b"long-names", props={"KEYS": "k1", "TAGS": "A"})
    two = await send(cluster, body=b"letters", code=Req.SEND_MESSAGE_V2)
    batch_body = encode_batch(
        [(f"b{i}".encode(), encode_properties({"UNIQ_KEY": f"U{i}"}).encode(), 0) for i in range(3)]
    )
    three = await cluster.call(Req.SEND_BATCH_MESSAGE, send_ext("T", batch="true"), batch_body)
    assert [r.code for r in (one, two, three)] == [Res.SUCCESS] * 3
    assert [int(r.ext_fields["queueOffset"]) for r in (one, two, three)] == [0, 1, 2]
    assert len(three.ext_fields["msgId"].split(",")) == 3
    _, port, offset = parse_offset_msg_id(one.ext_fields["msgId"])
    assert port == cluster.broker.config.listen_port
    assert one.ext_fields["MSG_REGION"] == "DefaultRegion"
    pulled = await cluster.call(Req.PULL_MESSAGE, pull_ext("T", 0, 0, suspend_ms=5000))
    assert pulled.code == Res.SUCCESS
    msgs = decode_records(pulled.body, verify_crc=True)
    assert [m.body for m in msgs] == [b"long-names", b"letters", b"b0", b"b1", b"b2"]
    assert msgs[0].commitlog_offset == offset and msgs[0].keys == ["k1"]
    assert msgs[0].born_host[0] == "127.0.0.1"
    assert pulled.ext_fields["nextBeginOffset"] == "5" and pulled.ext_fields["maxOffset"] == "5"


async def test_auto_created_topic_gets_a_route_at_the_nameserver(cluster):
    assert (await send(cluster, topic="Fresh")).code == Res.SUCCESS
    deadline = time.monotonic() + 10
    while True:
        route = await cluster.call(Req.GET_ROUTEINFO_BY_TOPIC, {"topic": "Fresh"}, to=cluster.namesrv_addr)
        if route.code == Res.SUCCESS or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    data = decode_body(TopicRouteData, route.body)
    assert data.queue_datas[0].write_queue_nums == 4  # min(defaultTopicQueueNums, TBW102's 8)
    assert data.broker_datas[0].broker_addrs == {0: cluster.broker_addr}


CREATE_T = {"topic": "T", "defaultTopic": "TBW102", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6,
            "topicFilterType": "SINGLE_TAG"}  # fmt: skip


async def test_an_admin_topic_creation_is_on_disk_when_answered(cluster):
    """Even while the topic file is being written in the background for retry topics made before."""
    topics = cluster.broker.topics
    for i in range(200):
        await asyncio.sleep(0)
        topics.ensure(f"%RETRY%g{i}", 1)
    assert (await cluster.call(Req.UPDATE_AND_CREATE_TOPIC, CREATE_T)).code == Res.SUCCESS
    assert "T" in load_json(topics.path, TopicConfigSerializeWrapper).topic_config_table


async def test_a_deleted_topic_is_not_auto_created_again_for_a_while(make_cluster, tmp_path):
    held = await make_cluster()
    assert (await held.call(Req.UPDATE_AND_CREATE_TOPIC, CREATE_T)).code == Res.SUCCESS
    assert (await held.call(Req.DELETE_TOPIC_IN_BROKER, {"topic": "T"})).code == Res.SUCCESS
    refused = await send(held)  # a producer with the route from before (the topic moved elsewhere)
    assert refused.code == Res.TOPIC_NOT_EXIST and "auto_create_hold_after_delete" in refused.remark
    assert held.broker.topics.get("T") is None
    assert (await send(held, topic="Other")).code == Res.SUCCESS  # other topics are auto-created
    assert (await held.call(Req.UPDATE_AND_CREATE_TOPIC, CREATE_T)).code == Res.SUCCESS
    assert (await send(held)).code == Res.SUCCESS  # created on purpose again: the hold is over

    unheld = await make_cluster(broker_name="broker-b", store_path_root_dir=tmp_path / "b",
                                auto_create_hold_after_delete=0)  # fmt: skip
    assert (await unheld.call(Req.UPDATE_AND_CREATE_TOPIC, CREATE_T)).code == Res.SUCCESS
    assert (await unheld.call(Req.DELETE_TOPIC_IN_BROKER, {"topic": "T"})).code == Res.SUCCESS
    assert (await send(unheld)).code == Res.SUCCESS


async def test_send_errors_are_clear(make_cluster):
    cluster = await make_cluster(auto_create_topic_enable=False, max_message_size=1000)
    missing = await send(cluster, topic="Nope")
    assert missing.code == Res.TOPIC_NOT_EXIST and "Nope" in missing.remark
    await cluster.call(Req.UPDATE_AND_CREATE_TOPIC, CREATE_T)
    too_big = await send(cluster, body=b"x" * 1001)
    assert too_big.code == Res.MESSAGE_ILLEGAL and "max_message_size" in too_big.remark
    bad_queue = await send(cluster, queue_id=7)
    assert bad_queue.code == Res.SYSTEM_ERROR and "queueId 7" in bad_queue.remark
    bad_name = await send(cluster, topic="bad topic!")
    assert bad_name.code in (Res.MESSAGE_ILLEGAL, Res.TOPIC_NOT_EXIST)
    no_header = await cluster.call(Req.SEND_MESSAGE, {"topic": "T"}, b"x")
    assert no_header.code == Res.SYSTEM_ERROR and "producerGroup" in no_header.remark
    unknown = await cluster.call(99999)
    assert unknown.code == Res.REQUEST_CODE_NOT_SUPPORTED


async def test_pull_statuses_and_tag_filter(cluster):
    for i in range(6):
        await send(cluster, body=f"{i}".encode(), props={"TAGS": "AB"[i % 2]})
    await cluster.settled()
    only_b = await cluster.call(Req.PULL_MESSAGE, pull_ext("T", 0, 0, sub="B"))
    assert [m.body for m in decode_records(only_b.body)] == [b"1", b"3", b"5"]
    a_or_b = await cluster.call(Req.PULL_MESSAGE, pull_ext("T", 0, 0, sub="A || B"))
    assert len(decode_records(a_or_b.body)) == 6
    at_end = await cluster.call(Req.PULL_MESSAGE, pull_ext("T", 0, 6))
    assert at_end.code == Res.PULL_NOT_FOUND and at_end.ext_fields["nextBeginOffset"] == "6"
    past_end = await cluster.call(Req.PULL_MESSAGE, pull_ext("T", 0, 60))
    assert past_end.code == Res.PULL_OFFSET_MOVED
    bad_expr = await cluster.call(Req.PULL_MESSAGE, pull_ext("T", 0, 0, sub="A ||"))
    assert bad_expr.code == Res.SUBSCRIPTION_PARSE_FAILED
    sql = await cluster.call(
        Req.PULL_MESSAGE, {**pull_ext("T", 0, 0), "expressionType": "SQL92", "subscription": "a > 1"}
    )
    assert sql.code == Res.SYSTEM_ERROR and "SQL92" in sql.remark  # RocketMQ's answer: property filter off
    no_topic = await cluster.call(Req.PULL_MESSAGE, pull_ext("Unknown", 0, 0))
    assert no_topic.code == Res.TOPIC_NOT_EXIST
    no_sub = await cluster.call(Req.PULL_MESSAGE, pull_ext("T", 0, 0, sys_flag=0))
    assert no_sub.code == Res.SUBSCRIPTION_NOT_EXIST  # no heartbeat told the broker what CG wants


async def test_long_poll_is_answered_as_soon_as_a_message_arrives(cluster):
    await send(cluster, body=b"first")
    await cluster.settled()
    started = time.monotonic()
    held = asyncio.create_task(
        cluster.call(Req.PULL_MESSAGE, pull_ext("T", 0, 1, suspend_ms=20_000), timeout=30)
    )
    await asyncio.sleep(0.2)
    assert not held.done()  # parked, not answered empty
    assert cluster.broker.hold.waiting() == 1
    await send(cluster, body=b"second")
    response = await asyncio.wait_for(held, 10)
    assert response.code == Res.SUCCESS
    assert [m.body for m in decode_records(response.body)] == [b"second"]
    assert time.monotonic() - started < 10  # long before the 20 s suspend timeout


async def test_long_poll_times_out_with_not_found(cluster):
    await send(cluster)
    await cluster.settled()
    started = time.monotonic()
    response = await cluster.call(Req.PULL_MESSAGE, pull_ext("T", 0, 1, suspend_ms=300))
    assert response.code == Res.PULL_NOT_FOUND
    assert time.monotonic() - started >= 0.29
    assert cluster.broker.hold.waiting() == 0


async def test_consumer_offsets_and_queue_bounds(cluster):
    for i in range(5):
        await send(cluster, body=f"{i}".encode())
    await cluster.settled()
    fresh = await cluster.call(
        Req.QUERY_CONSUMER_OFFSET, {"consumerGroup": "New", "topic": "T", "queueId": 0}
    )
    assert (fresh.code, fresh.ext_fields["offset"]) == (
        Res.SUCCESS,
        "0",
    )  # min offset 0: start at the beginning
    strict = await cluster.call(
        Req.QUERY_CONSUMER_OFFSET,
        {"consumerGroup": "New", "topic": "T", "queueId": 0, "setZeroIfNotFound": "false"},
    )
    assert strict.code == Res.QUERY_NOT_FOUND
    await cluster.call(
        Req.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "T", "queueId": 0, "commitOffset": 3}
    )
    got = await cluster.call(Req.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "T", "queueId": 0})
    assert got.ext_fields["offset"] == "3"
    committed_by_pull = pull_ext("T", 0, 4, group="G", sys_flag=0x1 | 0x4)
    committed_by_pull["commitOffset"] = 4
    await cluster.call(Req.PULL_MESSAGE, committed_by_pull)
    got = await cluster.call(Req.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "T", "queueId": 0})
    assert got.ext_fields["offset"] == "4"
    assert (await cluster.call(Req.GET_MAX_OFFSET, {"topic": "T", "queueId": 0})).ext_fields["offset"] == "5"
    assert (await cluster.call(Req.GET_MIN_OFFSET, {"topic": "T", "queueId": 0})).ext_fields["offset"] == "0"
    earliest = await cluster.call(Req.GET_EARLIEST_MSG_STORETIME, {"topic": "T", "queueId": 0})
    stamp = int(earliest.ext_fields["timestamp"])
    assert abs(stamp - time.time() * 1000) < 60_000
    lower = await cluster.call(
        Req.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "T", "queueId": 0, "timestamp": stamp}
    )
    assert lower.ext_fields["offset"] == "0"
    future = await cluster.call(
        Req.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "T", "queueId": 0, "timestamp": stamp + 10**7}
    )
    assert future.ext_fields["offset"] == "5"
    bad = await cluster.call(
        Req.SEARCH_OFFSET_BY_TIMESTAMP,
        {"topic": "T", "queueId": 0, "timestamp": 1, "boundaryType": "sideways"},
    )
    assert bad.code == Res.INVALID_PARAMETER


def heartbeat(client_id: str, group: str, topic: str = "T") -> bytes:
    consumer = ConsumerData(
        group_name=group,
        consume_type="CONSUME_PASSIVELY",
        message_model="CLUSTERING",
        consume_from_where="CONSUME_FROM_LAST_OFFSET",
        subscription_data_set=[SubscriptionData(topic=topic, sub_string="*")],
    )
    return encode_body(
        HeartbeatData(
            client_id=client_id,
            consumer_data_set=[consumer],
            producer_data_set=[ProducerData(group_name="PG")],
        )
    )


async def test_heartbeats_membership_and_rebalance_notices(cluster):
    notices: asyncio.Queue[str] = asyncio.Queue()
    first = RemotingClient()

    async def on_notice(conn, request: RemotingCommand):
        notices.put_nowait(request.ext_fields["consumerGroup"])

    first.register(Req.NOTIFY_CONSUMER_IDS_CHANGED, on_notice)
    second = RemotingClient()
    try:
        hb = RemotingCommand(Req.HEART_BEAT, body=heartbeat("c1", "G"))
        assert (await first.invoke(cluster.broker_addr, hb)).code == Res.SUCCESS
        assert await asyncio.wait_for(notices.get(), 5) == "G"
        await second.invoke(cluster.broker_addr, RemotingCommand(Req.HEART_BEAT, body=heartbeat("c2", "G")))
        assert await asyncio.wait_for(notices.get(), 5) == "G"  # told at once that c2 joined
        members = await cluster.call(Req.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})
        assert decode_body(GetConsumerListByGroupResponseBody, members.body).consumer_id_list == ["c1", "c2"]
        topics = decode_body(TopicConfigSerializeWrapper, (await cluster.call(Req.GET_ALL_TOPIC_CONFIG)).body)
        assert "%RETRY%G" in topics.topic_config_table
        await second.close()  # c2's connection goes: the group changes again
        assert await asyncio.wait_for(notices.get(), 5) == "G"
        members = await cluster.call(Req.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})
        assert decode_body(GetConsumerListByGroupResponseBody, members.body).consumer_id_list == ["c1"]
        await first.invoke(
            cluster.broker_addr,
            RemotingCommand(Req.UNREGISTER_CLIENT, ext_fields={"clientID": "c1", "consumerGroup": "G"}),
        )
        empty = await cluster.call(Req.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})
        assert empty.code == Res.SYSTEM_ERROR and "no consumer" in empty.remark
    finally:
        await first.close()
        await second.close()


async def test_pull_uses_the_heartbeat_subscription(cluster):
    await send(cluster, body=b"x", props={"TAGS": "A"})
    await cluster.settled()
    await cluster.call(Req.HEART_BEAT, body=heartbeat("c1", "G"))
    pulled = await cluster.call(Req.PULL_MESSAGE, pull_ext("T", 0, 0, group="G", sys_flag=0))
    assert pulled.code == Res.SUCCESS


async def test_queue_locks_for_orderly_consumers(cluster):
    mqs = [MessageQueue(topic="T", broker_name="broker-a", queue_id=i) for i in range(3)]

    async def lock(client_id, wanted, code=Req.LOCK_BATCH_MQ):
        body = encode_body(LockBatchRequestBody(consumer_group="G", client_id=client_id, mq_set=wanted))
        response = await cluster.call(code, body=body)
        return decode_body(LockBatchResponseBody, response.body).lock_ok_mq_set if response.body else []

    assert sorted(m.queue_id for m in await lock("a", mqs[:2])) == [0, 1]
    assert [m.queue_id for m in await lock("b", mqs)] == [2]
    assert sorted(m.queue_id for m in await lock("a", mqs[:2])) == [0, 1]  # renewing own locks
    await lock("a", mqs[:1], Req.UNLOCK_BATCH_MQ)
    assert [m.queue_id for m in await lock("b", mqs[:2])] == [0]


async def test_a_topic_is_created_with_its_message_type_attribute(cluster):
    create = {
        "topic": "Typed", "defaultTopic": "TBW102", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6,
        "topicFilterType": "SINGLE_TAG", "attributes": "+message.type=FIFO",
    }  # fmt: skip
    assert (await cluster.call(Req.UPDATE_AND_CREATE_TOPIC, create)).code == Res.SUCCESS
    got = await cluster.call(Req.GET_TOPIC_CONFIG, {"topic": "Typed"})
    assert got.code == Res.SUCCESS and decode_body(TopicConfig, got.body).attributes == {
        "message.type": "FIFO"
    }
    # an update without attributes keeps them; "-key" removes one
    assert (await cluster.call(Req.UPDATE_AND_CREATE_TOPIC, {**create, "attributes": ""})).code == Res.SUCCESS
    assert cluster.broker.topics.get("Typed").attributes == {"message.type": "FIFO"}
    removed = await cluster.call(Req.UPDATE_AND_CREATE_TOPIC, {**create, "attributes": "-message.type"})
    assert removed.code == Res.SUCCESS and cluster.broker.topics.get("Typed").attributes == {}
    for bad in ("+message.type=ODD", "+message.type=MIXED", "message.type"):
        refused = await cluster.call(Req.UPDATE_AND_CREATE_TOPIC, {**create, "attributes": bad})
        assert refused.code == Res.INVALID_PARAMETER, bad
    missing = await cluster.call(Req.GET_TOPIC_CONFIG, {"topic": "Untyped"})
    assert missing.code == Res.TOPIC_NOT_EXIST


async def test_admin_topics_groups_and_lookups(cluster):
    create = {
        "topic": "Admin",
        "defaultTopic": "TBW102",
        "readQueueNums": 3,
        "writeQueueNums": 3,
        "perm": 6,
        "topicFilterType": "SINGLE_TAG",
    }
    assert (await cluster.call(Req.UPDATE_AND_CREATE_TOPIC, create)).code == Res.SUCCESS
    bad = await cluster.call(Req.UPDATE_AND_CREATE_TOPIC, {**create, "topic": "no spaces allowed"})
    assert bad.code == Res.INVALID_PARAMETER
    table = decode_body(TopicConfigSerializeWrapper, (await cluster.call(Req.GET_ALL_TOPIC_CONFIG)).body)
    assert table.topic_config_table["Admin"].write_queue_nums == 3
    sent = await send(cluster, topic="Admin", queue_id=2, body=b"find me", props={"KEYS": "order-42"})
    _, _, offset = parse_offset_msg_id(sent.ext_fields["msgId"])
    view = await cluster.call(Req.VIEW_MESSAGE_BY_ID, {"offset": offset})
    assert decode_record(view.body).body == b"find me"
    assert (await cluster.call(Req.VIEW_MESSAGE_BY_ID, {"offset": offset + 3})).code == Res.SYSTEM_ERROR
    query = {"topic": "Admin", "key": "order-42", "maxNum": 10, "beginTimestamp": 0, "endTimestamp": 2**62}
    deadline = time.monotonic() + 10
    while (found := await cluster.call(Req.QUERY_MESSAGE, query)).code != Res.SUCCESS:  # the index trails
        assert time.monotonic() < deadline, found.remark
        await asyncio.sleep(0.02)
    assert [m.body for m in decode_records(found.body)] == [b"find me"]
    assert (await cluster.call(Req.QUERY_MESSAGE, {**query, "key": "nope"})).code == Res.QUERY_NOT_FOUND
    group = encode_body(SubscriptionGroupConfig(group_name="GA", retry_max_times=3))
    assert (await cluster.call(Req.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=group)).code == Res.SUCCESS
    groups = decode_body(
        SubscriptionGroupWrapper, (await cluster.call(Req.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)).body
    )
    assert groups.subscription_group_table["GA"].retry_max_times == 3
    await cluster.call(Req.DELETE_SUBSCRIPTIONGROUP, {"groupName": "GA"})
    groups = decode_body(
        SubscriptionGroupWrapper, (await cluster.call(Req.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)).body
    )
    assert "GA" not in groups.subscription_group_table
    info = decode_body(KVTable, (await cluster.call(Req.GET_BROKER_RUNTIME_INFO)).body).table
    assert int(info["commitLogMaxOffset"]) > 0
    assert (await cluster.call(Req.DELETE_TOPIC_IN_BROKER, {"topic": "Admin"})).code == Res.SUCCESS
    assert (await cluster.call(Req.PULL_MESSAGE, pull_ext("Admin", 0, 0))).code == Res.TOPIC_NOT_EXIST


async def test_restart_keeps_topics_offsets_and_messages(make_cluster):
    cluster = await make_cluster()
    for i in range(3):
        await send(cluster, topic="Kept", body=f"{i}".encode())
    await cluster.call(
        Req.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "Kept", "queueId": 0, "commitOffset": 2}
    )
    await cluster.broker.stop()
    again = await make_cluster(cluster.namesrv)
    got = await again.call(Req.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "Kept", "queueId": 0})
    assert got.ext_fields["offset"] == "2"
    pulled = await again.call(Req.PULL_MESSAGE, pull_ext("Kept", 0, 2))
    assert [m.body for m in decode_records(pulled.body)] == [b"2"]
    assert int((await send(again, topic="Kept")).ext_fields["queueOffset"]) == 3


async def test_a_slow_long_poll_does_not_block_other_requests_on_its_connection(cluster):
    held = asyncio.create_task(
        cluster.call(Req.PULL_MESSAGE, pull_ext("Quiet", 0, 0, suspend_ms=5000), timeout=10)
    )
    await send(cluster, topic="Quiet2")  # auto-creates Quiet2; "Quiet" itself does not exist yet
    assert (await held).code == Res.TOPIC_NOT_EXIST  # answered at once, nothing to hold
    await send(cluster, topic="Quiet")
    await cluster.settled()
    held = asyncio.create_task(
        cluster.call(Req.PULL_MESSAGE, pull_ext("Quiet", 0, 1, suspend_ms=5000), timeout=10)
    )
    await asyncio.sleep(0.1)
    started = time.monotonic()
    assert (await send(cluster, topic="Other")).code == Res.SUCCESS  # same client connection
    assert time.monotonic() - started < 2
    held.cancel()


@pytest.mark.parametrize(
    "garbage", [b"\x7f\xff\xff\xff", b"\x00\x00\x00\x08\x00\x00\x00\x10{broken", b"\x00\x00"]
)
async def test_malformed_frames_close_only_that_connection(cluster, garbage):
    host, port = cluster.broker_addr.split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(garbage)
    await writer.drain()
    writer.write_eof()
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed on us, no crash
    writer.close()
    assert (await send(cluster)).code == Res.SUCCESS  # everyone else is still served


async def test_a_topic_made_while_a_registration_is_on_its_way_reaches_the_nameserver_at_once(cluster):
    broker = cluster.broker
    broker.topics.ensure("First", 1)
    broker.schedule_registration()
    await asyncio.sleep(0)  # the registration has taken the topic table and waits on the NameServer
    broker.topics.ensure("Second", 1)
    broker.schedule_registration()
    deadline = time.monotonic() + 10  # well under the 30 s registration period
    while True:
        route = await cluster.call(Req.GET_ROUTEINFO_BY_TOPIC, {"topic": "Second"}, to=cluster.namesrv_addr)
        if route.code == Res.SUCCESS:
            break
        assert time.monotonic() < deadline, "the second topic waited for the next registration period"
        await asyncio.sleep(0.05)


async def test_a_paused_groups_pull_is_held_and_answered_not_refused(cluster):
    """A pull runs eagerly, outside any task, up to its first wait (net.dispatch): the wait of a
    paused group's pull must not need one."""
    assert (await send(cluster)).code == Res.SUCCESS
    cluster.broker.consumption.update(SubscriptionGroupConfig("CG", attributes={PAUSED: "true"}))
    started = time.monotonic()
    pulled = await cluster.call(Req.PULL_MESSAGE, pull_ext("T", 0, 0, suspend_ms=300))
    assert pulled.code == Res.PULL_NOT_FOUND, pulled.remark  # held its suspend time, nothing taken
    assert time.monotonic() - started >= 0.25
