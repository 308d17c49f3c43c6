"""The metadata service over HTTP: two gateways' clients see each other's declarations through the
watch, and RabbitMQ's errors cross unchanged. Also two servers on one database (the poll path)."""

import asyncio

import pytest

from ferrymq.meta.client import MetaClient
from ferrymq.meta.database import make_engine
from ferrymq.meta.entities import Binding, Exchange, Queue, decode
from ferrymq.meta.errors import NotFound, PreconditionFailed
from ferrymq.meta.server import MetaServer
from ferrymq.meta.service import MetaService
from ferrymq.meta.store import MetaStore


@pytest.fixture
async def servers(store_url):
    """Two metadata servers on one database (in production: PostgreSQL behind several servers)."""
    stores = [MetaStore(make_engine(store_url)) for _ in range(2)]
    stores[0].ensure_defaults()
    started = [MetaServer(MetaService(s, poll_interval=0.2), "127.0.0.1", 0) for s in stores]
    for server in started:
        await server.start()
    yield started
    for server, s in zip(started, stores, strict=True):
        await server.close()
        s.engine.dispose()


async def test_two_clients_see_each_others_changes(servers):
    address = f"127.0.0.1:{servers[0].port}"
    async with MetaClient(address) as one, MetaClient(address) as two:
        start = (await two.snapshot("/")).version
        watching = asyncio.create_task(two.watch("/", start, timeout=10))
        declared = await one.declare_queue(Queue(vhost="/", name="orders"))
        seen = await asyncio.wait_for(watching, 15)
        assert [decode(c) for c in seen.changes] == [declared]
        assert seen.version == start + 1

        await two.declare_exchange(Exchange(vhost="/", name="shop", type="topic"))
        await two.bind(Binding(vhost="/", source="shop", destination="orders", routing_key="order.#"))
        seen = await one.watch("/", start + 1, timeout=10)
        assert [(c.kind, c.op) for c in seen.changes] == [("exchange", "put"), ("binding", "put")]
        assert (await one.watch("/", seen.version, timeout=0)).changes == []

        with pytest.raises(PreconditionFailed) as caught:
            await one.declare_queue(Queue(vhost="/", name="orders", durable=False))
        assert caught.value.reply_text == (
            "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'orders' in vhost '/': "
            "received 'false' but current is 'true'"
        )
        with pytest.raises(NotFound, match="no queue 'none' in vhost '/'"):
            await one.declare_queue(Queue(vhost="/", name="none"), passive=True)
        assert (await one.authenticate("guest", "guest")).name == "guest"
        assert await one.authenticate("guest", "wrong") is None
        assert (await one.permission("guest", "/")).read == ".*"
        assert await one.delete_queue("/", "orders") == declared


async def test_a_change_through_another_server_reaches_the_watch(servers):
    """The second server's write wakes no one on the first: its watch finds it by polling."""
    async with (
        MetaClient(f"127.0.0.1:{servers[0].port}") as one,
        MetaClient(f"127.0.0.1:{servers[1].port}") as two,
    ):
        start = (await one.snapshot("/")).version
        watching = asyncio.create_task(one.watch("/", start, timeout=10))
        await two.declare_exchange(Exchange(vhost="/", name="elsewhere"))
        seen = await asyncio.wait_for(watching, 15)
        assert [decode(c).name for c in seen.changes] == ["elsewhere"]


async def test_definitions_over_http(servers):
    async with MetaClient(f"127.0.0.1:{servers[0].port}") as client:
        await client.declare_queue(Queue(vhost="/", name="kept"))
        exported = await client.export_definitions()
        assert [q["name"] for q in exported["queues"]] == ["kept"]
        report = await client.import_definitions(exported)
        assert report.changed == 0 and report.kinds["queues"].unchanged == 1
