"""Spark benchmarks for the "ferrymq" data source (results in bench/results/spark-*.json).

    .venv/bin/python bench/spark_bench.py read --count 1000000 --runs 7 --save bench/results/spark-read.json
    .venv/bin/python bench/spark_bench.py stream --rate 10000 --save bench/results/spark-stream.json

`read`: a batch read of COUNT messages of 1 KB from a throwaway `ferrymq dev` into Spark's noop
sink, against Spark reading the same rows from a local Parquet file (median of --runs runs each).
Each message has its own random body (`--bodies same` gives all one body, which Parquet's
dictionary encoding stores once for the whole column).
`stream`: a producer process sends at RATE msg/s while a streaming query (default trigger: as soon
as the last batch ends) reads into the noop sink; micro-batch durations after a warm-up.
Both run Spark local[2] and record the machine's load average, since the machine is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime

from ferrymq.bench.client import cluster
from ferrymq.bench.machine import machine_info
from ferrymq.client import Admin, Message, Producer


def spark_session():
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from ferrymq.spark import LOCAL_CONF
    from ferrymq.spark import spark_session as session

    return session("local[2]", "ferrymq-bench", {**LOCAL_CONF, "spark.driver.memory": "2g"})


async def load(
    namesrv: str, topic: str, queues: int, count: int, body_size: int, bodies: str = "same"
) -> None:
    """COUNT messages of BODY_SIZE bytes: each its own random body, or all one random body."""
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, queue_nums=queues)
        for _ in range(200):
            if await admin.instance.existing_route(topic) is not None:
                break
            await asyncio.sleep(0.05)
    same = os.urandom(body_size)

    def body() -> bytes:
        return os.urandom(body_size) if bodies == "random" else same

    async with Producer("spark-bench", namesrv) as producer:

        async def worker(n: int) -> None:
            for start in range(0, n, 64):
                await producer.send_batch([Message(topic, body()) for _ in range(min(64, n - start))])

        await asyncio.gather(*(worker(count // 4) for _ in range(4)))


def timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


# `--sink every-column`: an aggregate that reads every column of every row. The noop sink reads none:
# Parquet's scan then hands over rows whose values are never decoded into rows, while a Python data
# source's rows are always copied (Spark's mapInArrow projects each into an UnsafeRow).
EVERY_COLUMN = [
    "count(distinct topic, broker_name)",
    "sum(queue_id + queue_offset + commitlog_offset + reconsume_times)",
    "sum(length(msg_id) + size(keys) + coalesce(length(tags), 0) + size(properties) + length(body))",
    "max(born_timestamp)",
    "max(store_timestamp)",
]


def read_into_sink(df, sink: str) -> None:
    if sink == "noop":
        df.write.format("noop").mode("overwrite").save()
    else:
        df.selectExpr(*EVERY_COLUMN).collect()


def bench_read(args) -> dict:
    with cluster(None) as c:
        asyncio.run(load(c.namesrv, "SparkBench", args.queues, args.count, args.body_size, args.bodies))
        spark = spark_session()
        df = spark.read.format("ferrymq").option("namesrv", c.namesrv).option("topic", "SparkBench").load()
        df.limit(10).collect()  # Python workers started before the clock
        load_before = os.getloadavg()
        ferry = [timed(lambda: read_into_sink(df, args.sink)) for _ in range(args.runs)]
        with tempfile.TemporaryDirectory() as tmp:
            df.write.parquet(f"{tmp}/rows.parquet")
            parquet_df = spark.read.parquet(f"{tmp}/rows.parquet")
            parquet = [timed(lambda: read_into_sink(parquet_df, args.sink)) for _ in range(args.runs)]
        load_after = os.getloadavg()
        spark.stop()
    ferry_s, parquet_s = statistics.median(ferry), statistics.median(parquet)
    return {
        "params": vars(args),
        "load_average_1_5_15": {"before": load_before, "after": load_after},
        "results": [
            {
                "source": "ferrymq",
                "runs_s": [round(s, 2) for s in ferry],
                "median_s": round(ferry_s, 2),
                "msgs_per_s": round(args.count / ferry_s),
                "mb_per_s": round(args.count * args.body_size / ferry_s / 1e6, 1),
            },
            {
                "source": "parquet (local file, same rows)",
                "runs_s": [round(s, 2) for s in parquet],
                "median_s": round(parquet_s, 2),
                "msgs_per_s": round(args.count / parquet_s),
            },
        ],
        "ferrymq_vs_parquet_time_ratio": round(ferry_s / parquet_s, 2),
    }


PRODUCER = """
import asyncio, os, sys, time
from ferrymq.client import Message, Producer
namesrv, topic = sys.argv[1:3]
rate, seconds, size = int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
async def main():
    body = os.urandom(size)
    async with Producer("spark-bench-rate", namesrv) as producer:
        tick, per_tick, sent = 0.01, max(1, int(rate * 0.01)), 0
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            await producer.send_batch([Message(topic, body) for _ in range(per_tick)])
            sent += per_tick
            delay = started + sent / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        print(sent, round(sent / (time.monotonic() - started)), flush=True)
