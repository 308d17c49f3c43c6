"""Quotas on a real NameServer and broker: limits hold over a bounded window, flow control reaches
the SDK, which waits and sends again (nothing acknowledged is lost), changes apply at run time and
survive a restart, and connections beyond a user's limit are refused."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

from ferrymq.broker.quota.limiter import BURST_S
from ferrymq.client import Admin, Message, Producer, PullConsumer, SimpleConsumer
from ferrymq.protocol.codes import RequestCode, ResponseCode
from tests.auth.conftest import ROOT

RATE, WINDOW = 200, 3.0


@dataclass
class Flood:
    """What a flood saw: when its window began (wall clock, ms: every producer started and its route
    known, the first message of each sent), the ids of the first messages and of the ones sent in
    the window (all acknowledged), the flow-control answers waited out, and for how long in the
    window the limit went unpressed (see `unpressed`)."""

    began_ms: int
    first: set[str]
    acked: set[str]
    waited: int
    unpressed: float


async def unpressed(producers: list[Producer], until: float) -> float:
    """Seconds until `until` in which the limit went unpressed: each stretch longer than a bucket's
    burst with no producer refused, during which tokens piled up past the cap and were lost. Such
    stretches are a slow machine's (the event loop, and the broker on it, stood still, or the
    producers asked for less than the rate), not the limiter's."""
    last = time.monotonic()
    seen, total = 0, 0.0
    while time.monotonic() < until:
        await asyncio.sleep(0.01)
        now = time.monotonic()
        refused = sum(p.flow_controlled for p in producers)
        if refused != seen:
            total += max(0.0, now - last - BURST_S)
            last, seen = now, refused
    return total + max(0.0, until - last - BURST_S)


async def flood(namesrv: str, topic: str, seconds: float, *, producers: int = 4, senders: int = 8,
                **credentials) -> Flood:  # fmt: skip
    """`producers` producers with `senders` sends in flight each, sending for `seconds` once each
    producer has sent one message (so starting and finding the route lie before the window)."""
    acked: set[str] = set()

    async def sender(producer: Producer, n: int) -> None:
        i = 0
        while time.monotonic() < end:
            acked.add((await producer.send(Message(topic, f"{n}-{i}".encode()))).msg_id)
            i += 1

    clients = [Producer(f"PG{p}", namesrv, **credentials) for p in range(producers)]
    try:
        for producer in clients:
            await producer.start()
        first = await asyncio.gather(*(p.send(Message(topic, b"first")) for p in clients))
        began_ms, end = time.time_ns() // 1_000_000, time.monotonic() + seconds
        watch = asyncio.create_task(unpressed(clients, end))
        await asyncio.gather(
            *(sender(p, i * senders + s) for i, p in enumerate(clients) for s in range(senders))
        )
        untested = await watch
    finally:
        for producer in clients:
            await producer.shutdown()
    waited = sum(p.flow_controlled for p in clients)
    return Flood(began_ms, {r.msg_id for r in first}, acked, waited, untested)


async def consume_all(namesrv: str, topic: str, expected: int, group: str = "CG",
                      **credentials) -> dict[str, int]:  # fmt: skip
    """Every message of `topic` (up to `expected`) by id, with the time the broker stored it (ms)."""
    seen: dict[str, int] = {}
    async with PullConsumer(group, namesrv, consume_from="first", **credentials) as consumer:
        await consumer.subscribe(topic)
        deadline = time.monotonic() + 20
        while len(seen) < expected and time.monotonic() < deadline:
            seen |= {m.msg_id: m.store_timestamp for m in await consumer.poll(0.5)}
    return seen


