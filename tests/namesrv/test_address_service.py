"""The NameServer address service: an HTTP endpoint serving "host:port;host:port". A client and a
broker that use it take the list at start and follow it when it changes; a failed fetch keeps it."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import web

from ferrymq.broker.server import Broker
from ferrymq.client import ClientInstance, Message, Producer
from ferrymq.client.instance import namesrv_source
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.server import NameServer
from ferrymq.net.nsaddr import ws_addr
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.remoting import RemotingCommand
from tests.broker.conftest import broker_config

POLL = 0.1  # seconds between fetches here (RocketMQ: 2 minutes)


class AddressService:
    """The tiny HTTP server: GET /rocketmq/nsaddr answers `body` (or `status`), and counts requests."""

    def __init__(self) -> None:
        self.body = ""
        self.status = 200
        self.requests = 0
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def _answer(self, request: web.Request) -> web.Response:
        self.requests += 1
        return web.Response(text=self.body, status=self.status)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/rocketmq/nsaddr", self._answer)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def served(self, count: int = 2) -> None:
        """Wait until `count` more requests were answered (each follower polled at least once since)."""
        target = self.requests + count
        await until(lambda: self.requests >= target, "the address service was not asked again")


async def until(condition, what: str, timeout: float = 15.0) -> None:
    """Wait for `condition()` (a bool, or an awaitable of one), at most `timeout` s."""
    deadline = time.monotonic() + timeout
    while not await _value(condition()):
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


async def _value(answer) -> bool:
    return bool(await answer) if asyncio.iscoroutine(answer) else bool(answer)


async def routes(namesrv: NameServer, topic: str, client) -> bool:
    request = RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": topic})
    response = await client.invoke(f"127.0.0.1:{namesrv.port}", request, 3.0)
    return response.code == ResponseCode.SUCCESS


@pytest.fixture
async def service():
    served = AddressService()
    await served.start()
    yield served
    await served.stop()


async def test_client_and_broker_follow_the_address_service(service, tmp_path, client):
    old, new = (NameServer(NamesrvConfig(listen_host="127.0.0.1", listen_port=0)) for _ in range(2))
    await old.start()
    await new.start()
    service.body = f"127.0.0.1:{old.port}\n"  # RocketMQ trims the line break off
    config = broker_config(tmp_path, 0, fetch_namesrv_addr_by_address_server=True,
                           rmq_address_server_domain=f"127.0.0.1:{service.port}",
                           namesrv_addr_poll_interval=int(POLL * 1000))  # fmt: skip
    config.namesrv_addr = ""
    broker = Broker(config)
    await broker.start()
    instance = ClientInstance(ws_addr(f"127.0.0.1:{service.port}"), namesrv_poll_interval=POLL)
    await instance.start()
    try:
        assert await routes(old, "TBW102", client) and not await routes(new, "TBW102", client)
        async with Producer("AddressUser", "", instance=instance) as producer:
            assert instance.namesrvs == [f"127.0.0.1:{old.port}"]
            await producer.send(Message("Followed", b"one"))

            service.status = 503  # a failing service: everyone keeps the list they have
            await service.served()
            assert instance.namesrvs == [f"127.0.0.1:{old.port}"]
            assert broker.config.namesrv_addrs == [f"127.0.0.1:{old.port}"]

            service.status, service.body = 200, f"127.0.0.1:{new.port}"
            await until(
                lambda: instance.namesrvs == [f"127.0.0.1:{new.port}"], "the client kept the old list"
            )
            await until(
                lambda: broker.config.namesrv_addrs == [f"127.0.0.1:{new.port}"], "the broker did not"
            )
            # the broker registered with the new one at once, not at its next 30 s round
            await until(lambda: routes(new, "Followed", client), "the broker is not on the new NameServer")
            await old.stop()
            await instance.refresh_route("Followed")
            assert (await producer.send(Message("Followed", b"two"))).message_queue.topic == "Followed"
    finally:
        await instance.close()
        await broker.stop()
        await new.stop()
        await old.stop()


def test_the_name_server_list_comes_from_where_rocketmq_takes_it():
    env = {"NAMESRV_ADDR": "10.0.0.1:9876", "ROCKETMQ_NAMESRV_DOMAIN": "nsaddr.example"}
    assert namesrv_source("a:1;b:2", "http://x/", env) == (["a:1", "b:2"], None)
    assert namesrv_source("http://ns.example/rocketmq/nsaddr", None, env) == (
        [],
        "http://ns.example/rocketmq/nsaddr",
    )
    assert namesrv_source("", "http://x/", env) == ([], "http://x/")
    assert namesrv_source(None, None, env) == (["10.0.0.1:9876"], None)
    del env["NAMESRV_ADDR"]
    assert namesrv_source(None, None, env) == ([], "http://nsaddr.example:8080/rocketmq/nsaddr")
    env["ROCKETMQ_NAMESRV_DOMAIN_SUBGROUP"] = "prod"
    env["ROCKETMQ_NAMESRV_DOMAIN"] = "nsaddr.example:80"
    assert namesrv_source(None, None, env) == ([], "http://nsaddr.example:80/rocketmq/prod")
    with pytest.raises(ValueError):
        namesrv_source("", None, {})
