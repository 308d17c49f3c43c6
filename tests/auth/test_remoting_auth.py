"""Authentication and access control over remoting, against a real NameServer and broker."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.auth import AuthRegistry, User
from ferrymq.auth.gate import RemotingGate
from ferrymq.client import Admin, ClientError, Message, Producer, PullConsumer
from ferrymq.protocol.acl_signing import Credentials
from ferrymq.protocol.codes import RequestCode as Req
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.remoting import RemotingCommand
from tests.auth.conftest import ROOT
from tests.broker.test_broker import pull_ext, send_ext

NO_PERMISSION = ResponseCode.NO_PERMISSION


async def admin_as_root(cluster) -> Admin:
    return Admin(cluster.namesrv_addr, access_key=ROOT[0], secret_key=ROOT[1])


async def test_unsigned_unknown_and_wrongly_signed_requests_are_refused(secure):
    anonymous, stranger, wrong = (
        secure.client(),
        secure.client("mallory", "x"),
        secure.client(ROOT[0], "nope"),
    )
    route = {"topic": "T"}
    for client, remark in ((anonymous, "No accessKey"), (stranger, "User:mallory is not found"),
                           (wrong, "check signature failed")):  # fmt: skip
        for to in (secure.namesrv_addr, secure.broker_addr):
            response = await secure.call(client, Req.GET_ROUTEINFO_BY_TOPIC, route, to=to)
            assert response.code == NO_PERMISSION and remark in response.remark, (to, response.remark)
    # The broker signed its registration with its inner credentials: the NameServer took it.
    root = secure.client(*ROOT)
    info = await secure.call(root, Req.GET_BROKER_CLUSTER_INFO, to=secure.namesrv_addr)
    assert info.code == ResponseCode.SUCCESS and secure.broker.config.broker_name.encode() in bytes(info.body)


async def test_permission_matrix_and_run_time_changes(secure):
    async with await admin_as_root(secure) as admin:
        await admin.create_user("alice", "alice-secret")
        await admin.create_acl("alice", ["Topic:order-*"], ["Pub", "Sub"])
        await admin.create_acl("alice", ["Group:cg"], ["Sub"])
        await admin.create_acl("alice", ["Topic:order-admin"], ["Create", "Delete", "Get"])
        await admin.create_acl("alice", ["Topic:order-secret"], ["Pub"], decision="Deny")
        await admin.create_acl("alice", ["Topic:far"], ["Pub"], source_ips=["10.0.0.0/8"])
    alice = secure.client("alice", "alice-secret")

    async def outcome(code: int, ext: dict, body: bytes = b"") -> bool:
        response = await secure.call(alice, code, ext, body)
        return response.code != NO_PERMISSION

    matrix = [
        ("pub on a covered topic", Req.SEND_MESSAGE, send_ext("order-1"), True),
        ("pub on another topic", Req.SEND_MESSAGE, send_ext("payments"), False),
        ("pub denied by a deny rule", Req.SEND_MESSAGE, send_ext("order-secret"), False),
        ("pub from outside the source range", Req.SEND_MESSAGE, send_ext("far"), False),
        ("sub with an allowed group", Req.PULL_MESSAGE, pull_ext("order-1", 0, 0, group="cg"), True),
        ("sub with another group", Req.PULL_MESSAGE, pull_ext("order-1", 0, 0, group="other"), False),
        ("sub on another topic", Req.PULL_MESSAGE, pull_ext("payments", 0, 0, group="cg"), False),
        ("create a granted topic", Req.UPDATE_AND_CREATE_TOPIC, create_ext("order-admin"), True),
        ("create another topic", Req.UPDATE_AND_CREATE_TOPIC, create_ext("payments"), False),
        ("get a granted topic", Req.GET_TOPIC_CONFIG, {"topic": "order-admin"}, True),
        ("get another topic", Req.GET_TOPIC_CONFIG, {"topic": "payments"}, False),
        ("list topics without Cluster List", Req.GET_ALL_TOPIC_CONFIG, {}, False),
        ("delete a topic with only Pub,Sub", Req.DELETE_TOPIC_IN_BROKER, {"topic": "order-1"}, False),
        ("delete a granted topic", Req.DELETE_TOPIC_IN_BROKER, {"topic": "order-admin"}, True),
        ("create a user", Req.AUTH_CREATE_USER, {"username": "eve"}, False),
        ("change the broker's config", Req.UPDATE_BROKER_CONFIG, {}, False),
    ]
    for name, code, ext, allowed in matrix:
        body = b'{"username":"eve","password":"p"}' if code == Req.AUTH_CREATE_USER else b"x"
        assert await outcome(code, ext, body) is allowed, name

    # Run-time changes, no restart: grant Cluster List, then disable alice altogether.
    async with await admin_as_root(secure) as admin:
        await admin.create_acl("alice", ["Cluster"], ["List"])
        assert await outcome(Req.GET_ALL_TOPIC_CONFIG, {})
        await admin.delete_acl("alice", ["Topic:order-*"])
        assert not await outcome(Req.SEND_MESSAGE, send_ext("order-1"), b"x")
        await admin.update_user("alice", status="disable")
    response = await secure.call(alice, Req.GET_ALL_TOPIC_CONFIG, {})
    assert response.code == NO_PERMISSION and "disabled" in response.remark


def create_ext(topic: str) -> dict:
    return {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"}  # fmt: skip


async def test_replayed_and_tampered_signatures(secure):
    """A signature covers every extField and the body: any change fails. It carries no time or nonce
    (RocketMQ's scheme), so the very same request sent again is accepted, as RocketMQ accepts it."""
    request = RemotingCommand(
        Req.SEND_MESSAGE, ext_fields={k: str(v) for k, v in send_ext("T").items()}, body=b"hi"
    )
    Credentials(*ROOT).sign(request)
    raw = secure.client()

    async def send(ext: dict, body: bytes) -> RemotingCommand:
        return await raw.invoke(
            secure.broker_addr, RemotingCommand(Req.SEND_MESSAGE, ext_fields=ext, body=body), 5
        )

    assert (await send(dict(request.ext_fields), b"hi")).code == ResponseCode.SUCCESS
    assert (await send(dict(request.ext_fields), b"hi")).code == ResponseCode.SUCCESS  # replay as is
    tampered = [
        ({**request.ext_fields, "topic": "U"}, b"hi"),
        (dict(request.ext_fields), b"hi!"),
        ({**request.ext_fields, "extra": "1"}, b"hi"),
        ({**request.ext_fields, "Signature": request.ext_fields["Signature"].lower()}, b"hi"),
        ({**request.ext_fields, "AccessKey": "alice"}, b"hi"),
    ]
    for ext, body in tampered:
        response = await send(ext, body)
        assert response.code == NO_PERMISSION, ext


_text = st.one_of(st.text(max_size=40), st.sampled_from(["", "root", ROOT[1], "=", "A" * 200]))


@settings(max_examples=300, deadline=None)
@given(
    code=st.one_of(st.sampled_from([int(c) for c in Req]), st.integers(-(2**31), 2**31 - 1)),
    fields=st.dictionaries(st.sampled_from(["AccessKey", "Signature", "SecurityToken", "topic", "b", "a",
                                            "consumerGroup", "group", "_UNIQUE_KEY_QUERY"]), _text),
    body=st.binary(max_size=64),
    version=st.integers(-(2**31), 2**31 - 1),
    peer=st.sampled_from(["127.0.0.1:1", "[::1]:2", "?", "garbage"]),
)  # fmt: skip
def test_the_gate_refuses_garbage_without_failing(code, fields, body, version, peer):
    registry = AuthRegistry()
    registry.create_user(User("root", ROOT[1]))
    request = RemotingCommand(code, ext_fields=fields, body=body, version=version)
    refusal = RemotingGate(registry)(peer, request)
    assert refusal is not None and refusal.code == NO_PERMISSION and refusal.remark


async def test_fuzzed_auth_fields_on_the_wire_never_break_the_servers(secure):
    rng = random.Random(7)
    raw = secure.client()
    pieces = ["", "root", "Signature", "=", "\x00", "é", "A" * 500, ROOT[1], "MQv2"]
    for _ in range(150):
        ext = {
            k: rng.choice(pieces) for k in rng.sample(["AccessKey", "Signature", "SecurityToken", "topic"], 3)
        }
        code = rng.choice(
            [Req.SEND_MESSAGE, Req.PULL_MESSAGE, Req.HEART_BEAT, Req.GET_ROUTEINFO_BY_TOPIC, 9999]
        )
        to = rng.choice([secure.broker_addr, secure.namesrv_addr])
        body = rng.randbytes(rng.randrange(40))
        response = await raw.invoke(to, RemotingCommand(code, ext_fields=ext, body=body), 5)
        assert response.code == NO_PERMISSION
    root = secure.client(*ROOT)
    assert (await secure.call(root, Req.GET_ALL_TOPIC_CONFIG)).code == ResponseCode.SUCCESS


async def test_users_and_rules_survive_a_restart(make_secure, tmp_path):
    first = await make_secure()
    async with await admin_as_root(first) as admin:
        await admin.create_user("bob", "bob-secret")
        await admin.create_acl("bob", ["Topic:*"], ["Pub", "Sub", "Get"])
    await first.broker.stop()
    await first.namesrv.stop()
    assert oct((tmp_path / "store" / "config" / "auth.json").stat().st_mode & 0o777) == "0o600"
    second = await make_secure()
    bob = second.client("bob", "bob-secret")
    assert (await second.call(bob, Req.SEND_MESSAGE, send_ext("T"), b"x")).code == ResponseCode.SUCCESS
    route = await second.call(bob, Req.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}, to=second.namesrv_addr)
    assert route.code == ResponseCode.SUCCESS


