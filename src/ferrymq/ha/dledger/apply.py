"""Committed put commands applied to a member's MessageStore, and the mark of how far that went.

Every member (the leader too) stores a put only once its entry is committed, so its ConsumeQueues
and index are built from committed messages alone, and a follower's store serves reads as a slave.

The `applied_to` file holds (i, offset): every entry up to i is in the store, and the next entry's
records start at `offset`. It is fsynced only once the CommitLog is flushed past `offset`, so on
disk it never runs ahead of the CommitLog, even after a power loss; a restart walks forward from it
over the records the CommitLog kept (`records_end`), entry by entry, and applies from the first
entry whose records are not there. Puts are synchronous and in log order, so nothing but the next
entry's message can stand at `offset`.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path

from ferrymq.ha.dledger.command import PutCommand
from ferrymq.protocol.batch import scan_batch
from ferrymq.protocol.errors import MessageDecodeError
from ferrymq.protocol.message_ext import decode_record
from ferrymq.store import MessageStore, PutResult

MARK = struct.Struct(">qq")


class AppliedMark:
    """(index, offset): entries up to `index` are in the store, the next one's records go at `offset`."""

    def __init__(self, root: Path, end: int) -> None:
        """`end`: the CommitLog's end, where a member that never applied anything stores its first."""
        path = root / "applied_to"
        fresh = not path.exists()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        raw = os.pread(self._fd, MARK.size, 0)
        if len(raw) == MARK.size:
            self.index, self.offset = MARK.unpack(raw)
        else:
            self.index, self.offset = _earlier_mark(root / "applied") or (-1, end)
        if fresh or len(raw) != MARK.size:
            self.save(self.index, self.offset)

    def save(self, index: int, offset: int) -> None:
        """Durably: call it only once the CommitLog is flushed up to `offset`."""
        os.pwrite(self._fd, MARK.pack(index, offset), 0)
        os.fsync(self._fd)
        self.index, self.offset = index, offset

    def close(self) -> None:
        os.close(self._fd)


def _earlier_mark(path: Path) -> tuple[int, int] | None:
    """Earlier versions wrote (i, where entry i's records begin) to `applied` before applying i: the
    same as (i - 1, that offset) here."""
    raw = path.read_bytes() if path.exists() else b""
    if len(raw) != MARK.size:
        return None
    index, offset = MARK.unpack(raw)
    return (index - 1, offset) if index >= 0 else None


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
        self.written = written

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
            self.written()
        return result

    @property
    def flushed(self) -> int:
        """The CommitLog's durable end."""
        return self.store.commitlog.flushed_offset

    def has_record_at(self, offset: int) -> bool:
        """Whether a record starts at `offset` (or at the next segment's start, past a blank tail)."""
        size = self.store.config.mapped_file_size_commit_log
        look = self.store.look_message_by_offset
        return look(offset) is not None or look((offset // size + 1) * size) is not None

    def records_end(self, c: PutCommand, offset: int) -> int | None:
        """Where the records of `c` end if the store holds them from `offset` (or from the next
        segment's start, past a blank tail); None if it does not. A batch found only in part (torn by
        a power loss) is cut off the store, to be applied again."""
        store = self.store
        size = store.config.mapped_file_size_commit_log
        for at in (offset, (offset // size + 1) * size):
            record = store.look_message_by_offset(at)
            if record is None:
                continue
            try:
                msg = decode_record(record)
            except MessageDecodeError:
                return None
            if (msg.topic, msg.queue_id) != (c.topic, c.queue_id) or (
                c.born_timestamp and msg.born_timestamp != c.born_timestamp
            ):
                return None
            if not c.batch:
                return at + len(record) if bytes(msg.body) == bytes(c.body) else None
            end = at
            for _ in range(scan_batch(c.body)[0]):
                record = store.look_message_by_offset(end)
                if record is None:
                    store.truncate(at)
                    return None
                end += len(record)
            return end
        return None
