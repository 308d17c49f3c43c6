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
    args = ["amqp", "--namesrv", f"$({NAMESRV_ENV})", "--listen", f"0.0.0.0:{port}", "--meta", spec["meta"],
            "--metrics-port", str(METRICS_PORT)]  # fmt: skip
    main = pods.container(
        "amqp",
        spec,
        pods.image(spec, "image", default_image),
        args,
        pods.env({NAMESRV_ENV: namesrv_addr}, spec),
        ports=pods.ports(amqp=port, metrics=METRICS_PORT),
        **pods.probes(METRICS_PORT),
    )
    sel = selector(name)
    return [
        pods.deployment(name, sel, int(spec["size"]), pods.pod_template(spec, sel, [main], [])),
        pods.service(pods.service_name(name), sel, {"amqp": port}),
    ]
