"""Proxy → a Deployment of RocketMQ 5 gRPC proxies for the cluster at the NameServers, and its Service."""

from __future__ import annotations

from ferrymq.operator import pods
from ferrymq.operator.pods import Obj

KIND = "Proxy"
PORT = 8081
METRICS_PORT = 5558
NAMESRV_ENV = "FERRYMQ_NAMESRV_ADDR"


def selector(name: str) -> dict[str, str]:
    return pods.labels(KIND, name)


def render(name: str, spec: Obj, namesrv_addr: str, default_image: str) -> list[Obj]:
    port = int(spec.get("port") or PORT)
    args = ["proxy", "--namesrv", f"$({NAMESRV_ENV})", "--listen", f"0.0.0.0:{port}",
            "--metrics-port", str(METRICS_PORT)]  # fmt: skip
    main = pods.container(
        "proxy",
        spec,
        pods.image(spec, "image", default_image),
        args,
        pods.env({NAMESRV_ENV: namesrv_addr}, spec),
        ports=pods.ports(grpc=port, metrics=METRICS_PORT),
        **pods.probes(METRICS_PORT),
    )
    sel = selector(name)
    return [
        pods.deployment(name, sel, int(spec["size"]), pods.pod_template(spec, sel, [main], [])),
        pods.service(pods.service_name(name), sel, {"grpc": port}),
    ]
