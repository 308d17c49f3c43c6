"""Degradation, measured and checked: a producer sends at a steady rate to a primary cluster with a
standby cluster behind it; the whole primary (NameServer and brokers) is SIGKILLed, later restarted;
a `ferrymq relay` process puts what went to the standby back; a consumer of the primary must then
receive every acknowledged message.

Every process is a real `ferrymq` process on loopback, started and killed by PID (the producer and
the checking consumer run in this one). The producer does not retry: a send that raises counts as
failed, so the longest gap between successful sends is what an application would see.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from ferrymq.bench.failover import AckLog, SteadyProducer, read_back
from ferrymq.bench.processes import Proc, free_port
from ferrymq.client import ClientError, Message, Producer
from ferrymq.client.standby import standby_topic
from ferrymq.net import RemotingClient, RemotingError
from ferrymq.protocol.bodies import TopicRouteData, decode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.remoting import RemotingCommand

TOPIC = "DegradeTopic"
PRIMARY = "PrimaryCluster"
STANDBY = "StandbyCluster"


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a running process so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class PlainCluster:
    """One NameServer and `brokers` masters (static roles) as processes, on fixed ports: a cluster
    that can be SIGKILLed whole and started again where it was."""

    def __init__(self, root: Path, name: str, brokers: int = 1) -> None:
        self.name = name
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.namesrv_addr = f"127.0.0.1:{free_port()}"
        self.procs = {
            "namesrv": Proc(f"{name}-namesrv", ["namesrv", "--listen", self.namesrv_addr], self.logs, {}, [])
        }
        self.broker_addrs: dict[str, str] = {}
        env = {  # small files: trials must not fill the disk
            "FERRYMQ_MAPPED_FILE_SIZE_COMMIT_LOG": str(64 << 20),
            "FERRYMQ_MAPPED_FILE_SIZE_CONSUME_QUEUE": str(20_000 * 20),
            "FERRYMQ_MAX_HASH_SLOT_NUM": "10000",
            "FERRYMQ_MAX_INDEX_NUM": "100000",
        }
        for i in range(brokers):
            broker = f"{name}-broker{i}"
            addr = self.broker_addrs[broker] = f"127.0.0.1:{free_port()}"
            args = ["broker", "--namesrv", self.namesrv_addr, "--listen", addr, "--cluster", name, "--name",
                    broker, "--store-dir", str(root / broker), "--ha-port", str(free_port())]  # fmt: skip
            self.procs[broker] = Proc(broker, args, self.logs, env, [])
        self._client = RemotingClient()

    async def start(self) -> None:
        """Start every process (again, after a kill: same ports, same stores), NameServer first."""
        for proc in self.procs.values():
            since = len(proc.log_text())
            proc.start()
            await proc.wait_for_line("listening", 90, since)

    def kill(self) -> None:
        """SIGKILL every process at once, the whole cluster gone in an instant."""
        for proc in self.procs.values():
            proc.signal(signal.SIGKILL)
        for proc in self.procs.values():
            proc.kill()  # reaps

    async def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            proc.stop()
        await self._client.close()

    async def create_topic(self, topic: str, queues: int = 4, timeout: float = 60.0) -> None:
        """`topic` on every broker, once the NameServer routes it."""
        fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues),
                  "writeQueueNums": str(queues), "perm": "6", "topicFilterType": "SINGLE_TAG"}  # fmt: skip
        for broker, addr in self.broker_addrs.items():
            reply = await self._call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
            if reply.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"{broker} did not create {topic}: {reply.remark}")
        await self.wait_routed(topic, len(self.broker_addrs), timeout)

    async def wait_routed(self, topic: str, brokers: int, timeout: float = 60.0) -> None:
        """Until the NameServer routes `topic` to `brokers` brokers."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                reply = await self._call(
                    self.namesrv_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}
                )
                routed = reply.code == ResponseCode.SUCCESS and decode_body(TopicRouteData, reply.body)
                if routed and len(routed.broker_datas) >= brokers:
                    return
            except RemotingError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.name} does not route {topic} to {brokers} brokers in {timeout:g} s"
                )
            await asyncio.sleep(0.2)

    async def _call(self, addr: str, code: int, ext: dict[str, str]) -> RemotingCommand:
        return await self._client.invoke(addr, RemotingCommand(code, ext_fields=ext), 5.0)


@dataclass
class SendLog(AckLog):
    to_standby: set[str] = field(default_factory=set)  # keys the standby acknowledged
    failed: list[tuple[float, str]] = field(default_factory=list)  # (when, error) of sends that raised
    sent: int = 0

    def longest_gap(self, since: float = 0.0, until: float = float("inf")) -> float:
        """The longest time without an acknowledged send between `since` (0: the first ack) and `until`
        (or the last ack)."""
        times = sorted(t for t in self.acked.values() if since <= t <= until)
        points = ([since] if since else []) + times
        return max((b - a for a, b in itertools.pairwise(points)), default=0.0)


