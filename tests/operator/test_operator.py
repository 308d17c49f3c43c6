"""The operator under kopf's KopfRunner against the in-memory API server: creating each resource
yields its objects, NameServer addresses follow the NameService's ready pods into the brokers, and
status conditions appear. The test plays the kubelet: it makes pods and marks them ready."""

from __future__ import annotations

from tests.operator.fakeapi import FakeApi
from tests.operator.helpers import API, APPS, CORE, condition, create, wait_for
from tests.operator.manifests import DEPLOY, load_all


def run_pods(api: FakeApi, sts_name: str, first_ip: int) -> None:
    """The kubelet's part: a ready pod per replica of the StatefulSet, with the pod IP 10.0.0.<n>."""
    sts = wait_for(f"StatefulSet {sts_name}", lambda: api.get(f"{APPS}/statefulsets/{sts_name}"))
    labels = sts["spec"]["template"]["metadata"]["labels"]
    for i in range(sts["spec"]["replicas"]):
        name = f"{sts_name}-{i}"
        if api.get(f"{CORE}/pods/{name}"):
            continue
        api.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "labels": labels},
                "spec": sts["spec"]["template"]["spec"],
            },
            f"{CORE}/pods",
        )
        api.patch(
            f"{CORE}/pods/{name}/status",
            {
                "status": {
                    "phase": "Running",
                    "podIP": f"10.0.0.{first_ip + i}",
                    "conditions": [{"type": "Ready", "status": "True"}],
                }
            },
        )


def _env(workload: dict | None, name: str) -> str | None:
    if workload is None:
        return None
    env = workload["spec"]["template"]["spec"]["containers"][0].get("env") or []
    return next((e.get("value") for e in env if e["name"] == name), None)


def broker_namesrv(api: FakeApi, sts_name: str) -> str | None:
    return _env(api.get(f"{APPS}/statefulsets/{sts_name}"), "FERRYMQ_NAMESRV_ADDR")


def test_nameservice_and_broker_follow_pods(api, operator):
    create(api, "NameService", "ns", {"size": 1})
    create(api, "Broker", "broker", {"size": 1, "replicaPerGroup": 1})
    waiting = wait_for(
        "the broker to wait for NameServers", lambda: condition(api, "Broker", "broker", "Progressing")
    )
    assert waiting["reason"] == "WaitingForNameServers" and waiting["status"] == "True"
    assert api.get(f"{APPS}/statefulsets/broker-0-master") is None  # nothing before NameServers exist

    run_pods(api, "ns", first_ip=1)
    wait_for("NameService Ready", lambda: (condition(api, "NameService", "ns") or {}).get("status") == "True")
    assert api.get(f"{API}/nameservices/ns")["status"]["nameServers"] == ["10.0.0.1"]
    wait_for("broker NAMESRV_ADDR", lambda: broker_namesrv(api, "broker-0-replica-1") == "10.0.0.1:9876")
    owner = api.get(f"{APPS}/statefulsets/broker-0-master")["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Broker", "broker", True)

    api.patch(f"{API}/nameservices/ns", {"spec": {"size": 2}})
    wait_for(
        "2 NameServer replicas", lambda: (api.get(f"{APPS}/statefulsets/ns") or {})["spec"]["replicas"] == 2
    )
    run_pods(api, "ns", first_ip=1)
    for sts in ("broker-0-master", "broker-0-replica-1"):
        wait_for(f"{sts} NAMESRV_ADDR", lambda s=sts: broker_namesrv(api, s) == "10.0.0.1:9876;10.0.0.2:9876")

    run_pods(api, "broker-0-master", first_ip=20)
    run_pods(api, "broker-0-replica-1", first_ip=30)
    wait_for("Broker Ready", lambda: (condition(api, "Broker", "broker") or {}).get("status") == "True")
    status = api.get(f"{API}/brokers/broker")["status"]
    assert status["nodes"] == ["broker-0-master-0", "broker-0-replica-1-0"] and status["size"] == 1


