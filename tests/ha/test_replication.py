"""Static master/slave replication over the HA port, with real brokers and a real NameServer."""

from __future__ import annotations

import asyncio
import random
import socket

from ferrymq.ha.wire import master_handshake, transfer_header
from ferrymq.protocol.bodies import TopicRouteData, decode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.store import PutStatus
from tests.ha.conftest import caught_up, commitlog_bytes, eventually


async def test_slave_copies_a_byte_identical_commitlog_and_builds_its_own_queues(group):
    master = await group.start("m")
    slave = await group.start("s", broker_role="SLAVE", broker_id=1)
    for i in range(300):  # several 1 MiB segments' worth with the blank tails in between
        assert (
            await group.send(master, b"x" * 10_000 + b"%d" % i, queue_id=i % 4)
        ).code == ResponseCode.SUCCESS
    await caught_up(slave, master)
    assert len(master.store.commitlog.segments) >= 3
    assert commitlog_bytes(slave) == commitlog_bytes(master)
    assert [s.path.name for s in slave.store.commitlog.segments] == [
        s.path.name for s in master.store.commitlog.segments
    ]
    await asyncio.to_thread(slave.store.wait_dispatched)
    for q in range(4):
        assert slave.store.get_max_offset("T", q) == master.store.get_max_offset("T", q) == 75
    assert slave.epochs.entries == master.epochs.entries and master.epochs.last_epoch == 1


async def test_slave_is_read_only_and_registered_under_its_id(group):
    master = await group.start("m")
    slave = await group.start("s", broker_role="SLAVE", broker_id=1)
    refused = await group.send(slave)
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE and "slave" in refused.remark
    assert (await group.send(master)).code == ResponseCode.SUCCESS
    await slave.registrar.register_all()
    request = RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": "T"})
    route = decode_body(TopicRouteData, (await group.client.invoke(group.namesrv_addr, request)).body)
    addrs = route.broker_datas[0].broker_addrs
    assert addrs == {0: master.config.broker_addr, 1: slave.config.broker_addr}


async def test_slave_restart_resumes_from_its_own_offset(group):
    master = await group.start("m")
    slave = await group.start("s", broker_role="SLAVE", broker_id=1)
    for i in range(50):
        await group.send(master, b"a%d" % i)
    await caught_up(slave, master)
    await slave.stop()
    copied = slave.store.commitlog.max_offset
    for i in range(50):
        await group.send(master, b"b%d" % i)
    slave = await group.start("s", broker_role="SLAVE", broker_id=1)
    assert slave.store.commitlog.max_offset == copied  # kept what it had
    await caught_up(slave, master)
    assert commitlog_bytes(slave) == commitlog_bytes(master)
    await asyncio.to_thread(slave.store.wait_dispatched)
    assert slave.store.get_max_offset("T", 0) == 100


