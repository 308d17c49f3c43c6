"""Controller-mode failover under fire: real processes, SIGKILL, SIGSTOP, network cuts, random schedules.

Every test keeps producers running with acks that need the whole SyncStateSet, applies a fault, waits
on conditions (bounded), then reads the topic back from the current master: every acknowledged key
must be there. Failover times are printed here and measured properly by `ferrymq bench failover`.
"""

from __future__ import annotations

import asyncio
import os
import random
import time

import pytest

from ferrymq.bench.failover import TOPIC, SteadyProducer, read_back, under_load
from ferrymq.bench.processes import ProcessCluster
from ferrymq.client import MessageQueue, PullConsumer
from ferrymq.protocol.codes import RequestCode, ResponseCode
from tests.faults import direct_sender
from tests.faults.classic import ferrymq_cli as ferrymq

pytestmark = [pytest.mark.faults, pytest.mark.timeout(600)]

SETTLE = 90.0  # seconds any one recovery step may take on a busy two-core machine


async def full_group(cluster: ProcessCluster):
    return await cluster.wait_full_group(SETTLE)


GROUP = "carry-on"


async def consume_and_commit(cluster: ProcessCluster) -> dict[MessageQueue, int]:
    """Consume what is there with GROUP and commit; the committed offsets of the queues it read."""
    async with PullConsumer(GROUP, cluster.namesrv_addr, consume_from="first") as consumer:
        await consumer.subscribe(TOPIC)
        assert await consumer.poll(timeout=10.0)
        await consumer.commit()
        return {mq: offset for mq, offset in consumer.positions.items() if offset > 0}


async def wait_offsets(cluster: ProcessCluster, broker: str, committed: dict[MessageQueue, int]) -> None:
    async def there() -> bool:
        for mq, offset in committed.items():
            ext = {"consumerGroup": GROUP, "topic": mq.topic, "queueId": str(mq.queue_id)}
            response = await cluster.call(broker, RequestCode.QUERY_CONSUMER_OFFSET, ext)
            if response.code != ResponseCode.SUCCESS or int(response.ext_fields["offset"]) != offset:
                return False
        return True

    deadline = time.monotonic() + SETTLE
    while not await there():
        assert time.monotonic() < deadline, f"{broker} never had the committed offsets"
        await asyncio.sleep(0.5)


async def check_nothing_lost(cluster: ProcessCluster, producer: SteadyProducer) -> None:
    acks = await producer.stop()
    found, total = await read_back(cluster.namesrv_addr, set(acks.acked), timeout=SETTLE)
    lost = sorted(set(acks.acked) - found)
    assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {lost[:5]}"
    # Duplicates come only from retried sends (a send that timed out on the broker that stored it).
    assert total - len(found) <= acks.failed_attempts, (total, len(found), acks.failed_attempts)


async def test_killed_master_is_replaced_then_rejoins_as_slave_and_catches_up(fault_cluster):
    cluster = await fault_cluster()
    old_master, before, producer = await under_load(cluster, "a")
    committed = await consume_and_commit(cluster)
    for slave in before.sync_state_set - {before.master_id}:  # slaves copy offsets every few seconds
        await wait_offsets(cluster, before.addresses[slave], committed)

    killed_at = time.monotonic()
    cluster.procs[old_master].kill()
    after = await cluster.wait_new_master(before, SETTLE)
    assert after.master_id in before.sync_state_set and after.master_epoch == before.master_epoch + 1
    await producer.wait_acks(100, SETTLE)
    resumed = producer.log.first_ack_after(killed_at)
    print(f"sends succeeded again {resumed - killed_at:.2f} s after the master's SIGKILL")
    async with PullConsumer(GROUP, cluster.namesrv_addr) as consumer:  # carries on where it committed
        for mq, offset in committed.items():
            assert await consumer.committed(mq) == offset

    # b. The old master comes back: it follows the new master, truncates, catches up, re-enters the set.
    await cluster.start_broker(old_master)
    rejoined = await full_group(cluster)
    assert rejoined.master_id == after.master_id and rejoined.master_epoch == after.master_epoch
    assert "becoming master" not in cluster.procs[old_master].log_text().split("--- start")[-1]
    await producer.wait_acks(50, SETTLE)

    # The admin commands: see the group, then switch the master back by hand.
    admin = ["admin", "--namesrv", cluster.namesrv_addr]
    table = await ferrymq(*admin, "cluster", "--controller", cluster.controller_list)
    assert f"master {after.master_id} epoch {after.master_epoch}, SyncStateSet [1, 2, 3]" in table, table
    switched = await ferrymq(
        *admin, "elect-master", "broker-a", str(before.master_id), "--controller", cluster.controller_list
    )
    assert (
        f"master is broker {before.master_id}" in switched and f"epoch {after.master_epoch + 1}" in switched
    )
    await producer.wait_acks(50, SETTLE)
    await check_nothing_lost(cluster, producer)