asyncio.run(main())
"""


def bench_stream(args) -> dict:
    with cluster(None) as c, tempfile.TemporaryDirectory() as tmp:
        asyncio.run(load(c.namesrv, "SparkStreamBench", args.queues, 4, args.body_size))
        spark = spark_session()
        query = (
            spark.readStream.format("ferrymq")
            .option("namesrv", c.namesrv)
            .option("topic", "SparkStreamBench")
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", f"{tmp}/ck")
            .start()
        )
        producer = subprocess.Popen(
            [sys.executable, "-c", PRODUCER, c.namesrv, "SparkStreamBench", str(args.rate), str(args.seconds),
             str(args.body_size)], stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        load_before = os.getloadavg()
        sent, achieved = map(int, producer.communicate(timeout=args.seconds + 120)[0].split())
        load_after = os.getloadavg()
        query.stop()
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        spark.stop()
    steady = progress[args.warmup :] or progress  # a query that fell behind ran few, long batches
    durations = sorted(p["durationMs"]["triggerExecution"] for p in steady)
    rows = [p["numInputRows"] for p in steady]

    def pct(q: float) -> int:
        return durations[min(len(durations) - 1, int(q * len(durations)))]

    return {
        "params": vars(args),
        "load_average_1_5_15": {"before": load_before, "after": load_after},
        "producer": {"sent": sent, "achieved_msgs_per_s": achieved},
        "results": {
            "batches_measured": len(steady),
            "batch_ms": {"p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99), "max": durations[-1]},
            "rows_per_batch": {"median": statistics.median(rows), "max": max(rows)},
            "batches_under_1s_pct": round(100 * sum(d < 1000 for d in durations) / len(durations), 1),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("suite", choices=["read", "stream"])
    parser.add_argument("--count", type=int, default=300_000)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--warmup", type=int, default=5, help="micro-batches left out at the start")
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--runs", type=int, default=5, help="timed reads of each source (the median counts)")
    parser.add_argument(
        "--sink",
        choices=["noop", "every-column"],
        default="noop",
        help="Spark's noop sink, or an aggregate over every column of every row (see EVERY_COLUMN)",
    )
    parser.add_argument("--body-size", type=int, default=1024)
    parser.add_argument(
        "--bodies",
        choices=["random", "same"],
        default="random",
        help="each message its own random body (as real topics: Parquet stores every body), or one body for "
        "all (Parquet's dictionary encoding then stores a single body for the whole column)",
    )
    parser.add_argument("--save")
    args = parser.parse_args()
    save = args.__dict__.pop("save")
    result = {
        "suite": f"spark-{args.suite}",
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine_info(),
        **(bench_read(args) if args.suite == "read" else bench_stream(args)),
    }
    print(json.dumps(result))
    if save:
        with open(save, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
