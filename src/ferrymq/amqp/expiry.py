"""Expiry as RabbitMQ does it, in the background.

Messages: at the head of queues nobody here consumes, so that a queue with a message TTL and a
dead-letter exchange works as a delay line (a queue with consumers on this gateway needs none of this:
its feed screens out what expired before delivering). Each swept queue is looked at when its head is
due, or every IDLE_CHECK_S while it holds nothing due.

Queues (x-expires): deleted once unused that long (no consumer, no basic.get, no redeclare). The
gateway that declared a queue keeps its clock, since only it knows its own use; a queue whose
gateway restarted does not expire (it is never deleted while in use elsewhere)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from ferrymq.amqp.queue_settings import EXPIRES
from ferrymq.amqp.topology import Topology
from ferrymq.messaging.api import MessageQueue, MessagingError
from ferrymq.meta.entities import Queue
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.message_ext import decode_records
from ferrymq.protocol.pop import POP_CK

if TYPE_CHECKING:
    from ferrymq.amqp.gateway import Gateway

log = logging.getLogger(__name__)
TICK_S = 0.05  # the longest a due head waits past its expiry
IDLE_CHECK_S = 1.0  # how often a queue without anything due is looked at again
PEEK = 32


class ExpirySweeper:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self._next_check: dict[tuple[str, str], float] = {}
        self._last_used: dict[tuple[str, str], float] = {}  # queues with x-expires declared here
        self._candidates_of: dict[str, tuple[int, list[Queue]]] = {}  # by vhost: (version, queues)

    def touch(self, queue: Queue) -> None:
        """The queue was declared or used through this gateway."""
        key = (queue.vhost, queue.name)
        if queue.arguments.get("x-expires") is not None or key in self._last_used:
            if key not in self._last_used:
                self._candidates_of.pop(queue.vhost, None)  # a new candidate
            self._last_used[key] = time.monotonic()

    def wake(self, queue: Queue) -> None:
        """A message went into `queue` through this gateway: look at it again soon."""
        self._next_check.pop((queue.vhost, queue.name), None)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("expiring messages")

    async def sweep(self) -> None:
        gateway, now = self.gateway, time.monotonic()
        for topology in gateway.catalog.loaded():
            for queue in self._candidates(topology):
                key = (queue.vhost, queue.name)
                if key in self._last_used and await self._expire_queue(topology, queue, now):
                    continue
                if self._next_check.get(key, 0.0) > now or gateway.feeds.consumer_count(queue):
                    continue
                settings = gateway.settings.of(topology, queue)
                if settings.message_ttl is None and settings.dead_letter_exchange is None:
                    continue
                self._next_check[key] = now + await self._expire_head(queue)

    def _candidates(self, topology: Topology) -> list[Queue]:
        """The vhost's queues with a TTL, a dead-letter exchange or an x-expires clock here,
        found again only when its topology changes."""
        known = self._candidates_of.get(topology.vhost)
        if known is None or known[0] != topology.version:
            settings = self.gateway.settings.of
            found = [
                q for q in topology.queues()
                if (q.vhost, q.name) in self._last_used
                or (s := settings(topology, q)).message_ttl is not None or s.dead_letter_exchange is not None
            ]  # fmt: skip
            known = self._candidates_of[topology.vhost] = (topology.version, found)
        return known[1]

    async def _expire_queue(self, topology: Topology, queue: Queue, now: float) -> bool:
        """Delete the queue if unused past its x-expires; whether it went."""
        key = (queue.vhost, queue.name)
        expires = self.gateway.settings.of(topology, queue).expires
        if self.gateway.feeds.consumers_of(queue):
            self._last_used[key] = now
        elif expires is not None and now - self._last_used[key] > expires / 1000:
            del self._last_used[key]
            await self.gateway.delete_queue(queue, queue.exclusive_owner)
            return True
        return False

    async def _expire_head(self, queue: Queue) -> float:
        """Expire what is due at the head of each of the queue's broker queues; seconds until the
        next look."""
        wait = IDLE_CHECK_S
        for mq in await self.gateway.queue_places(queue):
            try:
                wait = min(wait, await self._expire_place(queue, mq))
            except MessagingError as e:
                log.info("expiring messages of %s: %s", queue.topic, e)
        return wait

    async def _expire_place(self, queue: Queue, mq: MessageQueue) -> float:
        service = self.gateway.service
        offset = await service.query_offset(queue.group, mq)
        low, high = await service.queue_bounds(mq)
        at = max(low, offset if offset is not None else low)
        if at >= high:
            return IDLE_CHECK_S
        read = await service.read(queue.group, mq, at, PEEK)
        head = decode_records(read.body()) if read.code == ResponseCode.SUCCESS else []
        now_ms = int(time.time() * 1000)
        due = 0
        for message in head:
            expires = message.properties.get(EXPIRES)
            if expires is None or int(expires) > now_ms:
                return (int(expires) - now_ms) / 1000 if expires is not None and due == 0 else 0.0
            due += 1
        if due:  # the feed's pop screens them: expired ones are dead-lettered and settled
            live = await self.gateway.feeds.pop_place(queue, due, mq)
            await self.gateway.feeds.requeue(queue, [m.properties[POP_CK] for m in live])
        return 0.0 if due else IDLE_CHECK_S
