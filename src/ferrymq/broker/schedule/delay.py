"""Delay levels (RocketMQ's ScheduleMessageService): one FIFO queue per level in SCHEDULE_TOPIC_XXXX.

Every message of a level waits the same time, so each queue is in due order and a cursor per level
is all the state there is (config/delayOffset.json, as RocketMQ keeps it). The service sleeps until
the earliest head is due or a new message arrives: an idle broker with pending messages does nothing.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import msgspec

from ferrymq.broker.persisted import load_json, save_json
from ferrymq.broker.schedule.delivered import ORIGIN_OFFSET, origin_property
from ferrymq.broker.schedule.divert import SCHEDULE_TOPIC
from ferrymq.broker.schedule.redeliver import prop_keys
from ferrymq.broker.schedule.service import DueService, now_ms
from ferrymq.protocol.bodies import Body, DataVersion
from ferrymq.protocol.properties import Prop
from ferrymq.protocol.record import BLANK, read_record_meta
from ferrymq.store import MessageStore, PutStatus
from ferrymq.store.consumequeue import BLANK_ENTRY_SIZE, ENTRY
from ferrymq.store.delay_levels import parse_delay_levels

log = logging.getLogger(__name__)

BATCH = 500  # messages redelivered before letting the event loop serve others
RETRY_AFTER_FAILURE_MS = 10_000  # RocketMQ's DELAY_FOR_A_PERIOD
_DROP = prop_keys(Prop.DELAY, Prop.TIMER_DELIVER_MS, Prop.TIMER_DELAY_SEC, Prop.TIMER_DELAY_MS, ORIGIN_OFFSET)


class DelayOffsetSerializeWrapper(Body):
    """config/delayOffset.json and GET_ALL_DELAY_OFFSET's body: level → next SCHEDULE_TOPIC offset,
    and (ferrymq's) the CommitLog offset from which redeliveries it does not count may be stored."""

    offset_table: dict[int, int] = msgspec.field(default_factory=dict)
    data_version: DataVersion = msgspec.field(default_factory=DataVersion)
    log_offset: int = -1


class DelayLevelService(DueService):
    def __init__(self, store: MessageStore, config_dir: Path, delay_levels: str, put, written) -> None:
        super().__init__(store, put, written)
        self.levels_ms = parse_delay_levels(delay_levels)
        self.path = config_dir / "delayOffset.json"
        saved = load_json(self.path, DelayOffsetSerializeWrapper)
        self.offsets: dict[int, int] = dict(saved.offset_table)
        self._took_over(saved.log_offset)
        self._retry_at: dict[int, int] = {}  # level -> ms before which a failed put is not retried

    @property
    def max_level(self) -> int:
        return len(self.levels_ms)

    async def step(self) -> int | None:
        """Redeliver every due message; the ms time the next one is due, or None if none is pending."""
        if self._recount:  # each level is delivered in queue order: past the last one redelivered
            for queue_id, delivered in (await self._recounted(SCHEDULE_TOPIC)).items():
                level = queue_id + 1
                self.offsets[level] = max(self.offsets.get(level, 0), max(delivered) + 1)
        earliest = None
        for level in range(1, self.max_level + 1):
            due = await self._deliver_level(level)
            if due is not None and (earliest is None or due < earliest):
                earliest = due
        self.progress.note(self.offset_table())
        return earliest

    async def _deliver_level(self, level: int) -> int | None:
        cq = self.store.queues.get(SCHEDULE_TOPIC, level - 1)
        if cq is None:
            return None
        now = now_ms()
        if self._retry_at.get(level, 0) > now:
            return self._retry_at[level]
        delay = self.levels_ms[level - 1]
        escape = self.escape()
        offset = max(self.offsets.get(level, 0), cq.min_offset)
        done = 0
        while offset < cq.max_offset:
            for phys, size, _ in ENTRY.iter_unpack(cq.entries(offset, BATCH)):
                record = None if size == BLANK_ENTRY_SIZE else self.store.commitlog.read(phys, size)
                meta = read_record_meta(record, 0, size) if record is not None else None
                if meta is not None and meta is not BLANK:
                    due = meta.store_timestamp + delay
                    if due > now + delay:  # stored "in the future": the clock went back; deliver now
                        due = now
                    if due > now:
                        self.offsets[level] = offset
                        return due
                    if escape is None:
                        result = await self._redeliver(record, _DROP, origin_property(phys))
                    else:
                        result = await escape(record, _DROP, b"")
                    if result.status is PutStatus.PUT_OK:
                        if escape is None:
                            self._written()
                    elif result.status is not PutStatus.MESSAGE_ILLEGAL:
                        log.error(
                            "delay level %d: redelivery failed (%s); retrying in %d s",
                            level, result.remark or result.status.name, RETRY_AFTER_FAILURE_MS // 1000,
                        )  # fmt: skip
                        self.offsets[level] = offset
                        self._retry_at[level] = now + RETRY_AFTER_FAILURE_MS
                        return self._retry_at[level]
                    else:
                        log.error("delay level %d: dropping message at %d: %s", level, phys, result.remark)
                offset += 1
                done += 1
            self.offsets[level] = offset
            if done >= BATCH:
                done = 0
                await asyncio.sleep(0)
                now = now_ms()
        return None

    def _save(self, wrapper: DelayOffsetSerializeWrapper) -> None:
        save_json(self.path, wrapper)

    def adopt(self, wrapper: DelayOffsetSerializeWrapper) -> None:
        """Take another broker's delivery progress (a slave's copy of its master's, a master's of the
        slave that acted for it; progress only moves forward), so that what that broker delivered
        is not delivered again."""
        mine = self.offsets
        for level, offset in wrapper.offset_table.items():
            mine[level] = max(offset, mine.get(level, 0))
        self._took_over(wrapper.log_offset)
        self.progress.note(self.offset_table())

    def offset_table(self) -> DelayOffsetSerializeWrapper:
        return DelayOffsetSerializeWrapper(offset_table=dict(self.offsets), log_offset=self.log_mark())
