"""Pieces every rendered workload shares: labels, image, env, probes, storage, pod template, objects.

Pure functions from a custom resource's spec to plain Kubernetes dicts; nothing here talks to an
API server, so the rendering of every kind is unit-tested as data.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

Obj = dict[str, Any]

try:
    _VERSION = version("ferrymq")
except PackageNotFoundError:  # running from a source tree
    _VERSION = "latest"
DEFAULT_IMAGE = f"ferrymq/ferrymq:{_VERSION}"
DATA_PATH = "/data"  # where every role keeps its files inside the container


class SpecError(ValueError):
    """A custom resource's spec the operator cannot render; its message goes into the Degraded condition."""


COMPONENT_LABEL = "app.kubernetes.io/component"  # the owning resource's kind, lower case
INSTANCE_LABEL = "app.kubernetes.io/instance"  # the owning resource's name
MANAGED_BY = {"app.kubernetes.io/managed-by": "ferrymq-operator"}


def labels(kind: str, name: str, **extra: str) -> dict[str, str]:
    """The labels of everything made for the resource `name` of `kind`; they select its pods."""
    return {
        "app.kubernetes.io/name": "ferrymq",
        COMPONENT_LABEL: kind.lower(),
        INSTANCE_LABEL: name,
        **MANAGED_BY,
        **extra,
    }


def image(spec: Obj, field: str, default: str) -> str:
    """The spec's image, except Apache's RocketMQ images, which cannot run ferrymq's commands."""
    given = spec.get(field) or ""
    return default if not given or given.startswith("apacherocketmq/") else given


def env(values: dict[str, str], spec: Obj) -> list[Obj]:
    """The pod IP and name from the downward API, then `values`, then the spec's own env (last wins)."""
    out: list[Obj] = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    out += [{"name": k, "value": v} for k, v in values.items()]
    return out + list(spec.get("env") or [])


def env_value(container: Obj, name: str) -> str | None:
    """The literal value of a container's env variable `name`, or None."""
    for item in container.get("env") or []:
        if item.get("name") == name:
            return item.get("value")
    return None


def probes(metrics_port: int) -> Obj:
    """Readiness and liveness on the role's health endpoints (docs/operations.md). Readiness is
    probed every second: each tier of a cluster waits for the one before it to be ready, and a
    longer period is paid once per tier at start-up. It takes 15 failures in a row, as 3 every
    5 s did, to mark a running pod unready."""
    return {
        "readinessProbe": {
            "httpGet": {"path": "/health/ready", "port": metrics_port},
            "periodSeconds": 1,
            "failureThreshold": 15,
        },
        "livenessProbe": {
            "httpGet": {"path": "/health/live", "port": metrics_port},
            "initialDelaySeconds": 10,
            "periodSeconds": 10,
            "failureThreshold": 6,
        },
    }


def ports(**named: int) -> list[Obj]:
    return [{"name": name, "containerPort": port, "protocol": "TCP"} for name, port in named.items()]


def storage(spec: Obj, default_volume: str) -> tuple[list[Obj], list[Obj], Obj]:
    """(pod volumes, StatefulSet volumeClaimTemplates, the container's mount of DATA_PATH).

    Apache's storageMode: EmptyDir (the default), HostPath (spec.hostPath) or StorageClass (a
    claim per pod from the first of spec.volumeClaimTemplates)."""
    templates = list(spec.get("volumeClaimTemplates") or [])
    name = (templates[0].get("metadata") or {}).get("name", default_volume) if templates else default_volume
    mount = {"name": name, "mountPath": DATA_PATH}
    mode = spec.get("storageMode") or "EmptyDir"
    if mode == "EmptyDir":
        return [{"name": name, "emptyDir": {}}], [], mount
    if mode == "HostPath":
        if not spec.get("hostPath"):
            raise SpecError("storageMode HostPath needs hostPath")
        return (
            [{"name": name, "hostPath": {"path": spec["hostPath"], "type": "DirectoryOrCreate"}}],
            [],
            mount,
        )
    if mode == "StorageClass":
        if not templates:
            raise SpecError("storageMode StorageClass needs volumeClaimTemplates")
        return [], [templates[0]], mount
    raise SpecError(f"storageMode must be EmptyDir, HostPath or StorageClass, not {mode!r}")


