"""The pull side of a push consumer: one long-polling loop per owned queue fills its ProcessQueue.

A loop pauses while its queue holds more than the thresholds allow (the consumers are behind), and
for orderly consumption in CLUSTERING mode pulls only while this member holds the queue's broker
lock. What it pulls it hands on; it never consumes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ferrymq.client.aio import wait_event
from ferrymq.client.instance import ClientInstance
from ferrymq.client.message import RETRY_PREFIX, MessageExt, MessageQueue
from ferrymq.client.offset_store import OffsetStore
from ferrymq.client.process_queue import ProcessQueue
from ferrymq.client.pull import PullResult, PullStatus, initial_offset, master_addr, pull, pull_addr
from ferrymq.client.queue_locks import CALL_ERRORS, QueueLocks
from ferrymq.client.selector import MessageSelector
from ferrymq.protocol.message_ext import CompressedBodyError
from ferrymq.protocol.properties import Prop

log = logging.getLogger(__name__)

SUSPEND_MS = 15_000  # long-polling hold asked of the broker
PULL_RETRY_DELAY = 3.0
LOCK_RETRY_DELAY = 0.5
FLOW_CONTROL_CHECK = 1.0
MIB = 1 << 20


@dataclass(frozen=True)
class PullSettings:
    batch_size: int  # messages asked for per pull
    threshold_count: int  # a queue holding more messages than this pauses its pulls
    threshold_mib: int  # ... or more body MiB than this
    consume_from: str  # where a queue new to the group starts: "last", "first" or "timestamp"
    consume_timestamp: int  # ms, for "timestamp"
    commit_in_pull: bool  # CLUSTERING: each pull also carries the queue's offset to commit


class Puller:
    def __init__(
        self, instance: ClientInstance, group: str, settings: PullSettings, *, offsets: OffsetStore,
        locks: QueueLocks | None, selector_of: Callable[[str], MessageSelector],
        pulled: Callable[[ProcessQueue, list[MessageExt]], None],
        dead_letter: Callable[[MessageQueue, MessageExt], Awaitable[bool]],
    ) -> None:  # fmt: skip
        """`selector_of(topic)`: what of a topic to pull; `pulled(pq, fresh)`: messages new to the
        queue's ProcessQueue (already added to it) are there to consume; `dead_letter(mq, m)`: move a
        message no listener could ever read to the group's DLQ, True once the broker has it."""
        self.instance = instance
        self.group = group
        self.settings = settings
        self.offsets = offsets
        self.locks = locks
        self.selector_of = selector_of
        self.pulled = pulled
        self.dead_letter = dead_letter

    async def run(self, pq: ProcessQueue) -> None:
        """Long-poll one queue while it is ours (until cancelled)."""
        mq, selector, settings = pq.mq, self.selector_of(pq.mq.topic), self.settings
        while True:
            try:
                if self.locks is not None and not pq.locked():
                    await self.locks.lock([pq])
                    if not pq.locked():
                        await asyncio.sleep(LOCK_RETRY_DELAY)
                        continue
                if pq.next_offset is None:  # after the lock: the previous owner has committed by then
                    pq.next_offset = await self.start_offset(mq)
                if len(pq.messages) > settings.threshold_count or pq.size > settings.threshold_mib * MIB:
                    pq.room.clear()
                    await wait_event(pq.room, FLOW_CONTROL_CHECK)
                    continue
                result = await pull(
                    self.instance, await pull_addr(self.instance, mq), mq, self.group, pq.next_offset,
                    selector=selector, max_messages=settings.batch_size, suspend_ms=SUSPEND_MS,
                    commit_offset=self.offsets.get(mq) if settings.commit_in_pull else None,
                )  # fmt: skip
            except CompressedBodyError as e:  # it would stop the queue for good: to the DLQ, then on
                await self._skip_unreadable(pq, e)
                continue
            except Exception as e:  # whatever it was, the queue must not stop for good
                log.warning("pulling %s queue %d for group %s failed: %s", mq.topic, mq.queue_id, self.group,
                            e, exc_info=not isinstance(e, CALL_ERRORS))  # fmt: skip
                await asyncio.sleep(PULL_RETRY_DELAY)
                continue
            self._take(pq, result)

    async def _skip_unreadable(self, pq: ProcessQueue, error: CompressedBodyError) -> None:
        """Move a message whose body does not decompress to the group's DLQ, where it can be looked
        at and resent, and pull on after it; if the broker does not take it, try again later."""
        m = error.message
        try:
            moved = await self.dead_letter(pq.mq, m)
        except CALL_ERRORS:
            moved = False
        if moved:
            log.warning("%s; it is in the dead-letter queue of group %s now", error, self.group)
            pq.next_offset = m.queue_offset + 1
        else:
            log.warning("%s; moving it to the dead-letter queue failed, trying again", error)
            await asyncio.sleep(PULL_RETRY_DELAY)

    def _take(self, pq: ProcessQueue, result: PullResult) -> None:
        if result.status is PullStatus.OFFSET_ILLEGAL:
            log.warning("offset %d of %s queue %d is gone; going on from %d",
                        pq.next_offset, pq.mq.topic, pq.mq.queue_id, result.next_begin_offset)  # fmt: skip
        if result.status is not PullStatus.NO_NEW_MSG:
            pq.next_offset = result.next_begin_offset
        for m in result.messages:  # a redelivery from the retry topic goes to its original topic's listener
            if m.topic.startswith(RETRY_PREFIX) and Prop.RETRY_TOPIC in m.properties:
                m.topic = m.properties[Prop.RETRY_TOPIC]
        self.pulled(pq, pq.add(result.messages))

    async def start_offset(self, mq: MessageQueue) -> int:
        """The stored offset, or for a queue new to the group where `consume_from` says
        (retry queues: from their start, unless starting from a time)."""
        stored = await self.offsets.read(mq)
        if stored is not None:
            return stored
        rule = self.settings.consume_from
        if mq.topic.startswith(RETRY_PREFIX):  # retry queues start at their beginning, or at the end by time
            rule = {"last": "first", "timestamp": "last"}.get(rule, rule)
        addr = await master_addr(self.instance, mq)
        return await initial_offset(self.instance, addr, mq, rule, self.settings.consume_timestamp)
