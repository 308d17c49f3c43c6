"""The streaming job the restart test runs: ferrymq topic → Parquet, one directory per batch.

The sink is idempotent the way Spark's foreachBatch docs describe: batch N always (over)writes
`out/batch=N`, so a batch Spark replays after a crash replaces its own earlier output. Exactly-once
then rests on the source: a replayed batch must read exactly the same messages.

Run as a script it is a driver of its own (on `--master`, local[1] by default) that can be
SIGKILLed: with `--hang-at K` it writes its K-th batch, touches `--marker`, and hangs before Spark
can commit that batch.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import time


def start_query(spark, namesrv: str, topic: str, checkpoint: str, out: str, *, max_per_trigger=None,
                hang_at=None, marker=None, name="restart-test"):  # fmt: skip
    batches = 0

    def write(df, batch_id: int) -> None:
        nonlocal batches
        df.write.mode("overwrite").parquet(f"{out}/batch={batch_id}")
        batches += 1
        if batches == hang_at:
            pathlib.Path(marker).write_text(str(batch_id))
            time.sleep(600)  # the test kills this driver here, before Spark commits the batch

    reader = (
        spark.readStream.format("ferrymq")
        .option("namesrv", namesrv)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
    )
    if max_per_trigger:
        reader = reader.option("maxMessagesPerTrigger", str(max_per_trigger))
    return (
        reader.load()
        .select("queue_id", "queue_offset", "body")
        .writeStream.queryName(name)
        .foreachBatch(write)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    for arg in ("namesrv", "topic", "checkpoint", "out"):
        parser.add_argument(f"--{arg}", required=True)
    parser.add_argument("--marker")
    parser.add_argument("--max-per-trigger", type=int)
    parser.add_argument("--hang-at", type=int)
    parser.add_argument("--master", default="local[1]")
    args = parser.parse_args()
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from ferrymq.spark import LOCAL_CONF, spark_session

    spark = spark_session(
        args.master, "ferrymq-stream-job", {**LOCAL_CONF, "spark.sql.shuffle.partitions": "1"}
    )
    query = start_query(
        spark, args.namesrv, args.topic, args.checkpoint, args.out,
        max_per_trigger=args.max_per_trigger, hang_at=args.hang_at, marker=args.marker,
    )  # fmt: skip
    query.awaitTermination()


if __name__ == "__main__":
    main()
