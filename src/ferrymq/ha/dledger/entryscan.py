"""The dispatcher's walk over a CommitLog that holds DLedger entries (the single log).

Each entry is a 48-byte header, then a body that is a run of CommitLog records (one message, or a
batch's records) whose physical offsets start at `pos + 48`; a NOOP's body is empty, and a DLedger
blank closes a segment. This walks the entries and hands each body to the store's record scan
(`store.dispatch.scan_segment`, C when built), so ConsumeQueue entries are the classic ones. It has
`scan_segment`'s signature and answers, so `Dispatcher(..., scan=entry_scan)` takes it as is; the
dispatcher's `limit` (the end of the committed entries) keeps uncommitted ones out of the queues.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from ferrymq.ha.dledger import entry as codec
from ferrymq.store.dispatch import SCAN_BLANK, SCAN_INVALID, SCAN_MALFORMED, SCAN_STOPPED, scan_segment

_HEAD = struct.Struct(">ii")  # magic, size
_POS = struct.Struct(">q")


def entry_scan(
    buf, pos: int, end: int, stop: int, base: int, verify_crc: bool, tag_hash_of: Callable[[bytes], int]
) -> tuple[int, int, int, int, list[tuple[str, int, int, bytes]]]:
    """Walk whole entries of a segment mapped at CommitLog offset `base` from `pos` while pos < end
    and pos < stop; (where it stopped, why, records walked, the last store timestamp, runs) as
    `scan_segment` answers. SCAN_MALFORMED: bytes that are no whole entry (or a body that is no
    whole run of records); SCAN_INVALID: an entry at the wrong position or a record in it."""
    runs: list[tuple[str, int, int, bytes]] = []
    count = last_store_timestamp = 0
    while pos < end and pos < stop:
        if end - pos < codec.MIN_BLANK:
            return pos, SCAN_MALFORMED, count, last_store_timestamp, runs
        magic, size = _HEAD.unpack_from(buf, pos)
        if magic == codec.MAGIC_BLANK:
            return pos, SCAN_BLANK, count, last_store_timestamp, runs
        if magic not in codec.ENTRY_MAGICS or size < codec.BODY_OFFSET or pos + size > end:
            return pos, SCAN_MALFORMED, count, last_store_timestamp, runs
        if _POS.unpack_from(buf, pos + codec.POS_OFFSET)[0] != base + pos:
            return pos, SCAN_INVALID, count, last_store_timestamp, runs
        body, after = pos + codec.BODY_OFFSET, pos + size
        if magic == codec.MAGIC_NORMAL and after > body:
            at, status, n, ts, got = scan_segment(buf, body, after, after, base, verify_crc, tag_hash_of)
            if status != SCAN_STOPPED or at != after:
                why = SCAN_INVALID if status == SCAN_INVALID else SCAN_MALFORMED
                return pos, why, count, last_store_timestamp, runs
            _merge(runs, got)
            count += n
            last_store_timestamp = ts
        pos = after
    return pos, SCAN_STOPPED, count, last_store_timestamp, runs


def _merge(runs: list[tuple[str, int, int, bytes]], more: list[tuple[str, int, int, bytes]]) -> None:
    """Append `more`, joining a run that carries on the last one's queue (one ConsumeQueue write)."""
    for run in more:
        if runs:
            topic, queue_id, first, entries = runs[-1]
            if (topic, queue_id) == run[:2] and first + len(entries) // 20 == run[2]:
                runs[-1] = (topic, queue_id, first, entries + run[3])
                continue
        runs.append(run)
