"""The official 5.x Python client through our gRPC proxy (in the broker process, and standalone)
over a produce quota set from the shell: it gets TOO_MANY_REQUESTS (42900) and, as
rocketmq-python-client 5.1.2 does not retry that code itself, the application sends again; every
acknowledged message is received. With authentication on, a quota of the client's user applies."""

from __future__ import annotations

import asyncio
import subprocess
import time

import pytest

from ferrymq.client import Admin
from tests.cli.test_admin import ferrymq
from tests.cli.test_dev import FERRYMQ
from tests.proxy.conftest import python_driver, receive_until
from tests.proxy.test_auth import ROOT, prepare

pytestmark = pytest.mark.compat
COUNT = 12


def send_slowed(driver, topic: str) -> list[str]:
    """Send COUNT messages, each again after a refusal, at 5 a second: their ids."""
    acked, refusals = [], []
    started = time.monotonic()
    for i in range(COUNT):
        deadline = time.monotonic() + 10
        while (answer := driver.call("send", topic=topic, body=f"m-{i}"))["ok"] is False:
            refusals.append(answer)
            assert time.monotonic() < deadline, answer
            time.sleep(0.05)
        acked.append(answer["id"])
    assert time.monotonic() - started >= (COUNT - 1) / 5 * 0.9  # 5 a second, a burst of one
    assert refusals and {a["error"] for a in refusals} == {"TooManyRequestsException"}, refusals[:3]
    assert "TOO_MANY_REQUESTS" in refusals[0]["message"] or "42900" in refusals[0]["message"], refusals[0]
    return acked


def test_the_5x_client_gets_too_many_requests_and_what_it_sends_again_arrives(proxied, client):
    proxied.create_topic("Metered")
    admin = ["admin", "--namesrv", proxied.namesrv, "quota"]
    assert "set on 1 broker(s)" in ferrymq(*admin, "set", "produce", "Topic:Metered", "--messages", "5")
    assert "Topic:Metered" in ferrymq(*admin, "list")
    bad = subprocess.run([*FERRYMQ, *admin, "set", "produce", "Group:g", "-m", "5"], capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert "a produce quota is on Topic:<name> or User:<name>, not 'Group:g'" in bad.stderr + bad.stdout
    client.ok("producer", topics=["Metered"])
    acked = send_slowed(client, "Metered")
    ferrymq(*admin, "delete", "produce", "Topic:Metered")
    assert "Topic:Metered" not in ferrymq(*admin, "list")
    client.ok("consumer", group="Meters", topic="Metered", await_s=5)
    got = receive_until(client, lambda got: len({m["id"] for m in got}) >= COUNT)
    assert {m["id"] for m in got} == set(acked), proxied.describe()


def test_a_user_quota_applies_to_the_5x_clients_of_that_user(secured, client_python, tmp_path):
    _, namesrv, proxy = secured
    prepare(namesrv)

    async def limit() -> None:
        async with Admin(namesrv, access_key=ROOT[0], secret_key=ROOT[1]) as admin:
            await admin.set_quota("produce", "User:app", messages=5)

    asyncio.run(limit())
    app_is_slowed_and_loses_nothing(client_python, proxy, tmp_path)


def app_is_slowed_and_loses_nothing(client_python, proxy: str, tmp_path) -> None:
    """User app, over a produce quota of 5 a second, sends COUNT to Orders: all arrive."""
    app = python_driver(client_python, proxy, tmp_path / "app", ("app", "app-secret"))
    try:
        app.ok("producer", topics=["Orders"])
        acked = send_slowed(app, "Orders")
        app.ok("consumer", group="Billing", topic="Orders", await_s=5)
        got = receive_until(app, lambda got: len({m["id"] for m in got}) >= COUNT)
        assert {m["id"] for m in got} == set(acked)
    finally:
        app.close()
