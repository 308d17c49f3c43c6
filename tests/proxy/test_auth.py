"""The official 5.x Python client through a proxy with authentication on (`ferrymq dev --auth-user`,
the proxy in the broker process): its MQv2-HMAC-SHA1 signed calls are checked against the broker's
users and rules; a wrong secret or a missing rule ends them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ferrymq.bench.processes import free_ports
from ferrymq.client import Admin
from tests.compat.conftest import ServerProcess
from tests.proxy.conftest import python_driver, receive_until

pytestmark = pytest.mark.compat

ROOT = ("root", "root-secret-5x")


@pytest.fixture
def secured(tmp_path):
    namesrv_port, broker_port, proxy_port = free_ports(3)
    args = [
        "--data-dir", str(tmp_path / "data"), "--namesrv-port", str(namesrv_port), "--broker-port",
        str(broker_port), "--proxy-port", str(proxy_port), "--amqp-port", "-1", "--console-port", "-1",
        "--auth-user", ":".join(ROOT),
    ]  # fmt: skip
    (tmp_path / "servers").mkdir()
    server = ServerProcess("dev", args, tmp_path / "servers")
    try:
        for port in (namesrv_port, broker_port, proxy_port):
            server.wait_listening(f"127.0.0.1:{port}")
        yield server, f"127.0.0.1:{namesrv_port}", f"127.0.0.1:{proxy_port}"
    finally:
        server.stop()


def prepare(namesrv: str) -> None:
    async def run() -> None:
        async with Admin(namesrv, access_key=ROOT[0], secret_key=ROOT[1]) as admin:
            await admin.create_user("app", "app-secret")
            await admin.create_acl("app", ["Topic:Orders", "Group:Billing"], ["Pub", "Sub"])
            await admin.create_user("reader", "reader-secret")
            await admin.create_acl("reader", ["Topic:Orders"], ["Sub"])
            await admin.create_topic("Orders", 2)

    asyncio.run(run())


def test_signed_calls_are_checked(secured, client_python, tmp_path):
    server, namesrv, proxy = secured
    prepare(namesrv)
    app = python_driver(client_python, proxy, tmp_path / "app", ("app", "app-secret"))
    try:
        app.ok("producer", topics=["Orders"])
        sent = app.ok("send", topic="Orders", body="paid")["id"]
        app.ok("consumer", group="Billing", topic="Orders", await_s=5)
        got = receive_until(app, lambda got: bool(got))
        assert [m["id"] for m in got] == [sent]
    finally:
        app.close()

    refusals_are_audited(client_python, proxy, tmp_path, server.log)


def refusals_are_audited(client_python, proxy: str, tmp_path, log: Path) -> None:
    """A wrong secret and a user without Pub cannot send to Orders, and the proxy's log says so."""
    for label, credentials in (("wrong", ("app", "not-it")), ("reader", ("reader", "reader-secret"))):
        driver = python_driver(client_python, proxy, tmp_path / label, credentials)
        try:
            driver.call("producer", topics=["Orders"])
            answer = driver.call("send", topic="Orders", body="x")
            assert not answer["ok"], answer
        finally:
            driver.close()
    text = log.read_text()
    assert "refused user=app rpc=" in text and "check signature failed" in text
    assert "refused user=reader rpc=SendMessage" in text and "Topic:Orders with Pub" in text
    assert "app-secret" not in text and ROOT[1] not in text
