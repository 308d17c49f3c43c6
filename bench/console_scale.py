"""The console at scale: how fast its API and pages answer over a cluster of TOPICS topics and
GROUPS consumer groups (each group with a committed offset and a backlog on a topic of its own).

A NameServer, BROKERS brokers (each a cluster of its own, holding an equal share of the topics:
a broker keeps two files open per queue, and this machine allows 20,000 open files a process) and
the console run as `ferrymq namesrv`, `ferrymq broker` and `ferrymq console`, each its own process.
The fixture is made through the admin calls brokers answer today: topics created with
UPDATE_AND_CREATE_TOPIC, PARALLEL requests in flight; one message sent to each group's topic and an
offset committed for each group (a broker saves its topic table on every creation, so creating
topics gets slower as they add up: the time is reported). Then every API path is asked REQUESTS
times in a row (most answers from the console's 5-second tables) and COLD times after those tables
expired; with --browser the topics, groups and dashboard pages are also opened in headless Chromium
and timed until drawn.

    .venv/bin/python bench/console_scale.py --topics 10000 --groups 1000 --browser \\
        --save bench/results/console-scale.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp

from ferrymq.bench.machine import machine_info
from ferrymq.bench.processes import Proc, free_port
from ferrymq.client import Admin, ClientInstance, Message, Producer
from ferrymq.client.pull import commit_offset
from ferrymq.console.cluster import FRESH_S

PARALLEL = 8  # creations in flight: the broker handles them one after another
REQUESTS = 30
COLD = 3


async def bounded(calls, parallel: int = PARALLEL) -> None:
    gate = asyncio.Semaphore(parallel)

    async def one(call):
        async with gate:
            await call

    await asyncio.gather(*(one(c) for c in calls))


async def make_fixture(namesrv: str, topics: int, groups: int, brokers: int) -> dict:
    """Topics T0..T{topics-1} of one queue, Ti on cluster C{i % brokers}; groups G0.. each with one
    message of backlog on T{i}."""
    started = time.monotonic()
    instance = ClientInstance(namesrv, request_timeout=30)  # creations queue behind each other
    async with Admin(namesrv, instance=instance) as admin:
        for first in range(0, topics, 1000):
            await bounded(admin.create_topic(f"T{i}", 1, cluster=f"C{i % brokers}")
                          for i in range(first, min(topics, first + 1000)))  # fmt: skip
            print(f"{min(topics, first + 1000)} topics after {time.monotonic() - started:.0f} s", flush=True)
        created = time.monotonic() - started
        producer = Producer("BenchProducer", namesrv, instance=admin.instance)
        await producer.start()
        await bounded(producer.send(Message(f"T{i}", b"backlog")) for i in range(groups))
        for i in range(groups):
            route = await admin.instance.existing_route(f"T{i}")
            assert route is not None
            mq = route.read_queues[0]
            await commit_offset(admin.instance, route.masters[mq.broker_name], mq, f"G{i}", 0)
        await producer.shutdown()
    await instance.close()
    return {"topics_created_s": round(created, 1), "fixture_s": round(time.monotonic() - started, 1)}


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 1)


async def time_get(session: aiohttp.ClientSession, url: str) -> tuple[float, int]:
    started = time.perf_counter()
    async with session.get(url) as response:
        size = len(await response.read())
        assert response.status == 200, (url, response.status)
    return 1000 * (time.perf_counter() - started), size


async def measure_api(base: str, paths: list[str]) -> dict:
    results = {}
    async with aiohttp.ClientSession() as session:
        for path in paths:
            warm = [(await time_get(session, base + path))[0] for _ in range(REQUESTS)]
            cold = []
            for _ in range(COLD):
                await asyncio.sleep(FRESH_S + 0.5)
                ms, size = await time_get(session, base + path)
                cold.append(ms)
            every = warm + cold
            results[path] = {"p50_ms": percentile(every, 0.5), "p95_ms": percentile(every, 0.95),
                             "max_ms": round(max(every), 1), "cold_ms": [round(c, 1) for c in cold],
                             "bytes": size}  # fmt: skip
            print(f"{path:<28} p50 {results[path]['p50_ms']:7.1f} ms  p95 {results[path]['p95_ms']:7.1f} ms  "
                  f"cold {results[path]['cold_ms']}  {size:,} bytes")  # fmt: skip
    return results


async def measure_pages(base: str) -> dict:
    """Milliseconds from opening a page to its table drawn, in headless Chromium (5 times each)."""
    from playwright.async_api import async_playwright

    from ferrymq.bench.debian import installed

    pages = {"#/topics": "#topics tbody tr", "#/groups": "#groups tbody tr", "#/dashboard": "#charts svg"}
    results = {}
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=installed("chromium", "chromium"))
        page = await browser.new_page()
        for hash_, selector in pages.items():
            times = []
            for _ in range(5):
                await page.goto(base + "/#/cluster")
                await page.wait_for_selector("#brokers")
                started = time.perf_counter()
                await page.goto(base + "/" + hash_)
                await page.wait_for_selector(selector, timeout=30_000)
                times.append(1000 * (time.perf_counter() - started))
                await asyncio.sleep(FRESH_S / 2)
            results[hash_] = {"median_ms": round(statistics.median(times), 1), "max_ms": round(max(times), 1)}
            print(f"page {hash_:<12} {results[hash_]}")
        await browser.close()
    return results


async def run(args: argparse.Namespace, workdir: Path) -> dict:
    namesrv_port, console_port = free_port(), free_port()
    namesrv = f"127.0.0.1:{namesrv_port}"
    quiet = ["--metrics-port", "-1"]
    procs = [Proc("namesrv", ["namesrv", "--listen", namesrv, *quiet], workdir, {}, [])]
    for b in range(args.brokers):
        listen = f"127.0.0.1:{free_port()}"
        procs.append(Proc(f"broker{b}", ["broker", "--namesrv", namesrv, "--listen", listen, "--ha-port", "0",
                                         "--store-dir", str(workdir / f"store{b}"), "--cluster", f"C{b}",
                                         "--name", f"broker-{b}", *quiet], workdir, {}, []))  # fmt: skip
    console = Proc("console", ["console", "--namesrv", namesrv, "--port", str(console_port)], workdir, {}, [])
    try:
        for proc, line in [(procs[0], "NameServer listening"), *((p, "listening on") for p in procs[1:])]:
            proc.start()
            await proc.wait_for_line(line, 60)
        console.start()
        await console.wait_for_line("Console on", 30)
        fixture = await make_fixture(namesrv, args.topics, args.groups, args.brokers)
        print(f"fixture: {fixture}")
        base = f"http://127.0.0.1:{console_port}"
        paths = ["/", "/static/console.js", "/api/topics", "/api/groups", "/api/dashboard", "/api/cluster",
                 f"/api/topics/T{args.topics // 2}", "/api/groups/G1",
                 "/api/messages?topic=T1&key=none"]  # fmt: skip
        cpu_before = _cpu_s(console.pid)
        api = await measure_api(base, paths)
        console_cpu = _cpu_s(console.pid) - cpu_before
        pages = await measure_pages(base) if args.browser else {}
        rss = {p.name: _rss_mib(p.pid) for p in [*procs, console]}
    finally:
        console.stop()
        for proc in reversed(procs):
            proc.stop(60)
    return {"topics": args.topics, "groups": args.groups, "brokers": args.brokers, **fixture, "api": api,
            "pages": pages, "console_cpu_s_during_api": round(console_cpu, 1), "rss_mib": rss}  # fmt: skip


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"VmRSS:\s+(\d+) kB", status)
    return round(int(found.group(1)) / 1024, 1) if found else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--groups", type=int, default=1_000)
    parser.add_argument("--brokers", type=int, default=2, help="broker processes sharing the topics")
    parser.add_argument("--browser", action="store_true", help="also time pages in headless Chromium")
    parser.add_argument("--save", type=Path)
    args = parser.parse_args()
    if args.groups > args.topics:
        parser.error("--groups must not exceed --topics (each group has a topic of its own)")
    # Brokers hold two files open per queue (RocketMQ's docs ask for a nofile limit of 655350): the
    # processes started here inherit the highest limit this one may set.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with tempfile.TemporaryDirectory(prefix="console-bench-") as tmp:
        result = asyncio.run(run(args, Path(tmp)))
    result["machine"] = machine_info()
    result["date"] = time.strftime("%Y-%m-%d")
    if args.save:
        args.save.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