async def test_a_topic_limit_holds_against_four_producers_and_nothing_acknowledged_is_lost(make_cluster):
    cluster = await make_cluster()
    async with Admin(cluster.namesrv_addr) as admin:
        assert await admin.set_quota("produce", "Topic:Limited", messages=RATE) == [cluster.broker_addr]
    sent = await flood(cluster.namesrv_addr, "Limited", WINDOW)
    assert sent.waited > 0  # the producers were slowed, not failed
    stored = await consume_all(cluster.namesrv_addr, "Limited", len(sent.first | sent.acked))
    assert stored.keys() == sent.first | sent.acked
    # counted by when the broker stored them, which is when the limiter let them in
    in_window = sum(1 for msg_id in sent.acked if stored[msg_id] <= sent.began_ms + WINDOW * 1000)
    burst = RATE * BURST_S
    assert in_window <= RATE * WINDOW + burst, in_window  # what a quota promises, exactly
    # and while they press it, the producers get the rate
    assert in_window >= 0.9 * (RATE * (WINDOW - sent.unpressed) + burst), (in_window, sent.unpressed)


async def test_a_group_limit_gives_fewer_messages_per_pull_and_loses_none(make_cluster):
    cluster = await make_cluster()
    async with Producer("PG", cluster.namesrv_addr) as producer:
        sent = {(await producer.send(Message("Backlog", b"x" * 100))).msg_id for _ in range(300)}
    await cluster.settled()
    async with Admin(cluster.namesrv_addr) as admin:
        await admin.set_quota("consume", "Group:Slow", messages=100)
    seen: list[str] = []
    async with PullConsumer("Slow", cluster.namesrv_addr, consume_from="first") as consumer:
        await consumer.subscribe("Backlog")
        started = time.monotonic()
        while time.monotonic() - started < 2.0:
            seen += [m.msg_id for m in await consumer.poll(0.2)]
        in_window = len(seen)
        assert 0.85 * 210 <= in_window <= 1.15 * 210, in_window  # 2 s at 100/s and one burst of 10
        async with Admin(cluster.namesrv_addr) as admin:  # lifted at run time: the rest comes at once
            await admin.delete_quota("consume", "Group:Slow")
        deadline = time.monotonic() + 10
        while len(seen) < len(sent) and time.monotonic() < deadline:
            seen += [m.msg_id for m in await consumer.poll(0.5)]
    assert set(seen) == sent


async def test_a_topic_limit_holds_for_pops_too(make_cluster):
    cluster = await make_cluster()
    async with Producer("PG", cluster.namesrv_addr) as producer:
        sent = {(await producer.send(Message("PopBacklog", b"y" * 100))).msg_id for _ in range(250)}
    await cluster.settled()
    async with Admin(cluster.namesrv_addr) as admin:
        await admin.set_quota("consume", "Topic:PopBacklog", messages=100)
    seen: list[str] = []
    subscriptions = {"PopBacklog": "*"}
    async with SimpleConsumer(
        "Poppers", cluster.namesrv_addr, subscriptions=subscriptions, await_duration=1
    ) as c:
        started = time.monotonic()
        while time.monotonic() - started < 1.5:
            got = await c.receive(32, invisible_duration=60)
            seen += [m.msg_id for m in got]
            for m in got:
                await c.ack(m)
        assert 0.85 * 160 <= len(seen) <= 1.15 * 160, len(seen)  # 1.5 s at 100/s and one burst of 10
        async with Admin(cluster.namesrv_addr) as admin:
            await admin.delete_quota("consume", "Topic:PopBacklog")
        deadline = time.monotonic() + 10
        while len(set(seen)) < len(sent) and time.monotonic() < deadline:
            got = await c.receive(32, invisible_duration=60)
            seen += [m.msg_id for m in got]
            for m in got:
                await c.ack(m)
    assert set(seen) == sent


