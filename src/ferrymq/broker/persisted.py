"""Load and save a broker's JSON config files (topics.json, consumerOffset.json, ...) durably."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ferrymq.protocol.bodies import Body, DataVersion, decode_body, encode_body
from ferrymq.protocol.remoting import RemotingProtocolError
from ferrymq.store.files import atomic_write, durable_copies

log = logging.getLogger(__name__)
B = TypeVar("B", bound=Body)
writes: Counter[Path] = Counter()  # files written by save_json, by path: lets tests count the work


def load_json(path: Path, cls: type[B]) -> B:
    """The file's content, its .bak if the main copy is damaged, or a fresh default."""
    for candidate, data in durable_copies(path):
        try:
            return decode_body(cls, data)
        except RemotingProtocolError as e:
            log.error("%s is damaged (%s); trying its backup", candidate, e)
    return cls()


def save_json(path: Path, body: Body) -> None:
    atomic_write(path, encode_body(body))
    writes[path] += 1


class CoalescedSave:
    """Writes a table's file in a worker thread, once for all the changes made meanwhile.

    A broker making thousands of groups or topics one by one (a gateway starting thousands of
    consumers, or handing back messages of as many queues, each making its retry topic) would
    otherwise rewrite and fsync the whole file after each, on the event loop, stalling every
    client. Changes on the loop start a write after the turn; changes made while it runs are
    written by one more write when it ends. Callers that answer a client only once the change is
    durable await `saved()`. Changes off any running loop (start-up, worker threads) are written
    at once. Each write takes the table as it is when it starts, under a lock, so a later write
    never lands before an earlier one.
    """

    def __init__(self, path: Path, snapshot: Callable[[], Body]) -> None:
        self.path = path
        self._snapshot = snapshot
        self._lock = threading.Lock()
        self._pending: asyncio.Future[None] | None = None  # changes no write has started with yet
        self._writing: asyncio.Future[None] | None = None  # the write in the worker thread

    def changed(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        if self._pending is None:
            self._pending = loop.create_future()
            if self._writing is None:
                loop.call_soon(self._start)

    async def saved(self) -> None:
        """Return once every change made so far is on disk (raises if the write failed)."""
        waited = self._pending or self._writing
        if waited is not None:
            await asyncio.shield(waited)

    def flush(self) -> None:
        """Write the table as it is now, in the calling thread."""
        try:
            with self._lock:
                save_json(self.path, self._snapshot())
        except Exception as e:
            log.error("could not write %s: %s", self.path, e)
            raise

    def flush_pending(self) -> None:
        """Write the changes not yet on disk now, in the calling thread (shutdown): once it
        returns, the file holds every change, even if a write in a worker thread is still due to
        tell its waiters."""
        pending, self._pending = self._pending, None
        if pending is not None:
            _settle(pending, self.flush)

    def _start(self) -> None:
        pending, self._pending = self._pending, None
        if pending is None:  # written by flush_pending meanwhile
            return
        self._writing = pending
        written = asyncio.get_running_loop().run_in_executor(None, self.flush)
        written.add_done_callback(functools.partial(self._written, pending))

    def _written(self, waiters: asyncio.Future[None], written: asyncio.Future[None]) -> None:
        self._writing = None
        _settle(waiters, written.result)
        if self._pending is not None:
            self._start()


def _settle(waiters: asyncio.Future[None], write: Callable[[], None]) -> None:
    """Run `write` (or take its outcome) and tell the waiters how it went."""
    try:
        write()
    except Exception as e:
        waiters.set_exception(e)
        waiters.exception()  # logged by flush, so not again when nobody awaits it
    else:
        waiters.set_result(None)


def next_version(version: DataVersion) -> DataVersion:
    """RocketMQ's DataVersion.nextVersion: a new timestamp and a bumped counter."""
    return DataVersion(
        state_version=version.state_version, timestamp=int(time.time() * 1000), counter=version.counter + 1
    )
