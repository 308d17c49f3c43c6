"""SYNC_FLUSH's group commit: a put is acknowledged once fdatasync'd, and one sync covers every put
written before it began.

An event loop decides when to sync: at the end of the loop pass that made the first waiting put (so
one sync covers every put of the pass), and at once again when a sync ends with puts waiting, as
RocketMQ's GroupCommitService swaps its request lists. (Starting a sync the moment a put is written
gave the first put of a burst read at once a sync of its own and made the rest wait for a second
one: 81 % of the throughput with 64 sends in flight, bench/results/ab-sync-immediate-start-single64.json.)
The fdatasync runs on a thread that never
takes the GIL (ferrymq/_native/fsync.c; `start_syncer` here is its Python reference), fed jobs
through one pipe and writing each outcome to another that the loop watches; the loop then completes
the asyncio futures of every put the sync covered. (A group commit thread of its own, as the store had
before, cost a cycle of ~6 ms for a 0.2 ms fdatasync in a broker: it took the GIL to start a sync and
again when it returned, each time waiting out the switch interval while the loop ran Python.)

A store opened on an event loop (a broker's) uses that loop; one opened without (tools, the store's
benchmark, its crash writer) gets the same group commit on a loop of its own thread, `ThreadGroupCommit`.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import struct
import sys
import threading
from concurrent.futures import Future

from ferrymq._native import load
from ferrymq.store.commitlog import CommitLog
from ferrymq.store.status import PutStatus

log = logging.getLogger(__name__)
_native = load("fsync")
_OUTCOME = 4  # bytes per sync written to the pipe: 0 or an errno, native order
MAX_SYNC_FDS = 64  # files one job may name (ferrymq/_native/fsync.c's bound)
_INT32 = struct.Struct("=i")

Waiter = tuple[int, asyncio.Future]  # (CommitLog offset that must be durable, its put's future)


def sync_job(fds: tuple[int, ...]) -> bytes:
    """A job for a syncer: the count, then the fds, as native int32s."""
    if len(fds) > MAX_SYNC_FDS:
        raise ValueError(f"a sync job names at most {MAX_SYNC_FDS} files, not {len(fds)}")
    return struct.pack(f"=i{len(fds)}i", len(fds), *fds)


def start_syncer(job_fd: int, signal_fd: int) -> None:
    """Start a thread that, until `job_fd` reaches its end, reads jobs (`sync_job`) from it,
    fdatasyncs their files and writes each outcome to `signal_fd`: 4 bytes in native order, 0 or the
    errno of the first failure. The thread closes `job_fd` when it ends.

    The reference for ferrymq/_native/fsync.c, whose thread does the same without the GIL (a Python
    thread takes it back after each fdatasync, waiting out the switch interval while another thread
    runs Python)."""
    threading.Thread(target=_syncer, args=(job_fd, signal_fd), name="ferrymq-fdatasync", daemon=True).start()


def _syncer(job_fd: int, signal_fd: int) -> None:
    with open(job_fd, "rb", buffering=0, closefd=True) as jobs:
        while len(head := _read_all(jobs, _INT32.size)) == _INT32.size:
            count = _INT32.unpack(head)[0]
            if not 0 <= count <= MAX_SYNC_FDS or len(body := _read_all(jobs, 4 * count)) < 4 * count:
                return
            outcome = 0
            for fd in struct.unpack(f"={count}i", body):
                try:
                    os.fdatasync(fd)
                except OSError as e:
                    outcome = outcome or e.errno or errno.EIO
            try:
                os.write(signal_fd, _INT32.pack(outcome))
            except OSError:  # the reader is gone: nobody waits for this sync any more
                return


def _read_all(f, size: int) -> bytes:
    data = b""
    while len(data) < size and (chunk := f.read(size - len(data))):
        data += chunk
    return data


def group_commit(commitlog: CommitLog, timeout: float) -> LoopGroupCommit | ThreadGroupCommit:
    """The group commit for a store opened here: on the running event loop if there is one (its puts
    are made on it), else on a loop of its own."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return ThreadGroupCommit(commitlog, timeout)
    return LoopGroupCommit(commitlog, loop, timeout)


