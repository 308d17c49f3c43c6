"""Where the broker's own services store messages: one seam for every write they make.

Delayed and timed messages redelivered when due and a transaction's commit, rollback and check
records are put here, never into the store directly. A classic broker stores them at once; in
DLedger mode they go through Raft like a producer's send, so every member of the group stores
them at the same place in its CommitLog and the queue offsets agree after a failover.
"""

from __future__ import annotations

from typing import Protocol

from ferrymq.ha.dledger.apply import put as put_command
from ferrymq.ha.dledger.command import PutCommand
from ferrymq.store import MessageStore, PutResult


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

    async def put(self, c: PutCommand) -> PutResult:
        """`c` stored: at once, or once committed by a majority and applied to this member's store."""
        if self.replicated_log is None:
            return put_command(self.store, c)
        return await self.replicated_log.put(c, self.timeout)
