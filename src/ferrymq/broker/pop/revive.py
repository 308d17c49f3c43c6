"""The revive service: brings back popped messages whose invisible time passed without an ack.

Un-acked messages of a due checkpoint are stored again in the group's pop retry topic
(``%RETRY%<group>_<topic>``) with reconsume times + 1 and their properties (ids, keys, tags)
kept, or in ``%DLQ%<group>`` once the group's ``retry_max_times`` is used up; then an ack record
marked "revived" closes them in the revive topic. FIFO checkpoints are not re-put: their queue
is only woken, and the next pop delivers the same offsets again (PopService).

On start the service replays the revive topic from its saved progress (the earliest checkpoint
record still open when progress was saved) and so rebuilds every open checkpoint and the pop
groups' offsets; a crash costs at most a second delivery, never a lost message or a lost ack.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from ferrymq.broker.groups import SubscriptionGroupManager
from ferrymq.broker.offsets import ConsumerOffsetManager
from ferrymq.broker.persisted import load_json, save_json
from ferrymq.broker.pop.records import CheckpointRecord, settled
from ferrymq.broker.pop.revive_log import ReviveLog
from ferrymq.broker.pop.table import CheckpointTable, OpenCheckpoint
from ferrymq.broker.topics import DLQ_GROUP_PREFIX, PERM_READ, PERM_WRITE, TopicConfigManager
from ferrymq.ha.dledger.command import PutCommand
from ferrymq.protocol.bodies import Body
from ferrymq.protocol.errors import ProtocolError
from ferrymq.protocol.pop import pop_retry_topic, record_layout
from ferrymq.protocol.record import BLANK, POS_BORNHOST, POS_BORNTIMESTAMP, POS_FLAG, read_record_meta
from ferrymq.protocol.sys_flag import BORNHOST_V6_FLAG
from ferrymq.store import MessageStore, PutResult, PutStatus

log = logging.getLogger(__name__)

Submit = Callable[[PutCommand], PutResult]  # the broker writer's `submit`
DEFAULT_RETRY_MAX_TIMES = 16
_TICK = 0.05  # s: the longest a due checkpoint waits to be noticed
_RETRY_AFTER_FAILURE_MS = 1000


class ReviveProgress(Body):
    """config/popReviveOffset.json: per revive queue, where replay starts."""

    offset_table: dict[int, int] = msgspec.field(default_factory=dict)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def read_message(store: MessageStore, topic: str, queue_id: int, offset: int) -> memoryview | None:
    """The stored record at a queue offset (None once retention removed it)."""
    found = store.get_messages(topic, queue_id, offset, 1, 1 << 30)
    if not found.message_count:
        return None
    return found.buffers[0]


def aligned_retry(topics: TopicConfigManager, group: str, topic: str) -> str | None:
    """The pop retry topic of `topic` for `group` if it has one queue per queue of `topic` (several):
    whoever made it so (the AMQP gateway, for a priority queue's levels) wants what is handed back
    kept apart by queue. A message handed back then goes to the retry queue of its own queue id, and
    a pop of one queue takes that retry queue first and no other."""
    retry = pop_retry_topic(group, topic)
    own, theirs = topics.get(topic), topics.get(retry)
    if own is None or theirs is None or own.read_queue_nums < 2:
        return None
    return retry if theirs.read_queue_nums == own.read_queue_nums else None


def reconsume_times_of(record: memoryview) -> int:
    layout = record_layout(record)
    return int.from_bytes(record[layout.reconsume_at : layout.reconsume_at + 4], "big", signed=True)


def repost(
    submit: Submit, record: memoryview, topic: str, queue_id: int, add: bytes, reconsume_times: int
) -> PutResult:
    """Store a copy of `record` under `topic` with `add` appended to its properties; body, flag,
    born time and host stay as they were. `submit`: the broker writer's."""
    meta = read_record_meta(record, 0, len(record))
    if meta is None or meta is BLANK:
        return PutResult(PutStatus.MESSAGE_ILLEGAL, "not a whole record")
    props = bytes(record[meta.props_start : meta.props_end])
    if props and not props.endswith(b"\x02"):
        props += b"\x02"
    born_end = POS_BORNHOST + (20 if meta.sys_flag & BORNHOST_V6_FLAG else 8)
    return submit(
        PutCommand(
            topic,
            queue_id,
            bytes(record[meta.body_start : meta.body_start + meta.body_len]),
            props + add,
            int.from_bytes(record[POS_FLAG : POS_FLAG + 4], "big", signed=True),
            meta.sys_flag,
            int.from_bytes(record[POS_BORNTIMESTAMP : POS_BORNTIMESTAMP + 8], "big", signed=True),
            bytes(record[POS_BORNHOST:born_end]),
            reconsume_times,
        )
    )


class ReviveService:
    def __init__(
        self,
        *,
        table: CheckpointTable,
        revive_log: ReviveLog,
        store: MessageStore,
        submit: Submit,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        written: Callable[[], None],
        topic_created: Callable[[], None],
        wake: Callable[[list[tuple[str, int]]], None],
        progress_path: Path,
    ) -> None:
        self.table = table
        self.log = revive_log
        self.store = store
        self._submit = submit
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self._written = written
        self._topic_created = topic_created
        self._wake = wake
        self.progress_path = progress_path
        self._woken: set[tuple[int, str, int]] = set()
        self._saved: dict[int, int] | None = None  # the progress last written
        self.revived = 0  # messages stored again (retry topic or DLQ), for runtime info and tests

    # ------------------------------------------------------------ recovery

    def recover(self) -> int:
        """Rebuild the open checkpoints from the revive topic; the number of records read."""
        self.store.dispatch()  # revive records are dispatched lazily: every one is in its queue now
        progress = load_json(self.progress_path, ReviveProgress).offset_table
        count = 0
        topic = self.log.topic
        for queue in range(self.log.queue_num):
            start = max(progress.get(queue, 0), self.store.get_min_offset(topic, queue))
            for queue_offset, record in self.log.replay(queue, start):
                count += 1
                if isinstance(record, CheckpointRecord):
                    self.table.add(OpenCheckpoint(record, queue, queue_offset))
                    if record.offsets:
                        self._popped_up_to(record)
                else:
                    self.table.settle(record.key, record.bits)
        return count

    def _popped_up_to(self, record: CheckpointRecord) -> None:
        """A checkpoint newer than the saved offsets moves its group's offset past its messages."""
        end = record.start_offset + record.offsets[-1] + 1
        current = self.offsets.query(record.group, record.topic, record.queue_id)
        if current is None or current < end:
            self.offsets.commit(record.group, record.topic, record.queue_id, end)

    def save_progress(self) -> None:
        """Where replay starts next time: computed first, then the offsets it relies on saved. A
        replica keeps what it saved as a master (its table is empty: it would skip every record
        still open, and a promotion replays from the progress)."""
        if self.store.replica:
            return
        topic = self.log.topic
        low = self.table.low_waters()
        table = {q: low.get(q, self.store.get_max_offset(topic, q)) for q in range(self.log.queue_num)}
        self.offsets.persist()
        if table != self._saved:
            save_json(self.progress_path, ReviveProgress(offset_table=table))
            self._saved = table

    # ------------------------------------------------------------ the loop

    def rebuild(self) -> None:
        """This broker was promoted: its pop state is what the replicated revive topic says. Called
        by the promotion itself, before a pop or an ack can come: a checkpoint written from then on
        must not be dropped by a later rebuild, nor an ack of an earlier one refused meanwhile."""
        self.table.clear()
        log.info("pop state rebuilt on promotion: %d revive records", self.recover())

    async def run(self) -> None:
        while True:
            if not self.store.replica:
                await self.revive_due()
            next_deadline = self.table.next_deadline()
            wait = _TICK if next_deadline is None else min(_TICK, max(0.0, (next_deadline - now_ms()) / 1000))
            await asyncio.sleep(wait)

    async def revive_due(self) -> None:
        now = now_ms()
        for ck in self.table.due(now):
            await self._revive(ck)
        self._wake_fifo(now)

    def _wake_fifo(self, now: int) -> None:
        """A FIFO queue whose checkpoints all expired may be popped again: wake its waiters."""
        woken = set()
        for deadline, topic, queue_id in self.table.fifo_deadlines():
            if deadline <= now:
                key = (deadline, topic, queue_id)
                woken.add(key)
                if key not in self._woken:
                    self._wake([(topic, queue_id)])
        self._woken = woken

    async def revive_now(self, ck: OpenCheckpoint) -> None:
        """Bring back a checkpoint due at once (a message handed back with invisible time 0), unless
        this broker is a replica, whose revives the master does."""
        if not self.store.replica:
            await self._revive(ck)
            # in the retry topic's ConsumeQueue before the caller hears back, so that a pop right
            # after (an AMQP basic.get after a requeue) finds it, not only after the next dispatch
            self.store.dispatch()

    async def _revive(self, ck: OpenCheckpoint) -> None:
        record = ck.record
        bits = self.table.settle(record.key, ck.pending)
        if not bits:
            return
        group = self.groups.groups.get(record.group)
        max_times = group.retry_max_times if group is not None else DEFAULT_RETRY_MAX_TIMES
        retry_topic = (
            record.topic
            if record.topic.startswith("%RETRY%")
            else pop_retry_topic(record.group, record.topic)
        )
        add = b"" if record.topic == retry_topic else f"RETRY_TOPIC\x01{record.topic}\x02".encode()
        # (a message of a retry topic goes back to its own queue)
        aligned = record.topic == retry_topic or aligned_retry(self.topics, record.group, record.topic)
        retry_queue = record.queue_id if aligned else 0
        puts: list[tuple[int, PutResult]] = []
        for offset in ck.offsets(bits):
            message = read_message(self.store, record.topic, record.queue_id, offset)
            if message is None:
                continue  # removed by retention: nothing left to bring back
            try:
                times = reconsume_times_of(message) + 1
            except ProtocolError:
                log.error(
                    "popped message %s@%d:%d is damaged; dropped", record.topic, record.queue_id, offset
                )
                continue
            if times > max_times:
                target, queue_id = self._ensure(DLQ_GROUP_PREFIX + record.group), 0
            else:
                target, queue_id = self._ensure(retry_topic), retry_queue
            puts.append((offset, repost(self._submit, message, target, queue_id, add, times)))
        failed = 0
        for offset, result in puts:
            if result.status is not PutStatus.PUT_OK:
                failed |= 1 << ck.index_of(offset)
                log.error(
                    "reviving %s@%d:%d failed: %s", record.topic, record.queue_id, offset, result.status.name
                )
        done = bits & ~failed
        if done:  # settled before the copies can be popped (the next dispatch): no crash revives twice
            self.log.append(ck.revive_queue, settled(record, done, revived=True))
        self._written()
        for offset, result in puts:
            if result.status is PutStatus.PUT_OK and await result.durable() is not PutStatus.PUT_OK:
                log.warning("revived %s@%d:%d is not flushed yet", record.topic, record.queue_id, offset)
        self.revived += len(puts) - failed.bit_count()
        if failed:  # try again a little later: nothing un-acked is dropped
            ck.deadline = now_ms() + _RETRY_AFTER_FAILURE_MS
            self.table.reopen(ck, failed)

    def _ensure(self, topic: str) -> str:
        if self.topics.ensure(topic, 1, PERM_READ | PERM_WRITE):
            self._topic_created()
        return topic
