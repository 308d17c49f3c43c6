"""Orderly consumption: per queue one batch at a time, in queue order, only while the queue is locked.

A failure is retried in place after 1 s, never skipped; only once a message has failed
`max_reconsume_times` times (unlimited by default, as in RocketMQ) does it go to the dead-letter
queue `%DLQ%<group>`, so the queue can go on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from ferrymq.client.aio import wait_event
from ferrymq.client.message import MessageExt
from ferrymq.client.process_queue import ProcessQueue, batches
from ferrymq.client.redelivery import Redelivery

ORDERLY_RETRY_DELAY = 1.0
LOCK_WAIT = 0.5  # how often an idle or unlocked queue's loop looks again


class OrderlyConsumption:
    def __init__(
        self, *, listeners: Callable[[list[MessageExt]], Awaitable[bool]], redelivery: Redelivery,
        locking: bool, batch_size: int, max_reconsume_times: int, settled: Callable[[ProcessQueue], None],
        stop: asyncio.Event,
    ) -> None:  # fmt: skip
        """`locking`: consume a queue only while holding its broker lock (CLUSTERING)."""
        self.listeners = listeners
        self.redelivery = redelivery
        self.locking = locking
        self.batch_size = batch_size
        self.max_reconsume_times = max_reconsume_times
        self.settled = settled
        self.stop = stop

    def pulled(self, pq: ProcessQueue, fresh: list[MessageExt]) -> None:
        """Nothing to do: adding them woke the queue's loop."""

    def queue_loop(self, pq: ProcessQueue):
        return self._run(pq)

    async def drain(self, timeout: float) -> None:
        """The per-queue loops end with their queues."""

    async def _run(self, pq: ProcessQueue) -> None:
        """The queue's messages one batch at a time, in order, while locked; retry a failure in place."""
        while not pq.dropped and not self.stop.is_set():
            if not pq.messages or (self.locking and not pq.locked()):
                pq.work.clear()
                await wait_event(pq.work, LOCK_WAIT)
                continue
            batch = next(batches(pq.head(self.batch_size), self.batch_size))
            if await self.listeners(batch) or await self._give_up(pq, batch):
                pq.remove(batch)
                self.settled(pq)
                continue
            await wait_event(self.stop, ORDERLY_RETRY_DELAY)  # RocketMQ's SUSPEND_CURRENT_QUEUE_A_MOMENT

    async def _give_up(self, pq: ProcessQueue, batch: list[MessageExt]) -> bool:
        """After a failure: messages that used up their attempts go to `%DLQ%<group>`
        (CONSUMER_SEND_MSG_BACK with delay level -1); True when that was all of them, False when
        the batch is to be consumed again in place (RocketMQ's checkReconsumeTimes)."""
        again = False
        for m in batch:
            if m.reconsume_times < self.max_reconsume_times or await self.redelivery.send_back(
                pq.mq, [m], -1
            ):
                m.reconsume_times += 1
                again = True
        return not again
