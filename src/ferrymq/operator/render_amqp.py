"""AmqpGateway → a Deployment of AMQP 0-9-1 gateways sharing one metadata service, and its Service.

The gateway serves no health endpoints of its own, so its probes are TCP connects to the AMQP port.
"""

from __future__ import annotations

from ferrymq.operator import pods
from ferrymq.operator.pods import Obj

KIND = "AmqpGateway"
PORT = 5672
NAMESRV_ENV = "FERRYMQ_NAMESRV_ADDR"


def selector(name: str) -> dict[str, str]:
    return pods.labels(KIND, name)


def render(name: str, spec: Obj, namesrv_addr: str, default_image: str) -> list[Obj]:
    port = int(spec.get("port") or PORT)
    args = ["amqp", "--namesrv", f"$({NAMESRV_ENV})", "--listen", f"0.0.0.0:{port}", "--meta", spec["meta"]]
    main = pods.container(
        "amqp",
        spec,
        pods.image(spec, "image", default_image),
        args,
        pods.env({NAMESRV_ENV: namesrv_addr}, spec),
        ports=pods.ports(amqp=port),
        readinessProbe={"tcpSocket": {"port": port}, "periodSeconds": 5},
        livenessProbe={"tcpSocket": {"port": port}, "initialDelaySeconds": 10, "periodSeconds": 10},
    )
    sel = selector(name)
    return [
        pods.deployment(name, sel, int(spec["size"]), pods.pod_template(spec, sel, [main], [])),
        pods.service(pods.service_name(name), sel, {"amqp": port}),
    ]
