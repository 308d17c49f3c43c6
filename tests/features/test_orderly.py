"""Ordered messages: partitioned order by sharding key, global order on a one-queue topic, broker
queue locks (60 s expiry, 20 s renewal), failures retried in place and dead-lettered at the limit."""

from __future__ import annotations

import asyncio
import itertools
import time

from ferrymq.broker.locks import RebalanceLockManager
from ferrymq.client import Message, PullConsumer
from ferrymq.protocol.bodies import MessageQueue

from .conftest import eventually


def test_broker_locks_expire_after_60_s_unless_renewed(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr("ferrymq.broker.locks.time.monotonic", lambda: now[0])
    locks = RebalanceLockManager()  # the broker's default: 60 s
    q0, q1 = MessageQueue("T", "b", 0), MessageQueue("T", "b", 1)
    assert locks.lock("g", "A", [q0, q1]) == [q0, q1]
    assert locks.lock("g", "B", [q0, q1]) == []  # held by A
    now[0] += 40
    assert locks.lock("g", "A", [q0]) == [q0]  # A renews q0 (consumers do so every 20 s)
    now[0] += 21  # 61 s after q1 was last locked, 21 s after q0 was renewed
    assert locks.lock("g", "B", [q0, q1]) == [q1]
    locks.unlock("g", "A", [q0])  # released (rebalance or shutdown): free at once
    assert locks.lock("g", "B", [q0]) == [q0]
    assert locks.lock("g", "B", [q0]) == [q0]  # holding it already counts as granted


async def test_per_key_order_holds_while_failures_are_retried_in_place(
    cluster, make_topic, producer, start_consumer
):
    await make_topic("Orders", 4)
    keys = [f"order-{i}" for i in range(6)]
    steps = 12
    attempts: list[tuple[str, int]] = []
    succeeded: list[tuple[str, int]] = []

    async def listener(messages):
        m = messages[0]
        key, step = m.keys[0], int(m.body)
        attempts.append((key, step))
        if step % 5 == 2 and attempts.count((key, step)) == 1:  # every key fails some steps once
            raise RuntimeError("transient failure")
        succeeded.append((key, step))

    await start_consumer("orders", "Orders", listener, orderly=True)
    for step in range(steps):
        for key in keys:
            await producer.send_orderly(Message("Orders", str(step).encode(), keys=key), key)
    await eventually(lambda: len(succeeded) == steps * len(keys), timeout=60, what="every step of every key")
    for key in keys:
        assert [s for k, s in succeeded if k == key] == list(range(steps)), key  # never skipped or reordered
        tried = [s for k, s in attempts if k == key]
        assert tried == sorted(tried), key  # a retry comes before anything after it
        assert tried.count(2) == 2 and tried.count(7) == 2


async def test_a_one_queue_topic_gives_global_order_across_members(
    cluster, make_topic, producer, start_consumer
):
    await make_topic("Ledger", 1)  # global order: one queue, so one consumer at a time, in order
    seen: list[int] = []

    async def listener(messages):
        seen.extend(int(m.body) for m in messages)

    a = await start_consumer("ledger", "Ledger", listener, orderly=True, consume_from="first")
    b = await start_consumer("ledger", "Ledger", listener, orderly=True, consume_from="first")
    for i in range(30):
        await producer.send(Message("Ledger", str(i).encode()))
    await eventually(lambda: len(seen) >= 15, what="half of the ledger")
    owner = a if any(q.topic == "Ledger" for q in a.queues) else b
    await owner.shutdown()  # the other member takes the queue over once the lock is released
    await eventually(lambda: seen[-1:] == [29], timeout=30, what="the rest of the ledger")
    assert seen == sorted(seen) and set(seen) == set(range(30))
    holders = {client for client, _ in cluster.broker.locks._locks.get("ledger", {}).values()}
    assert owner.instance.client_id not in holders  # it unlocked at shutdown (else: 60 s to expire)


async def test_a_message_failing_max_times_goes_to_the_dlq_and_the_queue_goes_on(
    cluster, make_topic, producer, start_consumer
):
    await make_topic("Steps", 1)
    tried: list[tuple[bytes, int, float]] = []

    async def listener(messages):
        m = messages[0]
        tried.append((m.body, m.reconsume_times, time.monotonic()))
        return m.body != b"poison"

    await start_consumer("steps", "Steps", listener, orderly=True, max_reconsume_times=2)
    for body in (b"first", b"poison", b"after"):
        await producer.send(Message("Steps", body))
    await eventually(lambda: tried[-1:] and tried[-1][0] == b"after", timeout=30, what="the queue going on")
    assert [(body, times) for body, times, _ in tried] == [
        (b"first", 0), (b"poison", 0), (b"poison", 1), (b"poison", 2), (b"after", 0)
    ]  # fmt: skip
    pauses = [later - earlier for (_, _, earlier), (_, _, later) in itertools.pairwise(tried[1:4])]
    assert all(p >= 0.9 for p in pauses), pauses  # suspended about a second before each retry
    async with PullConsumer("dlq-reader", cluster.namesrv_addr, consume_from="first") as reader:
        deadline = time.monotonic() + 20
        while (queues := await _dlq_queues(reader)) is None:
            assert time.monotonic() < deadline, "no DLQ topic"
            await asyncio.sleep(0.1)
        await reader.assign(queues)
        dead = []
        while not dead:
            assert time.monotonic() < deadline, "nothing in the DLQ"
            dead = await reader.poll(0.5)
    assert [m.body for m in dead] == [b"poison"]


async def _dlq_queues(reader: PullConsumer):
    route = await reader.instance.existing_route("%DLQ%steps")
    return list(route.read_queues) if route else None
