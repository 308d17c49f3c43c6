"""AmqpGateway → a Deployment of AMQP 0-9-1 gateways sharing one metadata service, and its Service;
probed on the gateway's health endpoints, beside its RabbitMQ-named metrics."""

from __future__ import annotations

from ferrymq.operator import pods
from ferrymq.operator.pods import Obj

KIND = "AmqpGateway"
PORT = 5672
METRICS_PORT = 15692  # RabbitMQ's Prometheus port
NAMESRV_ENV = "FERRYMQ_NAMESRV_ADDR"


def selector(name: str) -> dict[str, str]:
    return pods.labels(KIND, name)


def render(name: str, spec: Obj, namesrv_addr: str, default_image: str) -> list[Obj]:
    port = int(spec.get("port") or PORT)
    command = [
        "amqp",
        "--namesrv",
        f"$({NAMESRV_ENV})",
        "--listen",
        f"0.0.0.0:{port}",
        "--meta",
        spec["meta"],
    ]
    return pods.front(
        KIND, name, spec, command, "amqp", port, METRICS_PORT, NAMESRV_ENV, namesrv_addr, default_image
    )
