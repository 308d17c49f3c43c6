"""Failover through the gRPC proxy: how long after the master's SIGKILL the official 5.x Python
client's sends succeed again, over many kills.

One controller-mode cluster (NameServer, 3 controllers, a group of 2 brokers, a cluster-mode
`ferrymq proxy`) and one 5.x producer sending steadily through the proxy (each message retried
until acknowledged: tests/faults/clients/steady_v5.py). Each round SIGKILLs the master, waits for
the new one, restarts the killed broker and waits until it is back in the SyncStateSet. A round's
time is from the kill to the first acknowledged send whose attempt began after the kill.

    .venv/bin/python bench/proxy_failover.py --kills 10 --save bench/results/proxy-failover.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from tests.compat.conftest import ClientProcess
from tests.compat.venvs import client_venv
from tests.proxy.conftest import PYTHON_CLIENT

from ferrymq.bench.machine import machine_info
from ferrymq.bench.processes import ProcessCluster

STEADY = Path(__file__).resolve().parents[1] / "tests" / "faults" / "clients" / "steady_v5.py"
TOPIC = "ProxyFailoverBench"
SETTLE = 90.0


async def wait_sends(client: ClientProcess, count: int, timeout: float) -> None:
    target = len(client.events("sent")) + count
    deadline = time.monotonic() + timeout
    while len(client.events("sent")) < target:
        if time.monotonic() > deadline or client.proc.poll() is not None:
            raise TimeoutError(f"no {count} sends within {timeout:g} s:\n{client.describe()}")
        await asyncio.sleep(0.1)


async def run(kills: int, root: Path) -> dict:
    python = await asyncio.to_thread(client_venv, *PYTHON_CLIENT)
    rounds = []
    async with ProcessCluster(root / "cluster", replicas=2, proxy=True) as cluster:
        assert cluster.proxy_addr is not None
        await cluster.wait_full_group(SETTLE)
        await cluster.create_topic(TOPIC)
        lifetime = kills * 60 + 60
        args = ["--proxy", cluster.proxy_addr, "--topic", TOPIC, "--seconds", str(lifetime),
                "--no-consumer", "--timeout", str(lifetime + 30)]  # fmt: skip
        client = ClientProcess(python, STEADY, args, root / "home", "steady 5.x producer", lifetime + 30)
        try:
            await wait_sends(client, 100, SETTLE)
            for i in range(kills):
                master, before = await cluster.master()
                load = os.getloadavg()[0]
                killed_at = time.time()
                cluster.procs[master].kill()
                after = await cluster.wait_new_master(before, SETTLE)
                await wait_sends(client, 20, SETTLE)
                resumed = min(e["t"] for e in client.events("sent") if e["started"] > killed_at)
                failed = sum(1 for e in client.events("failed") if e["t"] > killed_at)
                rounds.append({"failover_s": round(resumed - killed_at, 3), "killed": master,
                               "new_epoch": after.master_epoch, "failed_attempts": failed,
                               "load_average_1m": round(load, 2)})  # fmt: skip
                print(f"kill {i + 1}/{kills}: {json.dumps(rounds[-1])}", flush=True)
                await cluster.start_broker(master)
                await cluster.wait_full_group(SETTLE)
                await wait_sends(client, 50, SETTLE)
        finally:
            client.kill()
    times = sorted(r["failover_s"] for r in rounds)
    return {
        "summary": {
            "kills": kills,
            "failover_p50_s": statistics.median(times),
            "failover_p99_s": times[min(len(times) - 1, int(len(times) * 0.99))],
            "failover_max_s": times[-1],
        },
        "rounds": rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--save")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ferrymq-proxy-failover-") as root:
        result = asyncio.run(run(args.kills, Path(root)))
    report = {
        "suite": "proxy-failover",
        "command": f".venv/bin/python bench/proxy_failover.py --kills {args.kills}",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
        **result,
    }
    if args.save:
        Path(args.save).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report["summary"]))


if __name__ == "__main__":
    main()
