"""Transaction tests run against real in-process clusters with short check-back settings."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferrymq.client import PullConsumer
from tests.broker.conftest import make_cluster

__all__ = ["make_cluster"]

FAST_CHECKS = {"transaction_check_interval": 200, "transaction_timeout": 300, "transaction_check_max": 3}


async def wait_for(condition, timeout: float = 20.0, what: str = "condition") -> None:
    """Poll `condition()` (sync or async) until true, or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def read_all(namesrv_addr: str, topic: str, group: str, *, expect: int, timeout: float = 20.0) -> list:
    """Pull `topic` from the start until `expect` messages came, then a little more to catch extras."""
    got: list = []
    async with PullConsumer(group, namesrv_addr, consume_from="first") as consumer:
        await consumer.subscribe(topic)
        deadline = time.monotonic() + timeout
        while len(got) < expect and time.monotonic() < deadline:
            got += await consumer.poll(0.5)
        got += await consumer.poll(0.3)  # anything beyond what we expect is a bug
    return got


@pytest.fixture
def fast_checks() -> dict:
    return dict(FAST_CHECKS)
