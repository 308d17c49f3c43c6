"""What the peer benchmarks share, so RabbitMQ and NATS JetStream are measured and reported the same way.

Each script takes the same options, times the same phases and prints one JSON line with the same keys.
The CPU of the client process and of the server process over the measured window is part of the line:
on a machine this small, a Python client often saturates its one core before the server does, and a
figure means little without knowing which side was the limit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import struct
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

SCENARIOS = ("produce", "consume", "e2e")
DEFAULT_COUNT = 50_000
_STAMP = struct.Struct(">Q")  # send time (time.time_ns) in the first 8 bytes of every e2e body
_TICKS = os.sysconf("SC_CLK_TCK")


class BenchError(Exception):
    """A failure worth one clear line on stderr rather than a traceback."""


def parse_args(
    system: str, clients: tuple[str, ...], default_url: str, produce_ways: tuple[str, ...] = ()
) -> argparse.Namespace:
    """The options every peer script accepts, with the same meaning everywhere; `produce_ways` are
    the ways a script can drive its client's produce, of which --produce-way picks one."""
    p = argparse.ArgumentParser(
        description=f"{system} peer benchmark: progress on stderr, one JSON result line on stdout."
    )
    p.add_argument("scenario", choices=SCENARIOS)
    p.add_argument("--client", choices=clients, default=clients[0])
    p.add_argument("--url", default=default_url, help=f"server address (default {default_url})")
    p.add_argument("--count", type=int, help=f"messages (default {DEFAULT_COUNT:,}; e2e: rate x duration)")
    p.add_argument("--body-size", type=int, default=1024, help="bytes per message body (default 1024)")
    p.add_argument("--inflight", type=int, default=64, help="publishes awaiting an ack at once (default 64)")
    p.add_argument("--rate", type=int, default=2000, help="e2e: messages per second (default 2000)")
    p.add_argument("--duration", type=float, default=10, help="e2e: seconds of sending (default 10)")
    p.add_argument("--batch", type=int, default=256, help="consumer prefetch / fetch batch (default 256)")
    p.add_argument(
        "--ack-every",
        type=int,
        help="consumer: one cumulative ack per k messages (default: batch / 4); 1 acks each message",
    )
    p.add_argument(
        "--loop", choices=("uvloop", "asyncio"), default="uvloop", help="event loop of the asyncio clients"
    )
    p.add_argument("--timeout", type=float, default=300, help="hard limit in seconds for each phase")
    if produce_ways:
        p.add_argument(
            "--produce-way",
            choices=produce_ways,
            help="produce: measure only this way of driving the client (default: each, the best counts)",
        )
    p.add_argument(
        "--server-pid",
        type=int,
        action="append",
        help="server process(es) whose CPU to report (default: found)",
    )
    args = p.parse_args()
    if args.scenario == "e2e":
        planned = max(1, round(args.rate * args.duration))
        args.count = planned if args.count is None else min(args.count, planned)
    elif args.count is None:
        args.count = DEFAULT_COUNT
    if args.ack_every is None:  # cumulative acks, as a client does when the protocol has them
        args.ack_every = max(1, args.batch // 4)
    for name in ("count", "inflight", "rate", "batch", "ack_every"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.body_size < _STAMP.size:
        p.error(f"--body-size must be at least {_STAMP.size} (the send timestamp)")
    if args.ack_every > args.batch:
        p.error("--ack-every above --batch would stall the consumer at its prefetch limit")
    if args.duration <= 0 or args.timeout <= 0:
        p.error("--duration and --timeout must be positive")
    return args


def resource_name(system: str, scenario: str) -> str:
    """Queue or stream name: our prefix, and the pid so that concurrent runs never share one."""
    return f"ferrymq_bench_{system}_{scenario}_{os.getpid()}"


def unreachable(system: str, url: str, exc: BaseException) -> BenchError:
    detail = str(exc) or repr(exc)  # some client errors have an empty str()
    return BenchError(f"cannot reach {system} at {url} ({detail}); is the server running?")


def run_main(main: Callable[[], None]) -> None:
    """Run a script's main: expected failures as one line and exit status 2."""
    try:
        main()
    except BenchError as e:
        print(f"\nerror: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)


def run_async(coro: Coroutine[Any, Any, Any], loop: str) -> Any:
    """asyncio.run on uvloop when asked (ferrymq's own servers run on it) and installed."""
    factory = None
    if loop == "uvloop":
        try:
            import uvloop

            factory = uvloop.new_event_loop
        except ImportError:
            print("uvloop is not installed: using the asyncio loop", file=sys.stderr)
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


# Message bodies


def filler(size: int) -> bytes:
    """Random bytes, so that nothing on the way can profit from compressible bodies."""
    return os.urandom(size)


def stamped(body: bytes) -> bytes:
    """`body` with its first 8 bytes replaced by the wall-clock send time (shared by both ends here)."""
    return _STAMP.pack(time.time_ns()) + body[_STAMP.size :]


class Latencies:
    """Receive latencies of stamped bodies, and their percentiles in milliseconds."""

    def __init__(self) -> None:
        self.ns: list[int] = []

    def record(self, body: bytes) -> None:
        self.ns.append(time.time_ns() - _STAMP.unpack_from(body)[0])

    def percentiles(self) -> dict[str, float | None]:
        ordered = sorted(self.ns)

        def at(q: float) -> float | None:  # nearest rank
            if not ordered:
                return None
            return round(ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)] / 1e6, 3)

        return {"p50_ms": at(0.5), "p90_ms": at(0.9), "p99_ms": at(0.99), "p999_ms": at(0.999)}


# Pacing and pipelining


class Pacer:
    """When message i is due: at once without a rate, else on a fixed schedule from `start()`.

    The schedule is absolute, so a late message does not push back the ones after it: the sender
    catches up and the average rate holds.
    """

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self.t0 = 0.0

    def start(self) -> None:
        self.t0 = time.perf_counter()

    def delay(self, i: int) -> float:
        if self.rate is None:
            return 0.0
        return self.t0 + i / self.rate - time.perf_counter()


def ack_due(received: int, total: int, every: int) -> bool:
    """Whether the consumer acks after its `received`-th message: every k-th, and the last one."""
    return received % every == 0 or received == total


@contextlib.asynccontextmanager
async def measured(phase: Phase) -> AsyncIterator[Phase]:
    """Time an asyncio phase and bound it by its timeout: a clear error rather than a hang."""
    limit = asyncio.timeout(phase.timeout)
    with phase:
        try:
            async with limit:
                yield phase
        except TimeoutError:
            if not limit.expired():  # a client library's own timeout, not ours
                raise
            raise BenchError(
                f"{phase.label}: timed out after {phase.timeout:.0f} s, at {phase.done:,} of {phase.total:,}"
            ) from None


async def pipeline(
    send: Callable[[int], Awaitable[asyncio.Future]],
    count: int,
    inflight: int,
    pacer: Pacer,
    on_ack: Callable[[], None],
) -> None:
    """Send messages 0..count-1 with at most `inflight` awaiting their ack: a sliding window.

    `send(i)` puts message i on the wire and returns the future of its acknowledgement. The caller
    bounds the time (`measured`), so a server that stops acking cannot hang this.
    """
    slots = asyncio.Semaphore(inflight)
    failures: list[BaseException] = []

    def acked(fut: asyncio.Future) -> None:
        slots.release()
        if fut.cancelled():
            failures.append(asyncio.CancelledError())
        elif fut.exception() is not None:
            failures.append(fut.exception())
        else:
            on_ack()

    pacer.start()
    for i in range(count):
        await slots.acquire()
        if failures:
            break
        delay = pacer.delay(i)
        if delay > 0:
            await asyncio.sleep(delay)
        (await send(i)).add_done_callback(acked)
    for _ in range(inflight):  # wait for the last acks
        await slots.acquire()
    if failures:
        raise BenchError(f"{len(failures)} publish(es) not acknowledged, first: {failures[0]!r}")


# CPU of the client and of the server


def find_pids(comm: str, cmdline_word: str | None = None) -> list[int]:
    """PIDs whose /proc/<pid>/comm is `comm` (and whose command line mentions `cmdline_word`)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as f:
                if f.read().strip() != comm:
                    continue
            if cmdline_word is not None:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if cmdline_word.encode() not in f.read():
                        continue
        except OSError:  # exited meanwhile, or not ours to read
            continue
        pids.append(int(entry))
    return pids


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time of a whole process (all its threads), from /proc/<pid>/stat."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # the command name may contain spaces
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime


class CpuSampler:
    """CPU % (100 = one core) of this process and of the server processes between samples."""

    def __init__(self, server_pids: list[int]) -> None:
        self.server_pids = server_pids
        self.last = self._read()

    def _read(self) -> tuple[float, float, float | None]:
        client = cpu_seconds(os.getpid()) or 0.0
        server = [cpu_seconds(p) for p in self.server_pids]
        readable = [s for s in server if s is not None]
        total = sum(readable) if readable and len(readable) == len(server) else None
        return time.perf_counter(), client, total

    def sample(self) -> tuple[float, float | None]:
        """(client %, server %) since the previous sample; server None when it cannot be read."""
        now = self._read()
        wall = max(now[0] - self.last[0], 1e-9)
        client = 100 * (now[1] - self.last[1]) / wall
        server = None if now[2] is None or self.last[2] is None else 100 * (now[2] - self.last[2]) / wall
        self.last = now
        return client, server


def bottleneck(client_pct: float, server_pct: float | None) -> str | None:
    """Whichever process is nearer to one full core.

    The client is one Python thread, so one core is its ceiling; the servers can use more, but on
    two cores shared with the client one core is also about what they get.
    """
    if server_pct is None:
        return None
    return "client" if (min(client_pct, 100), client_pct) >= (min(server_pct, 100), server_pct) else "server"


# Measured phases


class Phase:
    """One timed phase: messages done, wall time, CPU of client and server, and a progress line.

    The caller counts into `done`; a thread reports progress twice a second, so the message loop
    pays nothing for it. `expired()` bounds the loops of blocking clients; asyncio ones use `measured`.
    """

    def __init__(self, label: str, total: int, server_pids: list[int], timeout: float) -> None:
        self.label, self.total, self.server_pids, self.timeout = label, total, server_pids, timeout
        self.done = 0
        self.seconds = 0.0
        self.client_cpu_pct = 0.0
        self.server_cpu_pct: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._whole = CpuSampler(self.server_pids)
        self.started = time.perf_counter()
        self.deadline = time.monotonic() + self.timeout
        self._thread = threading.Thread(target=self._report, daemon=True)
        self._thread.start()

    def finish(self) -> None:
        """Stop the clock; idempotent, so callback-driven clients can call it from several places."""
        if self._thread is None or self._stop.is_set():
            return
        self.seconds = time.perf_counter() - self.started
        self.client_cpu_pct, self.server_cpu_pct = self._whole.sample()
        self._stop.set()
        self._thread.join()
        self._line(self.done / max(self.seconds, 1e-9), self.client_cpu_pct, self.server_cpu_pct, end="\n")

    def expired(self) -> bool:
        return time.monotonic() > self.deadline

    def check_complete(self) -> None:
        if self.done < self.total:
            raise BenchError(f"{self.label}: only {self.done:,} of {self.total:,} in {self.seconds:.0f} s")

    def __enter__(self) -> Phase:
        self.start()
        return self

    def __exit__(self, exc_type, *_) -> None:
        self.finish()
        if exc_type is None:
            self.check_complete()

    def _report(self) -> None:
        recent = CpuSampler(self.server_pids)
        last_done, tty = 0, sys.stderr.isatty()
        every = 0.5 if tty else 5.0
        while not self._stop.wait(every):
            client, server = recent.sample()
            done = self.done
            self._line((done - last_done) / every, client, server, end="\r" if tty else "\n")
            last_done = done

    def _line(self, rate: float, client: float, server: float | None, end: str) -> None:
        server_text = "?" if server is None else f"{server:.0f}%"
        print(
            f"{self.label}: {self.done:,}/{self.total:,}  {rate:,.0f} msg/s  "
            f"cpu client {client:.0f}% server {server_text}   ",
            end=end,
            file=sys.stderr,
            flush=True,
        )


def best(runs: dict[str, Phase]) -> tuple[str, Phase]:
    """The faster of several ways to drive the same client (all shown on stderr), as (variant, phase)."""
    for variant, phase in runs.items():
        print(f"  {variant}: {phase.done / max(phase.seconds, 1e-9):,.0f} msg/s", file=sys.stderr)
    return max(runs.items(), key=lambda item: item[1].done / max(item[1].seconds, 1e-9))


def result(
    system: str,
    client: str,
    args: argparse.Namespace,
    phase: Phase,
    latencies: Latencies | None = None,
    variant: str | None = None,
) -> dict:
    """The result line: the keys every peer (and ferrymq) reports, None where a key does not apply.

    `variant` says how the client was driven (loop, pipelining, acks), since that moves the figures.
    """
    seconds = max(phase.seconds, 1e-9)
    pct = latencies.percentiles() if latencies is not None else dict.fromkeys(Latencies().percentiles())
    server = phase.server_cpu_pct
    return {
        "system": system,
        "client": client,
        "scenario": args.scenario,
        "messages": phase.done,
        "body_bytes": args.body_size,
        "seconds": round(phase.seconds, 3),
        "msgs_per_s": round(phase.done / seconds),
        "mb_per_s": round(phase.done * args.body_size / seconds / 1e6, 1),
        **pct,
        "client_cpu_pct": round(phase.client_cpu_pct, 1),
        "server_cpu_pct": None if server is None else round(server, 1),
        "bottleneck": bottleneck(phase.client_cpu_pct, server),
        "variant": variant,
    }


def emit(line: dict) -> None:
    print(json.dumps(line), flush=True)