async def test_sdk_with_credentials(secure):
    async with await admin_as_root(secure) as admin:
        await admin.create_user("app", "app-secret")
        await admin.create_acl("app", ["Topic:orders", "Group:billing"], ["Pub", "Sub"])
        await admin.create_topic("orders", 2)
        assert [u["username"] for u in await admin.list_users()] == ["app", "root"]
        assert all("password" not in u for u in await admin.list_users())
        (rules,) = await admin.list_acls(subject="User:app")
        assert {e["resource"] for e in rules["policies"][0]["entries"]} == {"Topic:orders", "Group:billing"}
    async with Producer("p", secure.namesrv_addr, access_key="app", secret_key="app-secret") as producer:
        await producer.send(Message("orders", b"paid"))
    async with PullConsumer("billing", secure.namesrv_addr, consume_from="first", access_key="app",
                            secret_key="app-secret") as consumer:  # fmt: skip
        await consumer.subscribe("orders")
        got: list[bytes] = []
        for _ in range(20):
            got += [m.body for m in await consumer.poll(0.5)]
            if got:
                break
        assert got == [b"paid"]
    async with Producer("p", secure.namesrv_addr, access_key="app", secret_key="wrong") as producer:
        with pytest.raises(ClientError):
            await producer.send(Message("orders", b"x"))


