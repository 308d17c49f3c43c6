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
    command = ["proxy", "--namesrv", f"$({NAMESRV_ENV})", "--listen", f"0.0.0.0:{port}"]
    return pods.front(
        KIND, name, spec, command, "grpc", port, METRICS_PORT, NAMESRV_ENV, namesrv_addr, default_image
    )
