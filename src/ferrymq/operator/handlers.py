"""The kopf handlers: thin, every one a call of `reconcile.run` for its kind.

Each kind is reconciled on create, update and resume, and again every `resync` seconds, because
most of what it depends on (pods becoming ready, a NameService's addresses, the controllers'
access point) changes without its own spec changing.
"""

from __future__ import annotations

from typing import Any

import kopf

from ferrymq.operator.context import Settings
from ferrymq.operator.crds import GROUP, VERSION, plural
from ferrymq.operator.kube import Kube
from ferrymq.operator.reconcile import RECONCILERS, run


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

    @kopf.on.cleanup(registry=registry)
    async def disconnect(memo: kopf.Memo, **_: Any) -> None:
        if "kube" in memo:
            await memo["kube"].close()

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
