"""The console's HTTP API against a real NameServer and broker."""

from __future__ import annotations

import time

from ferrymq.bench.processes import free_port
from ferrymq.client import ConsumeResult, Message, Producer, PushConsumer
from ferrymq.meta.database import database_url, make_engine
from ferrymq.meta.entities import Binding, Exchange, Queue
from ferrymq.meta.service import MetaService
from ferrymq.meta.store import MetaStore
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.message_id import parse_offset_msg_id
from tests.auth.conftest import ROOT
from tests.console.conftest import commit
from tests.metrics.conftest import eventually


async def test_a_topic_created_through_the_api_is_in_the_cluster(cluster_console):
    cluster, console = cluster_console
    created = await console.post("/api/topics", {"topic": "Orders", "queues": 2})
    assert created == {"topic": "Orders", "queues": 2}
    assert cluster.broker.topics.get("Orders").read_queue_nums == 2
    listed = {t["topic"]: t for t in await console.get("/api/topics")}
    assert listed["Orders"]["readQueues"] == 2 and listed["Orders"]["kind"] == "normal"
    detail = await console.get("/api/topics/Orders")
    assert [q["read"] for q in detail["route"]["queues"]] == [2]
    assert [(s["queue"], s["max"]) for s in detail["status"]] == [(0, 0), (1, 0)]
    assert (await console.call("DELETE", "/api/topics/Orders"))[0] == 200
    assert "Orders" not in {t["topic"] for t in await console.get("/api/topics")}


async def test_bad_input_gets_a_400_that_says_why(cluster_console):
    _, console = cluster_console
    status, value = await console.call("POST", "/api/topics", {"topic": "no spaces"})
    assert status == 400 and "not a topic name" in value["error"]
    status, value = await console.call("POST", "/api/topics", {"topic": "T", "queues": "many"})
    assert status == 400 and "integer" in value["error"]
    status, value = await console.call("GET", "/api/messages")
    assert status == 400 and "topic" in value["error"]
    status, value = await console.call("GET", "/api/topics/Nowhere")
    assert status == 404 and "Nowhere" in value["error"]
    assert (await console.call("GET", "/api/nothing"))[0] == 404


async def test_a_test_message_is_found_by_id_key_and_time(cluster_console):
    cluster, console = cluster_console
    await console.post("/api/topics", {"topic": "Search", "queues": 1})
    before = int(time.time() * 1000) - 1000
    sent = await console.post("/api/topics/Search/send", {"body": "hello", "tags": "t1", "keys": "k1 k2"})
    assert sent["status"] == "SEND_OK"
    await cluster.settled()
    by_id = await console.get("/api/messages", id=sent["msgId"], topic="Search")
    by_offset_id = await console.get("/api/messages", id=sent["offsetMsgId"])
    by_key = await console.get("/api/messages", topic="Search", key="k2")
    by_time = await console.get("/api/messages", topic="Search", begin=before, end=before + 60_000)
    for found in (by_id, by_offset_id, by_key, by_time):
        assert [(m["msgId"], m["body"], m["tags"], m["keys"]) for m in found] == [
            (sent["msgId"], "hello", "t1", ["k1", "k2"])
        ]
    assert await console.get("/api/messages", topic="Search", begin=0, end=before) == []
    status, value = await console.call("GET", f"/api/messages/{sent['msgId']}/trace")
    assert status == 404 and "no trace" in value["error"]


