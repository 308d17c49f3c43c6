"""`ferrymq bench proxy`: the same traffic through the gRPC proxy and over remoting, in one run.

Against one broker process with the proxy inside it (`ferrymq dev --proxy-port`): the SDK sends
`count` messages in batches over remoting, then the gRPC load driver sends as many through the proxy
(SendMessage with the same batch, body and concurrency); then each side's messages are consumed the
pop way, 32 at a time and settled per batch (SDK: POP_MESSAGE + BATCH_ACK_MESSAGE; gRPC:
ReceiveMessage + AckMessage). Every phase gives its rate and the CPU per message of the client and
of the broker process (proxy included); the gRPC rates as a percentage of the remoting ones.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from ferrymq.bench.client import CpuMeter, Progress, _drive
from ferrymq.bench.grpc_load import GrpcLoad, drain
from ferrymq.bench.pop import BATCH, _broker, _create_topic, _pop_all
from ferrymq.client import ClientInstance, Message, Producer


def _phase(messages: int, seconds: float, cpu: dict) -> dict:
    return {
        "messages": messages,
        "msgs_per_s": round(messages / seconds),
        "client_us_per_msg": cpu.get("client_us_per_msg"),
        "broker_us_per_msg": cpu.get("broker_us_per_msg"),
    }


async def proxy_vs_remoting(
    namesrv: str, proxy: str, count: int, body_size: int, batch: int, inflight: int, progress: Progress,
    cpu_factory: Callable[[], CpuMeter],
) -> dict:  # fmt: skip
    stamp = time.time_ns()
    remoting_topic, grpc_topic = f"BenchRemoting{stamp}", f"BenchGrpc{stamp}"
    body = os.urandom(body_size)
    instance = ClientInstance(namesrv)
    await instance.start()
    load = GrpcLoad(proxy)
    phases: dict[str, dict] = {}
    try:
        for topic in (remoting_topic, grpc_topic):
            await _create_topic(instance, namesrv, topic)  # one warm-up message each
        async with Producer("ferrymq-bench", namesrv) as producer:
            await producer.send_batch([Message(remoting_topic, body) for _ in range(batch)])
            cpu = cpu_factory()
            seconds = await _drive(
                "remoting produce", count, batch, inflight,
                lambda n: producer.send_batch([Message(remoting_topic, body) for _ in range(n)]), progress,
            )  # fmt: skip
            phases["remoting_produce"] = _phase(count, seconds, cpu.result(count))
        await load.send(grpc_topic, body, batch)  # channel up before the clock
        cpu = cpu_factory()
        seconds = await _drive(
            "grpc produce", count, batch, inflight, lambda n: load.send(grpc_topic, body, n), progress
        )
        phases["grpc_produce"] = _phase(count, seconds, cpu.result(count))
        total = count + batch + 1  # the warm-ups too
        broker, addr = await _broker(instance, remoting_topic)
        popped = await _pop_all(
            instance, addr, broker, remoting_topic, total - 1, inflight, progress, cpu_factory
        )
        phases["remoting_pop_ack"] = _phase(
            popped["messages"],
            popped["s"],
            {k: popped.get(k) for k in ("client_us_per_msg", "broker_us_per_msg")},
        )
        cpu = cpu_factory()
        got, seconds = await drain(load, f"bench-grpc-{stamp}", grpc_topic, total, BATCH, inflight, progress)
        phases["grpc_receive_ack"] = _phase(got, seconds, cpu.result(got))
    finally:
        await load.close()
        await instance.close()
    produce = phases["grpc_produce"]["msgs_per_s"] / phases["remoting_produce"]["msgs_per_s"]
    consume = phases["grpc_receive_ack"]["msgs_per_s"] / phases["remoting_pop_ack"]["msgs_per_s"]
    return {
        "system": "ferrymq",
        "scenario": f"proxy vs remoting, batch={batch} inflight={inflight}",
        "body_bytes": body_size,
        **phases,
        "grpc_over_remoting_produce_pct": round(100 * produce, 1),
        "grpc_over_remoting_consume_pct": round(100 * consume, 1),
        "msgs_per_s": min(phases["grpc_produce"]["msgs_per_s"], phases["grpc_receive_ack"]["msgs_per_s"]),
    }