async def test_audit_trail_names_who_what_where_and_never_a_secret(secure, caplog):
    caplog.set_level(logging.INFO, logger="ferrymq.audit")
    async with await admin_as_root(secure) as admin:
        await admin.create_user("carol", "carol-secret-value")
        await admin.update_user("carol", password="new-secret-value")
    await secure.call(secure.client("carol", "bad-secret-value"), Req.GET_ALL_TOPIC_CONFIG)
    await secure.call(secure.client("x\nrefused user=root", "y"), Req.GET_ALL_TOPIC_CONFIG)
    lines = [r.getMessage() for r in caplog.records if r.name == "ferrymq.audit"]
    assert all("\n" not in line for line in lines)
    assert any("refused user=x\\nrefused user=root code=21" in line for line in lines)
    assert any("user=root create-user carol" in line and "from=127.0.0.1:" in line for line in lines)
    assert any("user=root update-user carol (password)" in line for line in lines)
    assert any("refused user=carol" in line and "check signature failed" in line for line in lines)
    assert not any("secret-value" in line or ROOT[1] in line for line in lines)


async def test_cli_acl_commands(secure):
    env = {
        **os.environ,
        "FERRYMQ_ACCESS_KEY": ROOT[0],
        "FERRYMQ_SECRET_KEY": ROOT[1],
        "PYTHONPATH": os.pathsep.join(sys.path),
    }

    async def ferrymq(*args: str) -> str:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "ferrymq", "admin", "--namesrv", secure.namesrv_addr, "acl", *args,
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0, out.decode()
        return out.decode()

    assert "2 node(s)" in await ferrymq("create-user", "dave", "--password", "dave-secret")
    await ferrymq("create-acl", "dave", "-r", "Topic:logs-*", "-a", "Pub,Get")
    assert "Topic:logs-*" in await ferrymq("list-acls", "--user", "dave")
    dave = secure.client("dave", "dave-secret")
    assert (await secure.call(dave, Req.SEND_MESSAGE, send_ext("logs-1"), b"x")).code == ResponseCode.SUCCESS
    await ferrymq("delete-user", "dave")
    assert (await secure.call(dave, Req.SEND_MESSAGE, send_ext("logs-1"), b"x")).code == NO_PERMISSION


async def test_a_gateway_reaches_secured_brokers_with_its_credentials(secure):
    """The messaging core's remote implementation (standalone AMQP gateway) signs as it is told."""
    from ferrymq.messaging.remote import RemoteMessageService

    async with RemoteMessageService(secure.namesrv_addr, access_key=ROOT[0], secret_key=ROOT[1]) as remote:
        await remote.create_topic("GatewayTopic", 2)
        assert (await remote.topic_config("GatewayTopic")) is not None
    async with RemoteMessageService(secure.namesrv_addr) as unsigned:
        with pytest.raises(Exception, match="No accessKey"):
            await unsigned.create_topic("Other", 2)
