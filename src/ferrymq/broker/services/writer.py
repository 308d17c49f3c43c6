"""Where the broker's own services store messages: one seam for every write they make.

Delayed and timed messages redelivered when due, a transaction's commit, rollback and check
records, POP's checkpoint and ack records and revived messages are put here, never into the store
directly. A classic broker stores them at once; in DLedger mode they go through Raft like a
producer's send, so every member of the group stores them at the same place in its CommitLog and
the queue offsets agree after a failover.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import Protocol

from ferrymq.ha.dledger.apply import put as put_command
from ferrymq.ha.dledger.command import PutCommand
from ferrymq.store import MessageStore, PutResult, PutStatus


class ReplicatedLog(Protocol):
    """DLedger mode's log: a put is stored by every member once a majority holds it."""

    async def put(self, c: PutCommand, timeout: float) -> PutResult: ...


class MessageWriter:
    def __init__(self, store: MessageStore, replicated_log: ReplicatedLog | None, timeout: float) -> None:
        """`replicated_log`: DLedger mode's (None: a classic broker); `timeout`: how long a put may
        wait for its commit (s)."""
        self.store = store
        self.replicated_log = replicated_log
        self.timeout = timeout
        self._next: dict[tuple[str, int], int] = {}  # queue offsets `submit` promised so far
        self._proposing: set[asyncio.Task] = set()

    async def put(self, c: PutCommand) -> PutResult:
        """`c` stored: at once, or once committed by a majority and applied to this member's store."""
        if self.replicated_log is None:
            return put_command(self.store, c)
        return await self.replicated_log.put(c, self.timeout)

    def submit(self, c: PutCommand) -> PutResult:
        """For callers that answer before a commit could come (a pop's checkpoint record): `c`
        stored at once on a classic broker. In DLedger mode it is proposed now, and `durable()` says
        whether it was committed; the result's queue offset is the one it takes if `submit` is the
        only writer of that queue (the revive topic). One message, not a batch."""
        log = self.replicated_log
        if log is None:
            return put_command(self.store, c)
        key = (c.topic, c.queue_id)
        # the leader alone writes, in log order: after what the store holds and what it promised
        offset = max(self.store.next_queue_offset(*key), self._next.get(key, 0))
        self._next[key] = offset + 1
        committed: Future = Future()
        task = asyncio.ensure_future(log.put(c, self.timeout))
        self._proposing.add(task)
        task.add_done_callback(lambda t: self._settled(t, committed))
        return PutResult(
            PutStatus.PUT_OK, queue_offset=offset, message_count=1, flush_future=committed,
            flush_timeout=self.timeout + 1,
        )  # fmt: skip

    def _settled(self, task: asyncio.Task, committed: Future) -> None:
        self._proposing.discard(task)
        ok = not task.cancelled() and task.exception() is None and task.result().ok
        committed.set_result(PutStatus.PUT_OK if ok else PutStatus.SERVICE_NOT_AVAILABLE)

    def lost_leadership(self) -> None:
        """Offsets promised while leading are void (a later leadership starts from the store)."""
        self._next.clear()