async def test_controller_leader_killed_in_the_middle_of_a_failover(fault_cluster):
    cluster = await fault_cluster()
    master, before, producer = await under_load(cluster, "c")

    leader = await cluster.controller_leader()
    cluster.procs[master].kill()
    cluster.procs[leader].kill()  # the leader that saw the master go is gone too
    after = await cluster.wait_new_master(before, SETTLE)
    assert after.master_epoch == before.master_epoch + 1
    assert await cluster.controller_leader() != leader
    await producer.wait_acks(100, SETTLE)
    cluster.procs[leader].start()  # the old controller rejoins the Raft group from its log
    await cluster.start_broker(master)
    await full_group(cluster)
    await check_nothing_lost(cluster, producer)


async def fencing_check(cluster: ProcessCluster, cut_off, restore, sender_prefix: list[str] | None) -> None:
    """Cut the master off, wait for the new epoch, let it loose again: it must acknowledge nothing after."""
    master, before, producer = await under_load(cluster, "d", warmup=50)
    address = cluster.broker_addrs[cluster.brokers.index(master)]

    cut_off(master)
    after = await cluster.wait_new_master(before, SETTLE)
    new_epoch_at = time.time()
    await producer.wait_acks(50, SETTLE)
    out = cluster.root / "direct.jsonl"
    sender = direct_sender.launch(address, TOPIC, 8.0, out, sender_prefix)
    await asyncio.sleep(1.0)
    restore(master)
    await asyncio.to_thread(sender.wait, 120)
    results = direct_sender.answers(out)
    acked_late = [r for r in results if r["code"] == ResponseCode.SUCCESS and r["answered_at"] > new_epoch_at]
    assert not acked_late, (
        f"the old master acknowledged {len(acked_late)} writes after epoch {after.master_epoch}"
    )
    assert results, "the direct sender reported nothing"
    rejoined = await full_group(cluster)
    assert rejoined.master_id == after.master_id
    await check_nothing_lost(cluster, producer)


async def test_paused_master_is_fenced(fault_cluster):
    cluster = await fault_cluster()
    await fencing_check(
        cluster, lambda m: cluster.procs[m].pause(), lambda m: cluster.procs[m].resume(), None
    )


@pytest.mark.root
async def test_partitioned_master_is_fenced(fault_cluster, netns):
    cluster = await fault_cluster(netns=True)
    network = cluster.network
    assert network is not None
    index = {name: i for i, name in enumerate(cluster.brokers)}
    master, _ = await cluster.master()
    await fencing_check(
        cluster,
        lambda m: network.cut(index[m]),
        lambda m: network.heal(index[m]),
        network.prefix(index[master]),  # the sender sits beside the old master, inside its namespace
    )


async def test_seeded_random_schedule_loses_nothing(fault_cluster):
    """Kills, pauses and restarts at random (FERRYMQ_FAULT_ROUNDS rounds; 100+ locally, few in CI)."""
    rounds = int(os.environ.get("FERRYMQ_FAULT_ROUNDS", "6" if os.environ.get("CI") else "20"))
    seed = int(os.environ.get("FERRYMQ_FAULT_SEED", "20261122"))
    rng = random.Random(seed)
    cluster = await fault_cluster()
    _, _, producer = await under_load(cluster, "e", warmup=30, concurrency=2)
    controllers = list(cluster.controller_addrs)
    for round_no in range(rounds):
        fault = rng.choice(["kill-master", "kill-slave", "pause-master", "kill-controller", "pause-slave"])
        master, _ = await cluster.master()
        slaves = [b for b in cluster.brokers if b != master]
        victim = {
            "kill-master": master, "pause-master": master, "kill-slave": rng.choice(slaves),
            "pause-slave": rng.choice(slaves), "kill-controller": rng.choice(controllers),
        }[fault]  # fmt: skip
        print(f"round {round_no} (seed {seed}): {fault} {victim}")
        proc = cluster.procs[victim]
        if fault.startswith("kill"):
            proc.kill()
        else:
            proc.pause()
        await asyncio.sleep(rng.uniform(0.5, 5.0))
        if fault.startswith("pause"):
            proc.resume()
        elif victim in controllers:
            proc.start()
        else:
            await cluster.start_broker(victim)
        await full_group(cluster)
        await producer.wait_acks(20, SETTLE)
    await check_nothing_lost(cluster, producer)
