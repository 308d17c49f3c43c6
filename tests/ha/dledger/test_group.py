"""A DLedger group of three brokers in this process: the leader is the master, sends are stored on
every member once committed, followers refuse sends, and a stopped leader is replaced."""

from __future__ import annotations

import asyncio
import shutil
import time

import pytest

from ferrymq.bench.processes import free_ports
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.server import Broker
from ferrymq.ha.dledger.commitlog_log import CommitLogRaftLog
from ferrymq.ha.dledger.entry import BODY_OFFSET, decode_header
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.message_ext import decode_records
from ferrymq.protocol.pop import pop_retry_topic
from ferrymq.protocol.remoting import RemotingCommand
from tests.ha.conftest import eventually
from tests.store.conftest import read_queue

MEMBERS = ("n0", "n1", "n2")


async def start_group(group, *, two_files: bool = False, **settings) -> list[Broker]:
    """Three members on free loopback Raft ports, with fast elections; on the single log, or with
    `two_files` as members whose stores earlier versions wrote (a FileLog beside the CommitLog)."""
    peers = ";".join(f"{n}-127.0.0.1:{p}" for n, p in zip(MEMBERS, free_ports(3), strict=True))
    for n in MEMBERS if two_files else ():
        root = group.tmp_path / n / "store" / "dledger"
        root.mkdir(parents=True)
        (root / "applied_to").touch()  # an applied mark: this member runs the two files
    return [
        await group.start(
            n,
            enable_dledger_commit_log=True,
            dledger_peers=peers,
            dledger_self_id=n,
            dledger_heartbeat_ms=50,
            dledger_election_timeout_ms=300,
            **settings,
        )
        for n in MEMBERS
    ]


def leader(brokers: list[Broker]) -> Broker | None:
    masters = [b for b in brokers if not b.stopped and b.is_master]
    return masters[0] if len(masters) == 1 else None


async def elect(brokers: list[Broker], other_than: Broker | None = None) -> Broker:
    """The one master among the running members, once there is one (other than `other_than`)."""
    await eventually(lambda: leader(brokers) not in (None, other_than), 30, "a leader")
    master = leader(brokers)
    assert master is not None
    return master


async def send_all(group, broker: Broker, keys: list[bytes]) -> None:
    for key in keys:
        answer = await group.send(broker, key)
        assert answer.code == ResponseCode.SUCCESS, answer.remark


def bodies(broker: Broker, topic: str) -> list[bytes]:
    return [bytes(m.body) for m in read_queue(broker.store, topic, 0)]


async def stored_everywhere(brokers: list[Broker], expected: list[bytes], topic: str = "T") -> None:
    """Every running member's queue 0 of `topic` holds exactly `expected`, in order (bounded wait)."""
    for b in brokers:
        if not b.stopped:
            await eventually(
                lambda b=b: b.store.wait_dispatched(0) and bodies(b, topic) == expected,
                30,
                f"{topic} on {b.config.dledger_self_id}",
            )


async def test_members_hold_the_sends_in_dledger_entries_at_the_same_positions(group):
    """The single log: each member's CommitLog holds DLedger entries whose bodies are the records
    (a message's physical offset is its entry's position + 48), at the same positions everywhere,
    and no Raft log files beside it."""
    brokers = await start_group(group)
    master = await elect(brokers)
    expected = [b"e%d" % i * (i * 10000) for i in range(12)]  # 2.2 MB: entries roll to the next segment
    await send_all(group, master, expected)
    await stored_everywhere(brokers, expected)
    layouts = []
    for b in brokers:
        log = b.dledger.log if b.dledger is not None else None
        assert isinstance(log, CommitLogRaftLog) and not list(log.root.glob("*.data"))
        offsets = [m.commitlog_offset for m in read_queue(b.store, "T", 0)]
        for offset in offsets:
            header = b.store.commitlog.read(offset - BODY_OFFSET, BODY_OFFSET)
            assert header is not None and decode_header(header).pos == offset - BODY_OFFSET
        layouts.append(([log.end_of(i) for i in range(log.first_index, log.last_index + 1)], offsets))
    assert layouts[0] == layouts[1] == layouts[2]


async def test_a_group_elects_a_master_and_stores_sends_on_every_member(group):
    brokers = await start_group(group)
    master = await elect(brokers)
    assert master.registered_id == 0
    followers = [b for b in brokers if b is not master]
    assert sorted(b.registered_id for b in followers) == sorted(
        int(b.config.dledger_self_id[1:]) + 1 for b in followers
    )
    expected = [f"m{i}".encode() for i in range(20)]
    await send_all(group, master, expected)
    refused = await group.send(followers[0], b"x")
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
    await stored_everywhere(brokers, expected)


async def test_a_stopped_leader_is_replaced_and_nothing_acknowledged_is_lost(group):
    brokers = await start_group(group)
    old = await elect(brokers)
    before = [f"a{i}".encode() for i in range(10)]
    await send_all(group, old, before)
    await old.stop()
    new = await elect(brokers, other_than=old)
    after = [f"b{i}".encode() for i in range(10)]
    await send_all(group, new, after)
    await stored_everywhere(brokers, before + after)


async def test_the_preferred_leader_takes_over_and_sends_follow_it(group):
    brokers = await start_group(group, preferred_leader_id="n2")
    await eventually(lambda: leader(brokers) is brokers[2], 30, "n2 to lead")
    await send_all(group, brokers[2], [b"p"])
    await stored_everywhere(brokers, [b"p"])


