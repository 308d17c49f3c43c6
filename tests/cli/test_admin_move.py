"""`ferrymq admin create-topic -b`, `pin-topic`, `move-topic` and `rebalance` against real in-process
NameServers and brokers: the plan shown first, applied only with --yes (stdin is no terminal here),
--dry-run changing nothing."""

from __future__ import annotations

import asyncio

from ferrymq.client import Admin, Message, Producer

from ..broker.conftest import make_cluster  # noqa: F401  (fixture)
from ..sdk.test_admin import eventually
from ..sdk.test_topic_move import _on, two_broker_groups
from .test_admin_mqadmin import run


async def test_pin_and_move_a_topic(make_cluster, tmp_path):  # noqa: F811
    a, b, admin = await two_broker_groups(make_cluster, tmp_path)
    n = ("-n", a.namesrv_addr)
    assert "on broker-a" in await run("create-topic", "Orders", "--queues", "2", "-b", "broker-a", *n)
    await eventually(lambda: _on(admin, "Orders", {"broker-a"}), "Orders on broker-a only")
    await run("updateTopic", "Audit", "-b", b.broker_addr, *n)  # mqadmin's -b: a master's address
    await eventually(lambda: _on(admin, "Audit", {"broker-b"}), "Audit on broker-b only")

    shown = await run("pin-topic", "Orders", "--brokers", "broker-b", "--dry-run", *n)
    assert "Plan: move Orders from broker-a to broker-b" in shown and "stop writes on the source" in shown
    assert await _on(admin, "Orders", {"broker-a"})  # a dry run changes nothing
    refused = await run("pin-topic", "Orders", "--brokers", "broker-b", *n, ok=False)
    assert "Plan: move Orders" in refused and "pass --yes" in refused
    assert await _on(admin, "Orders", {"broker-a"})

    done = await run("pin-topic", "Orders", "-b", "broker-b", "--yes", "--poll-interval", "0.2", *n)
    assert "✓ delete the topic on the source" in done and "Orders moved to broker-b" in done
    assert await _on(admin, "Orders", {"broker-b"})

    spread = await run("move-topic", "Orders", "--to-cluster", "DefaultCluster", "-y", *n)
    assert "Plan: move Orders from - to broker-a" in spread  # onto every master: nothing leaves
    assert await _on(admin, "Orders", {"broker-a", "broker-b"})

    assert "give one of --to-cluster and --to-brokers" in await run("move-topic", "Orders", *n, ok=False)
    assert "already on broker-a, broker-b" in await run(
        "move-topic", "Orders", "--to-brokers", "broker-a,broker-b", "-y", *n, ok=False
    )
    assert "broker-z" in await run("move-topic", "Orders", "--to-brokers", "broker-z", "-y", *n, ok=False)
    await admin.shutdown()


async def test_move_to_a_cluster_behind_other_nameservers(make_cluster, tmp_path):  # noqa: F811
    old = await make_cluster()
    new = await make_cluster(
        broker_cluster_name="New", broker_name="broker-x", store_path_root_dir=tmp_path / "x"
    )
    async with Admin(old.namesrv_addr) as admin:
        await admin.create_topic("Orders", 2)
        await eventually(lambda: _on(admin, "Orders", {"broker-a"}), "the route")
    to_new = ("--to-cluster", "New", "--target-namesrv", new.namesrv_addr)
    out = await run("move-topic", "Orders", *to_new, "--yes", "-n", old.namesrv_addr)
    assert "Plan: move Orders from broker-a to broker-x" in out and "Orders moved to broker-x" in out
    async with Admin(new.namesrv_addr) as admin:
        assert await _on(admin, "Orders", {"broker-x"})


async def test_rebalance_spreads_the_busiest_topic_onto_a_new_group(make_cluster, tmp_path):  # noqa: F811
    a, _, admin = await two_broker_groups(make_cluster, tmp_path)
    n = ("-n", a.namesrv_addr)
    for topic in ("Hot", "Warm"):
        await admin.create_topic(topic, 2, brokers=["broker-a"])
        await eventually(lambda t=topic: _on(admin, t, {"broker-a"}), "the route")

    async def produce(producer: Producer, stop: asyncio.Event, flowing: asyncio.Event) -> None:
        """Rounds of ten Hot messages (one batch) and one Warm: any measuring window that holds a
        whole round sees both topics, Hot ten times busier, however slowly the machine runs."""
        hot = [Message("Hot", b"h") for _ in range(10)]
        for _ in range(100_000):  # bounded; stopped by the event long before
            if stop.is_set():
                return
            await producer.send_batch(hot)
            await producer.send(Message("Warm", b"w"))
            flowing.set()
            await asyncio.sleep(0.005)

    async def under_load(*args: str, ok: bool = True) -> str:
        stop, flowing = asyncio.Event(), asyncio.Event()
        async with Producer("Shop", a.namesrv_addr) as producer:
            sending = asyncio.create_task(produce(producer, stop, flowing))
            try:
                # routes looked up and a round sent before the window opens, not inside it
                first_round = asyncio.ensure_future(flowing.wait())
                await asyncio.wait([sending, first_round], timeout=30, return_when=asyncio.FIRST_COMPLETED)
                first_round.cancel()
                assert flowing.is_set(), "the producer never got a round out"
                return await run("rebalance", "--window", "1", *args, *n, ok=ok)
            finally:
                stop.set()
                await sending

    planned = await under_load("--dry-run")
    assert "Plan" in planned and "Hot" in planned and "broker-b" in planned
    assert "Warm" not in planned.split("Plan")[1]  # moving it too would unbalance the other way
    assert await _on(admin, "Hot", {"broker-a"})
    assert "pass --yes" in await under_load(ok=False)

    applied = await under_load("--yes", "--poll-interval", "0.2")
    assert "Hot moved to broker-b" in applied
    assert await _on(admin, "Hot", {"broker-b"}) and await _on(admin, "Warm", {"broker-a"})
    assert "nothing to move" in await run("rebalance", "--window", "0.2", "--dry-run", *n)
    await admin.shutdown()
