"""One reconcile per kind: read what it depends on, apply what render_* says, write its status.

Each takes the custom resource as a dict and is idempotent, so kopf may call it on create, update,
resume and every resync alike, and a NameService calls its followers' when its addresses change.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ferrymq.operator import (
    pods,
    render_amqp,
    render_console,
    render_controller,
    render_nameservice,
    render_proxy,
    status,
)
from ferrymq.operator.context import Settings, Waiting, apply_all, cr_path, namesrv_addr, now, ready_pods
from ferrymq.operator.kube import Kube, path
from ferrymq.operator.pods import Obj, SpecError
from ferrymq.operator.reconcile_broker import reconcile_broker
from ferrymq.operator.reconcile_topictransfer import reconcile_topictransfer

FOLLOWERS = ("Broker", "Proxy", "AmqpGateway", "Console")  # kinds that are given NameServer addresses
# A status field other kinds are rendered from: when it changes, they are reconciled at once rather
# than at their next resync (NameServer addresses; the controllers' access point, given to brokers).
DEPENDANTS = {"NameService": ("nameServers", FOLLOWERS), "Controller": ("accessPoint", ("Broker",))}


async def reconcile_nameservice(kube: Kube, settings: Settings, body: Obj) -> dict[str, Any]:
    name, namespace, spec = body["metadata"]["name"], body["metadata"]["namespace"], body["spec"]
    await apply_all(kube, render_nameservice.render(name, spec, settings.image), body, namespace)
    ready = await ready_pods(kube, namespace, render_nameservice.selector(name))
    ips = [p["status"]["podIP"] for p in ready if p["status"].get("podIP")]
    return {"nameServers": ips, "_health": status.of_workload(int(spec["size"]), len(ips), "NameServers")}


async def reconcile_controller(kube: Kube, settings: Settings, body: Obj) -> dict[str, Any]:
    name, namespace, spec = body["metadata"]["name"], body["metadata"]["namespace"], body["spec"]
    await apply_all(kube, render_controller.render(name, namespace, spec, settings.image), body, namespace)
    size = int(spec["size"])
    ready = await ready_pods(kube, namespace, render_controller.selector(name))
    out: dict[str, Any] = {"nodes": [p["metadata"]["name"] for p in ready], "size": size}
    if len(ready) >= size:  # brokers are given the controllers once the whole group is up
        await apply_all(kube, [render_controller.access_service(name)], body, namespace)
        out["accessPoint"] = render_controller.access_point(name, namespace, size)
    out["_health"] = status.of_workload(size, len(ready), "controllers")
    return out


def _gateway(render: Callable[..., list[Obj]], selector: Callable[[str], dict[str, str]], what: str):
    async def reconcile(kube: Kube, settings: Settings, body: Obj) -> dict[str, Any]:
        name, namespace, spec = body["metadata"]["name"], body["metadata"]["namespace"], body["spec"]
        addr = await namesrv_addr(kube, spec, namespace)
        await apply_all(kube, render(name, spec, addr, settings.image), body, namespace)
        ready = await ready_pods(kube, namespace, selector(name))
        nodes = [p["metadata"]["name"] for p in ready]
        return {"nodes": nodes, "size": int(spec["size"]),
                "_health": status.of_workload(int(spec["size"]), len(ready), what)}  # fmt: skip

    return reconcile


reconcile_proxy = _gateway(render_proxy.render, render_proxy.selector, "proxies")
reconcile_amqp = _gateway(render_amqp.render, render_amqp.selector, "gateways")


async def reconcile_console(kube: Kube, settings: Settings, body: Obj) -> dict[str, Any]:
    name, namespace, spec = body["metadata"]["name"], body["metadata"]["namespace"], body["spec"]
    addr = await namesrv_addr(kube, spec, namespace)
    (deployment,) = render_console.render(name, spec, addr)
    await apply_all(kube, [deployment], body, namespace)
    observed = await kube.get(path("apps/v1", "deployments", namespace, deployment["metadata"]["name"])) or {}
    want = int((deployment.get("spec") or {}).get("replicas", 1))
    ready = int((observed.get("status") or {}).get("readyReplicas") or 0)
    return {"_health": status.of_workload(want, ready, "consoles")}


Reconcile = Callable[[Kube, Settings, Obj], Awaitable[dict[str, Any]]]
RECONCILERS: dict[str, Reconcile] = {
    "NameService": reconcile_nameservice,
    "Controller": reconcile_controller,
    "Broker": reconcile_broker,
    "Proxy": reconcile_proxy,
    "AmqpGateway": reconcile_amqp,
    "Console": reconcile_console,
    "TopicTransfer": reconcile_topictransfer,
}
KIND_OF_COMPONENT = {kind.lower(): kind for kind in RECONCILERS}


async def run(kube: Kube, settings: Settings, kind: str, body: Obj) -> dict[str, Any]:
    """Reconcile `body` and write its status (conditions included); returns the status written."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    previous = body.get("status") or {}
    try:
        result = await RECONCILERS[kind](kube, settings, body)
    except SpecError as e:
        result = {"_health": status.degraded("InvalidSpec", str(e))}
    except Waiting as e:
        result = {"_health": status.waiting(e.reason, str(e))}
    health: status.Health = result.pop("_health")
    generation = int(body["metadata"].get("generation") or 0)
    new = {
        **result,
        "observedGeneration": generation,
        "conditions": status.conditions(previous.get("conditions"), health, now(), generation),
    }
    if any(previous.get(k) != v for k, v in new.items() if k != "conditions") or _changed(previous, new):
        await kube.patch(cr_path(kind, namespace, name) + "/status", {"status": new})
    field, dependants = DEPENDANTS.get(kind, ("", ()))
    if dependants and previous.get(field) != new.get(field):
        await reconcile_dependants(kube, settings, namespace, kind, dependants)
    return new


def _changed(previous: Obj, new: Obj) -> bool:
    def key(conds: list[Obj] | None) -> list[tuple]:
        return [(c.get("type"), c.get("status"), c.get("reason"), c.get("message")) for c in conds or []]

    return key(previous.get("conditions")) != key(new.get("conditions"))


async def reconcile_dependants(
    kube: Kube, settings: Settings, namespace: str, changed: str, kinds: tuple[str, ...]
) -> None:
    """Reconcile every resource of `kinds` in the namespace that depends on a `changed` resource
    (not given its NameServers or, for a controller, not in STATIC mode), so a new address reaches
    them now."""
    for kind in kinds:
        for body in await kube.items(cr_path(kind, namespace)):
            spec = body.get("spec") or {}
            if changed == "NameService" and spec.get("nameServers"):
                continue
            if changed == "Controller" and str(spec.get("clusterMode", "")).upper() != "CONTROLLER":
                continue
            body.setdefault("metadata", {}).setdefault("namespace", namespace)
            await run(kube, settings, kind, body)


async def reconcile_owner(kube: Kube, settings: Settings, pod: Obj) -> None:
    """Reconcile the resource that made `pod` (from its labels), read afresh: a pod becoming ready,
    unready or gone changes its owner's status and what waits on it, without waiting for a resync."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    kind = KIND_OF_COMPONENT.get(labels.get(pods.COMPONENT_LABEL, ""))
    name, namespace = labels.get(pods.INSTANCE_LABEL), pod["metadata"].get("namespace")
    if kind is None or not name or not namespace:
        return
    body = await kube.get(cr_path(kind, namespace, name))
    if body is not None:
        await run(kube, settings, kind, body)
