"""Background flushing: periodic (ASYNC_FLUSH) and group commit (SYNC_FLUSH), plus housekeeping."""

from __future__ import annotations

import errno
import logging
import os
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

from ferrymq.store.commitlog import CommitLog

log = logging.getLogger(__name__)


class GroupCommit(Protocol):
    """What the store asks of SYNC_FLUSH's group commit: `request(end)` gives a future completed
    (with None, or a PutStatus saying why not) once the CommitLog is durable up to `end`."""

    def start(self) -> None: ...

    def request(self, end_offset: int) -> Any: ...

    def stop(self) -> None: ...


MAX_SYNC_FDS = 64  # files one job may name (ferrymq/_native/fsync.c's bound)
_INT32 = struct.Struct("=i")


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


class GroupCommitService:
    """SYNC_FLUSH: puts queue a request; one fdatasync completes every request it covers.

    Requests that arrive while a sync runs wait for the next one, so under load each sync serves
    a whole group of producers (RocketMQ's GroupCommitService).
    """

    def __init__(self, commitlog: CommitLog) -> None:
        self.commitlog = commitlog
        self._cond = threading.Condition()
        self._requests: list[tuple[int, Future]] = []
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="ferrymq-group-commit", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request(self, end_offset: int) -> Future:
        """A future completed once the CommitLog is durable up to `end_offset`."""
        future: Future = Future()
        with self._cond:
            self._requests.append((end_offset, future))
            self._cond.notify()
        return future

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._requests and not self._stopping:
                    self._cond.wait()
                if not self._requests:
                    return
                requests, self._requests = self._requests, []
            try:
                flushed = self.commitlog.flush()
            except OSError as e:
                log.error("CommitLog flush failed: %s", e)
                for _, future in requests:
                    future.set_exception(e)
                continue
            for end, future in requests:
                if end <= flushed:
                    future.set_result(flushed)
                else:  # written after the flush began: goes with the next one
                    with self._cond:
                        self._requests.append((end, future))

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join()


class FlushService:
    """One housekeeping thread running the store's periodic jobs: async CommitLog flushes,
    checkpoints, retention and disk checks. It knows only the jobs and their periods, so a job's
    failure is logged and retried at its next turn without stopping the others."""

    def __init__(self, jobs: dict[str, tuple[float | None, Callable[[], object]]]) -> None:
        """`jobs`: name -> (period in seconds, or None to skip it; the call)."""
        self.jobs = {name: (period, call) for name, (period, call) in jobs.items() if period}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ferrymq-flush", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        now = time.monotonic()
        due = {name: now + period for name, (period, _) in self.jobs.items()}
        while due and not self._stop.wait(max(0.0, min(due.values()) - time.monotonic())):
            now = time.monotonic()
            for name in [n for n, t in due.items() if t <= now]:
                period, job = self.jobs[name]
                due[name] = now + period
                try:
                    job()
                except Exception:
                    log.exception("store %s task failed; will retry", name)
