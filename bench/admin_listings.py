"""How long the admin listings take on a large cluster: a NameServer and a Broker in a child
process with TOPICS topics of 2 queues and GROUPS subscription groups, each group with offsets on
two topics. Each listing runs RUNS times through the SDK's Admin (what the console and `ferrymq
admin` call); the median wall time, and CPU of this process and of the servers' process, are saved.

The child makes the fixture itself, in bulk, into the broker's tables (one write of each file).
Topics made so get no ConsumeQueue files: a broker maps each such file with two descriptors, and
10,000 topics of 2 queues would need 40,000, twice what this machine's hard limit allows
(UPDATE_AND_CREATE_TOPIC_LIST, which makes them, is measured up to --wire-topics instead).

    .venv/bin/python bench/admin_listings.py --topics 10000 --groups 1000 \\
        --save bench/results/admin-listings-10000x1000.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ferrymq.bench.machine import machine_info
from ferrymq.client import Admin
from ferrymq.protocol.bodies import SubscriptionGroupConfig, TopicConfig

RUNS = 5
QUEUES = 2
BATCH = 1000  # topics per UPDATE_AND_CREATE_TOPIC_LIST request
TARGET_S = 2.0


def serve(workdir: str, topics: int, groups: int, ports, stop) -> None:
    """The child process: a NameServer and a Broker on ephemeral loopback ports, with the fixture,
    until told to stop."""

    async def run() -> None:
        from ferrymq.broker.config import BrokerConfig
        from ferrymq.broker.server import Broker
        from ferrymq.namesrv.config import NamesrvConfig
        from ferrymq.namesrv.server import NameServer
        from ferrymq.store import StoreConfig

        namesrv = NameServer(NamesrvConfig(listen_host="127.0.0.1", listen_port=0))
        await namesrv.start()
        store = StoreConfig(
            store_path_root_dir=Path(workdir), mapped_file_size_commit_log=64 << 20,
            mapped_file_size_consume_queue=1000 * 20,
        )  # fmt: skip
        broker = Broker(BrokerConfig(namesrv_addr=f"127.0.0.1:{namesrv.port}", listen_host="127.0.0.1",
                                     listen_port=0, ha_listen_port=0, store=store))  # fmt: skip
        await broker.start()
        fixture_s = make_fixture(broker, topics, groups)
        ports.send((namesrv.port, broker.config.broker_addr, fixture_s))
        await asyncio.get_running_loop().run_in_executor(None, stop.recv)
        await broker.stop()
        await namesrv.stop()

    asyncio.run(run())


def make_fixture(broker, topics: int, groups: int) -> float:
    """Topics, groups and offsets straight into the broker's tables; seconds it took."""
    started = time.monotonic()
    names = topic_names(topics)
    broker.topics.put_many([TopicConfig(t, QUEUES, QUEUES) for t in names])
    configs = [SubscriptionGroupConfig(group_name(g)) for g in range(groups)]
    broker.groups.put_many(configs)
    broker.consumption.update_all(configs)
    for g in range(groups):
        for k in range(2):
            for q in range(QUEUES):
                broker.offsets.commit(group_name(g), names[(2 * g + k) % topics], q, 0)
    broker.offsets.persist()
    broker.schedule_registration()
    return round(time.monotonic() - started, 2)


def topic_names(topics: int) -> list[str]:
    return [f"Topic{i:05d}" for i in range(topics)]