def container(
    name: str, spec: Obj, image_name: str, args: list[str], env_list: list[Obj], **extra: Any
) -> Obj:
    out: Obj = {
        "name": name,
        "image": image_name,
        "imagePullPolicy": spec.get("imagePullPolicy") or "IfNotPresent",
        "command": ["ferrymq"],
        "args": args,
        "env": env_list,
        "resources": spec.get("resources") or {},
        **extra,
    }
    if spec.get("containerSecurityContext"):
        out["securityContext"] = spec["containerSecurityContext"]
    return out


# Apache's pod-level fields, copied as given.
_POD_FIELDS = {
    "securityContext": "securityContext",
    "imagePullSecrets": "imagePullSecrets",
    "affinity": "affinity",
    "tolerations": "tolerations",
    "nodeSelector": "nodeSelector",
    "priorityClassName": "priorityClassName",
    "serviceAccountName": "serviceAccountName",
    "dnsPolicy": "dnsPolicy",
}


def pod_template(spec: Obj, pod_labels: dict[str, str], containers: list[Obj], volumes: list[Obj]) -> Obj:
    pod: Obj = {
        "containers": containers,
        "volumes": volumes + list(spec.get("volumes") or []),
        "terminationGracePeriodSeconds": 30,  # a broker's stop takes about 5 s plus its final flush
    }
    if spec.get("hostNetwork"):
        pod["hostNetwork"] = True
        pod["dnsPolicy"] = "ClusterFirstWithHostNet"
    pod.update({ours: spec[theirs] for theirs, ours in _POD_FIELDS.items() if spec.get(theirs)})
    metadata: Obj = {"labels": pod_labels}
    if spec.get("podAnnotations"):
        metadata["annotations"] = dict(spec["podAnnotations"])
    return {"metadata": metadata, "spec": pod}


def statefulset(
    name: str, sel: dict[str, str], replicas: int, template: Obj, service: str, claims: list[Obj]
) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "labels": template["metadata"]["labels"]},
        "spec": {
            "replicas": replicas,
            "serviceName": service,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": sel},
            "template": template,
            "volumeClaimTemplates": claims,
        },
    }


def deployment(name: str, sel: dict[str, str], replicas: int, template: Obj) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": template["metadata"]["labels"]},
        "spec": {"replicas": replicas, "selector": {"matchLabels": sel}, "template": template},
    }


def service(name: str, sel: dict[str, str], service_ports: dict[str, int], headless: bool = False) -> Obj:
    """A Service; a headless one gives every pod a stable DNS name, ready or not (Raft peers need that)."""
    spec: Obj = {
        "selector": sel,
        "ports": [
            {"name": n, "port": p, "targetPort": p, "protocol": "TCP"} for n, p in service_ports.items()
        ],
    }
    if headless:
        spec.update(clusterIP="None", publishNotReadyAddresses=True)
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": sel}, "spec": spec}


def headless_name(name: str) -> str:
    return f"{name}-svc-headless"  # Apache's BuildHeadlessSvcResourceName


def service_name(name: str) -> str:
    return f"{name}-svc"  # Apache's BuildSvcResourceName


def is_ready(pod: Obj) -> bool:
    """A running pod whose Ready condition is True (its readiness probe passes)."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running" or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def ordinal(pod_name: str) -> int:
    """A StatefulSet pod's index, the number after its last dash."""
    tail = pod_name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def owned_pods(pods: list[Obj], sel: dict[str, str]) -> list[Obj]:
    """The pods whose labels carry all of `sel`, by StatefulSet ordinal then name."""
    mine = [p for p in pods if sel.items() <= ((p.get("metadata") or {}).get("labels") or {}).items()]
    return sorted(mine, key=lambda p: (ordinal(p["metadata"]["name"]), p["metadata"]["name"]))


def front(
    kind: str, name: str, spec: Obj, command: list[str], port_name: str, port: int, metrics_port: int,
    namesrv_env: str, namesrv_addr: str, default_image: str,
) -> list[Obj]:  # fmt: skip
    """A stateless front of the cluster (the gRPC proxy, the AMQP gateway): a Deployment of `spec`'s
    size running `command` with its NameServers in `namesrv_env`, probed on its metrics port, and
    the Service of its `port`."""
    main = container(
        command[0],
        spec,
        image(spec, "image", default_image),
        [*command, "--metrics-port", str(metrics_port)],
        env({namesrv_env: namesrv_addr}, spec),
        ports=ports(**{port_name: port, "metrics": metrics_port}),
        **probes(metrics_port),
    )
    sel = labels(kind, name)
    return [
        deployment(name, sel, int(spec["size"]), pod_template(spec, sel, [main], [])),
        service(service_name(name), sel, {port_name: port}),
    ]
