"""DLedger mode with real broker processes: produce throughput beside a lone broker, and leader failover.

`produce`: rounds alternate a lone broker (classic CommitLog, ASYNC_FLUSH) and a DLedger group of 3
on loopback, each fresh, and run the SDK producer (`ferrymq bench produce`'s) against each: batches
of 32, 8 in flight. Each figure is the median of its rounds; the ratio compares medians of the same
sitting. CPU per message is the master's (with its indexer child) and the client's.

`failover`: each trial starts a fresh group of 3 with the default election settings (200 ms
heartbeats, elections after 1-2 s), runs four steady producers that retry each key until it is
acknowledged, SIGKILLs the master, and measures the time from the kill to the first acknowledgement
after it. It then reads the topic back from the new master: every acknowledged key must be there.

    PYTHONPATH=src:. .venv/bin/python bench/dledger_group.py produce --rounds 5 \
        --save bench/results/dledger-group-produce.json
    PYTHONPATH=src:. .venv/bin/python bench/dledger_group.py failover --trials 20 \
        --save bench/results/dledger-group-failover.json

`faults`: `--clusters` fresh groups, each with its own seed, run `--rounds` kills under load: the
master or a follower (even odds) is SIGKILLed, sends go on, it is restarted and catches up. At the
end every member's store is read offline: it must hold every acknowledged key.

    PYTHONPATH=src:. .venv/bin/python bench/dledger_group.py faults --clusters 10 --rounds 10 \
        --save bench/results/dledger-group-faults.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ferrymq.bench.client import CpuMeter, produce
from ferrymq.bench.dledger import DLedgerCluster, kill_in_turn, stored_bodies, wait_caught_up
from ferrymq.bench.failover import TOPIC, SteadyProducer, read_back
from ferrymq.bench.machine import machine_info, publish


def _quiet(*_: object) -> None:
    pass


async def produce_round(root: Path, dledger: bool, count: int) -> dict:
    settings = {} if dledger else {"dledger": False}
    async with DLedgerCluster(root, members=3 if dledger else 1, broker_settings=settings) as cluster:
        master = await cluster.wait_master(60)
        cpu = CpuMeter(cluster.procs[master].pid)
        followers = [CpuMeter(cluster.procs[n].pid) for n in cluster.brokers if n != master]
        figures = await produce(cluster.namesrv_addr, "DLedgerBench", count, 128, 32, 8, _quiet, cpu)
        following = [f.result(count)["broker_us_per_msg"] for f in followers]
    setup = "dledger group of 3" if dledger else "lone broker"
    return {"setup": setup, **figures, "followers_us_per_msg": following}


async def run_produce(args: argparse.Namespace, work: Path) -> dict:
    rounds: list[dict] = []
    loads = [os.getloadavg()[0]]
    for i in range(args.rounds):
        for dledger in (False, True):
            r = await produce_round(work / f"p{i}-{int(dledger)}", dledger, args.count)
            shutil.rmtree(work / f"p{i}-{int(dledger)}", ignore_errors=True)
            r["load_1m_after"] = os.getloadavg()[0]
            loads.append(r["load_1m_after"])
            rounds.append(r)
            print(json.dumps(r), file=sys.stderr)

    def median(setup: str, key: str) -> float:
        return statistics.median(r[key] for r in rounds if r["setup"] == setup and key in r)

    lone, group = median("lone broker", "msgs_per_s"), median("dledger group of 3", "msgs_per_s")
    return {
        "figure": "produce, batches of 32 x 128 B, 8 in flight: DLedger group of 3 vs a lone broker",
        "lone_msgs_per_s": round(lone),
        "group_msgs_per_s": round(group),
        "ratio_pct": round(100 * group / lone, 1),
        "lone_broker_us_per_msg": median("lone broker", "broker_us_per_msg"),
        "group_leader_us_per_msg": median("dledger group of 3", "broker_us_per_msg"),
        "group_follower_us_per_msg": statistics.median(
            us for r in rounds for us in r["followers_us_per_msg"]
        ),
        "rounds": rounds,
        "load_1m": [round(x, 2) for x in loads],
    }


async def failover_trial(root: Path, warmup: int) -> dict:
    async with DLedgerCluster(root) as cluster:
        old = await cluster.wait_master(60)
        producer = SteadyProducer(cluster.namesrv_addr, f"t{time.monotonic_ns()}", concurrency=4)
        await producer.start()
        try:
            await producer.wait_acks(warmup, 60)
            cluster.procs[old].kill()
            killed_at = time.monotonic()
            new = await cluster.wait_master(60, other_than=old)
            registered_s = time.monotonic() - killed_at
            await producer.wait_acks(warmup, 60)
        finally:
            acks = await producer.stop()
        resumed = acks.first_ack_after(killed_at)
        found, total = await read_back(cluster.namesrv_addr, set(acks.acked))
        return {
            "failover_s": round(resumed - killed_at, 3) if resumed else None,
            "new_master_registered_s": round(registered_s, 3),
            "acked": len(acks.acked),
            "lost": len(set(acks.acked) - found),
            "duplicates": total - len(found),
            "old": old,
            "new": new,
            "load_1m": os.getloadavg()[0],
        }


async def run_failover(args: argparse.Namespace, work: Path) -> dict:
    trials = []
    for i in range(args.trials):
        trials.append(await failover_trial(work / f"f{i}", args.warmup))
        shutil.rmtree(work / f"f{i}", ignore_errors=True)
        print(json.dumps(trials[-1]), file=sys.stderr)
    times = sorted(t["failover_s"] for t in trials if t["failover_s"] is not None)
    q = statistics.quantiles(times, n=100, method="inclusive") if len(times) > 1 else times * 99
    return {
        "figure": "DLedger group of 3: master SIGKILLed under load, until sends are acknowledged again",
        "trials": len(trials),
        "resumed": len(times),
        "p50_s": round(q[49], 3),
        "p99_s": round(q[98], 3),
        "max_s": times[-1] if times else None,
        "lost_total": sum(t["lost"] for t in trials),
        "acked_total": sum(t["acked"] for t in trials),
        "trials_detail": trials,
    }


async def faults_cluster(root: Path, seed: int, rounds: int) -> dict:
    """One fresh group: `rounds` seeded kills and restarts under load, then every member's store
    checked offline for every acknowledged key."""
    async with DLedgerCluster(root) as cluster:
        producer = SteadyProducer(cluster.namesrv_addr, f"s{seed}", concurrency=4)
        await producer.start()
        try:
            await producer.wait_acks(100, 60)
            done = await kill_in_turn(cluster, producer, random.Random(seed), rounds)
        finally:
            acks = await producer.stop()
        await wait_caught_up(cluster, 60)
    missing = {n: len(set(acks.acked) - stored_bodies(root / n, TOPIC)) for n in cluster.brokers}
    return {"seed": seed, "acked": len(acks.acked), "missing_by_member": missing, "rounds": done,
            "load_1m": os.getloadavg()[0]}  # fmt: skip


async def run_faults(args: argparse.Namespace, work: Path) -> dict:
    clusters = []
    for seed in range(args.clusters):
        clusters.append(await faults_cluster(work / f"c{seed}", seed, args.rounds))
        shutil.rmtree(work / f"c{seed}", ignore_errors=True)
        print(json.dumps(clusters[-1]), file=sys.stderr)
    rounds = [r for c in clusters for r in c["rounds"]]
    leader_times = sorted(r["acked_again_s"] for r in rounds if r["was_master"] and r["acked_again_s"])
    return {
        "figure": "DLedger group of 3: seeded SIGKILLs of the master or a follower under load, restarted",
        "clusters": len(clusters),
        "rounds": len(rounds),
        "master_kills": sum(r["was_master"] for r in rounds),
        "acked_total": sum(c["acked"] for c in clusters),
        "missing_total": sum(sum(c["missing_by_member"].values()) for c in clusters),
        "master_kill_acked_again_max_s": leader_times[-1] if leader_times else None,
        "clusters_detail": clusters,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("produce", "failover", "faults"))
    ap.add_argument(
        "--rounds", type=int, default=5, help="produce: rounds of each; faults: kills per cluster"
    )
    ap.add_argument("--clusters", type=int, default=10, help="faults: fresh groups, one seed each")
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--save", type=Path)
    args = ap.parse_args()
    load = os.getloadavg()[0]
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="ferrymq-dledger-bench-"))
    try:
        runner = {"produce": run_produce, "failover": run_failover, "faults": run_faults}[args.what]
        result = asyncio.run(runner(args, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result.update(
        wall_s=round(time.monotonic() - started, 1),
        load_average_1m_at_start=round(load, 2),
        machine=machine_info(),
        date=time.strftime("%Y-%m-%d", time.gmtime()),
        command="bench/dledger_group.py " + " ".join(sys.argv[1:]),
    )
    publish(result, args.save)


if __name__ == "__main__":
    main()
