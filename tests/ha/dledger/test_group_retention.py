"""Retention of the Raft log in a running group: with `file_reserved_time` 0 every member deletes
the segments of its Raft log that its applied mark covers, keeps storing what the leader sends, and
a follower restarted on its trimmed log recovers it and catches up."""

from __future__ import annotations

from ferrymq.broker.server import Broker
from tests.ha.conftest import eventually
from tests.ha.dledger.test_group import MEMBERS, elect, send_all, start_group, stored_everywhere

FIRST_SEGMENT = f"{0:020d}.data"
KEEP_NOTHING = {"file_reserved_time": 0, "delete_when": ""}  # and the CommitLog's retention never runs


def trimmed(broker: Broker) -> bool:
    root = broker.config.store.store_path_root_dir / "dledger"
    return (root / "start").exists() and not (root / FIRST_SEGMENT).exists()


async def test_every_member_trims_its_raft_log_and_a_restarted_follower_catches_up(group):
    # segments of 1 MiB, the tests' CommitLog size
    brokers = await start_group(group, **KEEP_NOTHING)
    master = await elect(brokers)
    keys = [b"%04d" % i + b"r" * 8000 for i in range(300)]  # about 2.4 MB: three Raft log segments
    await send_all(group, master, keys)
    await stored_everywhere(brokers, keys)
    for b in brokers:
        await eventually(lambda b=b: trimmed(b), 30, f"{b.config.dledger_self_id}'s log trimmed")
        assert b.dledger is not None and b.dledger.log.first_index > 0
    follower = next(b for b in brokers if b is not master)
    name = follower.config.dledger_self_id
    await follower.stop()
    more = [b"after %d" % i for i in range(20)]
    await send_all(group, master, more)
    member = {k: getattr(follower.config, k) for k in ("enable_dledger_commit_log", "dledger_peers")}
    again = await group.start(name, dledger_self_id=name, **member, **KEEP_NOTHING)
    assert again.dledger is not None and again.dledger.log.first_index > 0
    running = [b for b in brokers if b is not follower] + [again]
    await stored_everywhere(running, keys + more)
    assert sorted(b.config.dledger_self_id for b in running) == list(MEMBERS)
