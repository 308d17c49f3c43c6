"""Messaging-feature tests (ordering, filters, look-ups, consumption control) against a real
in-process NameServer and Broker, through the SDK. The broker has SQL92 filtering on."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.broker.conftest import Cluster, make_cluster
from tests.client.conftest import make_topic, producer, start_consumer

__all__ = ["make_cluster", "make_topic", "producer", "start_consumer"]


@pytest.fixture
async def cluster(make_cluster) -> Cluster:
    return await make_cluster(enable_property_filter=True)


async def eventually(condition, timeout: float = 15.0, what: str = "condition") -> None:
    """Wait until `condition()` holds, failing after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)
