"""Arbitrary delivery times (RocketMQ 5's timer), as a time-bucketed wheel over rmq_sys_wheel_timer.

Messages wait in the CommitLog under TIMER_TOPIC; its ConsumeQueue is the timer log (written and
recovered by the store like any queue). In memory each due second ("slot") holds the ConsumeQueue
and CommitLog offsets of its messages, and a heap orders the slots; the loop sleeps until the first
slot is due or a new message arrives, so pending messages cost no CPU until their second comes.

The checkpoint (config/timercheck) is three numbers, saved only once the redelivered messages are
on disk: `enqueueOffset` E (queue entries below it were taken in), `deliveredBeforeMs` D (every
taken-in message due before D was redelivered) and `lowOffset` L (every entry below it is done).
After a restart the entries from L on are read again; those below E due before D are skipped and
the rest go back into the wheel. A crash therefore redelivers a few messages, never loses one.

A recall (RocketMQ 5.3) is a delete marker stored like a timer message, due in the same slot as the
message it cancels: when the slot comes, the marker and its message are dropped, not delivered.
Markers are in the log, so a recall outlives a restart as the message does.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from array import array
from collections.abc import Iterator
from pathlib import Path

import msgspec

from ferrymq.broker.persisted import load_json, save_json
from ferrymq.broker.schedule.delivered import ORIGIN_OFFSET, origin_property
from ferrymq.broker.schedule.divert import TIMER_DEQUEUE_MS, TIMER_OUT_MS, TIMER_TOPIC
from ferrymq.broker.schedule.intents import INTENT_CHUNK
from ferrymq.broker.schedule.redeliver import prop_keys
from ferrymq.broker.schedule.service import DueService, Escape, now_ms
from ferrymq.protocol.bodies import Body
from ferrymq.protocol.properties import Prop, find_property
from ferrymq.protocol.recall import DELETE_KEY, delete_key
from ferrymq.protocol.record import BLANK, read_record_meta
from ferrymq.store import MessageStore, PutResult, PutStatus
from ferrymq.store.consumequeue import BLANK_ENTRY_SIZE, ENTRY

log = logging.getLogger(__name__)

BATCH = 1000  # entries taken in or redelivered before letting the event loop serve others
RETRY_AFTER_FAILURE_MS = 10_000
_OUT_KEY = (TIMER_OUT_MS + "\x01").encode()
_DELETE_KEY = (DELETE_KEY + "\x01").encode()
_REAL_TOPIC = (Prop.REAL_TOPIC + "\x01").encode()
_UNIQ_KEY = (Prop.UNIQ_KEY + "\x01").encode()
_DROP = prop_keys(Prop.REAL_TOPIC, Prop.REAL_QID, ORIGIN_OFFSET)


def _out_ms(props: bytes) -> int | None:
    """A timer message's TIMER_OUT_MS (None if it has none)."""
    raw = find_property(props, _OUT_KEY)
    return int(raw) if raw is not None and raw.isdigit() else None


def _dequeued() -> bytes:
    """The property a timer message is delivered with: when it was."""
    return f"{TIMER_DEQUEUE_MS}\x01{now_ms()}\x02".encode()


class TimerCheckpoint(Body):
    enqueue_offset: int = 0
    delivered_before_ms: int = 0
    low_offset: int = 0
    log_offset: int = -1  # redeliveries not counted here are stored from this CommitLog offset on
    held: list[int] = msgspec.field(default_factory=list)  # see DueService.held


