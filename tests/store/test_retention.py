"""Retention by age and by disk pressure, and the disk-full refusal, on real file systems."""

import os
import subprocess
import time

import pytest

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


@pytest.fixture
def tiny_disk(tmp_path):
    """A 2 MiB tmpfs: a real file system that really fills up. Needs root (CI runs as root)."""
    if os.geteuid() != 0:
        pytest.fail("the disk-full tests mount a tmpfs and need root")
    mount = tmp_path / "tiny"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


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
