"""What Prometheus scraping costs produce throughput: `ferrymq bench produce` runs against one
`ferrymq dev` cluster (NameServer and broker in one process, one metrics endpoint for both), with
and without a real Prometheus scraping that endpoint every second, alternated run by run so both
see the same machine; the median of each (the target: at most 3 % of the throughput). Prometheus
runs throughout and is told by a configuration reload to scrape the cluster or nothing, so the two
sides differ only in the scraping.

    .venv/bin/python bench/metrics_cost.py --pairs 10 --save bench/results/metrics-scrape-cost.json -- \\
        produce --count 300000 --batch 32 --inflight 8

The broker's CPU (with its indexer process) and Prometheus's own CPU are measured from /proc over
each run; both per message sit beside the rates. At the end, 300 scrapes in a row measure the broker
CPU one scrape takes, a figure other load on the machine does not blur.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ferrymq.bench.client import CpuMeter
from ferrymq.bench.machine import machine_info
from ferrymq.bench.processes import free_ports
from ferrymq.bench.prometheus import Prometheus
from repeat import parse_args, run_once


@contextmanager
def dev_cluster(workdir: Path) -> Iterator[tuple[str, int, int]]:
    """A `ferrymq dev` (NameServer and broker, no proxy or gateway) on free ports: (NameServer
    address, its pid, its metrics port)."""
    namesrv_port, broker_port, metrics_port = free_ports(3)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ferrymq", "dev", "--data-dir", str(workdir / "data"),
         "--namesrv-port", str(namesrv_port), "--broker-port", str(broker_port), "--proxy-port", "-1",
         "--amqp-port", "-1", "--console-port", "-1", "--metrics-port", str(metrics_port)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        banner = ""
        while "Press Ctrl-C" not in banner:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"ferrymq dev did not start: {banner}")
            banner += line
        found = re.search(r"NameServer\s+(\S+)", banner)
        assert found, banner
        yield found.group(1), proc.pid, metrics_port
    finally:
        proc.terminate()
        proc.wait(60)


def cpu_ms_per_scrape(pid: int, metrics_port: int, scrapes: int = 300) -> float:
    """Broker CPU milliseconds one /metrics scrape takes (the process is otherwise idle)."""
    meter = CpuMeter(pid)
    for _ in range(scrapes):
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as answer:
            answer.read()
    return round(meter.result(scrapes)["broker_us_per_msg"] / 1000, 3)


def one_run(bench_args: list[str], namesrv: str, pid: int, prometheus: Prometheus) -> dict:
    meter = CpuMeter(pid, prometheus.process.pid)
    result = run_once([*bench_args, "--namesrv", namesrv])
    cpu = meter.result(result["messages"])
    result["broker_us_per_msg"] = cpu["broker_us_per_msg"]
    result["prometheus_us_per_msg"] = cpu["client_us_per_msg"]
    return result


def main() -> None:
    args, bench_args = parse_args(__doc__, "pairs", 5)
    runs: dict[str, list[dict]] = {"unscraped": [], "scraped": []}
    workdir = Path(tempfile.mkdtemp(prefix="ferrymq-metrics-cost-"))
    try:
        with dev_cluster(workdir) as (namesrv, pid, metrics_port):
            prometheus = Prometheus(workdir / "prometheus", [])
            try:
                prometheus.wait_ready()
                for i in range(args.pairs):
                    order = ("unscraped", "scraped") if i % 2 == 0 else ("scraped", "unscraped")
                    for name in order:
                        prometheus.retarget([f"127.0.0.1:{metrics_port}"] if name == "scraped" else [])
                        runs[name].append(one_run(bench_args, namesrv, pid, prometheus))
                        print(
                            f"pair {i + 1}/{args.pairs} {name}: {json.dumps(runs[name][-1])}", file=sys.stderr
                        )
            finally:
                prometheus.stop()
            per_scrape = cpu_ms_per_scrape(pid, metrics_port)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    keys = ("msgs_per_s", "client_us_per_msg", "broker_us_per_msg", "prometheus_us_per_msg")
    median = {name: {k: statistics.median(r[k] for r in rs) for k in keys} for name, rs in runs.items()}
    loads = [r["load_average_1m_at_start"] for rs in runs.values() for r in rs]
    report = {
        "suite": Path(args.save).stem,
        "command": "./run bench " + " ".join(bench_args) + " --namesrv <one ferrymq dev>, "
        "alternately with and without Prometheus scraping its /metrics every 1 s",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
        "load_average_1m_at_start": {
            "min": min(loads),
            "median": statistics.median(loads),
            "max": max(loads),
        },
        "median": median,
        "broker_cpu_ms_per_scrape": per_scrape,
        "scrape_cost_pct": round(
            100 * (1 - median["scraped"]["msgs_per_s"] / median["unscraped"]["msgs_per_s"]), 1
        ),
        "runs": runs,
    }
    Path(args.save).write_text(json.dumps(report, indent=1) + "\n")
    shown = ("median", "broker_cpu_ms_per_scrape", "scrape_cost_pct", "load_average_1m_at_start")
    print(json.dumps({k: report[k] for k in shown}))


if __name__ == "__main__":
    main()
