"""One reconcile per kind: read what it depends on, apply what render_* says, write its status.

Each takes the custom resource as a dict and is idempotent, so kopf may call it on create, update,
resume and every resync alike, and a NameService calls its followers' when its addresses change.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

import kopf

from ferrymq.operator import (
    drain,
    metadata_copy,
    plan_topictransfer,
    pods,
    render_amqp,
    render_broker,
    render_console,
    render_controller,
    render_nameservice,
    render_proxy,
    rollout,
    status,
    topictransfer,
)
from ferrymq.operator.crds import GROUP, VERSION, plural
from ferrymq.operator.kube import Kube, path
from ferrymq.operator.pods import Obj, SpecError

API = f"{GROUP}/{VERSION}"
FOLLOWERS = ("Broker", "Proxy", "AmqpGateway", "Console")  # kinds that are given NameServer addresses


@dataclass(frozen=True)
class Settings:
    image: str = pods.DEFAULT_IMAGE  # for every pod whose resource names no image of its own
    resync: float = 6.0  # s between two reconciles of an unchanged resource (Apache requeues every 6 s)


class Waiting(Exception):
    """Something the resource needs is not there yet; the message says what."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def cr_path(kind: str, namespace: str, name: str | None = None) -> str:
    return path(API, plural(kind), namespace, name)


async def _apply_all(kube: Kube, objs: list[Obj], owner: Obj, namespace: str) -> None:
    kopf.adopt(objs, owner=kopf.Body(cast(kopf.RawBody, owner)))
    for obj in objs:
        await kube.apply(obj, namespace)


async def _ready_pods(kube: Kube, namespace: str, sel: dict[str, str]) -> list[Obj]:
    found = await kube.list(path("v1", "pods", namespace), sel)
    return [p for p in pods.owned_pods(found, sel) if pods.is_ready(p)]


async def _only_or_named(kube: Kube, kind: str, namespace: str, name: str | None) -> Obj:
    """The resource `name` of `kind`, or the only one in the namespace when no name is given."""
    if name:
        found = await kube.get(cr_path(kind, namespace, name))
        if found is None:
            raise Waiting(f"{kind}Missing", f"{kind} {name} does not exist")
        return found
    items = await kube.items(cr_path(kind, namespace))
    if len(items) != 1:
        raise Waiting(f"{kind}Missing", f"{len(items)} {kind} resources in {namespace}: name one in the spec")
    return items[0]


async def namesrv_addr(kube: Kube, spec: Obj, namespace: str) -> str:
    """spec.nameServers, else the addresses of the NameService followed; Waiting until there are any."""
    if spec.get("nameServers"):
        return str(spec["nameServers"])
    ns = await _only_or_named(kube, "NameService", namespace, spec.get("nameService"))
    ips = (ns.get("status") or {}).get("nameServers") or []
    if not ips:
        raise Waiting(
            "WaitingForNameServers", f"NameService {ns['metadata']['name']} has no ready NameServer"
        )
    return render_nameservice.addresses(ips)


async def controller_addr(kube: Kube, spec: Obj, namespace: str) -> tuple[str, str]:
    """(the access point brokers are given, the Controller's name); Waiting until it has one."""
    ctl = await _only_or_named(kube, "Controller", namespace, spec.get("controller"))
    point = (ctl.get("status") or {}).get("accessPoint")
    if not point:
        raise Waiting("WaitingForControllers", f"Controller {ctl['metadata']['name']} is not ready")
    return str(point), ctl["metadata"]["name"]


async def reconcile_nameservice(kube: Kube, settings: Settings, body: Obj) -> dict[str, Any]:
    name, namespace, spec = body["metadata"]["name"], body["metadata"]["namespace"], body["spec"]
    await _apply_all(kube, render_nameservice.render(name, spec, settings.image), body, namespace)
    ready = await _ready_pods(kube, namespace, render_nameservice.selector(name))
    ips = [p["status"]["podIP"] for p in ready if p["status"].get("podIP")]
    return {"nameServers": ips, "_health": status.of_workload(int(spec["size"]), len(ips), "NameServers")}


async def reconcile_controller(kube: Kube, settings: Settings, body: Obj) -> dict[str, Any]:
    name, namespace, spec = body["metadata"]["name"], body["metadata"]["namespace"], body["spec"]
    await _apply_all(kube, render_controller.render(name, namespace, spec, settings.image), body, namespace)
    size = int(spec["size"])
    ready = await _ready_pods(kube, namespace, render_controller.selector(name))
    out: dict[str, Any] = {"nodes": [p["metadata"]["name"] for p in ready], "size": size}
    if len(ready) >= size:  # brokers are given the controllers once the whole group is up
        await _apply_all(kube, [render_controller.access_service(name)], body, namespace)
        out["accessPoint"] = render_controller.access_point(name, namespace, size)
    out["_health"] = status.of_workload(size, len(ready), "controllers")
    return out


