"""PopService: RocketMQ 5 pop consumption, independent of any transport.

A pop takes up to N messages of a group from one queue or any queue of a topic (and from the
group's pop retry topic), makes them invisible for a while and gives each a receipt handle. Per
popped batch and queue one checkpoint record goes to the revive topic; acks, batch acks and
invisible-time changes append ack records there. The open checkpoints live in a CheckpointTable;
the ReviveService brings back what was not acked in time. The group's consumer offset moves as
messages are popped, so offsets and lag mean for pop groups what they mean for pull groups.

FIFO groups (``consume_message_orderly``, or a pop asking ``order``): a queue with an open
checkpoint hands out nothing more until it is acked; when it expires, the same offsets are handed
out again with the attempt count raised (or dead-lettered past ``retry_max_times``).

Remoting processors, the gRPC proxy and the AMQP gateway call these methods with plain
parameters; errors are PopError with a RocketMQ response code.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ferrymq.broker.consumption import ConsumptionControl
from ferrymq.broker.filters import FilterCache, FilterError, SubscriptionFilter
from ferrymq.broker.groups import SubscriptionGroupManager
from ferrymq.broker.long_polling import PullHoldService
from ferrymq.broker.offsets import ConsumerOffsetManager
from ferrymq.broker.pop.records import CheckpointRecord, revive_topic, settled
from ferrymq.broker.pop.revive import (
    ReviveService,
    Submit,
    aligned_retry,
    now_ms,
    read_message,
    reconsume_times_of,
    repost,
)
from ferrymq.broker.pop.revive_log import ReviveLog
from ferrymq.broker.pop.table import CheckpointTable, OpenCheckpoint
from ferrymq.broker.topics import DLQ_GROUP_PREFIX, PERM_READ, PERM_WRITE, TopicConfigManager
from ferrymq.metrics.tally import Tally
from ferrymq.net.tasks import BackgroundTasks
from ferrymq.protocol.bodies import SubscriptionGroupConfig
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.errors import ProtocolError
from ferrymq.protocol.pop import (
    INIT_MODE_MIN,
    ORDER_REVIVE_QUEUE,
    RETRY_PREFIX,
    ReceiptHandle,
    msg_offset_info,
    order_count_info,
    pop_response_fields,
    pop_retry_topic,
    queue_offset_of,
    real_topic,
    stamp_batch,
    start_offset_info,
    topic_type,
)
from ferrymq.protocol.retry_policy import next_delay_ms
from ferrymq.store import GetStatus, MessageStore, PutResult, PutStatus

log = logging.getLogger(__name__)

MAX_POP_BATCH = 32  # RocketMQ refuses larger pops
MAX_POLL_MS = 30_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000  # RocketMQ proxy's maxInvisibleTimeMills; well inside retention
POP_FROM_RETRY_PROBABILITY = 0.2  # RocketMQ's popFromRetryProbability (20 %)
_MOVED = (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY)


class PopError(Exception):
    """A pop, ack or invisible-time change refused; `code` is RocketMQ's response code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class PopResult:
    """What a pop found: stored records stamped with POP_CK, and RocketMQ's response header values."""

    pop_time: int
    invisible_time: int
    revive_qid: int
    chunks: list[bytes] = field(default_factory=list)  # stamped records, one chunk per checkpoint
    count: int = 0
    rest_num: int = 0
    msg_offsets: list[tuple[str, int, str]] = field(default_factory=list)  # offsets comma-joined
    order_counts: list[tuple[str, int, int]] | None = None
    _checkpoints: list[tuple[str, CheckpointRecord]] = field(default_factory=list, repr=False)
    _puts: list[PutResult] = field(default_factory=list, repr=False)

    @property
    def found(self) -> bool:
        return self.count > 0

    @property
    def body(self) -> bytes:
        """The records as a PULL/POP answer carries them."""
        return b"".join(self.chunks)

    @property
    def handles(self) -> list[str]:
        """The receipt handle of each message, in order (a handle = its checkpoint's prefix + offset)."""
        return [prefix + str(ck.start_offset + d) for prefix, ck in self._checkpoints for d in ck.offsets]

    def header_fields(self) -> dict[str, str]:
        """PopMessageResponseHeader's extFields."""
        return pop_response_fields(
            self.pop_time,
            self.invisible_time,
            self.revive_qid,
            self.rest_num,
            start_offset_info([(ck.topic, ck.queue_id, ck.start_offset) for _, ck in self._checkpoints]),
            msg_offset_info(self.msg_offsets),
            None if self.order_counts is None else order_count_info(self.order_counts),
        )


