"""Replication QoS level 2 on real brokers in this process (classic master/slave): the walk up to sync,
sends held in semi-sync until a replica is within the window, and the walk back down."""

from __future__ import annotations

import asyncio
import time

from ferrymq.ha.qos import QosState
from ferrymq.protocol.codes import ResponseCode
from tests.ha.conftest import eventually
from tests.ha.test_sync_master import silent_replica

QOS = {"replication_qos_level": 2, "ha_max_time_slave_not_catchup": 600, "sync_flush_timeout": 2000}


def state(broker) -> QosState:
    assert broker.ha.qos is not None
    return broker.ha.qos.state


async def test_walks_up_to_sync_and_back_down_when_the_slave_goes(group):
    # A departed slave stays in the SyncStateSet for 5 s: long enough to see a send held in vain.
    settings = {**QOS, "ha_max_time_slave_not_catchup": 5000, "sync_flush_timeout": 500}
    master = await group.start("m", **settings)
    await eventually(lambda: state(master) is QosState.SINGLE_MASTER, what="single master")
    for i in range(20):  # alone, availability first: acknowledged at once
        assert (await group.send(master, b"alone-%d" % i)).code == ResponseCode.SUCCESS
    assert master.runtime_info()["replicationQosState"] == "single_master"

    slave = await group.start("s", broker_role="SLAVE", broker_id=1, **settings)
    seen: list[QosState] = []

    def synced() -> bool:
        if not seen or seen[-1] is not state(master):
            seen.append(state(master))
        return state(master) is QosState.SYNC

    await eventually(synced, what="the group to reach sync")
    assert QosState.SEMI_SYNC in seen, seen  # passed through semi-sync on the way
    assert master.ha.sync_state_set == {0, 1}
    for i in range(20):  # in sync, an acknowledged send is on the slave already
        assert (await group.send(master, b"sync-%d" % i)).code == ResponseCode.SUCCESS
        assert slave.store.commitlog.max_offset >= master.store.commitlog.max_offset

    stopped_at = time.monotonic()
    await slave.stop()
    held = await group.send(master, b"held", timeout=2.0)  # the slave is still in the set: it waits, in vain
    assert time.monotonic() - stopped_at < 5.0, "too slow to see the set before it shrank"
    assert held.code == ResponseCode.FLUSH_SLAVE_TIMEOUT
    await eventually(lambda: state(master) is QosState.SINGLE_MASTER, what="single master again")
    assert master.ha.sync_state_set == {0}
    assert (await group.send(master, b"after")).code == ResponseCode.SUCCESS


async def test_semi_sync_holds_a_send_until_a_replica_is_within_the_window(group):
    settings = {"replication_qos_semi_sync_gap": 4, "ha_max_time_slave_not_catchup": 4000,
                "sync_flush_timeout": 1500}  # fmt: skip
    master = await group.start("m", **{**QOS, **settings})
    _, writer = await silent_replica(master.config.ha_listen_port)  # acks offset 0 once, then nothing
    await eventually(lambda: state(master) is QosState.SEMI_SYNC, what="semi-sync (nothing sent yet)")
    # The window starts at 4 sends: the first four are within it of a replica at offset 0.
    sends = [asyncio.ensure_future(group.send(master, b"w-%d" % i)) for i in range(6)]
    done, pending = await asyncio.wait(sends, timeout=0.5)
    assert len(pending) >= 2, "sends beyond the window must wait for the replica"
    assert {t.result().code for t in done} == {ResponseCode.SUCCESS}
    results = await asyncio.gather(*pending)
    assert {r.code for r in results} == {ResponseCode.FLUSH_SLAVE_TIMEOUT}  # it never acked
    assert state(master) is QosState.SEMI_SYNC  # the replica has not been silent for 4 s yet
    await eventually(lambda: state(master) is QosState.ASYNC, what="async: the replica stalled")
    assert (await group.send(master, b"after")).code == ResponseCode.SUCCESS
    writer.close()
