"""suggestWhichBrokerId (RocketMQ's rules) and the SDK reading from a slave when the master is gone."""

from __future__ import annotations

import asyncio

from ferrymq.client import Message, Producer
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.remoting import RemotingCommand
from tests.ha.conftest import caught_up, eventually


async def pull_raw(group, broker, offset: int = 0) -> RemotingCommand:
    ext = {
        "consumerGroup": "G", "topic": "T", "queueId": "0", "queueOffset": str(offset), "maxMsgNums": "1",
        "sysFlag": "4", "commitOffset": "-1", "suspendTimeoutMillis": "0", "subscription": "*",
        "subVersion": "0", "expressionType": "TAG",
    }  # fmt: skip
    request = RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields=ext)
    return await group.client.invoke(broker.config.broker_addr, request, 5.0)


async def test_master_suggests_the_slave_to_consumers_far_behind(group):
    master = await group.start("m", slave_read_enable=True, access_message_in_memory_max_ratio=0)
    for i in range(5):
        await group.send(master, b"%d" % i)
    await asyncio.to_thread(master.store.wait_dispatched)
    response = await pull_raw(group, master)
    assert response.code == ResponseCode.SUCCESS
    assert response.ext_fields["suggestWhichBrokerId"] == "1"  # which_broker_when_consume_slowly


async def test_master_keeps_consumers_near_the_end_and_without_slave_read(group):
    master = await group.start("m", slave_read_enable=True)  # 40 % of RAM: nobody here is that far behind
    await group.send(master)
    await asyncio.to_thread(master.store.wait_dispatched)
    assert (await pull_raw(group, master)).ext_fields["suggestWhichBrokerId"] == "0"


async def test_slave_without_slave_read_sends_consumers_to_its_live_master(group):
    master = await group.start("m")
    slave = await group.start("s", broker_role="SLAVE", broker_id=1)
    await group.send(master)
    await caught_up(slave, master)
    await slave.slave_sync.sync()
    response = await pull_raw(group, slave)
    assert response.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert response.ext_fields["suggestWhichBrokerId"] == "0"
    await master.stop()  # no master left: the slave serves the read itself
    await eventually(lambda: not slave.ha_client.connected, what="the slave to notice")
    response = await pull_raw(group, slave)
    assert response.code == ResponseCode.SUCCESS and response.body


async def test_sdk_pull_consumer_carries_on_from_the_slave_when_the_master_is_gone(group):
    master = await group.start("m")
    slave = await group.start("s", broker_role="SLAVE", broker_id=1)
    async with Producer("P", group.namesrv_addr) as producer:
        for i in range(20):
            await producer.send(Message("T", b"%d" % i))
    await caught_up(slave, master)
    await slave.slave_sync.sync()  # topics and offsets, as its periodic copy would
    got: list[bytes] = []
    async with PullConsumer("C", group.namesrv_addr, consume_from="first") as consumer:
        await consumer.subscribe("T")
        await eventually_polled(consumer, got, 10)
        await master.stop()
        await eventually_polled(consumer, got, 20)
    assert sorted(got, key=int) == [b"%d" % i for i in range(20)]


async def eventually_polled(consumer, got: list, count: int) -> None:
    for _ in range(400):  # bounded: about a minute of polls at most
        if len(got) >= count:
            return
        got += [m.body for m in await consumer.poll(timeout=0.2)]
    raise AssertionError(f"polled {len(got)} messages, wanted {count}")
