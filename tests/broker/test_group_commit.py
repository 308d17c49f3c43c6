"""SYNC_FLUSH's group commit on the broker's event loop: an acknowledged put is fdatasync'd, one sync
covers every put of a loop pass, a stuck or failing disk is answered, and the C sync thread agrees
with its Python reference."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from ferrymq._native import load
from ferrymq.broker.group_commit import LoopGroupCommit
from ferrymq.protocol.codes import RequestCode as Req
from ferrymq.protocol.codes import ResponseCode as Res
from ferrymq.store import PutStatus
from ferrymq.store.commitlog import CommitLog
from ferrymq.store.flush import sync_then_signal

from .test_broker import send

NATIVE = load("fsync")
SYNCS = [pytest.param(sync_then_signal, id="python")] + (
    [pytest.param(NATIVE.sync_then_signal, id="c")] if NATIVE is not None else []
)


@pytest.fixture
def commitlog(tmp_path):
    log = CommitLog(tmp_path / "commitlog", 1 << 16)
    yield log
    log.close()


def append(log: CommitLog, data: bytes) -> int:
    """Write `data` at the end of the log (as a put does, without a record); return its end offset."""
    seg, pos = log.writable_segment(len(data))
    seg.mm[pos : pos + len(data)] = data
    log.max_offset = seg.base + pos + len(data)
    return log.max_offset


class Counted:
    """The real sync function, counting its calls."""

    def __init__(self, sync) -> None:
        self.sync, self.calls = sync, 0

    def __call__(self, fds, signal_fd) -> None:
        self.calls += 1
        self.sync(fds, signal_fd)


@pytest.mark.parametrize("sync", SYNCS)
async def test_puts_of_one_pass_share_one_sync_and_complete_once_flushed(commitlog, sync):
    commit = LoopGroupCommit(commitlog, asyncio.get_running_loop(), timeout=5)
    commit._sync = counted = Counted(sync)
    commit.start()
    try:
        ends = [append(commitlog, b"x" * 100) for _ in range(20)]
        futures = [commit.request(end) for end in ends]
        assert commitlog.flushed_offset == 0 and not any(f.done() for f in futures)
        assert await asyncio.wait_for(asyncio.gather(*futures), 5) == [None] * 20
        assert counted.calls == 1
        assert commitlog.flushed_offset == ends[-1]
        # puts made while a sync runs go with the next one, which starts when it ends
        first = commit.request(append(commitlog, b"y" * 10))
        await asyncio.sleep(0)  # the pass ends: the sync starts
        later = [commit.request(append(commitlog, b"z" * 10)) for _ in range(5)]
        await asyncio.wait_for(asyncio.gather(first, *later), 5)
        assert counted.calls == 3
        assert commitlog.flushed_offset == commitlog.max_offset
    finally:
        commit.stop()


@pytest.mark.parametrize("sync", SYNCS)
async def test_a_sync_spans_segments(commitlog, sync):
    commit = LoopGroupCommit(commitlog, asyncio.get_running_loop(), timeout=5)
    commit._sync = sync
    commit.start()
    try:
        futures = [commit.request(append(commitlog, b"s" * 30_000)) for _ in range(5)]  # 3 segments
        await asyncio.wait_for(asyncio.gather(*futures), 5)
        assert len(commitlog.segments) == 3
        assert commitlog.flushed_offset == commitlog.max_offset
    finally:
        commit.stop()


@pytest.mark.parametrize("sync", SYNCS)
def test_the_outcome_is_zero_or_the_errno(sync, tmp_path):
    """Both versions write 4 bytes per sync: 0 when every fd synced, else the first errno."""
    read_fd, write_fd = os.pipe()
    with open(tmp_path / "f", "wb") as f:
        f.write(b"data")
        f.flush()
        try:
            sync((f.fileno(),), write_fd)
            assert int.from_bytes(os.read(read_fd, 4), sys.byteorder) == 0
            sync((f.fileno(), read_fd), write_fd)  # a pipe cannot be synced: EINVAL
            assert int.from_bytes(os.read(read_fd, 4), sys.byteorder) == 22
        finally:
            os.close(read_fd)
            os.close(write_fd)


async def test_a_failed_sync_fails_its_puts_and_the_next_sync_runs(commitlog):
    commit = LoopGroupCommit(commitlog, asyncio.get_running_loop(), timeout=5)
    real = commit._sync
    bad_read, bad_write = os.pipe()
    commit._sync = lambda fds, signal_fd: real((bad_read,), signal_fd)  # a "disk" that refuses
    commit.start()
    try:
        failed = commit.request(append(commitlog, b"a" * 10))
        with pytest.raises(OSError):
            await asyncio.wait_for(failed, 5)
        assert commitlog.flushed_offset == 0  # nothing counts as durable
        commit._sync = real
        await asyncio.wait_for(commit.request(append(commitlog, b"b" * 10)), 5)
        assert commitlog.flushed_offset == commitlog.max_offset
    finally:
        commit.stop()
        os.close(bad_read)
        os.close(bad_write)


async def test_a_stuck_sync_answers_flush_disk_timeout(commitlog):
    commit = LoopGroupCommit(commitlog, asyncio.get_running_loop(), timeout=0.05)
    stuck: list[int] = []
    commit._sync = lambda fds, signal_fd: stuck.append(signal_fd)  # a disk that never answers
    commit.start()
    try:
        future = commit.request(append(commitlog, b"a" * 10))
        await asyncio.sleep(0)
        waiting = commit.request(append(commitlog, b"b" * 10))  # behind the stuck one
        assert await asyncio.wait_for(future, 5) is PutStatus.FLUSH_DISK_TIMEOUT
        assert await asyncio.wait_for(waiting, 5) is PutStatus.FLUSH_DISK_TIMEOUT
        assert commitlog.flushed_offset == 0
    finally:
        os.write(stuck[0], bytes(4))  # the disk answers at last: stop() waits for it
        commit.stop()


async def test_stop_completes_the_puts_it_flushed(commitlog):
    commit = LoopGroupCommit(commitlog, asyncio.get_running_loop(), timeout=5)
    commit.start()
    future = commit.request(append(commitlog, b"a" * 10))
    commit.stop()  # before the pass ended: no sync ran yet
    assert future.result() is None
    assert commitlog.flushed_offset == commitlog.max_offset


async def test_a_sync_flush_broker_acknowledges_concurrent_sends_once_flushed(make_cluster):
    cluster = await make_cluster(flush_disk_type="SYNC_FLUSH")
    store = cluster.broker.store
    answers = await asyncio.gather(*(send(cluster, body=b"m%d" % i) for i in range(64)))
    assert [a.code for a in answers] == [Res.SUCCESS] * 64
    assert store.commitlog.flushed_offset == store.commitlog.max_offset
    one = await send(cluster, body=b"alone", code=Req.SEND_MESSAGE_V2)
    assert one.code == Res.SUCCESS
    assert store.commitlog.flushed_offset == store.commitlog.max_offset
