"""The render functions: spec (+ observed addresses) → the StatefulSets, Services and Deployments."""

from __future__ import annotations

import pytest

from ferrymq.cli.main import main
from ferrymq.operator import (
    pods,
    render_amqp,
    render_broker,
    render_console,
    render_controller,
    render_nameservice,
    render_proxy,
    status,
)
from ferrymq.operator.pods import SpecError
from tests.operator.manifests import ROOT, load_all

IMAGE = "ferrymq/ferrymq:test"


def _by_kind(objs, kind):
    return [o for o in objs if o["kind"] == kind]


def _env(container):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def _main(sts):
    return sts["spec"]["template"]["spec"]["containers"][0]


def _command_parses(args):
    """The rendered arguments are ones the real `ferrymq` command line accepts (without running it)."""
    command = main.get_command(None, args[0])
    assert command is not None, args[0]
    command.make_context(args[0], list(args[1:]), resilient_parsing=False)


def test_nameservice_statefulset_probes_and_storage():
    spec = {
        "size": 3,
        "hostNetwork": True,
        "storageMode": "HostPath",
        "hostPath": "/data/ns",
        "nameServiceImage": "apacherocketmq/rocketmq-nameserver:4.5.0",
        "nodeSelector": {"disk": "ssd"},
    }
    sts, svc = render_nameservice.render("ns", spec, IMAGE)
    assert sts["metadata"]["name"] == "ns" and sts["spec"]["replicas"] == 3
    pod = sts["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["nodeSelector"] == {"disk": "ssd"}
    assert pod["volumes"] == [
        {"name": "namesrv-storage", "hostPath": {"path": "/data/ns", "type": "DirectoryOrCreate"}}
    ]
    c = _main(sts)
    assert c["image"] == IMAGE  # Apache's Java image cannot run ferrymq
    assert c["readinessProbe"]["httpGet"] == {"path": "/health/ready", "port": 5556}
    assert c["livenessProbe"]["httpGet"] == {"path": "/health/live", "port": 5556}
    _command_parses(c["args"])
    assert svc["spec"]["clusterIP"] == "None" and svc["metadata"]["name"] == "ns-svc-headless"


def _pod(name, ip, ready=True, labels=None):
    return {
        "metadata": {
            "name": name,
            "labels": labels if labels is not None else render_nameservice.selector("ns"),
        },
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_name_servers_are_ready_pods_in_ordinal_order():
    observed = [
        _pod("ns-10", "10.0.0.10"),
        _pod("ns-2", "10.0.0.2"),
        _pod("ns-1", "10.0.0.1", ready=False),
        _pod("other-0", "10.9.9.9", labels={"app": "x"}),
    ]
    ips = render_nameservice.name_servers("ns", observed)
    assert ips == ["10.0.0.2", "10.0.0.10"]
    assert render_nameservice.addresses(ips) == "10.0.0.2:9876;10.0.0.10:9876"


def test_static_broker_groups_env_and_config():
    spec = {
        "size": 2,
        "replicaPerGroup": 1,
        "brokerConfig": {
            "broker_role": "SYNC_MASTER",
            "flush_disk_type": "SYNC_FLUSH",
            "slave_read_enable": True,
        },
        "env": [{"name": "FERRYMQ_FILE_RESERVED_TIME", "value": "48"}],
    }
    objs = render_broker.render("broker", spec, "10.0.0.1:9876", "", IMAGE)
    sts = {s["metadata"]["name"]: s for s in _by_kind(objs, "StatefulSet")}
    assert sorted(sts) == ["broker-0-master", "broker-0-replica-1", "broker-1-master", "broker-1-replica-1"]
    master, replica = _env(_main(sts["broker-1-master"])), _env(_main(sts["broker-1-replica-1"]))
    assert master["FERRYMQ_NAMESRV_ADDR"] == "10.0.0.1:9876"
    assert master["FERRYMQ_BROKER_CLUSTER_NAME"] == "broker" and master["FERRYMQ_BROKER_NAME"] == "broker-1"
    assert (master["FERRYMQ_BROKER_ID"], master["FERRYMQ_BROKER_ROLE"]) == ("0", "SYNC_MASTER")
    assert (replica["FERRYMQ_BROKER_ID"], replica["FERRYMQ_BROKER_ROLE"]) == ("1", "SLAVE")
    assert master["FERRYMQ_FLUSH_DISK_TYPE"] == "SYNC_FLUSH" and master["FERRYMQ_SLAVE_READ_ENABLE"] == "true"
    assert master["FERRYMQ_FILE_RESERVED_TIME"] == "48"
    assert master["FERRYMQ_BROKER_IP1"] == "$(POD_IP)"
    assert "FERRYMQ_ENABLE_CONTROLLER_MODE" not in master
    assert render_broker.namesrv_addr_of(sts["broker-0-master"]) == "10.0.0.1:9876"
    _command_parses(_main(sts["broker-0-master"])["args"])


def test_broker_settings_are_ones_the_broker_reads(monkeypatch):
    """Every FERRYMQ_* the operator sets is a BrokerConfig setting of the right type."""
    from ferrymq.broker.config import BrokerConfig

    spec = {"size": 1, "replicaPerGroup": 1, "brokerConfig": {"flush_disk_type": "SYNC_FLUSH"}}
    for sts in _by_kind(render_broker.render("b", spec, "10.0.0.1:9876", "", IMAGE), "StatefulSet"):
        for key, value in _env(_main(sts)).items():
            if key.startswith("FERRYMQ_"):
                monkeypatch.setenv(key, value.replace("$(POD_IP)", "10.1.2.3"))
        config = BrokerConfig.load()
        assert config.namesrv_addrs == ["10.0.0.1:9876"] and config.broker_addr == "10.1.2.3:10911"
    assert (config.broker_role, config.broker_id) == ("SLAVE", 1)


def test_controller_mode_brokers():
    spec = {"size": 1, "replicaPerGroup": 2, "clusterMode": "CONTROLLER"}
    objs = render_broker.render("b", spec, "10.0.0.1:9876", "c-0.x:9878;c-1.x:9878", IMAGE)
    names = [s["metadata"]["name"] for s in _by_kind(objs, "StatefulSet")]
    assert names == ["b-0-0", "b-0-1", "b-0-2"]
    env = _env(_main(_by_kind(objs, "StatefulSet")[2]))
    assert (
        env["FERRYMQ_ENABLE_CONTROLLER_MODE"] == "true"
        and env["FERRYMQ_CONTROLLER_ADDR"] == "c-0.x:9878;c-1.x:9878"
    )
    assert "FERRYMQ_BROKER_ROLE" not in env  # the controllers give the role
    with pytest.raises(SpecError, match="controllers"):
        render_broker.render("b", spec, "10.0.0.1:9876", "", IMAGE)


def test_broker_surplus_groups_after_scale_in():
    spec = {"size": 1, "replicaPerGroup": 1}
    observed = ["b-0-master", "b-0-replica-1", "b-1-master", "b-1-replica-1"]
    assert render_broker.surplus("b", spec, observed) == ["b-1-master", "b-1-replica-1"]


def test_controller_group():
    sts, headless = render_controller.render("ctl", "prod", {"size": 3}, IMAGE)
    args = _main(sts)["args"]
    peers = args[args.index("--peers") + 1]
    assert peers.split(";")[2] == "ctl-2@ctl-2.ctl-svc-headless.prod.svc:9880"
    assert args[args.index("--id") + 1] == "$(POD_NAME)"
    _command_parses(args)
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert render_controller.access_point("ctl", "prod", 3).count(":9878") == 3
    with pytest.raises(SpecError, match="odd"):
        render_controller.render("ctl", "prod", {"size": 2}, IMAGE)


def test_storage_modes():
    claim = {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
    volumes, claims, mount = pods.storage(
        {"storageMode": "StorageClass", "volumeClaimTemplates": [claim]}, "x"
    )
    assert (volumes, claims, mount) == ([], [claim], {"name": "data", "mountPath": "/data"})
    with pytest.raises(SpecError, match="hostPath"):
        pods.storage({"storageMode": "HostPath"}, "x")
    with pytest.raises(SpecError, match="volumeClaimTemplates"):
        pods.storage({"storageMode": "StorageClass"}, "x")


def test_proxy_and_amqp_gateway():
    dep, svc = render_proxy.render("px", {"size": 2, "port": 8082}, "10.0.0.1:9876", IMAGE)
    c = _main(dep)
    assert dep["kind"] == "Deployment" and dep["spec"]["replicas"] == 2
    assert _env(c)["FERRYMQ_NAMESRV_ADDR"] == "10.0.0.1:9876" and "$(FERRYMQ_NAMESRV_ADDR)" in c["args"]
    assert c["readinessProbe"]["httpGet"]["port"] == 5558 and svc["spec"]["ports"][0]["port"] == 8082
    _command_parses(c["args"])
    keys = [
        {"name": f"FERRYMQ_{k.upper()}_KEY", "valueFrom": {"secretKeyRef": {"name": "front-user", "key": k}}}
        for k in ("access", "secret")
    ]  # a super user's keys, from a Secret: the front checks clients against the cluster's users
    dep, svc = render_amqp.render("gw", {"size": 1, "meta": "meta:9890", "env": keys}, "10.0.0.1:9876", IMAGE)
    c = _main(dep)
    assert c["readinessProbe"]["httpGet"] == {"path": "/health/ready", "port": 15692}
    assert [e for e in c["env"] if e["name"].endswith("_KEY")] == keys
    _command_parses(c["args"])


def test_console_gets_the_name_servers():
    spec = next(
        d for d in load_all(ROOT / "tests/operator/data/apache_cluster.yaml") if d["kind"] == "Console"
    )["spec"]
    (dep,) = render_console.render("console", spec, "10.0.0.1:9876;10.0.0.2:9876")
    env = _env(dep["spec"]["template"]["spec"]["containers"][0])
    assert "-Drocketmq.namesrv.addr=10.0.0.1:9876;10.0.0.2:9876" in env["JAVA_OPTS"]
    assert dep["metadata"]["name"] == "console" and "namespace" not in dep["metadata"]
    assert (
        spec["consoleDeployment"]["spec"]["template"]["spec"]["containers"][0].get("env") is None
    )  # not mutated
    with pytest.raises(SpecError):
        render_console.render("c", {"consoleDeployment": {"spec": {}}}, "x")


def test_conditions_keep_transition_time_while_unchanged():
    first = status.conditions(None, status.of_workload(3, 1, "x"), "T1", 1)
    assert {c["type"]: c["status"] for c in first} == {
        "Ready": "False",
        "Progressing": "True",
        "Degraded": "False",
    }
    second = status.conditions(first, status.of_workload(3, 3, "x"), "T2", 1)
    times = {c["type"]: c["lastTransitionTime"] for c in second}
    assert times == {"Ready": "T2", "Progressing": "T2", "Degraded": "T1"}
    bad = status.conditions(second, status.degraded("InvalidSpec", "size must be odd"), "T3", 2)
    assert [c["status"] for c in bad] == ["False", "False", "True"] and bad[2][
        "message"
    ] == "size must be odd"
