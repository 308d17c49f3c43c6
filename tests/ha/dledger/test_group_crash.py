"""A DLedger group of three broker processes: SIGKILL the leader under load; a new one is elected,
sends succeed again, every acknowledged message is read back, and the killed broker, restarted,
catches up and holds every one of them too."""

from __future__ import annotations

import random
import time

import pytest

from ferrymq.bench.dledger import DLedgerCluster, kill_in_turn, stored_bodies, wait_caught_up
from ferrymq.bench.failover import TOPIC, SteadyProducer, read_back

pytestmark = [pytest.mark.crash, pytest.mark.timeout(120)]

FAST_ELECTIONS = {"dledger_heartbeat_ms": 100, "dledger_election_timeout_ms": 600}


def assert_every_member_holds(cluster, tmp_path, acked) -> None:
    """Each member's own store (read offline) holds every acknowledged key."""
    for name in cluster.brokers:
        missing = set(acked) - stored_bodies(tmp_path / name, TOPIC)
        assert not missing, f"{name} lacks {len(missing)} acknowledged messages: {sorted(missing)[:5]}"


async def test_sigkill_of_the_leader_elects_another_and_loses_no_acknowledged_send(tmp_path):
    async with DLedgerCluster(tmp_path, broker_settings=FAST_ELECTIONS) as cluster:
        old = await cluster.wait_master(30)
        producer = SteadyProducer(cluster.namesrv_addr, "k", concurrency=4)
        await producer.start()
        try:
            await producer.wait_acks(200, 30)
            cluster.procs[old].kill()
            killed_at = time.monotonic()
            new = await cluster.wait_master(20, other_than=old)
            await producer.wait_acks(200, 30)
        finally:
            acks = await producer.stop()
        assert acks.first_ack_after(killed_at) is not None
        found, _ = await read_back(cluster.namesrv_addr, set(acks.acked), timeout=30)
        assert not set(acks.acked) - found, f"{len(set(acks.acked) - found)} acknowledged sends lost"

        await cluster.start_broker(old)
        await wait_caught_up(cluster, 30)
        assert await cluster.registered_master() == new  # a returning member does not depose the leader
    assert_every_member_holds(cluster, tmp_path, acks.acked)


async def test_members_killed_and_restarted_in_turn_lose_no_acknowledged_send(tmp_path):
    """Four seeded rounds under load, each SIGKILLing the leader or a follower and restarting it;
    then every member must hold every acknowledged key."""
    async with DLedgerCluster(tmp_path, broker_settings=FAST_ELECTIONS) as cluster:
        producer = SteadyProducer(cluster.namesrv_addr, "r", concurrency=4)
        await producer.start()
        try:
            await producer.wait_acks(100, 30)
            rounds = await kill_in_turn(cluster, producer, random.Random(7), 4)
        finally:
            acks = await producer.stop()
        assert any(r["was_master"] for r in rounds) and not all(r["was_master"] for r in rounds)
        await wait_caught_up(cluster, 30)
    assert_every_member_holds(cluster, tmp_path, acks.acked)


async def test_a_paused_leader_is_replaced_and_rejoins_as_a_follower_losing_nothing(tmp_path):
    """SIGSTOP of the leader under load: another is elected and acknowledges sends. SIGCONT: the old
    leader, whose term is over, steps down and catches up, and the group's master stays the new one;
    every member holds every acknowledged key."""
    settings = {**FAST_ELECTIONS, "register_name_server_period": 2000}
    async with DLedgerCluster(tmp_path, broker_settings=settings) as cluster:
        old = await cluster.wait_master(30)
        producer = SteadyProducer(cluster.namesrv_addr, "s", concurrency=4)
        await producer.start()
        try:
            await producer.wait_acks(200, 30)
            cluster.procs[old].pause()
            paused_at = time.monotonic()
            try:
                new = await cluster.wait_master(20, other_than=old)
                await producer.wait_acks(200, 30)
            finally:
                cluster.procs[old].resume()
            await producer.wait_acks(100, 30)
        finally:
            acks = await producer.stop()
        assert acks.first_ack_after(paused_at) is not None
        await wait_caught_up(cluster, 30)
        assert await cluster.wait_master(30) == new  # the resumed one did not take over again
    assert_every_member_holds(cluster, tmp_path, acks.acked)
