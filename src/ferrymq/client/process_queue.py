"""One owned queue's pulled messages on their way to the listener (RocketMQ's ProcessQueue)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterable, Iterator

from ferrymq.client.message import MessageExt, MessageQueue

LOCK_STALE_AFTER = 30.0  # a lock not renewed for this long is no longer trusted here


class ProcessQueue:
    """The messages of one owned queue that are pulled but not yet consumed, in offset order.

    Everything below the lowest of them is consumed, so that is the offset to commit; a message
    that failed stays here until it succeeds and holds the offset back.
    """

    def __init__(self, mq: MessageQueue) -> None:
        self.mq = mq
        self.messages: dict[int, MessageExt] = {}  # queue offset -> message; pulls come in order
        self.size = 0  # body bytes held
        self.next_offset: int | None = None  # where the next pull starts; None until looked up
        self.dropped = False  # no longer ours: what is still consumed commits nothing
        self.locked_at: float | None = None  # monotonic time of the broker's last lock grant
        self.room = asyncio.Event()  # consumption freed room: the pull loop may go on
        self.work = asyncio.Event()  # messages, a lock or a drop arrived: the orderly loop may go on
        self.tasks: list[asyncio.Task] = []  # the pull loop, then the orderly consume loop if any

    def add(self, messages: Iterable[MessageExt]) -> list[MessageExt]:
        """Take pulled messages; return those not held already."""
        fresh = [m for m in messages if m.queue_offset not in self.messages]
        for m in fresh:
            self.messages[m.queue_offset] = m
            self.size += len(m.body)
        if fresh:
            self.work.set()
        return fresh

    def remove(self, messages: Iterable[MessageExt]) -> None:
        """Messages done with (consumed, sent back, or given up)."""
        for m in messages:
            if self.messages.pop(m.queue_offset, None) is not None:
                self.size -= len(m.body)
        self.room.set()

    def holds(self, m: MessageExt) -> bool:
        """Whether this very message is still waiting here (not timed out or replaced meanwhile)."""
        return self.messages.get(m.queue_offset) is m

    def head(self, n: int) -> list[MessageExt]:
        return list(itertools.islice(self.messages.values(), n))

    def commit_offset(self) -> int | None:
        """The offset below which everything is consumed; None before the first pull."""
        return next(iter(self.messages)) if self.messages else self.next_offset

    def drop(self) -> None:
        """The queue is no longer ours: its loops stop, its consumes in flight commit nothing."""
        self.dropped = True
        self.work.set()

    def locked(self) -> bool:
        return self.locked_at is not None and time.monotonic() - self.locked_at < LOCK_STALE_AFTER

    def set_locked(self, granted: bool) -> None:
        self.locked_at = time.monotonic() if granted else None
        if granted:
            self.work.set()


def by_broker(pqs: Iterable[ProcessQueue]) -> dict[str, list[ProcessQueue]]:
    """Queues grouped by their broker: lock requests go one per broker."""
    grouped: dict[str, list[ProcessQueue]] = {}
    for pq in pqs:
        grouped.setdefault(pq.mq.broker_name, []).append(pq)
    return grouped


def batches(messages: list[MessageExt], size: int) -> Iterator[list[MessageExt]]:
    """Runs of at most `size` messages of one topic (a retry queue mixes topics, each with its listener)."""
    batch: list[MessageExt] = []
    for m in messages:
        if batch and (len(batch) == size or m.topic != batch[0].topic):
            yield batch
            batch = []
        batch.append(m)
    if batch:
        yield batch
