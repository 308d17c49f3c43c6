"""Controller → a StatefulSet of an odd number of controllers, a headless Service that names the Raft
peers, and (once every member is ready) the Service brokers reach them through."""

from __future__ import annotations

from ferrymq.operator import pods
from ferrymq.operator.pods import Obj, SpecError

KIND = "Controller"
PORT = 9878  # remoting: brokers and admins
RAFT_PORT = 9880  # the Raft group's own traffic
METRICS_PORT = 5559


def selector(name: str) -> dict[str, str]:
    return pods.labels(KIND, name)


def peers(name: str, namespace: str, size: int) -> str:
    """Every member's Raft address by its pod's stable DNS name; node ids are the pod names."""
    headless = pods.headless_name(name)
    return ";".join(f"{name}-{i}@{name}-{i}.{headless}.{namespace}.svc:{RAFT_PORT}" for i in range(size))


def render(name: str, namespace: str, spec: Obj, default_image: str) -> list[Obj]:
    """The StatefulSet and the headless Service; the brokers' Service comes from `access_service`."""
    size = int(spec["size"])
    if size % 2 == 0:
        raise SpecError(f"a controller group needs an odd size for a Raft majority, not {size}")
    volumes, claims, mount = pods.storage(spec, "controller-storage")
    args = [
        "controller",
        "--id",
        "$(POD_NAME)",
        "--peers",
        peers(name, namespace, size),
        "--listen",
        f"$(POD_IP):{PORT}",  # the address the leader hands to brokers must be the pod's own
        "--data-dir",
        f"{pods.DATA_PATH}/controller",
        "--metrics-port",
        str(METRICS_PORT),
    ]
    main = pods.container(
        "controller",
        spec,
        pods.image(spec, "controllerImage", default_image),
        args,
        pods.env({}, spec),
        ports=pods.ports(controller=PORT, raft=RAFT_PORT, metrics=METRICS_PORT),
        volumeMounts=[mount],
        **pods.probes(METRICS_PORT),
    )
    sel = selector(name)
    template = pods.pod_template(spec, sel, [main], volumes)
    headless = pods.headless_name(name)
    return [
        pods.statefulset(name, sel, size, template, headless, claims),
        pods.service(headless, sel, {"controller": PORT, "raft": RAFT_PORT}, headless=True),
    ]


def access_service(name: str) -> Obj:
    """The Service brokers are given, made once every member is ready (Apache's `<name>-svc`)."""
    return pods.service(pods.service_name(name), selector(name), {"controller": PORT})


def access_point(name: str, namespace: str, size: int) -> str:
    """What brokers get as controller_addr: every member by DNS name, so a broker asks each in turn
    for the leader instead of whichever member a Service picks."""
    headless = pods.headless_name(name)
    return ";".join(f"{name}-{i}.{headless}.{namespace}.svc:{PORT}" for i in range(size))
