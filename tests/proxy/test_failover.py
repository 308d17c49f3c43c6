"""The official 5.x Python client keeps producing and consuming through a cluster-mode proxy while
the master of a controller-mode group is SIGKILLed: the proxy follows the new master, and every
send the client saw acknowledged is received later. How soon sends succeed again is a benchmark's
business (bench/proxy_failover.py); this test prints it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from ferrymq.bench.processes import ProcessCluster
from tests.compat.conftest import ClientProcess
from tests.compat.venvs import client_venv
from tests.proxy.conftest import PYTHON_CLIENT

pytestmark = [pytest.mark.faults, pytest.mark.compat, pytest.mark.timeout(600)]

STEADY = Path(__file__).parents[1] / "faults" / "clients" / "steady_v5.py"
TOPIC = "ProxyFailover"
SETTLE = 90.0
SECONDS = 40.0  # of sending; the kill comes once 100 sends were acknowledged
DRAIN = 90.0  # to receive what was sent, after the sends end


async def wait_for(what: str, condition, timeout: float, describe) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {timeout:g} s:\n{describe()}"
        await asyncio.sleep(0.2)


async def test_python_client_through_the_proxy_survives_master_sigkill(tmp_path):
    python = await asyncio.to_thread(client_venv, *PYTHON_CLIENT)
    async with ProcessCluster(tmp_path / "cluster", replicas=2, proxy=True) as cluster:
        assert cluster.proxy_addr is not None
        master, _ = await cluster.master()
        before = await cluster.wait_full_group(SETTLE)
        await cluster.create_topic(TOPIC)
        args = ["--proxy", cluster.proxy_addr, "--topic", TOPIC, "--seconds", str(SECONDS),
                "--drain", str(DRAIN), "--timeout", str(SECONDS + DRAIN + 60)]  # fmt: skip
        client = ClientProcess(
            python, STEADY, args, tmp_path / "home", "steady 5.x client", SECONDS + DRAIN + 60
        )
        try:
            await wait_for("100 sends", lambda: len(client.events("sent")) >= 100, SETTLE, client.describe)
            killed_at = time.time()
            cluster.procs[master].kill()
            after = await cluster.wait_new_master(before, SETTLE)
            assert after.master_epoch > before.master_epoch
            summary = await asyncio.to_thread(client.wait_exit)
        finally:
            client.kill()
    sent = {e["body"] for e in client.events("sent")}
    resumed = [e["t"] for e in client.events("sent") if e["started"] > killed_at]
    assert resumed, f"no send succeeded after the SIGKILL:\n{client.describe()}"
    outage = min(resumed) - killed_at
    print(f"5.x producer via the proxy: sends succeeded again {outage:.2f} s after the SIGKILL")
    received = {e["body"] for e in client.events("received")}
    assert summary["sent"] == len(sent) > len(resumed)
    assert not sent - received, (
        f"{len(sent - received)} acknowledged sends never received: {sorted(sent - received)[:10]}"
    )
    assert any(e["t"] > killed_at for e in client.events("received")), "nothing received after the SIGKILL"
