"""Console → the spec's own Deployment, its first container pointed at the NameServers.

Apache's Console carries a complete Deployment (a rocketmq-dashboard image, whose Java reads
`-Drocketmq.namesrv.addr` from JAVA_OPTS); the addresses are also given as NAMESRV_ADDR and
FERRYMQ_NAMESRV_ADDR for consoles that read those.
"""

from __future__ import annotations

import copy

from ferrymq.operator import pods
from ferrymq.operator.pods import Obj, SpecError

KIND = "Console"
NAMESRV_ENV = "FERRYMQ_NAMESRV_ADDR"


def render(name: str, spec: Obj, namesrv_addr: str) -> list[Obj]:
    deployment = copy.deepcopy(spec.get("consoleDeployment") or {})
    containers = (((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")
    if not containers:
        raise SpecError("consoleDeployment needs spec.template.spec.containers")
    deployment.update(apiVersion="apps/v1", kind="Deployment")
    meta = deployment.setdefault("metadata", {})
    meta["name"] = meta.get("name") or name
    meta.pop("namespace", None)  # always the Console's own
    meta["labels"] = {**(meta.get("labels") or {}), **pods.labels(KIND, name)}
    ours = {
        "JAVA_OPTS": f"-Drocketmq.namesrv.addr={namesrv_addr} -Dcom.rocketmq.sendMessageWithVIPChannel=false",
        "NAMESRV_ADDR": namesrv_addr,
        NAMESRV_ENV: namesrv_addr,
    }
    first = containers[0]
    first["env"] = [e for e in first.get("env") or [] if e.get("name") not in ours] + [
        {"name": k, "value": v} for k, v in ours.items()
    ]
    return [deployment]
