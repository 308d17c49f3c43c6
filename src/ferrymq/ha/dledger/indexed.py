"""What the two file-backed Raft logs share: segments of 32-byte index units, the start kept by
retention, and the latest entries in memory.

`FileLog` keeps its entries in data files of its own, `CommitLogRaftLog` in the CommitLog's
segments; both find an entry by its index unit (magic, pos, size, index, term) in the index file of
its segment, serve the recent entries a leader sends and checks from memory, and trim whole
segments, keeping the index and term of the last entry trimmed in `start`.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from ferrymq.ha.dledger import entry as codec
from ferrymq.ha.dledger.log import Entry, EntryRefused
from ferrymq.store.files import fsync_dir

log = logging.getLogger(__name__)

UNIT = codec.INDEX_UNIT.size
RECENT_ENTRIES = 16384  # kept in memory for the leader's appends to followers
START = struct.Struct(">qq")  # index and term of the last entry trimmed


class Segment(Protocol):
    first: int
    count: int
    index: int  # the index file's descriptor

    def unit(self, index: int) -> tuple[int, int, int, int, int]: ...

    def close(self) -> None: ...

    def remove(self) -> None: ...


S = TypeVar("S", bound=Segment)


class IndexedLog(Generic[S]):
    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self._segments: list[S] = []
        self._firsts: list[int] = []  # each segment's first index, for bisect
        self._start = (-1, 0)  # index and term of the entry before the first one kept
        self._last_term = 0
        self._last_chain = 0
        self._recent: list[Entry] = []  # the last entries appended, served without reading back
        self._closing = threading.Lock()  # a segment is not closed while another thread syncs it
        self._refused = -1  # the last entry refused, logged once however often it comes again
        raw = (root / "start").read_bytes() if (root / "start").exists() else b""
        if len(raw) == START.size:
            self._start = START.unpack(raw)

    @property
    def first_index(self) -> int:
        return self._start[0] + 1

    @property
    def last_index(self) -> int:
        if not self._segments:
            return self._start[0]
        tail = self._segments[-1]
        return tail.first + tail.count - 1

    def term_at(self, index: int) -> int:
        if index == self.last_index:
            return self._last_term
        if index == self._start[0]:
            return self._start[1]
        if index < self._start[0]:
            raise IndexError(f"entry {index} was trimmed (the log starts at {self.first_index})")
        k = index - (self.last_index + 1 - len(self._recent))
        if 0 <= k < len(self._recent):  # the leader asks of recent entries for every append it sends
            return self._recent[k].term
        return self._segment_of(index).unit(index)[4]

    def read(self, start: int, max_count: int, max_bytes: int) -> Sequence[Entry]:
        """Entries from `start` (within one segment): from memory, or read with one read of the
        index and one of the data; their bodies are views of that buffer."""
        if not self.first_index <= start <= self.last_index:
            return []
        recent = self._recent_read(start, max_count, max_bytes)
        if recent is not None:
            return recent
        seg, first_pos, span = self._units_read(start, max_count, max_bytes)
        return codec.decode_run(self._data(seg, first_pos, span), verify=False)[0]

    def trim(self, before: int, written_before: float | None = None) -> int:
        """Delete the whole segments holding only entries below `before` (never the last one), and
        with `written_before`, only those last written before that time; return the first index
        kept. The caller makes sure no one needs them (applied here)."""
        doomed = 0
        segments = self._segments
        while (
            doomed + 1 < len(segments)
            and segments[doomed + 1].first <= before
            and (written_before is None or self._written_at(segments[doomed]) < written_before)
        ):
            doomed += 1
        if doomed:
            last = segments[doomed].first - 1
            self._save_start(last, self.term_at(last))
            for seg in segments[:doomed]:
                self._drop(seg)
            del self._segments[:doomed], self._firsts[:doomed]
        return self.first_index

    def close(self) -> None:
        for seg in self._segments:
            with self._closing:
                seg.close()

    # -- for the logs -----------------------------------------------------------------------------

    def _written_at(self, seg: S) -> float:
        """When a segment was last written."""
        raise NotImplementedError

    def _data(self, seg: S, pos: int, size: int) -> bytes:
        """`size` bytes of a segment's entries from log position `pos`."""
        raise NotImplementedError

    def _recent_read(self, start: int, max_count: int, max_bytes: int) -> list[Entry] | None:
        """Entries from `start` if the recent ones in memory begin at or before it, else None."""
        k = start - (self.last_index + 1 - len(self._recent))
        if k < 0:
            return None
        out = self._recent[k : k + max(1, max_count)]
        size = 0
        for n, e in enumerate(out):
            size += len(e.body)
            if n and size > max_bytes:
                return out[:n]
        return out

    def _units_read(self, start: int, max_count: int, max_bytes: int) -> tuple[S, int, int]:
        """For a read from the files: the segment of `start`, and the position and length of the
        data its entries take from `start` on, within `max_count` and `max_bytes` of bodies (one
        entry at least)."""
        seg = self._segment_of(start)
        stop = min(seg.first + seg.count, start + max(1, max_count))
        units = os.pread(seg.index, (stop - start) * UNIT, (start - seg.first) * UNIT)
        first_pos = codec.decode_index(units)[1]
        span = 0
        for k in range(stop - start):  # max_bytes counts bodies, as MemoryLog does
            _, pos, size, _, _ = codec.decode_index(units, k * UNIT)
            if k and pos + size - first_pos - (k + 1) * codec.BODY_OFFSET > max_bytes:
                break
            span = pos + size - first_pos
        return seg, first_pos, span

    def _refuse(self, index: int, why: str) -> EntryRefused:
        """Entry `index` cannot be held here (append raises what this returns), said once."""
        if index != self._refused:
            self._refused = index
            log.error("DLedger log %s: entry %d refused: %s", self.root, index, why)
        return EntryRefused(index, why)

    def _remember(self, entries: Sequence[Entry]) -> None:
        self._last_term = entries[-1].term
        self._recent += entries
        if len(self._recent) > 2 * RECENT_ENTRIES:
            del self._recent[:-RECENT_ENTRIES]

    def _cutting(self, from_index: int) -> bool:
        """Whether a truncation from `from_index` cuts anything (none may go below the start); the
        recent entries from it on go."""
        if from_index > self.last_index:
            return False
        if from_index < self.first_index:
            raise ValueError(f"cannot truncate from {from_index}: the log starts at {self.first_index}")
        del self._recent[max(0, len(self._recent) - (self.last_index + 1 - from_index)) :]
        return True

    def _segment_of(self, index: int) -> S:
        if not self.first_index <= index <= self.last_index:
            raise IndexError(f"no entry {index} (the log holds {self.first_index} .. {self.last_index})")
        return self._segments[bisect.bisect_right(self._firsts, index) - 1]

    def _add(self, seg: S) -> S:
        self._segments.append(seg)
        self._firsts.append(seg.first)
        return seg

    def _remove(self, seg: S) -> None:
        """Delete a segment's files, never while a sync is at it."""
        with self._closing:
            seg.remove()

    def _drop(self, seg: S) -> None:
        """A segment trimmed by retention."""
        self._remove(seg)

    def _save_start(self, index: int, term: int) -> None:
        """Durably, before any segment below it is deleted (the directory too: the rename must not
        be lost while the deletes survive)."""
        tmp = self.root / "start.tmp"
        with open(tmp, "wb") as f:
            f.write(START.pack(index, term))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.root / "start")
        fsync_dir(self.root)
        self._start = (index, term)
