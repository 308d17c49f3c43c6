"""Draining a live RabbitMQ into the gateway, against consuming the same backlog from RabbitMQ directly.

    python bench/migrate_drain.py [--messages 1000000] [--size 100] [--prefetch N] [--lanes N] [--direct]
                                  [--runs 1] [--aio-pika-sample 200000] [--save FILE.json]

Each run fills one RabbitMQ queue (127.0.0.1:5672, guest) with --messages bodies of --size bytes
(pipelined publisher confirms), then (a) consumes them from RabbitMQ with the migrator's own AMQP
client (manual acks, one multiple ack per read, the same prefetch), refills, and (b) drains them with
`ferrymq migrate`'s drainer into the gateway of a `ferrymq dev` started here (the migrator's defaults
unless --prefetch and --lanes say otherwise; --direct stores straight into the brokers, as
`ferrymq migrate rabbitmq --namesrv` does); runs alternate which of (a) and (b) goes first. Rates
are msg/s from the first message to the last acknowledgement; CPU per message is read from /proc for
RabbitMQ's beam.smp, the `ferrymq dev` process (broker + gateway) and this process (the client or the
migrator). Zero lost means the gateway's queue then holds exactly --messages. For context, aio-pika
(what applications use, an ack per message) consumes --aio-pika-sample of them too. Everything made
is deleted afterwards."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from pamqp import commands

from ferrymq.bench.machine import machine_info
from ferrymq.bench.processes import free_port
from ferrymq.migrate.drain import DrainOptions, QueueProgress
from ferrymq.migrate.runner import drain_queues
from ferrymq.migrate.store import BrokerAccess
from ferrymq.migrate.wire import Channel, Connection
from ferrymq.protocol.amqp import fast
from ferrymq.protocol.amqp.methods import encode_method

RABBITMQ = "amqp://guest:guest@127.0.0.1:5672/"
FILL_WINDOW = 20_000  # publishes awaiting their confirm while filling
TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def beam_pid() -> int:
    found = subprocess.run(["pgrep", "-f", "beam.smp"], capture_output=True, text=True).stdout.split()
    if not found:
        sys.exit("no RabbitMQ (beam.smp) running on this machine")
    return int(found[0])


async def fill(queue: str, count: int, size: int) -> float:
    """Publish `count` bodies of `size` bytes with confirms (a window of FILL_WINDOW); msg/s."""
    connection = await Connection.open(RABBITMQ, "bench fill")
    channel = await connection.channel()
    await channel.call(commands.Queue.Declare(queue=queue, durable=True))
    await channel.call(commands.Confirm.Select())
    confirmed, caught_up = 0, asyncio.Event()

    def on_confirm(tag: int, multiple: bool, ok: bool) -> None:
        nonlocal confirmed
        if not ok:
            raise SystemExit("RabbitMQ refused a publish while filling")
        confirmed = max(confirmed, tag)
        caught_up.set()

    channel.on_confirm = on_confirm
    publish = encode_method(channel.number, commands.Basic.Publish(exchange="", routing_key=queue))
    one = publish + fast.encode_content(channel.number, b"\x00\x00", b"x" * size, connection.frame_max)
    started, sent = time.monotonic(), 0
    while confirmed < count:
        while sent < count and sent - confirmed < FILL_WINDOW:
            batch = min(1000, count - sent)
            connection.write(one * batch)
            sent += batch
        caught_up.clear()
        await caught_up.wait()
    elapsed = time.monotonic() - started
    await connection.close()
    return count / elapsed


async def consume_direct(queue: str, count: int, prefetch: int) -> float:
    """Consume `count` messages from RabbitMQ with manual acks (a multiple ack per read); seconds."""
    connection = await Connection.open(RABBITMQ, "bench consume")
    channel: Channel = await connection.channel()
    await channel.call(commands.Basic.Qos(prefetch_count=prefetch))
    received, last, done = 0, 0, asyncio.get_running_loop().create_future()

    def on_deliver(tag: int, _redelivered: bool, _properties: bytes, _body: bytes) -> None:
        nonlocal received, last
        received += 1
        last = tag

    def ack() -> None:
        nonlocal last
        if last:
            connection.write(fast.encode_ack(channel.number, fast.Ack(last, True)))
            last = 0
        if received >= count and not done.done():
            done.set_result(time.monotonic())

    channel.on_deliver = on_deliver
    connection.after_read.append(ack)
    started = time.monotonic()
    await channel.call(commands.Basic.Consume(queue=queue, consumer_tag="bench"))
    finished = await done
    await connection.close()
    return finished - started


async def consume_aio_pika(queue: str, count: int, prefetch: int) -> float:
    """For context: how fast a usual application client (aio-pika, an ack per message) consumes."""
    import aio_pika

    connection = await aio_pika.connect(RABBITMQ)
    channel = await connection.channel()
    await channel.set_qos(prefetch_count=prefetch)
    source = await channel.get_queue(queue, ensure=True)
    received, done = 0, asyncio.get_running_loop().create_future()

    async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        nonlocal received
        await message.ack()
        received += 1
        if received >= count and not done.done():
            done.set_result(time.monotonic())

    started = time.monotonic()
    await source.consume(on_message)
    finished = await done
    await connection.close()
    return finished - started


async def drain(
    queue: str, gateway: str, count: int, options: DrainOptions, brokers: BrokerAccess | None
) -> tuple[float, QueueProgress]:
    """The migrator's drain of `queue`; seconds from the start to the last upstream ack."""

    class Watch:
        def __init__(self) -> None:
            self.queues: list[QueueProgress] = []
            self.reached: float | None = None

        def refresh(self) -> None:
            pass

    watch = Watch()

    async def until_moved() -> None:
        while not watch.queues or watch.queues[0].drained < count:
            await asyncio.sleep(0.005)
        watch.reached = time.monotonic()

    watcher = asyncio.ensure_future(until_moved())
    started = time.monotonic()
    outcome = await drain_queues(
        RABBITMQ,
        gateway,
        [queue],
        options,
        1,
        watch,  # type: ignore[arg-type]
        brokers,
    )
    watcher.cancel()
    return (watch.reached or time.monotonic()) - started, outcome[0]


