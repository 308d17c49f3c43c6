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
from ferrymq.broker.schedule.intents import INTENT_CHUNK
from ferrymq.broker.schedule.redeliver import prop_keys
from ferrymq.broker.schedule.service import DueService, Escape, now_ms
from ferrymq.protocol.bodies import Body, DataVersion
from ferrymq.protocol.properties import Prop
from ferrymq.protocol.record import BLANK, RecordMeta, read_record_meta
from ferrymq.protocol.topic_names import SCHEDULE_TOPIC
from ferrymq.store import MessageStore, PutResult, PutStatus
from ferrymq.store.consumequeue import BLANK_ENTRY_SIZE, ENTRY, ConsumeQueue
from ferrymq.store.delay_levels import parse_delay_levels

log = logging.getLogger(__name__)

BATCH = 500  # messages redelivered before letting the event loop serve others
RETRY_AFTER_FAILURE_MS = 10_000  # RocketMQ's DELAY_FOR_A_PERIOD
_DROP = prop_keys(Prop.DELAY, Prop.TIMER_DELIVER_MS, Prop.TIMER_DELAY_SEC, Prop.TIMER_DELAY_MS, ORIGIN_OFFSET)


_Due = tuple[int, memoryview | None, RecordMeta | None]


class DelayOffsetSerializeWrapper(Body):
    """config/delayOffset.json and GET_ALL_DELAY_OFFSET's body: level → next SCHEDULE_TOPIC offset,
    and (ferrymq's) the CommitLog offset from which redeliveries it does not count may be stored."""

    offset_table: dict[int, int] = msgspec.field(default_factory=dict)
    data_version: DataVersion = msgspec.field(default_factory=DataVersion)
    log_offset: int = -1
    held: list[int] = msgspec.field(default_factory=list)  # see DueService.held


class DelayLevelService(DueService):
    def __init__(self, store: MessageStore, config_dir: Path, delay_levels: str, put, written) -> None:
        super().__init__(store, put, written)
        self.levels_ms = parse_delay_levels(delay_levels)
        self.path = config_dir / "delayOffset.json"
        saved = load_json(self.path, DelayOffsetSerializeWrapper)
        self.offsets: dict[int, int] = dict(saved.offset_table)
        self.held = set(saved.held)
        self._took_over(saved.log_offset)
        self._retry_at: dict[int, int] = {}  # level -> ms before which a failed put is not retried

    @property
    def max_level(self) -> int:
        return len(self.levels_ms)

    async def step(self) -> int | None:
        """Redeliver every due message; the ms time the next one is due, or None if none is pending."""
        recounted = await self._recounted(SCHEDULE_TOPIC) if self._recount else {}
        for queue_id, delivered in recounted.items():  # each level goes in queue order: past the last
            level = queue_id + 1
            self.offsets[level] = max(self.offsets.get(level, 0), max(delivered) + 1)
        earliest = None
        if not await self._settle_held(recounted):
            earliest = now_ms() + RETRY_AFTER_FAILURE_MS
        for level in range(1, self.max_level + 1):
            due = await self._deliver_level(level)
            if due is not None and (earliest is None or due < earliest):
                earliest = due
        self.progress.note(self.offset_table())
        return self._held_due(earliest)

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
            due_now, next_due = self._due_from(cq, offset, delay, now)
            intended = [phys for phys, _, meta in due_now if meta is not None and phys not in self.held]
            if escape is None and not await self.intend(intended):
                self.offsets[level] = offset
                self._retry_at[level] = now + RETRY_AFTER_FAILURE_MS
                return self._retry_at[level]
            for phys, record, meta in due_now:
                if meta is not None and phys not in self.held:
                    if escape is None:
                        result = await self._deliver_here(record, phys)
                    else:
                        result = await self._escape(escape, record)
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
                if done >= BATCH:
                    done = 0
                    self.offsets[level] = offset
                    await asyncio.sleep(0)
            self.offsets[level] = offset
            if next_due is not None:
                return next_due
            now = now_ms()
        return None

    def _due_from(self, cq: ConsumeQueue, offset: int, delay: int, now: int) -> tuple[list[_Due], int | None]:
        """`_due` over the queue from `offset`, up to INTENT_CHUNK entries (one intent covers them)."""
        due_now: list[_Due] = []
        while len(due_now) < INTENT_CHUNK:
            batch, next_due = self._due(cq.entries(offset + len(due_now), BATCH), delay, now)
            due_now += batch
            if next_due is not None or not batch:
                return due_now, next_due
        return due_now, None

    def _due(self, entries: memoryview, delay: int, now: int) -> tuple[list[_Due], int | None]:
        """The queue entries due now, up to the first that is not: (CommitLog offset, record, header
        or None if it is no message), and when that first one is due (None: all are)."""
        due_now: list[_Due] = []
        for phys, size, _ in ENTRY.iter_unpack(entries):
            record = None if size == BLANK_ENTRY_SIZE else self.store.commitlog.read(phys, size)
            meta = read_record_meta(record, 0, size) if record is not None else None
            if meta is BLANK:
                meta = None
            if meta is not None:
                due = meta.store_timestamp + delay
                if due > now + delay:  # stored "in the future": the clock went back; deliver now
                    due = now
                if due > now:
                    return due_now, due
            due_now.append((phys, record, meta))
        return due_now, None

    def _passed(self, queue_id: int, queue_offset: int) -> bool:
        return queue_offset < self.offsets.get(queue_id + 1, 0)

    async def _deliver_here(self, record: memoryview | None, origin: int) -> PutResult:
        return await self._redeliver(record, _DROP, origin_property(origin))

    async def _escape(self, escape: Escape, record: memoryview | None) -> PutResult:
        return await escape(record, _DROP, b"")

    def _save(self, wrapper: DelayOffsetSerializeWrapper) -> None:
        save_json(self.path, wrapper)

    def adopt(self, wrapper: DelayOffsetSerializeWrapper, *, handed_back: bool = False) -> None:
        """Take another broker's delivery progress (a slave's copy of its master's, a master's of the
        slave that acted for it: `handed_back`; progress only moves forward), so that what that
        broker delivered is not delivered again."""
        mine = self.offsets
        for level, offset in wrapper.offset_table.items():
            mine[level] = max(offset, mine.get(level, 0))
        self._adopt_held(wrapper.held, handed_back)
        self._took_over(wrapper.log_offset)
        self.progress.note(self.offset_table())

    def offset_table(self) -> DelayOffsetSerializeWrapper:
        return DelayOffsetSerializeWrapper(
            offset_table=dict(self.offsets), log_offset=self.log_mark(), held=sorted(self.held)
        )
