"""Quotas on a real NameServer and broker: limits hold over a bounded window, flow control reaches
the SDK, which waits and sends again (nothing acknowledged is lost), changes apply at run time and
survive a restart, and connections beyond a user's limit are refused."""

from __future__ import annotations

import asyncio
import json
import time

from ferrymq.client import Admin, Message, Producer, PullConsumer, SimpleConsumer
from ferrymq.protocol.codes import RequestCode, ResponseCode
from tests.auth.conftest import ROOT

RATE, WINDOW = 200, 3.0


async def flood(namesrv: str, topic: str, seconds: float, *, producers: int = 4, senders: int = 8,
                **credentials) -> tuple[list[tuple[float, str]], int]:  # fmt: skip
    """`producers` producers with `senders` sends in flight each, sending for `seconds`: every
    acknowledged send's (time, message id), and how many flow-control answers they waited out."""
    acked: list[tuple[float, str]] = []
    end = time.monotonic() + seconds

    async def sender(producer: Producer, n: int) -> None:
        i = 0
        while time.monotonic() < end:
            result = await producer.send(Message(topic, f"{n}-{i}".encode()))
            acked.append((time.monotonic(), result.msg_id))
            i += 1

    clients = [Producer(f"PG{p}", namesrv, **credentials) for p in range(producers)]
    for producer in clients:
        await producer.start()
    try:
        await asyncio.gather(
            *(sender(p, i * senders + s) for i, p in enumerate(clients) for s in range(senders))
        )
    finally:
        for producer in clients:
            await producer.shutdown()
    return acked, sum(p.flow_controlled for p in clients)


async def consume_all(namesrv: str, topic: str, expected: int, group: str = "CG", **credentials) -> set[str]:
    seen: set[str] = set()
    async with PullConsumer(group, namesrv, consume_from="first", **credentials) as consumer:
        await consumer.subscribe(topic)
        deadline = time.monotonic() + 20
        while len(seen) < expected and time.monotonic() < deadline:
            seen |= {m.msg_id for m in await consumer.poll(0.5)}
    return seen


async def test_a_topic_limit_holds_against_four_producers_and_nothing_acknowledged_is_lost(make_cluster):
    cluster = await make_cluster()
    async with Admin(cluster.namesrv_addr) as admin:
        assert await admin.set_quota("produce", "Topic:Limited", messages=RATE) == [cluster.broker_addr]
    started = time.monotonic()
    acked, waited = await flood(cluster.namesrv_addr, "Limited", WINDOW)
    in_window = sum(1 for at, _ in acked if at - started <= WINDOW)
    expected = RATE * WINDOW + RATE * 0.1  # the rate, and one burst
    assert abs(in_window - expected) <= 0.1 * expected, (in_window, expected)
    assert waited > 0  # the producers were slowed, not failed
    ids = {msg_id for _, msg_id in acked}
    assert await consume_all(cluster.namesrv_addr, "Limited", len(ids)) == ids


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
