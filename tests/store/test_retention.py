"""Retention by age and by disk pressure, and the disk-full refusal, on real file systems."""

import contextlib
import os
import subprocess
import time
from pathlib import Path

import pytest

from ferrymq.protocol.message_ext import decode_records
from ferrymq.store import GetStatus, PutStatus
from ferrymq.store.files import list_offset_files

from .conftest import read_queue

HOUR = 3600


def age_segments(store, count, hours):
    """Backdate the first `count` CommitLog segments' modification time."""
    past = time.time() - hours * HOUR
    for _, path in list_offset_files(store.config.commitlog_dir)[:count]:
        os.utime(path, (past, past))


def fill(store, n, size=1000):
    results = [store.put_message("T", 0, bytes([i % 256]) * size) for i in range(n)]
    assert all(r.ok for r in results)
    assert store.wait_dispatched()
    return results


def test_expired_segments_go_at_the_delete_hour_only(open_store):
    now = time.time()
    hour = time.localtime(now).tm_hour
    other_hour = f"{(hour + 12) % 24:02d}"
    store = open_store(file_reserved_time=1, delete_when=other_hour)
    fill(store, 300)  # ~5 segments of 64 KiB
    segments = len(store.commitlog.segments)
    age_segments(store, 2, hours=2)
    assert store.retention.run(now=now) == 0
    assert len(store.commitlog.segments) == segments
    store.close()
    store = open_store(file_reserved_time=1, delete_when=f"{other_hour};{hour:02d}")
    assert store.retention.run(now=now) == 2
    assert len(store.commitlog.segments) == segments - 2


def test_deletion_moves_min_offsets_and_consume_queue_files(open_store):
    store = open_store(file_reserved_time=1)
    results = fill(store, 300)
    cq_files_before = len(store.queues.get("T", 0).files)
    age_segments(store, 3, hours=5)
    assert store.retention.run(manual=True) == 3
    assert store.commitlog.min_offset == 3 * 64 * 1024
    first_kept = next(i for i, r in enumerate(results) if r.wrote_offset >= store.commitlog.min_offset)
    assert store.get_min_offset("T", 0) == first_kept
    too_small = store.get_messages("T", 0, 0)
    assert (too_small.status, too_small.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, first_kept)
    msgs = read_queue(store, "T", 0, first_kept)
    assert [m.queue_offset for m in msgs] == list(range(first_kept, 300))
    assert len(store.queues.get("T", 0).files) < cq_files_before  # 100 entries a file, 3 files before
    store.close()
    again = open_store()
    assert again.get_min_offset("T", 0) == first_kept
    assert again.put_message("T", 0, b"z").queue_offset == 300


def test_young_segments_are_kept_without_disk_pressure(open_store):
    store = open_store(file_reserved_time=72)
    fill(store, 300)
    segments = len(store.commitlog.segments)
    age_segments(store, 2, hours=10)
    assert store.retention.run(manual=True) == 0
    assert len(store.commitlog.segments) == segments


def test_the_segment_being_written_is_never_deleted(open_store):
    store = open_store(file_reserved_time=1)
    fill(store, 10)
    age_segments(store, 1, hours=5)
    assert store.retention.run(manual=True) == 0
    assert len(store.commitlog.segments) == 1


@contextlib.contextmanager
def tmpfs(mount, size: str):
    """A tmpfs of `size` at `mount`: a real file system that really fills up. Needs root (CI runs as
    root)."""
    if os.geteuid() != 0:
        pytest.fail("the disk-full tests mount a tmpfs and need root")
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


@pytest.fixture
def tiny_disk(tmp_path):
    with tmpfs(tmp_path / "tiny", "2m") as mount:
        yield mount


