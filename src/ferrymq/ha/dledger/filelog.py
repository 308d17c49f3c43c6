"""A Raft log kept as DLedger keeps it: entries in data files, 32-byte index units beside them.

The log is a run of segments, each a pair of files named after the index of its first entry:
`<first>.data` holds entries back to back in DLedger's layout (`entry.py`), each with its global
position in the `pos` field and a chain CRC linking it to the one before; `<first>.index` holds the
unit (magic, pos, size, index, term) of entry i at (i - first) * 32, so `term_at` and `read` find an
entry with one small read; the most recent entries, what a leader sends its followers and whose
terms it checks for every append and commit, are served from memory. A new segment starts once the
current one's data passes `segment_bytes`. Writes go to the page cache; `sync` makes them durable,
which the Raft driver calls before it sends what a Ready asks.

`trim(before)` deletes the whole segments below an index, oldest first (retention: the log is
bounded as the CommitLog is). The index and term of the last entry trimmed are kept in `start`, so
the log still answers `term_at(first_index - 1)`, which a leader needs to send the next entry.

Opening recovers from a crash, segment by segment: a segment's index is trusted up to its last unit
that points at a whole, well-formed entry; data written after it (entries whose index units never
made it) is scanned, checked (position, index sequence, term order, body and chain CRC) and indexed
again, and whatever follows the last good entry, a torn write, is cut off both files. A segment that
does not carry on exactly where the one before ends is dropped with every later one.

A log written by earlier versions as one `data` and one `index` file becomes the first segment.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ferrymq.ha.dledger import entry as codec
from ferrymq.ha.dledger.indexed import UNIT, IndexedLog
from ferrymq.ha.dledger.log import Entry

SEGMENT_BYTES = 1 << 30  # DLedger's data file size
IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 1024


def _write_all(fd: int, parts: list[bytes | memoryview], offset: int, total: int) -> None:
    """pwritev `total` bytes in runs the kernel accepts (IOV_MAX buffers), finishing any short write."""
    for i in range(0, len(parts), IOV_MAX):
        run = parts[i : i + IOV_MAX]
        size = total if len(parts) <= IOV_MAX else sum(len(p) for p in run)
        done = os.pwritev(fd, run, offset)
        if done < size:
            rest = memoryview(b"".join(run))[done:]
            while rest:
                n = os.pwrite(fd, rest, offset + size - len(rest))
                rest = rest[n:]
        offset += size


class _Segment:
    """One data file and its index file: entries `first` .. `first + count - 1`, data at global
    positions `base` .. `end`."""

    def __init__(self, root: Path, first: int, base: int) -> None:
        self.paths = (root / f"{first:020d}.data", root / f"{first:020d}.index")
        self.data = os.open(self.paths[0], os.O_RDWR | os.O_CREAT, 0o644)
        self.index = os.open(self.paths[1], os.O_RDWR | os.O_CREAT, 0o644)
        self.first, self.base = first, base
        self.count, self.end = 0, base
        self.dirty = True  # written since the last sync
        self.closed = False

    def unit(self, index: int) -> tuple[int, int, int, int, int]:
        return codec.decode_index(os.pread(self.index, UNIT, (index - self.first) * UNIT))

    def header(self, pos: int) -> codec.EntryHeader:
        return codec.decode_header(os.pread(self.data, codec.BODY_OFFSET, pos - self.base))

    def cut(self, count: int, end: int) -> None:
        os.ftruncate(self.data, end - self.base)
        os.ftruncate(self.index, count * UNIT)
        self.count, self.end = count, end
        self.dirty = True

    def sync(self) -> None:
        os.fsync(self.data)
        os.fsync(self.index)

    def close(self) -> None:
        self.closed = True
        os.close(self.data)
        os.close(self.index)

    def remove(self) -> None:
        self.close()
        for path in self.paths:
            path.unlink(missing_ok=True)


class FileLog(IndexedLog[_Segment]):
    def __init__(self, root: Path, segment_bytes: int = SEGMENT_BYTES) -> None:
        super().__init__(root)
        self.segment_bytes = segment_bytes
        self._recover()

    # -- RaftLog ----------------------------------------------------------------------------------

    def _data(self, seg: _Segment, pos: int, size: int) -> bytes:
        return os.pread(seg.data, size, pos - seg.base)

    def append(self, entries: Sequence[Entry]) -> None:
        if not entries:
            return
        count = self.last_index + 1
        if entries[0].index != count:
            raise ValueError(f"append at {entries[0].index}, log ends at {count - 1}")
        seg = self._segments[-1]
        if seg.end - seg.base >= self.segment_bytes:
            seg = self._add_segment(count, seg.end)
        parts, positions, chain = codec.encode_run(entries, seg.end, self._last_chain)
        unit = codec.INDEX_UNIT.pack
        units = b"".join(
            unit(e.magic, p, codec.BODY_OFFSET + len(e.body), e.index, e.term)
            for e, p in zip(entries, positions, strict=True)
        )
        end = positions[-1] + codec.BODY_OFFSET + len(entries[-1].body)
        _write_all(seg.data, parts, seg.end - seg.base, end - seg.end)
        _write_all(seg.index, [units], seg.count * UNIT, len(units))
        seg.count += len(entries)
        seg.end, seg.dirty = end, True
        self._last_chain = chain
        self._remember(entries)

    def truncate(self, from_index: int) -> None:
        if not self._cutting(from_index):
            return
        while len(self._segments) > 1 and self._segments[-1].first >= from_index:
            self._remove(self._segments.pop())
            self._firsts.pop()
        seg = self._segments[-1]
        if from_index < seg.first + seg.count:  # else the cut fell on the boundary of the popped one
            seg.cut(from_index - seg.first, seg.unit(from_index)[1])
        self._reload_tail()

    # -- retention and durability ---------------------------------------------------------------

    def sync(self) -> None:
        """fsync the segments written since the last sync. The driver may call it on another thread
        while it goes on appending: a segment's flag is cleared before its fsync, so a write made
        meanwhile leaves it set for the next sync."""
        for seg in list(self._segments):
            with self._closing:
                if seg.dirty and not seg.closed:
                    seg.dirty = False
                    seg.sync()

    # -- inside -----------------------------------------------------------------------------------

    def _written_at(self, seg: _Segment) -> float:
        return os.fstat(seg.data).st_mtime

    def _add_segment(self, first: int, base: int) -> _Segment:
        return self._add(_Segment(self.root, first, base))

    def _reload_tail(self) -> None:
        """Last term and chain CRC from the last entry on disk (after a cut)."""
        self._last_term, self._last_chain = self._start[1], 0
        for seg in reversed(self._segments):
            if seg.count:
                h = seg.header(seg.unit(seg.first + seg.count - 1)[1])
                self._last_term, self._last_chain = h.term, h.chain_crc
                return

    def _upgrade_single_files(self) -> None:
        """Earlier versions kept the whole log in `data` and `index`: they become segment 0."""
        for name in ("data", "index"):
            old = self.root / name
            if old.is_file():
                os.replace(old, self.root / f"{0:020d}.{name}")

    def _recover(self) -> None:
        self._upgrade_single_files()
        firsts = sorted(int(p.stem) for p in self.root.glob("*.data") if p.stem.isdigit())
        after: tuple[int, int, int] | None = None  # (end, term, chain) of the segment before
        for n, first in enumerate(firsts):
            seg = _Segment(self.root, first, 0)
            expected = (
                self._segments[-1].first + self._segments[-1].count if self._segments else self.first_index
            )
            if first < self.first_index:  # trimmed, but the crash came before the delete
                seg.remove()
                continue
            recovered = self._recover_segment(seg, after) if first == expected else None
            if recovered is None:  # a gap or a wrong start: nothing from here on can be trusted
                seg.remove()
                for later in firsts[n + 1 :]:
                    _Segment(self.root, later, 0).remove()
                break
            self._add(seg)
            after = (seg.end, *recovered)
        if not self._segments:
            self._add_segment(self.first_index, 0)
        self._reload_tail()

    def _recover_segment(self, seg: _Segment, after: tuple[int, int, int] | None) -> tuple[int, int] | None:
        """Recover one segment that carries on `after` (end, term, chain CRC) of the one before, or
        starts the log; its last term and chain CRC, or None if it does not start where it must."""
        data_size = os.fstat(seg.data).st_size
        units = os.fstat(seg.index).st_size // UNIT
        if after is None:
            term, chain = self._start[1], 0
            try:
                base = codec.decode_header(os.pread(seg.data, codec.BODY_OFFSET, 0)).pos if data_size else 0
            except codec.EntryError:
                return None
        else:
            base, term, chain = after
        seg.base = base
        # the index is written after the data: walk back to its last unit with a whole entry behind it
        count, end = 0, base
        for k in range(units - 1, -1, -1):
            h = self._entry_at_unit(seg, k, data_size)
            if h is not None:
                count, end, term, chain = k + 1, h.pos + h.size, h.term, h.chain_crc
                break
        # entries written to data whose units were lost: check each and index it again
        indexed = count
        tail = memoryview(os.pread(seg.data, data_size - (end - base), end - base))
        new_units = []
        offset = 0
        while offset + codec.BODY_OFFSET <= len(tail):
            try:
                h, _ = codec.decode(tail, offset)
            except codec.EntryError:
                break
            chained = (
                after is not None or count or not seg.first
            )  # a trimmed log's first entry: nothing to chain to
            if (
                (h.pos, h.index) != (end, seg.first + count)
                or h.term < term
                or (chained and h.chain_crc != codec.chain_crc(chain, h.body_crc))
            ):
                break
            new_units.append(codec.encode_index(h))
            count, end, term, chain = count + 1, end + h.size, h.term, h.chain_crc
            offset += h.size
        tail.release()
        os.pwrite(seg.index, b"".join(new_units), indexed * UNIT)
        seg.cut(count, end)
        return term, chain

    def _entry_at_unit(self, seg: _Segment, k: int, data_size: int) -> codec.EntryHeader | None:
        """The header unit k of `seg` points at, if that entry is whole and agrees with the unit."""
        unit = codec.decode_index(os.pread(seg.index, UNIT, k * UNIT))
        _, pos, size, idx, _ = unit
        at = pos - seg.base
        if idx != seg.first + k or at < 0 or size < codec.BODY_OFFSET or at + size > data_size:
            return None
        try:
            h = seg.header(pos)
        except codec.EntryError:
            return None
        return h if (h.magic, h.pos, h.size, h.index, h.term) == unit else None
