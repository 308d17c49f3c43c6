"""Tag and SQL92 filtering end to end: producer → broker (filters) → push and pull consumers."""

from __future__ import annotations

import pytest

from ferrymq.client import ClientError, Message, MessageSelector, Producer, PullConsumer, PushConsumer
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.hashes import java_hash
from ferrymq.protocol.message_ext import decode_records

from .conftest import eventually

ORDERS = [  # (body, properties)
    (b"eu-big", {"region": "eu", "amount": "500"}),
    (b"eu-small", {"region": "eu", "amount": "5"}),
    (b"us-big", {"region": "us", "amount": "900"}),
    (b"no-amount", {"region": "eu"}),
    (b"bare", {"xregion": "eu", "the_amount": "7"}),  # names that end like the ones filtered on
]


async def publish(producer, topic: str) -> None:
    for body, props in ORDERS:
        await producer.send(Message(topic, body, properties=props))


async def poll_all(consumer: PullConsumer, want: int) -> list[bytes]:
    got: list[bytes] = []
    for _ in range(50):
        got += [m.body for m in await consumer.poll(0.3)]
        if len(got) >= want:
            got += [m.body for m in await consumer.poll(0.3)]  # and nothing more arrives
            break
    return got


async def raw_pull(cluster, topic: str, expression: str, expression_type: str):
    """One PULL_MESSAGE of queue 0 from its start, with the subscription in the request."""
    ext = {"consumerGroup": "raw", "topic": topic, "queueId": 0, "queueOffset": 0, "maxMsgNums": 32,
           "sysFlag": 4, "commitOffset": -1, "suspendTimeoutMillis": 0, "subscription": expression,
           "subVersion": 0, "expressionType": expression_type}  # fmt: skip
    return await cluster.call(RequestCode.PULL_MESSAGE, ext)


async def test_push_consumer_gets_only_what_the_sql_selects(cluster, make_topic, producer, start_consumer):
    await make_topic("Orders", 2)
    got: list[bytes] = []

    async def listener(messages):
        got.extend(m.body for m in messages)

    await start_consumer(
        "big-eu",
        "Orders",
        listener,
        MessageSelector.sql("region = 'eu' AND amount > 100"),
        consume_from="first",
    )
    await publish(producer, "Orders")
    await producer.send(Message("Orders", b"eu-late", properties={"region": "eu", "amount": "101"}))
    await eventually(lambda: len(got) >= 2, what="the matching messages")
    assert sorted(got) == [b"eu-big", b"eu-late"]


async def test_pull_consumer_sql_with_nulls_in_and_not(cluster, make_topic, producer):
    await make_topic("Orders", 2)
    await publish(producer, "Orders")
    await cluster.settled()
    cases = {
        "amount IS NULL": [b"bare", b"no-amount"],
        "region IS NULL": [b"bare"],
        "region IN ('us', 'asia') OR amount < 10": [b"eu-small", b"us-big"],
        "NOT (region = 'eu')": [b"us-big"],  # a message without `region` is not "not eu": unknown
        "amount BETWEEN 5 AND 500": [b"eu-big", b"eu-small"],
    }
    for n, (expression, expected) in enumerate(cases.items()):
        async with PullConsumer(f"pull-{n}", cluster.namesrv_addr, consume_from="first") as consumer:
            await consumer.subscribe("Orders", MessageSelector.sql(expression))
            assert sorted(await poll_all(consumer, len(expected))) == expected, expression


async def test_bad_expressions_fail_at_subscribe_and_in_the_pull_answer(cluster, make_topic):
    await make_topic("Orders", 1)
    consumer = PushConsumer("bad", cluster.namesrv_addr)
    consumer.subscribe("Orders", MessageSelector.sql("amount >"), lambda messages: True)
    with pytest.raises(ClientError, match=r"bad SQL92 expression 'amount >'.*expected a value"):
        await consumer.start()
    async with PullConsumer("bad-pull", cluster.namesrv_addr) as pull_consumer:
        with pytest.raises(ClientError, match="NULL cannot be compared"):
            await pull_consumer.subscribe("Orders", MessageSelector.sql("a = NULL"))
    response = await raw_pull(cluster, "Orders", "a >>> 1", "SQL92")
    assert response.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert "bad SQL92 expression" in response.remark


async def test_sql_is_refused_clearly_while_the_broker_has_it_off(make_cluster):
    cluster = await make_cluster()  # RocketMQ's default: enable_property_filter = false
    async with Producer("p", cluster.namesrv_addr) as producer:
        mq = (await producer.send(Message("Off", b"x"))).message_queue
    async with PullConsumer("off", cluster.namesrv_addr) as consumer:
        with pytest.raises(ClientError, match="enable_property_filter = true"):
            await consumer.assign([mq], MessageSelector.sql("a > 1"))
    response = await raw_pull(cluster, "Off", "a > 1", "SQL92")
    assert response.code == ResponseCode.SYSTEM_ERROR and "does not support" in response.remark


async def test_tags_filter_by_hash_on_the_broker_and_exactly_in_the_client(cluster, make_topic, producer):
    assert java_hash("Aa") == java_hash("BB")  # a real collision: the broker cannot tell them apart
    await make_topic("Tagged", 1)
    for tag in ("Aa", "BB", "Cc", "Aa"):
        await producer.send(Message("Tagged", tag.encode(), tags=tag))
    await cluster.settled()
    raw = await raw_pull(cluster, "Tagged", "Aa", "TAG")
    assert raw.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_records(raw.body)] == [b"Aa", b"BB", b"Aa"]  # the broker passes the twin
    async with PullConsumer("tags", cluster.namesrv_addr, consume_from="first") as consumer:
        await consumer.subscribe("Tagged", "Aa")
        assert await poll_all(consumer, 2) == [b"Aa", b"Aa"]  # the client drops it
