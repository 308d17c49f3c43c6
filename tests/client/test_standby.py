"""Degradation to a standby cluster and the relay back, against real in-process clusters: a primary
that cannot take messages sends them to the standby; the relay puts them back with everything the
producer gave them, once, and marks them so that they are never relayed again."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferrymq.bench.processes import free_port
from ferrymq.client import Admin, ClientError, ClientInstance, Message, Producer, PullConsumer
from ferrymq.client.standby import ORIGIN_TOPIC, RELAYED_FROM, standby_topic
from ferrymq.relay import Relay
from tests.broker.conftest import make_cluster

__all__ = ["make_cluster"]

STANDBY_TOPIC = standby_topic("Primary")


async def read(namesrv: str, topic: str, count: int, group: str, timeout: float = 20.0) -> list:
    """`count` messages of `topic` from its start (and whatever else comes within a short wait)."""
    got: list = []
    async with PullConsumer(group, namesrv, consume_from="first") as consumer:
        await consumer.subscribe(topic)
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            got += await consumer.poll(0.5)
        got += await consumer.poll(0.3)
    return got


def degraded_producer(standby: str, primary: str, **options) -> Producer:
    return Producer(
        "Shop",
        primary,
        standby_namesrv_addr=standby,
        standby_topic=STANDBY_TOPIC,
        send_timeout=1.0,
        **options,
    )


async def test_primary_that_cannot_take_messages_sends_them_to_the_standby(make_cluster):
    standby = await make_cluster()
    nowhere = f"127.0.0.1:{free_port()}"  # a primary whose NameServer does not answer
    async with degraded_producer(standby.namesrv_addr, nowhere) as producer:
        one = await producer.send(Message("Orders", b"o-1", tags="new", keys=["k1"], properties={"a": "1"}))
        batch = await producer.send_batch([Message("Orders", f"b{i}".encode()) for i in range(3)])
        with pytest.raises(ClientError):  # an ordered send never leaves its queue for the standby
            await producer.send_orderly(Message("Orders", b"in order"), "customer-7")
        assert producer.degradation is not None and producer.degradation.diverted == 4
    assert one.to_standby and batch.to_standby and one.message_queue.topic == STANDBY_TOPIC
    stored = await read(standby.namesrv_addr, STANDBY_TOPIC, 4, "check")
    first = next(m for m in stored if m.body == b"o-1")
    assert (first.tags, first.keys, first.properties["a"], first.msg_id) == ("new", ["k1"], "1", one.msg_id)
    assert {m.properties[ORIGIN_TOPIC] for m in stored} == {"Orders"}
    assert [m.msg_id for m in stored if m.body[:1] == b"b"] == batch.msg_id.split(",")


async def test_a_working_primary_keeps_its_messages(make_cluster, tmp_path):
    primary = await make_cluster(store_path_root_dir=tmp_path / "primary")
    standby = await make_cluster(store_path_root_dir=tmp_path / "standby")
    async with degraded_producer(standby.namesrv_addr, primary.namesrv_addr) as producer:
        result = await producer.send(Message("Orders", b"here"))
    assert not result.to_standby and result.message_queue.topic == "Orders"
    assert producer.degradation is not None and producer.degradation.diverted == 0


async def test_relay_puts_messages_back_once_with_their_key_tags_properties_and_id(make_cluster, tmp_path):
    primary = await make_cluster(store_path_root_dir=tmp_path / "primary")
    standby = await make_cluster(store_path_root_dir=tmp_path / "standby")
    nowhere = f"127.0.0.1:{free_port()}"
    async with degraded_producer(standby.namesrv_addr, nowhere) as producer:
        sent = [
            await producer.send(
                Message(
                    topic, f"{topic}-{i}".encode(), tags=f"t{i}", keys=[f"key-{i}"], properties={"n": str(i)}
                )
            )
            for topic in ("Orders", "Payments")
            for i in range(5)
        ]
        # a message of the standby topic that was relayed before (e.g. two clusters each other's standby)
        await producer.degradation.standby.send(
            Message(STANDBY_TOPIC, b"seen", properties={ORIGIN_TOPIC: "Orders", RELAYED_FROM: "elsewhere"})
        )
    assert all(r.to_standby for r in sent)

    async with Relay(standby.namesrv_addr, primary.namesrv_addr, STANDBY_TOPIC) as relay:
        deadline = time.monotonic() + 20
        while relay.stats.relayed + relay.stats.skipped < 11 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert (relay.stats.relayed, relay.stats.skipped) == (10, 1)
    async with Relay(standby.namesrv_addr, primary.namesrv_addr, STANDBY_TOPIC) as again:
        await asyncio.sleep(1.0)  # what a second relay of the same group would do: nothing
        assert again.stats.relayed == 0

    for topic in ("Orders", "Payments"):
        got = await read(primary.namesrv_addr, topic, 5, f"app-{topic}")
        assert sorted(m.body for m in got) == [f"{topic}-{i}".encode() for i in range(5)]  # none twice
        for m in got:
            i = int(m.properties["n"])
            assert (m.tags, m.keys, m.topic) == (f"t{i}", [f"key-{i}"], topic)
            assert m.properties[RELAYED_FROM] == STANDBY_TOPIC and ORIGIN_TOPIC not in m.properties
    ids = {
        m.msg_id
        for topic in ("Orders", "Payments")
        for m in await read(primary.namesrv_addr, topic, 5, "ids")
    }
    assert ids == {r.msg_id for r in sent}


async def test_a_primary_that_does_not_answer_is_given_up_after_standby_after(make_cluster):
    standby = await make_cluster()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # takes every request, answers none (a paused or cut-off NameServer)
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    primary = ClientInstance(f"127.0.0.1:{server.sockets[0].getsockname()[1]}", request_timeout=600)
    await primary.start()
    try:
        producer = degraded_producer(standby.namesrv_addr, "unused", instance=primary, standby_after=0.2)
        async with asyncio.timeout(60), producer:  # without standby_after: 600 s for the route
            result = await producer.send(Message("Orders", b"late"))
        assert result.to_standby
    finally:
        await primary.close()
        server.close()


async def test_with_the_standby_down_too_a_primary_in_back_off_is_tried_again(make_cluster):
    primary = await make_cluster()
    nowhere = f"127.0.0.1:{free_port()}"
    async with degraded_producer(nowhere, primary.namesrv_addr) as producer:
        primary.broker.config.broker_permission = 4  # read only: sends refused with NO_PERMISSION
        for _ in range(4):  # each failure doubles the primary's back-off, to 8 s by now
            with pytest.raises(ClientError, match="standby"):
                await producer.send(Message("Orders", b"refused by both"))
        primary.broker.config.broker_permission = 6
        result = await producer.send(Message("Orders", b"taken"))  # within the back-off
    assert not result.to_standby and result.message_queue.topic == "Orders"


async def test_a_relay_stopped_while_the_primary_is_down_commits_nothing_it_did_not_put_back(
    make_cluster, tmp_path
):
    primary = await make_cluster(store_path_root_dir=tmp_path / "primary")
    standby = await make_cluster(store_path_root_dir=tmp_path / "standby")
    nowhere = f"127.0.0.1:{free_port()}"
    async with degraded_producer(standby.namesrv_addr, nowhere) as producer:
        sent = [await producer.send(Message("Orders", f"m{i}".encode())) for i in range(20)]
    async with Relay(standby.namesrv_addr, nowhere, STANDBY_TOPIC) as down:
        deadline = time.monotonic() + 20
        while down.stats.failed_sends < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert down.stats.failed_sends >= 2 and down.stats.relayed == 0
        async with Admin(standby.namesrv_addr) as admin:  # the backlog is the relay group's lag
            assert (await admin.consume_stats(down.group, STANDBY_TOPIC)).diff == 20
            assert STANDBY_TOPIC in (await admin.consumer_connections(down.group)).subscription_table
    async with Relay(standby.namesrv_addr, primary.namesrv_addr, STANDBY_TOPIC) as up:
        deadline = time.monotonic() + 20
        while up.stats.relayed < 20 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    got = await read(primary.namesrv_addr, "Orders", 20, "app")
    assert sorted(m.msg_id for m in got) == sorted(r.msg_id for r in sent)
