"""The dispatcher ("reput"): turns CommitLog records into ConsumeQueue entries.

Live writes, crash recovery and (later) replicas all go through this one path: whatever is in the
CommitLog is the truth, and every other structure is rebuilt from it. (The index is built the same
way, by the indexer process: see indexer.py.)

The store's own puts know every entry's fields while writing, so they hand the finished entries
over (`prepared`) and the dispatcher copies them instead of parsing those records back; it
parses only what it finds without them (recovery, a future replica).
"""

from __future__ import annotations

import logging
import struct
import threading
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

from ferrymq._native import load
from ferrymq.protocol.hashes import tag_hash
from ferrymq.protocol.properties import find_property
from ferrymq.protocol.record import BLANK, body_crc, read_record_meta
from ferrymq.protocol.sys_flag import (
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from ferrymq.store.commitlog import CommitLog
from ferrymq.store.consumequeue import ENTRY, ENTRY_SIZE, ConsumeQueue, ConsumeQueueTable
from ferrymq.store.errors import DiskFullError, StoreError

log = logging.getLogger(__name__)
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
    def __init__(
        self, commitlog: CommitLog, queues: ConsumeQueueTable, offset: int, scan: Callable | None = None
    ) -> None:
        """`scan`: how a segment's bytes are walked, `scan_segment`'s signature and answers (by
        default records back to back; DLedger's single log passes its walk over entries)."""
        self.scan = scan or scan_segment
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
        self.limit: int | None = None
        """Where dispatching stops, if not at the end of the log: a replica in controller mode
        makes visible only what its master confirmed the whole SyncStateSet holds."""
        self.stalled: str | None = None
        """Why dispatching waits at `offset` (the disk has no room for a ConsumeQueue file), or None.
        Nothing is lost meanwhile: the records wait in the CommitLog, and the next call tries again."""

    def dispatch(self) -> int:
        """Dispatch everything written so far (up to `limit`); return how many records were dispatched.

        A full disk stops it at the first record it cannot file (see `stalled`); a corrupt record
        raises StoreError."""
        with self.lock:
            limit = self.commitlog.max_offset
            if self.limit is not None and self.limit < limit:
                limit = self.limit
            try:
                end, count, valid = self._scan(limit, limit, verify_crc=False, partial_tail=True)
            except DiskFullError as e:
                if self.stalled is None:
                    log.error("dispatch waits at CommitLog offset %d for disk space: %s", self.offset, e)
                self.stalled = str(e)
                return 0
            if self.stalled is not None:
                log.warning("dispatch goes on from CommitLog offset %d: the disk has room again", self.offset)
                self.stalled = None
            if not valid:
                raise StoreError(f"CommitLog record at offset {end} is corrupt; the store needs recovery")
            return count

    def skip_to(self, offset: int) -> None:
        """The CommitLog below `offset` (a segment's start) was deleted before it was all dispatched
        (retention's last resort on a full disk): go on from there. The caller holds `lock`."""
        if offset > self.offset:
            log.error(
                "CommitLog [%d, %d) deleted before it was dispatched: its messages never reach a queue",
                self.offset, offset,
            )  # fmt: skip
            self.offset = offset

    def cut(self, offset: int) -> None:
        """The CommitLog was cut at `offset` (a record boundary; the caller holds `lock`): dispatch
        goes on from there, and the queue entries prepared by puts of records past it go, since the
        bytes written there next are other records (a demoted master's tail, then its new master's)."""
        self.offset = min(self.offset, offset)
        prepared = self.prepared
        while prepared and prepared[-1].start >= offset:
            prepared.pop()

    def recover(
        self, verify_crc: bool, progress: Callable[[int], None] | None = None, until: int | None = None
    ) -> int:
        """Dispatch from the current offset to the last valid record of the CommitLog (or `until`);
        return its end.

        Stops at the first record that is torn, misplaced or (with verify_crc) has a wrong body CRC.
        `progress(offset)` hears every _PROGRESS_STEP bytes how far the log is known valid.
        """
        segments = self.commitlog.segments
        limit = segments[-1].end if segments else self.offset
        if until is not None:
            limit = min(limit, until)
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
        # (topic, queue id) -> ConsumeQueue for this pass; the table may change between passes
        queue_cache: dict[tuple[str, int], ConsumeQueue] = {}
        last_store_timestamp = 0
        valid = True
        while offset < limit and offset < pause_at:
            while prepared and prepared[0].start < offset:
                prepared.popleft()  # already dispatched by parsing (cannot happen, but never misapply)
            if prepared and prepared[0].start == offset:
                filed, offset, last_store_timestamp = self._file_prepared(limit, pause_at, queue_cache)
                count += filed
                self.offset = offset
                continue
            seg = self.commitlog.segment_for(offset)
            if seg is None:
                break
            base = seg.base
            end = min(limit, seg.end) - base
            stop = min(pause_at, prepared[0].start if prepared else limit) - base
            pos, status, n, store_timestamp, runs = self.scan(
                seg.mm, offset - base, end, stop, base, verify_crc, tag_hash
            )
            for topic, queue_id, queue_offset, entries in runs:
                key = (topic, queue_id)
                cq = queue_cache.get(key)
                if cq is None:
                    cq = queue_cache[key] = queues.get_or_create(topic, queue_id)
                cq.put(queue_offset, entries)
            if n:
                count += n
                last_store_timestamp = store_timestamp
            if status == SCAN_BLANK:
                pos = seg.size
            elif status == SCAN_MALFORMED and partial_tail and _incomplete(seg.mm, pos, end, base, limit):
                limit = base + pos  # the rest is still on its way
            elif status != SCAN_STOPPED:
                valid = False
            offset = self.offset = base + pos
            if not valid:
                break
        if count:
            self.last_store_timestamp = last_store_timestamp
            if self.listener is not None and queue_cache:
                self.listener(list(queue_cache))
        return offset, count, valid

    def _file_prepared(
        self, limit: int, pause_at: int, queue_cache: dict[tuple[str, int], ConsumeQueue]
    ) -> tuple[int, int, int]:
        """File the entries of the prepared puts that follow on from self.offset without a gap (up to
        `limit`, or the first past `pause_at`), one write per queue's consecutive entries rather
        than one per put: (records filed, where they end, the last one's store timestamp). A write
        that fails puts them all back in `prepared`, to be filed again by the next pass (rewriting
        an entry in place is harmless). Puts append to `prepared` meanwhile, from another thread
        with background dispatch: it is only taken from at its left end."""
        prepared = self.prepared
        taken: list[Prepared] = []
        runs: list[tuple[tuple[str, int], int, bytearray]] = []
        open_runs: dict[tuple[str, int], tuple[int, bytearray]] = {}  # key -> (next queue offset, run)
        offset = self.offset
        count = 0
        while prepared and prepared[0].start == offset and offset < limit and offset < pause_at:
            p = prepared.popleft()
            taken.append(p)
            entries = p.entries
            if entries:
                key = (p.topic, p.queue_id)
                current = open_runs.get(key)
                if current is not None and current[0] == p.queue_offset:
                    run = current[1]
                    run += entries
                else:
                    run = bytearray(entries)
                    runs.append((key, p.queue_offset, run))
                open_runs[key] = (p.queue_offset + len(entries) // ENTRY_SIZE, run)
            count += len(entries) // ENTRY_SIZE or 1
            offset = p.end
        try:
            queues = self.queues
            for key, queue_offset, run in runs:
                cq = queue_cache.get(key)
                if cq is None:
                    cq = queue_cache[key] = queues.get_or_create(*key)
                cq.put(queue_offset, run)
        except BaseException:
            prepared.extendleft(reversed(taken))
            raise
        return count, offset, taken[-1].store_timestamp


SCAN_STOPPED, SCAN_BLANK, SCAN_MALFORMED, SCAN_INVALID = 0, 1, 2, 3


def dispatch_scan(
    buf, pos: int, end: int, stop: int, base: int, verify_crc: bool, tag_hash_of: Callable[[bytes], int]
) -> tuple[int, int, int, int, list[tuple[str, int, int, bytes]]]:
    """Walk the records of a segment mapped at CommitLog offset `base` from `pos` while pos < end and
    pos < stop; return (where it stopped, why, records walked, the last one's store timestamp, runs).

    A run is (topic, queue id, first queue offset, ConsumeQueue entries) for consecutive entries of
    one queue; half and rolled-back transaction records take none. Why: SCAN_STOPPED at end/stop,
    SCAN_BLANK at the end-of-segment filler, SCAN_MALFORMED at bytes that are no whole record,
    SCAN_INVALID at a record with a wrong physical offset or (verify_crc) body CRC. The reference
    for the C version in ferrymq/_native/scan.c, which the dispatcher uses when it is built.
    """
    runs: list[tuple[str, int, int, bytes]] = []
    count = last_store_timestamp = 0
    status = SCAN_STOPPED
    # an empty run is never flushed, so its starting key is a placeholder that needs no None
    run_key, run_start, run = ("", 0), 0, bytearray()
    while pos < end and pos < stop:
        meta = read_record_meta(buf, pos, end)
        if meta is BLANK:
            status = SCAN_BLANK
            break
        if meta is None:
            status = SCAN_MALFORMED
            break
        if meta.physical_offset != base + pos or (
            verify_crc
            and body_crc(memoryview(buf)[meta.body_start : meta.body_start + meta.body_len]) != meta.body_crc
        ):
            status = SCAN_INVALID
            break
        tran = meta.sys_flag & TRANSACTION_TYPE_MASK
        if tran != TRANSACTION_PREPARED_TYPE and tran != TRANSACTION_ROLLBACK_TYPE:
            tag = find_property(buf[meta.props_start : meta.props_end], _TAGS)
            key = (meta.topic, meta.queue_id)
            if key != run_key or meta.queue_offset != run_start + len(run) // ENTRY_SIZE:
                if run:
                    runs.append((*run_key, run_start, bytes(run)))
                run_key, run_start, run = key, meta.queue_offset, bytearray()
            run += ENTRY.pack(base + pos, meta.size, tag_hash_of(tag) if tag else 0)
        last_store_timestamp = meta.store_timestamp
        pos += meta.size
        count += 1
    if run:
        runs.append((*run_key, run_start, bytes(run)))
    return pos, status, count, last_store_timestamp, runs


_scan_c = load("scan")
scan_segment = _scan_c.dispatch_scan if _scan_c is not None else dispatch_scan


def _incomplete(buf, pos: int, end: int, base: int, limit: int) -> bool:
    """The bytes from `pos` to `end`, the last written ones, start a record longer than what is there."""
    return base + end == limit and (end - pos < 8 or _SIZE.unpack_from(buf, pos)[0] > end - pos)


_SIZE = struct.Struct(">i")
_PROGRESS_STEP = 16 << 20  # recovery tells the indexer how far the log is valid every 16 MiB
