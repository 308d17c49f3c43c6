"""The epoch file (RocketMQ's `epochFileCheckpoint`): which master epoch wrote which CommitLog range.

Every master appends <epoch, start offset> when it takes office; replicas copy the entries as they
copy the log. Comparing two brokers' entries finds the last offset where their logs agree, so a
rejoining replica knows how much of its tail to cut (`consistent_offset`).

Text layout, as RocketMQ's: line 1 the entry count, line 2 the CRC32 of the entry lines, then one
`epoch-startOffset` line per entry. Written with `atomic_write` (the previous copy stays as `.bak`),
so a crash leaves the old or the new file, and a damaged file falls back to its `.bak`.
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from ferrymq.store.errors import StoreError
from ferrymq.store.files import atomic_write, durable_copies

log = logging.getLogger(__name__)

FILE_NAME = "epochFileCheckpoint"


@dataclass(frozen=True)
class EpochEntry:
    epoch: int
    start_offset: int


class EpochFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[EpochEntry] = _load(path)

    @property
    def last_epoch(self) -> int:
        """The newest epoch (0 when the file is empty: no master ever wrote here)."""
        return self.entries[-1].epoch if self.entries else 0

    def append(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; False (and nothing written) if it is not newer."""
        if self.entries and epoch <= self.last_epoch:
            return False
        if self.entries and start_offset < self.entries[-1].start_offset:
            raise StoreError(
                f"epoch {epoch} cannot start at {start_offset}, before epoch {self.last_epoch} "
                f"(at {self.entries[-1].start_offset})"
            )
        self._save([*self.entries, EpochEntry(epoch, start_offset)])
        return True

    def truncate_from(self, offset: int) -> None:
        """Forget epochs that start at or after `offset` (the log is being cut there)."""
        kept = [e for e in self.entries if e.start_offset < offset]
        if len(kept) != len(self.entries):
            self._save(kept)

    def trim_below(self, min_offset: int) -> None:
        """Forget the oldest epochs that ended before `min_offset` (retention deleted their bytes),
        always keeping the newest (RocketMQ's truncatePrefixByOffset). An epoch that ends exactly at
        `min_offset` stays, so a replica that stopped there still finds an epoch in common."""
        entries = self.entries
        drop = 0
        while drop < len(entries) - 1 and entries[drop + 1].start_offset < min_offset:
            drop += 1
        if drop:
            self._save(entries[drop:])

    def entry_at(self, offset: int) -> EpochEntry | None:
        """The epoch that wrote `offset` (None before the first entry)."""
        found = None
        for e in self.entries:
            if e.start_offset > offset:
                break
            found = e
        return found

    def next_start(self, entry: EpochEntry) -> int | None:
        """Where the epoch after `entry` starts (None if `entry` is the newest)."""
        later = [e.start_offset for e in self.entries if e.epoch > entry.epoch]
        return later[0] if later else None

    def _save(self, entries: list[EpochEntry]) -> None:
        atomic_write(self.path, encode(entries))
        self.entries = entries


def encode(entries: list[EpochEntry]) -> bytes:
    lines = "".join(f"{e.epoch}-{e.start_offset}\n" for e in entries)
    return f"{len(entries)}\n{zlib.crc32(lines.encode())}\n{lines}".encode()


def decode(data: bytes) -> list[EpochEntry]:
    """Parse the file's text; ValueError when it is damaged (count or CRC do not match)."""
    head, _, lines = data.decode("ascii").partition("\n")
    crc, _, lines = lines.partition("\n")
    if zlib.crc32(lines.encode()) != int(crc):
        raise ValueError("CRC mismatch")
    entries = []
    for line in lines.splitlines():
        epoch, start = line.split("-")
        entries.append(EpochEntry(int(epoch), int(start)))
    if len(entries) != int(head) or not well_ordered(entries):
        raise ValueError("entries are inconsistent")
    return entries


def well_ordered(entries: list[EpochEntry]) -> bool:
    """Positive epochs, each newer than the last, starting no earlier than it."""
    return all(e.epoch > 0 and e.start_offset >= 0 for e in entries) and all(
        b.epoch > a.epoch and b.start_offset >= a.start_offset for a, b in pairwise(entries)
    )


def _load(path: Path) -> list[EpochEntry]:
    for candidate, data in durable_copies(path):
        try:
            return decode(data)
        except (ValueError, UnicodeDecodeError) as e:
            log.warning("epoch file %s is damaged (%s); trying its backup", candidate, e)
    return []


def with_ends(entries: list[EpochEntry], max_offset: int) -> list[tuple[int, int, int]]:
    """(epoch, start, end) per entry: an epoch ends where the next starts, the newest at `max_offset`."""
    ends = [e.start_offset for e in entries[1:]] + [max_offset]
    return [(e.epoch, e.start_offset, end) for e, end in zip(entries, ends, strict=True)]


def consistent_offset(
    local: list[EpochEntry], local_max: int, remote: list[EpochEntry], remote_max: int
) -> int:
    """The offset up to which a replica's log (`local`) agrees with its master's (`remote`), or -1.

    RocketMQ's rule: walk the replica's epochs from the newest; the first one the master also has,
    starting at the same offset, holds the last common byte at min(replica's end, master's end).
    """
    remote_ranges = {epoch: (start, end) for epoch, start, end in with_ends(remote, remote_max)}
    for epoch, start, end in reversed(with_ends(local, local_max)):
        theirs = remote_ranges.get(epoch)
        if theirs is not None and theirs[0] == start:
            return min(end, theirs[1])
    return -1
