"""The SDK's Admin against a real in-process NameServer and Broker."""

from __future__ import annotations

import time

import pytest

from ferrymq.client import Admin, ClientError, Message, Producer, PullConsumer

from ..broker.conftest import make_cluster  # noqa: F401  (fixture)


async def eventually(check, what: str, timeout: float = 10.0):
    import asyncio

    deadline = time.monotonic() + timeout
    while not (result := await check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)
    return result


async def test_topics_cluster_and_consumer_lag(make_cluster):  # noqa: F811
    cluster = await make_cluster()
    async with Admin(cluster.namesrv_addr) as admin:
        info = await admin.cluster_info()
        assert info.cluster_addr_table["DefaultCluster"] == ["broker-a"]
        assert info.broker_addr_table["broker-a"].broker_addrs[0] == cluster.broker_addr
        await admin.create_topic("Managed", queue_nums=3)
        await eventually(lambda: _has(admin, "Managed"), "the new topic's route")
        async with Producer("PG", cluster.namesrv_addr) as producer:
            for i in range(9):
                await producer.send(Message("Managed", f"{i}".encode()))
        await cluster.settled()
        before = await admin.consumer_progress("Readers", "Managed")
        assert [p.queue.queue_id for p in before] == [0, 1, 2]
        assert sum(p.lag for p in before) == 9 and all(p.consumer_offset in (-1, 0) for p in before)
        async with PullConsumer("Readers", cluster.namesrv_addr, consume_from="first") as consumer:
            await consumer.subscribe("Managed")
            got = []
            while len(got) < 9:
                got += await consumer.poll(2.0)
        after = await admin.consumer_progress("Readers", "Managed")
        assert sum(p.lag for p in after) == 0 and sum(p.broker_offset for p in after) == 9
        await admin.delete_topic("Managed")
        assert "Managed" not in await admin.topics()
        with pytest.raises(ClientError, match="does not exist"):
            await admin.consumer_progress("Readers", "Managed")


async def _has(admin: Admin, topic: str) -> bool:
    return topic in await admin.topics() and await admin.instance.existing_route(topic) is not None
