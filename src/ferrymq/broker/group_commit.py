"""SYNC_FLUSH's group commit run by the broker's event loop: a send is acknowledged once fdatasync'd.

The store's own group commit is a thread that producers' futures wait on. In a broker that cost a
cycle of ~6 ms for a 0.2 ms fdatasync: the thread took the GIL to start a sync and again when it
returned, each time waiting out the interpreter's switch interval while the loop ran Python, and then
woke the loop once per acknowledged put. Here the loop itself decides when to sync: at the end of the
loop pass that made the first waiting put (so one sync covers every put of the pass), and at once
again when a sync ends with puts waiting, as RocketMQ's GroupCommitService swaps its request lists.
The fdatasync runs on a thread that never takes the GIL (ferrymq/_native/fsync.c; a Python thread
without it), which gets its jobs through one pipe and writes each outcome to another that the loop
watches; the loop then completes the asyncio futures of every put the sync covered.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from ferrymq._native import load
from ferrymq.store import PutStatus
from ferrymq.store.commitlog import CommitLog
from ferrymq.store.flush import MAX_SYNC_FDS, start_syncer, sync_job

log = logging.getLogger(__name__)
_native = load("fsync")
_OUTCOME = 4  # bytes per sync written to the pipe: 0 or an errno, native order

Waiter = tuple[int, asyncio.Future]  # (CommitLog offset that must be durable, its put's future)


class LoopGroupCommit:
    def __init__(self, commitlog: CommitLog, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        """`timeout` (s): how long a put waits for its sync before it is answered FLUSH_DISK_TIMEOUT."""
        self.commitlog = commitlog
        self._loop = loop
        self._timeout = timeout
        self._start_syncer = _native.start_syncer if _native is not None else start_syncer
        self._waiting: list[Waiter] = []  # for the next sync
        self._syncing: list[Waiter] = []  # covered by the running sync
        self._target = -1  # the running sync's end offset; -1: none runs
        self._scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._read_fd = self._write_fd = self._job_fd = -1

    def start(self) -> None:
        self._read_fd, self._write_fd = os.pipe()
        jobs, self._job_fd = os.pipe()
        try:
            self._start_syncer(jobs, self._write_fd)
        except BaseException:
            for fd in (jobs, self._job_fd, self._read_fd, self._write_fd):
                os.close(fd)
            raise
        os.set_blocking(self._read_fd, False)
        self._loop.add_reader(self._read_fd, self._signalled)

    def request(self, end_offset: int) -> asyncio.Future:
        """A future completed (None, or FLUSH_DISK_TIMEOUT) once the CommitLog is durable up to
        `end_offset`; on the event loop's thread."""
        future = self._loop.create_future()
        self._waiting.append((end_offset, future))
        if self._target < 0 and not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._begin)
        return future

    def _begin(self) -> None:
        """Sync everything written so far for the puts waiting (none may run already)."""
        self._scheduled = False
        if self._target >= 0 or not self._waiting or self._read_fd < 0:
            return
        target = self.commitlog.max_offset
        segments = self.commitlog.unflushed_segments(target)
        if len(segments) <= MAX_SYNC_FDS:
            self._syncing, self._waiting = self._waiting, []
        else:  # a backlog of that many segments: the rest goes with the next sync
            segments = segments[:MAX_SYNC_FDS]
            target = segments[-1].end
            self._syncing = [w for w in self._waiting if w[0] <= target]
            self._waiting = [w for w in self._waiting if w[0] > target]
        self._target = target
        if not segments:  # a checkpoint synced it meanwhile
            self._finish(0)
            return
        try:
            os.write(self._job_fd, sync_job(tuple(seg.fd for seg in segments)))
        except OSError as e:
            self._finish(e.errno or 0, e)
            return
        self._timer = self._loop.call_later(self._timeout, self._overdue)

    def _signalled(self) -> None:
        try:
            data = os.read(self._read_fd, _OUTCOME)
        except BlockingIOError:
            return
        if len(data) == _OUTCOME:  # (4 bytes written at once to a pipe arrive at once)
            self._finish(int.from_bytes(data, sys.byteorder))

    def _finish(self, outcome: int, error: OSError | None = None) -> None:
        """The running sync ended: `outcome` 0 or its errno."""
        target, self._target = self._target, -1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        syncing, self._syncing = self._syncing, []
        if outcome or error is not None:
            failure = error or OSError(outcome, os.strerror(outcome))
            log.error("CommitLog flush failed: %s", failure)
            for _, future in syncing:
                if not future.done():
                    future.set_exception(failure)
        else:
            self.commitlog.flushed(target)
            for _, future in syncing:
                if not future.done():
                    future.set_result(None)
        if self._waiting and not self._scheduled:  # the puts of this pass join them: sync after it
            self._scheduled = True
            self._loop.call_soon(self._begin)

    def _overdue(self) -> None:
        """The running sync took longer than the timeout: answer every waiting put now, and the puts
        that come while it still runs at the next timeout."""
        self._timer = self._loop.call_later(self._timeout, self._overdue)
        for _, future in (*self._syncing, *self._waiting):
            if not future.done():
                future.set_result(PutStatus.FLUSH_DISK_TIMEOUT)

    def stop(self) -> None:
        """Wait for a running sync, sync the rest, and complete every put that is then durable."""
        if self._read_fd < 0:
            return
        self._loop.remove_reader(self._read_fd)
        if self._target >= 0:
            os.set_blocking(self._read_fd, True)
            self._finish(int.from_bytes(os.read(self._read_fd, _OUTCOME), sys.byteorder))
        flushed = self.commitlog.flush()
        for end, future in self._waiting:
            if not future.done() and end <= flushed:
                future.set_result(None)
        self._waiting = []
        os.close(self._job_fd)  # the syncer reads the end of its jobs and stops
        os.close(self._read_fd)
        os.close(self._write_fd)
        self._read_fd = self._write_fd = self._job_fd = -1
