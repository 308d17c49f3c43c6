"""`ferrymq bench replication`: produce throughput of a lone broker, an ASYNC_MASTER with a slave, a
SYNC_MASTER with a slave and a group at replication QoS level 2 (in its sync state once the slave
caught up), each in processes of its own, and how long the slave trails at the end.

Every scenario gets a fresh NameServer and fresh stores in a temporary directory. With several
rounds the three scenarios alternate (lone, async, sync, lone, ...), so a machine whose speed drifts
(shared hosts) weighs on all three alike; the ratios are taken between the scenarios' medians.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from ferrymq.bench.client import CpuMeter, Progress, produce
from ferrymq.net import RemotingClient
from ferrymq.protocol.bodies import KVTable, decode_body
from ferrymq.protocol.codes import RequestCode
from ferrymq.protocol.remoting import RemotingCommand

QOS2 = "QOS_LEVEL_2"  # an ASYNC_MASTER and slave with replication_qos_level = 2
SCENARIOS = (
    ("lone broker", None),
    ("ASYNC_MASTER + slave", "ASYNC_MASTER"),
    ("SYNC_MASTER + slave", "SYNC_MASTER"),
    ("QoS level 2 (sync) + slave", QOS2),
)


def _start(args: list[str], pattern: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ferrymq", *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True, env={**os.environ, **(env or {})},
    )  # fmt: skip
    assert proc.stdout is not None  # a pipe, as asked
    line = proc.stdout.readline()
    match = re.search(pattern, line)
    if match is None:
        proc.kill()
        raise RuntimeError(f"ferrymq {args[0]} did not start: {line!r}")
    return proc, match.group(1)


class _Group:
    """A NameServer and broker processes of one group, on stores in a temporary directory."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.procs: list[subprocess.Popen] = []
        ns, self.namesrv = _start(["namesrv", "--listen", "127.0.0.1:0"], r"listening on (\S+)")
        self.procs.append(ns)

    def broker(self, name: str, *args: str, env: dict[str, str] | None = None) -> str:
        common = ["--namesrv", self.namesrv, "--listen", "127.0.0.1:0", "--ha-port", "0"]
        proc, addr = _start(
            ["broker", *common, "--store-dir", str(self.data / name), *args], r"listening on (\S+),", env
        )
        self.procs.append(proc)
        return addr


@contextlib.contextmanager
def _group(role: str | None) -> Iterator[tuple[_Group, str, str | None, int, int | None]]:
    """NameServer, master (and slave) processes; yields (group, master addr, slave addr, master pid,
    slave pid)."""
    data = Path(tempfile.mkdtemp(prefix="ferrymq-bench-ha-"))
    group = _Group(data)
    procs = group.procs
    try:
        env = {"FERRYMQ_REPLICATION_QOS_LEVEL": "2"} if role == QOS2 else None
        master_role = "ASYNC_MASTER" if role in (None, QOS2) else role
        master_addr = group.broker("m", "--role", master_role, env=env)
        master_pid = procs[-1].pid
        slave_addr = group.broker("s", "--role", "SLAVE", "--broker-id", "1", env=env) if role else None
        slave_pid = procs[-1].pid if role is not None else None
        yield group, master_addr, slave_addr, master_pid, slave_pid
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(data, ignore_errors=True)


async def _max_offset(client: RemotingClient, addr: str) -> int:
    response = await client.invoke(addr, RemotingCommand(RequestCode.GET_BROKER_RUNTIME_INFO), 5.0)
    return int(decode_body(KVTable, response.body).table["commitLogMaxOffset"])


async def _slave_attached(client: RemotingClient, master: str, slave: str) -> None:
    """Wait (bounded) until the slave copies: its max offset follows the master's first write."""
    deadline = time.monotonic() + 60
    while True:
        target = await _max_offset(client, master)
        if target and await _max_offset(client, slave) >= target:
            return
        if time.monotonic() > deadline:
            raise RuntimeError("the slave did not attach")
        await asyncio.sleep(0.05)


async def _scenario(name: str, role: str | None, count: int, body_size: int, batch: int, inflight: int,
                    progress: Progress) -> dict:  # fmt: skip
    with _group(role) as (group, master, slave, master_pid, slave_pid):
        client = RemotingClient()
        try:
            topic = f"BenchHA{time.time_ns()}"
            if slave is not None:  # one message first, so the slave is attached before the clock starts
                await produce(group.namesrv, topic, 1, body_size, 1, 1, lambda *_: None, CpuMeter(None))
                await _slave_attached(client, master, slave)
                if role == QOS2:
                    await _qos_sync(client, master)
            slave_cpu = CpuMeter(slave_pid)
            result = await produce(
                group.namesrv, topic, count, body_size, batch, inflight, progress, CpuMeter(master_pid)
            )
            extra: dict = {"slave_trails_ms": None}
            if slave is not None:
                done = time.perf_counter()
                target = await _max_offset(client, master)
                await _caught_up(client, slave, target)
                extra["slave_trails_ms"] = round((time.perf_counter() - done) * 1000)
                extra["slave_us_per_msg"] = slave_cpu.result(count)["broker_us_per_msg"]
            if role == "ASYNC_MASTER":  # a new, empty slave copies the whole log: the copy rate
                started = time.perf_counter()
                fresh = group.broker("s2", "--role", "SLAVE", "--broker-id", "2")
                await _caught_up(client, fresh, target)
                seconds = time.perf_counter() - started
                extra["fresh_slave_copy_mb_per_s"] = round(target / seconds / 1e6, 1)
        finally:
            await client.close()
    return {**result, "scenario": name, **extra}


async def _qos_sync(client: RemotingClient, master: str) -> None:
    """Wait (bounded) until the level-2 group is in its sync state."""
    deadline = time.monotonic() + 60
    while True:
        response = await client.invoke(master, RemotingCommand(RequestCode.GET_BROKER_RUNTIME_INFO), 5.0)
        if decode_body(KVTable, response.body).table.get("replicationQosState") == "sync":
            return
        if time.monotonic() > deadline:
            raise RuntimeError("the QoS level 2 group did not reach sync")
        await asyncio.sleep(0.05)


async def _caught_up(client: RemotingClient, addr: str, target: int) -> None:
    deadline = time.monotonic() + 600
    while await _max_offset(client, addr) < target:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{addr} did not catch up")
        await asyncio.sleep(0.005)


async def run_replication_bench(
    count: int, body_size: int, batch: int, inflight: int, rounds: int, progress: Progress
) -> tuple[list[dict], list[dict]]:
    """Every scenario `rounds` times, alternating; returns (one summary row per scenario, every run).

    A summary row is the scenario's median run, its `vs_lone_%` the ratio of the medians."""
    runs = []
    for round_no in range(1, rounds + 1):
        for name, role in SCENARIOS:
            run = await _scenario(name, role, count, body_size, batch, inflight, progress)
            runs.append({**run, "round": round_no})
    summary = []
    for name, _ in SCENARIOS:
        mine = sorted((r for r in runs if r["scenario"] == name), key=lambda r: r["msgs_per_s"])
        median = statistics.median_low([r["msgs_per_s"] for r in mine])
        row = next(r for r in mine if r["msgs_per_s"] == median)
        summary.append({**row, "round": "median", "runs_msgs_per_s": [r["msgs_per_s"] for r in mine]})
    lone = summary[0]["msgs_per_s"]
    for row in summary:
        row["vs_lone_%"] = round(100 * row["msgs_per_s"] / lone)
    return summary, runs
