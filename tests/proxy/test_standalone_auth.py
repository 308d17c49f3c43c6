"""Fronts apart from the brokers, in front of a cluster with authentication on: `ferrymq proxy` and
`ferrymq amqp`, each given a super user's keys, check their clients against the cluster's users and
rules and follow changes to them at run time. The official 5.x Python client through the proxy and
pika through the gateway, with right and wrong credentials, allowed and refused operations, a rule
changed while they run, and a user quota."""

from __future__ import annotations

import asyncio
import time

import pika
import pytest
from pika.exceptions import AMQPConnectionError, ChannelClosedByBroker

from ferrymq.bench.processes import free_ports
from ferrymq.client import Admin
from ferrymq.meta.naming import queue_group, queue_topic
from tests.compat.conftest import ServerProcess
from tests.proxy.conftest import python_driver, receive_until
from tests.proxy.test_auth import ROOT, prepare, refusals_are_audited
from tests.quota.test_proxy_quotas import app_is_slowed_and_loses_nothing

pytestmark = pytest.mark.compat
WAIT_S = 15.0


@pytest.fixture
def fronted(tmp_path):
    """A secured NameServer + broker (`ferrymq dev --auth-user`), a standalone proxy and a standalone
    AMQP gateway signing as its super user: (servers, namesrv, proxy, AMQP port)."""
    namesrv_port, broker_port, proxy_port, amqp_port = free_ports(4)
    namesrv = f"127.0.0.1:{namesrv_port}"
    logs = tmp_path / "servers"
    logs.mkdir()
    keys = ["--access-key", ROOT[0], "--secret-key", ROOT[1]]
    servers = [
        ServerProcess(
            "dev",
            ["--data-dir", str(tmp_path / "data"), "--namesrv-port", str(namesrv_port), "--broker-port",
             str(broker_port), "--proxy-port", "-1", "--amqp-port", "-1", "--console-port", "-1",
             "--auth-user", ":".join(ROOT)],
            logs,
        )
    ]  # fmt: skip
    try:
        for port in (namesrv_port, broker_port):
            servers[0].wait_listening(f"127.0.0.1:{port}")
        prepare(namesrv)
        proxy = f"127.0.0.1:{proxy_port}"
        servers.append(ServerProcess("proxy", ["--namesrv", namesrv, "--listen", proxy, *keys], logs))
        servers.append(
            ServerProcess(
                "amqp",
                ["--namesrv", namesrv, "--listen", f"127.0.0.1:{amqp_port}", "--data-dir",
                 str(tmp_path / "meta"), "--metrics-port", "-1", *keys],
                logs,
            )
        )  # fmt: skip
        servers[1].wait_listening(proxy)
        servers[2].wait_listening(f"127.0.0.1:{amqp_port}")
        yield servers, namesrv, proxy, amqp_port
    finally:
        for server in reversed(servers):
            server.stop()


def admin(namesrv: str, change) -> None:
    async def run() -> None:
        async with Admin(namesrv, access_key=ROOT[0], secret_key=ROOT[1]) as root:
            await change(root)

    asyncio.run(run())


def test_the_standalone_proxy_checks_5x_clients_against_the_clusters_users(fronted, client_python, tmp_path):
    servers, namesrv, proxy, _ = fronted
    app = python_driver(client_python, proxy, tmp_path / "app", ("app", "app-secret"))
    try:
        app.ok("producer", topics=["Orders"])
        sent = app.ok("send", topic="Orders", body="paid")["id"]
        app.ok("consumer", group="Billing", topic="Orders", await_s=5)
        assert [m["id"] for m in receive_until(app, bool)] == [sent]

        async def deny(root) -> None:
            await root.create_acl("app", ["Topic:Orders"], ["Pub"], decision="Deny")

        admin(namesrv, deny)
        deadline = time.monotonic() + WAIT_S  # the proxy reads the change within its refresh interval
        while (answer := app.call("send", topic="Orders", body="x"))["ok"]:
            assert time.monotonic() < deadline, "the rule changed at run time never applied"
            time.sleep(0.2)
        assert "Topic:Orders with Pub" in answer["message"], answer
    finally:
        app.close()
    refusals_are_audited(client_python, proxy, tmp_path, servers[1].log)


def test_the_standalone_proxy_applies_a_users_quota(fronted, client_python, tmp_path):
    _, namesrv, proxy, _ = fronted

    async def limit(root) -> None:
        await root.set_quota("produce", "User:app", messages=5)

    admin(namesrv, limit)
    app_is_slowed_and_loses_nothing(client_python, proxy, tmp_path)


def test_the_standalone_gateway_lets_the_clusters_users_in_by_their_rules(fronted):
    servers, namesrv, _, port = fronted

    async def allow(root) -> None:
        resources = [f"Topic:{queue_topic('/', 'orders')}", f"Group:{queue_group('/', 'orders')}"]
        await root.create_acl("app", resources, ["Pub", "Sub", "Create"])

    admin(namesrv, allow)
    params = pika.ConnectionParameters(
        "127.0.0.1", port, credentials=pika.PlainCredentials("app", "app-secret"), connection_attempts=1
    )
    deadline = time.monotonic() + WAIT_S
    while True:  # the gateway reads the new rules within its refresh interval
        connection = pika.BlockingConnection(params)
        channel = connection.channel()
        try:
            channel.queue_declare("orders")
            break
        except ChannelClosedByBroker as e:
            assert e.reply_code == 403 and time.monotonic() < deadline, e
            connection.close()
            time.sleep(0.2)
    try:
        channel.confirm_delivery()
        channel.basic_publish("", "orders", b"paid")
        method, _, body = channel.basic_get("orders", auto_ack=True)
        while method is None and time.monotonic() < deadline:
            method, _, body = channel.basic_get("orders", auto_ack=True)
        assert body == b"paid"
    finally:
        connection.close()
    wrong = pika.ConnectionParameters(
        "127.0.0.1", port, credentials=pika.PlainCredentials("app", "nope"), connection_attempts=1
    )
    with pytest.raises(AMQPConnectionError) as refused:
        pika.BlockingConnection(wrong)
    assert "403" in repr(refused.value)
    log = servers[2].log.read_text()
    assert "refused user=app amqp=connection.start-ok" in log and "nope" not in log
