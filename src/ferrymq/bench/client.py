"""`ferrymq bench produce|consume|e2e`: the SDK against a running cluster (or one started here).

Without --namesrv, a throwaway `ferrymq dev` is started in its own process on a temporary data
directory, so the broker's CPU can be told apart from the client's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ferrymq.bench.certs import self_signed
from ferrymq.client import Admin, ClientTLS, Message, Producer, PullConsumer

Progress = Callable[[str, int, int], None]


@dataclass
class Cluster:
    namesrv: str
    broker_pid: int | None  # known when we started it, for its CPU figure
    proxy: str | None = None  # the gRPC proxy inside the broker process, when asked for
    tls: ClientTLS | None = None  # how to reach a cluster started with TLS


@contextlib.contextmanager
def cluster(
    namesrv: str | None,
    *,
    proxy: bool = False,
    tls: bool = False,
    auth: tuple[str, str] | None = None,
    flush: str = "ASYNC_FLUSH",
) -> Iterator[Cluster]:
    """The cluster to measure: the given one, or a `ferrymq dev` started (and stopped) here, with
    its gRPC proxy if `proxy`, with `tls` permissive TLS on its ports (a throwaway certificate),
    with authentication on and `auth` (user, password) its super user if given, and acknowledging
    sends as `flush` says (ASYNC_FLUSH or SYNC_FLUSH)."""
    if namesrv:
        yield Cluster(namesrv, None, tls=ClientTLS() if tls else None)
        return
    data = tempfile.mkdtemp(prefix="ferrymq-bench-")
    tls_args: list[str] = []
    client_tls = None
    if tls:
        cert, key = self_signed(Path(data))
        tls_args = ["--tls-server-mode", "permissive", "--tls-server-cert-path", str(cert),
                    "--tls-server-key-path", str(key)]  # fmt: skip
        client_tls = ClientTLS(trust_cert_path=str(cert))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ferrymq",
            "dev",
            "--data-dir",
            data,
            "--namesrv-port",
            "0",
            "--broker-port",
            "0",
            "--proxy-port",
            "0" if proxy else "-1",
            "--amqp-port",
            "-1",
            "--console-port",
            "-1",
            "--flush-disk-type",
            flush,
            *tls_args,
            *(["--auth-user", ":".join(auth)] if auth else []),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None  # a pipe, as asked
    try:
        banner = ""
        deadline = time.monotonic() + 60
        while "Press Ctrl-C" not in banner and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError("ferrymq dev did not start")
            banner += line
        listening = re.search(r"NameServer\s+(\S+)", banner)
        if listening is None:
            raise RuntimeError(f"ferrymq dev did not say where its NameServer listens: {banner!r}")
        proxied = re.search(r"Proxy\s+(\S+)", banner)
        yield Cluster(listening.group(1), proc.pid, proxied.group(1) if proxied else None, client_tls)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(data, ignore_errors=True)


class CpuMeter:
    """CPU % of the client (this process, or `client_pid`) and of the broker (with its indexer
    child) over a run, from /proc.

    100 means one full core.
    """

    def __init__(self, broker_pid: int | None, client_pid: int | None = None) -> None:
        self.pids = {
            "client": [client_pid or os.getpid()],
            "broker": _with_children(broker_pid) if broker_pid else [],
        }
        self._start = self._sample()
        self._t0 = time.monotonic()

    def _sample(self) -> dict[str, int]:
        ticks: dict[str, int] = {}
        for name, pids in self.pids.items():
            for pid in pids:
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    ticks[name] = ticks.get(name, 0) + int(fields[11]) + int(fields[12])  # utime + stime
                except OSError:
                    pass
        return ticks

    def result(self, messages: int = 0) -> dict:
        """CPU % per side; with `messages`, also CPU microseconds per message, which a busy machine
        distorts far less than rates (a process waiting for a core uses none)."""
        elapsed = time.monotonic() - self._t0
        end = self._sample()
        hz = os.sysconf("SC_CLK_TCK")
        used = {n: (end[n] - self._start.get(n, 0)) / hz for n in end}
        cpu: dict[str, float | str] = {f"{n}_cpu_pct": round(100 * used[n] / elapsed, 1) for n in used}
        if messages:
            cpu.update({f"{n}_us_per_msg": round(1e6 * used[n] / messages, 2) for n in used})
        if len(used) == 2:
            cpu["bottleneck"] = max(("client", "broker"), key=lambda n: used[n])
        return cpu


def _with_children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [pid, *map(int, f.read().split())]
    except OSError:
        return [pid]


def _figures(name: str, count: int, body_size: int, seconds: float) -> dict:
    return {
        "system": "ferrymq",
        "scenario": name,
        "messages": count,
        "body_bytes": body_size,
        "seconds": round(seconds, 2),
        "msgs_per_s": round(count / seconds),
        "mb_per_s": round(count * body_size / seconds / 1e6, 1),
    }


async def produce(
    namesrv: str,
    topic: str,
    count: int,
    body_size: int,
    batch: int,
    inflight: int,
    progress: Progress,
    cpu: CpuMeter,
    trace: bool = False,
    tls: ClientTLS | None = None,
    credentials: tuple[str, str] | None = None,
) -> dict:
    """Send `count` messages, `batch` per request (1: one SEND_MESSAGE_V2 each), `inflight` at once.

    With `trace`, the producer writes message trace (Pub records) to RMQ_SYS_TRACE_TOPIC as well;
    with `tls`, it speaks TLS to the cluster; with `credentials` (a super user's access and secret
    key), it signs every request as a normal user made for the run, whose rules allow Pub on the
    topic (so each send is checked against them).
    """
    body = os.urandom(body_size)
    access_key, secret_key = (
        (await _producer_user(namesrv, topic, credentials, tls)) if credentials else (None, None)
    )
    async with Producer(
        "ferrymq-bench", namesrv, enable_trace=trace, tls=tls or False, access_key=access_key,
        secret_key=secret_key,
    ) as producer:  # fmt: skip
        await producer.send(Message(topic, body))  # route and connection ready before the clock

        async def send(n: int) -> None:
            if n == 1:
                await producer.send(Message(topic, body))
            else:
                await producer.send_batch([Message(topic, body) for _ in range(n)])

        seconds = await _drive("produce", count, batch, inflight, send, progress)
        cpu_figures = cpu.result(count)
    name = (
        f"produce batch={batch} inflight={inflight}"
        + (" trace" if trace else "")
        + (" tls" if tls else "")
        + (" acl" if credentials else "")
    )
    traced = {}
    if producer.trace is not None:  # written by the end of shutdown (which drains the buffer)
        traced = {"trace_written": producer.trace.written, "trace_dropped": producer.trace.dropped,
                  "trace_failed": producer.trace.failed}  # fmt: skip
    return {**_figures(name, count, body_size, seconds), **cpu_figures, **traced}


async def _producer_user(
    namesrv: str, topic: str, root: tuple[str, str], tls: ClientTLS | None
) -> tuple[str, str]:
    """A normal user allowed to publish to `topic` (and to see TBW102's route, which auto-creation
    reads), and nothing else, made with the super user `root`."""
    user = ("bench-producer", "bench-producer-secret")
    async with Admin(namesrv, tls=tls or False, access_key=root[0], secret_key=root[1]) as admin:
        await admin.create_user(*user)
        await admin.create_acl(user[0], [f"Topic:{topic}", "Topic:TBW102"], ["Pub"])
    return user


async def _drive(name: str, count: int, batch: int, inflight: int, send, progress: Progress) -> float:
    """Call `send(n)` until `count` messages went, `batch` at a time, `inflight` at once; seconds taken."""
    done = 0
    started = time.perf_counter()

    async def worker() -> None:
        nonlocal done
        while done < count:
            n = min(batch, count - done)
            done += n
            await send(n)
            if done % 10_000 < n:
                progress(name, done, count)

    await asyncio.gather(*(worker() for _ in range(inflight)))
    return time.perf_counter() - started


async def transactions(
    namesrv: str, topic: str, count: int, body_size: int, inflight: int, progress: Progress, cpu: CpuMeter
) -> dict:
    """`count` transactional sends, each committed by its local transaction, `inflight` at once."""
    from ferrymq.client import LocalTransactionState, TransactionProducer

    body = os.urandom(body_size)

    def commit(message: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE

    async with TransactionProducer("ferrymq-bench-tx", namesrv) as producer:
        await producer.send_message_in_transaction(Message(topic, body), commit)  # warm-up

        async def send(n: int) -> None:
            await producer.send_message_in_transaction(Message(topic, body), commit)

        seconds = await _drive("transactions", count, 1, inflight, send, progress)
        cpu_figures = cpu.result(count)
    return {
        **_figures(f"transaction send+commit inflight={inflight}", count, body_size, seconds),
        **cpu_figures,
    }


async def consume(
    namesrv: str,
    topic: str,
    count: int,
    body_size: int,
    progress: Progress,
    cpu_factory: Callable[[], CpuMeter],
) -> dict:
    """Load `count` messages, then time one PullConsumer reading them all back."""
    group = f"ferrymq-bench-{time.time_ns()}"
    body = os.urandom(body_size)
    async with Producer("ferrymq-bench", namesrv) as producer:
        for start in range(0, count, 64):
            await producer.send_batch([Message(topic, body) for _ in range(min(64, count - start))])
            progress("consume: loading", start + 64, count)
    cpu = cpu_factory()
    async with PullConsumer(group, namesrv, consume_from="first") as consumer:
        await consumer.subscribe(topic)
        got = 0
        started = time.perf_counter()
        while got < count:
            messages = await consumer.poll(5.0)
            if not messages:
                break
            got += len(messages)
            progress("consume", got, count)
        seconds = time.perf_counter() - started
    return {**_figures("consume", got, body_size, seconds), **cpu.result(got)}


async def end_to_end(
    namesrv: str, topic: str, rate: int, seconds: float, body_size: int, progress: Progress, cpu: CpuMeter
) -> dict:
    """Send at `rate` msg/s for `seconds`; a long-polling consumer measures send-to-receive latency."""
    total = int(rate * seconds)
    latencies: list[float] = []
    pad = os.urandom(max(0, body_size - 20))
    async with (
        Producer("ferrymq-bench", namesrv) as producer,
        PullConsumer(f"ferrymq-bench-e2e-{time.time_ns()}", namesrv) as consumer,
    ):
        await producer.send(Message(topic, b"warm-up"))
        await consumer.subscribe(topic)

        async def receive() -> None:
            deadline = time.monotonic() + seconds + 10
            while len(latencies) < total and time.monotonic() < deadline:
                for m in await consumer.poll(1.0):
                    if m.body[:2] == b"t=":
                        latencies.append((time.time_ns() - int(m.body[2:21])) / 1e6)
                progress("e2e", len(latencies), total)

        async with asyncio.TaskGroup() as receiving:  # a failing receiver stops the sends too
            receiving.create_task(receive(), name="e2e-receiver")
            started = time.perf_counter()
            for i in range(total):
                delay = started + i / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                producer.send_async(Message(topic, b"t=%019d" % time.time_ns() + pad), lambda r, e: None)
    latencies.sort()

    def pct(p: float) -> float | None:
        return round(latencies[min(len(latencies) - 1, int(p * len(latencies)))], 3) if latencies else None

    figures = _figures(f"e2e rate={rate}", len(latencies), body_size, seconds)
    return {
        **figures,
        "p50_ms": pct(0.5),
        "p90_ms": pct(0.9),
        "p99_ms": pct(0.99),
        "p999_ms": pct(0.999),
        **cpu.result(len(latencies)),
    }


async def idle_polls(namesrv: str, consumers: int, seconds: float, progress: Progress, cpu_factory) -> dict:
    """`consumers` long-polling pulls parked on an empty queue for `seconds`: the broker's idle cost."""
    from ferrymq.client import ClientInstance
    from ferrymq.client.pull import pull

    topic = f"BenchIdle{time.time_ns()}"
    async with Producer("ferrymq-bench", namesrv) as producer:
        await producer.send(Message(topic, b"one"))  # creates the topic; its queues are then empty at 1
    instances = [ClientInstance(namesrv) for _ in range(consumers)]  # one connection each, as 100 apps
    route = await instances[0].route(topic)
    mq = route.read_queues[0]
    addr = route.masters[mq.broker_name]
    offset = 1 if await _has_message(instances[0], addr, mq) else 0
    stop = time.monotonic() + seconds

    async def hold(instance) -> int:
        answered = 0
        while time.monotonic() < stop:
            wait = int(min(15, max(0.1, stop - time.monotonic())) * 1000)
            await pull(instance, addr, mq, f"idle-{id(instance)}", offset, suspend_ms=wait)
            answered += 1
        return answered

    await asyncio.gather(*(i.route(topic) for i in instances[1:]))
    cpu = cpu_factory()
    async with asyncio.TaskGroup() as ticking:
        ticker = ticking.create_task(_tick(progress, seconds), name="idle-progress")
        answers = await asyncio.gather(*(hold(i) for i in instances))
        ticker.cancel()
    for instance in instances:
        await instance.close()
    return {
        "system": "ferrymq",
        "scenario": f"idle long polls x{consumers}",
        "seconds": seconds,
        "pulls_answered": sum(answers),
        **cpu.result(),
    }


async def _has_message(instance, addr, mq) -> bool:
    from ferrymq.client.pull import pull

    return bool((await pull(instance, addr, mq, "idle-probe", 0)).messages)


async def _tick(progress: Progress, seconds: float) -> None:
    started = time.monotonic()
    while True:
        progress("idle", int(time.monotonic() - started), int(seconds))
        await asyncio.sleep(1)
