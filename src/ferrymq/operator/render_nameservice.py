"""NameService → a StatefulSet of `size` NameServers and its headless Service; their addresses from pods."""

from __future__ import annotations

from ferrymq.operator import pods
from ferrymq.operator.pods import Obj

KIND = "NameService"
PORT = 9876
METRICS_PORT = 5556


def selector(name: str) -> dict[str, str]:
    return pods.labels(KIND, name)


def render(name: str, spec: Obj, default_image: str) -> list[Obj]:
    """The StatefulSet `name` (Apache's name for it) and the headless Service that names its pods."""
    volumes, claims, mount = pods.storage(spec, "namesrv-storage")
    args = [
        "namesrv",
        "--listen",
        f"0.0.0.0:{PORT}",
        "--metrics-port",
        str(METRICS_PORT),
        "--kv-config-path",
        f"{pods.DATA_PATH}/kvConfig.json",
    ]
    main = pods.container(
        "name-service",
        spec,
        pods.image(spec, "nameServiceImage", default_image),
        args,
        pods.env({}, spec),
        ports=pods.ports(main=PORT, metrics=METRICS_PORT),
        volumeMounts=[mount],
        **pods.probes(METRICS_PORT),
    )
    sel = selector(name)
    template = pods.pod_template(spec, sel, [main], volumes)
    headless = pods.headless_name(name)
    return [
        pods.statefulset(name, sel, int(spec["size"]), template, headless, claims),
        pods.service(headless, sel, {"main": PORT}, headless=True),
    ]


def name_servers(name: str, observed_pods: list[Obj]) -> list[str]:
    """IPs of the NameService's ready pods in ordinal order (Apache's status.nameServers)."""
    return [
        p["status"]["podIP"]
        for p in pods.owned_pods(observed_pods, selector(name))
        if pods.is_ready(p) and (p.get("status") or {}).get("podIP")
    ]


def addresses(ips: list[str]) -> str:
    """The "ip:9876;ip:9876" that brokers, proxies and consoles are given."""
    return ";".join(f"{ip}:{PORT}" for ip in ips)
