"""PullConsumer: the application decides which queues to read, when to poll and when to commit.

Positions start at the group's committed offset, or (for a group new to a queue) where
`consume_from` says: "last" (RocketMQ's CONSUME_FROM_LAST_OFFSET: the broker starts new groups at
0 while the queue still holds its first message), "first", or "timestamp".
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import NamedTuple

from ferrymq.client import notices
from ferrymq.client.instance import ClientError, ClientInstance, TLSOption
from ferrymq.client.message import MessageExt, MessageQueue
from ferrymq.client.pull import (
    EVERY_TAG,
    PullStatus,
    commit_offset,
    initial_offset,
    known_pull_addr,
    master_addr,
    pull,
    pull_addr,
    query_offset,
)
from ferrymq.client.push_consumer import CONSUME_FROM_WHERE
from ferrymq.client.selector import MessageSelector, check_on_brokers
from ferrymq.net import RemotingError
from ferrymq.net.tasks import BackgroundTasks
from ferrymq.protocol.bodies import ConsumerData

CONSUME_FROM = ("last", "first", "timestamp")
_LONG_POLL_MS = 15_000  # how long the broker holds a pull while its queue is empty (RocketMQ's push default)

log = logging.getLogger(__name__)


class _Pulled(NamedTuple):
    """One pull's answer: the offset it read from, where the next read starts, what it found."""

    start: int
    next: int
    messages: list[MessageExt]


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class PullConsumer:
    def __init__(
        self,
        group: str,
        namesrv_addr: str,
        *,
        consume_from: str = "last",
        consume_timestamp: int | None = None,
        pull_batch_size: int = 32,
        instance: ClientInstance | None = None,
        tls: TLSOption = False,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        if consume_from not in CONSUME_FROM:
            raise ValueError(f"consume_from must be one of {CONSUME_FROM}, not {consume_from!r}")
        self.group = group
        self.instance = instance or ClientInstance(
            namesrv_addr, tls=tls, access_key=access_key, secret_key=secret_key
        )
        self._own_instance = instance is None
        self.consume_from = consume_from
        self.consume_timestamp = consume_timestamp or int(time.time() * 1000) - 30 * 60 * 1000
        self.pull_batch_size = pull_batch_size
        self.selectors: dict[str, MessageSelector] = {}  # topic -> what of it to read
        self.positions: dict[MessageQueue, int] = {}
        self._committed: dict[MessageQueue, int] = {}
        # One pull in flight per queue; a failed one's error is poll()'s to raise, not the group's to log.
        # A queue's position moves only when poll() hands its answer over, so commit() never covers
        # messages that were pulled but not yet returned (nor those dropped at shutdown).
        self._inflight: dict[MessageQueue, asyncio.Task[None]] = {}
        self._landed: list[tuple[MessageQueue, _Pulled | Exception]] = []  # answers poll() has not taken
        self._waiters: list[asyncio.Future[None]] = []  # polls waiting for the next answer
        self._task_names: dict[MessageQueue, str] = {}
        self._tasks = BackgroundTasks(f"pull consumer {group}")

    async def start(self) -> None:
        if self._own_instance:
            await self.instance.start()
        self.instance.consumers[self.group] = self._consumer_data  # heartbeats say the group is here
        notices.listen(self.instance, self.group, notices.GroupListener(lambda: None, self._reset))

    async def shutdown(self) -> None:
        await self._tasks.close()
        self._inflight.clear()
        self._landed.clear()
        try:
            await self.commit()
        except (ClientError, RemotingError) as e:  # the master is gone: it cannot take offsets now
            log.warning("offsets of group %s not committed at shutdown: %s", self.group, e)
        self.instance.consumers.pop(self.group, None)
        notices.forget(self.instance, self.group)
        if self._own_instance:
            await self.instance.close()

    async def __aenter__(self) -> PullConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.shutdown()

    async def queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues. A topic just created by a first send reaches the NameServers
        a moment later, so a missing route is asked for again for up to `request_timeout`."""
        deadline = time.monotonic() + self.instance.request_timeout
        while (route := await self.instance.existing_route(topic)) is None:
            if time.monotonic() > deadline:
                raise ClientError(f"topic {topic} does not exist: no NameServer has a route for it")
            await asyncio.sleep(0.05)
        return list(route.read_queues)

    async def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Read every queue of `topic`, filtered by `expression`: tags ("TagA || TagB") or a
        MessageSelector (`MessageSelector.sql("a > 5")`)."""
        await self.assign(await self.queues(topic), expression)

    async def assign(self, queues: list[MessageQueue], expression: str | MessageSelector = "*") -> None:
        selector = MessageSelector.of(expression)
        for topic in sorted({mq.topic for mq in queues}):
            await check_on_brokers(self.instance, self.group, topic, selector)
        for mq in queues:
            self.selectors[mq.topic] = selector
            if mq not in self.positions:
                self.positions[mq] = await self._start_offset(mq)
        await self.instance.heartbeat_all()  # the brokers know this member (offset resets reach it)

    def _consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group, consume_type="CONSUME_ACTIVELY", message_model="CLUSTERING",
            consume_from_where=CONSUME_FROM_WHERE[self.consume_from],
            subscription_data_set=[s.subscription(topic, 0) for topic, s in self.selectors.items()],
        )  # fmt: skip

    async def _reset(self, offsets: dict[MessageQueue, int]) -> None:
        """The broker reset the group's offsets (and stored them): the next poll reads from there."""
        for mq, offset in offsets.items():
            if mq in self.positions:
                self.positions[mq] = self._committed[mq] = offset

    async def _start_offset(self, mq: MessageQueue) -> int:
        addr = await self._addr(mq)
        committed = await query_offset(self.instance, addr, mq, self.group)
        if committed is not None and committed >= 0:
            return committed
        return await initial_offset(self.instance, addr, mq, self.consume_from, self.consume_timestamp)

    async def _addr(self, mq: MessageQueue) -> str:
        return await master_addr(self.instance, mq)

    def seek(self, mq: MessageQueue, offset: int) -> None:
        if mq not in self.positions:
            raise ClientError(f"{mq} is not assigned to this consumer")
        self.positions[mq] = offset

    async def poll(self, timeout: float = 1.0) -> list[MessageExt]:
        """The next messages of the assigned queues, waiting up to `timeout` s if none are there.

        Each queue has one pull in flight at a time: queues with messages are pulled back to back,
        empty ones wait at the broker (long polling) without holding the others up. The queues
        answered are pulled again before their messages are returned, so the next pulls travel
        while the caller works on these.
        """
        if not self.positions:
            raise ClientError("no queue assigned: call subscribe() or assign() first")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            self._pull_idle_queues()
            if not self._landed:
                await self._wait_landing(loop, deadline)
            messages: list[MessageExt] = []
            failure = None
            landed, self._landed = self._landed, []
            for mq, pulled in landed:
                self._inflight.pop(mq, None)
                if isinstance(pulled, Exception):  # other queues' messages first; pulled again next poll
                    failure = failure or pulled
                elif self.positions.get(mq) == pulled.start:  # else seek() moved the queue: drop it
                    self.positions[mq] = pulled.next
                    messages += pulled.messages
            if failure is not None and not messages:
                raise failure  # a failed pull, with its reason
            if messages or loop.time() >= deadline:
                if messages:
                    self._pull_idle_queues()
                return messages

    def _pull_idle_queues(self) -> None:
        """Start a pull for each assigned queue that has none in flight."""
        for mq in self.positions:
            if mq not in self._inflight:  # held by the broker only while the queue has nothing
                name = self._task_names.get(mq) or self._task_names.setdefault(mq, f"pull {mq}")
                self._inflight[mq] = self._tasks.spawn(self._pull(mq), name=name)

    async def _wait_landing(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        """Until a pull answers or `deadline` (loop time) passes: one future woken by whichever
        comes first, rather than a wait over every queue's task."""
        waiter = loop.create_future()
        self._waiters.append(waiter)
        timer = loop.call_at(deadline, _wake, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    async def _pull(self, mq: MessageQueue) -> None:
        """One pull of `mq`; its answer (or error, poll()'s to raise) lands for poll() to take."""
        offset = self.positions[mq]
        try:
            result = await pull(
                self.instance, known_pull_addr(self.instance, mq) or await pull_addr(self.instance, mq), mq,
                self.group, offset, selector=self.selectors.get(mq.topic, EVERY_TAG),
                max_messages=self.pull_batch_size, suspend_ms=_LONG_POLL_MS,
            )  # fmt: skip
            # found, filtered out, or moved: go on from there
            nxt = offset if result.status is PullStatus.NO_NEW_MSG else result.next_begin_offset
            pulled: _Pulled | Exception = _Pulled(offset, nxt, result.messages)
        except Exception as e:
            pulled = e
        self._landed.append((mq, pulled))
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            _wake(waiter)

    async def commit(self) -> None:
        """Commit the current positions of every queue that moved since the last commit."""
        for mq, offset in list(self.positions.items()):
            if self._committed.get(mq) != offset:
                await commit_offset(self.instance, await self._addr(mq), mq, self.group, offset)
                self._committed[mq] = offset

    async def committed(self, mq: MessageQueue) -> int | None:
        return await query_offset(self.instance, await self._addr(mq), mq, self.group)
