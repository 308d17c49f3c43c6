"""What grpcio itself costs, with no proxy behind it: a MessagingService servicer that answers from
prebuilt messages (ReceiveMessage streams `batch` 1 KB messages; SendMessage takes `batch` 1 KB
messages and returns a prebuilt answer), in its own process on uvloop like the proxy, driven by the
same kind of grpc.aio client as `ferrymq bench proxy`. CPU per message of server and client: the
least any Python gRPC proxy pays per message, against which the proxy's figures are read.

    .venv/bin/python bench/grpc_floor.py --runs 3 --save bench/results/grpc-floor.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import grpc

from ferrymq.bench.client import CpuMeter
from ferrymq.bench.machine import machine_info
from ferrymq.bench.processes import free_port
from ferrymq.proxy.v2 import messaging_pb2 as pb
from ferrymq.proxy.v2 import messaging_pb2_grpc as pb_grpc

BODY = os.urandom(1024)


class Prebuilt(pb_grpc.MessagingServiceServicer):
    def __init__(self, batch: int) -> None:
        self.frame = pb.ReceiveMessageResponse(message=pb.Message(body=BODY, topic=pb.Resource(name="T")))
        self.sent = pb.SendMessageResponse(entries=[pb.SendResultEntry(message_id="x") for _ in range(batch)])

    async def ReceiveMessage(self, request, context):
        for _ in range(request.batch_size):
            yield self.frame

    async def SendMessage(self, request, context):
        return self.sent


async def serve(port: int, batch: int) -> None:
    server = grpc.aio.server()
    pb_grpc.add_MessagingServiceServicer_to_server(Prebuilt(batch), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


async def drive(port: int, count: int, batch: int, inflight: int, server_pid: int) -> dict:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stub = pb_grpc.MessagingServiceStub(channel)
    receive = pb.ReceiveMessageRequest(batch_size=batch)
    send = pb.SendMessageRequest(messages=[pb.Message(body=BODY, topic=pb.Resource(name="T"))] * batch)
    calls = count // batch // inflight

    async def streams() -> None:
        for _ in range(calls):
            async for _ in stub.ReceiveMessage(receive):
                pass

    async def sends() -> None:
        for _ in range(calls):
            await stub.SendMessage(send)

    figures = {}
    await stub.SendMessage(send)
    for name, worker in (("stream", streams), ("send", sends)):
        meter = CpuMeter(server_pid)
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(inflight)))
        seconds = time.perf_counter() - started
        cpu = meter.result(calls * inflight * batch)
        figures[name] = {
            "msgs_per_s": round(calls * inflight * batch / seconds),
            "server_us_per_msg": cpu["broker_us_per_msg"],
            "client_us_per_msg": cpu["client_us_per_msg"],
        }
    await channel.close()
    return figures


def one_run(count: int, batch: int, inflight: int) -> dict:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port), "--batch", str(batch)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError("the gRPC server did not start")
        load = os.getloadavg()[0]
        figures = asyncio.run(drive(port, count, batch, inflight, server.pid))
    finally:
        server.kill()
        server.wait()
    return {"batch": batch, "inflight": inflight, **figures, "load_average_1m_at_start": round(load, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", type=int, default=64_000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--inflight", type=int, default=8)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--save")
    args = parser.parse_args()
    from ferrymq.net import install_uvloop

    install_uvloop()
    if args.serve:
        asyncio.run(serve(args.serve, args.batch))
        return
    runs = [one_run(args.count, args.batch, args.inflight) for _ in range(args.runs)]
    middle = statistics.median_low(r["stream"]["server_us_per_msg"] for r in runs)
    report = {
        "suite": "grpc-floor",
        "command": f".venv/bin/python bench/grpc_floor.py --runs {args.runs} --count {args.count} "
        f"--batch {args.batch} --inflight {args.inflight}",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
        "grpcio": grpc.__version__,
        "median_run": next(r for r in runs if r["stream"]["server_us_per_msg"] == middle),
        "all_runs": runs,
    }
    if args.save:
        Path(args.save).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report["median_run"]))


if __name__ == "__main__":
    main()
