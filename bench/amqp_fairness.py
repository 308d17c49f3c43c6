"""Push fairness of the AMQP gateway: many cold queues, each with a consumer receiving about one
message a second, beside one hot queue published and consumed as fast as the clients go. The figure
is the publish-to-delivery latency on the cold queues (p50, p99), which a hot queue must not delay.
RabbitMQ runs the same scenario for reference.

    .venv/bin/python bench/amqp_fairness.py [--queues 2000] [--seconds 20] [--save FILE]

Roles run as separate processes (aio-pika in the project's venv), as separate applications would:
one consumes every cold queue and measures, one consumes the hot queue, one publishes to the cold
queues in turn, one floods the hot queue.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aio_pika

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from amqp_gateway import start_gateway  # noqa: E402

sys.path.insert(0, str(HERE / "peers"))
import common  # noqa: E402

WARM_UP_S = 2.0
STAMP = struct.Struct(">d")  # send time (time.time()) at the start of each body
COLD, HOT = "fair-cold-{}", "fair-hot"


async def ready_then_go() -> None:
    """Say "ready", then wait for "go" on stdin: every role's clock starts when all are set up (the
    hot consumer is ready in a moment, the cold one after declaring every queue)."""
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)


async def consume_cold(url: str, queues: int, seconds: float) -> dict:
    """Consume every cold queue; latencies of what was sent after the first WARM_UP_S (each queue's
    first message sets up its consumer group on the way)."""
    connection = await aio_pika.connect_robust(url)
    latencies: list[float] = []
    channels = [await connection.channel() for _ in range(max(1, queues // 500))]
    for channel in channels:
        await channel.set_qos(prefetch_count=10)
    measured_from = time.time() + 1e9

    async def on_cold(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        sent = STAMP.unpack_from(message.body)[0]
        if sent >= measured_from:
            latencies.append(time.time() - sent)
        await message.ack()

    for i in range(queues):
        queue = await channels[i % len(channels)].declare_queue(COLD.format(i))
        await queue.consume(on_cold)
    await ready_then_go()
    measured_from = time.time() + WARM_UP_S
    await asyncio.sleep(seconds)
    await connection.close()
    latencies.sort()
    pick = lambda q: round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000, 1)  # noqa: E731
    return {
        "cold_measured": len(latencies),
        "cold_p50_ms": pick(0.5) if latencies else None,
        "cold_p99_ms": pick(0.99) if latencies else None,
        "cold_max_ms": round(latencies[-1] * 1000, 1) if latencies else None,
    }


async def consume_hot(url: str, seconds: float) -> dict:
    """The hot queue's consumer: another application, on its own connection."""
    connection = await aio_pika.connect_robust(url)
    channel = await connection.channel()
    await channel.set_qos(prefetch_count=200)
    received = 0

    async def on_hot(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        nonlocal received
        received += 1
        await message.ack()

    await (await channel.declare_queue(HOT)).consume(on_hot)
    await ready_then_go()
    await asyncio.sleep(seconds)
    await connection.close()
    return {"hot_received_per_s": round(received / seconds)}


async def publish_cold(url: str, queues: int, seconds: float) -> dict:
    """Each cold queue once a second, spread evenly over the second."""
    connection = await aio_pika.connect_robust(url)
    channel = await connection.channel(publisher_confirms=False)
    sent, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        due = started + sent / queues
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        body = STAMP.pack(time.time()) + b"x" * 92
        await channel.default_exchange.publish(aio_pika.Message(body), COLD.format(sent % queues))
        sent += 1
    await connection.close()
    return {"cold_sent": sent}


async def publish_hot(url: str, seconds: float) -> dict:
    connection = await aio_pika.connect_robust(url)
    channel = await connection.channel(publisher_confirms=True)
    sent, started, window = 0, time.monotonic(), []
    while time.monotonic() - started < seconds:
        window.append(channel.default_exchange.publish(aio_pika.Message(b"h" * 100), HOT))
        sent += 1
        if len(window) >= 200:
            await asyncio.gather(*window)
            window.clear()
    await asyncio.gather(*window)
    await connection.close()
    return {"hot_sent_per_s": round(sent / seconds)}


def scenario(url: str, queues: int, seconds: float, server_pids: list[int], hot: bool = True) -> dict:
    """The roles against one server (without the hot queue's unless `hot`); the consumer's figures
    with the publishers', the machine's load and the server's CPU per message sent (over the time
    every role runs)."""
    me = [sys.executable, __file__]
    load_before = os.getloadavg()[0]
    consumers = [
        subprocess.Popen(
            [*me, role, url, str(queues), str(seconds + 4)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for role in ("consume-cold", "consume-hot")[: 2 if hot else 1]
    ]
    for consumer in consumers:
        assert consumer.stdout is not None
        if consumer.stdout.readline().strip() != "ready":
            raise SystemExit("a consumer did not get ready")
    cpu_before = sum(common.cpu_seconds(p) or 0.0 for p in server_pids)
    for consumer in consumers:
        assert consumer.stdin is not None
        consumer.stdin.write("go\n")
        consumer.stdin.flush()
    publishers = [
        subprocess.Popen([*me, role, url, str(queues), str(seconds)], stdout=subprocess.PIPE, text=True)
        for role in ("publish-cold", "publish-hot")[: 2 if hot else 1]
    ]
    result: dict = {}
    for proc in [*publishers, *consumers]:
        out, _ = proc.communicate(timeout=seconds + 120)
        result.update(json.loads(out.strip().splitlines()[-1]))
    cpu = sum(common.cpu_seconds(p) or 0.0 for p in server_pids) - cpu_before
    sent = result["cold_sent"] + result.get("hot_sent_per_s", 0) * seconds
    result |= {"server_cpu_s": round(cpu, 1), "server_us_per_msg_sent": round(cpu / sent * 1e6, 1),
               "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}  # fmt: skip
    return result


def role(name: str, url: str, queues: int, seconds: float) -> None:
    if name == "consume-cold":
        found = asyncio.run(consume_cold(url, queues, seconds))
    elif name == "consume-hot":
        found = asyncio.run(consume_hot(url, seconds))
    elif name == "publish-cold":
        found = asyncio.run(publish_cold(url, queues, seconds))
    else:
        found = asyncio.run(publish_hot(url, seconds))
    print(json.dumps(found), flush=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("consume-cold", "consume-hot", "publish-cold", "publish-hot"):
        role(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queues", type=int, default=2000)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--port", type=int, default=25674)
    p.add_argument("--skip-rabbitmq", action="store_true")
    p.add_argument("--cold-only", action="store_true", help="no hot queue: the cold queues' cost alone")
    p.add_argument("--save", type=Path)
    args = p.parse_args()
    result: dict = {"date": time.strftime("%Y-%m-%d %H:%M"), "queues": args.queues, "seconds": args.seconds,
                    "hot": not args.cold_only}  # fmt: skip
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # (a stopping gateway writes)
        gateway = start_gateway(Path(tmp) / "data", args.port)
        try:
            result["ferrymq"] = scenario(
                f"amqp://guest:guest@127.0.0.1:{args.port}/", args.queues, args.seconds, [gateway.pid],
                not args.cold_only,
            )  # fmt: skip
        finally:
            gateway.terminate()
            try:
                gateway.wait(30)
            except subprocess.TimeoutExpired:  # the figures stand; a slow stop is noted beside them
                gateway.kill()
                gateway.wait(30)
                result["gateway_killed_after_s"] = 30
    if not args.skip_rabbitmq:
        result["rabbitmq"] = scenario(
            "amqp://guest:guest@127.0.0.1:5672/", args.queues, args.seconds,
            common.find_pids("beam.smp", "rabbit"), not args.cold_only,
        )  # fmt: skip
        cleanup_rabbitmq(args.queues)
    result["load_avg"] = os.getloadavg()
    print(json.dumps(result, indent=1))
    if args.save:
        args.save.write_text(json.dumps(result, indent=1) + "\n")


def cleanup_rabbitmq(queues: int) -> None:
    async def delete() -> None:
        connection = await aio_pika.connect("amqp://guest:guest@127.0.0.1:5672/")
        channel = await connection.channel()
        for name in [HOT, *(COLD.format(i) for i in range(queues))]:
            await channel.queue_delete(name)
        await connection.close()

    asyncio.run(delete())


if __name__ == "__main__":
    main()
