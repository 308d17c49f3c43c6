"""What making GROUPS subscription groups one request each costs a broker (a gateway starting a
consumer per queue): a NameServer in this process, a Broker in a child process, GROUPS
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP requests with WINDOW in flight. Saved: wall time, the
broker's CPU (from /proc) and the machine's load.

    .venv/bin/python bench/group_creations.py --groups 2000 --save bench/results/group-creations-2000.json
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from ferrymq.bench.machine import machine_info, publish
from ferrymq.bench.processes import broker_process, free_port
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.server import NameServer
from ferrymq.net import RemotingClient
from ferrymq.protocol.bodies import SubscriptionGroupConfig, encode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.remoting import RemotingCommand


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run(groups: int, window: int, workdir: Path) -> dict:
    namesrv = NameServer(NamesrvConfig(listen_host="127.0.0.1", listen_port=0))
    await namesrv.start()
    port = free_port()
    proc = broker_process(workdir, namesrv.port, port)
    client = RemotingClient()
    slots = asyncio.Semaphore(window)

    async def create(i: int) -> None:
        body = encode_body(SubscriptionGroupConfig(f"bench-group-{i}"))
        async with slots:
            request = RemotingCommand(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
            answer = await client.invoke(f"127.0.0.1:{port}", request, 60.0)
        assert answer.code == ResponseCode.SUCCESS, answer.remark

    try:
        proc.start()
        await proc.wait_for_line("listening on", 60)
        cpu0, wall0 = cpu_seconds(proc.pid), time.perf_counter()
        await asyncio.gather(*(create(i) for i in range(groups)))
        wall, cpu = time.perf_counter() - wall0, cpu_seconds(proc.pid) - cpu0
        file_kib = (workdir / "store" / "config" / "subscriptionGroup.json").stat().st_size / 1024
    finally:
        await client.close()
        proc.stop()
        await namesrv.stop()
    return {"groups": groups, "window": window, "wall_s": round(wall, 3), "broker_cpu_s": round(cpu, 3),
            "group_file_kib": round(file_kib), "machine": machine_info()}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=2000)
    parser.add_argument("--window", type=int, default=64, help="requests in flight")
    parser.add_argument("--save", type=Path)
    a = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="group-creations-") as workdir:
        publish(asyncio.run(run(a.groups, a.window, Path(workdir))), a.save)


if __name__ == "__main__":
    main()