async def test_groups_show_lag_and_take_controls(cluster_console):
    cluster, console = cluster_console
    await console.post("/api/topics", {"topic": "Work", "queues": 1})
    for i in range(5):
        await console.post("/api/topics/Work/send", {"body": f"m{i}"})
    await cluster.settled()
    await commit(cluster, "Workers", "Work", 0, 2)
    groups = {g["group"]: g for g in await console.get("/api/groups")}
    assert groups["Workers"] == {"group": "Workers", "topics": ["Work"], "lag": 3}
    detail = await console.get("/api/groups/Workers")
    queues = detail["progress"]["Work"]
    assert [(q["brokerOffset"], q["consumerOffset"], q["lag"]) for q in queues] == [(5, 2, 3)]
    assert queues[0]["lastConsumed"] > 0  # the second message's store time
    assert detail["consumers"] == {"connections": [], "subscriptions": {}}
    assert [g["lag"] for g in (await console.get("/api/topics/Work"))["groups"]] == [3]

    await console.post("/api/groups/Workers/pause")
    await console.post("/api/groups/Workers/rate-limit", {"perSecond": 50})
    (controls,) = (await console.get("/api/groups/Workers"))["controls"].values()
    assert controls["paused"] is True and controls["rate_limit"] == 50
    await console.post("/api/groups/Workers/resume")
    await console.post("/api/groups/Workers/rate-limit", {"perSecond": ""})
    (controls,) = (await console.get("/api/groups/Workers"))["controls"].values()
    assert controls["paused"] is False and controls["rate_limit"] is None
    status, value = await console.call("POST", "/api/groups/Workers/rate-limit", {"perSecond": -1})
    assert status == 400 and "above 0" in value["error"]

    reset = await console.post("/api/groups/Workers/reset", {"topic": "Work", "timestamp": -1})
    assert [r["offset"] for r in reset] == [5]
    assert {g["group"]: g["lag"] for g in await console.get("/api/groups")}["Workers"] == 0


async def test_dashboard_counts_messages_and_lag(cluster_console):
    cluster, console = cluster_console
    await console.post("/api/topics", {"topic": "Dash", "queues": 1})
    for i in range(3):
        await console.post("/api/topics/Dash/send", {"body": f"m{i}"})
    await cluster.settled()
    await commit(cluster, "DashGroup", "Dash", 0, 1)

    async def counted():
        d = await console.get("/api/dashboard")
        return d if d["now"]["put"] >= 3 and d["now"]["lag"] == 2 and d["rates"] else None

    d = await eventually(counted, 20, "the dashboard to count 3 messages and a lag of 2")
    assert d["groups"] >= 1 and d["topics"] >= 1
    assert {"group": "DashGroup", "topic": "Dash", "queues": 1, "consumer_offset": 1, "lag": 2} in d["top"]
    assert all(r["in"] >= 0 and r["out"] >= 0 for r in d["rates"])

    async def rated():  # the brokers' putTps over their last 10 s, once they sampled a message
        await console.post("/api/topics/Dash/send", {"body": "more"})
        d = await console.get("/api/dashboard")
        return d if d["rates"][-1]["in"] > 0 and d["now"]["put_tps"] > 0 else None

    await eventually(rated, 20, "the dashboard to show the brokers' rate of messages in")


async def test_cluster_page_shows_the_master_and_its_runtime(cluster_console):
    cluster, console = cluster_console
    d = await console.get("/api/cluster")
    (group,) = d["groups"]
    (replica,) = group["replicas"]
    assert group["broker_name"] == cluster.broker.config.broker_name and group["master_id"] == 0
    assert replica["role"] == "master" and replica["address"] == cluster.broker_addr
    assert replica["runtime"]["msgPutTotalTodayNow"] == "0"
    assert d["controllers"] is None
    settings = await console.get("/api/cluster/settings", broker=cluster.broker_addr)
    assert settings["brokerName"] == cluster.broker.config.broker_name and "flushDiskType" in settings
    status, value = await console.call("GET", "/api/cluster/settings", broker="127.0.0.1:1")
    assert status == 404 and "127.0.0.1:1" in value["error"]


async def test_cluster_page_shows_a_masters_replication_qos_state(make_cluster, open_console):
    cluster = await make_cluster(replication_qos_level=2)
    console = await open_console(cluster.namesrv_addr)
    (group,) = (await console.get("/api/cluster"))["groups"]
    (master,) = group["replicas"]
    assert master["runtime"]["replicationQosState"] == "single_master"  # no slave yet
    assert master["runtime"]["replicationQosLevel"] == "2"


async def test_broker_settings_never_show_a_password(secure_console):
    cluster, console = secure_console
    settings = await console.get("/api/cluster/settings", broker=cluster.broker_addr)
    assert settings["authEnabled"] == "true" and settings["initUsername"] == ROOT[0]
    assert settings["initPassword"] == "******" and ROOT[1] not in str(settings)


