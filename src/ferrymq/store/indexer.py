"""The indexer: builds the IndexFile from the CommitLog in a process of its own.

Indexing every key of every message is the most expensive part of dispatching, and queries by key
can lag a few milliseconds behind writes, so it runs beside the store on the second core instead
of sharing the store's GIL. The two processes share only files: the CommitLog (read here), the
index files (written here, read by the store for queries) and `index/position`, a small mapped
file where the store publishes how far the CommitLog is written and the indexer how far it has
indexed (and flushed). The store starts and stops it (IndexerProcess).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import logging
import mmap
import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ferrymq._native import load
from ferrymq.protocol.properties import find_property
from ferrymq.protocol.record import BLANK, read_record_meta
from ferrymq.protocol.sys_flag import TRANSACTION_ROLLBACK_TYPE, TRANSACTION_TYPE_MASK
from ferrymq.store.dispatch import SCAN_BLANK, SCAN_MALFORMED, SCAN_STOPPED
from ferrymq.store.entries import index_entry_scan
from ferrymq.store.files import offset_name
from ferrymq.store.index import IndexService, key_hash_bytes

log = logging.getLogger(__name__)

# index/position: int64 fields.
_FIELDS = struct.Struct(">qqqqq")
COMMITTED, MIN_OFFSET, INDEXED, FLUSHED, STOP = 0, 8, 16, 24, 32
ENTRIES_FROM = 40  # 1 + where DLedger entries begin in the CommitLog (the single log); 0: none
_LONG = struct.Struct(">q")
_KEYS = b"KEYS\x01"
_UNIQ_KEY = b"UNIQ_KEY\x01"


class Position:
    """The shared `index/position` file (4 KiB, mapped by both processes)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < 4096:
                os.ftruncate(fd, 4096)
            self.mm = mmap.mmap(fd, 4096)
        finally:
            os.close(fd)

    def get(self, field: int) -> int:
        return _LONG.unpack_from(self.mm, field)[0]

    def set(self, field: int, value: int) -> None:
        _LONG.pack_into(self.mm, field, value)

    def close(self) -> None:
        self.mm.close()


_ENTRY = "from ferrymq.store.indexer import main; main()"


class IndexerProcess:
    """The store's handle on its indexer: start it, tell it the write position, stop it."""

    def __init__(
        self,
        store_root: Path,
        slots: int,
        entries: int,
        segment_size: int,
        commit_offset: int,
        min_offset: int,
        entries_from: int | None = None,
        cap: Callable[[], int | None] | None = None,
    ) -> None:
        """`entries_from`: where the CommitLog holds DLedger entries (see `hold_entries`); `cap()`:
        how far the store allows indexing whatever is written (a DLedger store: its commit)."""
        self.cap = cap
        self.position = Position(store_root / "index" / "position")
        self.hold_entries(entries_from)
        # Restart from what is known flushed: anything after it is indexed again (queries dedupe).
        restart = min(max(self.position.get(FLUSHED), min_offset), commit_offset)
        self.position.set(INDEXED, restart)
        self.position.set(FLUSHED, restart)
        self.position.set(COMMITTED, commit_offset)
        self.position.set(MIN_OFFSET, min_offset)
        self.position.set(STOP, 0)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _ENTRY, str(store_root), str(slots), str(entries), str(segment_size),
             str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )  # fmt: skip

    def committed(self, offset: int) -> None:
        cap = self.cap() if self.cap is not None else None
        _LONG.pack_into(self.position.mm, COMMITTED, offset if cap is None else min(offset, cap))

    def hold_entries(self, entries_from: int | None) -> None:
        """From `entries_from` on, the CommitLog holds DLedger entries (store/entries.py)."""
        self.position.set(ENTRIES_FROM, 0 if entries_from is None else entries_from + 1)

    def min_offset(self, offset: int) -> None:
        self.position.set(MIN_OFFSET, offset)

    @property
    def indexed_offset(self) -> int:
        return self.position.get(INDEXED)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 60.0) -> None:
        """Let it index everything written, flush and exit; kill it if it does not within `timeout`."""
        self.position.set(STOP, 1)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.error("indexer did not stop within %.0f s; killing it", timeout)
            self.proc.kill()
            self.proc.wait()
        self.position.close()


class _Segments:
    """Read-only mappings of CommitLog segments, opened by name as the indexer reaches them."""

    def __init__(self, directory: Path, size: int) -> None:
        self.directory = directory
        self.size = size
        self.maps: dict[int, mmap.mmap] = {}

    def get(self, base: int) -> mmap.mmap | None:
        mm = self.maps.get(base)
        if mm is None:
            try:
                with open(self.directory / offset_name(base), "rb") as f:
                    mm = self.maps[base] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (FileNotFoundError, ValueError):
                return None
        return mm

    def drop_below(self, offset: int) -> None:
        for base in [b for b in self.maps if b + self.size <= offset]:
            self.maps.pop(base).close()


