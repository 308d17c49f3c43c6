"""Idle AMQP connections: how much memory and CPU the gateway spends on connections that only
exchange heartbeats. Opens N connections (PLAIN guest, vhost "/", heartbeat agreed at --heartbeat s,
answered by the clients), holds them --seconds, and reads the server's RSS and CPU from /proc.
RabbitMQ is measured the same way for reference.

    .venv/bin/python bench/amqp_idle.py [--connections 5000] [--heartbeat 10] [--seconds 30] [--save FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from pamqp import commands, frame, heartbeat

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "peers"))
import common  # noqa: E402

from amqp_gateway import start_gateway  # noqa: E402

HEADER = b"AMQP\x00\x00\x09\x01"
HEARTBEAT = frame.marshal(heartbeat.Heartbeat(), 0)
OPEN_AT_ONCE = 200  # handshakes in flight at a time


async def next_frame(reader: asyncio.StreamReader):
    head = await reader.readexactly(7)
    rest = await reader.readexactly(int.from_bytes(head[3:7], "big") + 1)
    return frame.unmarshal(head + rest)[2]


async def hold(
    port: int, beat: int, opening: asyncio.Semaphore, opened: list[int], stop: asyncio.Event
) -> None:
    """One connection: handshake (counted in `opened`), then answer heartbeats until `stop`."""
    async with opening:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(HEADER)
        await next_frame(reader)  # start
        writer.write(
            frame.marshal(commands.Connection.StartOk(mechanism="PLAIN", response="\0guest\0guest"), 0)
        )
        await next_frame(reader)  # tune
        writer.write(frame.marshal(commands.Connection.TuneOk(2047, 131072, beat), 0))
        writer.write(frame.marshal(commands.Connection.Open("/"), 0))
        await next_frame(reader)  # open-ok
        opened[0] += 1

    async def beats() -> None:
        while True:
            await asyncio.sleep(beat / 2)
            writer.write(HEARTBEAT)

    sending = asyncio.create_task(beats())
    reading = asyncio.create_task(reader.read(1 << 20))  # heartbeats come in; nothing else should
    while not stop.is_set():
        done, _ = await asyncio.wait(
            [reading, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED
        )
        if reading in done:
            if not reading.result():
                raise ConnectionError("the server closed an idle connection")
            reading = asyncio.create_task(reader.read(1 << 20))
    sending.cancel()
    reading.cancel()
    writer.close()


def rss_kib(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total


async def measure(port: int, pids: list[int], connections: int, beat: int, seconds: float) -> dict:
    before = rss_kib(pids)
    stop, opening, opened = asyncio.Event(), asyncio.Semaphore(OPEN_AT_ONCE), [0]
    started = time.monotonic()
    holders = [asyncio.create_task(hold(port, beat, opening, opened, stop)) for _ in range(connections)]
    while opened[0] < connections:
        failed = [t for t in holders if t.done()]
        if failed:
            stop.set()
            raise SystemExit(f"{len(failed)} connections failed: {failed[0].exception()!r}")
        await asyncio.sleep(0.1)
    open_seconds = time.monotonic() - started
    cpu_start = sum(common.cpu_seconds(p) or 0.0 for p in pids)
    await asyncio.sleep(seconds)
    cpu = sum(common.cpu_seconds(p) or 0.0 for p in pids) - cpu_start
    after = rss_kib(pids)
    failed = [t for t in holders if t.done()]
    stop.set()
    await asyncio.gather(*holders, return_exceptions=True)
    return {
        "connections": connections,
        "opened_in_s": round(open_seconds, 1),
        "dropped_while_idle": len(failed),
        "rss_before_mib": round(before / 1024, 1),
        "rss_after_mib": round(after / 1024, 1),
        "kib_per_connection": round((after - before) / connections, 1),
        "idle_cpu_pct": round(cpu / seconds * 100, 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--connections", type=int, default=5000)
    p.add_argument("--heartbeat", type=int, default=10)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--port", type=int, default=25675)
    p.add_argument(
        "--rabbitmq-connections", type=int, default=1000,
        help="connections opened to the machine's RabbitMQ for reference (5,000 took its node down here)",
    )  # fmt: skip
    p.add_argument("--skip-rabbitmq", action="store_true")
    p.add_argument("--save", type=Path)
    args = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, args.connections + 1000)), hard))
    result: dict = {"date": time.strftime("%Y-%m-%d %H:%M"), "heartbeat_s": args.heartbeat}
    with tempfile.TemporaryDirectory() as tmp:
        gateway = start_gateway(Path(tmp) / "data", args.port)
        try:
            result["ferrymq"] = asyncio.run(
                measure(args.port, [gateway.pid], args.connections, args.heartbeat, args.seconds)
            )
        finally:
            gateway.terminate()
            gateway.wait(30)
    if not args.skip_rabbitmq:
        rabbit = common.find_pids("beam.smp", "rabbit")
        result["rabbitmq"] = asyncio.run(
            measure(5672, rabbit, args.connections, args.heartbeat, args.seconds)
        )
    result["load_avg"] = os.getloadavg()
    print(json.dumps(result, indent=1))
    if args.save:
        args.save.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
