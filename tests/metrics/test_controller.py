"""A controller's metrics and readiness: Raft standing, elections, each broker group's epoch and
SyncStateSet, with a broker in controller mode electing itself master."""

from __future__ import annotations

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.server import Broker
from ferrymq.metrics.registry import Registry
from ferrymq.metrics.roles import add_broker, add_controller
from ferrymq.store import StoreConfig
from tests.controller.conftest import controller_group  # noqa: F401  (a fixture)
from tests.metrics.conftest import eventually, value


async def test_controller_and_its_broker_group(tmp_path, controller_group, serve):  # noqa: F811
    group = await controller_group(size=1)
    controller = await group.leader()
    registry = Registry()
    add_controller(registry, controller)
    scraper = await serve(registry)
    assert await scraper.ready() == (200, "ready\n")
    store = StoreConfig(store_path_root_dir=tmp_path / "broker", mapped_file_size_commit_log=1 << 20)
    broker = Broker(
        BrokerConfig(
            broker_name="broker-c",
            listen_host="127.0.0.1",
            listen_port=0,
            ha_listen_port=0,
            store=store,
            enable_controller_mode=True,
            controller_addr=group.addresses[0],
            broker_heartbeat_interval=200,
        )
    )
    await broker.start()
    try:
        broker_registry = Registry()
        add_broker(broker_registry, broker)
        broker_scraper = await serve(broker_registry)

        async def elected():
            text = await scraper.metrics()
            return value(text, "ferrymq_controller_master_epoch", broker_name="broker-c") == 1 and text

        text = await eventually(elected, what="the broker's election")
        assert value(text, "ferrymq_controller_is_leader", node_type="controller") == 1
        assert value(text, "ferrymq_controller_leader_known") == 1
        assert value(text, "ferrymq_controller_elections_total") == 1
        assert value(text, "ferrymq_controller_sync_state_set_size", broker_name="broker-c") == 1
        assert value(text, "ferrymq_controller_has_master", broker_name="broker-c") == 1
        assert value(text, "ferrymq_controller_active_brokers", broker_name="broker-c") == 1
        assert value(text, "rocketmq_rpc_latency_count", node_type="controller") >= 1

        async def broker_is_master():
            return await broker_scraper.value("ferrymq_broker_is_master") == 1

        await eventually(broker_is_master, what="the broker to become master")
        assert await broker_scraper.value("ferrymq_ha_master_epoch") == 1
        assert await broker_scraper.value("ferrymq_ha_sync_state_set_size") == 1
    finally:
        await broker.stop()
