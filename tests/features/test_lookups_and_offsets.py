"""Look-ups by message id and key, offset resets while consumers run, and progress, via the Admin SDK."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferrymq.client import Admin, ClientError, Message, PullConsumer

from .conftest import eventually


async def test_query_by_key_within_a_time_range_and_view_by_either_id(cluster, make_topic, producer):
    await make_topic("Orders", 2)
    before = int(time.time() * 1000) - 1
    first = await producer.send(Message("Orders", b"order 1 created", keys=["order-1", "customer-9"]))
    await producer.send(Message("Orders", b"order 2 created", keys="order-2"))
    paid = await producer.send(Message("Orders", b"order 1 paid", keys="order-1"))
    after = int(time.time() * 1000) + 1
    async with Admin(cluster.namesrv_addr) as admin:
        deadline = time.monotonic() + 10
        while len(found := await admin.query_by_key("Orders", "order-1", begin=before, end=after)) < 2:
            assert time.monotonic() < deadline, found  # the index is written by a child process: it trails
            await asyncio.sleep(0.02)
        assert [m.body for m in found] == [b"order 1 created", b"order 1 paid"]
        assert [m.body for m in await admin.query_by_key("Orders", "customer-9")] == [b"order 1 created"]
        assert await admin.query_by_key("Orders", "order-1", begin=after + 60_000) == []
        assert await admin.query_by_key("Orders", "no-such-key") == []

        by_offset_id = await admin.view_message(paid.offset_msg_id)
        assert by_offset_id.body == b"order 1 paid" and by_offset_id.msg_id == paid.msg_id
        by_unique_id = await admin.view_message(first.msg_id, topic="Orders")
        assert by_unique_id.body == b"order 1 created"
        with pytest.raises(ClientError, match="no message"):
            await admin.view_message("not-an-id")


@pytest.mark.parametrize("orderly", [False, True])
async def test_reset_to_a_timestamp_redelivers_to_running_push_consumers(
    cluster, make_topic, producer, start_consumer, orderly
):
    await make_topic("Replay", 2)
    got: list[bytes] = []

    async def listener(messages):
        got.extend(m.body for m in messages)

    def mq_end(mq) -> int:
        return cluster.broker.store.get_max_offset("Replay", mq.queue_id)

    consumer = await start_consumer("replayers", "Replay", listener, consume_from="first", orderly=orderly)
    for i in range(4):
        await producer.send(Message("Replay", f"old{i}".encode()))
    await eventually(lambda: len(got) == 4, what="the old messages")
    mark = int(time.time() * 1000)
    await eventually(lambda: int(time.time() * 1000) > mark)  # the next messages are stored after it
    for i in range(6):
        await producer.send(Message("Replay", f"new{i}".encode()))
    await eventually(lambda: len(got) == 10, what="the new messages")

    async with Admin(cluster.namesrv_addr) as admin:
        offsets = await admin.reset_offset("replayers", "Replay", mark)
        assert sum(offsets.values()) == 4  # each queue goes back to its first "new" message
        for mq, offset in offsets.items():  # the broker stores the new offsets at once
            assert cluster.broker.offsets.query("replayers", "Replay", mq.queue_id) == offset
        await eventually(lambda: len(got) == 16, what="the new messages again, and only those")
        assert sorted(got[10:]) == sorted(f"new{i}".encode() for i in range(6))
        await eventually(
            lambda: all(consumer.offsets.get(mq) == mq_end(mq) for mq in offsets), what="commits"
        )
        progress = await admin.consumer_progress("replayers", "Replay")
        assert sum(p.broker_offset for p in progress) == 10


async def test_reset_reaches_a_running_pull_consumer_and_without_force_keeps_slower_queues(
    cluster, make_topic, producer
):
    await make_topic("Pulled", 1)
    for i in range(5):
        await producer.send(Message("Pulled", f"m{i}".encode()))
    await cluster.settled()
    async with PullConsumer("pullers", cluster.namesrv_addr, consume_from="first") as consumer:
        await consumer.subscribe("Pulled")
        got = []
        while len(got) < 5:
            got += [m.body for m in await consumer.poll(1.0)]
        await consumer.commit()
        async with Admin(cluster.namesrv_addr) as admin:
            unforced = await admin.reset_offset(
                "pullers", "Pulled", int(time.time() * 1000) + 60_000, force=False
            )
            assert list(unforced.values()) == [5]  # the end is not behind the group: it keeps its offset
            await admin.reset_offset("pullers", "Pulled", 0)
        await eventually(lambda: list(consumer.positions.values()) == [0], what="the notice to the consumer")
        again = []
        while len(again) < 5:
            again += [m.body for m in await consumer.poll(1.0)]
        assert again == got


async def test_pull_consumer_commits_only_what_poll_returned(cluster, make_topic, producer):
    """A pull that answers after poll() returned is not committed until a poll hands it over."""
    await make_topic("Held", 2)
    first = lambda queues, _msg, _arg: queues[0]  # noqa: E731
    second = lambda queues, _msg, _arg: queues[1]  # noqa: E731
    await producer.send(Message("Held", b"early"), selector=first)
    await cluster.settled()
    async with PullConsumer("holders", cluster.namesrv_addr, consume_from="first") as consumer:
        await consumer.subscribe("Held")
        assert [m.body for m in await consumer.poll(5.0)] == [b"early"]  # the other queue's pull waits
        late = await producer.send(Message("Held", b"late"), selector=second)
        held = late.message_queue
        pulling = consumer._inflight[held]  # the long-polled pull of the second queue
        await asyncio.wait_for(asyncio.wait([pulling]), 10)  # it has answered, but nobody took it yet
        await consumer.commit()
        assert await consumer.committed(held) in (None, 0)
        assert [m.body for m in await consumer.poll(5.0)] == [b"late"]
        await consumer.commit()
        assert await consumer.committed(held) == 1