async def test_garbage_on_the_ha_port_gets_a_clean_disconnect(group):
    master = await group.start("m")
    reader, writer = await asyncio.open_connection("127.0.0.1", master.config.ha_listen_port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert await asyncio.wait_for(reader.read(), 10) == b""  # closed, nothing sent back
    writer.close()
    slave = await group.start("s", broker_role="SLAVE", broker_id=1)  # the service still works
    await group.send(master)
    await caught_up(slave, master)


def test_ha_port_defaults_to_listen_port_plus_one():
    from ferrymq.broker.config import BrokerConfig

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert BrokerConfig(listen_port=port).ha_listen_port == -1  # resolved to port + 1 at start
    assert BrokerConfig(broker_role="SLAVE", broker_id=2).broker_id == 2
    assert BrokerConfig(broker_role="SYNC_MASTER", broker_id=3).broker_id == 0


async def test_eventually_is_bounded():
    try:
        await eventually(lambda: False, 0.05)
    except AssertionError:
        return
    raise AssertionError("eventually() must give up")


async def test_default_ha_port_falls_back_to_a_free_one_when_listen_port_plus_one_is_taken(group):
    for _ in range(10):  # bounded: look for a free port p whose p + 1 we can hold
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            port = taken.getsockname()[1] - 1
            try:
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            broker = await group.start("m", listen_port=port, ha_listen_port=-1)
            assert broker.config.ha_listen_port not in (port + 1, 0)
            return
    raise AssertionError("found no free port pair")


async def test_replica_drops_a_master_that_goes_silent(group):
    async def mute_master(reader, writer) -> None:  # handshakes, then never sends a heartbeat
        await reader.readexactly(16)
        writer.write(master_handshake(0, []))
        while await reader.read(65536):
            pass

    server = await asyncio.start_server(mute_master, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    slave = await group.start(
        "s", broker_role="SLAVE", broker_id=1, ha_master_address=f"127.0.0.1:{port}",
        ha_housekeeping_interval=500, ha_send_heartbeat_interval=100,
    )  # fmt: skip
    await eventually(lambda: slave.ha_client is not None and slave.ha_client.connected, what="handshake")
    await eventually(
        lambda: (slave.ha_client.last_error or "").startswith("nothing from the master"),
        what="the silent master dropped",
    )
    server.close()


async def _fake_master(master, cut, *, before_ack: bytes = b""):
    """An HA server that handshakes as `master` and streams its CommitLog in frames of random sizes,
    written in pieces cut by `cut` (headers and bodies split anywhere), as a slow network would."""

    async def serve(reader, writer) -> None:
        store = master.store
        await reader.readexactly(16)
        writer.write(master_handshake(store.commitlog.max_offset, master.epochs.entries) + before_ack)
        await reader.readexactly(12)  # the replica's first ack
        entry = master.epochs.entries[0]
        stream, offset = bytearray(), store.commitlog.min_offset
        while offset < store.commitlog.max_offset:
            size = cut(1, 3000) if cut(0, 1) else cut(1, 70_000)  # several frames in one read, or one in many
            chunk = store.read_commitlog(offset, size)
            stream += transfer_header(offset, len(chunk), entry.epoch, entry.start_offset, offset) + chunk
            offset += len(chunk)
        pos = 0
        while pos < len(stream):
            n = cut(1, 9000)
            writer.write(stream[pos : pos + n])
            pos += n
            await writer.drain()
            await asyncio.sleep(0)  # the replica reads every piece on its own
        while await reader.read(65536):
            pass

    return await asyncio.start_server(serve, "127.0.0.1", 0)


async def test_slave_copies_transfers_however_the_network_cuts_them(group):
    master = await group.start("m", broker_name="source")  # another group: the slave copies only the fake
    rng = random.Random(7)
    for i in range(200):
        await group.send(
            master, bytes(rng.randrange(256) for _ in range(rng.randrange(1, 12_000))), queue_id=i % 3
        )
    server = await _fake_master(master, rng.randint)
    port = server.sockets[0].getsockname()[1]
    slave = await group.start("s", broker_role="SLAVE", broker_id=1, ha_master_address=f"127.0.0.1:{port}")
    await caught_up(slave, master)
    assert commitlog_bytes(slave) == commitlog_bytes(master)
    await asyncio.to_thread(slave.store.wait_dispatched)
    assert [slave.store.get_max_offset("T", q) for q in range(3)] == [67, 67, 66]
    assert slave.ha_client.last_error is None
    server.close()


async def test_a_master_that_streams_before_the_replicas_ack_is_refused(group):
    master = await group.start("m", broker_name="source")
    await group.send(master)
    early = transfer_header(0, 0, 1, 0, 0)
    server = await _fake_master(master, random.Random(1).randint, before_ack=early)
    port = server.sockets[0].getsockname()[1]
    slave = await group.start("s", broker_role="SLAVE", broker_id=1, ha_master_address=f"127.0.0.1:{port}")
    await eventually(
        lambda: "before the replica's first ack" in (slave.ha_client.last_error or ""), what="the refusal"
    )
    assert slave.store.commitlog.max_offset == 0
    server.close()


async def test_a_slave_writes_nothing_of_its_own_not_even_due_scheduled_messages(group):
    master = await group.start("m")
    slave = await group.start("s", broker_role="SLAVE", broker_id=1)
    assert slave.store.put_message("T", 0, b"x").status is PutStatus.SERVICE_NOT_AVAILABLE
    assert (await group.send(master, b"later", props={"DELAY": "1"})).code == ResponseCode.SUCCESS
    await eventually(lambda: master.store.get_max_offset("T", 0) == 1, what="the master to deliver it")
    await caught_up(slave, master)
    assert commitlog_bytes(slave) == commitlog_bytes(master)
