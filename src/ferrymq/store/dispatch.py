"""The dispatcher ("reput"): turns CommitLog records into ConsumeQueue entries.

Live writes, crash recovery and (later) replicas all go through this one path: whatever is in the
CommitLog is the truth, and every other structure is rebuilt from it. (The index is built the same
way, by the indexer process: see indexer.py.)

The store's own puts know every entry's fields while writing, so they hand the finished entries
over (`prepared`) and the dispatcher copies them instead of parsing those records back; it
parses only what it finds without them (recovery, a future replica).
"""

from __future__ import annotations

import struct
import threading
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

from ferrymq.protocol.message import (
    BLANK,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    body_crc,
    find_property,
    read_record_meta,
    tag_hash,
)
from ferrymq.store.commitlog import CommitLog
from ferrymq.store.consumequeue import ENTRY, ENTRY_SIZE, ConsumeQueueTable
from ferrymq.store.errors import StoreError

_TAGS = b"TAGS\x01"


class Prepared(NamedTuple):
    """The ConsumeQueue entries of the records a put wrote at [start, end) of the CommitLog."""

    start: int
    end: int
    topic: str
    queue_id: int
    queue_offset: int
    entries: bytes | bytearray  # empty for records that take no queue offset (half transactions)
    store_timestamp: int


class Dispatcher:
    def __init__(self, commitlog: CommitLog, queues: ConsumeQueueTable, offset: int) -> None:
        self.commitlog = commitlog
        self.queues = queues
        self.offset = offset  # the next CommitLog offset to dispatch; always a record boundary
        self.last_store_timestamp = 0
        self.lock = threading.Lock()
        # Filled by puts in CommitLog order (under the store's put lock), drained here; deque's
        # append and popleft are thread-safe.
        self.prepared: deque[Prepared] = deque()
        # Called from the dispatching thread with the (topic, queue id)s that got new entries, so a
        # broker can wake its long polls; it must be quick and thread-safe.
        self.listener: Callable[[list[tuple[str, int]]], None] | None = None

    def dispatch(self) -> int:
        """Dispatch everything written so far; return how many records were dispatched."""
        with self.lock:
            limit = self.commitlog.max_offset
            end, count, valid = self._scan(limit, limit, verify_crc=False, partial_tail=True)
            if not valid:
                raise StoreError(f"CommitLog record at offset {end} is corrupt; the store needs recovery")
            return count

    def recover(self, verify_crc: bool, progress: Callable[[int], None] | None = None) -> int:
        """Dispatch from the current offset to the last valid record of the CommitLog; return its end.

        Stops at the first record that is torn, misplaced or (with verify_crc) has a wrong body CRC.
        `progress(offset)` hears every _PROGRESS_STEP bytes how far the log is known valid.
        """
        segments = self.commitlog.segments
        limit = segments[-1].end if segments else self.offset
        with self.lock:
            while self.offset < limit:
                end, _, valid = self._scan(limit, self.offset + _PROGRESS_STEP, verify_crc=verify_crc)
                if progress is not None:
                    progress(end)
                if not valid or self.commitlog.segment_for(end) is None:  # bad record, or a missing segment
                    break
            return self.offset

    def _scan(
        self, limit: int, pause_at: int, *, verify_crc: bool, partial_tail: bool = False
    ) -> tuple[int, int, bool]:
        """Dispatch records from self.offset until `limit`, or the first record boundary past
        `pause_at`; return (where it stopped, records dispatched, False if at an invalid record).

        With `partial_tail` a record cut by `limit` is not invalid but not written yet: a replica's
        write position may sit inside a record while it copies the master's bytes."""
        count = 0
        offset = self.offset
        queues = self.queues
        prepared = self.prepared
        queue_cache = {}  # (topic, queue id) -> ConsumeQueue for this pass; the table may change between
        last_store_timestamp = 0
        valid = True
        while offset < limit and offset < pause_at:
            while prepared and prepared[0].start < offset:
                prepared.popleft()  # already dispatched by parsing (cannot happen, but never misapply)
            if prepared and prepared[0].start == offset:
                p = prepared.popleft()
                if p.entries:
                    key = (p.topic, p.queue_id)
                    cq = queue_cache.get(key)
                    if cq is None:
                        cq = queue_cache[key] = queues.get_or_create(p.topic, p.queue_id)
                    cq.put(p.queue_offset, p.entries)
                last_store_timestamp = p.store_timestamp
                count += len(p.entries) // ENTRY_SIZE or 1
                offset = self.offset = p.end
                continue
            seg = self.commitlog.segment_for(offset)
            if seg is None:
                break
            mm, view = seg.mm, seg.view
            base = seg.base
            pos = offset - base
            end = min(limit, seg.end) - base
            pause = pause_at - base
            next_prepared = prepared[0].start - base if prepared else end
            run_cq, run_start, run = None, 0, bytearray()  # consecutive entries of one queue: one write
            while pos < end and pos < pause and pos < next_prepared:
                meta = read_record_meta(mm, pos, end)
                if meta is BLANK:
                    pos = seg.size
                    break
                if meta is None and partial_tail and base + end == limit and _incomplete(mm, pos, end):
                    limit = base + pos  # the rest is still on its way
                    break
                if (
                    meta is None
                    or meta.physical_offset != base + pos
                    or (
                        verify_crc
                        and body_crc(view[meta.body_start : meta.body_start + meta.body_len]) != meta.body_crc
                    )
                ):
                    valid = False
                    break
                tran = meta.sys_flag & TRANSACTION_TYPE_MASK
                if tran != TRANSACTION_PREPARED_TYPE and tran != TRANSACTION_ROLLBACK_TYPE:
                    tag = find_property(mm[meta.props_start : meta.props_end], _TAGS)
                    key = (meta.topic, meta.queue_id)
                    cq = queue_cache.get(key)
                    if cq is None:
                        cq = queue_cache[key] = queues.get_or_create(meta.topic, meta.queue_id)
                    queue_offset = meta.queue_offset
                    if cq is not run_cq or queue_offset != run_start + len(run) // ENTRY_SIZE:
                        if run:
                            run_cq.put(run_start, run)
                        run_cq, run_start, run = cq, queue_offset, bytearray()
                    run += ENTRY.pack(base + pos, meta.size, tag_hash(tag) if tag else 0)
                last_store_timestamp = meta.store_timestamp
                pos += meta.size
                count += 1
            if run:
                run_cq.put(run_start, run)
            offset = self.offset = base + pos
            if not valid:
                break
        if count:
            self.last_store_timestamp = last_store_timestamp
            if self.listener is not None and queue_cache:
                self.listener(list(queue_cache))
        return offset, count, valid


def _incomplete(buf, pos: int, end: int) -> bool:
    """The bytes from `pos` to `end` are the start of a record longer than what is there."""
    return end - pos < 8 or _SIZE.unpack_from(buf, pos)[0] > end - pos


_SIZE = struct.Struct(">i")
_PROGRESS_STEP = 16 << 20  # recovery tells the indexer how far the log is valid every 16 MiB
