"""What grpcio itself costs, with no proxy behind it: a MessagingService servicer that answers from
prebuilt messages (ReceiveMessage streams `batch` 1 KB messages, one per frame as RocketMQ's v2
does; SendMessage takes `batch` 1 KB messages and returns a prebuilt answer), in its own process,
driven by a gRPC client like `ferrymq bench proxy`'s. CPU per message of server and client: the least
any Python gRPC proxy pays per message, against which the proxy's figures are read.

Each variant changes one thing against `base` (grpc.aio server streaming from an async generator on
uvloop, default options, grpc.aio client reading with `async for`), to find what lowers the cost:

    .venv/bin/python bench/grpc_floor.py --runs 3 --save bench/results/grpc-floor.json
    .venv/bin/python bench/grpc_floor.py --variants base,write,sync-server --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc

from ferrymq.bench.client import CpuMeter
from ferrymq.bench.machine import machine_info
from ferrymq.bench.processes import free_port
from ferrymq.proxy.v2 import messaging_pb2 as pb
from ferrymq.proxy.v2 import messaging_pb2_grpc as pb_grpc

BODY = os.urandom(1024)
THROUGHPUT_OPTIONS = [
    ("grpc.optimization_target", "throughput"),
    ("grpc.http2.bdp_probe", 0),
    ("grpc.max_concurrent_streams", 1000),
    ("grpc.http2.write_buffer_size", 1 << 20),
]
BASE = {"server": "aio-gen", "loop": "uvloop", "options": "default", "build": False, "client": "aio-iter"}
VARIANTS: dict[str, dict] = {
    "base": {},
    "write": {"server": "aio-write"},  # `await context.write(frame)` instead of yielding
    "sync-server": {"server": "sync"},  # grpc.server on a thread pool
    "asyncio-loop": {"loop": "asyncio"},  # the default event loop on both sides, not uvloop
    "throughput-options": {"options": "throughput"},  # THROUGHPUT_OPTIONS on server and client
    "built": {"build": True},  # each response built per message, as a proxy must
    "client-read": {"client": "aio-read"},  # `await call.read()` instead of `async for`
    "sync-client": {"client": "sync"},  # blocking stubs in `inflight` threads
}


def _options(name: str) -> list:
    return THROUGHPUT_OPTIONS if name == "throughput" else []


def _frame() -> pb.ReceiveMessageResponse:
    return pb.ReceiveMessageResponse(message=pb.Message(body=BODY, topic=pb.Resource(name="T")))


def _sent(batch: int) -> pb.SendMessageResponse:
    return pb.SendMessageResponse(entries=[pb.SendResultEntry(message_id="x") for _ in range(batch)])


class Answers:
    """The answers, prebuilt once or built per message (the proxy builds each one from a record)."""

    def __init__(self, batch: int, build: bool) -> None:
        self.batch, self.build = batch, build
        self._frame, self._sent = _frame(), _sent(batch)

    def frame(self) -> pb.ReceiveMessageResponse:
        return _frame() if self.build else self._frame

    def sent(self) -> pb.SendMessageResponse:
        return _sent(self.batch) if self.build else self._sent


class AsyncGenerator(pb_grpc.MessagingServiceServicer):
    def __init__(self, answers: Answers) -> None:
        self.answers = answers

    async def ReceiveMessage(self, request, context):
        for _ in range(request.batch_size):
            yield self.answers.frame()

    async def SendMessage(self, request, context):
        return self.answers.sent()


class AsyncWrite(AsyncGenerator):
    async def ReceiveMessage(self, request, context):  # type: ignore[override]
        for _ in range(request.batch_size):
            await context.write(self.answers.frame())


class Blocking(pb_grpc.MessagingServiceServicer):
    def __init__(self, answers: Answers) -> None:
        self.answers = answers

    def ReceiveMessage(self, request, context):
        for _ in range(request.batch_size):
            yield self.answers.frame()

    def SendMessage(self, request, context):
        return self.answers.sent()


def serve(port: int, variant: dict, batch: int, inflight: int) -> None:
    answers = Answers(batch, variant["build"])
    options = _options(variant["options"])
    if variant["server"] == "sync":
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=inflight), options=options)
        pb_grpc.add_MessagingServiceServicer_to_server(Blocking(answers), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        print("ready", flush=True)
        server.wait_for_termination()
        return

    async def run() -> None:
        server = grpc.aio.server(options=options)
        servicer = AsyncWrite if variant["server"] == "aio-write" else AsyncGenerator
        pb_grpc.add_MessagingServiceServicer_to_server(servicer(answers), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        print("ready", flush=True)
        await server.wait_for_termination()

    asyncio.run(run())


def _requests(batch: int) -> tuple[pb.ReceiveMessageRequest, pb.SendMessageRequest]:
    receive = pb.ReceiveMessageRequest(batch_size=batch)
    send = pb.SendMessageRequest(messages=[pb.Message(body=BODY, topic=pb.Resource(name="T"))] * batch)
    return receive, send


def _figures(meter: CpuMeter, started: float, messages: int) -> dict:
    seconds = time.perf_counter() - started
    cpu = meter.result(messages)
    return {
        "msgs_per_s": round(messages / seconds),
        "server_us_per_msg": cpu["broker_us_per_msg"],
        "client_us_per_msg": cpu["client_us_per_msg"],
    }


async def drive_async(port: int, variant: dict, count: int, batch: int, inflight: int, pid: int) -> dict:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=_options(variant["options"]))
    stub = pb_grpc.MessagingServiceStub(channel)
    receive, send = _requests(batch)
    calls = count // batch // inflight

    async def streams() -> None:
        for _ in range(calls):
            if variant["client"] == "aio-read":
                call = stub.ReceiveMessage(receive)
                while await call.read() is not grpc.aio.EOF:
                    pass
            else:
                async for _ in stub.ReceiveMessage(receive):
                    pass

    async def sends() -> None:
        for _ in range(calls):
            await stub.SendMessage(send)

    figures = {}
    await stub.SendMessage(send)
    for name, worker in (("stream", streams), ("send", sends)):
        meter, started = CpuMeter(pid), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(inflight)))
        figures[name] = _figures(meter, started, calls * inflight * batch)
    await channel.close()
    return figures


def drive_sync(port: int, variant: dict, count: int, batch: int, inflight: int, pid: int) -> dict:
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=_options(variant["options"]))
    stub = pb_grpc.MessagingServiceStub(channel)
    receive, send = _requests(batch)
    calls = count // batch // inflight

    def streams() -> None:
        for _ in range(calls):
            for _ in stub.ReceiveMessage(receive):
                pass

    def sends() -> None:
        for _ in range(calls):
            stub.SendMessage(send)

    figures = {}
    stub.SendMessage(send)
    for name, worker in (("stream", streams), ("send", sends)):
        threads = [threading.Thread(target=worker) for _ in range(inflight)]
        meter, started = CpuMeter(pid), time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        figures[name] = _figures(meter, started, calls * inflight * batch)
    channel.close()
    return figures


def one_run(name: str, count: int, batch: int, inflight: int) -> dict:
    variant = {**BASE, **VARIANTS[name]}
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port), "--variants", name,
         "--batch", str(batch), "--inflight", str(inflight)],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError("the gRPC server did not start")
        load = os.getloadavg()[0]
        if variant["client"] == "sync":
            figures = drive_sync(port, variant, count, batch, inflight, server.pid)
        else:
            _set_loop(variant["loop"])
            figures = asyncio.run(drive_async(port, variant, count, batch, inflight, server.pid))
    finally:
        server.kill()
        server.wait()
    return {"variant": name, **figures, "load_average_1m_at_start": round(load, 2)}


def _set_loop(name: str) -> None:
    if name == "uvloop":
        from ferrymq.net import install_uvloop

        install_uvloop()
    else:
        asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())


def _median(runs: list[dict]) -> dict:
    middle = statistics.median_low(r["stream"]["server_us_per_msg"] for r in runs)
    return next(r for r in runs if r["stream"]["server_us_per_msg"] == middle)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", type=int, default=64_000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--inflight", type=int, default=8)
    parser.add_argument("--variants", default="base", help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--save")
    args = parser.parse_args()
    names = args.variants.split(",")
    if args.serve:
        variant = {**BASE, **VARIANTS[names[0]]}
        _set_loop(variant["loop"])
        serve(args.serve, variant, args.batch, args.inflight)
        return
    # runs interleaved, so that a change in the machine's load falls on every variant alike
    runs = [one_run(name, args.count, args.batch, args.inflight) for _ in range(args.runs) for name in names]
    report = {
        "suite": "grpc-floor",
        "command": f".venv/bin/python bench/grpc_floor.py --runs {args.runs} --count {args.count} "
        f"--batch {args.batch} --inflight {args.inflight} --variants {args.variants}",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
        "grpcio": grpc.__version__,
        "variants": {name: {**BASE, **VARIANTS[name]} for name in names},
        "median_runs": {name: _median([r for r in runs if r["variant"] == name]) for name in names},
        "all_runs": runs,
    }
    if args.save:
        Path(args.save).write_text(json.dumps(report, indent=1) + "\n")
    for run in report["median_runs"].values():
        print(json.dumps(run))


if __name__ == "__main__":
    main()
