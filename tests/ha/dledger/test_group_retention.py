"""Retention of the Raft log in a running group: with `file_reserved_time` 0 every member deletes
the segments of its Raft log that its applied mark covers (the two files of earlier versions) or,
on the single log, the CommitLog segments that are committed, at the CommitLog's `delete_when`
hours; it keeps storing what the leader sends, and a follower restarted on its trimmed log recovers
it and catches up."""

from __future__ import annotations

from ferrymq.broker.server import Broker
from tests.ha.conftest import eventually
from tests.ha.dledger.test_group import MEMBERS, elect, send_all, start_group, stored_everywhere
from tests.store.conftest import read_queue

FIRST_SEGMENT = f"{0:020d}.data"
KEEP_NOTHING = {"file_reserved_time": 0, "delete_when": ""}  # and the CommitLog's retention never runs


async def restart_a_follower(group, brokers: list[Broker], master: Broker, settings: dict):
    """Stop a follower, send 20 messages, start it again on its store: (the stopped broker, the
    restarted one, what was sent meanwhile)."""
    follower = next(b for b in brokers if b is not master)
    name = follower.config.dledger_self_id
    await follower.stop()
    more = [b"after %d" % i for i in range(20)]
    await send_all(group, master, more)
    member = {k: getattr(follower.config, k) for k in ("enable_dledger_commit_log", "dledger_peers")}
    return follower, await group.start(name, dledger_self_id=name, **member, **settings), more


def trimmed(broker: Broker) -> bool:
    root = broker.config.store.store_path_root_dir / "dledger"
    return (root / "start").exists() and not (root / FIRST_SEGMENT).exists()


async def test_every_member_trims_its_raft_log_and_a_restarted_follower_catches_up(group):
    # segments of 1 MiB, the tests' CommitLog size
    brokers = await start_group(group, two_files=True, **KEEP_NOTHING)
    master = await elect(brokers)
    keys = [b"%04d" % i + b"r" * 8000 for i in range(300)]  # about 2.4 MB: three Raft log segments
    await send_all(group, master, keys)
    await stored_everywhere(brokers, keys)
    for b in brokers:
        await eventually(lambda b=b: trimmed(b), 30, f"{b.config.dledger_self_id}'s log trimmed")
        assert b.dledger is not None and b.dledger.log.first_index > 0
    follower, again, more = await restart_a_follower(group, brokers, master, KEEP_NOTHING)
    assert again.dledger is not None and again.dledger.log.first_index > 0
    running = [b for b in brokers if b is not follower] + [again]
    await stored_everywhere(running, keys + more)
    assert sorted(b.config.dledger_self_id for b in running) == list(MEMBERS)


EVERY_HOUR = {"file_reserved_time": 0, "delete_when": ";".join(str(h) for h in range(24))}


def kept(broker: Broker) -> list[bytes]:
    """The bodies queue 0 of T still holds, from its first offset."""
    store = broker.store
    return [bytes(m.body) for m in read_queue(store, "T", 0, store.get_min_offset("T", 0))]


def segments_deleted(broker: Broker) -> bool:
    """The first CommitLog segment went, and the Raft log's start with it."""
    assert broker.dledger is not None
    return broker.store.commitlog.min_offset > 0 and broker.dledger.log.first_index > 0


async def test_the_single_log_deletes_committed_commitlog_segments_and_a_restarted_follower_catches_up(group):
    brokers = await start_group(group, **EVERY_HOUR)
    master = await elect(brokers)
    keys = [b"%04d" % i + b"r" * 8000 for i in range(300)]  # about 2.4 MB: three CommitLog segments
    await send_all(group, master, keys)
    for b in brokers:
        await eventually(
            lambda b=b: segments_deleted(b), 30, f"{b.config.dledger_self_id}'s segments deleted"
        )
    follower, again, more = await restart_a_follower(group, brokers, master, EVERY_HOUR)
    assert segments_deleted(again)
    sent = keys + more
    for b in [b for b in brokers if b is not follower] + [again]:
        await eventually(  # what retention left: the last messages sent, in order
            lambda b=b: b.store.wait_dispatched(0) and (left := kept(b))[-20:] == more
            and len(left) < len(sent) and left == sent[len(sent) - len(left) :],
            30, f"the tail on {b.config.dledger_self_id}",
        )  # fmt: skip
