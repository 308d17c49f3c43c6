"""Quotas seen by an AMQP client (pika) through the gateway: a publisher over its queue's produce
quota gets connection.blocked, is slowed to the quota with every confirmed message stored, then gets
connection.unblocked, while a publisher to another queue goes on unblocked; a user's connection
beyond its limit is refused as RabbitMQ refuses it."""

from __future__ import annotations

import asyncio
import threading
import time

import pika
import pytest
from pika.exceptions import AMQPConnectionError

from ferrymq.broker.quota import Quota
from ferrymq.client import Admin
from ferrymq.messaging.remote import RemoteMessageService
from ferrymq.meta.naming import queue_topic

RATE, COUNT = 50, 60


def connect(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, connection_attempts=1))


def publish_over_quota(port: int, limit) -> dict:
    """Declare the queue, have `limit` set its quota, publish COUNT with confirms, read them back."""
    seen: list[str] = []
    connection = connect(port)
    try:
        connection.add_on_connection_blocked_callback(
            lambda _c, m: seen.append(f"blocked: {m.method.reason}")
        )
        connection.add_on_connection_unblocked_callback(lambda _c, _m: seen.append("unblocked"))
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("throttled")
        limit()
        started = time.monotonic()
        for i in range(COUNT):  # each waits for its confirm: a nack would raise NackError
            channel.basic_publish("", "throttled", b"%d" % i)
        elapsed = time.monotonic() - started
        connection.process_data_events(time_limit=0.2)
        bodies = set()
        deadline = time.monotonic() + 10
        while len(bodies) < COUNT and time.monotonic() < deadline:
            method, _, body = channel.basic_get("throttled", auto_ack=True)
            if method is not None:
                bodies.add(body)
        return {"seen": seen, "elapsed": elapsed, "bodies": len(bodies)}
    finally:
        connection.close()


def publish_beside(port: int, started: threading.Event) -> dict:
    """While the other publisher is throttled, publish 20 to another queue with confirms."""
    seen: list[str] = []
    connection = connect(port)
    try:
        connection.add_on_connection_blocked_callback(lambda _c, _m: seen.append("blocked"))
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("free")
        assert started.wait(10)
        time.sleep(0.2)  # the other one is blocked by now
        begun = time.monotonic()
        for i in range(20):
            channel.basic_publish("", "free", b"%d" % i)
        return {"seen": seen, "elapsed": time.monotonic() - begun}
    finally:
        connection.close()


async def test_a_publisher_over_its_quota_is_blocked_slowed_and_unblocked_without_loss(make_local_gateway):
    local = await make_local_gateway()
    loop, quotas = asyncio.get_running_loop(), local.cluster.broker.quotas
    quota = Quota("produce", f"Topic:{queue_topic('/', 'throttled')}", messages=RATE)
    started = threading.Event()

    def limit() -> None:
        loop.call_soon_threadsafe(quotas.set, quota)
        started.set()

    got, beside = await asyncio.gather(
        asyncio.to_thread(publish_over_quota, local.port, limit),
        asyncio.to_thread(publish_beside, local.port, started),
    )
    assert beside["seen"] == [] and beside["elapsed"] < 0.5 * COUNT / RATE  # not held by the other's quota
    assert got["bodies"] == COUNT  # every confirmed publish was stored
    assert got["elapsed"] >= (COUNT - RATE * 0.1) / RATE * 0.9  # slowed to the quota
    assert got["seen"][0].startswith("blocked: flow control: quota exceeded: Topic:AMQP-")
    assert got["seen"][-1] == "unblocked"


def open_beyond_limit(port: int) -> str:
    """The refusal of a second connection while one is open; then, that one closed, a second opens."""
    first = connect(port)
    try:
        with pytest.raises(AMQPConnectionError) as refused:
            connect(port)
    finally:
        first.close()
    deadline = time.monotonic() + 5
    while True:  # the gateway lets the first one go as it closes
        try:
            connect(port).close()
            return str(refused.value)
        except AMQPConnectionError:
            assert time.monotonic() < deadline, "the closed connection still counts"
            time.sleep(0.05)


async def test_a_users_connection_beyond_its_limit_is_refused_as_rabbitmq_does(make_local_gateway):
    local = await make_local_gateway()
    local.cluster.broker.quotas.set(Quota("connections", "User:guest", connections=1))
    refused = await asyncio.to_thread(open_beyond_limit, local.port)
    assert (
        "530" in refused
        and "Connection refused for user 'guest': user connection limit (1) is reached" in refused
    )


async def test_a_standalone_gateway_reads_connection_limits_from_the_brokers(make_cluster):
    """A gateway over a cluster (not in a broker process) learns the limits by QUOTA_LIST, and keeps
    them for a while rather than asking at each connection."""
    cluster = await make_cluster()
    async with Admin(cluster.namesrv_addr) as admin:
        await admin.set_quota("connections", "User:guest", connections=3)
        await admin.set_quota("produce", "User:guest", messages=10)  # not a connection limit
    async with RemoteMessageService(cluster.namesrv_addr) as remote:
        assert await remote.user_connection_limit("guest") == 3
        assert await remote.user_connection_limit("other") is None
        async with Admin(cluster.namesrv_addr) as admin:
            await admin.delete_quota("connections", "User:guest")
        assert await remote.user_connection_limit("guest") == 3  # as read, until QUOTA_TTL_S passes
