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

import os
import struct
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from isal.isal_zlib import crc32

from ferrymq.ha.dledger import entry as codec
from ferrymq.ha.dledger.command import OTHER_LAYOUT, starts_as_command
from ferrymq.ha.dledger.indexed import UNIT, IndexedLog
from ferrymq.ha.dledger.log import Entry, EntryRefused
from ferrymq.protocol.record import BLANK_MIN_SIZE, write_blank
from ferrymq.store.commitlog import CommitLog
from ferrymq.store.dispatch import Dispatcher, Prepared
from ferrymq.store.entries import DIVIDED, divided_of, prepared_of
from ferrymq.store.files import MappedFile, atomic_write, offset_name

_BLANK = struct.Struct(">ii")


class _Units:
    """The index file of one CommitLog segment: entries `first` .. `first + count - 1`."""

    def __init__(self, root: Path, base: int, first: int) -> None:
        self.path = root / f"{offset_name(base)}.index"
        self.index = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.base, self.first, self.count = base, first, 0
        self.dirty = True

    def unit(self, index: int) -> tuple[int, int, int, int, int]:
        return codec.decode_index(os.pread(self.index, UNIT, (index - self.first) * UNIT))

    def cut(self, count: int) -> None:
        os.ftruncate(self.index, count * UNIT)
        self.count, self.dirty = count, True

    def close(self) -> None:
        if self.index >= 0:
            os.close(self.index)
            self.index = -1

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


