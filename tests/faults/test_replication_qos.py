"""Replication QoS level 2 with real broker processes on loopback.

Classic master/slave: the master alone is a single master; a slave that connects walks the group
up to sync through semi-sync; SIGSTOP on the slave brings it back down to async (sends held
meanwhile answer FLUSH_SLAVE_TIMEOUT, later ones are acknowledged), SIGCONT walks it up again
through async, semi-sync and sync, SIGKILL takes it down to single master. Controller mode: a master
SIGKILLed in sync loses no acknowledged message once its slave is promoted. Transitions are read
from the master's log, where each is written as it happens (polling a state could miss a short one).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from ferrymq.bench.failover import read_back, under_load
from ferrymq.protocol.codes import ResponseCode
from tests.faults.classic import SETTLE, ClassicCluster, ferrymq_cli

pytestmark = [pytest.mark.faults, pytest.mark.timeout(600)]

QOS = {
    "FERRYMQ_REPLICATION_QOS_LEVEL": "2",
    "FERRYMQ_HA_MAX_TIME_SLAVE_NOT_CATCHUP": "3000",
    "FERRYMQ_SYNC_FLUSH_TIMEOUT": "1000",
}
TOPIC = "QosTopic"


def transition(before: str, after: str) -> str:
    return f"replication QoS (level 2): {before} -> {after}"


@pytest.fixture
async def classic(tmp_path):
    cluster = ClassicCluster(tmp_path, "QosCluster")
    cluster.add_broker("master", "broker-q", QOS)
    cluster.add_broker("slave", "broker-q", QOS, slave_id=1)
    yield cluster
    await cluster.stop()


async def keep_sending(cluster: ClassicCluster, stop: asyncio.Event, codes: list[int]) -> None:
    """Send one message at a time to the master until told to stop; each answer's code goes to `codes`."""
    i = 0
    while not stop.is_set():
        codes.append(await cluster.send("master", TOPIC, b"x" * 512 + b"%d" % i))
        i += 1


async def wait_count(codes: list[int], count: int) -> None:
    deadline = time.monotonic() + SETTLE
    while len(codes) < count:
        assert time.monotonic() < deadline, f"only {len(codes)} of {count} sends answered"
        await asyncio.sleep(0.05)


async def test_classic_group_walks_up_and_down_with_its_slave(classic):
    cluster = classic
    master, slave = cluster.brokers["master"], cluster.brokers["slave"]
    await cluster.start(cluster.namesrv)
    await cluster.start(master)
    assert (await cluster.runtime("master"))["replicationQosState"] == "single_master"
    for i in range(1000):  # a backlog the slave copies first
        assert await cluster.send("master", TOPIC, b"backlog-%d" % i + b"." * 4096) == ResponseCode.SUCCESS

    stop, codes = asyncio.Event(), []
    sender = asyncio.create_task(keep_sending(cluster, stop, codes))
    try:
        await cluster.start(slave)
        await master.wait_for_line(transition("semi_sync", "sync"), SETTLE)
        # Up from single master, through async unless the backlog was copied within one look.
        lines = master.log_text().splitlines()
        walk = [line.rsplit("): ", 1)[1] for line in lines if "replication QoS" in line]
        assert walk[:3] in (
            ["single_master -> async", "async -> semi_sync", "semi_sync -> sync"],
            ["single_master -> semi_sync", "semi_sync -> sync"],
        ), walk
        assert (await cluster.runtime("master"))["replicationQosState"] == "sync"
        table = await ferrymq_cli("admin", "--namesrv", cluster.namesrv_addr, "cluster")
        assert "replication sync (QoS level 2)" in table, table

        # SIGSTOP: sends wait for the frozen slave until it leaves the SyncStateSet, then go on alone.
        since = len(master.log_text())
        slave.pause()
        await master.wait_for_line(transition("sync", "async"), SETTLE, since)
        frozen_at = len(codes)
        await wait_count(codes, frozen_at + 20)
        assert set(codes[frozen_at:]) == {ResponseCode.SUCCESS}  # availability first

        since = len(master.log_text())
        slave.resume()  # the whole walk up: async -> semi_sync -> sync
        await master.wait_for_line(transition("async", "semi_sync"), SETTLE, since)
        await master.wait_for_line(transition("semi_sync", "sync"), SETTLE, since)

        since = len(master.log_text())
        slave.kill()
        await master.wait_for_line(transition("sync", "single_master"), SETTLE, since)
        after = len(codes)
        await wait_count(codes, after + 20)
        assert set(codes[after:]) == {ResponseCode.SUCCESS}
    finally:
        stop.set()
        await sender
    assert ResponseCode.FLUSH_SLAVE_TIMEOUT in codes  # the sends held while the slave was frozen


async def test_controller_mode_master_killed_in_sync_loses_no_acknowledged_message(fault_cluster):
    cluster = await fault_cluster(
        replicas=2, broker_settings={"replication_qos_level": 2, "sync_flush_timeout": 3000}
    )
    master_name, _ = await cluster.master()
    await cluster.procs[master_name].wait_for_line(transition("semi_sync", "sync"), SETTLE)
    table = await ferrymq_cli("admin", "--namesrv", cluster.namesrv_addr, "cluster",
                              "--controller", cluster.controller_list)  # fmt: skip
    assert "replication sync (QoS level 2)" in table, table

    old_master, before, producer = await under_load(cluster, "qos")
    cluster.procs[old_master].kill()
    after = await cluster.wait_new_master(before, SETTLE)
    assert after.master_id in before.sync_state_set
    await producer.wait_acks(100, SETTLE)
    acks = await producer.stop()
    found, _ = await read_back(cluster.namesrv_addr, set(acks.acked), timeout=SETTLE)
    lost = sorted(set(acks.acked) - found)
    assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {lost[:5]}"
