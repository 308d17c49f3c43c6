"""A real three-node controller group: leadership, the broker protocol, elections, restarts."""

from __future__ import annotations

import asyncio

import msgspec

from ferrymq.net import RemotingClient, RemotingServer
from ferrymq.net.controllers import ControllerClient
from ferrymq.protocol.bodies import decode_body, encode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.controller import (
    BrokerReplicasInfo,
    ElectMasterResponseBody,
    GetMetaDataResponseHeader,
    MasterInfoHeader,
    SyncStateSet,
)
from ferrymq.protocol.headers import BrokerHeartbeatRequestHeader
from ferrymq.protocol.remoting import RemotingCommand

from .conftest import wait_for

NAME = "broker-a"


class FakeBroker:
    """Speaks the broker side of the controller protocol; its own connections, so it can 'die'."""

    def __init__(self, addresses: list[str]) -> None:
        self.remoting = RemotingClient()
        self.controllers = ControllerClient(addresses, self.remoting)
        self.server = RemotingServer("127.0.0.1", 0)
        self.notified: list[MasterInfoHeader] = []
        self.broker_id: int | None = None

        async def on_notify(connection, request):
            self.notified.append(MasterInfoHeader.from_ext_fields(request.ext_fields))

        self.server.register(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, on_notify)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    async def join(self) -> int:
        await self.server.start()
        ext = {"clusterName": "c", "brokerName": NAME}
        answer = await self.controllers.invoke(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, ext)
        broker_id = int(answer.ext_fields["nextBrokerId"])
        applied = await self.controllers.invoke(
            RequestCode.CONTROLLER_APPLY_BROKER_ID,
            {**ext, "appliedBrokerId": str(broker_id), "registerCheckCode": f"{self.address};code"},
        )
        assert applied.code == ResponseCode.SUCCESS, applied.remark
        self.broker_id = broker_id
        await self.heartbeat()
        registered = await self.controllers.invoke(
            RequestCode.CONTROLLER_REGISTER_BROKER,
            {**ext, "brokerId": str(broker_id), "brokerAddress": self.address},
        )
        assert registered.code == ResponseCode.SUCCESS, registered.remark
        return broker_id

    async def heartbeat(self, epoch: int = 0, offset: int = 0) -> set[str]:
        header = BrokerHeartbeatRequestHeader(
            "c", self.address, NAME, self.broker_id, epoch, offset, offset, 60_000, 0
        )
        return await self.controllers.invoke_all(RequestCode.BROKER_HEARTBEAT, header.to_ext_fields())

    async def elect(self, designate: bool = False) -> RemotingCommand:
        ext = {"clusterName": "c", "brokerName": NAME, "brokerId": str(self.broker_id)}
        if designate:
            ext["designateElect"] = "true"
        return await self.controllers.invoke(RequestCode.CONTROLLER_ELECT_MASTER, ext)

    async def replica_info(self) -> tuple[MasterInfoHeader, SyncStateSet]:
        r = await self.controllers.invoke(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": NAME})
        assert r.code == ResponseCode.SUCCESS, r.remark
        return MasterInfoHeader.from_ext_fields(r.ext_fields), decode_body(SyncStateSet, r.body)

    async def close(self) -> None:
        await self.remoting.close()
        await self.server.stop(grace=0.1)


async def test_only_the_leader_decides_and_followers_name_it(controller_group, client):
    group = await controller_group()
    leader = await group.leader()
    followers = [n for n in group.nodes.values() if n is not leader]
    await wait_for(
        lambda: all(f.leader_address() == leader.config.address for f in followers), what="addresses"
    )
    ext = {"clusterName": "c", "brokerName": NAME}
    request = RemotingCommand(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, ext_fields=ext)
    refused = await client.invoke(followers[0].config.address, request)
    assert refused.code == ResponseCode.CONTROLLER_NOT_LEADER
    assert leader.config.address in refused.remark
    meta = await client.invoke(
        followers[0].config.address, RemotingCommand(RequestCode.CONTROLLER_GET_METADATA_INFO)
    )
    header = GetMetaDataResponseHeader.from_ext_fields(meta.ext_fields)
    assert header.controller_leader_address == leader.config.address and not header.is_leader
    bad = RemotingCommand(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, ext_fields={"brokerName": NAME})
    assert (
        await client.invoke(leader.config.address, bad)
    ).code == ResponseCode.SYSTEM_ERROR  # names the field


async def test_a_leader_found_by_a_hint_is_among_those_that_took_the_heartbeat(controller_group):
    """Brokers in Kubernetes name the controllers by DNS; a follower names the leader by the address
    it listens on. The heartbeat must still reach the leader under that address, or a master could
    never see its lease renewed by the leader it knows."""
    group = await controller_group()
    leader = await group.leader()
    followers = [n for n in group.nodes.values() if n is not leader]
    await wait_for(lambda: all(f.leader_address() == leader.config.address for f in followers), what="hints")
    by_name = {a: a.replace("127.0.0.1", "localhost") for a in group.addresses}
    followers_first = sorted(group.addresses, key=lambda a: a == leader.config.address)
    broker = FakeBroker([by_name[a] for a in followers_first])
    try:
        await broker.join()  # a follower answers first, and names the leader by its own address
        assert broker.controllers.leader == leader.config.address
        assert broker.controllers.leader in await broker.heartbeat()
    finally:
        await broker.close()


async def test_registration_election_sync_state_set_and_failover_across_a_leader_change(controller_group):
    group = await controller_group()
    await group.leader()
    addresses = list(reversed(group.addresses))  # the client must find the leader itself
    brokers = [FakeBroker(addresses) for _ in range(3)]
    try:
        ids = [await b.join() for b in brokers]
        assert ids == [1, 2, 3]
        assert await brokers[0].heartbeat() == set(addresses)  # every controller takes heartbeats
        first = await brokers[0].elect()
        assert first.code == ResponseCode.SUCCESS, first.remark
        master = MasterInfoHeader.from_ext_fields(first.ext_fields)
        assert (master.master_broker_id, master.master_epoch, master.master_address) == (
            1,
            1,
            brokers[0].address,
        )
        assert decode_body(ElectMasterResponseBody, first.body).sync_state_set == {1}
        assert (await brokers[1].elect()).code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST

        alter = await brokers[0].controllers.invoke(
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
            {"brokerName": NAME, "masterBrokerId": "1", "masterEpoch": "1"},
            encode_body(SyncStateSet({1, 2, 3}, 1)),
        )
        assert alter.code == ResponseCode.SUCCESS, alter.remark
        assert alter.ext_fields["newSyncStateSetEpoch"] == "2"
        stale = await brokers[0].controllers.invoke(
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
            {"brokerName": NAME, "masterBrokerId": "1", "masterEpoch": "1"},
            encode_body(SyncStateSet({1, 2}, 1)),
        )
        assert stale.code == ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH

        # The controller leader goes away; the new one has the whole state.
        old_leader = await group.leader()
        old_id = old_leader.config.node_id
        await group.stop(old_id)
        await group.leader()
        info, sss = await brokers[1].replica_info()
        assert (info.master_broker_id, info.master_epoch, sss.sync_state_set, sss.sync_state_set_epoch) == (
            1, 1, {1, 2, 3}, 2,
        )  # fmt: skip
        await group.start(old_id)  # it comes back from its data directory

        # Broker 3 is further ahead than 2: once the master dies, 3 must win.
        await brokers[1].heartbeat(epoch=1, offset=100)
        await brokers[2].heartbeat(epoch=1, offset=200)
        await brokers[0].close()  # its connections close: the leader sees it gone at once
        await wait_for(lambda: any(n.master_broker_id == 3 for n in brokers[1].notified), what="notification")
        info, sss = await brokers[1].replica_info()
        assert (info.master_broker_id, info.master_epoch, info.master_address) == (3, 2, brokers[2].address)
        assert sss.sync_state_set == {3}

        # An admin's view of the set.
        view = await brokers[1].controllers.invoke(
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=msgspec.json.encode([NAME])
        )
        table = decode_body(BrokerReplicasInfo, view.body).replicas_info_table[NAME]
        assert [r.broker_id for r in table.in_sync_replicas] == [3]
        assert {(r.broker_id, r.alive) for r in table.not_in_sync_replicas} == {(1, False), (2, True)}

        # A manual switch to a broker outside the SyncStateSet is refused; inside it works.
        assert (await brokers[1].elect(designate=True)).code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED
    finally:
        for b in brokers:
            await b.close()


async def test_restarted_group_keeps_its_state(controller_group, tmp_path):
    group = await controller_group()
    await group.leader()
    broker = FakeBroker(group.addresses)
    try:
        await broker.join()
        assert (await broker.elect()).code == ResponseCode.SUCCESS
    finally:
        await broker.close()
    for node_id in list(group.nodes):
        await group.stop(node_id)
    for node_id in group.peers:
        await group.start(node_id)
    await group.leader()
    again = FakeBroker(group.addresses)
    try:
        info, sss = await wait_for(lambda: _replica_info_or_none(again), what="replica info after restart")
        assert info.master_broker_id == 1 and info.master_epoch == 1 and sss.sync_state_set == {1}
    finally:
        await again.close()


async def _replica_info_or_none(broker: FakeBroker):
    try:
        return await broker.replica_info()
    except Exception:  # not ready yet: no leader, or the state not restored yet
        return None


def test_pysyncobj_leaves_socket_inet_ntop_working():
    import socket

    import ferrymq.controller.raft  # noqa: F401  (pysyncobj patches socket on import)

    assert socket.inet_ntop(socket.AF_INET6, bytes(15) + b"\x01") == "::1"


async def test_stopping_leaves_none_of_its_tasks_running(controller_group):
    """Even those its brokers' connections start as they close under it (re-elections)."""
    before = asyncio.all_tasks()
    group = await controller_group(size=1)
    leader = await group.leader()
    broker = FakeBroker(group.addresses)
    try:
        await broker.join()
        assert (await broker.elect()).code == ResponseCode.SUCCESS
        assert {task for task in asyncio.all_tasks() if task not in before}, "its scans run until it stops"
        await group.stop(leader.config.node_id)
        left = {task for task in asyncio.all_tasks() if task not in before and not task.done()}
        assert {
            task for task in left if task.get_coro().cr_frame.f_locals.get("self") is not broker.server
        } == set()
    finally:
        await broker.close()


async def test_a_raft_password_keeps_out_a_node_without_it(tmp_path):
    """The Raft port speaks no TLS: a shared password encrypts and authenticates its messages. Two
    nodes of three with different passwords make no majority; the third with the first's does."""
    from tests.controller.conftest import Group

    group = Group(tmp_path, 3)
    try:
        group.settings = {"raft_password": "right"}
        first = await group.start("n1")
        group.settings = {"raft_password": "wrong"}
        stranger = await group.start("n2")
        for _ in range(40):  # 4 s: several election timeouts (0.4-1.4 s)
            assert not first.is_leader and not stranger.is_leader
            await asyncio.sleep(0.1)
        group.settings = {"raft_password": "right"}
        await group.start("n3")
        leader = await group.leader()
        assert leader.config.node_id in ("n1", "n3")
    finally:
        for node_id in list(group.nodes):
            await group.stop(node_id)
