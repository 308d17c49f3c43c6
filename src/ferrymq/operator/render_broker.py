"""Broker → `size` broker groups, each a master and `replicaPerGroup` replicas, one StatefulSet per member.

Apache's names: in STATIC mode `<name>-<g>-master` and `<name>-<g>-replica-<i>`, in CONTROLLER mode
`<name>-<g>-<i>` (the controllers choose each group's master). The cluster is named after the
resource and group g's broker name is `<name>-<g>`. Settings reach ferrymq's broker as the
FERRYMQ_* environment variables its BrokerConfig reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from ferrymq.operator import pods
from ferrymq.operator.pods import Obj, SpecError

KIND = "Broker"
PORT = 10911
HA_PORT = 10912
METRICS_PORT = 5557
MODES = ("STATIC", "CONTROLLER")
NAMESRV_ENV = "FERRYMQ_NAMESRV_ADDR"
GROUP_LABEL = "rocketmq.apache.org/broker-group"  # on every broker StatefulSet and pod: its group's index
STATEFULSET_LABEL = "statefulset"  # on every broker pod: the StatefulSet (group member) it belongs to


@dataclass(frozen=True)
class Member:
    """One broker process of a group: its StatefulSet, group, broker id and static role."""

    statefulset: str
    group: int
    broker_id: int
    role: str  # ASYNC_MASTER / SYNC_MASTER / SLAVE in STATIC mode; "" in CONTROLLER mode


def mode(spec: Obj) -> str:
    value = (spec.get("clusterMode") or "STATIC").upper()
    if value not in MODES:
        raise SpecError(f"clusterMode must be STATIC or CONTROLLER, not {spec.get('clusterMode')!r}")
    return value


def broker_name(name: str, group: int) -> str:
    return f"{name}-{group}"


def members(name: str, spec: Obj) -> list[Member]:
    replicas = int(spec.get("replicaPerGroup") or 0)
    config = spec.get("brokerConfig") or {}
    master_role = (
        "SYNC_MASTER" if str(config.get("broker_role", "")).upper() == "SYNC_MASTER" else "ASYNC_MASTER"
    )
    out = []
    for g in range(int(spec["size"])):
        if mode(spec) == "CONTROLLER":
            out += [Member(f"{name}-{g}-{i}", g, i, "") for i in range(replicas + 1)]
        else:
            out.append(Member(f"{name}-{g}-master", g, 0, master_role))
            out += [Member(f"{name}-{g}-replica-{i}", g, i, "SLAVE") for i in range(1, replicas + 1)]
    return out


def selector(name: str) -> dict[str, str]:
    return pods.labels(KIND, name)


def _settings(
    name: str, member: Member, spec: Obj, namesrv_addr: str, controller_addr: str
) -> dict[str, str]:
    values = {
        NAMESRV_ENV: namesrv_addr,
        "FERRYMQ_BROKER_CLUSTER_NAME": name,
        "FERRYMQ_BROKER_NAME": broker_name(name, member.group),
        "FERRYMQ_BROKER_IP1": "$(POD_IP)",  # the address registered with the NameServers
        "FERRYMQ_STORE_PATH_ROOT_DIR": f"{pods.DATA_PATH}/store",
    }
    if mode(spec) == "CONTROLLER":
        values["FERRYMQ_ENABLE_CONTROLLER_MODE"] = "true"
        values["FERRYMQ_CONTROLLER_ADDR"] = controller_addr
    else:
        values["FERRYMQ_BROKER_ID"] = str(member.broker_id)
        values["FERRYMQ_BROKER_ROLE"] = member.role
    for key, value in (spec.get("brokerConfig") or {}).items():
        if key not in ("broker_role", "broker_id", "broker_name", "broker_cluster_name"):  # ours to set
            values[f"FERRYMQ_{key.upper()}"] = str(value).lower() if isinstance(value, bool) else str(value)
    return values


def render(name: str, spec: Obj, namesrv_addr: str, controller_addr: str, default_image: str) -> list[Obj]:
    """Every member's StatefulSet and the headless Service that names the broker pods."""
    if mode(spec) == "CONTROLLER" and not controller_addr:
        raise SpecError("clusterMode CONTROLLER needs the controllers' address")
    volumes, claims, mount = pods.storage(spec, "broker-storage")
    img = pods.image(spec, "brokerImage", default_image)
    headless = pods.headless_name(name)
    out = []
    for member in members(name, spec):
        main = pods.container(
            "broker",
            spec,
            img,
            ["broker", "--listen", f"0.0.0.0:{PORT}", "--metrics-port", str(METRICS_PORT)],
            pods.env(_settings(name, member, spec, namesrv_addr, controller_addr), spec),
            ports=pods.ports(main=PORT, ha=HA_PORT, metrics=METRICS_PORT),
            volumeMounts=[mount],
            **pods.probes(METRICS_PORT),
        )
        sel = pods.labels(KIND, name, **{GROUP_LABEL: str(member.group)})
        own = {**sel, STATEFULSET_LABEL: member.statefulset}
        template = pods.pod_template(spec, own, [main], volumes)
        sts = pods.statefulset(member.statefulset, own, 1, template, headless, claims)
        out.append(sts)
    out.append(pods.service(headless, selector(name), {"main": PORT, "ha": HA_PORT}, headless=True))
    return out


def namesrv_addr_of(statefulset: Obj) -> str | None:
    """The NameServer addresses a rendered or observed broker StatefulSet gives its broker."""
    containers = statefulset["spec"]["template"]["spec"]["containers"]
    return pods.env_value(containers[0], NAMESRV_ENV)


def surplus(name: str, spec: Obj, observed: list[str]) -> list[str]:
    """Observed broker StatefulSets the spec no longer has (groups beyond `size`): to drain, then delete."""
    wanted = {m.statefulset for m in members(name, spec)}
    prefix = f"{name}-"
    return sorted(n for n in observed if n.startswith(prefix) and n not in wanted)
