"""The feeds' registry with an in-process broker: feeds waiting for an arrival are looked at by one
sweep, within the poll interval, and arrivals reach the feeds of queues that came and went."""

from __future__ import annotations

import asyncio

from ferrymq.amqp import feeds
from ferrymq.meta.entities import Queue
from ferrymq.protocol.pop import pop_retry_topic


def queue(name: str) -> Queue:
    return Queue(vhost="/", name=name, topic=f"topic-{name}", group=f"group-{name}")


async def test_a_waiting_feed_looks_anyway_within_the_poll_interval(local_gateway, monkeypatch):
    monkeypatch.setattr(feeds, "POLL_MS", 400)
    registry = local_gateway.gateway.feeds
    waits, leaves = registry.feed(queue("waits")), registry.feed(queue("leaves"))
    for feed in (waits, leaves):
        feed._arrived = False
        registry.waiting(feed)
    registry.done_waiting(leaves)  # (it found something meanwhile)
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with asyncio.timeout(5):
        while not waits._arrived:
            await asyncio.sleep(0.01)
    assert loop.time() - started >= 0.2 - 0.01  # not before half the interval
    assert not leaves._arrived


async def test_arrivals_reach_the_feeds_of_queues_that_came_and_went(local_gateway):
    registry = local_gateway.gateway.feeds
    kept, gone = registry.feed(queue("kept")), registry.feed(queue("gone"))
    registry.feed_idle(gone)  # nobody consumes it any more
    again = registry.feed(queue("gone"))
    for feed in (kept, gone, again):
        feed._arrived = False
    registry._arrivals([(kept.queue.topic, 0), (pop_retry_topic("group-gone", "topic-gone"), 0)])
    assert (kept._arrived, gone._arrived, again._arrived) == (True, False, True)
