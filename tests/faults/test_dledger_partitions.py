"""A DLedger group of three brokers, each in its own network namespace, under partitions and pauses.

Steady producers run throughout, every acknowledged send recorded. A member is cut off the network
(its link to the bridge goes down: it can reach neither the other members nor the NameServer nor the
clients) or SIGSTOPped, then let back. Afterwards the topic is read back through the NameServer and
every member's store is read offline: each holds every acknowledged message, and the members' queues
agree, so consumers find every message at the same offset on whichever member serves them.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from ferrymq.bench.dledger import DLedgerCluster, queue_offsets, stored_bodies, wait_caught_up
from ferrymq.bench.failover import TOPIC, SteadyProducer, read_back
from ferrymq.protocol.codes import ResponseCode
from tests.faults import direct_sender

pytestmark = [pytest.mark.faults, pytest.mark.root, pytest.mark.timeout(300)]

SETTINGS = {
    "dledger_heartbeat_ms": 100,
    "dledger_election_timeout_ms": 600,
    "register_name_server_period": 2000,
}
SETTLE = 60.0  # seconds any one recovery step may take on a busy two-core machine


@asynccontextmanager
async def partitionable_group(root: Path) -> AsyncIterator[DLedgerCluster]:
    """A group of three, each member in its own namespace, its master registered."""
    async with DLedgerCluster(root, broker_settings=SETTINGS, netns=True) as cluster:
        await cluster.wait_master(SETTLE)
        yield cluster


def check_stores(cluster: DLedgerCluster, acked: set[str], never: frozenset[str] = frozenset()) -> None:
    """Offline, once the group is stopped: every member holds every acknowledged key and none of
    `never`, and the members' queues have the same ends."""
    ends = {}
    for name in cluster.brokers:
        bodies = stored_bodies(cluster.root / name, TOPIC)
        missing = acked - bodies
        assert not missing, f"{name} lacks {len(missing)} acknowledged messages, e.g. {sorted(missing)[:5]}"
        kept = never & bodies
        assert not kept, f"{name} holds {sorted(kept)[:5]}, never acknowledged and cut from the log"
        ends[name] = queue_offsets(cluster.root / name)
    first = ends[cluster.brokers[0]]
    assert all(e == first for e in ends.values()), ends


async def read_all_back(cluster: DLedgerCluster, acked: set[str]) -> None:
    found, _ = await read_back(cluster.namesrv_addr, acked, timeout=SETTLE)
    lost = acked - found
    assert not lost, f"{len(lost)} acknowledged messages not read back, e.g. {sorted(lost)[:5]}"


async def wait_answers(out: Path, predicate, timeout: float, what: str) -> list[dict]:
    deadline = time.monotonic() + timeout
    while not predicate(got := direct_sender.answers(out)):
        assert time.monotonic() < deadline, f"the direct sender never {what}: {got[-5:]}"
        await asyncio.sleep(0.1)
    return got


async def test_a_leader_cut_off_is_replaced_acknowledges_nothing_and_rejoins_truncated(tmp_path, netns):
    """The leader loses the network under load. The majority elects another, sends succeed again.
    A sender beside the old leader, inside its namespace, sends to it throughout: nothing sent after
    the cut is acknowledged (the leader appends it, cannot commit it, then steps down). Healed, the
    old leader follows the new one, its uncommitted tail is cut, and it catches up."""
    async with partitionable_group(tmp_path) as cluster:
        old = await cluster.wait_master(SETTLE)
        assert cluster.network is not None
        beside_old = cluster.network.prefix(cluster.brokers.index(old))
        out = tmp_path / "direct.jsonl"
        producer = SteadyProducer(cluster.namesrv_addr, "p", concurrency=4)
        await producer.start()
        sender = direct_sender.launch(cluster.broker_addrs[old], TOPIC, 120.0, out, beside_old)
        try:
            await producer.wait_acks(200, SETTLE)
            await wait_answers(
                out, lambda a: any(r["code"] == ResponseCode.SUCCESS for r in a), SETTLE, "got an ack"
            )
            since = len(cluster.procs[old].log_text())
            cluster.cut(old)
            cut_at, cut_mono = time.time(), time.monotonic()
            new = await cluster.wait_master(SETTLE, other_than=old)
            print(f"{new} registered as master {time.monotonic() - cut_mono:.2f} s after the cut")
            await producer.wait_acks(200, SETTLE)
            await cluster.procs[old].wait_for_line("no longer leader", SETTLE, since)  # check-quorum
            await wait_answers(out, lambda a: sum(r["sent_at"] > cut_at for r in a) >= 3, SETTLE, "answered")
            healed_at = time.time()
            cluster.heal(old)
            rejoined_from = len(cluster.procs[old].log_text())
            await producer.wait_acks(200, SETTLE)
        finally:
            sender.terminate()
            sender.wait(30)
            acks = await producer.stop()
        assert acks.first_ack_after(cut_mono) is not None

        isolated = [r for r in direct_sender.answers(out) if cut_at < r["sent_at"] < healed_at]
        acked_isolated = [r for r in isolated if r["code"] == ResponseCode.SUCCESS]
        assert not acked_isolated, f"the cut-off leader acknowledged {acked_isolated[:3]}"
        accepted = [r for r in isolated if r["code"] != ResponseCode.SERVICE_NOT_AVAILABLE]
        print(f"the cut-off leader answered {len(isolated)} sends, none acknowledged; held: {accepted[:2]}")
        assert accepted, (
            f"the cut-off leader refused every send at once, none was left to cut: {isolated[:3]}"
        )

        acked = set(acks.acked) | {
            r["key"] for r in direct_sender.answers(out) if r["code"] == ResponseCode.SUCCESS
        }
        await read_all_back(cluster, acked)
        await wait_caught_up(cluster, SETTLE)
        assert await cluster.wait_master(SETTLE) == new  # the healed member did not depose the leader
        assert ": leader in term" not in cluster.procs[old].log_text()[rejoined_from:]
    check_stores(cluster, acked, never=frozenset(r["key"] for r in isolated))


