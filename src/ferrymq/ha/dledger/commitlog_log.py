"""A Raft log whose entries live in the CommitLog's own segments: DLedger's single log.

Each entry is DLedger's layout (a 48-byte header, then the body) written into a fixed-size
CommitLog segment at the log's end, so when a body is a run of CommitLog records their physical
offsets are `pos + 48` onwards and ConsumeQueue and index entries point at them as in a classic
CommitLog. An entry never spans two segments: one that does not fit (with room left for a blank)
leaves the segment's tail to a DLedger blank (magic -1, size) and goes at the next segment's start.
Placement depends only on the entries before, so every member puts an entry at the same `pos`.

The 32-byte index units go to their own files, one per CommitLog segment, named after the
segment's offset (`<offset>.index`): unit k is the segment's k-th entry. `start` holds the index
and term of the entry before the first one kept (retention), `divided` the CommitLog offset where
the log begins: a CommitLog that already held classic records when the log was first opened keeps
them as a prefix below the next segment boundary (RocketMQ's `dividedCommitlogOffset`).

Opening recovers from a crash: each segment's index is trusted up to its last unit that agrees
with a whole entry; entries written after it are scanned (position, index sequence, term order,
body and chain CRC) and indexed again; the log ends at the first bytes that are no such entry,
and the CommitLog is cut there (later segments and index files go too).
"""

from __future__ import annotations

import bisect
import os
import struct
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from isal.isal_zlib import crc32

from ferrymq.ha.dledger import entry as codec
from ferrymq.ha.dledger.log import Entry
from ferrymq.protocol.record import BLANK_MIN_SIZE, write_blank
from ferrymq.store.commitlog import CommitLog
from ferrymq.store.entries import DIVIDED, divided_of
from ferrymq.store.files import MappedFile, atomic_write, durable_copies, offset_name

UNIT = codec.INDEX_UNIT.size
RECENT_ENTRIES = 16384  # kept in memory for the leader's appends to followers
START = struct.Struct(">qq")  # index and term of the last entry trimmed
_BLANK = struct.Struct(">ii")


class _Units:
    """The index file of one CommitLog segment: entries `first` .. `first + count - 1`."""

    def __init__(self, root: Path, base: int, first: int) -> None:
        self.path = root / f"{offset_name(base)}.index"
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.base, self.first, self.count = base, first, 0
        self.dirty = True

    def unit(self, index: int) -> tuple[int, int, int, int, int]:
        return codec.decode_index(os.pread(self.fd, UNIT, (index - self.first) * UNIT))

    def cut(self, count: int) -> None:
        os.ftruncate(self.fd, count * UNIT)
        self.count, self.dirty = count, True

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


