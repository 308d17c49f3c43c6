"""A DLedger group of three brokers in this process: the leader is the master, sends are stored on
every member once committed, followers refuse sends, and a stopped leader is replaced."""

from __future__ import annotations

import shutil

import pytest

from ferrymq.bench.processes import free_ports
from ferrymq.broker.server import Broker
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.remoting import RemotingCommand
from tests.ha.conftest import eventually
from tests.store.conftest import read_queue

MEMBERS = ("n0", "n1", "n2")


def peers() -> str:
    return ";".join(f"{n}-127.0.0.1:{p}" for n, p in zip(MEMBERS, free_ports(3), strict=True))


async def start_group(group, peer_list: str, members=MEMBERS, **settings) -> list[Broker]:
    return [
        await group.start(
            n,
            enable_dledger_commit_log=True,
            dledger_peers=peer_list,
            dledger_self_id=n,
            dledger_heartbeat_ms=50,
            dledger_election_timeout_ms=300,
            **settings,
        )
        for n in members
    ]


def leader(brokers: list[Broker]) -> Broker | None:
    masters = [b for b in brokers if not b.stopped and b.is_master]
    return masters[0] if len(masters) == 1 else None


def bodies(broker: Broker, topic: str = "T") -> list[bytes]:
    return [bytes(m.body) for m in read_queue(broker.store, topic, 0)]


async def test_a_group_elects_a_master_and_stores_sends_on_every_member(group):
    brokers = await start_group(group, peers())
    await eventually(lambda: leader(brokers) is not None, 30, "a leader")
    master = leader(brokers)
    assert master is not None and master.registered_id == 0
    followers = [b for b in brokers if b is not master]
    assert sorted(b.registered_id for b in followers) == sorted(
        int(b.config.dledger_self_id[1:]) + 1 for b in followers
    )
    for i in range(20):
        answer = await group.send(master, f"m{i}".encode())
        assert answer.code == ResponseCode.SUCCESS, answer.remark
    refused = await group.send(followers[0], b"x")
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
    expected = [f"m{i}".encode() for i in range(20)]
    for b in brokers:
        await eventually(lambda b=b: b.store.wait_dispatched(0) and bodies(b) == expected, 30, "every member")


async def test_a_stopped_leader_is_replaced_and_nothing_acknowledged_is_lost(group):
    brokers = await start_group(group, peers())
    await eventually(lambda: leader(brokers) is not None, 30, "a leader")
    old = leader(brokers)
    assert old is not None
    for i in range(10):
        assert (await group.send(old, f"a{i}".encode())).code == ResponseCode.SUCCESS
    await old.stop()
    await eventually(lambda: leader(brokers) is not None, 30, "a new leader")
    new = leader(brokers)
    assert new is not None and new is not old
    for i in range(10):
        answer = await group.send(new, f"b{i}".encode())
        assert answer.code == ResponseCode.SUCCESS, answer.remark
    expected = [f"a{i}".encode() for i in range(10)] + [f"b{i}".encode() for i in range(10)]
    for b in brokers:
        if b is not old:
            await eventually(lambda b=b: b.store.wait_dispatched(0) and bodies(b) == expected, 30, "members")


async def test_the_preferred_leader_takes_over_and_sends_follow_it(group):
    brokers = await start_group(group, peers(), preferred_leader_id="n2")
    await eventually(lambda: leader(brokers) is brokers[2], 30, "n2 to lead")
    answer = await group.send(brokers[2], b"p")
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    for b in brokers:
        await eventually(lambda b=b: b.store.wait_dispatched(0) and bodies(b) == [b"p"], 30, "every member")


@pytest.mark.parametrize("spelling", ["enableDLegerCommitLog", "enable_dledger_commit_log"])
def test_rocketmq_names_select_dledger_mode(spelling):
    from ferrymq.broker.config import BrokerConfig

    config = BrokerConfig.from_settings(
        {spelling: True, "dLegerPeers": "n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-127.0.0.1:40913",
         "dLegerSelfId": "n2", "dLegerGroup": "g"}
    )  # fmt: skip
    assert config.enable_dledger_commit_log and config.broker_id == 3 and config.dledger_group == "g"


async def test_a_classic_master_and_its_copies_upgrade_in_place(group, tmp_path):
    classic = await group.start("n0")
    for i in range(5):
        assert (await group.send(classic, f"old{i}".encode())).code == ResponseCode.SUCCESS
    await classic.stop()
    group.brokers.remove(classic)
    for n in MEMBERS[1:]:  # in-sync slaves hold the master's CommitLog byte for byte
        shutil.copytree(tmp_path / "n0", tmp_path / n)
    brokers = await start_group(group, peers())
    await eventually(lambda: leader(brokers) is not None, 30, "a leader")
    master = leader(brokers)
    assert master is not None
    for i in range(5):
        assert (await group.send(master, f"new{i}".encode())).code == ResponseCode.SUCCESS
    expected = [f"old{i}".encode() for i in range(5)] + [f"new{i}".encode() for i in range(5)]
    for b in brokers:
        await eventually(lambda b=b: b.store.wait_dispatched(0) and bodies(b) == expected, 30, "every member")


async def test_a_message_sent_back_is_dead_lettered_on_every_member(group):
    brokers = await start_group(group, peers())
    await eventually(lambda: leader(brokers) is not None, 30, "a leader")
    master = leader(brokers)
    assert master is not None
    assert (await group.send(master, b"failed")).code == ResponseCode.SUCCESS
    [stored] = read_queue(master.store, "T", 0)
    ext = {"offset": str(stored.commitlog_offset), "group": "G", "delayLevel": "-1"}
    request = RemotingCommand(RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields=ext)
    refused = await group.client.invoke(
        next(b for b in brokers if b is not master).config.broker_addr, request
    )
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE  # a follower takes no writes
    answer = await group.client.invoke(master.config.broker_addr, request)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    for b in brokers:
        await eventually(
            lambda b=b: (
                b.store.wait_dispatched(0)
                and [bytes(m.body) for m in read_queue(b.store, "%DLQ%G", 0)] == [b"failed"]
            ),
            30,
            "the dead letter on every member",
        )
