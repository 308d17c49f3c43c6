"""Scheduled-message and retry tests: a real NameServer and Broker with short delay levels."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferrymq.client import Producer
from ferrymq.client.pull_consumer import PullConsumer
from tests.broker.conftest import Cluster, cluster, make_cluster

__all__ = ["SHORT_LEVELS", "cluster", "collect", "make_cluster"]

# Levels 1-2 as asked, the rest 1 s so that retries (level 3 + attempts) come back fast.
SHORT_LEVELS = "1s 2s 1s 1s 1s 1s"


@pytest.fixture
async def scheduled(make_cluster) -> Cluster:
    return await make_cluster(message_delay_level=SHORT_LEVELS, timer_max_delay_sec=60)


@pytest.fixture
async def producer(scheduled: Cluster):
    async with Producer("schedule-test-producer", scheduled.namesrv_addr) as p:
        yield p


async def collect(namesrv_addr: str, topic: str, count: int, timeout: float = 20.0, group: str = "reader"):
    """Read `topic` from its first offset until `count` distinct bodies arrived (noting when each
    did) or `timeout` s passed; then wait a little more to catch any extra (duplicate) delivery."""
    got: list[tuple[float, object]] = []
    async with PullConsumer(group, namesrv_addr, consume_from="first") as consumer:
        await consumer.subscribe(topic)
        deadline = time.monotonic() + timeout
        while len({m.body for _, m in got}) < count and time.monotonic() < deadline:
            got += [(time.time(), m) for m in await consumer.poll(0.2)]
        got += [(time.time(), m) for m in await consumer.poll(0.3)]
    return got


async def eventually(condition, timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


@pytest.fixture
async def start_consumer(scheduled: Cluster):
    """Start a PushConsumer on one topic; every one still running is shut down at the end."""
    from ferrymq.client.push_consumer import PushConsumer

    started: list[PushConsumer] = []

    async def start(group: str, topic: str, listener, **options) -> PushConsumer:
        consumer = PushConsumer(group, scheduled.namesrv_addr, consume_from="first", **options)
        consumer.subscribe(topic, "*", listener)
        await consumer.start()
        started.append(consumer)
        return consumer

    yield start
    for consumer in started:
        await consumer.shutdown()