def run(store_root: Path, slots: int, entries: int, segment_size: int, parent: int) -> None:
    """The indexer's loop: index what the store has committed, flush every second, exit on STOP."""
    lock = os.open(store_root / "index" / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(lock, fcntl.LOCK_EX)  # an indexer of a crashed store may still be on its way out
    position = Position(store_root / "index" / "position")
    index = IndexService(store_root / "index", max_hash_slot_num=slots, max_index_num=entries)
    segments = _Segments(store_root / "commitlog", segment_size)
    offset = position.get(INDEXED)
    dropped_below = 0
    idle = _BUSY_PAUSE
    next_flush = time.monotonic() + 1.0
    while True:
        committed = position.get(COMMITTED)
        if (low := position.get(MIN_OFFSET)) > dropped_below:  # give deleted segments' space back now
            segments.drop_below(low)
            dropped_below = low
            if offset < low:  # retention deleted records not indexed yet
                offset = low
                position.set(INDEXED, offset)
        # A replica's committed offset may cut a record it is still copying: no progress then.
        entries_from = position.get(ENTRIES_FROM) - 1
        indexed = (
            _index_range(index, segments, offset, committed, entries_from) if offset < committed else offset
        )
        if indexed > offset:
            offset = indexed
            position.set(INDEXED, offset)
            idle = _BUSY_PAUSE
        elif position.get(STOP):
            break
        else:
            time.sleep(idle)
            idle = min(idle * 2, 0.05)  # idle: back off to 20 wake-ups a second
        if time.monotonic() >= next_flush:
            next_flush = time.monotonic() + 1.0
            index.flush()
            position.set(FLUSHED, offset)
            min_offset = position.get(MIN_OFFSET)
            index.delete_files_below(min_offset)
            segments.drop_below(min_offset)
            if os.getppid() != parent:  # the store's process died (SIGKILL): so do we
                break
    index.close()
    position.set(FLUSHED, offset)


def index_keys(props: bytes) -> list[bytes]:
    """The keys a message is found by, as stored: its UNIQ_KEY and each of its KEYS."""
    keys = []
    uniq = find_property(props, _UNIQ_KEY)
    if uniq:
        keys.append(uniq)
    user_keys = find_property(props, _KEYS)
    if user_keys:
        keys += user_keys.split()
    return keys


def index_scan(buf, pos: int, end: int, base: int) -> tuple[int, int, list[tuple[int, int, int]]]:
    """Walk the records of a segment mapped at CommitLog offset `base` from `pos` to `end`; return
    (where it stopped, why, items): an item (key hash, CommitLog offset, store timestamp) for each
    index key of every record but rolled-back transactions. Why: SCAN_STOPPED, SCAN_BLANK or
    SCAN_MALFORMED, as dispatch_scan. The reference for the C version in ferrymq/_native/scan.c.
    """
    items: list[tuple[int, int, int]] = []
    prefixes: dict[str, bytes] = {}  # topic -> b"topic#"
    while pos < end:
        meta = read_record_meta(buf, pos, end)
        if meta is BLANK:
            return pos, SCAN_BLANK, items
        if meta is None:
            return pos, SCAN_MALFORMED, items
        if meta.sys_flag & TRANSACTION_TYPE_MASK != TRANSACTION_ROLLBACK_TYPE:
            keys = index_keys(buf[meta.props_start : meta.props_end])
            if keys:
                prefix = prefixes.get(meta.topic)
                if prefix is None:
                    prefix = prefixes[meta.topic] = meta.topic.encode() + b"#"
                phys, ts = base + pos, meta.store_timestamp
                items += [(key_hash_bytes(prefix + key), phys, ts) for key in keys]
        pos += meta.size
    return pos, SCAN_STOPPED, items


_scan_c = load("scan")
scan_segment = _scan_c.index_scan if _scan_c is not None else index_scan


def _index_range(
    index: IndexService, segments: _Segments, offset: int, committed: int, entries_from: int = -1
) -> int:
    """Index the records in [offset, committed); return where it stopped (a record boundary).
    Segments from `entries_from` on (if not -1) hold DLedger entries, walked whole.

    Segments are scanned a slice at a time, so keys reach the index a few thousand at a time.
    """
    size = segments.size
    while offset < committed:
        base = offset - offset % size
        mm = segments.get(base)
        if mm is None:
            return offset  # not visible yet, or deleted by retention: try again later
        pos = offset - base
        if 0 <= entries_from <= base:
            pos, status, items = index_entry_scan(mm, pos, min(committed - base, size), base, scan_segment)
        else:
            pos, status, items = scan_segment(mm, pos, min(committed - base, size, pos + _SCAN_BYTES), base)
        if items:
            index.put_hashed(items)
        if status == SCAN_BLANK:
            pos = size
        elif status == SCAN_MALFORMED:
            return base + pos  # beyond what is written yet
        offset = base + pos
    return offset


# The first pause once caught up: under a trickle of single sends, a round per few messages would
# cost more than the messages (keys become queryable within about this long).
_BUSY_PAUSE = 0.005
_SCAN_BYTES = 4 << 20  # CommitLog bytes scanned per call: a few thousand records' keys at a time


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL us when the store's process dies, however it dies."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


_PR_SET_PDEATHSIG = 1


def main() -> None:
    root, (slots, entries, segment_size, parent) = Path(sys.argv[1]), map(int, sys.argv[2:6])
    _die_with_parent()
    if os.getppid() != parent:  # it died before we could ask to be told
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the store, which then stops us
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s indexer: %(message)s")
    run(root, slots, entries, segment_size, parent)
