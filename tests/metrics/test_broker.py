"""A broker's metrics and readiness, scraped over HTTP from a real NameServer and Broker."""

from __future__ import annotations

from ferrymq.broker.server import Broker
from ferrymq.client import Message, Producer, PullConsumer, SimpleConsumer
from ferrymq.metrics.broker import broker_ready
from ferrymq.metrics.registry import Registry
from ferrymq.metrics.roles import add_broker, add_namesrv
from ferrymq.protocol.codes import RequestCode
from tests.broker.conftest import broker_config
from tests.metrics.conftest import eventually, value

TOPIC, GROUP = "MetricsTopic", "MetricsGroup"
BROKER = {"node_type": "broker", "node_id": "broker-a", "topic": TOPIC}


async def poll_until(consumer: PullConsumer, count: int) -> None:
    got = 0
    while got < count:
        got += len(await consumer.poll(timeout=2.0))


async def test_traffic_lag_and_exporter_names(make_cluster, serve):
    cluster = await make_cluster()
    registry = Registry()
    add_namesrv(registry, cluster.namesrv)
    add_broker(registry, cluster.broker)
    scraper = await serve(registry)
    async with Producer("MetricsProducers", cluster.namesrv_addr) as producer:
        for i in range(10):
            await producer.send(Message(TOPIC, f"m{i}".encode()))
        # a running pull consumer pulls ahead of poll(): this one ends once it has committed
        async with PullConsumer(GROUP, cluster.namesrv_addr, consume_from="first") as consumer:
            await consumer.subscribe(TOPIC)
            await poll_until(consumer, 10)
            await consumer.commit()
        await producer.send_batch([Message(TOPIC, b"b%d" % i) for i in range(7)])
        await cluster.settled()
        lag = {**BROKER, "consumer_group": GROUP}

        async def lag_is(n: int, inflight: int):
            text = await scraper.metrics()
            return (
                value(text, "rocketmq_consumer_lag_messages", **lag) == n
                and value(text, "rocketmq_consumer_inflight_messages", **lag) == inflight
                and text
            )

        text = await eventually(lambda: lag_is(7, 0), what="a lag of 7 after the commit")
        assert value(text, "rocketmq_messages_in_total", **BROKER) == 17
        assert value(text, "rocketmq_throughput_in_total", **BROKER) > 17 * 100  # whole records
        assert value(text, "rocketmq_messages_out_total", **lag) == 10
        assert value(text, "rocketmq_consumer_ready_messages", **lag) == 7
        assert value(text, "rocketmq_producer_offset", broker="broker-a", topic=TOPIC) == 17
        assert value(text, "rocketmq_consumer_offset", topic=TOPIC, group=GROUP) == 10
        assert value(text, "rocketmq_group_diff", topic=TOPIC, group=GROUP, msgModel="CLUSTERING") == 7
        assert value(text, "rocketmq_brokeruntime_msg_put_total_today_now") == 17
        assert (
            value(text, "rocketmq_brokeruntime_commitlog_maxoffset")
            == cluster.broker.store.commitlog.max_offset
        )
        assert 0 < value(text, "rocketmq_brokeruntime_commitlog_disk_ratio") < 1
        sends = value(text, "rocketmq_rpc_latency_count", node_type="broker",
                      request_code=str(int(RequestCode.SEND_MESSAGE_V2)))  # fmt: skip
        batches = value(text, "rocketmq_rpc_latency_count", node_type="broker",
                        request_code=str(int(RequestCode.SEND_BATCH_MESSAGE)))  # fmt: skip
        assert (sends, batches) == (10, 1)
        assert value(text, "rocketmq_rpc_latency_count", node_type="namesrv") >= 1
        assert value(text, "ferrymq_namesrv_routes", kind="live_brokers") == 1

        async with PullConsumer(GROUP, cluster.namesrv_addr, consume_from="first") as consumer:
            await consumer.subscribe(TOPIC)
            await poll_until(consumer, 7)  # pulled, not committed: in flight
            await eventually(lambda: lag_is(7, 7), what="7 messages in flight")
    assert await scraper.ready() == (200, "ready\n")


async def test_a_broker_no_nameserver_knows_is_not_ready(tmp_path, serve):
    broker = Broker(broker_config(tmp_path, 1))  # nothing listens on port 1
    await broker.start()
    try:
        registry = Registry()
        add_broker(registry, broker)
        scraper = await serve(registry)
        status, body = await scraper.ready()
        assert status == 503 and "not registered with any NameServer" in body
    finally:
        await broker.stop()
    assert broker_ready(broker) == "broker stopping"


async def test_a_slave_is_ready_once_it_copies_its_master(group, serve):
    master = await group.start("m")
    for i in range(20):
        assert (await group.send(master, b"x" * 1000 + bytes([i]))).code == 0
    registry = Registry()
    slave = await group.start("s", broker_role="SLAVE", broker_id=1)
    add_broker(registry, slave)
    master_registry = Registry()
    add_broker(master_registry, master)
    scraper, master_scraper = await serve(registry), await serve(master_registry)

    async def ready():
        return (await scraper.ready())[0] == 200

    await eventually(ready, what="the slave to be ready")
    assert slave.store.commitlog.max_offset == master.store.commitlog.max_offset
    text = await scraper.metrics()
    assert value(text, "ferrymq_broker_is_master") == 0
    assert value(text, "ferrymq_ha_slave_connected") == 1
    assert value(text, "ferrymq_ha_slave_behind_bytes") == 0

    async def master_sees_replica():
        return await master_scraper.value("ferrymq_ha_replica_lag_bytes", replica_id="1") == 0

    await eventually(master_sees_replica, what="the master to see its replica caught up")
    await slave.stop()
    status, body = await scraper.ready()
    assert status == 503 and "stopping" in body


async def test_popped_messages_are_out_and_in_flight_until_acked(make_cluster, serve):
    cluster = await make_cluster()
    registry = Registry()
    add_broker(registry, cluster.broker)
    scraper = await serve(registry)
    group = "PopMetricsGroup"
    async with Producer("PopProducers", cluster.namesrv_addr) as producer:
        await producer.send_batch([Message(TOPIC, b"p%d" % i) for i in range(6)])
    labels = {**BROKER, "consumer_group": group}
    async with SimpleConsumer(group, cluster.namesrv_addr, subscriptions={TOPIC: "*"}, await_duration=2) as c:
        received = []
        while len(received) < 6:
            received += await c.receive(max_messages=6, invisible_duration=60)
        text = await scraper.metrics()
        assert value(text, "rocketmq_messages_out_total", **labels) == 6
        assert value(text, "rocketmq_consumer_inflight_messages", **labels) == 6
        assert value(text, "rocketmq_consumer_lag_messages", **labels) == 6
        for message in received[:4]:
            await c.ack(message)

        async def two_left():
            text = await scraper.metrics()
            return value(text, "rocketmq_consumer_inflight_messages", **labels) == 2 and text

        text = await eventually(two_left, what="two messages still in flight")
        assert value(text, "rocketmq_consumer_lag_messages", **labels) == 2
