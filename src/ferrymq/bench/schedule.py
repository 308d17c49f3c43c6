"""`ferrymq bench timer`: many pending delivery-time messages, how punctually they come, and what
the broker spends meanwhile.

`pending` messages are sent with TIMER_DELIVER_MS on whole seconds spread over `spread` seconds,
the first due once all are stored. Then the broker's CPU is measured while every one is pending
(it should be ~0: nothing is due), and a consumer reads them as they are delivered. Lateness is the
redelivered copy's store time minus the time asked for: the broker's punctuality, without the
consumer's pull latency (reported apart as receive lateness).
"""

from __future__ import annotations

import asyncio
import time

from ferrymq.bench.client import Progress
from ferrymq.client import Message, Producer, PullConsumer


async def timer_bench(
    namesrv: str,
    pending: int,
    spread: int,
    idle_seconds: float,
    inflight: int,
    progress: Progress,
    cpu_factory,
) -> dict:
    topic = f"BenchTimer{time.time_ns()}"
    async with Producer("ferrymq-bench", namesrv) as producer:
        await producer.send(Message(topic, b"route"))  # the topic and its route exist before the clock
        load_started = time.time()
        first_due = await _load(producer, topic, pending, spread, inflight, progress)
        load_seconds = time.time() - load_started
    idle, idle_started = cpu_factory(), time.monotonic()
    await asyncio.sleep(max(0.0, min(idle_seconds, first_due / 1000 - time.time() - 0.5)))
    idle_cpu = idle.result()
    idle_measured = round(time.monotonic() - idle_started, 1)
    delivery = cpu_factory()
    lateness, receive_lateness = await _receive(namesrv, topic, pending, first_due + spread * 1000, progress)
    delivery_cpu = delivery.result()
    lateness.sort()
    receive_lateness.sort()
    within = sum(1 for ms in lateness if 0 <= ms <= 1000)
    return {
        "system": "ferrymq",
        "scenario": f"timer: {pending} pending, due over {spread} s",
        "pending": pending,
        "load_seconds": round(load_seconds, 1),
        "load_msgs_per_s": round(pending / load_seconds),
        "idle_seconds_measured": idle_measured,
        "idle_broker_cpu_pct": idle_cpu.get("broker_cpu_pct"),
        "delivered": len(lateness),
        "early": sum(1 for ms in lateness if ms < 0),
        "within_1s": within,
        "within_1s_pct": round(100 * within / pending, 2),
        "late_ms_p50": _pct(lateness, 50),
        "late_ms_p99": _pct(lateness, 99),
        "late_ms_max": lateness[-1] if lateness else None,
        "receive_late_ms_p50": _pct(receive_lateness, 50),
        "receive_late_ms_p99": _pct(receive_lateness, 99),
        "delivery_broker_cpu_pct": delivery_cpu.get("broker_cpu_pct"),
        "delivery_client_cpu_pct": delivery_cpu.get("client_cpu_pct"),
    }


async def _load(producer: Producer, topic: str, pending: int, spread: int, inflight: int, progress) -> int:
    """Send the timers, due on whole seconds round-robin; return the first due time (ms), which is
    set past the end of the load from the send rate of a probe run to a scratch topic."""
    probe = min(2000, pending)
    started = time.perf_counter()
    await _send_all(producer, [Message(topic + "Probe", b"probe") for _ in range(probe)], inflight)
    rate = probe / (time.perf_counter() - started)
    first_due = (int(time.time() + pending / rate * 1.5) + 5) * 1000
    messages = (
        Message(topic, b"t", properties={"TIMER_DELIVER_MS": str(first_due + (i % spread) * 1000)})
        for i in range(pending)
    )
    await _send_all(producer, messages, inflight, lambda done: progress("load timers", done, pending))
    return first_due


async def _send_all(producer: Producer, messages, inflight: int, on_progress=None) -> None:
    it = iter(messages)
    done = 0

    async def worker() -> None:
        nonlocal done
        for message in it:
            await producer.send(message)
            done += 1
            if on_progress and done % 1000 == 0:
                on_progress(done)

    await asyncio.gather(*(worker() for _ in range(inflight)))


def _pct(values: list[int], p: float) -> int | None:
    return values[min(len(values) - 1, int(len(values) * p / 100))] if values else None


async def _receive(
    namesrv: str, topic: str, count: int, last_due: int, progress
) -> tuple[list[int], list[int]]:
    lateness: list[int] = []
    receive_lateness: list[int] = []
    deadline = last_due / 1000 + 120
    async with PullConsumer(f"bench-timer-{time.time_ns()}", namesrv, consume_from="first") as consumer:
        await consumer.subscribe(topic)
        while len(lateness) < count and time.time() < deadline:
            for m in await consumer.poll(1.0):
                due = m.properties.get("TIMER_DELIVER_MS")
                if due is None:
                    continue
                now = time.time_ns() // 1_000_000
                lateness.append(m.store_timestamp - int(due))
                receive_lateness.append(now - int(due))
            progress("delivered", len(lateness), count)
    return lateness, receive_lateness
