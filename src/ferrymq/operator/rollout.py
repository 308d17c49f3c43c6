"""Applying a Broker's StatefulSets group by group in plan_rollout's order.

The facts the plan needs come from the cluster: which StatefulSets differ from the desired ones
(kube.needs_patch), which are up to date and ready (the StatefulSet's status and its pod's), which
member is the master (the NameServers' cluster info: the address of broker id 0), and which members
the controllers could make master (their SyncStateSet). The operator reaches brokers, NameServers and
controllers by pod IP, so it needs no cluster DNS of its own.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

from ferrymq.client.admin import Admin
from ferrymq.client.instance import ClientError
from ferrymq.net import RemotingError
from ferrymq.operator import plan_rollout, pods, render_broker, render_controller
from ferrymq.operator.kube import Kube, needs_patch, path
from ferrymq.operator.pods import Obj

STATEFULSET_LABEL = render_broker.STATEFULSET_LABEL


def up_to_date(sts: Obj) -> bool:
    """The StatefulSet controller has rolled every replica onto the current template."""
    status, replicas = sts.get("status") or {}, sts["spec"].get("replicas", 1)
    generation = sts["metadata"].get("generation", 0)
    return bool(
        status.get("observedGeneration", -1) >= generation
        and status.get("updatedReplicas") == replicas
        and status.get("readyReplicas") == replicas
    )


async def roll(
    kube: Kube, name: str, namespace: str, spec: Obj, desired: list[Obj], namesrv: str, controller: str | None
) -> list[str]:
    """Create or patch the broker StatefulSets in `desired` (adopted already); what waits, and why."""
    want = {o["metadata"]["name"]: o for o in desired}
    observed = {
        s["metadata"]["name"]: s
        for s in await kube.list(path("apps/v1", "statefulsets", namespace), render_broker.selector(name))
    }
    found = await kube.list(path("v1", "pods", namespace), render_broker.selector(name))
    ready_pods = {p["metadata"]["labels"].get(STATEFULSET_LABEL): p for p in found if pods.is_ready(p)}
    ready = {n for n, s in observed.items() if up_to_date(s) and n in ready_pods}
    by_ip = {p["status"]["podIP"]: n for n, p in ready_pods.items() if (p.get("status") or {}).get("podIP")}
    groups: dict[int, list[str]] = defaultdict(list)
    for member in render_broker.members(name, spec):
        groups[member.group].append(member.statefulset)
    # Members not made yet are made all at once: a new group's pods start side by side.
    await asyncio.gather(*(kube.apply(want[m], namespace) for m in want if m not in observed))
    waiting = []
    for group, members in sorted(groups.items()):
        changed = {m for m in members if m in observed and needs_patch(observed[m], want[m])}
        if not changed:
            continue
        broker = render_broker.broker_name(name, group)
        master: str | None = None
        electable: dict[str, int] = {}
        if ready & set(members):
            try:
                master, electable = await _roles(kube, namespace, namesrv, controller, broker, by_ip)
            except (ClientError, RemotingError, OSError) as e:
                waiting.append(f"{broker}: its master is unknown ({e})")
                continue
            if render_broker.mode(spec) == "STATIC":
                master = f"{broker}-master"
        step = plan_rollout.next_step(members, changed, ready, master, set(electable))
        if step.action == "patch":
            for sts in step.statefulsets:
                await kube.apply(want[sts], namespace)
        elif step.action == "elect":
            try:
                await _elect(kube, namespace, namesrv, controller, broker, electable[step.statefulsets[0]])
                waiting.append(f"{broker}: {step.reason}")
            except (ClientError, RemotingError, OSError) as e:
                waiting.append(f"{broker}: {step.reason} failed ({e})")
        elif step.action == "wait":
            waiting.append(f"{broker}: rolling, {step.reason}")
    return waiting


async def _controllers(kube: Kube, namespace: str, controller: str) -> str:
    found = await kube.list(path("v1", "pods", namespace), render_controller.selector(controller))
    return ";".join(f"{p['status']['podIP']}:{render_controller.PORT}" for p in found if pods.is_ready(p))


async def _roles(
    kube: Kube, namespace: str, namesrv: str, controller: str | None, broker: str, by_ip: dict[str, str]
) -> tuple[str | None, dict[str, int]]:
    """(the master's StatefulSet, {StatefulSet: broker id} of the members the controllers may elect).

    In CONTROLLER mode both come from the controllers, who know a new master at once; the
    NameServers learn it only at the brokers' next registration."""

    def sts_of(address: str) -> str | None:
        return by_ip.get(address.rsplit(":", 1)[0])

    async with Admin(namesrv) as admin:
        if controller is None:
            data = (await admin.cluster_info()).broker_addr_table.get(broker)
            master_addr = (data.broker_addrs if data else {}).get(0)
            return (sts_of(master_addr) if master_addr else None), {}
        controllers = await _controllers(kube, namespace, controller)
        view = next((v for v in await admin.broker_groups(controllers) if v.broker_name == broker), None)
        if view is None:
            return None, {}
        master = next((sts_of(r.address) for r in view.replicas if r.broker_id == view.master_id), None)
        electable = {
            sts: r.broker_id
            for r in view.replicas
            if r.in_sync and r.role != "gone" and (sts := sts_of(r.address)) is not None
        }
        return master, electable


async def _elect(
    kube: Kube, namespace: str, namesrv: str, controller: str | None, broker: str, broker_id: int
) -> None:
    assert controller is not None  # electable members exist only in CONTROLLER mode
    async with Admin(namesrv) as admin:
        await admin.elect_master(await _controllers(kube, namespace, controller), broker, broker_id)
