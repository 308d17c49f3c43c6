"""Scheduled-message and retry tests: a real NameServer and Broker with short delay levels."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferrymq.client.pull_consumer import PullConsumer
from tests.broker.conftest import Cluster, make_cluster
from tests.client.conftest import producer, start_consumer

__all__ = ["SHORT_LEVELS", "collect", "make_cluster", "producer", "start_consumer"]

# Levels 1-2 as asked, the rest 1 s so that retries (level 3 + attempts) come back fast.
SHORT_LEVELS = "1s 2s 1s 1s 1s 1s"


@pytest.fixture
async def cluster(make_cluster) -> Cluster:
    """The shared fixtures (producer, start_consumer) run on this cluster of short delay levels."""
    return await make_cluster(message_delay_level=SHORT_LEVELS, timer_max_delay_sec=60)


async def collect(
    namesrv_addr: str, topic: str, count: int, timeout: float = 20.0, group: str = "reader", total: int = 0
):
    """Read `topic` from its first offset until `count` distinct bodies (and `total` messages) arrived,
    noting when each did, or `timeout` s passed; then a little more, to catch any extra delivery."""
    got: list[tuple[float, object]] = []
    async with PullConsumer(group, namesrv_addr, consume_from="first") as consumer:
        await consumer.subscribe(topic)
        deadline = time.monotonic() + timeout
        while (len({m.body for _, m in got}) < count or len(got) < total) and time.monotonic() < deadline:
            got += [(time.time(), m) for m in await consumer.poll(0.2)]
        got += [(time.time(), m) for m in await consumer.poll(0.3)]
    return got


async def eventually(condition, timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)
