"""The CustomResourceDefinitions the operator serves, built here and written to deploy/crds/.

Group ``rocketmq.apache.org``, version ``v1alpha1`` and the field names of apache/rocketmq-operator,
so that manifests written for it apply unchanged; Proxy and AmqpGateway are ferrymq's own kinds.
The schemas are built in Python so that the pod fields every kind shares are written once;
``ferrymq operator crds`` prints them and a test keeps deploy/crds/ equal to this module.

Schemas are structural (every object has properties or keeps unknown fields), as the API server
requires. Apache marks many fields required that a ferrymq pod can default (image, storage mode,
resources); here only what has no sensible default is required, so their manifests still validate.
"""

from __future__ import annotations

from typing import Any

GROUP = "rocketmq.apache.org"
VERSION = "v1alpha1"

Schema = dict[str, Any]


def _string(description: str = "", **extra: Any) -> Schema:
    return {"type": "string", **({"description": description} if description else {}), **extra}


def _integer(description: str, minimum: int = 0, **extra: Any) -> Schema:
    return {"type": "integer", "minimum": minimum, "description": description, **extra}


def _free_object(description: str) -> Schema:
    """A Kubernetes type the API server checks itself (resources, affinity, ...): kept as given."""
    return {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "description": description}


def _string_map(description: str) -> Schema:
    return {"type": "object", "additionalProperties": {"type": "string"}, "description": description}


def _array_of_objects(description: str) -> Schema:
    return {"type": "array", "items": _free_object(""), "description": description}


ENV: Schema = {
    "type": "array",
    "description": "Extra environment variables of the container (FERRYMQ_<SETTING> sets a setting).",
    "items": {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": _string(),
            "value": _string(),
            "valueFrom": _free_object("As in a container's env."),
        },
    },
}

STORAGE_MODES = ["EmptyDir", "HostPath", "StorageClass"]

# Fields of the pod template every workload kind takes, Apache's names.
POD_FIELDS: dict[str, Schema] = {
    "imagePullPolicy": _string("Image pull policy.", enum=["Always", "IfNotPresent", "Never"]),
    "resources": _free_object("The container's compute resource requests and limits."),
    "env": ENV,
    "securityContext": _free_object("The pod's security context."),
    "containerSecurityContext": _free_object("The container's security context."),
    "podAnnotations": _string_map("Annotations of every pod."),
    "imagePullSecrets": {
        "type": "array",
        "items": {"type": "object", "properties": {"name": _string()}},
        "description": "Secrets to pull the image with.",
    },
    "affinity": _free_object("The pod's affinity."),
    "tolerations": _array_of_objects("The pod's tolerations."),
    "nodeSelector": _string_map("The pod's node selector."),
    "priorityClassName": _string("The pod's priority class."),
    "serviceAccountName": _string("The pod's service account."),
}

STORAGE_FIELDS: dict[str, Schema] = {
    "storageMode": _string(
        "Where data lives: EmptyDir (default), HostPath or StorageClass.", enum=STORAGE_MODES
    ),
    "hostPath": _string("The node's directory in HostPath mode."),
    "volumeClaimTemplates": _array_of_objects(
        "PersistentVolumeClaims; the first names the data volume (claimed in StorageClass mode)."
    ),
}

NAMESRV_SOURCE_FIELDS: dict[str, Schema] = {
    "nameServers": _string('NameServer addresses "ip:port;ip:port"; empty: those of the NameService.'),
    "nameService": _string("The NameService to follow when nameServers is empty (default: the only one)."),
}

CONDITIONS: Schema = {
    "type": "array",
    "description": "Ready, Progressing and Degraded, for `kubectl wait --for=condition=Ready`.",
    "items": {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": _string(),
            "status": _string(enum=["True", "False", "Unknown"]),
            "reason": _string(),
            "message": _string(),
            "lastTransitionTime": _string(format="date-time"),
            "observedGeneration": {"type": "integer"},
        },
    },
}


def _status(**fields: Schema) -> Schema:
    return {
        "type": "object",
        "properties": {"conditions": CONDITIONS, "observedGeneration": {"type": "integer"}, **fields},
    }


NODES_STATUS: dict[str, Schema] = {
    "nodes": {"type": "array", "items": _string(), "description": "Names of the pods that are ready."},
    "size": {"type": "integer", "description": "The size the workload has now."},
}


def _workload_image(field: str) -> dict[str, Schema]:
    return {field: _string("Container image (an apacherocketmq/* image is replaced by the ferrymq one).")}