@pytest.mark.parametrize("spelling", ["enableDLegerCommitLog", "enable_dledger_commit_log"])
def test_rocketmq_names_select_dledger_mode(spelling):
    config = BrokerConfig.from_settings(
        {spelling: True, "dLegerPeers": "n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-127.0.0.1:40913",
         "dLegerSelfId": "n2", "dLegerGroup": "g"}
    )  # fmt: skip
    assert config.enable_dledger_commit_log and config.broker_id == 3 and config.dledger_group == "g"


async def test_a_classic_master_and_its_copies_upgrade_in_place(group, tmp_path):
    classic = await group.start("n0")
    old = [f"old{i}".encode() for i in range(5)]
    await send_all(group, classic, old)
    await classic.stop()
    group.brokers.remove(classic)
    for n in MEMBERS[1:]:  # in-sync slaves hold the master's CommitLog byte for byte
        shutil.copytree(tmp_path / "n0", tmp_path / n)
    brokers = await start_group(group)
    new = [f"new{i}".encode() for i in range(5)]
    await send_all(group, await elect(brokers), new)
    await stored_everywhere(brokers, old + new)


async def test_a_message_sent_back_is_dead_lettered_on_every_member(group):
    brokers = await start_group(group)
    master = await elect(brokers)
    await send_all(group, master, [b"failed"])
    [stored] = read_queue(master.store, "T", 0)
    ext = {"offset": str(stored.commitlog_offset), "group": "G", "delayLevel": "-1"}
    request = RemotingCommand(RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields=ext)
    follower = next(b for b in brokers if b is not master)
    refused = await group.client.invoke(follower.config.broker_addr, request)
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE  # a follower takes no writes
    answer = await group.client.invoke(master.config.broker_addr, request)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    await stored_everywhere(brokers, [b"failed"], "%DLQ%G")


async def test_without_a_majority_a_send_is_not_acknowledged(group):
    brokers = await start_group(group, sync_flush_timeout=300)
    master = await elect(brokers)
    for b in brokers:
        if b is not master:
            await b.stop()
    answer = await group.send(master, b"alone")
    assert answer.code in (ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.SERVICE_NOT_AVAILABLE), answer
    assert bodies(master, "T") == []  # not committed: not stored, not visible to consumers


def queue_ends(broker: Broker) -> dict[tuple[str, int], int]:
    broker.store.wait_dispatched(0)
    return {(cq.topic, cq.queue_id): cq.max_offset for cq in broker.store.queues.all() if cq.max_offset}


async def test_pop_checkpoints_acks_and_revives_are_stored_on_every_member(group):
    """A pop's checkpoint record, an ack's record, the revive of what was not acked and the record
    closing it are the leader's own writes: each member holds them at the same queue offsets."""
    brokers = await start_group(group)
    master = await elect(brokers)
    await send_all(group, master, [b"p0", b"p1", b"p2"])
    master.store.wait_dispatched(0)
    acked = await master.pops.pop("G", "T", 0, 1, 60_000)  # invisible long enough for any load
    left = await master.pops.pop("G", "T", 0, 2, 300)  # revived soon
    assert acked.count == 1 and left.count == 2
    await master.pops.ack("G", "T", acked.handles[0])
    retry = pop_retry_topic("G", "T")
    await eventually(lambda: master.pops.revive.revived == 2, 30, "the unacked messages revived")
    await stored_everywhere(brokers, [b"p1", b"p2"], retry)
    ends = queue_ends(master)
    assert any(topic == master.pops.log.topic for topic, _ in ends)  # the revive topic's records
    for b in brokers:
        await eventually(
            lambda b=b: queue_ends(b) == ends, 30, f"queue offsets on {b.config.dledger_self_id}"
        )


async def test_a_new_leader_holds_the_pop_state_as_soon_as_it_leads(group):
    """The members' replicated revive topic is the new leader's pop state from the moment it leads:
    a message popped from the old leader acks at once on the new one, and a pop taken at once
    keeps its checkpoint (what it does not ack comes back)."""
    brokers = await start_group(group)
    for b in brokers:  # as mqadmin updateTopic -c does: the topic on every member
        fields = {"topic": "T", "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1",
                  "perm": "6", "topicFilterType": "SINGLE_TAG"}  # fmt: skip
        request = RemotingCommand(RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields=fields)
        assert (await group.client.invoke(b.config.broker_addr, request)).code == ResponseCode.SUCCESS
    old = await elect(brokers)
    await send_all(group, old, [b"p0", b"p1"])
    old.store.wait_dispatched(0)
    popped = await old.pops.pop("G", "T", 0, 1, 60_000)
    await old.stop()
    deadline = time.monotonic() + 30
    while (new := leader(brokers)) is None:  # no sleep: the first turn of the loop it leads in
        assert time.monotonic() < deadline, "no new leader"
        await asyncio.sleep(0)
    await new.pops.ack("G", "T", popped.handles[0])
    again = await new.pops.pop("G", "T", 0, 1, 300)
    assert [bytes(m.body) for m in decode_records(again.body)] == [b"p1"]
    await eventually(lambda: new.pops.revive.revived == 1, 30, "the unacked message revived")
    await stored_everywhere(brokers, [b"p1"], pop_retry_topic("G", "T"))
