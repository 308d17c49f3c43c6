"""Failover, measured and checked: steady producers, a fault, the time until sends succeed again, and
a read-back proving every acknowledged message is still there.

`SteadyProducer` keeps sending unique keys and retries each one until it is acknowledged (as an
application would), so the acknowledged-message log is exact; duplicates can come only from retries
and are recognised by key. `read_back` reads the whole topic from the current master.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from ferrymq.bench.processes import GroupState, ProcessCluster
from ferrymq.client import ClientError, Message, Producer, PullConsumer, SendStatus
from ferrymq.net import RemotingError
from ferrymq.net.tasks import BackgroundTasks

log = logging.getLogger(__name__)

TOPIC = "FailoverTopic"


@dataclass
class AckLog:
    acked: dict[str, float] = field(default_factory=dict)  # key → when its send was acknowledged
    failed_attempts: int = 0

    def first_ack_after(self, moment: float) -> float | None:
        return min((t for t in self.acked.values() if t > moment), default=None)


class SteadyProducer:
    """`concurrency` senders, each sending one message every `interval` s, retrying until acknowledged."""

    def __init__(self, namesrv: str, prefix: str, *, concurrency: int = 4, interval: float = 0.01) -> None:
        self.producer = Producer(
            f"{prefix}-producer", namesrv, send_timeout=2.0, retry_times_when_send_failed=1
        )
        self.prefix = prefix
        self.concurrency = concurrency
        self.interval = interval
        self.log = AckLog()
        self._stop = asyncio.Event()
        self._tasks = BackgroundTasks("steady producer")
        self._senders: list[asyncio.Task] = []
        self._counter = 0

    async def start(self) -> None:
        await self.producer.start()
        self._senders = [
            self._tasks.spawn(self._sender(), name=f"sender-{i}") for i in range(self.concurrency)
        ]

    async def stop(self) -> AckLog:
        """Let every sender finish the send it is in (its ack still counts), then shut down."""
        self._stop.set()
        if self._senders:
            await asyncio.wait(self._senders)
        await self._tasks.close()
        await self.producer.shutdown()
        # a send the SDK retried after a timeout may have been stored too: its attempts count as well
        self.log.failed_attempts += self.producer.failed_attempts
        return self.log

    async def _sender(self) -> None:
        while not self._stop.is_set():
            self._counter += 1
            key = f"{self.prefix}-{self._counter}"
            while not self._stop.is_set():
                try:
                    result = await self.producer.send(Message(TOPIC, key.encode(), keys=key))
                except (ClientError, RemotingError):
                    result = None
                if result is None or result.status is not SendStatus.SEND_OK:  # e.g. FLUSH_SLAVE_TIMEOUT
                    self.log.failed_attempts += 1
                    await asyncio.sleep(0.05)
                    continue
                self.log.acked[key] = time.monotonic()
                break
            await asyncio.sleep(self.interval)

    async def wait_acks(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        target = len(self.log.acked) + count
        while len(self.log.acked) < target:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"only {len(self.log.acked)} of {target} sends acknowledged in {timeout:g} s"
                )
            await asyncio.sleep(0.05)


async def under_load(
    cluster: ProcessCluster, prefix: str, *, warmup: int = 100, timeout: float = 90.0, concurrency: int = 4
) -> tuple[str, GroupState, SteadyProducer]:
    """Once the group is fully in sync, start producing: (master's process name, group, producer)."""
    master, _ = await cluster.master()
    group = await cluster.wait_full_group(timeout)
    producer = SteadyProducer(cluster.namesrv_addr, prefix, concurrency=concurrency)
    await producer.start()
    await producer.wait_acks(warmup, timeout)
    return master, group, producer


async def read_back(
    namesrv: str, expected: set[str], timeout: float = 60.0, topic: str = TOPIC
) -> tuple[set[str], int]:
    """Read the topic from the start off the current master: (keys found, messages read incl. duplicates)."""
    found: set[str] = set()
    total = 0
    deadline = time.monotonic() + timeout
    consumer = PullConsumer(
        f"readback-{time.monotonic_ns()}", namesrv, consume_from="first", pull_batch_size=256
    )
    async with consumer:
        await consumer.subscribe(topic)
        idle_polls = 0
        while time.monotonic() < deadline and (not expected <= found or idle_polls < 3):
            try:
                messages = await consumer.poll(timeout=1.0)
            except (ClientError, RemotingError) as exc:
                log.info("read-back poll failed: %s", exc)
                await asyncio.sleep(0.5)
                continue
            idle_polls = 0 if messages else idle_polls + 1
            total += len(messages)
            found.update(m.body.decode() for m in messages)
    return found, total


async def failover_trial(root: Path, *, warmup: int = 200, settle_timeout: float = 90.0) -> dict:
    """One cluster: produce, SIGKILL the master, measure until sends succeed, check nothing acked is lost."""
    async with ProcessCluster(root) as cluster:
        name, before, producer = await under_load(cluster, f"t{time.monotonic_ns()}", warmup=warmup,
                                                  timeout=settle_timeout)  # fmt: skip
        try:
            killed_at = time.monotonic()
            cluster.procs[name].kill()
            after = await cluster.wait_new_master(before, settle_timeout)
            await producer.wait_acks(warmup, settle_timeout)
        finally:
            acks = await producer.stop()
        resumed = acks.first_ack_after(killed_at)
        found, total = await read_back(cluster.namesrv_addr, set(acks.acked))
        lost = set(acks.acked) - found
        return {
            "failover_s": round(resumed - killed_at, 3) if resumed else None,
            "acked": len(acks.acked),
            "lost": len(lost),
            "duplicates": total - len(found),
            "old_epoch": before.master_epoch,
            "new_epoch": after.master_epoch,
        }


async def run_failover_bench(root: Path, trials: int, progress=None) -> dict:
    results = []
    for i in range(trials):
        results.append(await failover_trial(root / f"trial{i}"))
        shutil.rmtree(root / f"trial{i}", ignore_errors=True)
        if progress:
            progress(i + 1, results[-1])
    times = sorted(r["failover_s"] for r in results if r["failover_s"] is not None)
    summary = {
        "trials": trials,
        "lost_total": sum(r["lost"] for r in results),
        "failover_p50_s": statistics.median(times) if times else None,
        "failover_p99_s": times[min(len(times) - 1, int(len(times) * 0.99))] if times else None,
        "failover_max_s": times[-1] if times else None,
    }
    return {"summary": summary, "trials": results}
