"""StoreConfig: the storage settings, named after RocketMQ's MessageStoreConfig in snake_case."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ferrymq.store.delay_levels import parse_delay_levels

ASYNC_FLUSH = "ASYNC_FLUSH"
SYNC_FLUSH = "SYNC_FLUSH"
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


@dataclass
class StoreConfig:
    store_path_root_dir: Path = Path.home() / "store"
    mapped_file_size_commit_log: int = 1 << 30
    mapped_file_size_consume_queue: int = 300_000 * 20
    warm_commitlog_ahead: int = 16 << 20  # bytes of CommitLog pages faulted in ahead of the writer (0: off)
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    message_index_enable: bool = True
    flush_disk_type: str = ASYNC_FLUSH
    flush_interval_commit_log: int = 500  # ms between async CommitLog flushes
    flush_interval_consume_queue: int = 1000  # ms between ConsumeQueue/index flushes and checkpoints
    flush_consume_queue_least_pages: int = 2  # a ConsumeQueue is flushed with this many new pages ...
    flush_consume_queue_thorough_interval: int = 60_000  # ... or at a thorough flush, this often (ms)
    sync_flush_timeout: int = 5000  # ms a SYNC_FLUSH put waits before FLUSH_DISK_TIMEOUT
    max_message_size: int = 4 * 1024 * 1024
    check_crc_on_recover: bool = True
    file_reserved_time: int = 72  # hours
    delete_when: str = "04"  # hours of day ("04" or "03;04") when expired files are deleted
    disk_max_used_space_ratio: int = 75
    disk_space_clean_forcibly_ratio: int = 85
    disk_space_warning_level_ratio: int = 90
    clean_file_forcibly_enable: bool = True
    clean_resource_interval: int = 10_000  # ms between retention passes
    delete_file_batch_max: int = 10
    # Scheduled messages (RocketMQ's messageDelayLevel, timerMaxDelaySec, timerPrecisionMs).
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    timer_wheel_enable: bool = True
    timer_max_delay_sec: int = 3 * 24 * 3600
    timer_precision_ms: int = 1000

    def __post_init__(self) -> None:
        self.store_path_root_dir = Path(self.store_path_root_dir)
        if self.flush_disk_type not in (ASYNC_FLUSH, SYNC_FLUSH):
            raise ValueError(
                f"flush_disk_type must be {ASYNC_FLUSH} or {SYNC_FLUSH}, not {self.flush_disk_type!r}"
            )
        if self.mapped_file_size_consume_queue % 20:
            raise ValueError("mapped_file_size_consume_queue must be a multiple of 20 (the entry size)")
        if self.mapped_file_size_commit_log < 4096:
            raise ValueError("mapped_file_size_commit_log must be at least 4096 bytes")
        parse_delay_levels(self.message_delay_level)  # a bad string fails at start, not at the first delay
        if self.timer_precision_ms <= 0 or self.timer_max_delay_sec <= 0:
            raise ValueError("timer_precision_ms and timer_max_delay_sec must be positive")
        # RocketMQ clamps the two upper thresholds the same way.
        self.disk_space_clean_forcibly_ratio = min(max(self.disk_space_clean_forcibly_ratio, 30), 85)
        self.disk_space_warning_level_ratio = min(max(self.disk_space_warning_level_ratio, 35), 90)

    @property
    def commitlog_dir(self) -> Path:
        return self.store_path_root_dir / "commitlog"

    @property
    def consumequeue_dir(self) -> Path:
        return self.store_path_root_dir / "consumequeue"

    @property
    def index_dir(self) -> Path:
        return self.store_path_root_dir / "index"

    @property
    def config_dir(self) -> Path:
        return self.store_path_root_dir / "config"