async def test_a_topic_changes_queues_and_permission(cluster_console):
    cluster, console = cluster_console
    await console.post("/api/topics", {"topic": "Grow", "queues": 2})
    await console.post("/api/topics/Grow/send", {"body": "x"})
    await cluster.settled()
    status = (await console.get("/api/topics/Grow"))["status"]
    assert sum(s["max"] for s in status) == 1 and max(s["lastStored"] for s in status) > 0
    status, changed = await console.call("PUT", "/api/topics/Grow", {"queues": 4, "perm": 4})
    assert status == 200 and changed == {"topic": "Grow", "queues": 4, "perm": 4}
    config = cluster.broker.topics.get("Grow")
    assert (config.read_queue_nums, config.write_queue_nums, config.perm) == (4, 4, 4)
    status, value = await console.call("PUT", "/api/topics/Grow", {"perm": 7})
    assert status == 400 and "perm" in value["error"]
    assert (await console.call("PUT", "/api/topics/Nowhere", {"queues": 1}))[0] == 404


async def test_groups_are_created_and_deleted(cluster_console):
    cluster, console = cluster_console
    assert await console.post("/api/groups", {"group": "Made", "retryMaxTimes": 3, "orderly": True})
    made = cluster.broker.groups.find("Made")
    assert made is not None and made.retry_max_times == 3 and made.consume_message_orderly
    assert "Made" in {g["group"] for g in await console.get("/api/groups")}
    status, value = await console.call("POST", "/api/groups", {"group": "bad name"})
    assert status == 400 and "group name" in value["error"]
    assert (await console.call("DELETE", "/api/groups/Made", cleanOffsets="true"))[0] == 200
    assert cluster.broker.groups.find("Made") is None


async def test_connected_producers_and_consumers_are_listed(cluster_console):
    cluster, console = cluster_console
    await console.post("/api/topics", {"topic": "Live", "queues": 1})
    consumer = PushConsumer("LiveGroup", cluster.namesrv_addr)
    consumer.subscribe("Live", "*", lambda messages: ConsumeResult.SUCCESS)
    async with Producer("LiveProducer", cluster.namesrv_addr) as producer, consumer:
        await producer.send(Message("Live", b"x"))
        await producer.instance.heartbeat_all()  # as it does every 30 s

        async def online():
            found = await console.get("/api/topics/Live")
            return found["consumers"] or None

        (group,) = await eventually(online, 20, "the consumer to be online")
        assert group["group"] == "LiveGroup" and len(group["connections"]) == 1
        consumers = (await console.get("/api/groups/LiveGroup"))["consumers"]
        assert consumers["subscriptions"]["Live"] == "*" and consumers["messageModel"] == "CLUSTERING"
        (connection,) = consumers["connections"]
        assert connection["clientId"] == group["connections"][0]["clientId"]
        (producing,) = await console.get("/api/producers/LiveProducer")
        assert producing["clientId"] and producing["language"]
    assert await console.get("/api/producers/NobodyHere") == []


async def test_dead_letters_are_browsed_and_sent_back(cluster_console):
    cluster, console = cluster_console
    assert await console.get("/api/dlq/NoSuchGroup") == []
    await console.post("/api/topics", {"topic": "Pay", "queues": 1})
    sent = await console.post("/api/topics/Pay/send", {"body": "failed", "keys": "p1"})
    await cluster.settled()
    _, _, offset = parse_offset_msg_id(sent["offsetMsgId"])
    ext = {"offset": offset, "group": "billing", "delayLevel": -1}  # -1: dead-lettered at once
    assert (await cluster.call(RequestCode.CONSUMER_SEND_MSG_BACK, ext)).code == ResponseCode.SUCCESS
    await cluster.settled()
    (letter,) = await console.get("/api/dlq/billing")
    assert letter["topic"] == "%DLQ%billing" and letter["body"] == "failed"
    assert letter["properties"]["RETRY_TOPIC"] == "Pay"
    (resent,) = await console.post("/api/dlq/billing/resend", {"ids": [letter["msgId"]]})
    assert resent["topic"] == "Pay" and resent["newMsgId"] == sent["msgId"]
    await cluster.settled()
    assert [s["max"] for s in (await console.get("/api/topics/Pay"))["status"]] == [2]
    status, value = await console.call("POST", "/api/dlq/billing/resend", {"ids": "all"})
    assert status == 400 and "list" in value["error"]


