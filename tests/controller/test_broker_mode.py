"""Brokers in controller mode, in this process: ids, roles, NameServer routes, fencing, manual switch."""

from __future__ import annotations

import pytest

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.replicas import META_FILE
from ferrymq.broker.server import Broker
from ferrymq.client import Admin, Message, Producer
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.server import NameServer
from ferrymq.protocol.bodies import ClusterInfo, decode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.store import StoreConfig
from tests.faults.direct_sender import request as direct_send_request

from .conftest import wait_for

NAME = "broker-a"


class Setup:
    def __init__(self, tmp_path, namesrv: NameServer, controllers: str) -> None:
        self.tmp_path = tmp_path
        self.namesrv = namesrv
        self.namesrv_addr = f"127.0.0.1:{namesrv.port}"
        self.controllers = controllers
        self.brokers: list[Broker] = []

    async def broker(self, index: int, **settings) -> Broker:
        store = StoreConfig(
            store_path_root_dir=self.tmp_path / f"broker{index}", mapped_file_size_commit_log=1 << 20,
            mapped_file_size_consume_queue=1000 * 20, max_hash_slot_num=1024, max_index_num=10_000,
        )  # fmt: skip
        config = BrokerConfig(
            broker_name=NAME, namesrv_addr=self.namesrv_addr, listen_host="127.0.0.1", listen_port=0,
            enable_controller_mode=True, controller_addr=self.controllers, broker_heartbeat_interval=200,
            ha_listen_port=0, store=store, **settings,
        )  # fmt: skip
        broker = Broker(config)
        await broker.start()
        self.brokers.append(broker)
        return broker

    async def route_ids(self) -> dict[int, str]:
        response = await self.namesrv_call(RequestCode.GET_BROKER_CLUSTER_INFO)
        info = decode_body(ClusterInfo, response.body).broker_addr_table.get(NAME)
        return dict(info.broker_addrs) if info else {}

    async def namesrv_call(self, code: int) -> RemotingCommand:
        return await self.brokers[0].client.invoke(self.namesrv_addr, RemotingCommand(code), 5.0)


@pytest.fixture
async def setup(tmp_path, controller_group):
    group = await controller_group()
    await group.leader()
    namesrv = NameServer(NamesrvConfig(listen_host="127.0.0.1", listen_port=0))
    await namesrv.start()
    s = Setup(tmp_path, namesrv, ";".join(group.addresses))
    s.group = group
    yield s
    for broker in reversed(s.brokers):
        if not broker.stopped:
            await broker.stop()
    await namesrv.stop()


async def direct_send(broker: Broker, to: Broker, key: str) -> int:
    response = await broker.client.invoke(to.config.broker_addr, direct_send_request("T", key), 5.0)
    return response.code


async def test_ids_roles_routes_replication_and_a_manual_switch(setup):
    first = await setup.broker(0)
    second = await setup.broker(1)
    assert (first.replicas.broker_id, first.replicas.role) == (1, "master")
    assert (second.replicas.broker_id, second.replicas.role) == (2, "slave")
    assert (setup.tmp_path / "broker0" / META_FILE).exists()
    await wait_for(
        lambda: _routes_are(setup, {0: first.config.broker_addr, 2: second.config.broker_addr}), what="routes"
    )
    assert await direct_send(first, second, "to-the-slave") != ResponseCode.SUCCESS

    async with Producer("P", setup.namesrv_addr) as producer:
        for i in range(20):
            await producer.send(Message("T", f"m{i}".encode()))
    await wait_for(lambda: second.store.commitlog.max_offset == first.store.commitlog.max_offset, what="copy")

    async with Admin(setup.namesrv_addr) as admin:
        groups = await wait_for(
            lambda: _in_sync(admin, setup.controllers, {1, 2}), what="both replicas in the SyncStateSet"
        )
        (group,) = groups
        assert (group.master_id, group.master_epoch) == (1, 1)
        assert {(r.broker_id, r.role) for r in group.replicas} == {(1, "master"), (2, "slave")}
        switched = await admin.elect_master(setup.controllers, NAME, 2)
        assert (switched.master_broker_id, switched.master_epoch) == (2, 2)
    await wait_for(lambda: second.replicas.role == "master" and first.replicas.role == "slave", what="switch")
    await wait_for(
        lambda: _routes_are(setup, {0: second.config.broker_addr, 1: first.config.broker_addr}),
        what="new routes",
    )
    assert await direct_send(second, first, "to-the-old-master") != ResponseCode.SUCCESS
    assert await direct_send(first, second, "to-the-new-master") == ResponseCode.SUCCESS


async def test_a_master_that_loses_its_controllers_stops_acknowledging(setup):
    master = await setup.broker(0, controller_heart_beat_timeout_mills=2000)
    other = await setup.broker(1)
    assert await direct_send(other, master, "before") == ResponseCode.SUCCESS
    for node_id in list(setup.group.nodes):
        await setup.group.stop(node_id)
    await wait_for(lambda: master.replicas.write_refusal() is not None, timeout=10, what="the lease to lapse")
    assert await direct_send(other, master, "after") != ResponseCode.SUCCESS


async def test_a_restarted_broker_keeps_its_id_and_follows(setup):
    await setup.broker(0)
    second = await setup.broker(1)
    await second.stop()
    setup.brokers.remove(second)
    again = await setup.broker(1)
    assert (again.replicas.broker_id, again.replicas.role) == (2, "slave")


async def _routes_are(setup: Setup, expected: dict[int, str]) -> bool:
    return await setup.route_ids() == expected


async def _in_sync(admin: Admin, controllers: str, ids: set[int]):
    groups = await admin.broker_groups(controllers)
    return groups if groups and {r.broker_id for r in groups[0].replicas if r.in_sync} == ids else None