@pytest.mark.root
def test_a_full_disk_refuses_writes_with_a_clear_status_then_recovers(tiny_disk):
    from ferrymq.store import MessageStore

    from .conftest import small_config

    config = small_config(
        tiny_disk / "store",
        mapped_file_size_commit_log=256 * 1024,
        mapped_file_size_consume_queue=1000 * 20,
        file_reserved_time=1,
    )
    store = MessageStore(config).open()
    try:
        statuses = []
        for _i in range(5000):
            result = store.put_message("T", 0, b"d" * 1000)
            statuses.append(result.status)
            if not result.ok:
                break
        assert statuses[-1] is PutStatus.DISK_FULL
        assert "disk full" in result.remark
        assert statuses.count(PutStatus.PUT_OK) > 500
        assert store.put_message("T", 0, b"again").status is PutStatus.DISK_FULL
        assert store.retention.check_disk() > 85  # past the forced-clean ratio
        assert store.wait_dispatched()
        # Disk pressure deletes even unexpired segments, oldest first (here, or in the store's own
        # periodic pass if that came first), and writes are accepted again.
        store.retention.run()
        assert store.commitlog.min_offset > 0
        deadline = time.monotonic() + 10  # space returns once the indexer unmaps the deleted segments
        while True:
            store.retention.check_disk()  # what the store's housekeeping does every 10 s
            if store.put_message("T", 0, b"after").ok:
                break
            assert time.monotonic() < deadline, "deleted segments never gave their space back"
            time.sleep(0.05)
        assert store.get_min_offset("T", 0) > 0
    finally:
        store.close()


def space_returned(store, timeout=10.0):
    """Wait until no process maps a deleted CommitLog segment (the indexer unmaps them soon after a
    deletion; their blocks are free only then), as the store's 10 s between passes would."""
    maps = Path(f"/proc/{store.indexer.proc.pid}/maps")
    deadline = time.monotonic() + timeout
    while "commitlog" in "".join(line for line in maps.read_text().splitlines() if "(deleted)" in line):
        assert time.monotonic() < deadline, "the indexer kept deleted segments mapped"
        time.sleep(0.01)


@pytest.mark.root
@pytest.mark.parametrize("dispatching", ["log-ahead", "each-put", "thread"])
def test_a_full_disk_of_thousands_of_topics_recovers_though_their_queues_find_no_room(tmp_path, dispatching):
    """5,000 topics, each message the first of its topic: when the disk fills, dispatch cannot create
    their ConsumeQueue files. Writes are refused meanwhile, retention's forced cleanup frees the
    oldest segments (wholly dispatched ones first; the oldest one in any case when none is), dispatch
    goes on, writes are taken again, and every acknowledged message retention kept is in its queue.
    Dispatching is the owner's, as in a broker (after every put, or only once the log is full), or
    the store's own thread's."""
    from ferrymq.store import MessageStore

    from .conftest import small_config

    with tmpfs(tmp_path / "disk", "16m") as disk:
        config = small_config(
            disk / "store",
            mapped_file_size_commit_log=512 * 1024,
            mapped_file_size_consume_queue=1000 * 20,
            file_reserved_time=72,  # nothing expires: only disk pressure deletes
        )
        store = MessageStore(config, background_dispatch=dispatching == "thread").open()
        try:
            results = []
            for i in range(5000):
                results.append(store.put_message(f"T{i}", 0, b"m" * 8000))
                if dispatching == "each-put":
                    store.dispatch()
                if not results[-1].ok:
                    break
            assert results[-1].status is PutStatus.DISK_FULL, results[-1]
            assert sum(r.ok for r in results) > 1000
            store.wait_dispatched(timeout=1)  # as far as it can
            assert store.put_message("T0", 0, b"again").status is PutStatus.DISK_FULL
            for _ in range(100):  # what the store's housekeeping does every clean_resource_interval
                if store.retention.run():
                    space_returned(store)
                if store.put_message("T0", 0, b"after").ok:
                    break
            else:
                pytest.fail(f"writes never taken again: dispatch waits: {store.dispatcher.stalled}")
            assert store.wait_dispatched()
            assert store.dispatcher.stalled is None
            low = store.commitlog.min_offset
            assert low > 0
            kept = [(i, r) for i, r in enumerate(results) if r.ok and r.wrote_offset >= low]
            assert len(kept) > 100
            for i, r in kept:
                got = store.get_messages(f"T{i}", 0, r.queue_offset, max_count=1)
                assert got.status is GetStatus.FOUND, (i, got)
                assert decode_records(bytes(got.buffers[0]))[0].body == b"m" * 8000
            assert store.get_max_offset("T0", 0) == 2  # its lost first message still holds offset 0
        finally:
            store.close()
