"""SYNC_FLUSH's group commit on the broker's event loop: an acknowledged put is fdatasync'd, one sync
covers every put of a loop pass, a stuck or failing disk is answered, and the C syncer agrees with
its Python reference."""

from __future__ import annotations

import asyncio
import errno
import os
import sys

import pytest

from ferrymq._native import load
from ferrymq.protocol.codes import RequestCode as Req
from ferrymq.protocol.codes import ResponseCode as Res
from ferrymq.store import PutStatus
from ferrymq.store.commitlog import CommitLog
from ferrymq.store.group_commit import LoopGroupCommit, start_syncer, sync_job

from .test_broker import send

NATIVE = load("fsync")
SYNCERS = [pytest.param(start_syncer, id="python")] + (
    [pytest.param(NATIVE.start_syncer, id="c")] if NATIVE is not None else []
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


def committer(log: CommitLog, syncer, timeout: float = 5) -> LoopGroupCommit:
    commit = LoopGroupCommit(log, asyncio.get_running_loop(), timeout)
    commit._start_syncer = syncer
    commit.start()
    return commit


@pytest.mark.parametrize("syncer", SYNCERS)
async def test_puts_of_one_pass_share_one_sync_and_complete_once_flushed(commitlog, syncer):
    commit = committer(commitlog, syncer)
    try:
        ends = [append(commitlog, b"x" * 100) for _ in range(20)]
        futures = [commit.request(end) for end in ends]
        assert not any(f.done() for f in futures)
        await asyncio.sleep(0)  # the pass ends: one sync starts for all of them
        assert len(commit._syncing) == 20 and not commit._waiting
        assert commitlog.flushed_offset == 0 and not any(f.done() for f in futures)
        assert await asyncio.wait_for(asyncio.gather(*futures), 5) == [None] * 20
        assert commitlog.flushed_offset == ends[-1]
        # puts made while a sync runs go with the next one, which starts when it ends
        first = commit.request(append(commitlog, b"y" * 10))
        await asyncio.sleep(0)
        later = [commit.request(append(commitlog, b"z" * 10)) for _ in range(5)]
        assert commit._syncing[0][1] is first and len(commit._waiting) == 5
        await asyncio.wait_for(asyncio.gather(first, *later), 5)
        assert commitlog.flushed_offset == commitlog.max_offset
    finally:
        commit.stop()


async def test_a_put_requested_after_its_sync_began_completes_with_it(commitlog):
    """As a store used from threads requests: its bytes were written before the sync began."""
    commit = LoopGroupCommit(commitlog, asyncio.get_running_loop(), timeout=5)
    commit.start()
    try:
        first_end, second_end = append(commitlog, b"a" * 10), append(commitlog, b"b" * 10)
        first = commit.request(first_end)
        await asyncio.sleep(0)  # the sync starts: it covers both writes
        second = commit.request(second_end)
        seen = []
        first.add_done_callback(lambda _: seen.append(second.done()))
        await asyncio.wait_for(first, 5)
        assert seen == [True]  # completed by the same sync, not by a later one
    finally:
        commit.stop()


@pytest.mark.parametrize("syncer", SYNCERS)
async def test_a_sync_spans_segments(commitlog, syncer):
    commit = committer(commitlog, syncer)
    try:
        futures = [commit.request(append(commitlog, b"s" * 30_000)) for _ in range(5)]
        await asyncio.wait_for(asyncio.gather(*futures), 5)
        assert len(commitlog.segments) == 3
        assert commitlog.flushed_offset == commitlog.max_offset
    finally:
        commit.stop()


@pytest.mark.parametrize("syncer", SYNCERS)
def test_a_syncer_answers_each_job_with_zero_or_the_errno(syncer, tmp_path):
    """Both versions write 4 bytes per job: 0 when every file synced, else the first errno; a bad
    job or the end of the jobs stops them."""
    signal_read, signal_write = os.pipe()
    job_read, job_write = os.pipe()
    with open(tmp_path / "f", "wb") as f:
        f.write(b"data")
        f.flush()
        try:
            syncer(job_read, signal_write)
            os.write(job_write, sync_job((f.fileno(),)))
            assert int.from_bytes(os.read(signal_read, 4), sys.byteorder) == 0
            os.write(job_write, sync_job((f.fileno(), signal_read)))  # a pipe cannot be synced
            assert int.from_bytes(os.read(signal_read, 4), sys.byteorder) == errno.EINVAL
            os.write(job_write, sync_job(()))
            assert int.from_bytes(os.read(signal_read, 4), sys.byteorder) == 0
        finally:
            os.close(job_write)  # the syncer ends
            os.close(signal_read)
            os.close(signal_write)
    with pytest.raises(ValueError):
        sync_job(tuple(range(65)))


async def test_a_failed_sync_fails_its_puts_and_the_next_sync_runs(commitlog):
    commit = LoopGroupCommit(commitlog, asyncio.get_running_loop(), timeout=5)
    commit.start()
    end = append(commitlog, b"a" * 10)
    seg = commitlog.segments[0]
    saved, (pipe_read, pipe_write) = os.dup(seg.fd), os.pipe()
    os.dup2(pipe_read, seg.fd)  # the segment's descriptor now names a pipe: its fdatasync fails
    try:
        with pytest.raises(OSError):
            await asyncio.wait_for(commit.request(end), 5)
        assert commitlog.flushed_offset == 0  # nothing counts as durable
        os.dup2(saved, seg.fd)
        await asyncio.wait_for(commit.request(append(commitlog, b"b" * 10)), 5)
        assert commitlog.flushed_offset == commitlog.max_offset
    finally:
        os.dup2(saved, seg.fd)
        commit.stop()
        for fd in (saved, pipe_read, pipe_write):
            os.close(fd)


async def test_a_stuck_sync_answers_flush_disk_timeout(commitlog):
    """A disk that never answers: a syncer that takes jobs and syncs nothing."""
    held: list[tuple[int, int]] = []
    commit = committer(commitlog, lambda jobs, signal: held.append((jobs, signal)), timeout=0.05)
    try:
        future = commit.request(append(commitlog, b"a" * 10))
        await asyncio.sleep(0)
        waiting = commit.request(append(commitlog, b"b" * 10))  # behind the stuck one
        assert await asyncio.wait_for(future, 5) is PutStatus.FLUSH_DISK_TIMEOUT
        assert await asyncio.wait_for(waiting, 5) is PutStatus.FLUSH_DISK_TIMEOUT
        later = commit.request(append(commitlog, b"c" * 10))  # the disk is still stuck
        assert await asyncio.wait_for(later, 5) is PutStatus.FLUSH_DISK_TIMEOUT
        assert commitlog.flushed_offset == 0
    finally:
        jobs, signal = held[0]
        os.write(signal, bytes(4))  # the disk answers at last: stop() waits for it
        commit.stop()
        os.close(jobs)


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