async def test_a_follower_cut_off_and_healed_catches_up_while_sends_go_on(tmp_path, netns):
    """A follower loses the network: the leader keeps its majority and acknowledges sends (pre-vote:
    the follower's failed elections raise no term). Healed, it catches up and holds every message."""
    async with partitionable_group(tmp_path) as cluster:
        leader = await cluster.wait_master(SETTLE)
        follower = next(n for n in cluster.brokers if n != leader)
        since = len(cluster.procs[leader].log_text())
        producer = SteadyProducer(cluster.namesrv_addr, "f", concurrency=4)
        await producer.start()
        try:
            await producer.wait_acks(200, SETTLE)
            cluster.cut(follower)
            cut_mono = time.monotonic()
            await producer.wait_acks(300, SETTLE)
            cluster.heal(follower)
            await producer.wait_acks(200, SETTLE)
        finally:
            acks = await producer.stop()
        assert acks.first_ack_after(cut_mono) is not None
        await wait_caught_up(cluster, SETTLE)
        assert await cluster.wait_master(SETTLE) == leader
        assert "no longer leader" not in cluster.procs[leader].log_text()[since:]
        await read_all_back(cluster, set(acks.acked))
    check_stores(cluster, set(acks.acked))


FAULTS = ("cut-leader", "cut-follower", "pause-leader", "pause-follower")


async def test_seeded_rounds_of_pauses_and_partitions_lose_nothing(tmp_path, netns):
    """Seeded rounds (FERRYMQ_DLEDGER_FAULT_ROUNDS, 6 by default) under load, each cutting off or
    SIGSTOPping the leader or a follower for a random while, then letting it back: a new leader
    takes over a lost one, sends succeed during each fault and after it, the member let back catches
    up, and at the end every member holds every acknowledged message."""
    rounds = int(os.environ.get("FERRYMQ_DLEDGER_FAULT_ROUNDS", "6"))
    seed = int(os.environ.get("FERRYMQ_FAULT_SEED", "20261206"))
    rng = random.Random(seed)
    async with partitionable_group(tmp_path) as cluster:
        producer = SteadyProducer(cluster.namesrv_addr, "r", concurrency=4)
        await producer.start()
        try:
            await producer.wait_acks(100, SETTLE)
            schedule = [FAULTS[i % len(FAULTS)] for i in range(rounds)]  # each kind, given 4 rounds
            rng.shuffle(schedule)
            for round_no, fault in enumerate(schedule):
                leader = await cluster.wait_master(SETTLE)
                followers = [n for n in cluster.brokers if n != leader]
                victim = leader if fault.endswith("leader") else rng.choice(followers)
                held = rng.uniform(0.5, 4.0)
                print(f"round {round_no} (seed {seed}): {fault} {victim} for {held:.1f} s")
                cut, proc = fault.startswith("cut"), cluster.procs[victim]
                if cut:
                    cluster.cut(victim)
                else:
                    proc.pause()
                try:
                    await asyncio.sleep(held)  # the fault's length is the point: nothing is awaited
                    if fault.endswith("leader"):
                        await cluster.wait_master(SETTLE, other_than=victim)
                    await producer.wait_acks(50, SETTLE)
                finally:
                    if cut:
                        cluster.heal(victim)
                    else:
                        proc.resume()
                await wait_caught_up(cluster, SETTLE)
                await producer.wait_acks(50, SETTLE)
        finally:
            acks = await producer.stop()
        await wait_caught_up(cluster, SETTLE)
        await read_all_back(cluster, set(acks.acked))
    check_stores(cluster, set(acks.acked))
