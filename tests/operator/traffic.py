"""Traffic through a topic while the operator changes the cluster under it: a producer at a steady
rate (each body unique) and a push consumer recording what it gets, so that a test or a benchmark
can say which acknowledged sends were never consumed and how long sends stopped succeeding."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from ferrymq.client.admin import Admin
from ferrymq.client.message import Message
from ferrymq.client.producer import Producer


async def writable_on(
    namesrv: str, topic: str, cluster: str, groups: set[str], queues: int, deadline: float
) -> None:
    """Create `topic` on `cluster` until every broker group in `groups` offers it for writing."""
    async with Admin(namesrv) as admin:
        while True:
            try:
                await admin.create_topic(topic, queues, cluster=cluster)
                route = await admin.instance.existing_route(topic)
                if route is not None and groups <= {q.broker_name for q in route.write_queues}:
                    return
            except Exception:
                if time.monotonic() > deadline:
                    raise
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic} not writable on {groups}")
            await asyncio.sleep(0.1)


async def committed(namesrv: str, group: str, topic: str, timeout: float) -> None:
    """Wait until `group` has committed an offset past 0 for `topic` somewhere."""
    async with Admin(namesrv) as admin:
        end = time.monotonic() + timeout
        while not any(p.consumer_offset > 0 for p in await admin.consumer_progress(group, topic)):
            if time.monotonic() > end:
                raise TimeoutError(f"{group} committed nothing for {topic}")
            await asyncio.sleep(0.2)


class Traffic:
    """A producer sending `rate` msg/s (each body unique) and a consumer recording what it gets."""

    def __init__(self, topic: str, rate: int) -> None:
        self.topic, self.rate = topic, rate
        self.acked: dict[bytes, float] = {}  # body → when its send was acknowledged
        self.failed = 0
        self.consumed: dict[bytes, int] = {}  # body → deliveries
        self.acked_on: Counter[str] = Counter()  # broker group → acknowledged sends
        self.consumed_from: Counter[str] = Counter()  # broker address → deliveries
        self.stop = asyncio.Event()

    def listener(self, messages) -> bool:  # type: ignore[no-untyped-def]
        for m in messages:
            self.consumed[m.body] = self.consumed.get(m.body, 0) + 1
            self.consumed_from[str(m.store_host)] += 1
        return True

    async def produce(self, producer: Producer, in_flight: int = 256) -> None:
        """Send until `stop` is set, `rate` a second (at most `in_flight` unanswered), then wait for
        the answers of those in flight."""
        slots = asyncio.Semaphore(in_flight)
        tasks: set[asyncio.Task] = set()

        async def one(body: bytes) -> None:
            try:
                sent = await producer.send(Message(self.topic, body))
                self.acked[body] = time.monotonic()
                self.acked_on[sent.message_queue.broker_name] += 1
            except Exception:
                self.failed += 1
            finally:
                slots.release()

        started, n = time.monotonic(), 0
        while not self.stop.is_set():
            due = started + n / self.rate
            if (delay := due - time.monotonic()) > 0:
                await asyncio.sleep(delay)
            await slots.acquire()
            task = asyncio.create_task(one(b"m%08d" % n))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            n += 1
        await asyncio.gather(*tasks)

    def longest_gap(self, since: float, until: float) -> tuple[float, float]:
        """(seconds, start offset from `since`) of the longest time without an acknowledgement."""
        times = sorted(t for t in self.acked.values() if since <= t <= until)
        best, at = 0.0, 0.0
        for a, b in zip([since, *times], [*times, until], strict=True):
            if b - a > best:
                best, at = b - a, a - since
        return best, at

    def lost(self) -> set[bytes]:
        """Acknowledged, never consumed."""
        return self.acked.keys() - self.consumed.keys()

    async def consumed_all(self, timeout: float) -> bool:
        """Wait, at most `timeout` seconds, until every acknowledged send was consumed."""
        end = time.monotonic() + timeout
        while self.lost() and time.monotonic() < end:
            await asyncio.sleep(0.1)
        return not self.lost()
