"""Role changes at run time, as the controller drives them: promotion, demotion with truncation, fencing."""

from __future__ import annotations

import asyncio
import os
import time

from ferrymq.protocol.codes import ResponseCode
from ferrymq.store.epoch import EpochEntry
from tests.ha.conftest import caught_up, commitlog_bytes, eventually

CONTROLLER = {"enable_controller_mode": True}


async def make_master(broker, broker_id: int, epoch: int) -> None:
    await broker.change_role(
        "master", broker_id=broker_id, epoch=epoch, master_addr=None, master_ha_addr=None
    )


async def make_slave(broker, broker_id: int, epoch: int, master) -> None:
    await broker.change_role(
        "slave", broker_id=broker_id, epoch=epoch, master_addr=master.config.broker_addr,
        master_ha_addr=master.config.ha_addr,
    )  # fmt: skip


async def test_controller_mode_broker_takes_no_writes_until_given_a_role(group):
    a = await group.start("a", broker_id=1, **CONTROLLER)
    assert (await group.send(a)).code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert group.namesrv.routes.cluster_info().broker_addr_table == {}  # not registered without a role
    await make_master(a, 1, epoch=1)
    assert (await group.send(a)).code == ResponseCode.SUCCESS
    assert a.epochs.entries == [EpochEntry(1, 0)]
    await a.registrar.register_all()
    addrs = group.namesrv.routes.cluster_info().broker_addr_table["broker-a"].broker_addrs
    assert addrs == {0: a.config.broker_addr}  # the master registers as id 0


async def test_old_master_rejoins_as_slave_and_truncates_its_divergent_tail(group):
    a = await group.start("a", broker_id=1, **CONTROLLER)
    b = await group.start("b", broker_id=2, **CONTROLLER)
    await make_master(a, 1, epoch=1)
    await make_slave(b, 2, 1, a)
    for i in range(40):
        await group.send(a, b"common-%d" % i, queue_id=i % 2)
    await caught_up(b, a)
    common = a.store.commitlog.max_offset

    # b is elected (epoch 2) while a, not yet told, still takes writes of the old epoch.
    await make_master(b, 2, epoch=2)
    for i in range(5):
        assert (await group.send(a, b"lost-%d" % i)).code == ResponseCode.SUCCESS
    for i in range(8):
        assert (await group.send(b, b"new-%d" % i)).code == ResponseCode.SUCCESS
    assert b.epochs.entries == [EpochEntry(1, 0), EpochEntry(2, common)]

    await make_slave(a, 1, 2, b)  # a learns of epoch 2: it cuts its epoch-1 tail and copies b
    assert (await group.send(a)).code == ResponseCode.SERVICE_NOT_AVAILABLE
    await caught_up(a, b)
    assert commitlog_bytes(a) == commitlog_bytes(b)
    assert a.epochs.entries == b.epochs.entries
    await asyncio.to_thread(a.store.wait_dispatched)
    assert a.store.get_max_offset("T", 0) == b.store.get_max_offset("T", 0) == 28  # 20 common + 8 new
    assert b"lost-" not in commitlog_bytes(a) and b"new-7" in commitlog_bytes(a)

    # And back: a is promoted again (epoch 3), b follows it.
    await make_master(a, 1, epoch=3)
    await make_slave(b, 2, 3, a)
    assert (await group.send(a, b"after")).code == ResponseCode.SUCCESS
    await caught_up(b, a)
    assert commitlog_bytes(a) == commitlog_bytes(b)


async def test_a_replica_refuses_a_master_of_an_older_epoch(group):
    a = await group.start("a", broker_id=1, **CONTROLLER)
    b = await group.start("b", broker_id=2, **CONTROLLER)
    await make_master(a, 1, epoch=1)
    await group.send(a)
    await make_slave(b, 2, 5, a)  # b was told epoch 5: a (epoch 1) is stale
    await eventually(lambda: "stale" in (b.ha_client.last_error or ""), what="the refusal")
    assert b.store.commitlog.max_offset == 0 and not a.ha.connections
    await make_master(a, 1, epoch=5)
    await eventually(lambda: b.store.commitlog.max_offset == a.store.commitlog.max_offset, what="copy")


async def test_stale_role_changes_are_ignored_and_demotion_fails_waiting_sends(group):
    a = await group.start("a", broker_id=1, all_ack_in_sync_state_set=True, **CONTROLLER)
    await make_master(a, 1, epoch=4)
    await make_master(a, 1, epoch=3)  # older: ignored
    await a.change_role("slave", broker_id=1, epoch=2, master_addr=None, master_ha_addr=None)  # ignored
    assert a.epoch == 4 and a.epochs.last_epoch == 4 and a.is_master
    a.ha.set_sync_state_set({1, 2}, epoch=1)  # a member that never acks
    pending = asyncio.ensure_future(group.send(a, b"never-acked"))
    await eventually(lambda: a.ha._waiters, what="the send to wait")
    await a.change_role("slave", broker_id=1, epoch=5, master_addr=None, master_ha_addr=None)
    assert (await pending).code == ResponseCode.FLUSH_SLAVE_TIMEOUT  # never SUCCESS from a stale master