async def reconcile_broker(kube: Kube, settings: Settings, body: Obj) -> dict[str, Any]:
    name, namespace, spec = body["metadata"]["name"], body["metadata"]["namespace"], body["spec"]
    addr = await namesrv_addr(kube, spec, namespace)
    ctl, ctl_name = ("", None)
    if render_broker.mode(spec) == "CONTROLLER":
        ctl, ctl_name = await controller_addr(kube, spec, namespace)
    objs = render_broker.render(name, spec, addr, ctl, settings.image)
    kopf.adopt(objs, owner=kopf.Body(cast(kopf.RawBody, body)))
    await _apply_all(kube, [o for o in objs if o["kind"] != "StatefulSet"], body, namespace)
    statefulsets = [o for o in objs if o["kind"] == "StatefulSet"]
    rolling = await rollout.roll(kube, name, namespace, spec, statefulsets, addr, ctl_name)
    want = len(render_broker.members(name, spec))
    ready = await _ready_pods(kube, namespace, render_broker.selector(name))
    health = status.of_workload(want, len(ready), "brokers")
    if rolling:
        health = status.waiting("Rolling", "; ".join(rolling))
    out: dict[str, Any] = {"nodes": [p["metadata"]["name"] for p in ready], "size": int(spec["size"])}
    previous = body.get("status") or {}
    pending = metadata_copy.groups_to_seed(spec, previous)
    if pending:
        seeded = await _seed(kube, name, namespace, spec, pending, ready)
        remaining = [g for g in pending if g not in seeded]
        if remaining:  # status.size reaches spec.size once every new group has the metadata
            out.update(
                size=previous["size"], seededGroups=sorted({*previous.get("seededGroups", []), *seeded})
            )
            health = status.waiting(
                "CopyingMetadata", f"groups {remaining} wait for {spec['scalePodName']}'s topics"
            )
    sts = await kube.list(path("apps/v1", "statefulsets", namespace), render_broker.selector(name))
    surplus = set(render_broker.surplus(name, spec, [s["metadata"]["name"] for s in sts]))
    if surplus:
        draining = await _drain(
            kube, name, namespace, addr, [s for s in sts if s["metadata"]["name"] in surplus]
        )
        health = draining or health
    out["_health"] = health
    return out


def _group_of(obj: Obj) -> int:
    return int(obj["metadata"]["labels"][render_broker.GROUP_LABEL])


async def _drain(
    kube: Kube, name: str, namespace: str, namesrv: str, surplus: list[Obj]
) -> status.Health | None:
    """Drain each group beyond spec.size and delete its StatefulSets once drained; what is still
    draining (None when nothing is)."""
    observed = await kube.list(path("v1", "pods", namespace), render_broker.selector(name))
    waiting = []
    for group in sorted({_group_of(s) for s in surplus}):
        broker = render_broker.broker_name(name, group)
        running = [p for p in observed if _group_of(p) == group and pods.is_ready(p)]
        if not running:
            waiting.append(f"{broker}: no ready broker to drain (delete its StatefulSets to drop it unread)")
            continue
        try:
            await drain.wipe_write_perm(namesrv.split(";"), broker)
            left = sum([await drain.unread(f"{p['status']['podIP']}:{render_broker.PORT}") for p in running])
        except drain.DrainError as e:
            waiting.append(f"{broker}: {e}")
            continue
        if left:
            waiting.append(f"{broker}: {left} messages not consumed yet, writes stopped")
            continue
        for sts in surplus:
            if _group_of(sts) == group:
                await kube.delete(path("apps/v1", "statefulsets", namespace, sts["metadata"]["name"]))
    return status.waiting("Draining", "; ".join(waiting)) if waiting else None


async def _seed(
    kube: Kube, name: str, namespace: str, spec: Obj, groups: list[int], ready: list[Obj]
) -> list[int]:
    """Copy scalePodName's topics and subscription groups to every ready broker of `groups` whose
    members are all ready; the groups done."""
    source = await kube.get(path("v1", "pods", namespace, spec["scalePodName"]))
    if source is None or not pods.is_ready(source):
        return []
    by_group: dict[int, list[Obj]] = {}
    for pod in ready:
        by_group.setdefault(_group_of(pod), []).append(pod)
    members = Counter(m.group for m in render_broker.members(name, spec))
    reserved = {name} | {render_broker.broker_name(name, g) for g in range(int(spec["size"]))}
    done = []
    for g in groups:
        targets = by_group.get(g, [])
        if len(targets) < members.get(g, 1):
            continue
        try:
            for pod in targets:
                await metadata_copy.copy_metadata(
                    f"{source['status']['podIP']}:{render_broker.PORT}",
                    f"{pod['status']['podIP']}:{render_broker.PORT}",
                    reserved,
                )
        except metadata_copy.CopyError:
            continue  # tried again on the next reconcile
        done.append(g)
    return done


