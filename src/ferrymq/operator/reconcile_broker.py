"""Broker: its StatefulSets rolled group by group, new groups seeded from scalePodName, surplus
groups drained before they go, and its status."""

from __future__ import annotations

from collections import Counter
from typing import Any, cast

import kopf

from ferrymq.operator import drain, metadata_copy, pods, render_broker, rollout, status
from ferrymq.operator.context import (
    Settings,
    apply_all,
    controller_addr,
    namesrv_addr,
    ready_pods,
)
from ferrymq.operator.kube import Kube, path
from ferrymq.operator.pods import Obj


async def reconcile_broker(kube: Kube, settings: Settings, body: Obj) -> dict[str, Any]:
    name, namespace, spec = body["metadata"]["name"], body["metadata"]["namespace"], body["spec"]
    addr = await namesrv_addr(kube, spec, namespace)
    ctl, ctl_name = ("", None)
    if render_broker.mode(spec) == "CONTROLLER":
        ctl, ctl_name = await controller_addr(kube, spec, namespace)
    objs = render_broker.render(name, spec, addr, ctl, settings.image)
    kopf.adopt(objs, owner=kopf.Body(cast(kopf.RawBody, body)))
    await apply_all(kube, [o for o in objs if o["kind"] != "StatefulSet"], body, namespace)
    statefulsets = [o for o in objs if o["kind"] == "StatefulSet"]
    rolling = await rollout.roll(kube, name, namespace, spec, statefulsets, addr, ctl_name)
    want = len(render_broker.members(name, spec))
    ready = await ready_pods(kube, namespace, render_broker.selector(name))
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
