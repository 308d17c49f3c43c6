"""The store's replication primitives: copy bytes in arbitrary chunks, dispatch, truncate."""

from __future__ import annotations

import random

import pytest

from ferrymq.store import MessageStore, StoreError
from tests.store.conftest import props, read_queue, small_config


def open_pair(tmp_path):
    master = MessageStore(small_config(tmp_path / "m")).open()
    replica = MessageStore(small_config(tmp_path / "r")).open()
    return master, replica


def copy(master: MessageStore, replica: MessageStore, rng: random.Random) -> None:
    """Copy the master's log as a replica would: chunks of random size, dispatching after each."""
    while replica.commitlog.max_offset < master.commitlog.max_offset:
        chunk = master.read_commitlog(replica.commitlog.max_offset, rng.randint(1, 5000))
        replica.append_replicated(replica.commitlog.max_offset, chunk)


def segment_bytes(store: MessageStore) -> list[tuple[int, bytes]]:
    return [(s.base, bytes(s.mm)) for s in store.commitlog.segments]


def test_chunked_copy_is_byte_identical_and_builds_the_same_queues(tmp_path):
    master, replica = open_pair(tmp_path)
    rng = random.Random(7)
    try:
        for i in range(600):  # ~ three 64 KiB segments, so roll-overs and blank tails are copied too
            master.put_message("T", i % 3, b"x" * rng.randint(1, 400), props(KEYS=f"k{i}"))
            if i % 50 == 0:
                copy(master, replica, rng)
        copy(master, replica, rng)
        assert len(master.commitlog.segments) >= 3
        assert segment_bytes(replica) == segment_bytes(master)
        assert replica.wait_dispatched() and master.wait_dispatched()
        for q in range(3):
            assert [m.body for m in read_queue(replica, "T", q)] == [
                m.body for m in read_queue(master, "T", q)
            ]
        assert len(replica.query_message("T", "k599", 5, 0, 2**62)) == 1
    finally:
        master.close()
        replica.close()


def test_append_at_the_wrong_offset_is_refused(tmp_path):
    master, replica = open_pair(tmp_path)
    try:
        master.put_message("T", 0, b"a")
        data = master.read_commitlog(0, 1 << 20)
        with pytest.raises(StoreError, match="ends at 0"):
            replica.append_replicated(5, data)
    finally:
        master.close()
        replica.close()


def test_partial_tail_waits_then_a_new_master_cuts_it(tmp_path):
    master, replica = open_pair(tmp_path)
    try:
        for i in range(3):
            master.put_message("T", 0, b"m%d" % i)
        full = master.read_commitlog(0, 1 << 20)
        replica.append_replicated(0, full[:-10])  # the last record arrives only in part
        replica.dispatch()
        assert replica.get_max_offset("T", 0) == 2
        end = replica.settle_replicated_tail()
        assert end == replica.dispatcher.offset < len(full)
        r = replica.put_message("T", 0, b"own")
        assert r.ok and r.queue_offset == 2  # queue offsets continue from the copied queue
        replica.wait_dispatched()
        assert [m.body for m in read_queue(replica, "T", 0)] == [b"m0", b"m1", b"own"]
    finally:
        master.close()
        replica.close()


def test_truncate_drops_tail_queue_entries_and_reindexes(tmp_path):
    store = MessageStore(small_config(tmp_path / "s")).open()
    try:
        offsets = [store.put_message("T", 0, b"%d" % i, props(KEYS=f"k{i}")).wrote_offset for i in range(10)]
        assert store.wait_dispatched()
        store.truncate(offsets[6])
        assert store.commitlog.max_offset == offsets[6]
        assert store.get_max_offset("T", 0) == 6
        assert store.put_message("T", 0, b"new", props(KEYS="k6")).queue_offset == 6
        assert store.wait_dispatched()
        assert [m.body for m in read_queue(store, "T", 0)][-2:] == [b"5", b"new"]
        found = store.query_message("T", "k6", 5, 0, 2**62)
        assert [bytes(f)[-3:] for f in found] != [] and len(found) == 1
    finally:
        store.close()
    reopened = MessageStore(small_config(tmp_path / "s")).open()
    try:
        assert reopened.get_max_offset("T", 0) == 7
    finally:
        reopened.close()