class RatedProducer(SteadyProducer):
    """`rate` sends a second over `concurrency` senders, to a primary with a standby behind it, and no
    retries by the application: whatever the SDK does with a failure is what is measured."""

    def __init__(self, primary: str, standby: str, *, rate: float = 200.0, concurrency: int = 4) -> None:
        super().__init__(primary, "s", concurrency=concurrency, interval=concurrency / rate)
        self.producer = Producer(
            "degrading-producer", primary, standby_namesrv_addr=standby, standby_topic=standby_topic(PRIMARY),
            send_timeout=2.0,
        )  # fmt: skip
        self.log: SendLog = SendLog()

    async def _sender(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self._counter += 1
            key = f"{self.prefix}-{self._counter}"
            self.log.sent += 1
            try:
                result = await self.producer.send(Message(TOPIC, key.encode(), keys=key, tags="degrade"))
            except ClientError as e:
                self.log.failed.append((time.monotonic(), str(e)))
            else:
                self.log.acked[key] = time.monotonic()
                if result.to_standby:
                    self.log.to_standby.add(key)
            next_at += self.interval
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    async def back_on_primary(self, since: float, timeout: float) -> None:
        """Until a send acknowledged after `since` went to the primary (bounded by `timeout` s)."""
        deadline = time.monotonic() + timeout
        log = self.log
        while not any(t > since and k not in log.to_standby for k, t in reversed(log.acked.items())):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the producer did not return to the primary in {timeout:g} s")
            await asyncio.sleep(0.1)


async def degradation_trial(
    root: Path, *, rate: float = 200.0, warmup: float = 3.0, outage: float = 5.0, after: float = 12.0,
    settle: float = 120.0,
) -> dict:  # fmt: skip
    """One trial; see the module docstring. Times in seconds; `after`: how long the producer goes on
    sending once it is back on the primary."""
    primary = PlainCluster(root / "primary", PRIMARY, brokers=2)
    standby = PlainCluster(root / "standby", STANDBY, brokers=1)
    relay = Proc("relay", ["relay", "--standby", standby.namesrv_addr, "--primary", primary.namesrv_addr,
                           "--primary-cluster", PRIMARY], root / "primary" / "logs", {}, [])  # fmt: skip
    producer: RatedProducer | None = None
    try:
        await asyncio.gather(primary.start(), standby.start())
        await primary.create_topic(TOPIC)
        await standby.create_topic(standby_topic(PRIMARY))
        relay.start()
        await relay.wait_for_line("relay of", 60)
        producer = RatedProducer(primary.namesrv_addr, standby.namesrv_addr, rate=rate)
        cpu0, t0 = time.process_time(), time.monotonic()
        await producer.start()
        await asyncio.sleep(warmup)
        load = os.getloadavg()[0]
        killed_at = time.monotonic()
        primary.kill()
        await asyncio.sleep(outage)
        restart_at = time.monotonic()
        await primary.start()
        await primary.wait_routed(TOPIC, 2, settle)
        back_at = time.monotonic()
        await producer.back_on_primary(back_at, settle)  # the relay drains the standby meanwhile
        await asyncio.sleep(after)
        await producer.stop()
        log, producer = producer.log, None
        producer_cpu, elapsed = time.process_time() - cpu0, time.monotonic() - t0
        found, total = await read_back(primary.namesrv_addr, set(log.acked), settle, TOPIC)
        relay_cpu, standby_cpu = (
            cpu_seconds(relay.pid),
            sum(cpu_seconds(p.pid) for p in standby.procs.values()),
        )
    finally:
        if producer is not None:
            await producer.stop()
        relay.stop()
        await asyncio.gather(primary.stop(), standby.stop())
    acked = set(log.acked)
    primary_after = [t for k, t in log.acked.items() if t > back_at and k not in log.to_standby]
    return {
        "longest_gap_s": round(log.longest_gap(), 3),
        "longest_gap_before_kill_s": round(log.longest_gap(until=killed_at), 3),  # the baseline
        "longest_gap_from_kill_s": round(log.longest_gap(since=killed_at), 3),
        "sent": log.sent,
        "acked": len(acked),
        "failed": len(log.failed),
        "to_standby": len(log.to_standby),
        "received": len(found & acked),
        "lost": len(acked - found),
        "duplicates": total - len(found),
        "outage_s": round(restart_at - killed_at, 2),
        "primary_back_after_restart_s": round(back_at - restart_at, 2),
        "first_primary_ack_after_return_s": round(min(primary_after) - back_at, 2) if primary_after else None,
        "rate_per_s": rate,
        "producer_cpu_pct": round(100 * producer_cpu / elapsed, 1),
        "producer_us_per_msg": round(1e6 * producer_cpu / max(log.sent, 1), 1),
        "relay_cpu_s": round(relay_cpu, 2),
        "relay_us_per_relayed_msg": round(1e6 * relay_cpu / max(len(log.to_standby), 1), 1),
        "standby_cpu_s": round(standby_cpu, 2),
        "load_average_1m_at_kill": round(load, 2),
        "first_failures": [e for _, e in log.failed[:3]],
    }
