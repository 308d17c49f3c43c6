"""Concurrent consumption: many batches at once, in any order; a failure is redelivered by the broker.

A failed batch is sent back (it returns through `%RETRY%<group>`), or consumed again here after 5 s
when that fails too. BROADCASTING members have no retry topic: a failure there is logged and dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ferrymq.client.aio import finish, wait_event
from ferrymq.client.message import MessageExt
from ferrymq.client.process_queue import ProcessQueue, batches
from ferrymq.client.redelivery import Redelivery
from ferrymq.net.tasks import BackgroundTasks

log = logging.getLogger(__name__)

LOCAL_RETRY_DELAY = 5.0


class ConcurrentConsumption:
    def __init__(
        self, group: str, *, tasks: BackgroundTasks, listeners: Callable[[list[MessageExt]], Awaitable[bool]],
        redelivery: Redelivery | None, batch_size: int, concurrency: int,
        settled: Callable[[ProcessQueue], None], stop: asyncio.Event,
    ) -> None:  # fmt: skip
        """`redelivery`: None for BROADCASTING; `settled(pq)`: messages left the queue (its offset
        to commit may have moved); `stop`: the consumer is shutting down."""
        self.group = group
        self.tasks = tasks
        self.listeners = listeners
        self.redelivery = redelivery
        self.batch_size = batch_size
        self.settled = settled
        self.stop = stop
        self._slots = asyncio.Semaphore(concurrency)
        self._running: set[asyncio.Task] = set()  # batches running or waiting, to let them finish at stop

    def pulled(self, pq: ProcessQueue, fresh: list[MessageExt]) -> None:
        for batch in batches(fresh, self.batch_size):
            self._spawn(self._consume(pq, batch))

    def queue_loop(self, pq: ProcessQueue) -> None:
        """Concurrent consumption has no loop of its own per queue."""
        return None

    async def drain(self, timeout: float) -> None:
        """At stop: let the batches in flight finish within `timeout` s; cancel the rest."""
        await finish(self._running, timeout)

    def _spawn(self, coro) -> None:
        task = self.tasks.spawn(coro, name=f"consume {self.group}")
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _consume(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        async with self._slots:
            if pq.dropped or self.stop.is_set():  # left in the queue: its offset was not passed
                return
            Redelivery.starting(messages)
            ok = await self.listeners(messages)
        if pq.dropped:
            return
        messages = [m for m in messages if pq.holds(m)]  # not timed out and sent back meanwhile
        again = []
        if not ok and self.redelivery is not None:
            again = await self.redelivery.send_back(pq.mq, messages)
        elif not ok:
            log.warning("broadcast consumer %s failed %d messages; they are not retried", self.group,
                        len(messages))  # fmt: skip
        pq.remove(m for m in messages if m not in again)
        self.settled(pq)
        if again:
            for m in again:
                m.reconsume_times += 1
            self._spawn(self._consume_later(pq, again))

    async def _consume_later(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        await wait_event(self.stop, LOCAL_RETRY_DELAY)
        if not self.stop.is_set():
            await self._consume(pq, messages)