class CommitLogRaftLog:
    """A `RaftLog` (log.py) in `commitlog`'s segments, its index units and marks under `root`."""

    def __init__(self, root: Path, commitlog: CommitLog) -> None:
        """`commitlog`: recovered by its owner up to its classic records (an empty one ends at 0)."""
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.commitlog = commitlog
        self._units: list[_Units] = []
        self._firsts: list[int] = []  # each index file's first entry, for bisect
        self._start = (-1, 0)  # index and term of the entry before the first one kept
        self._last_term = 0
        self._last_chain = 0
        self._recent: list[Entry] = []  # the last entries appended, served without reading back
        self._tail = 0  # the end of the last entry (the CommitLog's end, but for `place`d bodies)
        self._placed: deque[tuple[int, int]] = deque()  # (position, end before) of `place`s not appended
        self._closing = threading.Lock()  # an index file is not closed while another thread syncs it
        self.divided = self._divide()
        self._recover()

    # -- RaftLog ----------------------------------------------------------------------------------

    @property
    def first_index(self) -> int:
        return self._start[0] + 1

    @property
    def last_index(self) -> int:
        if not self._units:
            return self._start[0]
        tail = self._units[-1]
        return tail.first + tail.count - 1

    def term_at(self, index: int) -> int:
        if index == self.last_index:
            return self._last_term
        if index == self._start[0]:
            return self._start[1]
        if index < self._start[0]:
            raise IndexError(f"entry {index} was trimmed (the log starts at {self.first_index})")
        k = index - (self.last_index + 1 - len(self._recent))
        if 0 <= k < len(self._recent):
            return self._recent[k].term
        return self._units_of(index).unit(index)[4]

    def read(self, start: int, max_count: int, max_bytes: int) -> Sequence[Entry]:
        """Entries from `start` (within one segment), copied out of the mapping at once; their
        bodies are views of that copy, so a later cut of the log leaves them as they were."""
        count = self.last_index + 1
        if not self.first_index <= start < count:
            return []
        first_recent = count - len(self._recent)
        if start >= first_recent:
            return _take(
                self._recent[start - first_recent : start - first_recent + max(1, max_count)], max_bytes
            )
        units = self._units_of(start)
        stop = min(units.first + units.count, start + max(1, max_count))
        raw = os.pread(units.fd, (stop - start) * UNIT, (start - units.first) * UNIT)
        first_pos = codec.decode_index(raw)[1]
        span = 0
        for k in range(stop - start):  # max_bytes counts bodies, as MemoryLog does
            _, pos, size, _, _ = codec.decode_index(raw, k * UNIT)
            if k and pos + size - first_pos - (k + 1) * codec.BODY_OFFSET > max_bytes:
                break
            span = pos + size - first_pos
        seg = self._segment(units.base)
        at = first_pos - seg.base
        return codec.decode_run(bytes(seg.view[at : at + span]), verify=False)[0]

    def append(self, entries: Sequence[Entry]) -> None:
        """Each entry written at the log's end: its header, then its body, into the mapped segment
        (only the header for a body written in place, see `place`)."""
        if not entries:
            return
        if entries[0].index != self.last_index + 1:
            raise ValueError(f"append at {entries[0].index}, log ends at {self.last_index}")
        cl = self.commitlog
        pack, unit = codec.HEADER.pack_into, codec.INDEX_UNIT.pack
        chain = self._last_chain
        units = self._units[-1] if self._units else None
        run: list[bytes] = []
        for e in entries:
            if e.magic not in codec.ENTRY_MAGICS:
                raise codec.EntryError(f"unknown entry magic {e.magic}")
            if e.term < 0:
                raise codec.EntryError(f"negative term {e.term}")
            n = len(e.body)
            size = codec.BODY_OFFSET + n
            placed = self._placed.popleft()[0] if self._placed else None
            pos = self._place(size) if placed is None else placed
            if units is None or units.base != pos - pos % cl.segment_size:
                self._write_units(units, run)
                run = []
                units = self._add_units(pos - pos % cl.segment_size, e.index)
            crc = crc32(e.body)
            chain = crc32(crc.to_bytes(4, "big"), chain)
            if placed is None:
                window = cl.raw_window(pos, size)
                window[codec.BODY_OFFSET : size] = e.body
                cl.commit_raw(pos + size)
            else:
                window = self._segment(pos - pos % cl.segment_size).view[pos % cl.segment_size :]
            pack(window, 0, e.magic, size, e.index, e.term, pos, 0, chain, crc, n)
            self._tail = pos + size
            run.append(unit(e.magic, pos, size, e.index, e.term))
        self._write_units(units, run)
        self._last_chain, self._last_term = chain, entries[-1].term
        self._recent += entries
        if len(self._recent) > 2 * RECENT_ENTRIES:
            del self._recent[:-RECENT_ENTRIES]

    def truncate(self, from_index: int) -> None:
        if from_index > self.last_index:
            return
        if from_index < self.first_index:
            raise ValueError(f"cannot truncate from {from_index}: the log starts at {self.first_index}")
        del self._recent[max(0, len(self._recent) - (self.last_index + 1 - from_index)) :]
        if from_index > self.first_index:  # back to the end of the entry before, blank included
            cut = self.end_of(from_index - 1)
        else:
            cut = self._units_of(from_index).base
        self.commitlog.truncate(cut)
        self._tail = cut
        self._placed.clear()
        while self._units and self._units[-1].first >= from_index:
            self._remove(self._units.pop())
            self._firsts.pop()
        if self._units and from_index < self._units[-1].first + self._units[-1].count:
            self._units[-1].cut(from_index - self._units[-1].first)
        self._reload_tail()

    # -- retention and durability ---------------------------------------------------------------

    def trim(self, before: int, written_before: float | None = None) -> int:
        """Delete the CommitLog segments holding only entries below `before` (never the last one),
        and with `written_before`, only those last written before that time; return the first
        index kept. The caller makes sure no one needs them (dispatched and applied)."""
        doomed = 0
        units = self._units
        while (
            doomed + 1 < len(units)
            and units[doomed + 1].first <= before
            and (written_before is None or os.fstat(units[doomed].fd).st_mtime < written_before)
        ):
            doomed += 1
        if doomed:
            last = units[doomed].first - 1
            self._save_start(last, self.term_at(last))
            for u in units[:doomed]:
                seg = self._segment(u.base)
                self.commitlog.delete_segment(seg)
                self._remove(u)
            del self._units[:doomed], self._firsts[:doomed]
        return self.first_index

    def sync(self) -> None:
        """Make every entry written so far durable: the CommitLog's segments, then the index files.
        Safe on another thread while the driver appends (a flag cleared before its fsync)."""
        self.commitlog.flush()
        for u in list(self._units):
            with self._closing:
                if u.dirty and u.fd >= 0:
                    u.dirty = False
                    os.fsync(u.fd)

    def close(self) -> None:
        for u in self._units:
            with self._closing:
                u.close()

    # -- inside -----------------------------------------------------------------------------------

    def next_pos(self, size: int) -> int:
        """Where an entry of `size` bytes goes next: the log's end, or the next segment's start when
        the current one lacks room for it and a blank after it. A leader building CommitLog records
        for the entry learns their physical offsets from it (`next_pos + 48` on)."""
        cl = self.commitlog
        if size + codec.MIN_BLANK > cl.segment_size:
            raise codec.EntryError(f"a {size}-byte entry does not fit in a CommitLog segment")
        end = cl.max_offset
        seg = cl.segment_for(end)
        return seg.end if seg is not None and size + codec.MIN_BLANK > seg.end - end else end

    def place(self, size: int) -> int:
        """For a leader that writes an entry's body into the CommitLog itself before proposing it:
        the position of an entry of `size` bytes, taken now (a blank before it if it starts the next
        segment) with the CommitLog's end moved past its header, so the body goes next at `pos +
        48`. The next `append` writes only the header of the entry placed first. `unplace` gives
        back what was placed and not appended."""
        cl = self.commitlog
        before = cl.max_offset
        pos = self._place(size)
        cl.raw_window(pos, codec.BODY_OFFSET)  # the segment, if the entry starts a new one
        cl.commit_raw(pos + codec.BODY_OFFSET)
        self._placed.append((pos, before))
        return pos

    def unplace_last(self) -> int:
        """Give back the last place taken (its body was not written, or was cut by the caller):
        the CommitLog goes back to where it ended before, blank included; that offset."""
        before = self._placed.pop()[1]
        if self.commitlog.max_offset != before:
            self.commitlog.truncate(before)
        return before

    def unplace(self) -> None:
        """Cut the CommitLog back to the log's end: bodies placed but never appended go."""
        if self.commitlog.max_offset != self._tail:
            self.commitlog.truncate(self._tail)
        self._placed.clear()

    @property
    def end(self) -> int:
        """Where the last entry ends (placed bodies may follow it)."""
        return self._tail

    def end_of(self, index: int) -> int:
        """The CommitLog offset where entry `index` ends: dispatching up to it covers the entries up
        to it (the dispatcher's `limit` at the commit index)."""
        _, pos, size, _, _ = self._units_of(index).unit(index)
        return pos + size

    def _place(self, size: int) -> int:
        """`next_pos`, the current segment's tail turned into a blank if the entry goes past it."""
        cl = self.commitlog
        pos, end = self.next_pos(size), cl.max_offset
        if pos != end:
            seg = cl.segment_for(end)
            assert seg is not None and pos == seg.end
            _BLANK.pack_into(seg.mm, end - seg.base, codec.MAGIC_BLANK, pos - end)
            cl.commit_raw(pos)
        return pos

    def _segment(self, base: int) -> MappedFile:
        seg = self.commitlog.segment_for(base)
        if seg is None or seg.base != base:
            raise IndexError(f"CommitLog segment {base} is gone")
        return seg

    def _units_of(self, index: int) -> _Units:
        if not self.first_index <= index <= self.last_index:
            raise IndexError(f"no entry {index} (the log holds {self.first_index} .. {self.last_index})")
        return self._units[bisect.bisect_right(self._firsts, index) - 1]

    def _add_units(self, base: int, first: int) -> _Units:
        units = _Units(self.root, base, first)
        units.cut(0)  # a file left from an earlier run of this segment holds nothing now
        self._units.append(units)
        self._firsts.append(first)
        return units

    def _write_units(self, units: _Units | None, run: list[bytes]) -> None:
        if units is None or not run:
            return
        os.pwrite(units.fd, b"".join(run), units.count * UNIT)
        units.count += len(run)
        units.dirty = True

    def _remove(self, units: _Units) -> None:
        with self._closing:
            units.remove()

    def _save_start(self, index: int, term: int) -> None:
        """Durably, before any segment below it is deleted."""
        atomic_write(self.root / "start", START.pack(index, term))
        self._start = (index, term)

    def _divide(self) -> int:
        """Where the log begins in the CommitLog, fixed when it is first opened: at the CommitLog's
        end if that is a segment boundary, else at the next one, the classic records' segment
        closed by a classic blank (readers of those records step to the next segment)."""
        divided = divided_of(self.root)
        if divided is not None:
            return divided
        cl = self.commitlog
        end = cl.max_offset
        seg = cl.segment_for(end)
        if seg is not None and end > seg.base:
            if seg.end - end >= BLANK_MIN_SIZE:
                write_blank(seg.mm, end - seg.base, seg.end - end)
            seg.sync()
            end = seg.end
        atomic_write(self.root / "divided", DIVIDED.pack(end))
        return end

    def _reload_tail(self) -> None:
        """Last term and chain CRC from the last entry's header (after a cut or a recovery)."""
        self._last_term, self._last_chain = self._start[1], 0
        for u in reversed(self._units):
            if u.count:
                pos = u.unit(u.first + u.count - 1)[1]
                seg = self._segment(u.base)
                h = codec.decode_header(seg.view, pos - seg.base)
                self._last_term, self._last_chain = h.term, h.chain_crc
                return

    def _recover(self) -> None:
        raw = next((r for _, r in durable_copies(self.root / "start") if len(r) == START.size), b"")
        if raw:
            self._start = START.unpack(raw)
        cl = self.commitlog
        files = sorted(int(p.stem) for p in self.root.glob("*.index") if p.stem.isdigit())
        begin = max(self.divided, files[0] if files else self.divided)
        if cl.segments and begin < cl.min_offset:  # retention deleted data but not its index file
            begin = cl.min_offset
        for base in files:
            if base < begin:
                (self.root / f"{offset_name(base)}.index").unlink(missing_ok=True)
        end = self._recover_from(begin)
        cl.max_offset = self._tail = end
        if cl.segments:
            cl.truncate(end)
        for base in files:
            if base >= begin and not any(u.base == base for u in self._units):
                (self.root / f"{offset_name(base)}.index").unlink(missing_ok=True)
        self._reload_tail()

    def _recover_from(self, base: int) -> int:
        """Walk the segments from `base` on; return where the log's last good entry ends. A blank
        closing a segment counts only if the next segment holds an entry: the entry it made room for
        may be lost, and the one that replaces it may fit where the blank stands."""
        cl = self.commitlog
        nxt, term, chain = self.first_index, self._start[1], 0
        chained = nxt == 0  # a trimmed log's first entry has nothing to chain to
        end = base
        while True:
            seg = cl.segment_for(base)
            if seg is None or seg.base != base:
                return end
            units = _Units(self.root, base, nxt)
            count, pos = self._trusted_units(units, seg)
            if count:
                last = codec.decode_header(seg.view, pos - base)
                pos += last.size
                term, chain, chained = last.term, last.chain_crc, True
            fresh = []
            closed = False
            while True:
                at = pos - base
                if seg.size - at >= codec.MIN_BLANK and _BLANK.unpack_from(seg.mm, at) == (
                    codec.MAGIC_BLANK, seg.size - at,
                ):  # fmt: skip
                    closed = count > 0  # a blank closes a segment that holds entries
                    break
                try:
                    h, _ = codec.decode(seg.view, at)
                except codec.EntryError:
                    break
                if (
                    (h.pos, h.index) != (pos, nxt + count)
                    or h.term < term
                    or (chained and h.chain_crc != codec.chain_crc(chain, h.body_crc))
                ):
                    break
                fresh.append(codec.encode_index(h))
                count, pos, term, chain, chained = count + 1, pos + h.size, h.term, h.chain_crc, True
            if count == 0:
                units.remove()
                return end
            os.pwrite(units.fd, b"".join(fresh), (count - len(fresh)) * UNIT)
            units.cut(count)
            self._units.append(units)
            self._firsts.append(nxt)
            nxt, end = nxt + count, pos
            if not closed:
                return end
            base = seg.end

    def _trusted_units(self, units: _Units, seg: MappedFile) -> tuple[int, int]:
        """How many of the file's units to trust (up to the last that agrees with a whole entry in
        the segment) and the position of that entry (the segment's start if none)."""
        for k in range(os.fstat(units.fd).st_size // UNIT - 1, -1, -1):
            magic, pos, size, index, term = codec.decode_index(os.pread(units.fd, UNIT, k * UNIT))
            at = pos - seg.base
            if index != units.first + k or at < 0 or size < codec.BODY_OFFSET or at + size > seg.size:
                continue
            try:
                h = codec.decode_header(seg.view, at)
            except codec.EntryError:
                continue
            if (h.magic, h.pos, h.size, h.index, h.term) == (magic, pos, size, index, term):
                return k + 1, pos
        return 0, seg.base


def _take(entries: list[Entry], max_bytes: int) -> list[Entry]:
    """The leading entries whose bodies fit in `max_bytes` (at least one)."""
    size = 0
    for n, e in enumerate(entries):
        size += len(e.body)
        if n and size > max_bytes:
            return entries[:n]
    return entries
