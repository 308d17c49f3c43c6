"""Pause, resume and rate-limit a consumer group through the Admin SDK: the broker enforces them."""

from __future__ import annotations

import asyncio
import time

from ferrymq.client import Admin, Message

from .conftest import eventually


async def send(producer, topic: str, bodies: list[bytes]) -> None:
    for body in bodies:
        await producer.send(Message(topic, body))


def recorder(into: list[bytes]):
    async def listener(messages):
        into.extend(m.body for m in messages)

    return listener


async def test_a_paused_group_gets_nothing_and_its_pulls_wait_then_resume_delivers(
    cluster, make_topic, producer, start_consumer, monkeypatch
):
    await make_topic("Work", 2)
    got: list[bytes] = []
    await start_consumer("workers", "Work", recorder(got))
    await send(producer, "Work", [b"before"])
    await eventually(lambda: got == [b"before"], what="the first message")
    admits = 0
    admit = cluster.broker.consumption.admit

    async def counting(*args):
        nonlocal admits
        admits += 1
        return await admit(*args)

    monkeypatch.setattr(cluster.broker.consumption, "admit", counting)
    async with Admin(cluster.namesrv_addr) as admin:
        await admin.pause("workers")
        assert (await admin.consumption_controls("workers"))["broker-a"].paused
        await send(producer, "Work", [f"paused{i}".encode() for i in range(6)])
        await cluster.settled()
        await asyncio.sleep(1.5)  # a window in which nothing may arrive
        assert got == [b"before"]
        assert admits <= 3 * 2  # the queues' pulls are held, not spinning (2 queues + retry queue)
        await admin.resume("workers")
        await eventually(lambda: len(got) == 7, what="the messages held while paused")
    assert sorted(got[1:]) == sorted(f"paused{i}".encode() for i in range(6))


async def test_pausing_one_client_stops_only_its_queues(cluster, make_topic, producer, start_consumer):
    await make_topic("Split", 2)
    got_a: list[bytes] = []
    got_b: list[bytes] = []
    a = await start_consumer("split", "Split", recorder(got_a))
    b = await start_consumer("split", "Split", recorder(got_b))

    def split_queues(member) -> int:
        return sum(1 for q in member.queues if q.topic == "Split")

    await eventually(lambda: split_queues(a) == split_queues(b) == 1, what="the queues split")
    async with Admin(cluster.namesrv_addr) as admin:
        assert sorted(await admin.consumers("split")) == sorted([a.instance.client_id, b.instance.client_id])
        await admin.pause("split", [a.instance.client_id])
        bodies = [f"m{i}".encode() for i in range(20)]
        await send(producer, "Split", bodies)
        await eventually(lambda: len(got_b) == 10, what="the unpaused member's half")
        await asyncio.sleep(1.0)
        assert got_a == []
        controls = (await admin.consumption_controls("split"))["broker-a"]
        assert not controls.paused and controls.paused_clients == {a.instance.client_id}
        await admin.resume("split", [a.instance.client_id])
        await eventually(lambda: len(got_a) == 10, what="the paused member's half after resume")
    assert sorted(got_a + got_b) == sorted(bodies)


async def test_rate_limit_is_enforced_by_the_broker_and_persisted(
    cluster, make_cluster, make_topic, producer, start_consumer
):
    await make_topic("Limited", 2)
    async with Admin(cluster.namesrv_addr) as admin:
        await admin.set_rate_limit("slow", 20)
        assert (await admin.consumption_controls("slow"))["broker-a"].rate_limit == 20
    await send(producer, "Limited", [f"m{i}".encode() for i in range(60)])
    got: list[tuple[float, bytes]] = []

    async def listener(messages):
        got.extend((time.monotonic(), m.body) for m in messages)

    await start_consumer("slow", "Limited", listener, consume_from="first")
    await eventually(lambda: len(got) == 60, timeout=30, what="every message, slowly")
    # 20 at once (a second's worth of tokens), then 20 a second: the last 40 take at least ~2 s.
    assert got[-1][0] - got[0][0] >= 1.5
    assert len({body for _, body in got}) == 60

    await cluster.broker.stop()  # the controls live in subscriptionGroup.json
    again = await make_cluster(namesrv=cluster.namesrv, enable_property_filter=True)
    gate = again.broker.consumption.gate("slow")
    assert gate is not None and gate.bucket is not None and gate.bucket.rate == 20
    async with Admin(again.namesrv_addr) as admin:
        await admin.set_rate_limit("slow", None)
    assert again.broker.consumption.gate("slow") is None
