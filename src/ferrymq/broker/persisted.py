"""Load and save a broker's JSON config files (topics.json, consumerOffset.json, ...) durably."""

from __future__ import annotations

import asyncio
import logging
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
    """Writes a table's file once for all the changes made in one event-loop turn.

    A broker making thousands of groups or topics one by one (a gateway starting thousands of
    consumers) would otherwise rewrite the whole file after each, work growing with the square of
    the table. Changes on the loop are written by a callback at the end of the turn; callers that
    answer a client only once the change is durable await `saved()`. Changes off any running loop
    (start-up, worker threads) are written at once.
    """

    def __init__(self, path: Path, snapshot: Callable[[], Body]) -> None:
        self.path = path
        self._snapshot = snapshot
        self._pending: asyncio.Future[None] | None = None

    def changed(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        if self._pending is None:
            self._pending = loop.create_future()
            loop.call_soon(self.flush_pending)

    async def saved(self) -> None:
        """Return once every change made so far is on disk (raises if the write failed)."""
        if self._pending is not None:
            await asyncio.shield(self._pending)

    def flush(self) -> None:
        """Write now (a change off the loop). A pending end-of-turn write is left to the loop's
        thread, which alone resolves what its waiters await."""
        try:
            save_json(self.path, self._snapshot())
        except Exception as e:
            log.error("could not write %s: %s", self.path, e)
            raise

    def flush_pending(self) -> None:
        """Write the changes not yet on disk, if any, and tell whoever awaits them how it went (the
        end-of-turn callback, and shutdown)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            self.flush()
        except Exception as e:
            pending.set_exception(e)
            pending.exception()  # logged by flush, so not again when nobody awaits it
        else:
            pending.set_result(None)


def next_version(version: DataVersion) -> DataVersion:
    """RocketMQ's DataVersion.nextVersion: a new timestamp and a bumped counter."""
    return DataVersion(
        state_version=version.state_version, timestamp=int(time.time() * 1000), counter=version.counter + 1
    )