class LoopGroupCommit:
    """The group commit of puts made on `loop`'s thread: `request` gives asyncio futures."""

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
        if self._waiting and self._waiting[0][0] <= target:  # requested late (from another thread),
            syncing += [w for w in self._waiting if w[0] <= target]  # written before it began
            self._waiting = [w for w in self._waiting if w[0] > target]
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
        read_fd, self._read_fd = self._read_fd, -1  # no sync starts from here on
        if read_fd < 0:
            return
        self._loop.remove_reader(read_fd)
        if self._target >= 0:
            os.set_blocking(read_fd, True)
            self._finish(int.from_bytes(os.read(read_fd, _OUTCOME), sys.byteorder))
        flushed = self.commitlog.flush()
        for end, future in self._waiting:
            if not future.done() and end <= flushed:
                future.set_result(None)
        self._waiting = []
        os.close(self._job_fd)  # the syncer reads the end of its jobs and stops
        os.close(read_fd)
        os.close(self._write_fd)
        self._read_fd = self._write_fd = self._job_fd = -1


class ThreadGroupCommit:
    """The same group commit for a store used without an event loop: a `LoopGroupCommit` on a loop
    run by a thread of its own. Puts get concurrent futures, which `PutResult.wait` blocks on; the
    requests that gather while the loop is busy share one future and go over together, as one
    request for the furthest of them (one wake-up of the loop and one future on each side per
    batch, instead of one each per put: a put costs a lock and a comparison)."""

    def __init__(self, commitlog: CommitLog, timeout: float) -> None:
        self.commitlog = commitlog
        self._loop = asyncio.new_event_loop()
        self._commit = LoopGroupCommit(commitlog, self._loop, timeout)
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="ferrymq-group-commit", daemon=True
        )
        self._lock = threading.Lock()
        self._incoming: Future | None = None  # the future of the requests not yet handed over ...
        self._furthest = -1  # ... and the furthest offset they wait for
        self._stopping = False

    def start(self) -> None:
        self._commit.start()
        self._thread.start()

    def request(self, end_offset: int) -> Future:
        """A future completed (None, or FLUSH_DISK_TIMEOUT) once the CommitLog is durable up to
        `end_offset`, shared with the requests made with it; from any thread. Once `stop` has
        begun, completed at once with SERVICE_NOT_AVAILABLE: the store is closing, and the put is
        not acknowledged."""
        with self._lock:
            if self._stopping:
                closed: Future = Future()
                closed.set_result(PutStatus.SERVICE_NOT_AVAILABLE)
                return closed
            if end_offset > self._furthest:
                self._furthest = end_offset
            future = self._incoming
            if future is None:  # the first since the last hand-over: ask for the next one
                future = self._incoming = Future()
                future.set_running_or_notify_cancel()  # so no waiter cancels it for the others
                self._loop.call_soon_threadsafe(self._hand_over)  # (under the lock: before any stop)
        return future

    def _hand_over(self) -> None:
        with self._lock:
            future, furthest = self._incoming, self._furthest
            self._incoming, self._furthest = None, -1
        assert future is not None  # one hand-over is asked for each future

        def settle(done: asyncio.Future) -> None:
            error = done.exception()
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(done.result())

        self._commit.request(furthest).add_done_callback(settle)

    def stop(self) -> None:
        """Complete the requests made so far (`LoopGroupCommit.stop`), then end the thread."""
        with self._lock:
            if self._stopping or not self._thread.is_alive():
                return
            self._stopping = True  # every hand-over asked for is on the loop before `stop_on_loop`

        def stop_on_loop() -> None:
            try:
                self._commit.stop()
            finally:  # after the callbacks that complete the puts' futures, which stop scheduled
                self._loop.call_soon(self._loop.stop)

        self._loop.call_soon_threadsafe(stop_on_loop)
        self._thread.join()
        self._loop.close()
