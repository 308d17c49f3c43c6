"""`ferrymq bench pull`: the broker's CPU per PULL_MESSAGE, by subscription kind.

The pull processor runs in this process against a broker with a loaded store, so the figure is
the broker's own work per pull (CPU time, not wall time: other processes on the machine do not
count), without sockets or a client. Scenarios: every message (`*`), a tag filter matching half,
a SQL92 filter matching half, and a group under consumption control (a rate limit too high to
bite), so that the cost of filters and controls next to the plain pull is in plain view.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from ferrymq.bench.client import Progress
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.processors.pull import PullProcessor
from ferrymq.broker.server import Broker
from ferrymq.client import Message, Producer
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.server import NameServer
from ferrymq.protocol.bodies import RATE_LIMIT, SubscriptionGroupConfig
from ferrymq.protocol.codes import RequestCode
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.store import StoreConfig

TOPIC, QUEUES = "BenchPull", 4
SCENARIOS = [  # (name, group, expression type, expression)
    ("every message", "all", "TAG", "*"),
    ("tag filter, half match", "tags", "TAG", "A"),
    ("SQL92 filter, half match", "sql", "SQL92", "region = 'eu' AND amount > 10"),
    ("rate-limited group", "limited", "TAG", "*"),
]


async def pull_bench(messages: int, body_size: int, rounds: int, progress: Progress) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="ferrymq-bench-pull-") as tmp:
        namesrv = NameServer(NamesrvConfig(listen_host="127.0.0.1", listen_port=0))
        await namesrv.start()
        broker = Broker(BrokerConfig(
            namesrv_addr=f"127.0.0.1:{namesrv.port}", listen_host="127.0.0.1", listen_port=0,
            enable_property_filter=True, store=StoreConfig(store_path_root_dir=Path(tmp)),
        ))  # fmt: skip
        await broker.start()
        try:
            await _load(f"127.0.0.1:{namesrv.port}", broker, messages, body_size, progress)
            limited = SubscriptionGroupConfig("limited", attributes={RATE_LIMIT: "1e12"})
            broker.groups.put(limited)
            broker.consumption.update(limited)
            processor = PullProcessor(broker.reads)
            return [
                await _measure(processor, broker, name, group, kind, expression, rounds, progress)
                for name, group, kind, expression in SCENARIOS
            ]
        finally:
            await broker.stop()
            await namesrv.stop()


async def _load(namesrv: str, broker: Broker, count: int, body_size: int, progress: Progress) -> None:
    body = b"x" * body_size
    async with Producer("ferrymq-bench", namesrv, auto_batch=True) as producer:
        for start in range(0, count, 1000):
            batch = range(start, min(start + 1000, count))
            await asyncio.gather(*(producer.send(Message(TOPIC, body, tags="AB"[i % 2], properties={
                "region": ("eu", "us")[i % 2], "amount": str(i % 100)})) for i in batch))  # fmt: skip
            progress("loading", batch.stop, count)
    await asyncio.to_thread(broker.store.wait_dispatched)


async def _measure(processor, broker, name, group, kind, expression, rounds, progress) -> dict:
    pulls = found = 0
    seconds = 0.0
    for r in range(rounds):
        for queue in range(QUEUES):
            offset, end = 0, broker.store.get_max_offset(TOPIC, queue)
            while offset < end:
                request = RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields={
                    "consumerGroup": group, "topic": TOPIC, "queueId": str(queue), "queueOffset": str(offset),
                    "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "-1", "suspendTimeoutMillis": "0",
                    "subscription": expression, "subVersion": "0", "expressionType": kind,
                })  # fmt: skip
                started = time.process_time()
                response = await processor.pull(None, request)
                seconds += time.process_time() - started
                offset = int(response.ext_fields["nextBeginOffset"])
                pulls += 1
                found += _records(response.body)
        progress(name, r + 1, rounds)
    return {
        "system": "ferrymq",
        "scenario": f"pull: {name}",
        "pulls": pulls,
        "us_cpu_per_pull": round(seconds / pulls * 1e6, 1),
        "messages_returned": found,
        "us_cpu_per_message_returned": round(seconds / max(found, 1) * 1e6, 2),
    }


def _records(body: bytes) -> int:
    """How many stored records a pull answer holds (each starts with its total size)."""
    count = pos = 0
    while pos + 4 <= len(body):
        pos += int.from_bytes(body[pos : pos + 4], "big")
        count += 1
    return count
