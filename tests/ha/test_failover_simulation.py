"""Seeded random failovers between two replicas, without sockets or clocks.

The replication pieces under test run for real: the HA client's truncation rule (`truncation_point`),
the epoch file and the store's copy/settle/truncate primitives. The copy loop below is a model of the
master's stream (chunks of any size, never across an epoch). Every schedule must end with
byte-identical logs and keep every message the replica held whole before a failover (what a
SYNC_MASTER acknowledged).
"""

from __future__ import annotations

import random

import pytest

from ferrymq.ha.client import HandshakeError, truncation_point
from ferrymq.ha.wire import MasterHandshake
from ferrymq.store import MessageStore
from ferrymq.store.epoch import EpochFile, with_ends
from tests.store.conftest import read_queue, small_config


class Node:
    def __init__(self, root) -> None:
        self.store = MessageStore(small_config(root, message_index_enable=False)).open()
        self.epochs = EpochFile(root / "epochFileCheckpoint")

    @property
    def end(self) -> int:
        return self.store.commitlog.max_offset

    def become_master(self, epoch: int) -> None:
        end = self.store.settle_replicated_tail()
        self.epochs.append(epoch, end if self.epochs.entries else self.store.commitlog.min_offset)

    def join(self, master: Node) -> None:
        hello = MasterHandshake(master.end, master.epochs.last_epoch, list(master.epochs.entries))
        point = truncation_point(self.epochs, self.store.commitlog.min_offset, self.end, hello)
        if point is not None:
            emptied = point <= self.store.commitlog.min_offset
            self.store.truncate(point)
            self.epochs.truncate_from(0 if emptied else point)

    def copy_from(self, master: Node, upto: int, rng: random.Random) -> None:
        while self.end < upto:
            offset = self.end
            entry = master.epochs.entry_at(offset) or master.epochs.entries[0]
            limit = min(master.epochs.next_start(entry) or upto, upto)
            chunk = master.store.read_commitlog(offset, min(rng.randint(1, 3000), limit - offset))
            if entry.epoch > self.epochs.last_epoch:
                self.epochs.append(entry.epoch, entry.start_offset)
            self.store.append_replicated(offset, chunk)
        self.store.dispatch()

    def written_epochs(self) -> list[tuple[int, int, int]]:
        return [r for r in with_ends(self.epochs.entries, self.end) if r[2] > r[1]]

    def log(self) -> bytes:
        return bytes(self.store.read_commitlog(0, self.end)) if self.end else b""


@pytest.mark.parametrize("seed", range(20))
def test_random_failovers_converge_and_keep_what_was_replicated(tmp_path, seed):
    rng = random.Random(seed)
    master, replica = Node(tmp_path / "a"), Node(tmp_path / "b")
    try:
        epoch = 1
        master.become_master(epoch)
        acked: set[bytes] = set()
        for round_ in range(8):
            ends = []
            for i in range(rng.randint(0, 30)):
                body = b"s%d-r%d-%d-" % (seed, round_, i) + b"x" * rng.randint(0, 2000)
                r = master.store.put_message("T", rng.randrange(2), body)
                ends.append((r.wrote_offset + r.wrote_bytes, body))
            replica.copy_from(master, rng.randint(replica.end, master.end), rng)
            acked |= {body for end, body in ends if end <= replica.end}
            if rng.random() < 0.5:  # the replica is elected; the old master rejoins as its replica
                epoch += 1
                replica.become_master(epoch)
                master, replica = replica, master
                replica.join(master)
        replica.join(master)
        replica.copy_from(master, master.end, rng)
        assert replica.log() == master.log()
        # Epochs that wrote nothing reach a replica with no frame: compare those that hold bytes.
        assert replica.written_epochs() == master.written_epochs()
        assert master.store.wait_dispatched() and replica.store.wait_dispatched()
        stored = {m.body for q in range(2) for m in read_queue(master.store, "T", q)}
        assert acked <= stored
        assert {m.body for q in range(2) for m in read_queue(replica.store, "T", q)} == stored
    finally:
        master.store.close()
        replica.store.close()


def test_a_replica_holding_nothing_follows_a_master_of_another_epoch(tmp_path):
    """A group that never stored a message changes master: the old master (epoch 1, empty) has no
    epoch in common with the new one (epoch 2, empty) and must still become its replica."""
    old, new = Node(tmp_path / "old"), Node(tmp_path / "new")
    old.become_master(1)
    new.become_master(2)
    new.store.put_message("T", 0, b"after the switch")
    old.join(new)
    assert old.epochs.entries == []
    old.copy_from(new, new.end, random.Random(1))
    assert old.log() == new.log()
    assert [e.epoch for e in old.epochs.entries] == [2]


def test_a_replica_holding_data_of_no_common_epoch_is_refused(tmp_path):
    old, new = Node(tmp_path / "old"), Node(tmp_path / "new")
    old.become_master(1)
    old.store.put_message("T", 0, b"only here")
    new.become_master(2)
    with pytest.raises(HandshakeError, match="no common epoch"):
        old.join(new)