KINDS: dict[str, dict[str, Any]] = {
    "NameService": {
        "plural": "nameservices",
        "short": ["rmqns"],
        "description": "A NameServer StatefulSet; its pods' addresses go to every Broker that follows it.",
        "required": ["size"],
        "spec": {
            "size": _integer("How many NameServers.", minimum=1),
            **_workload_image("nameServiceImage"),
            "hostNetwork": {"type": "boolean", "description": "Run the pods in the node's network."},
            "dnsPolicy": _string("The pod's DNS policy (ClusterFirstWithHostNet with hostNetwork)."),
            **POD_FIELDS,
            **STORAGE_FIELDS,
        },
        "status": _status(
            nameServers={
                "type": "array",
                "items": _string(),
                "description": "IPs of the ready NameServer pods (port 9876).",
            },
        ),
    },
    "Controller": {
        "plural": "controllers",
        "short": ["rmqctl"],
        "description": "A group of controllers that elect each broker group's master (controller mode).",
        "required": ["size"],
        "spec": {
            "size": _integer("How many controllers: an odd number, for a Raft majority.", minimum=1),
            **_workload_image("controllerImage"),
            **POD_FIELDS,
            **STORAGE_FIELDS,
        },
        "status": _status(
            **NODES_STATUS,
            accessPoint=_string("host:port brokers reach the controllers on, once all are ready."),
        ),
    },
    "Broker": {
        "plural": "brokers",
        "short": ["rmqbroker"],
        "description": "`size` broker groups of one master and `replicaPerGroup` replicas each.",
        "required": ["size"],
        "spec": {
            "size": _integer("How many broker groups.", minimum=1),
            "replicaPerGroup": _integer("Replicas (slaves) in each group besides its master."),
            "clusterMode": _string("STATIC (default) or CONTROLLER.", enum=["STATIC", "CONTROLLER"]),
            "controller": _string("The Controller resource in CONTROLLER mode (default: the only one)."),
            **NAMESRV_SOURCE_FIELDS,
            **_workload_image("brokerImage"),
            "allowRestart": {"type": "boolean", "description": "Restart pods when the NameServers change."},
            "hostNetwork": {"type": "boolean", "description": "Run the pods in the node's network."},
            "scalePodName": _string("Scaling out copies topics and subscription groups from this pod."),
            "brokerConfig": _free_object(
                "Broker settings in snake_case (flush_disk_type: SYNC_FLUSH, ...), set as FERRYMQ_* env."
            ),
            "volumes": _array_of_objects("Extra pod volumes (Apache's broker-common.conf ConfigMap)."),
            **POD_FIELDS,
            **STORAGE_FIELDS,
        },
        "status": _status(
            **NODES_STATUS,
            seededGroups={
                "type": "array",
                "items": {"type": "integer"},
                "description": "New groups already given scalePodName's topics and subscription groups.",
            },
        ),
    },
    "TopicTransfer": {
        "plural": "topictransfers",
        "short": ["rmqtt"],
        "description": "Moves a topic and its consumer groups from one broker cluster to another.",
        "required": ["topic", "sourceCluster", "targetCluster"],
        "spec": {
            "topic": _string("The topic to move."),
            "sourceCluster": _string("The cluster (Broker resource name) it leaves."),
            "targetCluster": _string("The cluster it moves to."),
            **NAMESRV_SOURCE_FIELDS,
        },
        "status": _status(
            phase=_string("Pending, Running, Succeeded, RolledBack or Failed."),
            step=_string("The step running or last run."),
            completedSteps={"type": "array", "items": _string()},
            message=_string(),
            groups={"type": "array", "items": _string(), "description": "The consumer groups moved with it."},
        ),
    },
    "Console": {
        "plural": "consoles",
        "short": ["rmqconsole"],
        "description": "A console Deployment pointed at the NameServers.",
        "required": ["consoleDeployment"],
        "spec": {
            "consoleDeployment": _free_object("A complete apps/v1 Deployment of the console."),
            **NAMESRV_SOURCE_FIELDS,
        },
        "status": _status(),
    },
    "Proxy": {
        "plural": "proxies",
        "short": ["rmqproxy"],
        "description": "RocketMQ 5 gRPC proxies (apache.rocketmq.v2.MessagingService) before the brokers.",
        "required": ["size"],
        "spec": {
            "size": _integer("How many proxies.", minimum=1),
            "image": _string("Container image (default: the operator's ferrymq image)."),
            "port": _integer("gRPC port (default 8081).", minimum=1, maximum=65535),
            **NAMESRV_SOURCE_FIELDS,
            **POD_FIELDS,
        },
        "status": _status(**NODES_STATUS),
    },
    "AmqpGateway": {
        "plural": "amqpgateways",
        "short": ["rmqamqp"],
        "description": "AMQP 0-9-1 gateways, so that RabbitMQ applications use the brokers unchanged.",
        "required": ["size", "meta"],
        "spec": {
            "size": _integer("How many gateways.", minimum=1),
            "image": _string("Container image (default: the operator's ferrymq image)."),
            "port": _integer("AMQP port (default 5672).", minimum=1, maximum=65535),
            "meta": _string("The metadata service every gateway shares: host:port or a PostgreSQL URL."),
            **NAMESRV_SOURCE_FIELDS,
            **POD_FIELDS,
        },
        "status": _status(**NODES_STATUS),
    },
}


def crd(kind: str) -> dict[str, Any]:
    """The CustomResourceDefinition of `kind`."""
    info = KINDS[kind]
    spec_schema: Schema = {"type": "object", "required": info["required"], "properties": info["spec"]}
    schema: Schema = {
        "type": "object",
        "description": info["description"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema,
            "status": info["status"],
        },
    }
    columns = [
        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    if "size" in info["spec"]:
        columns.insert(0, {"name": "Size", "type": "integer", "jsonPath": ".spec.size"})
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{info['plural']}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": info["plural"],
                "singular": kind.lower(),
                "shortNames": info["short"],
                "categories": ["ferrymq"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                }
            ],
        },
    }


def all_crds() -> list[dict[str, Any]]:
    return [crd(kind) for kind in KINDS]


def plural(kind: str) -> str:
    return str(KINDS[kind]["plural"])
