"""Spark benchmarks for the "ferrymq" data source (results in bench/results/spark-*.json).

    .venv/bin/python bench/spark_bench.py read --count 1000000 --runs 7 --save bench/results/spark-read.json
    .venv/bin/python bench/spark_bench.py stream --rate 10000 --save bench/results/spark-stream.json
    .venv/bin/python bench/spark_bench.py replay --count 1000000 --save bench/results/spark-replay.json
    .venv/bin/python bench/spark_bench.py per-minute --save bench/results/spark-per-minute.json

`read`: a batch read of COUNT messages of 1 KB from a throwaway `ferrymq dev` into Spark's noop
sink, against Spark reading the same rows from a local Parquet file (median of --runs runs each).
Each message has its own random body (`--bodies same` gives all one body, which Parquet's
dictionary encoding stores once for the whole column).
`stream`: a producer process sends at RATE msg/s while a streaming query (default trigger: as soon
as the last batch ends) reads into the noop sink; micro-batch durations after a warm-up.
`replay`: `ferrymq spark replay` of COUNT messages to a new topic, read once (the count observed
as rows go by) against the former way, a count() job and then the copy (two reads); the two
alternate, --runs times each.
`per-minute`: docs/spark.md's streaming example (orders per minute into Parquet, offsets mirrored
to a consumer group), spark-submitted to a standalone cluster on loopback with ferrymq shipped as
the docs say, while a producer sends at RATE msg/s; micro-batch durations from Spark's event log
after a warm-up, and the group's lag sampled through the admin API.
read, stream and replay run Spark local[2]. All record the machine's load average, since the
machine is shared, and CPU seconds of this process and its descendants (Spark's JVMs and Python
workers, the broker) per message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

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


async def create_topic(namesrv: str, topic: str, queues: int) -> None:
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, queue_nums=queues)
        for _ in range(200):
            if await admin.instance.existing_route(topic) is not None:
                return
            await asyncio.sleep(0.05)
    raise RuntimeError(f"topic {topic} got no route")


def tree_cpu(root: int | None = None) -> float:
    """CPU seconds (user + system) used so far by `root` (this process) and its live descendants."""
    ticks = os.sysconf("SC_CLK_TCK")
    stats = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry.name)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    wanted, total = {root or os.getpid()}, 0
    while True:
        more = {pid for pid, (ppid, _) in stats.items() if ppid in wanted} - wanted
        if not more:
            break
        wanted |= more
    total = sum(stats[pid][1] for pid in wanted if pid in stats)
    return total / ticks


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


def bench_replay(args) -> dict:
    from ferrymq.spark.replay import replay, replay_counted, source_frame

    with cluster(None) as c:
        asyncio.run(load(c.namesrv, "ReplayBench", args.queues, args.count, args.body_size, args.bodies))
        spark = spark_session()
        source = source_frame(spark, c.namesrv, "ReplayBench")
        source.limit(10).collect()  # Python workers started before the clock

        def two_pass(target: str) -> int:
            count = source.count()
            replay(source, c.namesrv, target)
            return count

        def one_pass(target: str) -> int:
            return replay_counted(spark, source, c.namesrv, target, lambda line: None)

        variants = {"two-pass (count, then copy)": two_pass, "one-pass (observed count)": one_pass}
        runs: dict[str, list[dict]] = {name: [] for name in variants}
        load_before = os.getloadavg()
        for i in range(args.runs):
            order = list(variants) if i % 2 == 0 else list(reversed(variants))
            for name in order:
                target = f"ReplayBenchTo{i}{'one' if 'one' in name else 'two'}"
                asyncio.run(create_topic(c.namesrv, target, args.queues))
                cpu, started = tree_cpu(), time.perf_counter()
                count = variants[name](target)
                seconds, cpu = time.perf_counter() - started, tree_cpu() - cpu
                assert count == args.count, f"{name} counted {count} of {args.count}"
                runs[name].append({"s": round(seconds, 2), "cpu_us_per_msg": round(1e6 * cpu / count, 1)})
                print(name, runs[name][-1], file=sys.stderr, flush=True)
        load_after = os.getloadavg()
        spark.stop()
    results = []
    for name, measured in runs.items():
        median = statistics.median(r["s"] for r in measured)
        results.append({
            "variant": name,
            "runs": measured,
            "median_s": median,
            "msgs_per_s": round(args.count / median),
            "cpu_us_per_msg_median": statistics.median(r["cpu_us_per_msg"] for r in measured),
        })  # fmt: skip
    return {
        "params": vars(args),
        "load_average_1_5_15": {"before": load_before, "after": load_after},
        "results": results,
        "one_pass_vs_two_pass_time_ratio": round(results[1]["median_s"] / results[0]["median_s"], 2),
    }


def docs_example(name: str) -> str:
    """The `# file: NAME` block of docs/spark.md."""
    doc = (Path(__file__).parents[1] / "docs" / "spark.md").read_text()
    found = re.search(rf"^```python\n(# file: {re.escape(name)}\n.*?)^```", doc, re.S | re.M)
    if found is None:
        raise SystemExit(f"docs/spark.md has no block for {name}")
    return found[1]


def progress_events(events: Path) -> list[dict]:
    """The QueryProgressEvents of the Spark event logs in `events` (written uncompressed)."""
    out = []
    for log in (path for path in events.rglob("*") if path.is_file() and "appstatus" not in path.name):
        for line in log.read_text(errors="replace").splitlines():
            if "QueryProgressEvent" in line:
                try:
                    progress = json.loads(line)["progress"]
                except (ValueError, KeyError):
                    continue  # the last line of a log cut off by the kill
                # the event log holds the progress's fields only, not its derived numInputRows
                progress["numInputRows"] = sum(source["numInputRows"] for source in progress["sources"])
                out.append(progress)
    return sorted(out, key=lambda p: p["batchId"])


async def group_lag(namesrv: str, group: str, topic: str) -> int | None:
    async with Admin(namesrv) as admin:
        try:
            progress = await admin.consumer_progress(group, topic)
        except Exception:
            return None
    return sum(p.lag for p in progress) if progress else None


def bench_per_minute(args) -> dict:
    from ferrymq.spark.standalone import SPARK_SUBMIT, spark_env, standalone

    topic, group = "Orders", "orders-per-minute"
    with cluster(None) as c, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        asyncio.run(load(c.namesrv, topic, args.queues, 4, args.body_size))
        (work / "orders_per_minute.py").write_text(docs_example("orders_per_minute.py"))
        package = Path(__import__("ferrymq").__file__).parent
        subprocess.run(
            [sys.executable, "-m", "zipfile", "-c", str(work / "ferrymq.zip"), str(package)], check=True
        )
        (work / "events").mkdir()
        with (
            standalone(work / "spark", cores=args.cores, memory="2g") as spark_cluster,
            (work / "job.log").open("wb") as job_log,
        ):
            cpu_before = tree_cpu()
            # zip: as docs/spark.md ships it (pure Python on executors); installed: ferrymq on the
            # nodes' PYTHONPATH already, C accelerators included
            ship = (["--py-files", str(work / "ferrymq.zip")] if args.ship == "zip" else
                    ["--conf", f"spark.executorEnv.PYTHONPATH={package.parent}"])  # fmt: skip
            job = subprocess.Popen(
                [str(SPARK_SUBMIT), "--master", spark_cluster.url, *ship,
                 "--conf", f"spark.pyspark.python={sys.executable}", "--conf", "spark.eventLog.enabled=true",
                 "--conf", f"spark.eventLog.dir={work / 'events'}", "--conf", "spark.eventLog.compress=false",
                 "--conf", "spark.ui.enabled=false",
                 "--conf", "spark.sql.shuffle.partitions=2",
                 str(work / "orders_per_minute.py"), "--namesrv", c.namesrv, "--topic", topic,
                 "--out", str(work / "out"), "--checkpoint", str(work / "ck")],
                cwd=work, env=spark_env(), stdout=subprocess.DEVNULL, stderr=job_log,
                start_new_session=True,
            )  # fmt: skip
            try:
                deadline = time.monotonic() + 180
                while asyncio.run(group_lag(c.namesrv, group, topic)) != 0:  # the first batch is mirrored
                    if job.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit(
                            f"the job never caught up:\n{(work / 'job.log').read_text()[-3000:]}"
                        )
                    time.sleep(1)
                load_before = os.getloadavg()
                producer = subprocess.Popen(
                    [sys.executable, "-c", PRODUCER, c.namesrv, topic, str(args.rate), str(args.seconds),
                     str(args.body_size)], stdout=subprocess.PIPE, text=True,
                )  # fmt: skip
                lags = []
                while producer.poll() is None:
                    lags.append(asyncio.run(group_lag(c.namesrv, group, topic)))
                    print("lag", lags[-1], file=sys.stderr, flush=True)
                    time.sleep(5)
                assert producer.stdout is not None
                sent, achieved = map(int, producer.stdout.read().split())
                load_after = os.getloadavg()
                settle = time.monotonic() + 60
                while (lag := asyncio.run(group_lag(c.namesrv, group, topic))) and time.monotonic() < settle:
                    time.sleep(1)
                cpu = tree_cpu() - cpu_before
            finally:
                os.killpg(job.pid, signal.SIGTERM)
                job.wait(60)
            progress = [p for p in progress_events(work / "events") if p["numInputRows"] > 0]
    steady = progress[args.warmup :] or progress
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
            "batch_parts_ms_median": {
                part: statistics.median(p["durationMs"].get(part, 0) for p in steady)
                for part in sorted({part for p in steady for part in p["durationMs"]})
            },
            "group_lag_samples": lags,
            "group_lag_after": lag,
            "cpu_us_per_msg": round(1e6 * cpu / sent, 1),
        },
    }


SUITES = {"read": bench_read, "stream": bench_stream, "replay": bench_replay, "per-minute": bench_per_minute}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("suite", choices=list(SUITES))
    parser.add_argument("--cores", type=int, default=2, help="per-minute: the standalone worker's cores")
    parser.add_argument(
        "--ship", choices=["zip", "installed"], default="zip",
        help="per-minute: ferrymq reaches executors through --py-files (as the docs say), or is on their "
        "PYTHONPATH already (with its C accelerators)",
    )  # fmt: skip
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
        **SUITES[args.suite](args),
    }
    print(json.dumps(result))
    if save:
        with open(save, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
