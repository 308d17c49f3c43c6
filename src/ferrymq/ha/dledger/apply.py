"""Committed put commands applied to a member's MessageStore, and the mark of how far that went.

Every member (the leader too) stores a put only once its entry is committed, so its ConsumeQueues
and index are built from committed messages alone, and a follower's store serves reads as a slave.

Before applying entry i the member writes (i, the CommitLog's end) to the `applied` file. After a
crash, if a record of entry i's message begins at that offset, i was applied; otherwise it was not
and is applied again. The put is synchronous, so nothing but entry i's message can land there.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path

from ferrymq.ha.dledger.command import PutCommand
from ferrymq.protocol.errors import MessageDecodeError
from ferrymq.protocol.message_ext import decode_record
from ferrymq.store import MessageStore, PutResult

MARK = struct.Struct(">qq")


class AppliedMark:
    """The (index, CommitLog offset) of the last entry this member began to apply."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        raw = os.pread(self._fd, MARK.size, 0)
        self.index, self.offset = MARK.unpack(raw) if len(raw) == MARK.size else (-1, -1)

    def save(self, index: int, offset: int) -> None:
        os.pwrite(self._fd, MARK.pack(index, offset), 0)
        self.index, self.offset = index, offset

    def close(self) -> None:
        os.close(self._fd)


def put(store: MessageStore, c: PutCommand) -> PutResult:
    """`c` stored as the store's own put of one message or of a batch."""
    if c.batch:
        return store.put_batch(
            c.topic, c.queue_id, c.body, sys_flag=c.sys_flag, born_timestamp=c.born_timestamp,
            born_host=c.born_host or None,
        )  # fmt: skip
    return store.put_message(
        c.topic, c.queue_id, c.body, bytes(c.properties), flag=c.flag, sys_flag=c.sys_flag,
        born_timestamp=c.born_timestamp, born_host=c.born_host or None, reconsume_times=c.reconsume_times,
        prepared_transaction_offset=c.prepared_transaction_offset,
    )  # fmt: skip


class StoreApplier:
    def __init__(self, store: MessageStore, written: Callable[[], None]) -> None:
        """`written`: after a put (the broker dispatches soon and wakes long polls)."""
        self.store = store
        self._written = written

    @property
    def end(self) -> int:
        return self.store.commitlog.max_offset

    def apply(self, c: PutCommand) -> PutResult:
        """Store a committed put. A follower's store refuses writes as any slave's does, so that
        nothing but committed puts reaches it; this put lifts the refusal for itself alone (it runs
        synchronously on the loop, and the broker's own writers stand still on a slave)."""
        store = self.store
        replica, store.replica = store.replica, False
        try:
            result = put(store, c)
        finally:
            store.replica = replica
        if result.ok:
            self._written()
        return result

    def holds(self, c: PutCommand, offset: int) -> bool:
        """Whether the record of `c`'s (first) message begins at `offset` (or, if a segment's blank
        tail is there, at the next segment's start)."""
        size = self.store.config.mapped_file_size_commit_log
        for at in (offset, (offset // size + 1) * size):
            record = self.store.look_message_by_offset(at)
            if record is None:
                continue
            try:
                msg = decode_record(record)
            except MessageDecodeError:
                return False
            return (msg.topic, msg.queue_id, msg.born_timestamp) == (c.topic, c.queue_id, c.born_timestamp)
        return False