async def test_being_told_the_same_role_again_changes_nothing(group):
    a = await group.start("a", broker_id=1, **CONTROLLER)
    b = await group.start("b", broker_id=2, **CONTROLLER)
    await make_master(a, 1, epoch=1)
    await make_slave(b, 2, 1, a)
    await eventually(lambda: 2 in a.ha.connections, what="the slave to attach")
    attached = a.ha.connections[2]
    client = b.ha_client
    await make_master(a, 1, epoch=1)
    await make_slave(b, 2, 1, a)
    assert a.ha.connections.get(2) is attached and b.ha_client is client
    assert a.epochs.entries == [EpochEntry(1, 0)]


async def test_replicas_let_consumers_read_only_what_the_sync_state_set_confirmed(group):
    """RocketMQ's readUnCommitted = false: with acks from the whole SyncStateSet, a replica holds
    back from its ConsumeQueues what not every member has (a failover could cut it), and shows it
    as soon as the master confirms it, or once it is master itself."""
    settings = {**CONTROLLER, "all_ack_in_sync_state_set": True, "sync_flush_timeout": 300}
    a = await group.start("a", broker_id=1, **settings)
    b = await group.start("b", broker_id=2, **settings)
    c = await group.start("c", broker_id=3, **settings)
    await make_master(a, 1, epoch=1)
    await make_slave(b, 2, 1, a)
    await make_slave(c, 3, 1, a)
    for i in range(4):
        await group.send(a, b"confirmed-%d" % i)
    await caught_up(b, a)
    await caught_up(c, a)
    a.ha.set_sync_state_set({1, 2, 3}, 1)

    await c._stop_replicating()  # c falls behind: nothing new is confirmed
    for i in range(3):
        assert (await group.send(a, b"unconfirmed-%d" % i)).code == ResponseCode.FLUSH_SLAVE_TIMEOUT
    await caught_up(b, a)
    await asyncio.to_thread(b.store.wait_dispatched)
    assert b.store.get_max_offset("T", 0) == 4  # b holds all 7, shows the 4 confirmed

    await make_slave(c, 3, 1, a)  # c catches up: the master confirms the rest and tells b at once
    await eventually(lambda: b.store.get_max_offset("T", 0) == 7, 10, "b to show the confirmed rest")

    await c._stop_replicating()
    assert (await group.send(a, b"b-has-it")).code == ResponseCode.FLUSH_SLAVE_TIMEOUT
    await caught_up(b, a)
    await make_master(b, 2, epoch=2)  # elected: what it holds is the log now
    await eventually(lambda: b.store.get_max_offset("T", 0) == 8, 10, "b, master, to show all it has")


async def test_retention_trims_the_epoch_files_of_master_and_replica(group):
    a = await group.start("a", broker_id=1, file_reserved_time=1, **CONTROLLER)
    b = await group.start("b", broker_id=2, file_reserved_time=1, **CONTROLLER)
    starts = []
    for epoch in (1, 2, 3):  # a stays master, each epoch writing about a 1 MiB segment
        await make_master(a, 1, epoch=epoch)
        await make_slave(b, 2, epoch, a)
        starts.append(a.store.commitlog.max_offset)
        for _ in range(10):
            assert (await group.send(a, b"x" * 100_000)).code == ResponseCode.SUCCESS
    await caught_up(b, a)
    written = [EpochEntry(e, s) for e, s in zip((1, 2, 3), starts, strict=True)]
    assert a.epochs.entries == b.epochs.entries == written

    for broker in (a, b):
        await asyncio.to_thread(broker.store.wait_dispatched)
        for seg in broker.store.commitlog.segments:  # expired: older than file_reserved_time (1 h)
            os.utime(seg.path, (time.time() - 7200, time.time() - 7200))
        assert await asyncio.to_thread(broker.store.retention.run, manual=True) >= 2
        ends = [*starts[1:], 1 << 62]
        kept = [
            entry
            for entry, end in zip(written, ends, strict=True)
            if end >= broker.store.commitlog.min_offset
        ]
        await eventually(lambda b=broker, kept=kept: b.epochs.entries == kept, 10, "the epoch file trimmed")
        assert kept[0].epoch > 1  # the test deleted enough for epoch 1 to go
