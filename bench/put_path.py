"""The broker's own CPU per single send, without sockets: a real Broker in this process and its send
handler called with SEND_MESSAGE_V2 requests as the SDK makes them (decoded, as the remoting codec
hands them over), ASYNC_FLUSH. It times what the send processor, put service and store do per
message, apart from the network and the codec, so a change to that path can be judged on a loaded
machine (CPU time of the loop thread, best of several rounds).

    PYTHONPATH=<tree>/src .venv/bin/python bench/put_path.py [--count 20000] [--rounds 5] [--save FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from ferrymq.bench.machine import machine_info
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.processors.send import SendProcessor
from ferrymq.broker.server import Broker
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.server import NameServer
from ferrymq.protocol.codes import RequestCode
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.store import StoreConfig

TOPIC = "PutPath"
PROPS = "UNIQ_KEY\x017F0000010001B4AAC2F3A1B2C3D4E5F6\x02WAIT\x01true\x02TAGS\x01TagA\x02"


class Peer:
    """The one thing the send handler asks of its connection: the producer's address."""

    remote_address = "127.0.0.1:40000"


def request(queue_id: int, body: bytes) -> RemotingCommand:
    ext = {
        "a": "PutPathGroup", "b": TOPIC, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0",
        "g": str(time.time_ns() // 1_000_000), "h": "0", "i": PROPS, "j": "0", "k": "false",
    }  # fmt: skip
    return RemotingCommand(int(RequestCode.SEND_MESSAGE_V2), ext_fields=ext, body=body)


@contextlib.asynccontextmanager
async def running_broker(root: Path) -> AsyncIterator[Broker]:
    """A NameServer and a Broker (ASYNC_FLUSH, one 1 GiB CommitLog segment) on free ports, stopped after."""
    namesrv = NameServer(NamesrvConfig(listen_host="127.0.0.1", listen_port=0))
    await namesrv.start()
    store = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=1 << 30)
    broker = Broker(
        BrokerConfig(namesrv_addr=f"127.0.0.1:{namesrv.port}", listen_host="127.0.0.1", listen_port=0,
                     ha_listen_port=0, store=store)
    )  # fmt: skip
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()
        await namesrv.stop()


async def measure(count: int, rounds: int, root: Path) -> list[float]:
    async with running_broker(root) as broker:
        send = SendProcessor(broker.puts, broker.config.region_id, broker.config.trace_on).send
        peer = Peer()
        body = b"x" * 1024
        requests = [request(i % 4, body) for i in range(count)]
        answer = await send(peer, requests[0])  # type: ignore[arg-type]
        assert answer.code == 0, answer
        per_send = []
        for _ in range(rounds):
            started = time.thread_time()
            for r in requests:
                await send(peer, r)  # type: ignore[arg-type]
            per_send.append((time.thread_time() - started) / count * 1e6)
            await asyncio.sleep(0.05)  # the dispatcher's turn
        return per_send


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--save", type=Path)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        per_send = asyncio.run(measure(args.count, args.rounds, Path(tmp)))
    result = {
        "count": args.count,
        "us_per_send_rounds": [round(x, 2) for x in per_send],
        "us_per_send_best": round(min(per_send), 2),
        "machine": machine_info(),
    }
    print(json.dumps(result))
    if args.save:
        args.save.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
