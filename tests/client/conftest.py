"""Client tests run against a real NameServer and Broker in this process (the broker tests' cluster)."""

from __future__ import annotations

import pytest

from ferrymq.client import Producer
from ferrymq.client.push_consumer import PushConsumer
from ferrymq.protocol.codes import RequestCode, ResponseCode
from tests.broker.conftest import Cluster, cluster, make_cluster

__all__ = ["cluster", "make_cluster"]


@pytest.fixture
async def make_topic(cluster: Cluster):
    """Create a topic with `queues` queues and publish its route at once (not at the next 30 s round)."""

    async def create(topic: str, queues: int) -> None:
        response = await cluster.call(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues, "writeQueueNums": queues,
             "perm": 6, "topicFilterType": "SINGLE_TAG"},
        )  # fmt: skip
        assert response.code == ResponseCode.SUCCESS, response.remark
        await cluster.broker.registrar.register_all()

    return create


@pytest.fixture
async def producer(cluster: Cluster):
    async with Producer("test-producer", cluster.namesrv_addr) as p:
        yield p


@pytest.fixture
async def start_consumer(cluster: Cluster):
    """Start a PushConsumer subscribed to one topic; every one still running is shut down at the end."""
    started: list[PushConsumer] = []

    async def start(group: str, topic: str, listener, expression: str = "*", **options) -> PushConsumer:
        consumer = PushConsumer(group, cluster.namesrv_addr, **options)
        consumer.subscribe(topic, expression, listener)
        await consumer.start()
        started.append(consumer)
        return consumer

    yield start
    for consumer in started:
        await consumer.shutdown()
