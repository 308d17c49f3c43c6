"""The SDK's SimpleConsumer, and pop, pull and push groups sharing one topic."""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.client import ClientError, ConsumeResult, Message, PullConsumer, SimpleConsumer
from ferrymq.client import sync as blocking
from tests.client.conftest import make_topic, producer, start_consumer

__all__ = ["make_topic", "producer", "start_consumer"]


async def test_receive_ack_and_redelivery(cluster, make_topic, producer):
    await make_topic("S", 2)
    for i in range(5):
        await producer.send(Message("S", f"m{i}".encode(), tags="A" if i % 2 else "B", keys=f"k{i}"))
    async with SimpleConsumer("SG", cluster.namesrv_addr, subscriptions={"S": "A"}, await_duration=2) as c:
        got = []
        while len(got) < 2:
            got += await c.receive(16, invisible_duration=60)
        assert sorted(m.body for m in got) == [b"m1", b"m3"]
        assert all(m.delivery_attempt == 1 and m.tags == "A" for m in got)
        keep, drop = sorted(got, key=lambda m: m.body)
        await c.ack(keep)
        with pytest.raises(ClientError, match="not current"):
            await c.ack(keep)  # twice: the handle is spent
        await c.change_invisible_duration(drop, 0)  # give it back now
        again = await c.receive(16, invisible_duration=10)
        while not again:
            again = await c.receive(16, invisible_duration=10)
        assert [(m.body, m.delivery_attempt, m.keys) for m in again] == [(drop.body, 2, drop.keys)]
        await c.ack(again[0])


async def test_change_invisible_duration_replaces_the_handle(cluster, make_topic, producer):
    await make_topic("S", 1)
    await producer.send(Message("S", b"x"))
    async with SimpleConsumer("SG", cluster.namesrv_addr, subscriptions={"S": "*"}, await_duration=2) as c:
        [m] = await c.receive(1, invisible_duration=1)
        old = m.receipt_handle
        new = await c.change_invisible_duration(m, 30)
        assert new != old and m.receipt_handle == new
        await asyncio.sleep(1.2)  # past the first invisible time: still held by the new one
        assert await c.receive(1, invisible_duration=30) == []
        await c.ack(m)


async def test_unknown_topic_and_no_subscription_fail_clearly(cluster):
    consumer = SimpleConsumer("SG", cluster.namesrv_addr, subscriptions={"missing": "*"})
    with pytest.raises(ClientError, match="does not exist"):
        await consumer.start()
    await consumer.close()
    async with SimpleConsumer("SG", cluster.namesrv_addr) as c:
        with pytest.raises(ClientError, match="no subscription"):
            await c.receive()


async def test_pop_pull_and_push_groups_share_a_topic_independently(
    cluster, make_topic, producer, start_consumer
):
    await make_topic("Shared", 2)
    bodies = {f"m{i}".encode() for i in range(20)}
    pushed: list[bytes] = []

    async def listener(messages):
        pushed.extend(m.body for m in messages)
        return ConsumeResult.SUCCESS

    await start_consumer("push-group", "Shared", listener)
    for body in sorted(bodies):
        await producer.send(Message("Shared", body))
    popped: set[bytes] = set()
    async with SimpleConsumer(
        "pop-group", cluster.namesrv_addr, subscriptions={"Shared": "*"}, await_duration=1
    ) as simple:
        half_acked = 0
        while popped != bodies:
            for m in await simple.receive(8, invisible_duration=0.5):
                popped.add(m.body)
                if half_acked < 10:  # these come back to the pop group only
                    half_acked += 1
                    continue
                await simple.ack(m)
    assert popped == bodies
    async with PullConsumer("pull-group", cluster.namesrv_addr, consume_from="first") as puller:
        await puller.subscribe("Shared")
        pulled: list[bytes] = []
        while len(pulled) < len(bodies):
            pulled += [m.body for m in await puller.poll(2.0)]
    assert sorted(pulled) == sorted(bodies)  # the pop group's redeliveries are not in the topic
    for _ in range(200):
        if len(pushed) >= len(bodies):
            break
        await asyncio.sleep(0.05)
    assert sorted(pushed) == sorted(bodies)


async def test_blocking_simple_consumer(cluster, make_topic, producer):
    await make_topic("B", 1)
    await producer.send(Message("B", b"sync"))

    def script() -> list[bytes]:  # a script without asyncio (in a thread: this loop runs the broker)
        with blocking.SimpleConsumer(
            "BG", cluster.namesrv_addr, subscriptions={"B": "*"}, await_duration=2
        ) as c:
            got = c.receive(4, 30)
            c.ack(got[0])
            return [m.body for m in got]

    assert await asyncio.to_thread(script) == [b"sync"]


async def test_a_change_of_the_group_reaches_its_members_without_complaint(cluster, make_topic, caplog):
    await make_topic("S", 1)
    async with SimpleConsumer("SG", cluster.namesrv_addr, subscriptions={"S": "*"}) as staying:
        leaving = SimpleConsumer("SG", cluster.namesrv_addr, subscriptions={"S": "*"})
        await leaving.start()
        with caplog.at_level("INFO"):
            await leaving.close()  # the broker tells the members left: NOTIFY_CONSUMER_IDS_CHANGED
            deadline = asyncio.get_running_loop().time() + 10
            while "group SG changed" not in caplog.text:
                assert asyncio.get_running_loop().time() < deadline, "no member heard of the change"
                await asyncio.sleep(0.05)
        assert "not supported" not in caplog.text
        assert staying.instance is not leaving.instance