async def declare_in_gateway(gateway: str, queue: str, delete: bool = False) -> int:
    """Declare the queue in the gateway (or delete it); its message count."""
    connection = await Connection.open(gateway, "bench gateway")
    channel = await connection.channel()
    if delete:
        await channel.call(commands.Queue.Delete(queue=queue))
        await connection.close()
        return 0
    ok = await channel.call(commands.Queue.Declare(queue=queue, durable=True))
    await connection.close()
    assert isinstance(ok, commands.Queue.DeclareOk)
    return ok.message_count or 0


async def delete_source(queue: str) -> None:
    connection = await Connection.open(RABBITMQ, "bench cleanup")
    await (await connection.channel()).call(commands.Queue.Delete(queue=queue))
    await connection.close()


def measured(label: str, pids: dict[str, int], count: int, seconds: float, before: dict[str, float]) -> dict:
    row: dict = {
        "phase": label,
        "messages": count,
        "seconds": round(seconds, 3),
        "msg_per_s": round(count / seconds),
    }
    for name, pid in pids.items():
        used = (own_cpu() if pid == 0 else cpu_of(pid)) - before[name]
        row[f"{name}_us_per_msg"] = round(used * 1e6 / count, 2)
    return row


def cpu_now(pids: dict[str, int]) -> dict[str, float]:
    return {name: own_cpu() if pid == 0 else cpu_of(pid) for name, pid in pids.items()}


