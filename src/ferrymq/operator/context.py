"""What every reconcile shares: the operator's settings, resource paths, applying owned objects,
ready pods, and the NameServer and controller addresses a resource depends on."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import cast

import kopf

from ferrymq.operator import pods, render_nameservice
from ferrymq.operator.crds import GROUP, VERSION, plural
from ferrymq.operator.kube import Kube, path
from ferrymq.operator.pods import Obj

API = f"{GROUP}/{VERSION}"


@dataclass(frozen=True)
class Settings:
    image: str = pods.DEFAULT_IMAGE  # for every pod whose resource names no image of its own
    resync: float = 6.0  # s between two reconciles of an unchanged resource (Apache requeues every 6 s)


class Waiting(Exception):
    """Something the resource needs is not there yet; the message says what."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def cr_path(kind: str, namespace: str, name: str | None = None) -> str:
    return path(API, plural(kind), namespace, name)


async def apply_all(kube: Kube, objs: list[Obj], owner: Obj, namespace: str) -> None:
    kopf.adopt(objs, owner=kopf.Body(cast(kopf.RawBody, owner)))
    for obj in objs:
        await kube.apply(obj, namespace)


async def ready_pods(kube: Kube, namespace: str, sel: dict[str, str]) -> list[Obj]:
    found = await kube.list(path("v1", "pods", namespace), sel)
    return [p for p in pods.owned_pods(found, sel) if pods.is_ready(p)]


async def only_or_named(kube: Kube, kind: str, namespace: str, name: str | None) -> Obj:
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
    ns = await only_or_named(kube, "NameService", namespace, spec.get("nameService"))
    ips = (ns.get("status") or {}).get("nameServers") or []
    if not ips:
        raise Waiting(
            "WaitingForNameServers", f"NameService {ns['metadata']['name']} has no ready NameServer"
        )
    return render_nameservice.addresses(ips)


async def controller_addr(kube: Kube, spec: Obj, namespace: str) -> tuple[str, str]:
    """(the access point brokers are given, the Controller's name); Waiting until it has one."""
    ctl = await only_or_named(kube, "Controller", namespace, spec.get("controller"))
    point = (ctl.get("status") or {}).get("accessPoint")
    if not point:
        raise Waiting("WaitingForControllers", f"Controller {ctl['metadata']['name']} is not ready")
    return str(point), ctl["metadata"]["name"]