class TimerService(DueService):
    def __init__(self, store: MessageStore, config_dir: Path, precision_ms: int, put, written) -> None:
        super().__init__(store, put, written)
        self.precision = precision_ms
        self.path = config_dir / "timercheck"
        self._slots: dict[int, array] = {}  # slot -> [queue offset, CommitLog offset, size, ...], queue order
        self._heap: list[int] = []  # the slots that hold messages
        self._recalled: dict[int, set[bytes]] = {}  # slot -> delete keys of its markers
        self._retry_at = 0
        self.enqueue_offset = 0  # the next timer-queue entry to take in (set by _reload)
        self.delivered_before = 0
        # a progress loaded or adopted, put into the wheel when this broker delivers
        self._adopted: TimerCheckpoint | None = None
        self.adopt(load_json(self.path, TimerCheckpoint))

    @property
    def pending(self) -> int:
        return sum(len(a) for a in self._slots.values()) // 3

    async def step(self) -> int | None:
        """Take in new timer messages, redeliver the due ones, note the checkpoint; return when the
        next slot is due (ms), or None when nothing waits."""
        adopted = self._adopted
        recounted: dict[int, set[int]] = {}
        if adopted is not None:  # carry on from the progress loaded or adopted
            recounted = await self._recounted(TIMER_TOPIC)
            self._slots, self._heap, self._recalled = {}, [], {}
            self._reload(adopted, recounted.get(0, set()))
            if self._adopted is adopted:  # else another came meanwhile: the next step takes it
                self._adopted = None
        await self._take_in()
        now = now_ms()
        if not await self._settle_held(recounted):
            self._retry_at = now + RETRY_AFTER_FAILURE_MS
        current = now // self.precision  # slots before this one are due: slot s is due at (s+1)*precision
        if self._retry_at <= now:
            while self._heap and self._heap[0] < current:
                if not await self._deliver(self._heap[0]):
                    self._retry_at = now + RETRY_AFTER_FAILURE_MS
                    break
                heapq.heappop(self._heap)
        first = self._heap[0] if self._heap else current
        self.delivered_before = min(first, current) * self.precision
        self.progress.note(self._checkpoint())
        if not self._heap:
            return self._held_due(None)
        return self._held_due(max((self._heap[0] + 1) * self.precision, self._retry_at))

    async def _take_in(self) -> None:
        for offset, phys, size, props in self._entries(self.enqueue_offset):
            if (out_ms := _out_ms(props)) is not None:
                self._add(out_ms // self.precision, offset, phys, size, props)
            self.enqueue_offset = offset + 1
            if offset % BATCH == 0:
                await asyncio.sleep(0)

    def _entries(self, offset: int) -> Iterator[tuple[int, int, int, bytes]]:
        """(queue offset, CommitLog offset, size, properties; none if unreadable) of the timer queue
        from `offset`."""
        cq = self.store.queues.get(TIMER_TOPIC, 0)
        if cq is None:
            return
        offset = max(offset, cq.min_offset)
        while offset < cq.max_offset:
            for phys, size, _ in ENTRY.iter_unpack(cq.entries(offset, BATCH)):
                yield offset, phys, size, self._props(phys, size) if size != BLANK_ENTRY_SIZE else b""
                offset += 1

    def _props(self, phys: int, size: int) -> bytes:
        record = self.store.commitlog.read(phys, size)
        if record is None:
            return b""
        meta = read_record_meta(record, 0, size)
        if meta is None or meta is BLANK:
            return b""
        return bytes(record[meta.props_start : meta.props_end])

    def _add(self, slot: int, queue_offset: int, phys: int, size: int, props: bytes) -> None:
        """Into its slot, a timer message or a delete marker (noted for its slot)."""
        entries = self._slots.get(slot)
        if entries is None:
            entries = self._slots[slot] = array("q")
            heapq.heappush(self._heap, slot)
        entries.extend((queue_offset, phys, size))
        deleted = find_property(props, _DELETE_KEY)
        if deleted is not None:
            self._recalled.setdefault(slot, set()).add(deleted)

    def _dropped(self, record: memoryview | None, recalled: set[bytes]) -> bool:
        """Whether a due record is a delete marker or a message one of them recalled."""
        if record is None:
            return False  # redeliver says what is wrong with it
        meta = read_record_meta(record, 0, len(record))
        if meta is None or meta is BLANK:
            return False
        props = bytes(record[meta.props_start : meta.props_end])
        if find_property(props, _DELETE_KEY) is not None:
            return True
        topic, uniq = find_property(props, _REAL_TOPIC), find_property(props, _UNIQ_KEY)
        if (
            topic is None
            or uniq is None
            or delete_key(topic.decode(), uniq.decode()).encode() not in recalled
        ):
            return False
        log.info("timer: message %s of %s recalled", uniq.decode(), topic.decode())
        return True

    async def _deliver(self, slot: int) -> bool:
        """Redeliver a slot's messages; False (keeping those left) if the store refused a put."""
        entries = self._slots[slot]
        recalled = self._recalled.get(slot)
        read = self.store.commitlog.read
        escape = self.escape()
        while entries:
            end = min(len(entries), 3 * INTENT_CHUNK)
            chunk = []  # (index, record) of the messages to deliver
            for i in range(0, end, 3):
                record = read(entries[i + 1], entries[i + 2])
                if entries[i + 1] in self.held or (recalled is not None and self._dropped(record, recalled)):
                    continue
                chunk.append((i, record))
            if escape is None and not await self.intend([entries[i + 1] for i, _ in chunk]):
                return False
            for done, (i, record) in enumerate(chunk, 1):
                if escape is None:
                    result = await self._deliver_here(record, entries[i + 1])
                else:
                    result = await self._escape(escape, record)
                if result.status is PutStatus.PUT_OK:
                    if escape is None:
                        self._written()
                elif result.status is PutStatus.MESSAGE_ILLEGAL:
                    log.error("timer: dropping the message at %d: %s", entries[i + 1], result.remark)
                else:
                    log.error(
                        "timer: redelivery failed (%s); retrying in %d s",
                        result.remark or result.status.name, RETRY_AFTER_FAILURE_MS // 1000,
                    )  # fmt: skip
                    del entries[:i]
                    return False
                if done % BATCH == 0:
                    await asyncio.sleep(0)
            del entries[:end]
        del self._slots[slot]
        self._recalled.pop(slot, None)
        return True

    def _passed(self, queue_id: int, queue_offset: int) -> bool:
        return True  # the wheel holds none of them (_reload)

    async def _deliver_here(self, record: memoryview | None, origin: int) -> PutResult:
        return await self._redeliver(record, _DROP, _dequeued() + origin_property(origin))

    async def _escape(self, escape: Escape, record: memoryview | None) -> PutResult:
        return await escape(record, _DROP, _dequeued())

    def _checkpoint(self) -> TimerCheckpoint:
        low = min((entries[0] for entries in self._slots.values()), default=self.enqueue_offset)
        return TimerCheckpoint(
            self.enqueue_offset, self.delivered_before, low, self.log_mark(), sorted(self.held)
        )

    def checkpoint(self) -> TimerCheckpoint:
        """Where the service got to (what a slave copies, what an acting slave hands back)."""
        return self._adopted if self._adopted is not None else self._checkpoint()

    def adopt(self, checkpoint: TimerCheckpoint, *, handed_back: bool = False) -> None:
        """Take a progress: this broker's own at start, or another's (a slave's copy of its master's,
        the caller having checked this log holds the redeliveries behind it; a master's of the slave
        that acted for it: `handed_back`). The wheel is rebuilt from it when this broker delivers."""
        self._adopted = checkpoint
        self._adopt_held(checkpoint.held, handed_back)
        self._took_over(checkpoint.log_offset)
        self.progress.note(checkpoint)

    def _reload(self, saved: TimerCheckpoint, delivered: set[int]) -> None:
        """Put back into the wheel what the checkpoint does not prove delivered, nor the log
        (`delivered`: timer-queue offsets redelivered after the checkpoint)."""
        self.enqueue_offset, self.delivered_before = saved.enqueue_offset, saved.delivered_before_ms
        for offset, phys, size, props in self._entries(saved.low_offset):
            out_ms = _out_ms(props)
            if (
                out_ms is not None
                and offset not in delivered
                and phys not in self.held  # settled apart (DueService._settle_held)
                and (offset >= saved.enqueue_offset or out_ms >= saved.delivered_before_ms)
            ):
                self._add(out_ms // self.precision, offset, phys, size, props)
            self.enqueue_offset = offset + 1
        if self._heap:
            log.info("timer: %d messages pending (from the progress loaded or taken over)", self.pending)

    def _save(self, checkpoint: TimerCheckpoint) -> None:
        save_json(self.path, checkpoint)
