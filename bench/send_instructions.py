"""Instructions the SDK spends per single send, by callgrind: a figure the machine's load does not move.

A stub in its own process answers as NameServer and broker at once (a route to itself, every send a
SUCCESS at once), so only the client runs under `valgrind --tool=callgrind`: a Producer makes its
route and connection and sends one message, then sends --sends more, --inflight at once; the same
run without them is subtracted. Its user-space instructions per send are the SDK, the remoting
codec, the event loop (uvloop) and the C library, the kernel's share not included.

    .venv/bin/python bench/send_instructions.py [--tree ../base-checkout] [--sends 2000] [--save FILE]

`--tree` runs that checkout's SDK (its `src` first on PYTHONPATH); several compare in one run.
Run it niced: it counts instructions, so it needs no quiet machine, and it leaves other runs theirs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from codec_instructions import callgrind_instructions

STUB = """
import asyncio, sys
import uvloop
from ferrymq.protocol.bodies import BrokerData, QueueData, TopicRouteData, encode_body
from ferrymq.protocol.codes import RESPONSE_FLAG, RequestCode
from ferrymq.protocol.remoting import FrameDecoder, RemotingCommand


class Stub(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.decoder, self.offset = transport, FrameDecoder(), 0

    def data_received(self, data):
        out = []
        for request in self.decoder.feed(data):
            ext, body = {}, b""
            if request.code == RequestCode.SEND_MESSAGE_V2:
                self.offset += 1
                ext = {"msgId": "7F00000100002A9F0000000000000000", "queueId": request.ext_fields["e"],
                       "queueOffset": str(self.offset), "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
            elif request.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
                queues = QueueData(broker_name="stub", read_queue_nums=4, write_queue_nums=4, perm=6)
                broker = BrokerData(broker_name="stub", cluster="stub", broker_addrs={0: ADDRESS})
                body = encode_body(TopicRouteData(queue_datas=[queues], broker_datas=[broker]))
            if not request.is_oneway:
                answer = RemotingCommand(0, opaque=request.opaque, flag=RESPONSE_FLAG, ext_fields=ext)
                answer.body = body
                out += answer.encode_parts()
        if out:
            self.transport.writelines(out)


async def main():
    global ADDRESS
    server = await asyncio.get_running_loop().create_server(Stub, "127.0.0.1", 0)
    ADDRESS = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    print(ADDRESS, flush=True)
    await asyncio.Event().wait()

uvloop.install()
asyncio.run(main())
"""

CLIENT = """
import asyncio, os, sys
from ferrymq.client import Message, Producer
from ferrymq.net import install_uvloop

async def main(address, sends, inflight):
    body = os.urandom(1024)
    async with Producer("instructions", address) as producer:
        await producer.send(Message("Instructions", body))  # route and connection
        left = sends

        async def worker():
            nonlocal left
            while left > 0:
                left -= 1
                await producer.send(Message("Instructions", body))

        await asyncio.gather(*(worker() for _ in range(inflight)))

install_uvloop()
asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
"""


def instructions(tree: Path, address: str, sends: int, inflight: int, work: Path) -> int:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    return callgrind_instructions(["-c", CLIENT, address, str(sends), str(inflight)], env, work)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tree", type=Path, action="append", help="a checkout to count (default: this one)")
    parser.add_argument("--sends", type=int, default=2000)
    parser.add_argument("--inflight", type=int, default=64)
    parser.add_argument("--save", type=Path)
    args = parser.parse_args()
    trees = [t.resolve() for t in args.tree or [Path(__file__).resolve().parent.parent]]
    stub = subprocess.Popen(
        [sys.executable, "-c", STUB],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(trees[0] / "src")},
    )
    assert stub.stdout is not None
    report: dict[str, int] = {}
    try:
        address = stub.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as work:
            for tree in trees:
                idle = instructions(tree, address, 0, args.inflight, Path(work))
                busy = instructions(tree, address, args.sends, args.inflight, Path(work))
                report[str(tree)] = round((busy - idle) / args.sends)
                print(tree, report[str(tree)], file=sys.stderr)
    finally:
        stub.terminate()
        stub.wait(10)
    print(json.dumps(report, indent=1))
    if args.save:
        params = {"sends": args.sends, "inflight": args.inflight, "body_bytes": 1024}
        args.save.write_text(json.dumps({**params, "instructions_per_send": report}, indent=1) + "\n")


if __name__ == "__main__":
    main()
