"""Retention: delete expired CommitLog segments, and refuse writes when the disk is nearly full.

RocketMQ's rules: segments older than `file_reserved_time` hours go at the `delete_when` hour, or at
any hour once disk use passes `disk_max_used_space_ratio`; past `disk_space_clean_forcibly_ratio`
even unexpired segments go (oldest first); past `disk_space_warning_level_ratio` writes are refused
until space is freed. ConsumeQueue and index files wholly below the new minimum follow.

Only segments wholly dispatched go, so every message kept reaches its queue, with one exception:
a disk so full that dispatch cannot create a ConsumeQueue file, and no dispatched segment left to
free. Forced cleanup then deletes the oldest segment as RocketMQ would (dispatched or not), one a
pass, and dispatch goes on after it; waiting instead would keep the store full for good.

The service holds the policy only; the store hands it what it acts on as callables, so retention
can neither reach into the store's other state nor hold on to the objects it replaces.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ferrymq.store.config import StoreConfig
    from ferrymq.store.files import MappedFile

log = logging.getLogger(__name__)
LAST_RESORT_PATIENCE = 60.0  # seconds


class RetentionService:
    def __init__(
        self,
        config: StoreConfig,
        *,
        disk_usage: Callable[[], float],
        disk_full: Callable[[float, bool], None],
        deletable: Callable[[bool], list[MappedFile]],
        delete_segment: Callable[[MappedFile], None],
        min_offset: Callable[[], int],
        delete_below: Callable[[int], None],
        resume: Callable[[], int | None],
    ) -> None:
        """`disk_usage`: percent of the file system used; `disk_full(usage, full)`: whether writes
        must be refused now; `deletable(undispatched)`: the CommitLog segments that may go, oldest
        first (wholly dispatched unless `undispatched`; never the one being written); `delete_segment`:
        remove one; `min_offset`: the CommitLog's lowest offset; `delete_below(offset)`: drop
        ConsumeQueue and index files below it; `resume()`: retry a dispatch held up by the full disk,
        and say where it still waits (a CommitLog offset), or None."""
        self.config = config
        self.disk_usage = disk_usage
        self.disk_full = disk_full
        self.deletable = deletable
        self.resume = resume
        # Where dispatch waited when the last resort last deleted a segment, and when: the next one
        # waits until dispatch has used the space freed (a deleted segment's blocks return only once
        # every mapping of it is gone), or LAST_RESORT_PATIENCE seconds have passed.
        self._last_resort: tuple[int, float] | None = None
        self.delete_segment = delete_segment
        self.min_offset = min_offset
        self.delete_below = delete_below
        self.delete_hours = {int(h) for h in config.delete_when.split(";") if h.strip()}
        # told the CommitLog's new min offset after segments are deleted (on the thread that deleted)
        self.listener: Callable[[int], object] | None = None

    def check_disk(self) -> float:
        """Tell the store whether the disk is too full to write on; return the usage percentage."""
        usage = self.disk_usage()
        self.disk_full(usage, usage > self.config.disk_space_warning_level_ratio)
        return usage

    def run(self, now: float | None = None, *, manual: bool = False) -> int:
        """One retention pass; returns how many CommitLog segments were deleted."""
        cfg = self.config
        now = time.time() if now is None else now
        waiting_at = self.resume()
        stuck = waiting_at is not None  # dispatch found no room: the disk is full, whatever statvfs says
        usage = self.check_disk()
        pressure = stuck or usage > cfg.disk_max_used_space_ratio
        forced = cfg.clean_file_forcibly_enable and (stuck or usage > cfg.disk_space_clean_forcibly_ratio)
        if not (manual or pressure or time.localtime(now).tm_hour in self.delete_hours):
            return 0
        deleted = self._delete_segments(now - cfg.file_reserved_time * 3600, forced, waiting_at)
        if deleted:
            low = self.min_offset()
            self.delete_below(low)
            self.resume()
            self.check_disk()
            if self.listener is not None:
                self.listener(low)
        return deleted

    def _last_resort_due(self, waiting_at: int) -> bool:
        """Whether dispatch, waiting at `waiting_at`, got anywhere since the last resort was taken
        (or has waited too long for the space it freed)."""
        last = self._last_resort
        return last is None or waiting_at > last[0] or time.monotonic() - last[1] > LAST_RESORT_PATIENCE

    def _delete_segments(self, expire_before: float, forced: bool, waiting_at: int | None) -> int:
        segments = self.deletable(False)[: self.config.delete_file_batch_max]
        if not segments and forced and waiting_at is not None and self._last_resort_due(waiting_at):
            segments = self.deletable(True)[:1]  # the last resort (see the module's notes)
            self._last_resort = (waiting_at, time.monotonic())
        deleted = 0
        for seg in segments:
            if not forced and os.stat(seg.path).st_mtime > expire_before:
                break  # segments expire in order: the rest are younger
            log.info(
                "deleting CommitLog segment %s (%s)", seg.path.name, "disk pressure" if forced else "expired"
            )
            self.delete_segment(seg)
            deleted += 1
        return deleted
