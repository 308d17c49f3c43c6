"""The Raft log's retention, by the CommitLog's settings (store/cleanup.py).

A segment of the Raft log goes once every entry in it is applied here (the durable applied mark
covers it) and it was last written more than `file_reserved_time` hours ago; under disk pressure
(`disk_max_used_space_ratio`) it goes as soon as it is applied. The segment being written stays.

DLedger keeps no snapshot and neither do we: a follower that lacks entries its leader has trimmed
cannot catch up by Raft. The leader reports it (`RaftNode.stranded`) and keeps serving the others;
the member is repaired by hand by copying a healthy member's store (docs/dledger.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from ferrymq.store.config import StoreConfig

log = logging.getLogger(__name__)


class TrimmedLog(Protocol):
    def trim(self, before: int, written_before: float | None = None) -> int: ...


class LogRetention:
    def __init__(
        self,
        raft_log: TrimmedLog,
        config: StoreConfig,
        disk_usage: Callable[[], float],
        stranded: Callable[[], list[str]],
        name: str,
        *,
        on_hours: bool = False,
    ) -> None:
        """`disk_usage`: percent of the store's file system in use; `stranded`: followers the leader
        can no longer bring up to date; `on_hours`: the log is the CommitLog itself (the single
        log), so its segments go only at the CommitLog's `delete_when` hours, or under pressure."""
        self.hours = {int(h) for h in config.delete_when.split(";") if h.strip()} if on_hours else None
        self.log = raft_log
        self.config = config
        self.disk_usage = disk_usage
        self.stranded = stranded
        self.name = name
        self._reported: list[str] = []

    def run(self, applied: int, now: float | None = None) -> int:
        """Trim what retention allows below entry `applied` (durably applied); the first index kept."""
        cfg = self.config
        now = time.time() if now is None else now
        pressure = self.disk_usage() > cfg.disk_max_used_space_ratio
        if self.hours is None or pressure or time.localtime(now).tm_hour in self.hours:
            first = self.log.trim(applied, None if pressure else now - cfg.file_reserved_time * 3600)
        else:
            first = self.log.trim(-1)  # nothing goes: the first index kept
        stranded = self.stranded()
        if stranded != self._reported:
            if stranded:
                log.error(
                    "DLedger %s: %s lack entries before %d, which retention deleted; copy a healthy "
                    "member's store to them (docs/dledger.md)", self.name, ", ".join(stranded), first,
                )  # fmt: skip
            self._reported = stranded
        return first
