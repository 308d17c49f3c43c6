"""What delivery intents cost (docs/ha.md, slave acting master): `ferrymq bench timer` against a classic
group of a master and its slave, with enable_slave_acting_master on (intents: one record and one
replication round trip per chunk of due messages) or off. Run it from each tree's PYTHONPATH for an
A/B; the broker CPU is the master's.

    PYTHONPATH=src python bench/acting_intents.py --acting --pending 20000 --spread 2 --save out.json

With `--transactions N`: N transactions committed by the producer (32 at a time) instead, and how
long each took from its half message's birth to its commit's store time (a commit intent adds one
replication round trip to that).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from ferrymq.bench.client import CpuMeter
from ferrymq.bench.processes import Proc, free_port
from ferrymq.bench.schedule import timer_bench
from ferrymq.client import LocalTransactionState, Message, Producer, PullConsumer, TransactionProducer


def _broker(root: Path, name: str, namesrv: str, env: dict[str, str]) -> Proc:
    args = ["broker", "--namesrv", namesrv, "--listen", f"127.0.0.1:{free_port()}",
            "--cluster", "IntentBench", "--name", "broker-a", "--store-dir", str(root / name)]  # fmt: skip
    return Proc(name, args, root, env, [])


async def main(args: argparse.Namespace) -> dict:
    root = Path(tempfile.mkdtemp(prefix="ferrymq-intents-"))
    namesrv_addr = f"127.0.0.1:{free_port()}"
    setting = {"FERRYMQ_ENABLE_SLAVE_ACTING_MASTER": str(args.acting).lower()}
    namesrv = Proc("namesrv", ["namesrv", "--listen", namesrv_addr], root, {}, [])
    master = _broker(root, "master", namesrv_addr, {**setting, "FERRYMQ_HA_LISTEN_PORT": str(free_port())})
    slave = _broker(root, "slave", namesrv_addr, {**setting, "FERRYMQ_BROKER_ROLE": "SLAVE",
                                                   "FERRYMQ_BROKER_ID": "1"})  # fmt: skip
    procs = [namesrv, master, slave]
    try:
        for proc in procs:
            proc.start()
            await proc.wait_for_line("listening on", 60)
        await slave.wait_for_line("replicating from", 60)
        assert master.popen is not None
        pid = master.popen.pid
        if args.transactions:
            result = await transaction_bench(namesrv_addr, args.transactions, lambda: CpuMeter(pid))
        else:
            result = await timer_bench(
                namesrv_addr, args.pending, args.spread, 5.0, 64, lambda *a: None, lambda: CpuMeter(pid)
            )
    finally:
        for proc in reversed(procs):
            proc.stop()
    result["scenario"] += f", master + slave, enable_slave_acting_master={str(args.acting).lower()}"
    result["intent_waits"] = master.log_text().count("scheduled delivery waits")
    result["intent_left_out"] = master.log_text().count("scheduled delivery goes on without slave")
    return result


async def transaction_bench(namesrv: str, count: int, cpu_factory) -> dict:
    topic = f"BenchTx{time.time_ns()}"
    async with Producer("ferrymq-bench", namesrv) as producer:
        await producer.send(Message(topic, b"route"))  # the topic and its route exist before the clock
    commit = lambda m, a: LocalTransactionState.COMMIT_MESSAGE  # noqa: E731
    async with TransactionProducer("ferrymq-bench-tx", namesrv) as producer:
        cpu, started = cpu_factory(), time.monotonic()
        for first in range(0, count, 32):
            await asyncio.gather(*(
                producer.send_message_in_transaction(Message(topic, b"%d" % i), commit)
                for i in range(first, min(count, first + 32))
            ))  # fmt: skip
        lags = await _commit_lags(namesrv, topic, count)
        seconds = time.monotonic() - started
        used = cpu.result(count)
    lags.sort()
    pick = lambda p: lags[min(len(lags) - 1, int(len(lags) * p / 100))] if lags else None  # noqa: E731
    return {"system": "ferrymq", "scenario": f"transactions: {count} committed, 32 at a time",
            "committed": len(lags), "tx_per_s": round(count / seconds), "commit_ms_p50": pick(50),
            "commit_ms_p99": pick(99), **used}  # fmt: skip


async def _commit_lags(namesrv: str, topic: str, count: int) -> list[int]:
    """Store time of each committed message minus its birth (the half message's), in ms."""
    lags: list[int] = []
    deadline = time.monotonic() + 120
    async with PullConsumer(f"bench-tx-{time.time_ns()}", namesrv, consume_from="first") as consumer:
        await consumer.subscribe(topic)
        while len(lags) < count and time.monotonic() < deadline:
            lags += [
                m.store_timestamp - m.born_timestamp for m in await consumer.poll(1.0) if m.body != b"route"
            ]
    return lags


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--acting", action="store_true", help="enable_slave_acting_master on both brokers")
    parser.add_argument("--pending", type=int, default=20_000)
    parser.add_argument("--spread", type=int, default=2, help="seconds the due times are spread over")
    parser.add_argument("--transactions", type=int, default=0, help="commit this many transactions instead")
    parser.add_argument("--save", type=Path)
    parsed = parser.parse_args()
    started = time.time()
    outcome = asyncio.run(main(parsed))
    outcome["wall_seconds"] = round(time.time() - started, 1)
    print(json.dumps(outcome))
    if parsed.save:
        parsed.save.write_text(json.dumps({"suite": "acting_intents", "params": vars(parsed) | {"save": None},
                                           "results": [outcome]}, indent=2) + "\n")  # fmt: skip
    sys.exit(0)
