"""When a send is acknowledged: SYNC_MASTER (static) and the SyncStateSet rules (controller mode)."""

from __future__ import annotations

import asyncio

from ferrymq.ha.wire import MasterStreamDecoder, ReplicaHandshake, ack, replica_handshake
from ferrymq.protocol.codes import ResponseCode
from tests.ha.conftest import caught_up, eventually


async def test_sync_master_acks_only_what_the_slave_has(group):
    master = await group.start("m", broker_role="SYNC_MASTER")
    slave = await group.start("s", broker_role="SLAVE", broker_id=1)
    await eventually(lambda: master.ha.connections, what="the slave to attach")
    for i in range(30):
        response = await group.send(master, b"sync-%d" % i)
        assert response.code == ResponseCode.SUCCESS
        assert slave.store.commitlog.max_offset >= master.store.commitlog.max_offset  # already copied


async def test_sync_master_without_a_slave_says_slave_not_available(group):
    master = await group.start("m", broker_role="SYNC_MASTER")
    response = await group.send(master, b"alone")
    assert response.code == ResponseCode.SLAVE_NOT_AVAILABLE
    assert response.ext_fields["msgId"]  # stored on the master, as RocketMQ answers
    assert master.store.get_max_offset("T", 0) == 1


async def silent_replica(ha_port: int, broker_id: int = 1):
    """A replica that handshakes and acks offset 0 once, then never acks again."""
    reader, writer = await asyncio.open_connection("127.0.0.1", ha_port)
    writer.write(replica_handshake(ReplicaHandshake(broker_id)))
    decoder = MasterStreamDecoder()
    while not decoder.feed(await reader.read(65536)):
        pass
    writer.write(ack(0))
    return reader, writer


async def test_sync_master_times_out_with_flush_slave_timeout(group):
    master = await group.start("m", broker_role="SYNC_MASTER", sync_flush_timeout=300)
    _, writer = await silent_replica(master.config.ha_listen_port)
    await eventually(lambda: master.ha.connections, what="the replica to attach")
    response = await group.send(master, b"unconfirmed")
    assert response.code == ResponseCode.FLUSH_SLAVE_TIMEOUT
    writer.close()


async def test_async_master_does_not_wait(group):
    master = await group.start("m", sync_flush_timeout=300)
    _, writer = await silent_replica(master.config.ha_listen_port)
    assert (await group.send(master)).code == ResponseCode.SUCCESS
    writer.close()


async def test_static_master_shrinks_and_expands_its_sync_state_set(group):
    master = await group.start("m", ha_max_time_slave_not_catchup=300)
    proposals = []
    master.ha.on_sync_state_set_proposal(proposals.append)
    slave = await group.start("s", broker_role="SLAVE", broker_id=1)
    await group.send(master)
    await eventually(lambda: master.ha.sync_state_set == {0, 1}, what="the slave to join")
    await slave.stop()
    await group.send(master)  # the slave is now behind, and gone
    await eventually(lambda: master.ha.sync_state_set == {0}, what="the slave to be dropped")
    assert {0, 1} in proposals and {0} in proposals
    slave = await group.start("s", broker_role="SLAVE", broker_id=1)
    await caught_up(slave, master)
    await eventually(lambda: master.ha.sync_state_set == {0, 1}, what="the slave to rejoin")


async def controller_pair(group, **settings):
    """A master (id 1) and a slave (id 2) placed by hand, as the controller would place them."""
    settings = {"enable_controller_mode": True, **settings}
    master = await group.start("m", broker_id=1, **settings)
    slave = await group.start("s", broker_id=2, **settings)
    await master.change_role("master", broker_id=1, epoch=1, master_addr=None, master_ha_addr=None)
    await slave.change_role(
        "slave",
        broker_id=2,
        epoch=1,
        master_addr=master.config.broker_addr,
        master_ha_addr=master.config.ha_addr,
    )
    await eventually(lambda: 2 in master.ha.connections, what="the slave to attach")
    return master, slave


async def test_all_ack_in_sync_state_set_waits_for_every_member(group):
    master, slave = await controller_pair(group, all_ack_in_sync_state_set=True, sync_flush_timeout=2000)
    proposals = []
    master.ha.on_sync_state_set_proposal(proposals.append)
    await group.send(master)
    await eventually(lambda: {1, 2} in proposals, what="a proposal to add the caught-up slave")
    assert master.ha.sync_state_set == {1}  # controller mode: only the controller's answer counts
    master.ha.set_sync_state_set({1, 2}, epoch=1)
    for i in range(10):
        assert (await group.send(master, b"%d" % i)).code == ResponseCode.SUCCESS
        assert slave.store.commitlog.max_offset >= master.store.commitlog.max_offset
    await slave.ha_client.stop()  # the member stops copying: no ack for anything new
    assert (await group.send(master, b"stuck")).code == ResponseCode.FLUSH_SLAVE_TIMEOUT


async def test_min_in_sync_replicas_is_enforced(group):
    master, _ = await controller_pair(group, min_in_sync_replicas=2)
    response = await group.send(master)
    assert response.code == ResponseCode.SYSTEM_ERROR and "IN_SYNC_REPLICAS_NOT_ENOUGH" in response.remark
    master.ha.set_sync_state_set({1, 2}, epoch=1)
    assert (await group.send(master)).code == ResponseCode.SUCCESS
