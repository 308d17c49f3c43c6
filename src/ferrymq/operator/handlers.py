"""The kopf handlers: thin, every one a call of `reconcile.run` for its kind.

Each kind is reconciled on create, update and resume, and again every `resync` seconds, because
most of what it depends on (pods becoming ready, a NameService's addresses, the controllers'
access point) changes without its own spec changing. The resync is the safety net, not the way
changes travel: a pod of ours turning ready, unready or gone reconciles its owner at once, and a
changed NameService or Controller status reconciles what depends on it (reconcile.DEPENDANTS), so
a cluster comes up in the time its pods take to start, not in a chain of resync periods.
"""

from __future__ import annotations

from typing import Any

import kopf

from ferrymq.operator import pods
from ferrymq.operator.context import Settings
from ferrymq.operator.crds import GROUP, VERSION, plural
from ferrymq.operator.kube import Kube
from ferrymq.operator.reconcile import RECONCILERS, reconcile_owner, run


def build_registry(settings: Settings) -> kopf.OperatorRegistry:
    """A registry with the handlers of every kind the operator reconciles."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        """The pod's service account in a cluster, else the kubeconfig (as `Kube.connect` does)."""
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.startup(registry=registry)
    async def connect(memo: kopf.Memo, settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.level = 30  # post Events for warnings and errors only
        memo["kube"] = await Kube.connect()
        memo["pod_states"] = {}  # pod uid → (ready, IP) last acted on, shared by every pod's handler

    @kopf.on.cleanup(registry=registry)
    async def disconnect(memo: kopf.Memo, **_: Any) -> None:
        if "kube" in memo:
            await memo["kube"].close()

    @kopf.on.event("v1", "pods", labels=pods.MANAGED_BY, registry=registry)
    async def pod_changed(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        """Reconcile the pod's owner when its readiness, IP or existence changed (not on every
        event: the kubelet updates pods for many other reasons)."""
        seen: dict[str, tuple] = memo["pod_states"]
        uid = body.metadata.uid or ""
        state = (pods.is_ready(dict(body)), body.status.get("podIP"))
        if event["type"] == "DELETED":
            seen.pop(uid, None)
        elif seen.get(uid) == state:
            return
        else:
            seen[uid] = state
        await reconcile_owner(memo["kube"], settings, dict(body))

    for kind in RECONCILERS:
        _register(registry, settings, kind)
    return registry


def _register(registry: kopf.OperatorRegistry, settings: Settings, kind: str) -> None:
    resource = (GROUP, VERSION, plural(kind))

    async def reconcile(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        await run(memo["kube"], settings, kind, dict(body))

    for decorator in (kopf.on.create, kopf.on.update, kopf.on.resume):
        decorator(*resource, registry=registry, id=f"reconcile-{kind}")(reconcile)
    kopf.timer(*resource, registry=registry, interval=settings.resync, idle=None, id=f"resync-{kind}")(
        reconcile
    )