async def test_amqp_pages_read_the_metadata_service(make_cluster, open_console, tmp_path):
    cluster = await make_cluster()
    without = await open_console(cluster.namesrv_addr)
    assert (await without.get("/api/amqp"))["enabled"] is False
    store = MetaStore(make_engine(database_url(tmp_path / "meta")))
    store.ensure_defaults()
    meta = MetaService(store)
    try:
        await meta.declare_exchange(Exchange(vhost="/", name="orders", type="topic"))
        await meta.declare_queue(Queue(vhost="/", name="billing"))
        await meta.bind(Binding(vhost="/", source="orders", destination="billing", routing_key="order.*"))
        d = await (await open_console(cluster.namesrv_addr, meta)).get("/api/amqp")
    finally:
        store.engine.dispose()
    assert d["enabled"] is True
    assert [v["name"] for v in d["vhosts"]] == ["/"] and [u["name"] for u in d["users"]] == ["guest"]
    assert [(e["name"], e["type"]) for e in d["exchanges"]] == [("orders", "topic")]
    assert [q["name"] for q in d["queues"]] == ["billing"]
    assert [(b["source"], b["destination"], b["routing_key"]) for b in d["bindings"]] == [
        ("orders", "billing", "order.*")
    ]


async def test_the_proxies_given_are_listed_up_or_down(cluster_console, open_console):
    cluster, console = cluster_console
    assert "no proxies given" in (await console.get("/api/access"))["proxies"]["reason"]
    from ferrymq.cli.proxying import start_local_proxy

    proxy, port = await start_local_proxy(cluster.broker, "127.0.0.1", 0)
    try:
        gone = free_port()
        told = await open_console(cluster.namesrv_addr, proxies=f"127.0.0.1:{port};127.0.0.1:{gone}")
        nodes = (await told.get("/api/access"))["proxies"]["nodes"]
        assert [(n["address"], n["up"]) for n in nodes] == [
            (f"127.0.0.1:{port}", True),
            (f"127.0.0.1:{gone}", False),
        ]
        assert nodes[0]["connect_ms"] >= 0 and nodes[1]["error"]
    finally:
        await proxy.close()


async def test_an_unreachable_cluster_is_a_clear_502(open_console):
    port = free_port()
    console = await open_console(f"127.0.0.1:{port}")
    for path in ("/api/topics", "/api/groups", "/api/cluster", "/api/dashboard"):
        status, value = await console.call("GET", path)
        assert status == 502, (path, value)
        assert f"NameServer 127.0.0.1:{port}" in value["error"]


async def test_the_page_and_its_files_are_served_from_the_package(cluster_console):
    _, console = cluster_console
    async with console.session.get(console.url + "/") as response:
        assert response.status == 200 and "<title>ferrymq console</title>" in await response.text()
    for name in ("console.js", "charts.js", "console.css"):
        async with console.session.get(f"{console.url}/static/{name}") as response:
            assert response.status == 200 and len(await response.read()) > 500


async def test_a_traced_message_has_its_timeline(make_cluster, open_console):
    cluster = await make_cluster(trace_topic_enable=True)
    console = await open_console(cluster.namesrv_addr)
    await console.post("/api/topics", {"topic": "Traced", "queues": 1})
    async with Producer("TracedProducer", cluster.namesrv_addr, enable_trace=True) as producer:
        sent = await producer.send(Message("Traced", b"followed"))

    async def traced():
        status, value = await console.call("GET", f"/api/messages/{sent.msg_id}/trace")
        return value if status == 200 else None

    trace = await eventually(traced, 20, "the trace of the message")
    (send,) = trace["sends"]
    assert send["group"] == "TracedProducer" and send["topic"] == "Traced" and send["success"] is True
    assert trace["stored"]["msgId"] == sent.msg_id and trace["stored"]["body"] == "followed"
