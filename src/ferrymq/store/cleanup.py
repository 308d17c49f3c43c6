"""Retention: delete expired CommitLog segments, and refuse writes when the disk is nearly full.

RocketMQ's rules: segments older than `file_reserved_time` hours go at the `delete_when` hour, or at
any hour once disk use passes `disk_max_used_space_ratio`; past `disk_space_clean_forcibly_ratio`
even unexpired segments go (oldest first); past `disk_space_warning_level_ratio` writes are refused
until space is freed. ConsumeQueue and index files wholly below the new minimum follow.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ferrymq.store.message_store import MessageStore

log = logging.getLogger(__name__)


class RetentionService:
    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.delete_hours = {int(h) for h in store.config.delete_when.split(";") if h.strip()}
        # told the CommitLog's new min offset after segments are deleted (on the thread that deleted)
        self.listener: Callable[[int], object] | None = None

    def check_disk(self) -> float:
        """Update the store's disk-full flag from current usage; return the usage percentage."""
        store = self.store
        usage = store.disk_usage_ratio()
        full = usage > store.config.disk_space_warning_level_ratio
        if full != store.disk_full:
            if full:
                log.error(
                    "disk %.1f%% used, over %d%%: refusing writes",
                    usage,
                    store.config.disk_space_warning_level_ratio,
                )
            else:
                log.warning("disk %.1f%% used: accepting writes again", usage)
        store.disk_full = full
        return usage

    def run(self, now: float | None = None, *, manual: bool = False) -> int:
        """One retention pass; returns how many CommitLog segments were deleted."""
        cfg = self.store.config
        now = time.time() if now is None else now
        usage = self.check_disk()
        pressure = usage > cfg.disk_max_used_space_ratio
        forced = cfg.clean_file_forcibly_enable and usage > cfg.disk_space_clean_forcibly_ratio
        if not (manual or pressure or time.localtime(now).tm_hour in self.delete_hours):
            return 0
        deleted = self._delete_segments(now - cfg.file_reserved_time * 3600, forced)
        if deleted:
            self._delete_dependent_files()
            self.check_disk()
            if self.listener is not None:
                self.listener(self.store.commitlog.min_offset)
        return deleted

    def _delete_segments(self, expire_before: float, forced: bool) -> int:
        store = self.store
        deleted = 0
        for seg in store.commitlog.segments[:-1]:  # never the segment being written
            if deleted >= store.config.delete_file_batch_max or seg.end > store.dispatcher.offset:
                break
            if not forced and os.stat(seg.path).st_mtime > expire_before:
                break  # segments expire in order: the rest are younger
            log.info(
                "deleting CommitLog segment %s (%s)", seg.path.name, "disk pressure" if forced else "expired"
            )
            with store._put_lock:
                store.commitlog.delete_segment(seg)
            deleted += 1
        return deleted

    def _delete_dependent_files(self) -> None:
        store = self.store
        min_offset = store.commitlog.min_offset
        with store.dispatcher.lock:
            for cq in store.queues.all():
                cq.delete_files_below(min_offset)
        if store.indexer is not None:  # it deletes its files below this and unmaps deleted segments
            store.indexer.min_offset(min_offset)