class PopService:
    def __init__(
        self,
        *,
        store: MessageStore,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        hold: PullHoldService,
        filters: FilterCache,
        consumption: ConsumptionControl,
        broker_name: str,
        cluster_name: str,
        config_dir: Path,
        submit: Submit,
        written: Callable[[], None],
        replicate: Callable[[], None],
        topic_created: Callable[[], None],
        revive_queue_num: int = 8,
        max_transfer_bytes: int = 256 * 1024,
        progress_interval: float = 5.0,
    ) -> None:
        self.store = store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.hold = hold
        self.filters = filters
        self.consumption = consumption
        self.broker_name = broker_name
        self.max_transfer_bytes = max_transfer_bytes
        self.progress_interval = progress_interval
        self._written = written
        self._topic_created = topic_created
        self.table = CheckpointTable()
        self.delivered: Tally[tuple[str, str]] = Tally()  # (topic, group) handed out, for metrics
        self._submit = submit
        self.log = ReviveLog(store, submit, revive_topic(cluster_name), revive_queue_num, replicate)
        self.revive = ReviveService(
            table=self.table,
            revive_log=self.log,
            store=store,
            submit=submit,
            topics=topics,
            groups=groups,
            offsets=offsets,
            written=written,
            topic_created=topic_created,
            wake=hold.arrived,
            progress_path=config_dir / "popReviveOffset.json",
        )
        self._tasks = BackgroundTasks("pop service")
        self._next_revive_queue = 0
        self._turn = itertools.count()
        self._closing = False
        self._started = False  # until start() replayed the revive topic

    # ------------------------------------------------------------ life cycle

    async def start(self) -> None:
        """Rebuild the open checkpoints from the revive topic, then revive in the background."""
        if self.topics.ensure(self.log.topic, self.log.queue_num, PERM_READ | PERM_WRITE):
            self._topic_created()
        records = self.revive.recover()
        if records:
            log.info("pop state: %d revive records replayed, %d checkpoints open", records, len(self.table))
        self._started = True
        self._tasks.spawn(self.revive.run(), name="pop revive")
        self._tasks.spawn(self._save_progress_regularly(), name="pop revive progress")

    def promoted(self) -> None:
        """This broker has just become the master (it is no replica any more): take over the pop
        state the revive topic holds, at once (see ReviveService.rebuild)."""
        if self._started:
            self.revive.rebuild()

    async def close(self) -> None:
        """Stop reviving and answer held pops now (acks still work until the store closes)."""
        self._closing = True
        self.hold.wake_all()
        await self._tasks.close()
        self.revive.save_progress()

    async def _save_progress_regularly(self) -> None:
        while True:
            await asyncio.sleep(self.progress_interval)
            self.revive.save_progress()

    # ------------------------------------------------------------ pop

    async def pop(
        self,
        group: str,
        topic: str,
        queue_id: int,
        max_messages: int,
        invisible_ms: int,
        poll_ms: int = 0,
        *,
        expression: str | None = None,
        expression_type: str | None = None,
        init_mode: int = INIT_MODE_MIN,
        order: bool = False,
        client: object = None,
    ) -> PopResult:
        """Up to `max_messages` of `topic` for `group` (queue_id -1: any queue), invisible for
        `invisible_ms`; an empty pop waits up to `poll_ms` for a message to arrive."""
        config, read_queues = self._check(group, topic, queue_id)
        if not 0 < max_messages <= MAX_POP_BATCH:
            raise PopError(ResponseCode.INVALID_PARAMETER, f"a pop takes 1 to {MAX_POP_BATCH} messages")
        if not 0 < invisible_ms <= MAX_INVISIBLE_MS:
            raise PopError(
                ResponseCode.INVALID_PARAMETER,
                f"invisible time must be 1 ms to {MAX_INVISIBLE_MS} ms, not {invisible_ms}",
            )
        try:
            flt = self.filters.get(expression or "*", expression_type or "TAG")
        except FilterError as e:
            raise PopError(e.code, str(e)) from None
        fifo = bool(order or config.consume_message_orderly)
        poll = 0 if self._closing else min(max(poll_ms, 0), MAX_POLL_MS) / 1000
        deadline = time.monotonic() + poll
        queues = [queue_id] if queue_id >= 0 else self._rotation(read_queues)
        aligned = aligned_retry(self.topics, group, topic) if queue_id >= 0 and read_queues > 1 else None
        control = self.consumption
        watched = control.watches(group)
        wanted = await control.admit(group, client, max_messages, poll, topic) if watched else max_messages
        topic_config = self.topics.get(topic)
        while True:
            result = self._pop_now(
                group, config, topic, queues, wanted, invisible_ms, flt, fifo, init_mode, aligned
            )
            remaining = deadline - time.monotonic()
            if result.count or not wanted or remaining <= 0 or self._closing:
                break
            await self._wait(group, self._watched(group, topic, queues, fifo), remaining, fifo)
            if self.topics.get(topic) is not topic_config:
                break  # deleted (or deleted and made again) while this pop waited: not its messages
            if control.watches(group):  # paused or limited while this pop waited
                left = max(deadline - time.monotonic(), 0)
                wanted = await control.admit(group, client, max_messages, left, topic)
        if result.count:
            control.took(group, result.count, topic, client, sum(map(len, result.chunks)))
            for put in result._puts:  # SYNC_FLUSH: the checkpoints are on disk before the messages go
                if await put.durable() is not PutStatus.PUT_OK:
                    log.warning("pop checkpoint of group %s not flushed in time", group)
        return result

    def _pop_now(
        self,
        group: str,
        config: SubscriptionGroupConfig,
        topic: str,
        queues: list[int],
        wanted: int,
        invisible_ms: int,
        flt: SubscriptionFilter,
        fifo: bool,
        init_mode: int,
        aligned: str | None = None,
    ) -> PopResult:
        """`aligned`: the topic's retry topic if it has a queue per queue (see `aligned_retry`)."""
        pop_time = now_ms()
        result = PopResult(pop_time, invisible_ms, ORDER_REVIVE_QUEUE if fifo else self._pick_revive_queue())
        if fifo:
            result.order_counts = []
            for queue_id in queues:
                if result.count >= wanted:
                    break
                self._pop_fifo_queue(result, group, config, topic, queue_id, wanted, flt, init_mode)
            return result
        if aligned is not None:
            for source in (aligned, topic):  # its own handed-back messages first, then the queue
                if result.count < wanted:
                    self._pop_queue(
                        result, group, source, queues[0], wanted, flt, init_mode, topic, order=False
                    )
            return result
        retry = pop_retry_topic(group, topic)
        retry_queues = self._rotation(tc.read_queue_nums) if (tc := self.topics.get(retry)) else []
        retry_first = bool(retry_queues) and random.random() < POP_FROM_RETRY_PROBABILITY
        for source, source_queues in (
            ((retry, retry_queues), (topic, queues))
            if retry_first
            else ((topic, queues), (retry, retry_queues))
        ):
            for queue_id in source_queues:
                if result.count >= wanted:
                    return result
                self._pop_queue(result, group, source, queue_id, wanted, flt, init_mode, topic, order=False)
        return result

    def _pop_queue(
        self,
        result: PopResult,
        group: str,
        topic: str,
        queue_id: int,
        wanted: int,
        flt: SubscriptionFilter,
        init_mode: int,
        original: str,
        *,
        order: bool,
    ) -> None:
        """Pop from one queue at the group's offset: one checkpoint for what is found."""
        store = self.store
        offset = self._offset(group, topic, queue_id, init_mode)
        count = wanted - result.count
        found = store.get_messages(topic, queue_id, offset, count, self.max_transfer_bytes, flt.tag_codes)
        if found.status in _MOVED:  # the offset fell out of the queue's range: go on from where it is
            offset = found.next_begin_offset
            self.offsets.commit(group, topic, queue_id, offset)
            found = store.get_messages(topic, queue_id, offset, count, self.max_transfer_bytes, flt.tag_codes)
        if flt.sql is not None:
            found = flt.narrow(found)
        result.rest_num += max(0, found.max_offset - found.next_begin_offset)
        if not found.message_count:
            if found.next_begin_offset > offset:  # filtered out or removed: skipped for good
                self.offsets.commit(group, topic, queue_id, found.next_begin_offset)
            return
        if self._hand_out(result, group, topic, queue_id, found.buffers, original, order=order, reconsume=0):
            self.offsets.commit(group, topic, queue_id, found.next_begin_offset)
            self.delivered.add((topic, group), found.message_count, found.total_size)

    def _hand_out(
        self,
        result: PopResult,
        group: str,
        topic: str,
        queue_id: int,
        buffers: list[memoryview],
        original: str,
        *,
        order: bool,
        reconsume: int,
        stamp_reconsume: bool = False,
    ) -> bool:
        """Stamp the records in `buffers` (popped from one queue), write their checkpoint and add
        them to the result; False if the checkpoint could not be stored (nothing is handed out)."""
        start = queue_offset_of(buffers[0])
        revive_queue = (
            _fifo_revive_queue(group, topic, queue_id, self.log.queue_num) if order else result.revive_qid
        )
        pop_time = self._free_pop_time(group, topic, queue_id, start, result.pop_time)
        prefix = (
            f"{start} {pop_time} {result.invisible_time} {result.revive_qid} {topic_type(topic)} "
            f"{self.broker_name} {queue_id} "
        )
        chunk, relative, joined = stamp_batch(
            buffers,
            prefix.encode(),
            original.encode() if topic != original else None,
            reconsume if stamp_reconsume else None,
        )
        ck = CheckpointRecord(
            group, topic, queue_id, start, pop_time, result.invisible_time, relative, result.revive_qid,
            order, reconsume,
        )  # fmt: skip
        put = self.log.append(revive_queue, ck)
        if put.status is not PutStatus.PUT_OK:
            if not result.count:
                raise PopError(ResponseCode.SYSTEM_ERROR, f"pop checkpoint not stored: {put.status.name}")
            return False  # what was found so far goes out; these stay where they are
        result._puts.append(put)
        self.table.add(OpenCheckpoint(ck, revive_queue, put.queue_offset))
        result.chunks.append(chunk)
        result.count += len(relative)
        result._checkpoints.append((prefix, ck))
        result.msg_offsets.append((topic, queue_id, joined))
        if result.order_counts is not None:
            result.order_counts.append((topic, queue_id, reconsume))
        return True

    def _pop_fifo_queue(
        self,
        result: PopResult,
        group: str,
        config: SubscriptionGroupConfig,
        topic: str,
        queue_id: int,
        wanted: int,
        flt: SubscriptionFilter,
        init_mode: int,
    ) -> None:
        """A FIFO queue: nothing while a checkpoint is open; the same offsets again once all expired."""
        open_cks = self.table.fifo(group, topic, queue_id)
        if open_cks:
            if any(ck.deadline > result.pop_time for ck in open_cks):
                return  # the previous batch is still being consumed
            times = max(ck.record.reconsume for ck in open_cks) + 1
            offsets = sorted(o for ck in open_cks for o in ck.offsets(ck.pending))
            records = [
                r for r in (read_message(self.store, topic, queue_id, o) for o in offsets) if r is not None
            ]
            # the new delivery (or the dead letters) is stored before the old checkpoints close
            if records and times <= config.retry_max_times:
                delivered = self._hand_out(
                    result,
                    group,
                    topic,
                    queue_id,
                    records,
                    topic,
                    order=True,
                    reconsume=times,
                    stamp_reconsume=True,
                )
                if delivered:
                    for ck in open_cks:
                        self._settle(ck, ck.pending, revived=True)
                return
            for record in records:  # attempts used up: dead letters, and the queue goes on
                put = self._dead_letter(group, record, times)
                if put.status is not PutStatus.PUT_OK:
                    return  # the checkpoints stay: the next pop tries again
                result._puts.append(put)
            for ck in open_cks:
                self._settle(ck, ck.pending, revived=True)
        self._pop_queue(result, group, topic, queue_id, wanted, flt, init_mode, topic, order=True)

    def _dead_letter(self, group: str, record: memoryview, times: int) -> PutResult:
        dlq = DLQ_GROUP_PREFIX + group
        if self.topics.ensure(dlq, 1, PERM_READ | PERM_WRITE):
            self._topic_created()
        put = repost(self._submit, record, dlq, 0, b"", times)
        if put.status is PutStatus.PUT_OK:
            self._written()
        else:
            log.error("dead letter of group %s not stored: %s", group, put.status.name)
        return put

    def _offset(self, group: str, topic: str, queue_id: int, init_mode: int) -> int:
        offset = self.offsets.query(group, topic, queue_id)
        if offset is None:
            store = self.store
            low = store.get_min_offset(topic, queue_id)
            # a new group starts at the first message while the queue still holds it (as pull's
            # "last" does), else at the end, unless it asks for the first (init mode MIN)
            if init_mode == INIT_MODE_MIN or low == 0 or topic.startswith(RETRY_PREFIX):
                offset = low
            else:  # RocketMQ hands out the last message
                offset = max(0, store.get_max_offset(topic, queue_id) - 1)
            self.offsets.commit(group, topic, queue_id, offset)
        return offset

    def _free_pop_time(self, group: str, topic: str, queue_id: int, start: int, pop_time: int) -> int:
        """A pop time that names no open checkpoint yet (a checkpoint's key includes it)."""
        while self.table.get((group, topic, queue_id, start, pop_time)) is not None:
            pop_time += 1
        return pop_time

    def _pick_revive_queue(self) -> int:
        queue = self._next_revive_queue
        self._next_revive_queue = (queue + 1) % self.log.queue_num
        return queue

    def _watched(self, group: str, topic: str, queues: list[int], fifo: bool) -> list[tuple[str, int]]:
        """The queues whose new messages end a long poll: the topic's, and (not FIFO) the pop retry
        topic's; before the revive service creates that one, its queue 0 is watched all the same."""
        watched = [(topic, q) for q in queues]
        if not fifo:
            tc = self.topics.get(retry := pop_retry_topic(group, topic))
            watched += [(retry, q) for q in range(tc.read_queue_nums if tc is not None else 1)]
        return watched

    def has_backlog(self, group: str, topic: str, queue_id: int, fifo: bool) -> bool:
        """Whether a pop of this queue could find something now (filters aside)."""
        if fifo and (open_cks := self.table.fifo(group, topic, queue_id)):
            now = now_ms()
            return all(ck.deadline <= now for ck in open_cks)
        offset = self.offsets.query(group, topic, queue_id)
        return self.store.get_max_offset(topic, queue_id) > (offset or 0)

    async def _wait(self, group: str, watched: list[tuple[str, int]], timeout: float, fifo: bool) -> None:
        """Until a message arrives in one of the watched queues (the long-poll wake-ups) or time ends."""
        await self.hold.wait_any(
            watched, timeout, lambda: not any(self.has_backlog(group, t, q, fifo) for t, q in watched)
        )

    async def has_message(
        self, group: str, topic: str, queue_id: int, poll_ms: int = 0, *, order: bool = False
    ) -> bool:
        """NOTIFICATION: whether a pop would find something, waiting up to `poll_ms` for it."""
        config, read_queues = self._check(group, topic, queue_id)
        fifo = bool(order or config.consume_message_orderly)
        queues = [queue_id] if queue_id >= 0 else list(range(read_queues))
        watched = self._watched(group, topic, queues, fifo)
        deadline = time.monotonic() + min(max(poll_ms, 0), MAX_POLL_MS) / 1000
        while True:
            if any(self.has_backlog(group, t, q, fifo) for t, q in watched):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closing:
                return False
            await self._wait(group, watched, remaining, fifo)

    # ------------------------------------------------------------ ack, change invisible time, nack

    async def ack(self, group: str, topic: str, handle: str | ReceiptHandle) -> None:
        """Acknowledge one popped message; PopError if the handle is bad or no longer current."""
        error = (await self.ack_batch(group, topic, [handle]))[0]
        if error is not None:
            raise error

    async def ack_batch(
        self, group: str, topic: str, handles: Iterable[str | ReceiptHandle]
    ) -> list[PopError | None]:
        """Acknowledge many messages: one ack record per checkpoint; an error (or None) per handle."""
        errors: list[PopError | None] = []
        bits: dict[tuple, tuple[OpenCheckpoint, int]] = {}
        for handle in handles:
            try:
                ck, index = self._locate(group, topic, handle)
            except PopError as e:
                errors.append(e)
                continue
            key = ck.record.key
            previous = bits.get(key)
            bits[key] = (ck, (previous[1] if previous else 0) | 1 << index)
            errors.append(None)
        try:
            await self._settle_acks(list(bits.values()))
        except PopError as failure:
            return [e or failure for e in errors]
        return errors

    async def ack_bits(
        self,
        group: str,
        topic: str,
        kind: str,
        queue_id: int,
        start_offset: int,
        pop_time: int,
        bits: int,
    ) -> int:
        """Acknowledge offset start_offset + i for each bit i of `bits`, all of one checkpoint
        (BATCH_ACK_MESSAGE's form: what the handles of one pop share, and a bit set); returns the
        bits refused as not current (acked, changed or redelivered already)."""
        self._check(group, topic, queue_id, own=False)
        ck = self.table.get((group, _actual_topic(kind, topic, group), queue_id, start_offset, pop_time))
        if ck is None:
            return bits
        own, foreign = ck.own_bits(bits)
        taken = own & ck.pending
        if taken:
            await self._settle_acks([(ck, taken)])
        return foreign | ck.relative_bits(own & ~taken)

    async def _settle_acks(self, acks: list[tuple[OpenCheckpoint, int]]) -> None:
        puts = []
        for ck, ck_bits in acks:
            put = self._settle(ck, ck_bits)
            if put.status is not PutStatus.PUT_OK:
                self.table.reopen(ck, ck_bits)
                raise PopError(ResponseCode.SYSTEM_ERROR, f"ack not stored: {put.status.name}")
            puts.append(put)
        for put in puts:
            if await put.durable() is not PutStatus.PUT_OK:
                raise PopError(ResponseCode.FLUSH_DISK_TIMEOUT, "ack stored, but not flushed in time")

    async def change_invisible(
        self, group: str, topic: str, handle: str | ReceiptHandle, invisible_ms: int
    ) -> ReceiptHandle:
        """Make a popped message invisible for `invisible_ms` from now; returns its new handle (the
        old one no longer acks)."""
        if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
            raise PopError(
                ResponseCode.INVALID_PARAMETER, f"invisible time must be 0 to {MAX_INVISIBLE_MS} ms"
            )
        ck, index = self._locate(group, topic, handle)
        old = ck.record
        offset = old.start_offset + old.offsets[index]
        pop_time = self._free_pop_time(
            group, old.topic, old.queue_id, offset, max(now_ms(), old.pop_time + 1)
        )
        new = CheckpointRecord(
            group,
            old.topic,
            old.queue_id,
            offset,
            pop_time,
            invisible_ms,
            [0],
            old.revive_qid,
            old.order,
            old.reconsume,
        )
        put = self.log.append(ck.revive_queue, new)
        if put.status is not PutStatus.PUT_OK:
            raise PopError(ResponseCode.SYSTEM_ERROR, f"new checkpoint not stored: {put.status.name}")
        opened = OpenCheckpoint(new, ck.revive_queue, put.queue_offset)
        self.table.add(opened)
        ack = self._settle(ck, 1 << index)
        for p in (put, ack):
            if await p.durable() is not PutStatus.PUT_OK:
                raise PopError(
                    ResponseCode.FLUSH_DISK_TIMEOUT, "invisible time changed, but not flushed in time"
                )
        if invisible_ms == 0 and not old.order:  # visible again now, not at the revive's next tick
            await self.revive.revive_now(opened)
        return ReceiptHandle(
            offset,
            pop_time,
            invisible_ms,
            old.revive_qid,
            topic_type(old.topic),
            self.broker_name,
            old.queue_id,
            offset,
        )

    async def dead_letter(self, group: str, topic: str, handle: str | ReceiptHandle) -> None:
        """Move a popped message to %DLQ%<group> now and settle its handle (gRPC's
        ForwardMessageToDeadLetterQueue: a FIFO consumer giving up on a message)."""
        ck, index = self._locate(group, topic, handle)
        record = ck.record
        message = read_message(self.store, record.topic, record.queue_id,
                               record.start_offset + record.offsets[index])  # fmt: skip
        if message is not None:
            times = record.reconsume if record.order else reconsume_times_of(message)
            put = self._dead_letter(group, message, times)
            if await put.durable() is not PutStatus.PUT_OK:
                raise PopError(ResponseCode.SYSTEM_ERROR, f"dead letter not stored: {put.status.name}")
        if ck.pending >> index & 1:  # (an ack may have come meanwhile)
            await self._settle_acks([(ck, 1 << index)])

    async def nack(self, group: str, topic: str, handle: str | ReceiptHandle) -> ReceiptHandle:
        """Give a message back: visible again after the group's retry-policy delay for its attempt."""
        ck, index = self._locate(group, topic, handle)
        record = ck.record
        if record.order:
            times = record.reconsume
        else:
            message = read_message(
                self.store, record.topic, record.queue_id, record.start_offset + record.offsets[index]
            )
            times = reconsume_times_of(message) if message is not None else 0
        config = self.groups.groups.get(group)
        policy = config.group_retry_policy if config else SubscriptionGroupConfig(group).group_retry_policy
        return await self.change_invisible(group, topic, handle, next_delay_ms(policy, times))

    def _settle(self, ck: OpenCheckpoint, bits: int, *, revived: bool = False) -> PutResult:
        """Close offsets of a checkpoint in memory, then in the revive topic."""
        record = ck.record
        self.table.settle(record.key, bits)
        put = self.log.append(ck.revive_queue, settled(record, bits, revived))
        if record.order and self.table.get(record.key) is None:
            self.hold.arrived([(record.topic, record.queue_id)])  # the FIFO queue may go on
        return put

    def _locate(self, group: str, topic: str, handle: str | ReceiptHandle) -> tuple[OpenCheckpoint, int]:
        """The open checkpoint a handle names and the message's index in it."""
        if isinstance(handle, str):
            try:
                handle = ReceiptHandle.decode(handle)
            except ProtocolError as e:
                raise PopError(ResponseCode.INVALID_PARAMETER, f"bad receipt handle: {e}") from None
        if handle.broker_name != self.broker_name:
            raise PopError(
                ResponseCode.INVALID_PARAMETER,
                f"receipt handle of broker {handle.broker_name}, this is {self.broker_name}",
            )
        self._check(group, topic, handle.queue_id, own=False)
        actual = _actual_topic(handle.kind, topic, group)
        ck = self.table.get((group, actual, handle.queue_id, handle.start_offset, handle.pop_time))
        index = -1 if ck is None else ck.index_of(handle.offset)
        if ck is None or index < 0 or not ck.pending >> index & 1:
            raise PopError(
                ResponseCode.NO_MESSAGE,
                f"receipt handle {handle.encode()!r} is not current: the message was acked, its invisible "
                "time was changed (use the newer handle), or it was already delivered again",
            )
        return ck, index

    def _check(
        self, group: str, topic: str, queue_id: int, *, own: bool = True
    ) -> tuple[SubscriptionGroupConfig, int]:
        if self.store.replica:  # its log is its master's copy: pop state is written on the master only
            raise PopError(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                f"broker {self.broker_name} is a slave: pop from its master",
            )
        config = self.groups.get(group)
        if config is None:
            raise PopError(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group {group} does not exist"
            )
        if not config.consume_enable:
            raise PopError(ResponseCode.NO_PERMISSION, f"group {group} may not consume")
        tc = self.topics.get(topic)
        if tc is None:
            raise PopError(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} does not exist")
        if not tc.perm & PERM_READ:
            raise PopError(ResponseCode.NO_PERMISSION, f"topic {topic} is not readable")
        if own and not -1 <= queue_id < tc.read_queue_nums:
            raise PopError(
                ResponseCode.INVALID_PARAMETER,
                f"queueId {queue_id} is illegal: topic {topic} has {tc.read_queue_nums} read queues",
            )
        return config, tc.read_queue_nums

    def _rotation(self, n: int) -> list[int]:
        """All queue ids, each pop starting one further (so pops spread over the queues)."""
        start = next(self._turn) % n if n else 0
        return [*range(start, n), *range(start)]

    def runtime_info(self) -> dict[str, str]:
        return {"popCheckpointsOpen": str(len(self.table)), "popRevived": str(self.revive.revived)}


def _actual_topic(kind: str, topic: str, group: str) -> str:
    """The topic an ack's offsets belong to. RocketMQ's clients and proxy name it in ACK and
    CHANGE_MESSAGE_INVISIBLETIME (a retry topic as such); BATCH_ACK and our SDK give the original
    topic and the handle's topic type."""
    if topic.startswith(RETRY_PREFIX):
        return topic
    try:
        return real_topic(kind, topic, group)
    except ProtocolError as e:
        raise PopError(ResponseCode.INVALID_PARAMETER, str(e)) from None


def _fifo_revive_queue(group: str, topic: str, queue_id: int, queue_num: int) -> int:
    return zlib.crc32(f"{group}@{topic}@{queue_id}".encode()) % queue_num
