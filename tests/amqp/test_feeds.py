"""The feeds with an in-process broker: a message costs one pop, feeds waiting for an arrival are looked
at by one sweep within the poll interval, and arrivals reach the feeds of queues that came and went."""

from __future__ import annotations

import asyncio

from pamqp import body as content_body
from pamqp import commands

from ferrymq.amqp import feeds
from ferrymq.meta.entities import Queue
from ferrymq.protocol.pop import pop_retry_topic
from tests.amqp.raw_client import RawClient


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


def consume_each_in_turn(port: int, count: int) -> list[bytes]:
    """Consume a queue and publish `count` messages, each once the one before was delivered."""
    client = RawClient("127.0.0.1", port)
    try:
        client.open()
        client.open_channel(1)
        client.declare(1, "one-at-a-time")
        client.consume(1, "one-at-a-time", no_ack=True)
        got = []
        for i in range(count):
            client.publish(1, "", "one-at-a-time", b"m%d" % i)
            client.expect(commands.Basic.Deliver)
            got.append(client.expect(content_body.ContentBody).value)
        return got
    finally:
        client.close()


async def test_a_feed_told_of_arrivals_parks_no_pop_in_the_broker_between_messages(local_gateway):
    """Each message costs one pop: once it is delivered, the feed waits for the next arrival here rather
    than in a pop that found nothing and waits in the broker."""
    got = await asyncio.to_thread(consume_each_in_turn, local_gateway.port, 3)
    assert got == [b"m0", b"m1", b"m2"]
    hold = local_gateway.gateway.service.pops.hold
    async with asyncio.timeout(5):  # (the look after the last delivery, a turn or two later)
        while hold.waiting():
            await asyncio.sleep(0.01)