async def test_quotas_change_at_run_time_are_kept_atomically_and_survive_a_restart(make_cluster, tmp_path):
    cluster = await make_cluster()
    async with Admin(cluster.namesrv_addr) as admin:
        await admin.set_quota("produce", "Topic:A", messages=10, bytes=1000)
        await admin.set_quota("consume", "Group:G", bytes=5000)
        await admin.set_quota("produce", "Topic:A", messages=20)  # replaces the first
        assert {(q["resource"], q.get("messages")) for q in await admin.list_quotas()} == {
            ("Topic:A", 20),
            ("Group:G", None),
        }
        bad = await cluster.call(RequestCode.QUOTA_SET, body=b'{"kind":"produce","resource":"Topic:A"}')
        assert bad.code == ResponseCode.INVALID_PARAMETER and "messages and/or bytes" in bad.remark
        missing = await cluster.call(RequestCode.QUOTA_DELETE, {"kind": "consume", "resource": "Topic:A"})
        assert (
            missing.code == ResponseCode.INVALID_PARAMETER and "no consume quota on Topic:A" in missing.remark
        )
    kept = json.loads((tmp_path / "store" / "config" / "quota.json").read_text())
    assert {q["resource"] for q in kept} == {"Topic:A", "Group:G"}
    namesrv = cluster.namesrv
    await cluster.broker.stop()
    again = await make_cluster(namesrv)
    assert {q.resource for q in again.broker.quotas.quotas.values()} == {"Topic:A", "Group:G"}
    async with Producer("PG", again.namesrv_addr) as producer:  # 20/s with a burst of 2
        started = time.monotonic()
        for i in range(12):
            await producer.send(Message("A", b"%d" % i))
        assert time.monotonic() - started >= 0.4 and producer.flow_controlled > 0


async def test_connections_beyond_a_users_limit_are_refused_and_a_user_rate_holds(make_secure):
    secure = await make_secure()
    async with Admin(secure.namesrv_addr, access_key=ROOT[0], secret_key=ROOT[1]) as admin:
        await admin.create_user("app", "app-secret")
        await admin.create_acl("app", ["Topic:*", "Group:*"], ["Pub", "Sub"])
        await admin.set_quota("connections", "User:app", connections=2)
        await admin.set_quota("produce", "User:app", messages=50)
        await admin.set_quota("consume", "User:app", messages=50)
    clients = [secure.client("app", "app-secret") for _ in range(3)]
    info = RequestCode.GET_BROKER_RUNTIME_INFO
    assert [(await secure.call(c, info)).code for c in clients[:2]] == [ResponseCode.SUCCESS] * 2
    refused = await secure.call(clients[2], info)
    assert refused.code == ResponseCode.NO_PERMISSION
    assert refused.remark == "User:app has reached the maximum number of connections (2)"
    assert (await secure.call(secure.client(*ROOT), info)).code == ResponseCode.SUCCESS  # others go on
    await clients[0].close()
    deadline = time.monotonic() + 5
    while (await secure.call(clients[2], info)).code != ResponseCode.SUCCESS:  # a place came free
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    await clients[1].close()
    await clients[2].close()
    async with Producer("PG", secure.namesrv_addr, access_key="app", secret_key="app-secret") as producer:
        started = time.monotonic()
        sent = {(await producer.send(Message("Mine", b"%d" % i))).msg_id for i in range(30)}  # 5, then 50/s
        assert time.monotonic() - started >= 0.4 and producer.flow_controlled > 0
    assert await asyncio.to_thread(secure.broker.store.wait_dispatched)
    credentials = {"access_key": "app", "secret_key": "app-secret"}
    async with PullConsumer("Mine", secure.namesrv_addr, consume_from="first", **credentials) as consumer:
        started = time.monotonic()  # the consumer pulls from its subscription on
        await consumer.subscribe("Mine")
        seen: list[str] = []
        while len(set(seen)) < len(sent) and time.monotonic() - started < 10:
            seen += [m.msg_id for m in await consumer.poll(0.2)]
    assert set(seen) == sent and time.monotonic() - started >= 0.4  # the user's 50/s, a burst of 5


async def test_a_bytes_limit_holds(make_cluster):
    cluster = await make_cluster()
    async with Admin(cluster.namesrv_addr) as admin:
        await admin.set_quota("produce", "Topic:Bulky", bytes=20_000)  # a burst of 2,000 bytes
    async with Producer("PG", cluster.namesrv_addr) as producer:
        started = time.monotonic()
        for _ in range(30):
            await producer.send(Message("Bulky", b"b" * 1000))
        elapsed = time.monotonic() - started
    assert elapsed >= (30_000 - 2_000) / 20_000 * 0.9, elapsed
    assert producer.flow_controlled > 0
