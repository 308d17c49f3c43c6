"""The official RocketMQ 5.x Python client (rocketmq-python-client 5.1.2, in its own venv) sending
through the gRPC proxy of a throwaway `ferrymq dev`: msg/s, and the CPU per message of the client
process and of the broker process (the proxy runs inside it; its indexer child counted too), both
read from /proc over the same timed sends. The client is the reference cost: a proxy + broker
cheaper per message than the client means the server side is not what limits a 5.x application.

    .venv/bin/python bench/proxy_client.py --runs 3 --count 20000 --save bench/results/proxy-client.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

from tests.compat.venvs import client_venv

from ferrymq.bench.client import CpuMeter, cluster
from ferrymq.bench.machine import machine_info
from ferrymq.client import Message, Producer

HERE = Path(__file__).resolve().parent
SENDER = HERE / "clients" / "rocketmq5_send.py"
CLIENT = ("rocketmq-python-client-5.1.2", ["rocketmq-python-client==5.1.2"])
TIMEOUT_S = 600


async def create_topic(namesrv: str, topic: str) -> None:
    async with Producer("ferrymq-bench", namesrv) as producer:
        await producer.send(Message(topic, b"create"))  # auto-created, 4 queues


def one_run(python: Path, count: int, body_size: int, inflight: int) -> dict:
    topic = f"BenchProxyClient{time.time_ns()}"
    with cluster(None, proxy=True) as target:
        assert target.proxy is not None and target.broker_pid is not None
        asyncio.run(create_topic(target.namesrv, topic))
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        home = Path(f"/tmp/ferrymq-bench-client-{os.getpid()}")
        env["HOME"] = str(home)  # the client writes its logs under ~/logs
        args = [str(python), str(SENDER), target.proxy, topic, str(count), str(body_size), str(inflight)]
        client = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert client.stdin is not None and client.stdout is not None
        try:
            if client.stdout.readline().strip() != "ready":
                raise RuntimeError("the 5.x client did not start")
            load = os.getloadavg()[0]
            meter = CpuMeter(target.broker_pid, client_pid=client.pid)
            client.stdin.write("go\n")
            client.stdin.flush()
            line = client.stdout.readline()
            cpu = meter.result(count)
            client.wait(TIMEOUT_S)
        finally:
            if client.poll() is None:
                client.kill()
                client.wait()
    sent = json.loads(line)
    return {
        "system": "ferrymq",
        "scenario": f"rocketmq-python-client 5.1.2 send_async via proxy, inflight={inflight}",
        "messages": count,
        "failed": sent["failed"],
        "body_bytes": body_size,
        "seconds": round(sent["seconds"], 2),
        "msgs_per_s": round(count / sent["seconds"]),
        "client_us_per_msg": cpu["client_us_per_msg"],
        "proxy_broker_us_per_msg": cpu["broker_us_per_msg"],
        "proxy_broker_over_client": round(cpu["broker_us_per_msg"] / cpu["client_us_per_msg"], 3),
        "client_cpu_pct": cpu["client_cpu_pct"],
        "proxy_broker_cpu_pct": cpu["broker_cpu_pct"],
        "load_average_1m_at_start": round(load, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--body-size", type=int, default=1024)
    parser.add_argument("--inflight", type=int, default=32)
    parser.add_argument("--save")
    args = parser.parse_args()
    python = client_venv(*CLIENT)
    runs = []
    for i in range(args.runs):
        runs.append(one_run(python, args.count, args.body_size, args.inflight))
        print(f"run {i + 1}/{args.runs}: {json.dumps(runs[-1])}", flush=True)
    middle = statistics.median_low(r["proxy_broker_over_client"] for r in runs)
    report = {
        "suite": "proxy-client",
        "command": f".venv/bin/python bench/proxy_client.py --runs {args.runs} --count {args.count} "
        f"--body-size {args.body_size} --inflight {args.inflight}",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
        "median_run": next(r for r in runs if r["proxy_broker_over_client"] == middle),
        "all_runs": runs,
    }
    if args.save:
        Path(args.save).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report["median_run"]))


if __name__ == "__main__":
    main()