def test_controller_mode_cluster_from_the_sample(api, operator):
    """deploy/samples/cluster.yaml applied as is: every kind makes its objects, in dependency order."""
    for doc in load_all(DEPLOY / "samples" / "cluster.yaml"):
        create(api, doc["kind"], doc["metadata"]["name"], doc["spec"])
    run_pods(api, "name-service", first_ip=1)
    wait_for("proxy Deployment", lambda: api.get(f"{APPS}/deployments/proxy"))
    wait_for("AMQP gateway Deployment", lambda: api.get(f"{APPS}/deployments/amqp"))
    wait_for(  # made with the first ready NameServer, perhaps; then given all three
        "the console pointed at the 3 NameServers",
        lambda: (
            _env(api.get(f"{APPS}/deployments/console"), "NAMESRV_ADDR")
            == "10.0.0.1:9876;10.0.0.2:9876;10.0.0.3:9876"
        ),
    )

    assert (
        wait_for("controllers", lambda: api.get(f"{APPS}/statefulsets/controller"))["spec"]["replicas"] == 3
    )
    assert api.get(f"{CORE}/services/controller-svc") is None  # only once every member is up
    wait_for(  # first for NameServers, perhaps, then for controllers
        "broker waiting for controllers",
        lambda: (
            (condition(api, "Broker", "broker", "Progressing") or {}).get("reason") == "WaitingForControllers"
        ),
    )
    run_pods(api, "controller", first_ip=10)
    wait_for("controller Service", lambda: api.get(f"{CORE}/services/controller-svc"))
    wait_for("broker StatefulSets", lambda: api.get(f"{APPS}/statefulsets/broker-1-1"))
    env = api.get(f"{APPS}/statefulsets/broker-1-1")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "FERRYMQ_ENABLE_CONTROLLER_MODE", "value": "true"} in env


def test_pods_turning_ready_move_their_owner_and_its_dependants_without_a_resync(
    api, operator_without_resync
):
    """A pod becoming ready reconciles the resource that made it at once, and a new NameServer
    address or controller access point reconciles the brokers waiting on it: no resync period
    passes between one tier of a cluster being up and the next one being made."""
    create(api, "NameService", "ns", {"size": 1})
    create(api, "Controller", "ctl", {"size": 1})
    create(api, "Broker", "broker", {"size": 1, "clusterMode": "CONTROLLER"})
    wait_for("controllers", lambda: api.get(f"{APPS}/statefulsets/ctl"))
    run_pods(api, "ns", first_ip=1)
    wait_for("NameService Ready", lambda: (condition(api, "NameService", "ns") or {}).get("status") == "True")
    waiting = wait_for(
        "the broker told of the NameServers, now waiting for controllers",
        lambda: _progressing(api, "broker", "WaitingForControllers"),
    )
    assert waiting["status"] == "True" and api.get(f"{APPS}/statefulsets/broker-0-0") is None
    run_pods(api, "ctl", first_ip=10)
    wait_for("the broker StatefulSet", lambda: api.get(f"{APPS}/statefulsets/broker-0-0"))
    run_pods(api, "broker-0-0", first_ip=20)
    wait_for("Broker Ready", lambda: (condition(api, "Broker", "broker") or {}).get("status") == "True")

    api.request("DELETE", f"{CORE}/pods/ns-0")  # gone: the NameService has no address left
    wait_for("NameService not Ready", lambda: not (api.get(f"{API}/nameservices/ns") or {})["status"].get(
        "nameServers"))  # fmt: skip


def _progressing(api: FakeApi, broker: str, reason: str) -> dict | None:
    found = condition(api, "Broker", broker, "Progressing") or {}
    return found if found.get("reason") == reason else None


def test_bad_spec_is_degraded(api, operator):
    create(api, "Controller", "ctl", {"size": 2})
    degraded = wait_for("Degraded", lambda: condition(api, "Controller", "ctl", "Degraded"))
    assert degraded["status"] == "True" and "odd" in degraded["message"]
    assert api.get(f"{APPS}/statefulsets/ctl") is None
