"""Which queues this member of a consumer group owns, kept up to date (RocketMQ's RebalanceImpl).

In CLUSTERING mode the members split each subscribed topic's queues with a strategy of
`rebalance.py`, every 20 s and at once when a broker says the membership changed; in BROADCASTING
mode every member owns every queue. A new queue is locked (orderly) and positioned before it is
started, so where consumption begins is settled once a rebalance returns; a lost queue is stopped,
its progress committed, and only then its lock let go, so the next owner goes on after it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ferrymq.client.aio import finish, wait_event
from ferrymq.client.instance import ClientError, ClientInstance, TopicRoute
from ferrymq.client.message import MessageQueue
from ferrymq.client.offset_store import OffsetStore
from ferrymq.client.process_queue import ProcessQueue
from ferrymq.client.queue_locks import CALL_ERRORS, QueueLocks
from ferrymq.client.rebalance import allocate, queue_order
from ferrymq.net import RemotingError
from ferrymq.protocol.bodies import GetConsumerListByGroupResponseBody, decode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.remoting import RemotingCommand

log = logging.getLogger(__name__)

REBALANCE_INTERVAL = 20.0
RELEASE_WAIT = 3.0  # how long a dropped orderly queue waits for its current message


class Rebalancer:
    def __init__(
        self, instance: ClientInstance, group: str, *, allocation: str | None,
        topics: Callable[[], list[str]], offsets: OffsetStore, locks: QueueLocks | None,
        start_offset: Callable[[MessageQueue], Awaitable[int]], run: Callable[[ProcessQueue], None],
    ) -> None:  # fmt: skip
        """`allocation`: the strategy splitting queues among members, None for BROADCASTING (all are
        ours); `topics()`: the subscribed topics; `locks`: for orderly CLUSTERING consumers;
        `run(pq)`: start pulling (and consuming) a queue, its tasks added to `pq.tasks`."""
        self.instance = instance
        self.group = group
        self.allocation = allocation
        self.topics = topics
        self.offsets = offsets
        self.locks = locks
        self.start_offset = start_offset
        self.run = run
        self.queues: dict[MessageQueue, ProcessQueue] = {}
        self.wanted = asyncio.Event()  # set to rebalance now
        self._known_brokers: set[str] = set()

    async def loop(self, stop: asyncio.Event) -> None:
        """Rebalance every REBALANCE_INTERVAL s, or at once when asked, until `stop`."""
        while not stop.is_set():
            await wait_event(self.wanted, REBALANCE_INTERVAL)
            self.wanted.clear()  # a notice arriving during the rebalance below starts another
            if not stop.is_set():
                try:
                    await self.rebalance()
                except Exception:
                    log.exception("rebalance of group %s failed", self.group)

    async def rebalance(self) -> None:
        """Work out this member's queues of every subscribed topic; start new ones, release lost ones."""
        routes: dict[str, TopicRoute] = {}
        for topic in self.topics():
            try:
                route = await self.instance.existing_route(topic)
            except CALL_ERRORS as e:
                log.warning("no route for topic %s (group %s): %s", topic, self.group, e)
                continue
            if route is not None:
                routes[topic] = route
        brokers = self.instance.broker_addrs()
        if not brokers <= self._known_brokers:  # tell new brokers about us before asking who is in
            self._known_brokers = brokers
            await self.instance.heartbeat_all()
        for topic, route in routes.items():
            try:
                wanted = await self._allocated(route)
            except CALL_ERRORS as e:
                log.warning("rebalance of topic %s for group %s failed: %s", topic, self.group, e)
                continue
            await self._assign(topic, wanted)

    async def reset(self, offsets: dict[MessageQueue, int]) -> None:
        """The broker reset the group's offsets (and stored them): drop what was pulled of those
        queues and go on from the new offsets at once."""
        for mq, offset in offsets.items():
            old = self.queues.get(mq)
            if old is None:
                continue
            old.drop()  # consumes still running finish without committing
            await finish(old.tasks[:1], 0)
            await finish(old.tasks[1:], RELEASE_WAIT)  # orderly: its current message completes first
            pq = ProcessQueue(mq)
            pq.next_offset, pq.locked_at = offset, old.locked_at  # the broker lock stays ours
            self.offsets.update(mq, offset)
            self._start(pq)

    async def _allocated(self, route: TopicRoute) -> set[MessageQueue]:
        if self.allocation is None:
            return set(route.read_queues)
        ids = await self._consumer_ids(route)
        return set(allocate(self.allocation, self.instance.client_id, ids, route.read_queues))

    async def _consumer_ids(self, route: TopicRoute) -> list[str]:
        errors = []
        for addr in sorted(set(route.masters.values())):
            request = RemotingCommand(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                      ext_fields={"consumerGroup": self.group})  # fmt: skip
            try:
                response = await self.instance.invoke(addr, request)
            except RemotingError as e:
                errors.append(f"{addr}: {e}")
                continue
            if response.code == ResponseCode.SUCCESS:
                return decode_body(GetConsumerListByGroupResponseBody, response.body).consumer_id_list
            errors.append(f"{addr}: {response.remark}")
        raise ClientError(f"cannot list the members of group {self.group}: " + "; ".join(errors))

    async def _assign(self, topic: str, wanted: set[MessageQueue]) -> None:
        for mq, pq in list(self.queues.items()):
            if mq.topic == topic and mq not in wanted:
                await self._release(pq)
        new = [ProcessQueue(mq) for mq in sorted(wanted - self.queues.keys(), key=queue_order)]
        await self._position(new)
        for pq in new:
            self._start(pq)
            log.info("%s of group %s now consumes %s queue %d of %s", self.instance.client_id, self.group,
                     pq.mq.topic, pq.mq.queue_id, pq.mq.broker_name)  # fmt: skip

    def _start(self, pq: ProcessQueue) -> None:
        self.queues[pq.mq] = pq
        self.run(pq)

    async def _position(self, pqs: list[ProcessQueue]) -> None:
        """Lock (orderly) and find the start offsets of new queues now; what fails here the pull
        loop retries."""
        if self.locks is not None:
            await self.locks.lock_all(pqs)
        for pq in pqs:
            if self.locks is not None and not pq.locked():
                continue
            try:
                pq.next_offset = await self.start_offset(pq.mq)
            except CALL_ERRORS as e:
                log.warning("no start offset for %s queue %d yet: %s", pq.mq.topic, pq.mq.queue_id, e)

    async def _release(self, pq: ProcessQueue) -> None:
        """Stop a queue given to another member: commit where it got to, then let go of its lock."""
        del self.queues[pq.mq]
        pq.drop()
        await finish(pq.tasks[:1], 0)
        finished = True
        if pq.tasks[1:]:  # orderly: its current message completes first, so the next owner goes on after it
            done, _ = await asyncio.wait(pq.tasks[1:], timeout=RELEASE_WAIT)
            finished = bool(done)
        offset = pq.commit_offset()
        if offset is not None:
            self.offsets.update(pq.mq, offset)
        await self.offsets.persist([pq.mq])
        self.offsets.remove(pq.mq)
        if self.locks is not None and finished:  # unfinished: the broker lock expires, nobody overlaps it
            await self.locks.unlock_all([pq])
        log.info("%s of group %s released %s queue %d of %s", self.instance.client_id, self.group,
                 pq.mq.topic, pq.mq.queue_id, pq.mq.broker_name)  # fmt: skip