class CommitLogRaftLog(IndexedLog[_Units]):
    """A `RaftLog` (log.py) in `commitlog`'s segments, its index units and marks under `root`."""

    def __init__(self, root: Path, commitlog: CommitLog, dispatcher: Dispatcher | None = None) -> None:
        """`commitlog`: recovered by its owner up to its classic records (an empty one ends at 0).
        `dispatcher`: the store's, when bodies are runs of its CommitLog records (the broker's):
        `append` refuses a body received whose records do not stand where the entry puts them
        (EntryRefused) rather than leave it to stop the dispatch, hands the dispatcher the queue
        entries of those it checked (the dispatch copies them), and `truncate` drops the queue
        entries that puts prepared past the cut (a new entry there is other records)."""
        super().__init__(root)
        self.commitlog = commitlog
        self.dispatcher = dispatcher
        self._tail = 0  # the end of the last entry (the CommitLog's end, but for `place`d bodies)
        self._placed: deque[tuple[int, int]] = deque()  # (position, end before) of `place`s not appended
        self.divided = self._divide()
        self._recover()

    # -- RaftLog ----------------------------------------------------------------------------------

    def _data(self, units: _Units, pos: int, size: int) -> bytes:
        """Copied out of the mapping at once: a later cut of the log leaves what was read as it was."""
        seg = self._segment(units.base)
        return bytes(seg.view[pos - seg.base : pos - seg.base + size])

    def append(self, entries: Sequence[Entry]) -> None:
        """Each entry written at the log's end: its header, then its body, into the mapped segment
        (only the header for a body written in place, see `place`). With a `dispatcher`, a body received
        is checked first: EntryRefused for the first whose records are not at `pos + 48` on."""
        if not entries:
            return
        if entries[0].index != self.last_index + 1:
            raise ValueError(f"append at {entries[0].index}, log ends at {self.last_index}")
        cl = self.commitlog
        pack, unit = codec.HEADER.pack_into, codec.INDEX_UNIT.pack
        chain = self._last_chain
        units = self._segments[-1] if self._segments else None
        run: list[bytes] = []
        prepared: list[Prepared] = []  # the checked bodies' queue entries, for the dispatch
        refused: EntryRefused | None = None
        for k, e in enumerate(entries):
            if e.magic not in codec.ENTRY_MAGICS:
                raise codec.EntryError(f"unknown entry magic {e.magic}")
            if e.term < 0:
                raise codec.EntryError(f"negative term {e.term}")
            n = len(e.body)
            size = codec.BODY_OFFSET + n
            placed = self._placed.popleft()[0] if self._placed else None
            if placed is None and self.dispatcher is not None and e.magic == codec.MAGIC_NORMAL and n:
                got = prepared_of(e.body, self.next_pos(size))
                if isinstance(got, str):
                    why = got
                    if starts_as_command(e.body):
                        why = f"a put command: {OTHER_LAYOUT % ('the two files', 'the single log')}"
                    refused, entries = self._refuse(e.index, why), entries[:k]
                    break
                if got is not None:
                    prepared.append(got)
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
        self._last_chain = chain
        if self.dispatcher is not None:
            self.dispatcher.prepared.extend(prepared)
        if entries:
            self._remember(entries)
        if refused is not None:
            raise refused

    def truncate(self, from_index: int) -> None:
        if not self._cutting(from_index):
            return
        if from_index > self.first_index:  # back to the end of the entry before, blank included
            cut = self.end_of(from_index - 1)
        else:
            cut = self._segment_of(from_index).base
        self.commitlog.truncate(cut)
        if self.dispatcher is not None:
            with self.dispatcher.lock:
                self.dispatcher.cut(cut)
        self._tail = cut
        self._placed.clear()
        while self._segments and self._segments[-1].first >= from_index:
            self._remove(self._segments.pop())
            self._firsts.pop()
        if self._segments and from_index < self._segments[-1].first + self._segments[-1].count:
            self._segments[-1].cut(from_index - self._segments[-1].first)
        self._reload_tail()

    # -- retention and durability ---------------------------------------------------------------

    def sync(self) -> None:
        """Make every entry written so far durable: the CommitLog's segments, then the index files.
        Safe on another thread while the driver appends (a flag cleared before its fsync)."""
        self.commitlog.flush()
        for u in list(self._segments):
            with self._closing:
                if u.dirty and u.index >= 0:
                    u.dirty = False
                    os.fsync(u.index)

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
        _, pos, size, _, _ = self._segment_of(index).unit(index)
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

    def _written_at(self, seg: _Units) -> float:
        return os.fstat(seg.index).st_mtime

    def _drop(self, seg: _Units) -> None:
        """Retention: the CommitLog segment goes with its index file."""
        self.commitlog.delete_segment(self._segment(seg.base))
        self._remove(seg)

    def _add_units(self, base: int, first: int) -> _Units:
        units = self._add(_Units(self.root, base, first))
        units.cut(0)  # a file left from an earlier run of this segment holds nothing now
        return units

    def _write_units(self, units: _Units | None, run: list[bytes]) -> None:
        if units is None or not run:
            return
        os.pwrite(units.index, b"".join(run), units.count * UNIT)
        units.count += len(run)
        units.dirty = True

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
        for u in reversed(self._segments):
            if u.count:
                pos = u.unit(u.first + u.count - 1)[1]
                seg = self._segment(u.base)
                h = codec.decode_header(seg.view, pos - seg.base)
                self._last_term, self._last_chain = h.term, h.chain_crc
                return

    def _recover(self) -> None:
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
            if base >= begin and not any(u.base == base for u in self._segments):
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
            os.pwrite(units.index, b"".join(fresh), (count - len(fresh)) * UNIT)
            units.cut(count)
            self._add(units)
            nxt, end = nxt + count, pos
            if not closed:
                return end
            base = seg.end

    def _trusted_units(self, units: _Units, seg: MappedFile) -> tuple[int, int]:
        """How many of the file's units to trust (up to the last that agrees with a whole entry in
        the segment, its body CRC checked: a segment is never short, so bytes lost past a unit that
        survived read as zeros, not as a short file) and the position of that entry (the segment's
        start if none)."""
        for k in range(os.fstat(units.index).st_size // UNIT - 1, -1, -1):
            magic, pos, size, index, term = codec.decode_index(os.pread(units.index, UNIT, k * UNIT))
            at = pos - seg.base
            if index != units.first + k or at < 0 or size < codec.BODY_OFFSET or at + size > seg.size:
                continue
            try:
                h, _ = codec.decode(seg.view, at)
            except codec.EntryError:
                continue
            if (h.magic, h.pos, h.size, h.index, h.term) == (magic, pos, size, index, term):
                return k + 1, pos
        return 0, seg.base