async def one_run(
    args, gateway: str, dev_pid: int, options: DrainOptions, brokers: BrokerAccess | None, drain_first: bool
) -> dict:
    queue = f"bench-migrate-{uuid.uuid4().hex[:8]}"
    beam = beam_pid()
    try:
        fill_rate = 0.0

        async def consumed() -> dict:
            nonlocal fill_rate
            fill_rate = await fill(queue, args.messages, args.size)
            pids = {"rabbitmq": beam, "client": 0}
            before = cpu_now(pids)
            seconds = await consume_direct(queue, args.messages, args.prefetch)
            return measured("consume from RabbitMQ", pids, args.messages, seconds, before)

        async def drained() -> dict:
            await fill(queue, args.messages, args.size)
            await declare_in_gateway(gateway, queue)
            pids = {"rabbitmq": beam, "migrator": 0, "gateway": dev_pid}
            before = cpu_now(pids)
            seconds, progress = await drain(queue, gateway, args.messages, options, brokers)
            moved = measured("drain into the gateway", pids, args.messages, seconds, before)
            in_gateway = await declare_in_gateway(gateway, queue)
            moved.update(state=progress.state, in_gateway=in_gateway, lost=args.messages - in_gateway,
                         redelivered=progress.redelivered, load_1m=os.getloadavg()[0])  # fmt: skip
            return moved

        if drain_first:  # runs alternate which goes first, so that neither always meets the same load
            moved = await drained()
            direct = await consumed()
        else:
            direct = await consumed()
            moved = await drained()
        direct["load_1m"] = os.getloadavg()[0]
        context = None
        if args.aio_pika_sample:
            await fill(queue, args.aio_pika_sample, args.size)
            pids = {"rabbitmq": beam, "client": 0}
            before = cpu_now(pids)
            seconds = await consume_aio_pika(queue, args.aio_pika_sample, args.prefetch)
            context = measured("aio-pika consume from RabbitMQ", pids, args.aio_pika_sample, seconds, before)
        ratio = round(moved["msg_per_s"] / direct["msg_per_s"], 3)
        run = {"fill_msg_per_s": round(fill_rate), "direct": direct, "drain": moved, "ratio": ratio,
               "drain_first": drain_first, "aio_pika_context": context}  # fmt: skip
        print(json.dumps(run), flush=True)
        return run
    finally:
        await delete_source(queue)
        await declare_in_gateway(gateway, queue, delete=True)


def start_dev(where: Path) -> tuple[subprocess.Popen, str, BrokerAccess]:
    port = free_port()
    argv = [sys.executable, "-m", "ferrymq", "dev", "--data-dir", str(where / "data"), "--namesrv-port", "0",
            "--broker-port", "0", "--proxy-port", "-1", "--console-port", "-1",
            "--amqp-port", str(port)]  # fmt: skip
    log = (where / "dev.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while b"ferrymq dev is running" not in (where / "dev.log").read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            sys.exit("ferrymq dev did not start:\n" + (where / "dev.log").read_text()[-3000:])
        time.sleep(0.1)
    namesrv = re.search(rb"NameServer\s+(\S+)", (where / "dev.log").read_bytes())
    assert namesrv is not None, "ferrymq dev did not say where its NameServer is"
    meta = f"sqlite:///{(where / 'data' / 'meta' / 'meta.db').resolve()}"
    return proc, f"amqp://guest:guest@127.0.0.1:{port}/", BrokerAccess(namesrv[1].decode(), None, meta)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    defaults = DrainOptions()
    parser.add_argument("--prefetch", type=int, default=defaults.prefetch, help="the migrator's default")
    parser.add_argument("--lanes", type=int, default=defaults.lanes, help="the migrator's gateway channels")
    parser.add_argument(
        "--direct", action="store_true", help="store straight into the brokers (migrate's --namesrv)"
    )
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--aio-pika-sample", type=int, default=200_000, help="0: skip the aio-pika context")
    parser.add_argument("--save", type=Path)
    args = parser.parse_args()
    where = Path(tempfile.mkdtemp(prefix="migrate-drain-"))
    dev, gateway, access = start_dev(where)
    load_before = os.getloadavg()[0]
    runs = []
    try:
        options = DrainOptions(prefetch=args.prefetch, lanes=args.lanes, settle_s=0.5)
        brokers = access if args.direct else None
        for i in range(args.runs):
            runs.append(
                asyncio.run(one_run(args, gateway, dev.pid, options, brokers, drain_first=i % 2 == 1))
            )
    finally:
        dev.terminate()
        dev.wait(60)
        shutil.rmtree(where, ignore_errors=True)
    median = sorted(runs, key=lambda r: r["ratio"])[len(runs) // 2]
    result = {
        "benchmark": "migrate-drain",
        "date": time.strftime("%Y-%m-%d"),
        "command": "python bench/migrate_drain.py " + " ".join(sys.argv[1:]),
        "parameters": {k: v for k, v in vars(args).items() if k != "save"},
        "target": "drain >= direct consume (ratio >= 1), zero lost",
        "load_average_1m": {"before": load_before, "after": os.getloadavg()[0]},
        "machine": machine_info(),
        "median": median,
        "ratio_runs": [r["ratio"] for r in runs],
        "ratio_median": statistics.median(r["ratio"] for r in runs),
        "runs": runs,
    }
    print(json.dumps(median, indent=2))
    if args.save:
        args.save.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
