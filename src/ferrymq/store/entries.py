"""Walks over a CommitLog that holds DLedger entries (DLedger's single log, ha/dledger/).

Each entry is a 48-byte header (magic i32, size i32, ..., the entry's own position i64 at byte 24;
ha/dledger/entry.py has the whole layout), then a body that is a run of CommitLog records (one
message, or a batch's records) whose physical offsets start at `pos + 48`. A NOOP's body is empty,
and a DLedger blank (magic -1, the rest of the segment's size) closes a segment. The walks hand
each body to the record scans the store already has (C when built), so ConsumeQueue and index
entries are the classic ones: `entry_scan` for the dispatcher (`Dispatcher(..., scan=...)`, the
same signature and answers as `dispatch.scan_segment`), `index_entry_scan` for the indexer.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

from ferrymq.protocol.hashes import tag_hash
from ferrymq.store.dispatch import (
    SCAN_BLANK,
    SCAN_INVALID,
    SCAN_MALFORMED,
    SCAN_STOPPED,
    Prepared,
    scan_segment,
)
from ferrymq.store.files import durable_copies

HEADER_SIZE = 48
MAGIC_NORMAL, MAGIC_NOOP, MAGIC_CONFIG, MAGIC_BLANK = 1, 2, 3, -1
_HEAD = struct.Struct(">ii")  # magic, size
_POS = struct.Struct(">q")
_POS_AT = 24
DLEDGER_DIR = "dledger"  # under the store's root: the Raft log's own files
DIVIDED = struct.Struct(">q")  # its `divided` file: where the entries begin in the CommitLog


def divided_of(dledger_root: Path) -> int | None:
    """Where the single log under `dledger_root` begins in the CommitLog; None if there is none (a
    classic CommitLog, the two files of earlier DLedger members, or a log not opened yet)."""
    for _, raw in durable_copies(dledger_root / "divided"):
        if len(raw) == DIVIDED.size:
            return int(DIVIDED.unpack(raw)[0])
    return None


def walk(buf, pos: int, end: int, stop: int, base: int) -> tuple[list[tuple[int, int]], int, int]:
    """The bodies (start, end) of the normal entries of a segment mapped at CommitLog offset `base`,
    whole entries from `pos` while pos < end and pos < stop; where the walk stopped and why:
    SCAN_STOPPED, SCAN_BLANK, SCAN_MALFORMED (bytes that are no whole entry: not written yet, or
    torn) or SCAN_INVALID (an entry that does not stand at its own position)."""
    bodies: list[tuple[int, int]] = []
    while pos < end and pos < stop:
        if end - pos < 8:
            return bodies, pos, SCAN_MALFORMED
        magic, size = _HEAD.unpack_from(buf, pos)
        if magic == MAGIC_BLANK:
            return bodies, pos, SCAN_BLANK
        if not MAGIC_NORMAL <= magic <= MAGIC_CONFIG or size < HEADER_SIZE or pos + size > end:
            return bodies, pos, SCAN_MALFORMED
        if _POS.unpack_from(buf, pos + _POS_AT)[0] != base + pos:
            return bodies, pos, SCAN_INVALID
        if magic == MAGIC_NORMAL and size > HEADER_SIZE:
            bodies.append((pos + HEADER_SIZE, pos + size))
        pos += size
    return bodies, pos, SCAN_STOPPED


def prepared_of(body, pos: int) -> Prepared | str | None:
    """The ConsumeQueue entries of a normal entry's `body`, its header at CommitLog `pos`, as a put
    prepares them: the dispatch files them without walking the records again. Why not, if the body
    is not a run of whole CommitLog records each standing at its own offset from `pos + 48` on (as
    `entry_scan` looks for them); None for records of more than one queue (the dispatch walks those)."""
    at, n = pos + HEADER_SIZE, len(body)
    end, status, _, store_timestamp, runs = scan_segment(body, 0, n, n, at, False, tag_hash)
    if status != SCAN_STOPPED or end != n:
        what = "a record not at its own offset" if status == SCAN_INVALID else "no whole record"
        return f"{what} at {at + end}"
    if len(runs) > 1:
        return None
    topic, queue_id, queue_offset, entries = runs[0] if runs else ("", 0, 0, b"")
    return Prepared(pos, at + n, topic, queue_id, queue_offset, entries, store_timestamp)


def entry_scan(
    buf, pos: int, end: int, stop: int, base: int, verify_crc: bool, tag_hash_of: Callable[[bytes], int]
) -> tuple[int, int, int, int, list[tuple[str, int, int, bytes]]]:
    """`scan_segment` over entries: (where it stopped, why, records walked, the last store
    timestamp, ConsumeQueue runs). A body that is no whole run of records is SCAN_MALFORMED, or
    SCAN_INVALID for a record that is not where it says."""
    bodies, after, status = walk(buf, pos, end, stop, base)
    runs: list[tuple[str, int, int, bytes]] = []
    count = last_store_timestamp = 0
    for start, stop_at in bodies:
        at, why, n, ts, got = scan_segment(buf, start, stop_at, stop_at, base, verify_crc, tag_hash_of)
        if why != SCAN_STOPPED or at != stop_at:
            why = SCAN_INVALID if why == SCAN_INVALID else SCAN_MALFORMED
            return start - HEADER_SIZE, why, count, last_store_timestamp, runs
        _merge(runs, got)
        count += n
        last_store_timestamp = ts
    return after, status, count, last_store_timestamp, runs


def index_entry_scan(
    buf, pos: int, end: int, base: int, index_scan: Callable
) -> tuple[int, int, list[tuple[int, int, int]]]:
    """The indexer's `index_scan` over entries: (where it stopped, why, (key hash, CommitLog
    offset, store timestamp) items)."""
    bodies, after, status = walk(buf, pos, end, end, base)
    items: list[tuple[int, int, int]] = []
    for start, stop_at in bodies:
        at, why, got = index_scan(buf, start, stop_at, base)
        if why != SCAN_STOPPED or at != stop_at:
            return start - HEADER_SIZE, SCAN_MALFORMED, items
        items += got
    return after, SCAN_MALFORMED if status == SCAN_INVALID else status, items


def _merge(runs: list[tuple[str, int, int, bytes]], more: list[tuple[str, int, int, bytes]]) -> None:
    """Append `more`, joining a run that carries on the last one's queue (one ConsumeQueue write)."""
    for run in more:
        if runs:
            topic, queue_id, first, entries = runs[-1]
            if (topic, queue_id) == run[:2] and first + len(entries) // 20 == run[2]:
                runs[-1] = (topic, queue_id, first, entries + run[3])
                continue
        runs.append(run)
