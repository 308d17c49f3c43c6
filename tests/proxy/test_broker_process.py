"""`ferrymq broker --proxy-port`: the proxy in a broker process of its own (RocketMQ 5's local mode
outside `ferrymq dev`), with the official 5.x Python client."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from ferrymq.bench.processes import free_ports
from tests.compat.conftest import ServerProcess
from tests.proxy.conftest import Proxied, python_driver

pytestmark = pytest.mark.compat


@pytest.fixture
def broker_with_proxy(tmp_path) -> Iterator[Proxied]:
    log_dir = tmp_path / "servers"
    log_dir.mkdir()
    namesrv, broker, proxy = (f"127.0.0.1:{port}" for port in free_ports(3))
    servers = [ServerProcess("namesrv", ["--listen", namesrv], log_dir)]
    try:
        servers[0].wait_listening(namesrv)
        args = ["--namesrv", namesrv, "--listen", broker, "--store-dir", str(tmp_path / "store")]
        servers.append(ServerProcess("broker", [*args, "--proxy-port", proxy.rsplit(":", 1)[1]], log_dir))
        servers[1].wait_listening(broker)
        servers[1].wait_listening(proxy)
        yield Proxied("broker", proxy, namesrv, broker, servers)
    finally:
        for server in reversed(servers):
            server.stop()


def test_a_broker_process_serves_5x_clients_on_its_proxy_port(client_python, broker_with_proxy, tmp_path):
    proxied = broker_with_proxy
    proxied.create_topic("Local", 1)
    client = python_driver(client_python, proxied.proxy, tmp_path / "client-home")
    try:
        client.ok("producer", topics=["Local"])
        sent = client.ok("send", topic="Local", body="in-process", tag="t")["id"]
        client.ok("consumer", group="Locals", topic="Local", await_s=5)
        got: list[dict] = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got = client.ok("receive", max=4, invisible_s=30)["messages"]
        assert [(m["id"], m["body"], m["tag"]) for m in got] == [(sent, "in-process", "t")], (
            proxied.describe()
        )
        client.ok("ack", id=sent)
    finally:
        client.close()
