"""The gateway's /metrics under RabbitMQ's Prometheus names, read by scraping a real metrics server
while pika publishes with confirms and consumes with acks; /health/ready follows the listener."""

from __future__ import annotations

import asyncio

import pika

from ferrymq.metrics.registry import Registry
from ferrymq.metrics.roles import add_amqp
from tests.amqp.conftest import make_local_gateway  # noqa: F401  (fixtures)
from tests.metrics.conftest import eventually, serve, value  # noqa: F401


def pika_round_trip(port: int, count: int) -> None:
    """Publish `count` with confirms, consume and ack them; leave one connection with a consumer."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("metrics-q")
    for i in range(count):
        channel.basic_publish("", "metrics-q", f"m{i}".encode())
    for got, (method, _, _) in enumerate(channel.consume("metrics-q", inactivity_timeout=10), 1):
        assert method is not None, "a message did not come"
        channel.basic_ack(method.delivery_tag)
        if got == count:
            break
    connection.close()


async def test_rabbitmq_names_count_what_passed(make_local_gateway, serve):  # noqa: F811
    local = await make_local_gateway()
    registry = Registry()
    add_amqp(registry, local.server, "c1")
    scraper = await serve(registry)
    assert (await scraper.ready())[0] == 200
    await asyncio.to_thread(pika_round_trip, local.port, 5)
    text = await scraper.metrics()
    node = {"cluster": "c1", "node_type": "amqp", "node_id": f"127.0.0.1:{local.port}"}
    assert value(text, "rabbitmq_global_messages_received_total", **node) == 5
    assert value(text, "rabbitmq_global_messages_confirmed_total") == 5
    assert value(text, "rabbitmq_global_messages_delivered_total") == 5
    assert value(text, "rabbitmq_global_messages_acknowledged_total") == 5

    async def closed() -> bool:  # the client closed its connection; the gateway hears it soon
        return await scraper.value("rabbitmq_connections") == 0

    await eventually(closed, 10, "the connection to be gone")
    assert value(text, "rabbitmq_alarms_free_disk_space_watermark") == 0
    await local.server.close()
    status, reason = await scraper.ready()
    assert status == 503 and "not listening" in reason
