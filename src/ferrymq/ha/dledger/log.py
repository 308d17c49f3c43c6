"""The log a Raft node reads and writes: entries with an index, a term and opaque bytes.

The node never looks inside a body and never copies one: a follower hands the entries it received
straight to `append`, and a leader sends whatever `read` returns (a file-backed log returns views of
its mapped file). Indexes start at 0 as in DLedger; index -1 stands for "before the first entry"
and has term 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ferrymq.ha.dledger.entry import Entry

__all__ = ["Entry", "EntryRefused", "MemoryLog", "RaftLog"]


class EntryRefused(Exception):
    """`append` would not hold the entry at `index` (its body is not what this log stores): the
    entries before it were appended, it and the rest were not. A follower answers its leader with a
    rejection at `index`, so the leader sends it again from there."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(f"entry {index} refused: {reason}")
        self.index = index


class RaftLog(Protocol):
    """What the Raft node needs from storage; writes reach disk only when the driver syncs."""

    @property
    def first_index(self) -> int:
        """Index of the first entry kept (0 unless retention trimmed the log); the log still knows
        the term of the entry before it."""
        ...

    @property
    def last_index(self) -> int:
        """Index of the last entry, -1 when empty (first_index - 1 when all are trimmed)."""
        ...

    def term_at(self, index: int) -> int:
        """Term of the entry at `index` (0 for -1); IndexError past the end or before
        `first_index - 1`."""
        ...

    def read(self, start: int, max_count: int, max_bytes: int) -> Sequence[Entry]:
        """Entries from `start` on: at least one if any, then up to the count and body-byte limits."""
        ...

    def append(self, entries: Sequence[Entry]) -> None:
        """Add entries whose first index is `last_index + 1`; EntryRefused if the log cannot hold
        one of them (only the entries before it are added)."""
        ...

    def truncate(self, from_index: int) -> None:
        """Drop the entries from `from_index` on."""
        ...


class MemoryLog:
    """A RaftLog in a Python list, for tests and the simulation."""

    def __init__(self, entries: Sequence[Entry] = ()) -> None:
        self.entries: list[Entry] = list(entries)

    first_index = 0

    @property
    def last_index(self) -> int:
        return len(self.entries) - 1

    def term_at(self, index: int) -> int:
        if index == -1:
            return 0
        if not 0 <= index < len(self.entries):
            raise IndexError(f"no entry {index} (last is {len(self.entries) - 1})")
        return self.entries[index].term

    def read(self, start: int, max_count: int, max_bytes: int) -> Sequence[Entry]:
        out: list[Entry] = []
        size = 0
        for entry in self.entries[start : start + max_count]:
            if out and size + len(entry.body) > max_bytes:
                break
            out.append(entry)
            size += len(entry.body)
        return out

    def append(self, entries: Sequence[Entry]) -> None:
        if entries and entries[0].index != len(self.entries):
            raise ValueError(f"append at {entries[0].index}, log ends at {len(self.entries) - 1}")
        self.entries.extend(entries)

    def truncate(self, from_index: int) -> None:
        del self.entries[from_index:]
