"""Quota accuracy: a produce limit of N msg/s on a topic against 4 producers sending as fast as they
can for 30 s; the rate the producers got acknowledged must be within 5 % of N (target). Also the CPU
per acknowledged message on each side and the flow-control answers the producers waited out.

    .venv/bin/python bench/quota_accuracy.py --rate 5000 --seconds 30 \\
        --save bench/results/quota-accuracy-5000.json

Starts a throwaway `ferrymq dev` (or uses --namesrv), single sends of 1 KiB bodies, 16 in flight per
producer; `uptime` before and after goes in the file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

from ferrymq.bench.client import CpuMeter, cluster
from ferrymq.bench.machine import machine_info
from ferrymq.client import Admin, Message, Producer

TOPIC = "QuotaBench"


async def measure(namesrv: str, broker_pid: int | None, rate: float, seconds: float, producers: int,
                  inflight: int) -> dict:  # fmt: skip
    async with Admin(namesrv) as admin:
        await admin.create_topic(TOPIC, 8)
        await admin.set_quota("produce", f"Topic:{TOPIC}", messages=rate)
    clients = [Producer(f"QuotaBench{i}", namesrv) for i in range(producers)]
    for producer in clients:
        await producer.start()
    body = b"q" * 1024
    acked = [0] * producers
    end = time.monotonic() + seconds

    async def sender(i: int) -> None:
        while time.monotonic() < end:
            await clients[i].send(Message(TOPIC, body))
            if time.monotonic() <= end:
                acked[i] += 1

    cpu = CpuMeter(broker_pid)
    started = time.monotonic()
    await asyncio.gather(*(sender(i) for i in range(producers) for _ in range(inflight)))
    elapsed = min(time.monotonic(), end) - started
    total = sum(acked)
    flow_controlled = sum(p.flow_controlled for p in clients)
    for producer in clients:
        await producer.shutdown()
    achieved = total / elapsed
    return {
        "limit_msgs_per_s": rate,
        "producers": producers,
        "inflight_per_producer": inflight,
        "seconds": round(elapsed, 2),
        "acknowledged": total,
        "per_producer": acked,
        "achieved_msgs_per_s": round(achieved, 1),
        "error_pct": round(100 * (achieved - rate) / rate, 2),
        "flow_control_answers": flow_controlled,
        **cpu.result(total),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=5000)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--inflight", type=int, default=16)
    parser.add_argument("--namesrv")
    parser.add_argument("--save", type=Path)
    args = parser.parse_args()
    before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    with cluster(args.namesrv) as target:
        result = asyncio.run(
            measure(target.namesrv, target.broker_pid, args.rate, args.seconds, args.producers, args.inflight)
        )
    report = {
        "suite": f"quota-accuracy-{args.rate:g}",
        "command": f"bench/quota_accuracy.py --rate {args.rate:g} --seconds {args.seconds:g} "
        f"--producers {args.producers} --inflight {args.inflight}",
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "uptime_before": before,
        "uptime_after": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "target": "achieved rate within 5 % of the limit",
        "met": abs(result["error_pct"]) <= 5,
        **result,
        "machine": machine_info(),
    }
    if args.save:
        args.save.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("achieved_msgs_per_s", "error_pct", "met")}))


if __name__ == "__main__":
    main()
