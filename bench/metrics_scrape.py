"""What one /metrics scrape of a large broker costs: a broker in this process with TOPICS topics of
4 queues and GROUPS consumer groups on each (every one with offsets and traffic), its collectors read
and written out as Prometheus text 10 times; CPU milliseconds per scrape, with our writer and with
prometheus-client's generate_latest for comparison.

    .venv/bin/python bench/metrics_scrape.py --topics 500 --groups 4 \\
        --save bench/results/metrics-scrape-500x4.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from prometheus_client import generate_latest

from ferrymq.bench.machine import machine_info
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.server import Broker
from ferrymq.metrics.exposition import render
from ferrymq.metrics.registry import Registry
from ferrymq.metrics.roles import add_broker
from ferrymq.store import StoreConfig

SCRAPES = 10


def cpu_ms(scrape) -> float:
    """The median CPU time of one call of `scrape`, in milliseconds."""
    times = []
    for _ in range(SCRAPES):
        started = time.process_time()
        scrape()
        times.append(1000 * (time.process_time() - started))
    return round(statistics.median(times), 2)


async def measure(topics: int, groups: int, workdir: Path) -> dict:
    store = StoreConfig(store_path_root_dir=workdir, mapped_file_size_commit_log=64 << 20)
    broker = Broker(BrokerConfig(listen_host="127.0.0.1", listen_port=0, ha_listen_port=0, store=store))
    await broker.start()
    try:
        for t in range(topics):
            topic = f"Topic{t}"
            broker.topics.ensure(topic, 4)
            for queue in range(4):
                broker.store.put_message(topic, queue, b"x" * 100)
            broker.puts.stored.add(topic, 4, 4 * 300)
            for g in range(groups):
                group = f"Group{t}-{g}"
                for queue in range(4):
                    broker.offsets.commit(group, topic, queue, 1)
                broker.reads.delivered.add((topic, group), 4, 4 * 300)
        broker.store.dispatch()
        registry = Registry()
        add_broker(registry, broker)
        text = render(registry.collect())
        return {
            "topics": topics,
            "groups_per_topic": groups,
            "lines": text.count(b"\n"),
            "bytes": len(text),
            "collect_ms": cpu_ms(lambda: list(registry.collect())),
            "scrape_ms": cpu_ms(lambda: render(registry.collect())),
            "scrape_ms_with_generate_latest": cpu_ms(lambda: generate_latest(registry)),  # type: ignore[arg-type]
        }
    finally:
        await broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--topics", type=int, default=500)
    parser.add_argument("--groups", type=int, default=4, help="consumer groups per topic")
    parser.add_argument("--save", required=True)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="ferrymq-metrics-scrape-"))
    try:
        result = asyncio.run(measure(args.topics, args.groups, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report = {
        "suite": Path(args.save).stem,
        "command": f"bench/metrics_scrape.py --topics {args.topics} --groups {args.groups}",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
        **result,
    }
    Path(args.save).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
