"""A front apart from the brokers (standalone AMQP gateway or gRPC proxy) reads the cluster's users
and rules by AUTH_SNAPSHOT, which only a super user gets, and follows their changes at run time;
an AMQP gateway in front of the cluster lets its users in by them and applies their user quotas."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from ferrymq.amqp.gateway import Gateway
from ferrymq.amqp.server import AMQPServer
from ferrymq.auth.mirror import AuthMirror
from ferrymq.client import Admin
from ferrymq.messaging.remote import RemoteMessageService
from ferrymq.meta.database import database_url, make_engine
from ferrymq.meta.service import MetaService
from ferrymq.meta.store import MetaStore
from ferrymq.protocol.codes import RequestCode, ResponseCode
from tests.auth.conftest import ROOT
from tests.auth.test_amqp_acl import APP, ORDERS_GROUP, ORDERS_TOPIC, connect, publish_blocked

WAIT_S = 10.0


async def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {WAIT_S:g} s"
        await asyncio.sleep(0.02)


async def test_only_a_super_user_reads_the_users_and_an_unchanged_copy_costs_no_body(make_secure, caplog):
    secure = await make_secure()
    root = secure.client(*ROOT)
    async with Admin(secure.namesrv_addr, access_key=ROOT[0], secret_key=ROOT[1]) as admin:
        await admin.create_user(*APP)
    with caplog.at_level(logging.WARNING, logger="ferrymq.audit"):
        for client in (secure.client(*APP), secure.client()):
            answer = await secure.call(client, RequestCode.AUTH_SNAPSHOT, to=secure.namesrv_addr)
            assert answer.code == ResponseCode.NO_PERMISSION and not answer.body
    assert any(
        "refused user=app code=3911" in r.getMessage() and "only a super user" in r.getMessage()
        for r in caplog.records
    )
    answer = await secure.call(root, RequestCode.AUTH_SNAPSHOT, to=secure.namesrv_addr)
    assert answer.code == ResponseCode.SUCCESS
    users = {u["username"]: u["password"] for u in json.loads(bytes(answer.body))["users"]}
    assert users == {"root": ROOT[1], "app": APP[1]}
    held = {"epoch": answer.ext_fields["epoch"], "version": answer.ext_fields["version"]}
    again = await secure.call(root, RequestCode.AUTH_SNAPSHOT, held, to=secure.namesrv_addr)
    assert (
        again.code == ResponseCode.SUCCESS
        and not again.body
        and again.ext_fields["version"] == held["version"]
    )


async def test_a_mirror_follows_users_and_rules_changed_at_run_time(make_secure):
    secure = await make_secure()
    root = secure.client(*ROOT)
    mirror = await AuthMirror(
        lambda addr, request: root.invoke(addr, request, 5.0), [secure.namesrv_addr], interval=0.05
    ).start()
    try:
        assert set(mirror.registry.users) == {"root"}
        async with Admin(secure.namesrv_addr, access_key=ROOT[0], secret_key=ROOT[1]) as admin:
            await admin.create_user(*APP)
            await wait_for(lambda: "app" in mirror.registry.users, "the new user mirrored")
            await admin.create_acl("app", ["Topic:orders"], ["Pub"])
            await wait_for(lambda: "app" in mirror.registry.acls, "the new rule mirrored")
            await admin.delete_user("app")
            await wait_for(lambda: "app" not in mirror.registry.users, "the deletion mirrored")
    finally:
        await mirror.close()


async def test_a_mirror_without_a_super_user_lets_nobody_of_the_cluster_in(make_secure, caplog):
    secure = await make_secure()
    async with Admin(secure.namesrv_addr, access_key=ROOT[0], secret_key=ROOT[1]) as admin:
        await admin.create_user(*APP)
    app = secure.client(*APP)
    with caplog.at_level(logging.WARNING, logger="ferrymq.auth.mirror"):
        mirror = await AuthMirror(lambda addr, r: app.invoke(addr, r, 5.0), [secure.namesrv_addr]).start()
    await mirror.close()
    assert mirror.registry.users == {}
    assert any("only a super user may read the users' secret keys" in r.getMessage() for r in caplog.records)


@pytest.fixture
async def standalone_gateway(make_secure, tmp_path):
    """A gateway in front of a secured cluster (over remoting, as `ferrymq amqp --access-key root`)
    that follows the cluster's users; the cluster and the gateway's port."""
    secure = await make_secure()
    async with Admin(secure.namesrv_addr, access_key=ROOT[0], secret_key=ROOT[1]) as admin:
        await admin.create_user(*APP)
        await admin.create_acl(
            "app", [f"Topic:{ORDERS_TOPIC}", f"Group:{ORDERS_GROUP}"], ["Pub", "Sub", "Create"]
        )
    service = await RemoteMessageService(secure.namesrv_addr, access_key=ROOT[0], secret_key=ROOT[1]).start()
    mirror = await AuthMirror(service.instance.invoke, service.instance.namesrvs, interval=0.05).start()
    store = MetaStore(make_engine(database_url(tmp_path / "meta")))
    store.ensure_defaults()
    server = AMQPServer("127.0.0.1", 0, Gateway(service, MetaService(store), acl=mirror.registry))
    port = await server.start()
    yield secure, port
    await server.close()
    await mirror.close()
    await service.close()
    store.engine.dispose()


def publish_twice(port: int, between) -> tuple[int, str]:
    """Publish to "orders" with confirms, run `between`, publish again: how the second one ended."""
    connection = connect(port, APP)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("orders")
        channel.basic_publish("", "orders", b"before")
        between()
        with pytest.raises(ChannelClosedByBroker) as closed:
            channel.basic_publish("", "orders", b"after")
        return closed.value.reply_code, closed.value.reply_text
    finally:
        connection.close()


async def test_a_standalone_gateway_follows_a_rule_changed_at_run_time(standalone_gateway):
    secure, port = standalone_gateway
    loop = asyncio.get_running_loop()

    async def deny() -> None:
        async with Admin(secure.namesrv_addr, access_key=ROOT[0], secret_key=ROOT[1]) as admin:
            await admin.create_acl("app", [f"Topic:{ORDERS_TOPIC}"], ["Pub"], decision="Deny")
        await asyncio.sleep(0.5)  # ten times the mirror's interval

    code, text = await asyncio.to_thread(
        publish_twice, port, lambda: asyncio.run_coroutine_threadsafe(deny(), loop).result(10)
    )
    assert code == 403 and f"User:app has no permission to access Topic:{ORDERS_TOPIC} with Pub" in text
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        await asyncio.to_thread(connect, port, ("app", "wrong"))


async def test_a_standalone_gateway_applies_its_users_produce_quota(standalone_gateway):
    secure, port = standalone_gateway
    async with Admin(secure.namesrv_addr, access_key=ROOT[0], secret_key=ROOT[1]) as admin:
        await admin.set_quota("produce", "User:app", messages=20)
    seen = await asyncio.to_thread(publish_blocked, port, APP, 30)
    assert seen and seen[0].startswith("flow control: quota exceeded: User:app may produce 20 messages/s")
    assert await asyncio.to_thread(publish_blocked, port, ("guest", "guest"), 30) == []
