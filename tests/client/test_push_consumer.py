"""PushConsumer against a real NameServer and Broker: rebalancing, order, broadcasting, offsets, retries."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter

from ferrymq.client import Message, MessageQueue
from ferrymq.client.push_consumer import ConsumeResult
from ferrymq.client.rebalance import allocate
from ferrymq.protocol.codes import RequestCode, ResponseCode


def own(member) -> set:
    """The member's queues of the subscribed topics, without its group's retry topic."""
    return {q for q in member.queues if not q.topic.startswith("%RETRY%")}


async def eventually(condition, timeout: float = 15.0, what: str = "condition") -> None:
    """Wait until `condition()` holds, failing after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


class Recorder:
    """An async listener that notes every delivery (body -> how many times)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.counts: Counter[bytes] = Counter()
        self.delay = delay

    async def __call__(self, messages) -> bool:
        await asyncio.sleep(self.delay)
        self.counts.update(m.body for m in messages)
        return True

    def has(self, bodies) -> bool:
        return all(self.counts[b] for b in bodies)


async def send(producer, topic: str, bodies) -> list[bytes]:
    for body in bodies:
        await producer.send(Message(topic, body))
    return list(bodies)


def bodies(start: int, stop: int) -> list[bytes]:
    return [f"m{i}".encode() for i in range(start, stop)]


async def committed_and_max(cluster, group: str, topic: str, queues: int) -> list[tuple[int, int]]:
    result = []
    for q in range(queues):
        ext = {"consumerGroup": group, "topic": topic, "queueId": q}
        committed = await cluster.call(RequestCode.QUERY_CONSUMER_OFFSET, ext)
        assert committed.code == ResponseCode.SUCCESS, committed.remark
        top = await cluster.call(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": q})
        result.append((int(committed.ext_fields["offset"]), int(top.ext_fields["offset"])))
    return result


# --- allocation ------------------------------------------------------------------------------------


def test_average_allocation_gives_contiguous_blocks_like_rocketmq():
    queues = [MessageQueue("T", "b", i) for i in range(8)]
    ids = ["c", "a", "b"]
    split = {cid: [q.queue_id for q in allocate("average", cid, ids, queues[::-1])] for cid in ids}
    assert split == {"a": [0, 1, 2], "b": [3, 4, 5], "c": [6, 7]}
    assert allocate("average", "d", ["a", "b", "c", "d", "e"], queues[:3]) == []
    assert allocate("average", "stranger", ids, queues) == []


def test_consistent_hash_partitions_and_moves_little_when_a_member_joins():
    queues = [MessageQueue("T", f"b{b}", i) for b in range(2) for i in range(16)]
    before_ids = [f"10.0.0.{i}@{i}" for i in range(4)]
    after_ids = [*before_ids, "10.0.0.9@9"]
    before = {cid: set(allocate("consistent_hash", cid, before_ids, queues)) for cid in before_ids}
    after = {cid: set(allocate("consistent_hash", cid, after_ids, queues)) for cid in after_ids}
    for split in (before, after):
        assert Counter(q for qs in split.values() for q in qs) == Counter(queues)  # each exactly once
    moved = sum(len(before[cid] - after[cid]) for cid in before_ids)
    assert moved == len(after["10.0.0.9@9"])  # only the newcomer's queues changed hands


# --- clustering ------------------------------------------------------------------------------------


async def test_members_join_and_leave_mid_stream_and_every_message_arrives(
    cluster, make_topic, producer, start_consumer
):
    await make_topic("Churn", 8)
    seen = Recorder(delay=0.002)  # slow enough that queues change hands with messages in flight
    sent: list[bytes] = []

    async def produce() -> None:
        for body in bodies(0, 400):
            await producer.send(Message("Churn", body))
            sent.append(body)

    a = await start_consumer("churn", "Churn", seen)
    assert len(own(a)) == 8
    producing = asyncio.create_task(produce())
    await eventually(lambda: len(sent) >= 50, what="the first messages")
    b = await start_consumer("churn", "Churn", seen)
    c = await start_consumer("churn", "Churn", seen)
    members = (a, b, c)

    def split_three_ways() -> bool:
        shares = [own(m) for m in members]
        return sorted(map(len, shares)) == [2, 3, 3] and len({q for share in shares for q in share}) == 8

    await eventually(split_three_ways, what="a three-way split")
    await eventually(lambda: len(sent) >= 150, what="more messages")
    await a.shutdown()
    await eventually(lambda: len(own(b)) + len(own(c)) == 8, what="the others taking over")
    await eventually(lambda: len(sent) >= 250, what="more messages")
    await b.shutdown()
    await eventually(lambda: len(own(c)) == 8, what="the last member taking every queue")
    await producing
    await eventually(lambda: seen.has(sent), what="every message")
    assert set(seen.counts) == set(sent)


async def test_a_new_member_resumes_from_committed_offsets(cluster, make_topic, producer, start_consumer):
    await make_topic("Resume", 4)
    first = Recorder()
    consumer = await start_consumer("resume", "Resume", first)
    old = await send(producer, "Resume", bodies(0, 20))
    await eventually(lambda: first.has(old), what="the first consumer's messages")
    await consumer.shutdown()

    new = await send(producer, "Resume", bodies(20, 30))
    second = Recorder()
    await start_consumer("resume", "Resume", second)
    await eventually(lambda: second.has(new), what="the messages sent while nobody consumed")
    assert set(second.counts) == set(new)


async def test_clean_shutdown_commits_offsets(cluster, make_topic, producer, start_consumer):
    await make_topic("Commit", 4)
    seen = Recorder()
    consumer = await start_consumer("commit", "Commit", seen)
    sent = await send(producer, "Commit", bodies(0, 30))
    await eventually(lambda: seen.has(sent), what="every message")
    await consumer.shutdown()  # well before the 5 s periodic commit
    offsets = await committed_and_max(cluster, "commit", "Commit", 4)
    assert all(committed == top for committed, top in offsets), offsets
    assert sum(top for _, top in offsets) == 30


async def test_failed_messages_are_delivered_again(cluster, make_topic, producer, start_consumer):
    await make_topic("Flaky", 2)
    deliveries: list[tuple[bytes, int]] = []

    async def listener(messages):
        m = messages[0]
        deliveries.append((m.body, m.reconsume_times))
        if m.body == b"later" and m.reconsume_times == 0:
            return ConsumeResult.RECONSUME_LATER
        if m.body == b"boom" and m.reconsume_times == 0:
            raise RuntimeError("listener failure")
        return True

    consumer = await start_consumer("flaky", "Flaky", listener)
    await send(producer, "Flaky", [b"fine", b"later", b"boom", b"also fine"])
    await eventually(lambda: {(b"later", 1), (b"boom", 1)} <= set(deliveries), what="the redeliveries")
    assert Counter(body for body, _ in deliveries) == {b"fine": 1, b"later": 2, b"boom": 2, b"also fine": 1}
    await consumer.shutdown()
    offsets = await committed_and_max(cluster, "flaky", "Flaky", 2)
    assert all(committed == top for committed, top in offsets), offsets


async def test_a_message_still_in_flight_holds_the_committed_offset_back(
    cluster, make_topic, producer, start_consumer
):
    await make_topic("Held", 1)
    first = Recorder()
    never = asyncio.Event()

    async def hang_on_one(messages):
        await first(messages)
        if messages[0].body == b"stuck":
            await never.wait()
        return True

    consumer = await start_consumer("held", "Held", hang_on_one)
    sent = await send(producer, "Held", [b"first", b"stuck", b"third", b"fourth"])
    await eventually(lambda: first.has(sent), what="every message once")
    await consumer.shutdown(timeout=0.2)  # gives up on "stuck"; the messages after it are done
    assert await committed_and_max(cluster, "held", "Held", 1) == [(1, 4)]

    second = Recorder()
    await start_consumer("held", "Held", second)
    await eventually(lambda: second.has(sent[1:]), what="everything from the unfinished message on")
    assert set(second.counts) == set(sent[1:])


# --- orderly ---------------------------------------------------------------------------------------


async def test_orderly_keeps_per_key_order_across_rebalances(cluster, make_topic, producer, start_consumer):
    await make_topic("Orders", 4)
    keys = [f"order-{i}" for i in range(6)]
    steps = 40
    log: list[tuple[str, int, str]] = []  # (key, step, member)

    def listener(member: str):
        async def consume(messages):
            await asyncio.sleep(0.005)  # slow: queues change hands while their members are busy
            log.extend((m.keys[0], int(m.body), member) for m in messages)
            return True

        return consume

    def consumed_by(member: str) -> int:
        return sum(1 for *_, who in log if who == member)

    async def produce() -> None:
        for step in range(steps):
            for key in keys:
                await producer.send_orderly(Message("Orders", str(step).encode(), keys=key), key)

    a = await start_consumer("orders", "Orders", listener("a"), orderly=True)
    producing = asyncio.create_task(produce())
    await eventually(lambda: consumed_by("a") >= 20, what="the first member consuming")
    b = await start_consumer("orders", "Orders", listener("b"), orderly=True)
    await eventually(lambda: consumed_by("b") >= 20, what="the second member consuming")
    c = await start_consumer("orders", "Orders", listener("c"), orderly=True)
    await eventually(lambda: consumed_by("c") >= 10, what="the third member consuming")
    await a.shutdown()
    await eventually(lambda: len(own(b)) + len(own(c)) == 4, what="the others taking over")
    await producing
    await eventually(lambda: len(log) >= steps * len(keys), what="every order")
    for key in keys:
        assert [step for k, step, _ in log if k == key] == list(range(steps)), key


async def test_orderly_failure_is_retried_in_place(cluster, make_topic, producer, start_consumer):
    await make_topic("Steps", 1)
    seen: list[int] = []

    def listener(messages):  # a plain function: runs in a worker thread
        step = int(messages[0].body)
        seen.append(step)
        return not (step == 3 and seen.count(3) == 1)

    await start_consumer("steps", "Steps", listener, orderly=True)
    for step in range(8):
        await producer.send(Message("Steps", str(step).encode()))
    await eventually(lambda: len(seen) == 9, what="every step and the retried one")
    assert seen == [0, 1, 2, 3, 3, 4, 5, 6, 7]


# --- broadcasting ----------------------------------------------------------------------------------


async def test_broadcasting_reaches_every_member_and_keeps_local_offsets(
    cluster, make_topic, producer, start_consumer, tmp_path
):
    await make_topic("News", 4)
    readers = [Recorder(), Recorder()]
    members = [
        await start_consumer(
            "news", "News", reader, message_model="BROADCASTING", offset_store_dir=tmp_path / n
        )
        for n, reader in zip("ab", readers, strict=True)
    ]
    assert all(len(own(m)) == 4 for m in members)
    sent = await send(producer, "News", bodies(0, 20))
    await eventually(lambda: all(r.has(sent) for r in readers), what="every member getting everything")
    for member in members:
        await member.shutdown()
    stored = json.loads((tmp_path / "a" / "news" / "offsets.json").read_text())
    assert sum(entry["offset"] for entry in stored["offsetTable"]) == 20

    again = Recorder()
    await start_consumer("news", "News", again, message_model="BROADCASTING", offset_store_dir=tmp_path / "a")
    more = await send(producer, "News", bodies(20, 25))
    await eventually(lambda: again.has(more), what="the new messages")
    assert set(again.counts) == set(more)
