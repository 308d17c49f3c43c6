"""IndexFile: find messages by key (KEYS tokens and UNIQ_KEY) without scanning the CommitLog.

Each file is a fixed-size mapped hash table in RocketMQ's layout, all big-endian:
a 40-byte header, `max_hash_slot_num` 4-byte slots holding the newest entry number of their bucket
(0 = empty), then `max_index_num` 20-byte entries (keyHash, phyOffset, timeDiff in seconds since the
file's beginTimestamp, prevIndex chaining the bucket's older entries). Entry 0 is never used, so a
file holds `max_index_num - 1` keys. Files are named by their creation time, yyyyMMddHHmmssSSS;
only the newest one is written to.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path

from isal.isal_zlib import crc32

from ferrymq._native import load
from ferrymq.store.errors import StoreError
from ferrymq.store.files import MappedFile, io_error

HEADER = struct.Struct(">qqqqii")  # begin/end timestamp, begin/end phys offset, used slots, index count
SLOT = struct.Struct(">i")
ENTRY = struct.Struct(">iqii")  # key hash, phys offset, seconds since beginTimestamp, previous entry
HEADER_SIZE, SLOT_SIZE, ENTRY_SIZE = HEADER.size, SLOT.size, ENTRY.size  # 40, 4, 20
INDEX_COUNT_POS = 36  # where the header keeps indexCount
_NAME_FORMAT = "%Y%m%d%H%M%S%f"  # %f gives microseconds: names keep its first three digits
_NAME_LENGTH = 17
_MAX_TIME_DIFF = 0x7FFFFFFF


def key_hash(text: str) -> int:
    """The bucket hash of `text` ("topic#key"): CRC32 of its UTF-8, as a non-negative int32.

    RocketMQ uses |String.hashCode()| here, but no other program reads our index files, and a C
    CRC32 costs a tenth of a Python String.hashCode on the dispatch hot path (every key of every
    message). The file layout is RocketMQ's all the same.
    """
    return key_hash_bytes(text.encode(errors="surrogatepass"))


def key_hash_bytes(raw: bytes) -> int:
    """key_hash of text already encoded (as the indexer reads it from the CommitLog)."""
    return crc32(raw) & 0x7FFFFFFF


def put_index_entries(
    mm, items: list[tuple[int, int, int]], slot_num: int, entries_pos: int, count: int, begin_ts: int,
    used_slots: int, end_ts: int, end_phys: int,
) -> tuple[int, int, int, int]:  # fmt: skip
    """Write items (key hash, phys offset, store timestamp) after the file's `count` entries (room is
    the caller's to check); return the header's new (count, used slots, end timestamp, end offset).

    The reference for the C version in ferrymq/_native/index.c, which the indexer uses when built.
    """
    read_int, write_int, write_entry = SLOT.unpack_from, SLOT.pack_into, ENTRY.pack_into
    for hash_, phys_offset, store_timestamp in items:
        time_diff = (store_timestamp - begin_ts) // 1000
        if time_diff < 0:  # the clock stepped back
            time_diff = 0
        elif time_diff > _MAX_TIME_DIFF:
            time_diff = _MAX_TIME_DIFF
        slot_pos = HEADER_SIZE + hash_ % slot_num * SLOT_SIZE
        prev = read_int(mm, slot_pos)[0]
        if not 0 < prev < count:
            prev = 0
            used_slots += 1
        write_entry(mm, entries_pos + count * ENTRY_SIZE, hash_, phys_offset, time_diff, prev)
        count += 1
        write_int(mm, INDEX_COUNT_POS, count)
        write_int(mm, slot_pos, count - 1)
        if store_timestamp > end_ts:
            end_ts = store_timestamp
        if phys_offset > end_phys:
            end_phys = phys_offset
    return count, used_slots, end_ts, end_phys


_index_c = load("index")
put_entries = _index_c.put if _index_c is not None else put_index_entries


class _IndexFile:
    """One mapped index file; the header fields are mirrored here so reads need not unpack them."""

    __slots__ = (
        "begin_phys",
        "begin_ts",
        "dirty",
        "end_phys",
        "end_ts",
        "entries_pos",
        "index_count",
        "max_index_num",
        "mf",
        "mm",
        "slot_num",
        "used_slots",
    )

    def __init__(self, mf: MappedFile, slot_num: int, max_index_num: int) -> None:
        self.mf = mf
        self.mm = mf.mm
        self.slot_num = slot_num
        self.max_index_num = max_index_num
        self.entries_pos = HEADER_SIZE + slot_num * SLOT_SIZE
        self.begin_ts, self.end_ts, self.begin_phys, self.end_phys, self.used_slots, self.index_count = (
            HEADER.unpack_from(self.mm, 0)
        )
        self.index_count = max(self.index_count, 1)  # a never-written file has an all-zero header
        if self.index_count > max_index_num:
            raise StoreError(
                f"index file {mf.path} claims {self.index_count} entries but holds at most {max_index_num}"
            )
        self.dirty = False

    def reload_header(self) -> None:
        """Re-read the header another process (the indexer) keeps writing."""
        self.begin_ts, self.end_ts, self.begin_phys, self.end_phys, self.used_slots, count = (
            HEADER.unpack_from(self.mm, 0)
        )
        self.index_count = min(max(count, 1), self.max_index_num)

    def put(self, items: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
        """Index (key hash, phys offset, store timestamp) items, as many as fit; returns the rest.

        Per key the entry is written first, then the header's count, then the slot: a crash between
        any two leaves at worst an unreachable entry, never a slot pointing past the count (whose
        slot a later entry would then take over, cutting off the older chain). The rest of the
        header (times, offsets, used slots) is written once per call.
        """
        mm = self.mm
        count = self.index_count
        if count == 1:
            _, self.begin_phys, self.begin_ts = items[0]
        fitting = self.max_index_num - count
        rest: list[tuple[int, int, int]] = []
        if len(items) > fitting:
            items, rest = items[:fitting], items[fitting:]
        count, used_slots, end_ts, end_phys = put_entries(
            mm, items, self.slot_num, self.entries_pos, count, self.begin_ts, self.used_slots, self.end_ts,
            self.end_phys,
        )  # fmt: skip
        self.index_count, self.used_slots, self.end_ts, self.end_phys = count, used_slots, end_ts, end_phys
        HEADER.pack_into(mm, 0, self.begin_ts, end_ts, self.begin_phys, end_phys, used_slots, count)
        self.dirty = True
        return rest

    def collect(self, hash_: int, begin_ms: int, end_ms: int, max_num: int, found: dict[int, None]) -> None:
        """Add to `found` the offsets in `hash_`'s chain whose time may lie in [begin_ms, end_ms].

        Entry times are whole seconds after beginTimestamp, so an entry matches when its second
        overlaps the range: a message stored at exactly begin_ms is never missed. The chain runs
        newest first, so the walk stops at the first entry wholly older than the range.
        """
        mm = self.mm
        count = self.index_count
        begin_ts = self.begin_ts
        earliest = begin_ms - 999
        index = SLOT.unpack_from(mm, HEADER_SIZE + hash_ % self.slot_num * SLOT_SIZE)[0]
        while 0 < index < count and len(found) < max_num:
            entry_hash, phys_offset, time_diff, prev = ENTRY.unpack_from(
                mm, self.entries_pos + index * ENTRY_SIZE
            )
            time_read = begin_ts + time_diff * 1000
            if time_read < earliest:
                break
            if entry_hash == hash_ and time_read <= end_ms:
                found[phys_offset] = None
            if prev >= index:  # chains only point back; anything else is damage, not a loop to follow
                break
            index = prev


class IndexService:
    """All index files of a store. One thread (the dispatcher) puts; queries, flushes and retention
    may run on other threads without a lock, because the file list is replaced rather than changed."""

    def __init__(
        self, directory: Path, *, max_hash_slot_num: int = 5_000_000, max_index_num: int = 20_000_000
    ) -> None:
        if max_hash_slot_num < 1 or max_index_num < 2:  # entry 0 is unused: a file needs room for one more
            raise ValueError(f"index sizes too small: {max_hash_slot_num} slots, {max_index_num} entries")
        self.directory = directory
        self.max_hash_slot_num = max_hash_slot_num
        self.max_index_num = max_index_num
        self.file_size = HEADER_SIZE + max_hash_slot_num * SLOT_SIZE + max_index_num * ENTRY_SIZE
        self._files: list[_IndexFile] = []  # oldest first
        try:
            for name in self._names():
                self._files.append(self._open(name, create=False))
        except StoreError:
            self.close()
            raise
        self._writable = self._files[-1] if self._files else None  # put() moves on if it is full

    def _names(self) -> list[str]:
        directory = self.directory
        return sorted(
            p.name
            for p in (directory.iterdir() if directory.is_dir() else ())
            if len(p.name) == _NAME_LENGTH and p.name.isdigit()
        )

    def refresh(self) -> None:
        """Catch up with files and headers written by the indexer process (for a reading process)."""
        known = {f.mf.path.name: f for f in self._files}
        names = self._names()
        files = []
        for name in names:
            file = known.get(name)
            if file is None:
                try:
                    file = self._open(name, create=False)
                except StoreError:
                    continue  # deleted by the indexer's retention since the listing
            files.append(file)
        for name, file in known.items():
            if name not in names:
                file.mf.close()
        for file in files:
            file.reload_header()
        self._files = files

    def _open(self, name: str, *, create: bool) -> _IndexFile:
        mf = MappedFile(self.directory / name, 0, self.file_size, create=create)
        try:
            return _IndexFile(mf, self.max_hash_slot_num, self.max_index_num)
        except StoreError:
            mf.close()
            raise

    def _new_file(self) -> _IndexFile:
        now = datetime.now()
        if self._files:  # names must grow even when files come within a millisecond or the clock steps back
            last = datetime.strptime(self._files[-1].mf.path.name, _NAME_FORMAT)
            now = max(now, last + timedelta(milliseconds=1))
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise io_error("create", self.directory, e) from None
        file = self._open(now.strftime(_NAME_FORMAT)[:_NAME_LENGTH], create=True)
        # Every key lands on a random slot: fault the whole slot table in at once rather than one
        # trap per page over the file's first few thousand puts.
        file.mf.populate(0, file.entries_pos)
        self._files = [*self._files, file]
        return file

    def put(self, topic: str, keys: Iterable[str], phys_offset: int, store_timestamp: int) -> None:
        """Index the message at `phys_offset` under each non-empty key."""
        prefix = topic + "#"
        self.put_hashed([(key_hash(prefix + key), phys_offset, store_timestamp) for key in keys if key])

    def put_hashed(self, items: list[tuple[int, int, int]]) -> None:
        """Index (key_hash("topic#key"), phys offset, store timestamp) items, in order (the indexer
        hashes the keys' bytes straight from the CommitLog and hands over a whole range at once)."""
        while items:
            file = self._writable
            if file is None or file.index_count >= self.max_index_num:
                file = self._writable = self._new_file()
            items = file.put(items)

    def query(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[int]:
        """Offsets of messages that may carry `key` and were stored in [begin_ms, end_ms], newest first.

        Hashes collide, so callers must read each message and check its keys. Recovery can index a
        message twice; each offset is returned once.
        """
        hash_ = key_hash(f"{topic}#{key}")
        found: dict[int, None] = {}  # an ordered set
        for file in reversed(self._files):
            if len(found) >= max_num:
                break
            if file.begin_ts <= end_ms and begin_ms <= file.end_ts:
                try:
                    file.collect(hash_, begin_ms, end_ms, max_num, found)
                except ValueError:  # retention unmapped the file meanwhile: its messages are gone too
                    continue
        return list(found)

    @property
    def max_phys_offset(self) -> int:
        """The highest message offset in the newest file (its endPhyOffset), 0 without files."""
        files = self._files
        return files[-1].end_phys if files else 0

    def flush(self) -> None:
        """Write the files changed since the last flush to disk."""
        for file in self._files:
            if file.dirty:
                file.dirty = False  # before syncing: a put racing with the sync marks it again
                file.mf.sync()

    def delete_files_below(self, min_phys_offset: int) -> int:
        """Delete the files whose messages all lie below `min_phys_offset`; the newest file stays."""
        doomed = [f for f in self._files[:-1] if f.end_phys < min_phys_offset]
        if doomed:
            self._files = [f for f in self._files if f not in doomed]
            for file in doomed:
                file.mf.destroy()
        return len(doomed)

    def close(self) -> None:
        self.flush()
        files, self._files, self._writable = self._files, [], None
        for file in files:
            file.mf.close()

    def destroy(self) -> None:
        """Delete every index file (the store is being rebuilt); the service stays usable."""
        files, self._files, self._writable = self._files, [], None
        for file in files:
            file.mf.destroy()
