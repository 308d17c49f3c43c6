"""One message's trip through the broker alone, without the SDK: a raw remoting SEND_MESSAGE_V2 and a
long-polling PULL_MESSAGE held on the same queue, timed with one clock at a fixed rate.

    .venv/bin/python bench/trip_stages.py [--rate 2000] [--seconds 5] [--flush SYNC_FLUSH] [--save FILE]

For each message: `ack` is from writing the send to reading its answer (producer → broker → store →
answer); `delivered` from writing the send to reading the held pull's answer that carries it
(→ ConsumeQueue dispatch → long-poll wake-up → pull answer). `ferrymq bench e2e` at the same rate
measures the same trip through the SDK's Producer and PullConsumer: the difference is the SDK's.
Percentiles in milliseconds, CPU of this process and of the broker per message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

from ferrymq.bench.client import CpuMeter, cluster
from ferrymq.bench.machine import machine_info
from ferrymq.client import Admin
from ferrymq.net import RemotingClient, install_uvloop
from ferrymq.protocol.codes import RequestCode
from ferrymq.protocol.remoting import RemotingCommand

TOPIC = "TripStages"
GROUP = "trip-stages"


def send_request(body: bytes) -> RemotingCommand:
    born = str(time.time_ns() // 10**6)
    ext = {"a": "trip", "b": TOPIC, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": born, "h": "0",
           "i": "", "j": "0", "k": "false", "m": "false"}  # fmt: skip
    return RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext_fields=ext, body=body)


def pull_request(offset: int) -> RemotingCommand:
    ext = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0", "queueOffset": str(offset),
           "maxMsgNums": "32", "sysFlag": "6", "commitOffset": "-1", "suspendTimeoutMillis": "15000",
           "subscription": "*", "subVersion": "0", "expressionType": "TAG"}  # fmt: skip
    return RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields=ext)


def percentiles(values: list[float]) -> dict[str, float | None]:
    ordered = sorted(values)

    def at(q: float) -> float | None:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3, 3) if ordered else None

    return {"p50_ms": at(0.5), "p90_ms": at(0.9), "p99_ms": at(0.99)}


async def trip(namesrv: str, broker_pid: int | None, rate: int, seconds: float) -> dict:
    async with Admin(namesrv) as admin:
        await admin.create_topic(TOPIC, 1)
        addr = next(iter((await admin.masters()).values()))
    client = RemotingClient()
    body = os.urandom(1024)
    sent_at: dict[int, float] = {}  # queue offset → when its send was written
    acks: list[float] = []
    delivered: list[float] = []
    total = int(rate * seconds)
    try:
        first = await client.invoke(addr, send_request(body), 5)  # connection and topic ready
        offset = int(first.ext_fields["queueOffset"]) + 1

        async def consume() -> None:
            nonlocal offset
            while len(delivered) < total:
                answer = await client.invoke(addr, pull_request(offset), 20)
                now = time.perf_counter()
                next_offset = int(answer.ext_fields.get("nextBeginOffset", offset))
                for queue_offset in range(offset, next_offset):
                    if queue_offset in sent_at:
                        delivered.append(now - sent_at.pop(queue_offset))
                offset = next_offset

        async def send_one() -> None:
            started = time.perf_counter()
            answer = await client.invoke(addr, send_request(body), 5)
            acks.append(time.perf_counter() - started)
            sent_at[int(answer.ext_fields["queueOffset"])] = started

        consumer = asyncio.ensure_future(consume())
        await asyncio.sleep(0.2)  # the pull is held
        cpu = CpuMeter(broker_pid)
        begun = time.perf_counter()
        sends = []
        for i in range(total):
            delay = begun + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sends.append(asyncio.ensure_future(send_one()))
        await asyncio.gather(*sends)
        await asyncio.wait_for(consumer, 10)
        used = cpu.result(total)
    finally:
        await client.close()
    stages = {"ack": percentiles(acks), "delivered": percentiles(delivered)}
    return {"rate": rate, "messages": total, **stages, **used}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=int, default=2000)
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--flush", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), default="ASYNC_FLUSH")
    p.add_argument("--save", type=Path)
    args = p.parse_args()
    install_uvloop()
    with cluster(None, flush=args.flush) as target:
        result = asyncio.run(trip(target.namesrv, target.broker_pid, args.rate, args.seconds))
    result.update(flush_disk_type=args.flush, machine=machine_info())
    print(json.dumps(result, indent=1))
    if args.save:
        args.save.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
