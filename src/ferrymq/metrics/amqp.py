"""The AMQP gateway's metrics, under the names of RabbitMQ's Prometheus plugin (rabbitmq_prometheus),
so the Grafana boards RabbitMQ users have keep working after they move to the gateway."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

from ferrymq.metrics.node import Node
from ferrymq.metrics.spec import NODE, Spec, sample

if TYPE_CHECKING:
    from ferrymq.amqp.server import AMQPServer

_RABBITMQ = "RabbitMQ"
CONNECTIONS = Spec("rabbitmq_connections", "gauge", NODE, "Connections open.", _RABBITMQ)
CHANNELS = Spec("rabbitmq_channels", "gauge", NODE, "Channels open.", _RABBITMQ)
CONSUMERS = Spec("rabbitmq_consumers", "gauge", NODE, "Consumers on this gateway.", _RABBITMQ)
RECEIVED = Spec(
    "rabbitmq_global_messages_received_total",
    "counter",
    NODE,
    "Messages received from publishers.",
    _RABBITMQ,
)
CONFIRMED = Spec(
    "rabbitmq_global_messages_confirmed_total",
    "counter",
    NODE,
    "Messages confirmed to publishers.",
    _RABBITMQ,
)
DELIVERED = Spec(
    "rabbitmq_global_messages_delivered_total", "counter", NODE,
    "Messages delivered to consumers (basic.deliver and basic.get-ok).", _RABBITMQ,
)  # fmt: skip
ACKNOWLEDGED = Spec(
    "rabbitmq_global_messages_acknowledged_total", "counter", NODE,
    "Deliveries the consumers acknowledged.", _RABBITMQ,
)  # fmt: skip
DISK_ALARM = Spec(
    "rabbitmq_alarms_free_disk_space_watermark", "gauge", NODE,
    "1 while publishers are blocked because the brokers refuse writes for lack of resources.", _RABBITMQ,
)  # fmt: skip
SPECS = (CONNECTIONS, CHANNELS, CONSUMERS, RECEIVED, CONFIRMED, DELIVERED, ACKNOWLEDGED, DISK_ALARM)


class AmqpCollector:
    def __init__(self, node: Node, server: AMQPServer) -> None:
        self.node = node
        self.server = server

    def collect(self) -> Iterator[Metric]:
        gateway = self.server.gateway
        counts = gateway.counts
        values = (
            (CONNECTIONS, len(gateway.sessions())),
            (CHANNELS, len(gateway.channels)),
            (CONSUMERS, gateway.feeds.total_consumers()),
            (RECEIVED, counts.received),
            (CONFIRMED, counts.confirmed),
            (DELIVERED, counts.delivered),
            (ACKNOWLEDGED, counts.acknowledged),
            (DISK_ALARM, int(gateway.alarm.on)),
        )
        for spec, value in values:
            family = spec.family()
            sample(family, self.node, value)
            yield family


def amqp_ready(server: AMQPServer) -> str | None:
    return None if server.serving else "the AMQP gateway is not listening"