def _gateway(render: Callable[..., list[Obj]], selector: Callable[[str], dict[str, str]], what: str):
    async def reconcile(kube: Kube, settings: Settings, body: Obj) -> dict[str, Any]:
        name, namespace, spec = body["metadata"]["name"], body["metadata"]["namespace"], body["spec"]
        addr = await namesrv_addr(kube, spec, namespace)
        await _apply_all(kube, render(name, spec, addr, settings.image), body, namespace)
        ready = await _ready_pods(kube, namespace, selector(name))
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
    await _apply_all(kube, [deployment], body, namespace)
    observed = await kube.get(path("apps/v1", "deployments", namespace, deployment["metadata"]["name"])) or {}
    want = int((deployment.get("spec") or {}).get("replicas", 1))
    ready = int((observed.get("status") or {}).get("readyReplicas") or 0)
    return {"_health": status.of_workload(want, ready, "consoles")}


async def reconcile_topictransfer(kube: Kube, settings: Settings, body: Obj) -> dict[str, Any]:
    """One pass of the transfer: the steps that can run now, or the undo after a failure."""
    spec, namespace = body["spec"], body["metadata"]["namespace"]
    addr = await namesrv_addr(kube, spec, namespace)
    keys = ("phase", "step", "completedSteps", "message", "groups")
    st: dict[str, Any] = {k: v for k, v in (body.get("status") or {}).items() if k in keys}
    if "groups" not in st:
        try:
            st["groups"] = await topictransfer.groups_of(addr, spec["sourceCluster"], spec["topic"])
        except topictransfer.ActionFailed as e:
            raise Waiting("SourceUnreachable", str(e)) from None
        st.update(phase=plan_topictransfer.RUNNING, completedSteps=[])
    groups = st["groups"]
    if st["phase"] == plan_topictransfer.ROLLING_BACK:
        try:
            for action in plan_topictransfer.undo(st["completedSteps"], spec, groups):
                await topictransfer.execute(addr, spec["sourceCluster"], action)
            st["phase"] = plan_topictransfer.ROLLED_BACK
        except topictransfer.ActionFailed as e:
            st.update(phase=plan_topictransfer.FAILED, message=f"{st.get('message')}; undo failed: {e}")
    while (step := plan_topictransfer.next_step(st)) is not None:
        try:
            for action in plan_topictransfer.actions(step, spec, groups):
                await topictransfer.execute(addr, spec["sourceCluster"], action)
        except topictransfer.NotYet as e:
            st.update(step=step, message=str(e))
            break
        except topictransfer.ActionFailed as e:
            st = plan_topictransfer.after_failure(st, step, str(e))  # undone on the next pass
            break
        st = plan_topictransfer.after_success(st, step)
    phase = st["phase"]
    if phase == plan_topictransfer.SUCCEEDED:
        health = status.Health(
            True, False, False, "Succeeded", f"{spec['topic']} is on {spec['targetCluster']}"
        )
    elif phase in (plan_topictransfer.ROLLED_BACK, plan_topictransfer.FAILED):
        health = status.degraded(phase, st.get("message", ""))
    else:
        health = status.waiting(phase, st.get("message", ""))
    return {**st, "_health": health}


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
        "conditions": status.conditions(previous.get("conditions"), health, _now(), generation),
    }
    if any(previous.get(k) != v for k, v in new.items() if k != "conditions") or _changed(previous, new):
        await kube.patch(cr_path(kind, namespace, name) + "/status", {"status": new})
    if kind == "NameService" and previous.get("nameServers") != new.get("nameServers"):
        await push_name_servers(kube, settings, namespace)
    return new


def _changed(previous: Obj, new: Obj) -> bool:
    def key(conds: list[Obj] | None) -> list[tuple]:
        return [(c.get("type"), c.get("status"), c.get("reason"), c.get("message")) for c in conds or []]

    return key(previous.get("conditions")) != key(new.get("conditions"))


async def push_name_servers(kube: Kube, settings: Settings, namespace: str) -> None:
    """Reconcile every follower in the namespace at once, so new NameServer addresses reach them."""
    for kind in FOLLOWERS:
        for body in await kube.items(cr_path(kind, namespace)):
            if not (body.get("spec") or {}).get("nameServers"):
                body.setdefault("metadata", {}).setdefault("namespace", namespace)
                await run(kube, settings, kind, body)