def group_name(g: int) -> str:
    return f"Group{g:04d}"


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def until(check, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


async def wire_creation(admin: Admin, wire_topics: int) -> dict:
    """UPDATE_AND_CREATE_TOPIC_LIST of `wire_topics` new topics (ConsumeQueue files made), in
    requests of BATCH, and one UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST of as many groups."""
    names = [f"Wire{i:05d}" for i in range(wire_topics)]
    t0 = time.perf_counter()
    for i in range(0, wire_topics, BATCH):
        await admin.create_topics([TopicConfig(t, QUEUES, QUEUES) for t in names[i : i + BATCH]])
    t1 = time.perf_counter()
    await admin.create_groups([SubscriptionGroupConfig(f"Wire{g:05d}") for g in range(wire_topics)])
    t2 = time.perf_counter()
    return {"topics": wire_topics, "create_topics_s": round(t1 - t0, 3), "create_groups_s": round(t2 - t1, 3)}


async def _has_offsets(admin: Admin, group: str) -> bool:
    return len((await admin.consume_stats(group)).offsets) == 2 * QUEUES


async def _all_routed(admin: Admin, topics: int) -> bool:
    return len(await admin.topics()) >= topics


async def measure(namesrv: str, broker_addr: str, server_pid: int, topics: int, groups: int,
                  wire_topics: int) -> dict:  # fmt: skip
    async with Admin(namesrv) as admin:
        await until(lambda: _has_offsets(admin, group_name(groups - 1)), "the last group's offsets")
        await until(lambda: _all_routed(admin, topics), "every topic's route on the NameServer")
        listings = {
            "topicList": lambda: admin.topics(),
            "consumerProgress (every group)": lambda: admin.all_consume_stats(),
            "brokerStatus": lambda: admin.broker_runtime(broker_addr),
            "getAllTopicConfig": lambda: admin.all_topic_config(broker_addr),
            "getAllSubscriptionGroup": lambda: admin.all_group_config(broker_addr),
        }
        sizes = {
            "topicList": len(await admin.topics()),
            "consumerProgress (every group)": sum(
                len(c.offsets) for c in (await admin.all_consume_stats()).values()
            ),
            "getAllTopicConfig": len((await admin.all_topic_config(broker_addr)).topic_config_table),
        }
        if sizes["consumerProgress (every group)"] != groups * 2 * QUEUES:
            raise SystemExit(f"consume stats of {sizes['consumerProgress (every group)']} queues")
        figures = {}
        for name, call in listings.items():
            walls, client_cpu, server_cpu = [], [], []
            for _ in range(RUNS):
                cpu0, srv0, t0 = time.process_time(), cpu_seconds(server_pid), time.perf_counter()
                await call()
                walls.append(time.perf_counter() - t0)
                client_cpu.append(time.process_time() - cpu0)
                server_cpu.append(cpu_seconds(server_pid) - srv0)
            figures[name] = {
                "median_s": round(statistics.median(walls), 4), "max_s": round(max(walls), 4),
                "client_cpu_s": round(statistics.median(client_cpu), 4),
                "server_cpu_s": round(statistics.median(server_cpu), 2),
                "items": sizes.get(name), "within_target": statistics.median(walls) <= TARGET_S,
            }  # fmt: skip
            print(name, figures[name], flush=True)
        wire = await wire_creation(admin, wire_topics)
        print("bulk creation over the wire", wire, flush=True)
    return {"listings": figures, "bulk_creation": wire}


def cli_seconds(namesrv: str, *args: str) -> float:
    """Wall time of one `ferrymq admin ... -o json` process, start-up included."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ferrymq", "admin", *args, "-n", namesrv, "-o", "json"],
                   check=True, capture_output=True, timeout=120)  # fmt: skip
    return round(time.perf_counter() - t0, 3)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--groups", type=int, default=1_000)
    parser.add_argument("--wire-topics", type=int, default=2000, help="topics made by the timed bulk request")
    parser.add_argument("--save", required=True)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="ferrymq-admin-listings-")
    ctx = multiprocessing.get_context("spawn")
    ports_here, ports_there = ctx.Pipe()
    stop_here, stop_there = ctx.Pipe()
    server = ctx.Process(
        target=serve, args=(workdir, args.topics, args.groups, ports_there, stop_there), daemon=True
    )
    server.start()
    try:
        if not ports_here.poll(300):
            raise SystemExit("the servers did not start")
        namesrv_port, broker_addr, fixture_s = ports_here.recv()
        namesrv = f"127.0.0.1:{namesrv_port}"
        assert server.pid is not None
        result = asyncio.run(
            measure(namesrv, broker_addr, server.pid, args.topics, args.groups, args.wire_topics)
        )
        result["fixture_s"] = fixture_s
        result["cli_json_s"] = {
            "topicList": cli_seconds(namesrv, "topicList"),
            "consumerProgress": cli_seconds(namesrv, "consumerProgress"),
            "brokerStatus": cli_seconds(namesrv, "brokerStatus"),
            "getAllTopicConfig": cli_seconds(namesrv, "getAllTopicConfig"),
            "start-up alone (topicList --help)": cli_seconds(namesrv, "topicList", "--help"),
        }
        print("cli", result["cli_json_s"], flush=True)
    finally:
        stop_here.send("stop")
        server.join(30)
        if server.is_alive():
            server.kill()
        shutil.rmtree(workdir, ignore_errors=True)
    report = {
        "suite": Path(args.save).stem,
        "command": f"bench/admin_listings.py --topics {args.topics} --groups {args.groups}",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
        "topics": args.topics, "queues_per_topic": QUEUES, "groups": args.groups, "runs": RUNS,
        "target_s": TARGET_S, **result,
    }  # fmt: skip
    Path(args.save).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
