"""The ACL page's API over a real NameServer and broker with authentication on: users and rules made
in the console are the ones the broker enforces."""

from __future__ import annotations

import pytest

from ferrymq.client import ClientError
from tests.auth.conftest import ROOT
from tests.console.conftest import send_as


async def test_without_auth_the_acl_page_says_it_is_off(cluster_console):
    _, console = cluster_console
    acl = await console.get("/api/acl")
    assert acl == {"enabled": False, "reason": acl["reason"]} and "ACL not enabled" in acl["reason"]


async def test_users_and_rules_made_in_the_console_are_enforced(secure_console):
    cluster, console = secure_console
    for topic in ("Allowed", "Other"):
        await console.post("/api/topics", {"topic": topic, "queues": 1})
    acl = await console.get("/api/acl")
    assert acl["enabled"] is True and acl["actingAs"] == ROOT[0]
    assert acl["users"] == [{"username": "root", "type": "Super", "status": "enable"}]

    assert await console.post("/api/acl/users", {"username": "alice", "password": "alice-secret"})
    rule = {"user": "alice", "resources": "Topic:Allowed", "actions": ["Pub"], "sourceIps": ""}
    await console.post("/api/acl/rules", rule)
    acl = await console.get("/api/acl")
    assert {"username": "alice", "type": "Normal", "status": "enable"} in acl["users"]
    assert acl["rules"] == [
        {
            "user": "alice",
            "resource": "Topic:Allowed",
            "actions": ["Pub"],
            "decision": "Allow",
            "sourceIps": [],
        }
    ]
    async with console.session.get(console.url + "/api/acl") as response:
        assert "alice-secret" not in await response.text() and "password" not in await response.text()

    await send_as(cluster.namesrv_addr, "alice", "alice-secret", "Allowed")
    with pytest.raises(ClientError, match="no permission"):
        await send_as(cluster.namesrv_addr, "alice", "alice-secret", "Other")

    status, _ = await console.call("PUT", "/api/acl/users/alice", {"status": "disable"})
    assert status == 200
    with pytest.raises(ClientError):
        await send_as(cluster.namesrv_addr, "alice", "alice-secret", "Allowed")
    await console.call("PUT", "/api/acl/users/alice", {"status": "enable", "password": "changed"})
    await send_as(cluster.namesrv_addr, "alice", "changed", "Allowed")

    status, _ = await console.call("DELETE", "/api/acl/rules/alice", resource="Topic:Allowed")
    assert status == 200 and (await console.get("/api/acl"))["rules"] == []
    with pytest.raises(ClientError, match="no permission"):
        await send_as(cluster.namesrv_addr, "alice", "changed", "Allowed")
    assert (await console.call("DELETE", "/api/acl/users/alice"))[0] == 200
    assert [u["username"] for u in (await console.get("/api/acl"))["users"]] == ["root"]


async def test_bad_acl_input_gets_a_400_that_says_why(secure_console):
    _, console = secure_console
    status, value = await console.call("POST", "/api/acl/users", {"username": "bob"})
    assert status == 400 and "password" in value["error"]
    rule = {"user": "bob", "resources": "Topic:T", "actions": ["Publish"]}
    status, value = await console.call("POST", "/api/acl/rules", rule)
    assert status == 400 and "Publish" in value["error"]
    rule = {"user": "bob", "resources": "Topic:T", "actions": "Pub", "decision": "Maybe"}
    status, value = await console.call("POST", "/api/acl/rules", rule)
    assert status == 400 and "decision" in value["error"]
    status, value = await console.call("PUT", "/api/acl/users/bob", {})
    assert status == 400


async def test_a_console_without_credentials_is_told_why_the_cluster_refuses(make_secure, open_console):
    cluster = await make_secure()
    console = await open_console(cluster.namesrv_addr)
    status, value = await console.call("GET", "/api/topics")
    assert status == 502 and "accessKey" in value["error"], value
