"""A Raft log kept as DLedger keeps it: a data file of entries and an index file of 32-byte units.

`data` holds the entries back to back in DLedger's layout (`entry.py`), each with its own position
in the `pos` field and a chain CRC linking it to the one before; `index` holds entry i's unit
(magic, pos, size, index, term) at i * 32, so `term_at` and `read` find an entry with one small
read; the most recent entries, what a leader sends its followers, are served from memory. Writes
go to the page cache; `sync` makes them durable, which the Raft driver calls before it sends what
a Ready asks.

Opening recovers from a crash: the index is trusted up to its last unit that points at a whole,
well-formed entry; data written after it (entries whose index units never made it) is scanned,
checked (position, index sequence, term order, body and chain CRC) and indexed again, and whatever
follows the last good entry, a torn write, is cut off both files.

This is one data file; DLedger's segments of 1 GiB with blank-filled tails, retention and the
classic CommitLog prefix of an upgraded broker are the next step (docs/dledger.md).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ferrymq.ha.dledger import entry as codec
from ferrymq.ha.dledger.log import Entry

UNIT = codec.INDEX_UNIT.size
RECENT_ENTRIES = 16384  # kept in memory for the leader's appends to followers
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


class FileLog:
    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self._data = os.open(root / "data", os.O_RDWR | os.O_CREAT, 0o644)
        self._index = os.open(root / "index", os.O_RDWR | os.O_CREAT, 0o644)
        self._count = 0  # entries
        self._end = 0  # data bytes
        self._last_term = 0
        self._last_chain = 0
        self._recent: list[Entry] = []  # the last entries appended, served without reading the file
        self._recover()

    # -- RaftLog ----------------------------------------------------------------------------------

    @property
    def last_index(self) -> int:
        return self._count - 1

    def term_at(self, index: int) -> int:
        if index == -1:
            return 0
        if index == self._count - 1:
            return self._last_term
        return self._unit(index)[4]

    def read(self, start: int, max_count: int, max_bytes: int) -> Sequence[Entry]:
        """Entries from `start`, read with one pread; their bodies are views of that buffer."""
        if not 0 <= start < self._count:
            return []
        first_recent = self._count - len(self._recent)
        if start >= first_recent:
            return self._from_recent(start - first_recent, max_count, max_bytes)
        stop = min(self._count, start + max(1, max_count))
        units = os.pread(self._index, (stop - start) * UNIT, start * UNIT)
        first_pos = codec.decode_index(units)[1]
        span = 0
        for k in range(stop - start):  # max_bytes counts bodies, as MemoryLog does
            _, pos, size, _, _ = codec.decode_index(units, k * UNIT)
            if k and pos + size - first_pos - (k + 1) * codec.BODY_OFFSET > max_bytes:
                break
            span = pos + size - first_pos
        return codec.decode_run(os.pread(self._data, span, first_pos), verify=False)[0]

    def _from_recent(self, k: int, max_count: int, max_bytes: int) -> list[Entry]:
        out = self._recent[k : k + max(1, max_count)]
        size = 0
        for n, e in enumerate(out):
            size += len(e.body)
            if n and size > max_bytes:
                return out[:n]
        return out

    def append(self, entries: Sequence[Entry]) -> None:
        if not entries:
            return
        if entries[0].index != self._count:
            raise ValueError(f"append at {entries[0].index}, log ends at {self._count - 1}")
        parts, positions, chain = codec.encode_run(entries, self._end, self._last_chain)
        unit = codec.INDEX_UNIT.pack
        units = b"".join(
            unit(e.magic, p, codec.BODY_OFFSET + len(e.body), e.index, e.term)
            for e, p in zip(entries, positions, strict=True)
        )
        end = positions[-1] + codec.BODY_OFFSET + len(entries[-1].body)
        _write_all(self._data, parts, self._end, end - self._end)
        _write_all(self._index, [units], self._count * UNIT, len(units))
        self._count += len(entries)
        self._end, self._last_chain, self._last_term = end, chain, entries[-1].term
        self._recent += entries
        if len(self._recent) > 2 * RECENT_ENTRIES:
            del self._recent[:-RECENT_ENTRIES]

    def truncate(self, from_index: int) -> None:
        if from_index >= self._count:
            return
        if from_index < 0:
            raise ValueError(f"cannot truncate from {from_index}")
        self._cut(from_index, self._unit(from_index)[1] if from_index else 0)

    # -- durability -------------------------------------------------------------------------------

    def sync(self) -> None:
        os.fsync(self._data)
        os.fsync(self._index)

    def close(self) -> None:
        os.close(self._data)
        os.close(self._index)

    # -- inside -----------------------------------------------------------------------------------

    def _unit(self, index: int) -> tuple[int, int, int, int, int]:
        if not 0 <= index < self._count:
            raise IndexError(f"no entry {index} (last is {self._count - 1})")
        return codec.decode_index(os.pread(self._index, UNIT, index * UNIT))

    def _cut(self, count: int, end: int) -> None:
        """Keep the first `count` entries, which end at data offset `end`."""
        os.ftruncate(self._data, end)
        os.ftruncate(self._index, count * UNIT)
        del self._recent[max(0, len(self._recent) - (self._count - count)) :]
        self._count, self._end = count, end
        self._last_term = self._last_chain = 0
        if count:
            h = codec.decode_header(os.pread(self._data, codec.BODY_OFFSET, self._unit(count - 1)[1]))
            self._last_term, self._last_chain = h.term, h.chain_crc

    def _entry_at_unit(self, index: int, data_size: int) -> codec.EntryHeader | None:
        """The header index unit `index` points at, if that entry is whole and agrees with the unit."""
        unit = codec.decode_index(os.pread(self._index, UNIT, index * UNIT))
        _, pos, size, idx, _ = unit
        if idx != index or pos < 0 or size < codec.BODY_OFFSET or pos + size > data_size:
            return None
        try:
            h = codec.decode_header(os.pread(self._data, codec.BODY_OFFSET, pos))
        except codec.EntryError:
            return None
        return h if (h.magic, h.pos, h.size, h.index, h.term) == unit else None

    def _recover(self) -> None:
        data_size = os.fstat(self._data).st_size
        units = os.fstat(self._index).st_size // UNIT
        # the index is written after the data: walk back to its last unit with a whole entry behind it
        count, end, term, chain = 0, 0, 0, 0
        for k in range(units - 1, -1, -1):
            h = self._entry_at_unit(k, data_size)
            if h is not None:
                count, end, term, chain = k + 1, h.pos + h.size, h.term, h.chain_crc
                break
        # entries written to data whose units were lost: check each and index it again
        indexed = count
        tail = memoryview(os.pread(self._data, data_size - end, end))
        new_units = []
        offset = 0
        while offset + codec.BODY_OFFSET <= len(tail):
            try:
                h, _ = codec.decode(tail, offset)
            except codec.EntryError:
                break
            if (
                (h.pos, h.index) != (end, count)
                or h.term < term
                or h.chain_crc != codec.chain_crc(chain, h.body_crc)
            ):
                break
            new_units.append(codec.encode_index(h))
            count, end, term, chain = count + 1, end + h.size, h.term, h.chain_crc
            offset += h.size
        tail.release()
        os.pwrite(self._index, b"".join(new_units), indexed * UNIT)
        self._cut(count, end)
