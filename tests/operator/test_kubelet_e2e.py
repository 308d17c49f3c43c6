"""End to end without a cluster: the operator renders a NameService, a stand-in kubelet runs each
of its pods as a real `ferrymq namesrv` in a network namespace of its own, the readiness probes the
operator wrote decide readiness, and the addresses in the NameService's status answer RocketMQ's
remoting protocol. Root only (network namespaces)."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferrymq.bench.processes import netns_available
from ferrymq.client.admin import Admin
from ferrymq.client.message import Message
from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.client.push_consumer import PushConsumer
from ferrymq.net import RemotingClient
from ferrymq.protocol.bodies import (
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
    decode_body,
    encode_body,
)
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.remoting import RemotingCommand
from tests.operator.helpers import API, APPS, condition, create, wait_for
from tests.operator.kubelet import Kubelet
from tests.operator.traffic import Traffic, committed, writable_on

pytestmark = pytest.mark.root

E2E_DEADLINE = 60.0


@pytest.fixture
def kubelet(api, tmp_path):
    available, why = netns_available()
    if not available:
        pytest.skip(why)
    node = Kubelet(api, tmp_path / "pods", components={"nameservice"})
    yield node
    node.close()


def name_servers(api):
    return ((api.get(f"{API}/nameservices/ns") or {}).get("status") or {}).get("nameServers") or []


def test_nameservers_run_as_real_processes(api, operator, kubelet):
    create(api, "NameService", "ns", {"size": 2})
    ips = wait_for(
        "2 ready NameServers", lambda: len(name_servers(api)) == 2 and name_servers(api), E2E_DEADLINE
    )
    assert ips == [kubelet.pods["ns-0"].ip, kubelet.pods["ns-1"].ip]  # ordinal order
    assert (condition(api, "NameService", "ns") or {}).get("status") == "True"

    async def ask_each() -> None:
        for ip in ips:  # the rendered command line serves RocketMQ's remoting on the pod's port 9876
            async with Admin(f"{ip}:9876") as admin:
                info = await admin.cluster_info()
                assert info.broker_addr_table == {}

    asyncio.run(ask_each())

    api.patch(f"{API}/nameservices/ns", {"spec": {"size": 1}})
    wait_for("1 NameServer", lambda: name_servers(api) == ips[:1], E2E_DEADLINE)
    assert "ns-1" not in kubelet.pods and kubelet.errors == []


@pytest.fixture
def kubelet_with_brokers(api, tmp_path):
    available, why = netns_available()
    if not available:
        pytest.skip(why)
    node = Kubelet(api, tmp_path / "pods", components={"nameservice", "broker"}, slots=5)
    yield node
    node.close()


async def _cluster(namesrv: str):
    async with Admin(namesrv) as admin:
        return await admin.cluster_info()


def registered(namesrv: str) -> dict[str, dict[int, str]]:
    """broker name → {id: address} as the NameServer at `namesrv` knows it."""
    info = asyncio.run(_cluster(namesrv))
    return {name: dict(data.broker_addrs) for name, data in info.broker_addr_table.items()}


def test_a_broker_registers_with_the_nameservers_the_operator_gives_it(api, operator, kubelet_with_brokers):
    create(api, "NameService", "ns", {"size": 1})
    create(api, "Broker", "broker", {"size": 1, "replicaPerGroup": 0})
    wait_for(
        "Broker Ready",
        lambda: (condition(api, "Broker", "broker") or {}).get("status") == "True",
        E2E_DEADLINE,
    )
    broker_ip = kubelet_with_brokers.pods["broker-0-master-0"].ip
    (first,) = name_servers(api)
    assert registered(f"{first}:9876") == {"broker-0": {0: f"{broker_ip}:10911"}}

    api.patch(f"{API}/nameservices/ns", {"spec": {"size": 2}})
    wait_for("2 NameServers", lambda: len(name_servers(api)) == 2, E2E_DEADLINE)
    second = name_servers(api)[1]
    # The new address list rolls the broker, which then registers with both NameServers.
    wait_for(
        "the broker on the new NameServer",
        lambda: registered(f"{second}:9876") == {"broker-0": {0: f"{broker_ip}:10911"}},
        E2E_DEADLINE,
    )
    assert kubelet_with_brokers.errors == []


async def _seed_source(namesrv: str, broker: str) -> None:
    async with Admin(namesrv) as admin:
        await admin.create_topic("Orders", 4, cluster="broker")
    client = RemotingClient()
    try:
        body = encode_body(SubscriptionGroupConfig(group_name="billing", retry_max_times=3))
        response = await client.invoke(
            broker, RemotingCommand(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
        )
        assert response.code == ResponseCode.SUCCESS
    finally:
        await client.close()


async def _metadata(broker: str) -> tuple[dict, dict]:
    client = RemotingClient()
    try:
        topics = await client.invoke(broker, RemotingCommand(RequestCode.GET_ALL_TOPIC_CONFIG))
        groups = await client.invoke(broker, RemotingCommand(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
        return (
            decode_body(TopicConfigSerializeWrapper, topics.body).topic_config_table,
            decode_body(SubscriptionGroupWrapper, groups.body).subscription_group_table,
        )
    finally:
        await client.close()


def test_scaling_out_copies_topics_and_groups_from_scale_pod(api, operator, kubelet_with_brokers):
    create(api, "NameService", "ns", {"size": 1})
    create(api, "Broker", "broker", {"size": 1, "scalePodName": "broker-0-master-0"})
    wait_for(
        "Broker Ready",
        lambda: (condition(api, "Broker", "broker") or {}).get("status") == "True",
        E2E_DEADLINE,
    )
    (namesrv,) = name_servers(api)
    first = f"{kubelet_with_brokers.pods['broker-0-master-0'].ip}:10911"
    asyncio.run(_seed_source(f"{namesrv}:9876", first))

    api.patch(f"{API}/brokers/broker", {"spec": {"size": 2}})
    wait_for(
        "status.size 2",
        lambda: ((api.get(f"{API}/brokers/broker") or {}).get("status") or {}).get("size") == 2,
        E2E_DEADLINE,
    )
    topics, groups = asyncio.run(_metadata(f"{kubelet_with_brokers.pods['broker-1-master-0'].ip}:10911"))
    assert topics["Orders"].read_queue_nums == 4
    assert groups["billing"].retry_max_times == 3
    assert "broker-0" not in topics  # the source's own broker-name topic stays its own
    wait_for(
        "Broker Ready",
        lambda: (condition(api, "Broker", "broker") or {}).get("status") == "True",
        E2E_DEADLINE,
    )


def _to_broker_1(queues, message, arg):
    return next(q for q in queues if q.broker_name == "broker-1")


async def _leave_unread(namesrv: str, broker_1: str) -> tuple[int, int]:
    """A message on broker-1 that group "billing" has committed up to, but not past: (queue id, offset)."""
    async with Admin(namesrv) as admin:
        await admin.create_topic("Orders", 2, cluster="broker")
        for _ in range(100):  # until broker-1 has told the NameServer about the topic
            route = await admin.instance.existing_route("Orders")
            if route is not None and "broker-1" in {q.broker_name for q in route.write_queues}:
                break
            await asyncio.sleep(0.1)
    producer = Producer("drain-test", namesrv)
    await producer.start()
    try:
        sent = await producer.send(Message("Orders", b"last order"), selector=_to_broker_1)
    finally:
        await producer.shutdown()
    await _commit(broker_1, sent.message_queue.queue_id, sent.queue_offset)
    return sent.message_queue.queue_id, sent.queue_offset


async def _commit(broker: str, queue_id: int, offset: int) -> None:
    client = RemotingClient()
    try:
        ext = {
            "consumerGroup": "billing",
            "topic": "Orders",
            "queueId": str(queue_id),
            "commitOffset": str(offset),
        }
        response = await client.invoke(
            broker, RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields=ext)
        )
        assert response.code == ResponseCode.SUCCESS, response.remark
    finally:
        await client.close()


async def _write_perm(namesrv: str, broker_name: str) -> int:
    async with Admin(namesrv) as admin:
        route = await admin.instance.existing_route("Orders")
        assert route is not None
        return next(q.perm for q in route.data.queue_datas if q.broker_name == broker_name)


def _progressing(api, reason):
    found = condition(api, "Broker", "broker", "Progressing") or {}
    return found if found.get("reason") == reason else None


def test_scaling_in_drains_a_group_before_removing_it(api, operator, kubelet_with_brokers):
    create(api, "NameService", "ns", {"size": 1})
    create(api, "Broker", "broker", {"size": 2})
    wait_for(
        "Broker Ready",
        lambda: (condition(api, "Broker", "broker") or {}).get("status") == "True",
        E2E_DEADLINE,
    )
    (namesrv,) = name_servers(api)
    namesrv = f"{namesrv}:9876"
    broker_1 = f"{kubelet_with_brokers.pods['broker-1-master-0'].ip}:10911"
    queue_id, offset = asyncio.run(_leave_unread(namesrv, broker_1))

    api.patch(f"{API}/brokers/broker", {"spec": {"size": 1}})
    draining = wait_for("Draining", lambda: _progressing(api, "Draining"), E2E_DEADLINE)
    assert "1 messages not consumed" in draining["message"]
    assert asyncio.run(_write_perm(namesrv, "broker-1")) & 2 == 0  # producers no longer offered it
    assert api.get(f"{APPS}/statefulsets/broker-1-master") is not None

    asyncio.run(_commit(broker_1, queue_id, offset + 1))  # the last message consumed
    wait_for(
        "broker-1 removed", lambda: api.get(f"{APPS}/statefulsets/broker-1-master") is None, E2E_DEADLINE
    )
    wait_for(
        "Broker Ready",
        lambda: (condition(api, "Broker", "broker") or {}).get("status") == "True",
        E2E_DEADLINE,
    )
    wait_for("the pod stopped", lambda: "broker-1-master-0" not in kubelet_with_brokers.pods, E2E_DEADLINE)


def _master_pod(api, node) -> str:
    (namesrv,) = name_servers(api)
    master = registered(f"{namesrv}:9876")["broker-0"][0].rsplit(":", 1)[0]
    return next(name for name, pod in node.pods.items() if pod.ip == master)


def test_controller_mode_cluster_elects_a_master_and_rolls_it_last(api, operator, tmp_path):
    """Three controllers find each other by their pods' DNS names, a broker group of two in
    CONTROLLER mode gets its master from them and registers; a change of the pods' template reaches
    the slave first, then the master is moved to it, then the old master changes."""
    available, why = netns_available()
    if not available:
        pytest.skip(why)
    node = Kubelet(api, tmp_path / "pods", components={"nameservice", "controller", "broker"}, slots=6)
    try:
        create(api, "NameService", "ns", {"size": 1})
        create(api, "Controller", "ctl", {"size": 3})
        create(api, "Broker", "broker", {"size": 1, "replicaPerGroup": 1, "clusterMode": "CONTROLLER"})
        ready = lambda kind, name: (condition(api, kind, name) or {}).get("status") == "True"  # noqa: E731
        wait_for("Controller Ready", lambda: ready("Controller", "ctl"), E2E_DEADLINE)
        wait_for("Broker Ready", lambda: ready("Broker", "broker"), E2E_DEADLINE)
        (namesrv,) = name_servers(api)
        members = {node.pods["broker-0-0-0"].ip, node.pods["broker-0-1-0"].ip}
        brokers = registered(f"{namesrv}:9876")["broker-0"]
        assert 0 in brokers and len(brokers) == 2  # a master, and a slave with the id the controllers gave it
        assert {addr.rsplit(":", 1)[0] for addr in brokers.values()} == members
        first_master = _master_pod(api, node)
        asyncio.run(_send_some(f"{namesrv}:9876"))

        env = [{"name": "FERRYMQ_FLUSH_CONSUMER_OFFSET_INTERVAL", "value": "2000"}]
        api.patch(f"{API}/brokers/broker", {"spec": {"env": env}})
        # "moving the master off" is only a pass's message, overwritten as soon as the next pass
        # sees the new master: the order itself is test_plan_rollout's; here, its outcome.
        wait_for(
            "both rolled", lambda: all(_has_env(api, s) for s in ("broker-0-0", "broker-0-1")), E2E_DEADLINE
        )
        wait_for("Broker Ready", lambda: ready("Broker", "broker"), E2E_DEADLINE)
        assert _master_pod(api, node) != first_master

        # the master's pod deleted and its node gone: the controllers elect the other member (a pod
        # back within the controllers' heartbeat timeout would simply be master again); nothing
        # acknowledged is lost, and the old master's pod returns as a slave
        second_master = _master_pod(api, node)
        controllers = ";".join(f"{node.pods[f'ctl-{i}'].ip}:9878" for i in range(3))
        wait_for("both members in sync", lambda: _in_sync(f"{namesrv}:9876", controllers) == 2, E2E_DEADLINE)
        node.delete_pod(second_master, held=True)
        moved = lambda: _master_pod_or_none(api, node) not in (None, second_master)  # noqa: E731
        wait_for("a new master", moved, E2E_DEADLINE)
        node.release(second_master)
        asyncio.run(_send_some(f"{namesrv}:9876", first=10))
        assert asyncio.run(_read_all(f"{namesrv}:9876", "Orders")) == {b"order %d" % i for i in range(20)}
        assert node.errors == []
    finally:
        node.close()


def _in_sync(namesrv: str, controllers: str) -> int:
    """How many members of broker-0 the controllers hold in its SyncStateSet (electable)."""

    async def ask() -> int:
        async with Admin(namesrv) as admin:
            groups = await admin.broker_groups(controllers)
        return sum(r.in_sync for g in groups if g.broker_name == "broker-0" for r in g.replicas)

    try:
        return asyncio.run(ask())
    except Exception:  # a controller or NameServer busy electing: ask again
        return 0


def _master_pod_or_none(api, node) -> str | None:
    try:
        return _master_pod(api, node)
    except (KeyError, StopIteration, OSError):  # no master registered yet, or the NameServer is busy
        return None


async def _read_all(namesrv: str, topic: str) -> set[bytes]:
    """Every body stored in `topic`, read from its first offsets on the current masters."""
    async with PullConsumer("e2e-reader", namesrv, consume_from="first") as consumer:
        await consumer.subscribe(topic)
        bodies: set[bytes] = set()
        deadline = time.monotonic() + E2E_DEADLINE
        while batch := await consumer.poll(2.0):
            bodies |= {m.body for m in batch}
            assert time.monotonic() < deadline, f"still reading {topic} after {E2E_DEADLINE} s"
        return bodies


async def _send_some(namesrv: str, first: int = 0) -> None:
    """Orders `first` to `first + 9`, each acknowledged (the topic is made on the first call)."""
    if first == 0:
        async with Admin(namesrv) as admin:
            await admin.create_topic("Orders", 2, cluster="broker")
    producer = Producer("rollout-test", namesrv)
    await producer.start()
    try:
        for i in range(first, first + 10):
            await producer.send(Message("Orders", b"order %d" % i))
    finally:
        await producer.shutdown()


def _has_env(api, sts: str) -> bool:
    found = api.get(f"{APPS}/statefulsets/{sts}") or {}
    container = found["spec"]["template"]["spec"]["containers"][0]
    return any(e["name"] == "FERRYMQ_FLUSH_CONSUMER_OFFSET_INTERVAL" for e in container["env"])


async def _orders_on_src(namesrv: str, src: str) -> None:
    """Orders on cluster src with 3 messages; group billing has committed 0 on every queue."""
    async with Admin(namesrv) as admin:
        await admin.create_topic("Orders", 2, cluster="src")
        for _ in range(100):
            if await admin.instance.existing_route("Orders") is not None:
                break
            await asyncio.sleep(0.1)
        producer = Producer("transfer-test", namesrv)
        await producer.start()
        try:
            for i in range(3):
                await producer.send(Message("Orders", b"order %d" % i))
        finally:
            await producer.shutdown()
        progress = await admin.consumer_progress("billing", "Orders")
    for p in progress:
        await _commit_on(src, "billing", "Orders", p.queue.queue_id, 0)


async def _commit_on(broker: str, group: str, topic: str, queue_id: int, offset: int) -> None:
    client = RemotingClient()
    try:
        ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), "commitOffset": str(offset)}
        response = await client.invoke(
            broker, RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields=ext)
        )
        assert response.code == ResponseCode.SUCCESS, response.remark
    finally:
        await client.close()


def _transfer(api, name):
    return (api.get(f"{API}/topictransfers/{name}") or {}).get("status") or {}


def _two_clusters(api) -> str:
    """Broker clusters src and dst of one broker each, ready, behind one NameServer: its address."""
    create(api, "NameService", "ns", {"size": 1})
    create(api, "Broker", "src", {"size": 1})
    create(api, "Broker", "dst", {"size": 1})
    for name in ("src", "dst"):
        wait_for(
            f"{name} Ready",
            lambda n=name: (condition(api, "Broker", n) or {}).get("status") == "True",
            E2E_DEADLINE,
        )
    (namesrv,) = name_servers(api)
    return f"{namesrv}:9876"


def test_topic_transfer_moves_a_topic_after_its_consumers_caught_up(api, operator, kubelet_with_brokers):
    node = kubelet_with_brokers
    namesrv = _two_clusters(api)
    src, dst = (f"{node.pods[f'{n}-0-master-0'].ip}:10911" for n in ("src", "dst"))
    asyncio.run(_orders_on_src(namesrv, src))

    create(api, "TopicTransfer", "move", {"topic": "Orders", "sourceCluster": "src", "targetCluster": "dst"})
    waiting = wait_for("waiting for billing", lambda: _transfer(api, "move").get("step") == "wait-consumed"
                       and _transfer(api, "move"), E2E_DEADLINE)  # fmt: skip
    assert "billing has 3 messages of Orders" in waiting["message"] and waiting["groups"] == ["billing"]
    topics, groups = asyncio.run(_metadata(dst))
    assert "Orders" in topics and "billing" in groups  # steps 1 and 2
    assert asyncio.run(_metadata(src))[0]["Orders"].perm == 4  # step 3: writes stopped on the source

    async def read_all() -> None:
        async with Admin(namesrv) as admin:
            for p in await admin.consumer_progress("billing", "Orders"):
                await _commit_on(src, "billing", "Orders", p.queue.queue_id, p.broker_offset)

    asyncio.run(read_all())
    wait_for("Succeeded", lambda: _transfer(api, "move").get("phase") == "Succeeded", E2E_DEADLINE)
    assert (condition(api, "TopicTransfer", "move") or {}).get("status") == "True"
    topics, groups = asyncio.run(_metadata(dst))
    assert "%RETRY%billing" in topics  # step 7
    src_topics, src_groups = asyncio.run(_metadata(src))
    assert "Orders" not in src_topics and "billing" not in src_groups  # steps 5 and 6

    create(
        api, "TopicTransfer", "nowhere", {"topic": "Orders", "sourceCluster": "dst", "targetCluster": "gone"}
    )
    wait_for("RolledBack", lambda: _transfer(api, "nowhere").get("phase") == "RolledBack", E2E_DEADLINE)
    degraded = condition(api, "TopicTransfer", "nowhere", "Degraded") or {}
    assert degraded.get("status") == "True" and "create-target-topic failed" in degraded["message"]


async def _transfer_under_traffic(api, namesrv: str) -> Traffic:
    """Orders on src with a producer at 200 msg/s and a consumer of group billing, moved to dst by a
    TopicTransfer while both run; the traffic, once every acknowledged send was consumed or 30 s
    passed."""
    await writable_on(namesrv, "Orders", "src", {"src-0"}, 2, time.monotonic() + E2E_DEADLINE)
    traffic = Traffic("Orders", rate=200)
    consumer = PushConsumer("billing", namesrv)
    consumer.subscribe("Orders", "*", traffic.listener)
    producer = Producer("transfer-traffic", namesrv)
    await consumer.start()
    await producer.start()
    sending = asyncio.create_task(traffic.produce(producer))
    try:
        await committed(namesrv, "billing", "Orders", E2E_DEADLINE)
        move = {"topic": "Orders", "sourceCluster": "src", "targetCluster": "dst"}
        create(api, "TopicTransfer", "move", move)
        end = time.monotonic() + E2E_DEADLINE
        while (await asyncio.to_thread(_transfer, api, "move")).get("phase") != "Succeeded":
            assert time.monotonic() < end, _transfer(api, "move")
            await asyncio.sleep(0.2)
        await asyncio.sleep(1)  # some traffic after: it must go to dst alone
    finally:
        traffic.stop.set()
        await sending
        await traffic.consumed_all(30)
        await producer.shutdown()
        await consumer.shutdown()
    return traffic


def test_topic_transfer_under_traffic_loses_no_acknowledged_message(api, operator, kubelet_with_brokers):
    namesrv = _two_clusters(api)
    traffic = asyncio.run(_transfer_under_traffic(api, namesrv))
    assert traffic.acked_on["src-0"] > 0 and traffic.acked_on["dst-0"] > 0  # the traffic moved under way
    assert len(traffic.consumed_from) == 2  # read from both clusters
    lost = sorted(traffic.lost())
    assert lost == [], f"{len(lost)} of {len(traffic.acked)} acknowledged sends never consumed: {lost[:5]}"
