"""The real rocketmq==0.4.4 client (C++ 4.x) keeps producing through a controller-mode failover.

It learns the new master only from its own route refreshes (every 30 s in the C++ client), so its
outage is longer than our SDK's; the test measures and prints it, and checks nothing it had
acknowledged is lost.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from ferrymq.bench.failover import TOPIC, read_back
from tests.compat.conftest import ROCKETMQ_V4, ClientProcess
from tests.compat.venvs import client_venv

pytestmark = [pytest.mark.faults, pytest.mark.compat, pytest.mark.timeout(600)]

SCRIPT = Path(__file__).parent / "clients" / "steady_v4.py"
SETTLE = 90.0


async def test_rocketmq_v4_producer_survives_master_sigkill(fault_cluster, tmp_path):
    python = await asyncio.to_thread(client_venv, *ROCKETMQ_V4)
    cluster = await fault_cluster()
    master, _ = await cluster.master()
    before = await cluster.wait_full_group(SETTLE)
    seconds = 45.0  # at most: it stops once it has sent 100 messages more after the failover
    stop = tmp_path / "stop"
    args = ["--namesrv", cluster.namesrv_addr, "--topic", TOPIC, "--seconds", str(seconds),
            "--timeout", str(seconds + 60), "--stop-file", str(stop)]  # fmt: skip
    producer = ClientProcess(python, SCRIPT, args, tmp_path / "home", "steady v4 producer", seconds + 60)

    async def sent_after(t: float, count: int) -> bool:
        """Until `count` sends acknowledged after `t`; False if the producer ended first or SETTLE
        s went by."""
        deadline = time.monotonic() + SETTLE
        while sum(e["t"] > t for e in producer.events("sent")) < count:
            if producer.proc.poll() is not None or time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.2)
        return True

    try:
        assert await sent_after(0, 100), producer.describe()
        killed_at = time.time()
        cluster.procs[master].kill()
        await cluster.wait_new_master(before, SETTLE)
        await sent_after(killed_at, 100)
        stop.touch()
        summary = await asyncio.to_thread(producer.wait_exit)
    finally:
        producer.kill()
    sent = producer.events("sent")
    after = [e["t"] for e in sent if e["t"] > killed_at]
    assert after, f"the real client never sent again after the failover:\n{producer.describe()}"
    print(f"rocketmq 0.4.4 producer: sends succeeded again {min(after) - killed_at:.1f} s after the SIGKILL")
    assert summary["sent"] == len(sent)
    acked = {e["body"] for e in sent}
    found, _ = await read_back(cluster.namesrv_addr, acked, timeout=SETTLE)
    assert not acked - found, f"{len(acked - found)} acknowledged messages lost"
