"""The C++ 4.x client (rocketmq==0.4.4) with ACL session credentials against a NameServer and broker
with authentication on: its AccessKey/Signature requests are accepted with the right secret, and
refused (NO_PERMISSION) with a wrong one or as a user without the rule."""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.client import Admin
from ferrymq.client.sync import PullConsumer
from tests.compat.conftest import wait_until

pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]

ROOT = ("root", "root-secret-4x")


@pytest.fixture
def auth_env(monkeypatch):
    """Authentication on for the server processes started after it (they inherit the environment)."""
    for name, value in {"AUTH_ENABLED": "true", "INIT_USERNAME": ROOT[0], "INIT_PASSWORD": ROOT[1]}.items():
        monkeypatch.setenv(f"FERRYMQ_{name}", value)


@pytest.fixture
def secure_v4(auth_env, v4):
    return v4


def pull_bodies(namesrv: str, topic: str, count: int) -> set[str]:
    """What our own SDK, signed as root, reads back from the topic."""
    got: set[str] = set()
    with PullConsumer(
        "acl-check", namesrv, consume_from="first", access_key=ROOT[0], secret_key=ROOT[1]
    ) as c:
        c.subscribe(topic)
        wait_until(lambda: got.update(m.body.decode() for m in c.poll(0.5)) or len(got) >= count, 30,
                   lambda: f"{count} messages on {topic}, got {sorted(got)}")  # fmt: skip
    return got


def test_cpp_client_signs_and_is_checked(secure_v4):
    cluster = secure_v4.cluster

    async def prepare() -> None:
        async with Admin(cluster.namesrv, access_key=ROOT[0], secret_key=ROOT[1]) as admin:
            await admin.create_user("app", "app-secret")
            resources = ["Topic:AclTopic", "Group:acl_consumer", "Group:compat_producer"]
            await admin.create_acl("app", resources, ["Pub", "Sub"])
            await admin.create_topic("AclTopic", 4)

    asyncio.run(prepare())

    sent = secure_v4.produce("AclTopic", 5, prefix="good", credentials=("app", "app-secret"))
    assert {s["body"] for s in sent} == {f"good-{i}" for i in range(5)}
    assert pull_bodies(cluster.namesrv, "AclTopic", 5) == {f"good-{i}" for i in range(5)}

    consumer = secure_v4.consumer("AclTopic", "acl_consumer", label="acl-consumer", count=5,
                                  credentials=("app", "app-secret"))  # fmt: skip
    consumer.wait_exit()
    assert {f"good-{i}" for i in range(5)} <= consumer.bodies()

    for label, credentials in (("bad-secret", ("app", "wrong")), ("no-rule", ("root-less", "x"))):
        producer = secure_v4.start(
            "produce.py", label,
            ["--topic", "AclTopic", "--count", "1", "--prefix", label, "--route-timeout", "3",
             "--access-key", credentials[0], "--secret-key", credentials[1]],
            timeout=20,
        )  # fmt: skip
        producer.proc.wait(60)
        assert producer.proc.returncode != 0 and not producer.events("sent"), producer.describe()
    log = cluster.namesrv_process.log.read_text()
    assert "refused user=app code=105" in log and "check signature failed" in log
    assert "User:root-less is not found" in log
    assert "app-secret" not in log and ROOT[1] not in log
