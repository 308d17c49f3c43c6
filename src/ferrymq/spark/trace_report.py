"""The trace-report job: RocketMQ message traces → Parquet tables and an HTML report with charts.

Per topic and consumer group: produce→consume latency percentiles (a message's first delivery
SubBefore against its Pub), throughput over time (sends per topic, deliveries per group), retries
(redeliveries and failed consumes) and dead letters (what the group's %DLQ% topic holds).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ferrymq.protocol.trace import TRACE_TOPIC
from ferrymq.spark.cluster import Blocking, queue_bounds, topic_queues
from ferrymq.spark.errors import SparkSourceError
from ferrymq.spark.trace_records import DDL, decode_body

DLQ_PREFIX = "%DLQ%"


@dataclass
class Report:
    """What the HTML shows; each table is a list of plain dict rows."""

    records: dict[str, int]  # record type -> count
    latency: list[dict]  # topic, group, deliveries, p50_ms, p90_ms, p99_ms, max_ms
    produced: list[dict]  # bucket, topic, messages
    consumed: list[dict]  # bucket, group, messages
    retries: list[dict]  # topic, group, redeliveries, failed
    send_failures: list[dict]  # topic, failed
    dead_letters: dict[str, int] = field(default_factory=dict)  # group -> messages in %DLQ%group
    bucket_seconds: int = 60


def trace_records(spark: SparkSession, namesrv: str, topic: str = TRACE_TOPIC, **range_options) -> DataFrame:
    """One row per trace record of `topic` (see trace_records.FIELDS)."""
    reader = spark.read.format("ferrymq").option("namesrv", namesrv).option("topic", topic)
    for name, value in range_options.items():
        if value is not None:
            reader = reader.option(name, value)
    bodies = reader.load().select("body").rdd
    return spark.createDataFrame(bodies.flatMap(lambda row: decode_body(row.body)), DDL)


def bucket_seconds(records: DataFrame) -> int:
    """A bucket width that gives about 60 points over the traced span (1 s at least)."""
    row = records.agg(
        (F.max("timestamp").cast("long") - F.min("timestamp").cast("long")).alias("span")
    ).first()
    assert row is not None  # an aggregate without grouping has one row, even over no records
    span = row["span"]
    return max(1, int((span or 0) // 60) or 1)


def build(records: DataFrame) -> tuple[Report, dict[str, DataFrame]]:
    """The report's figures, and the tables to write as Parquet."""
    records = records.cache()
    pubs = records.where("type = 'Pub'")
    first_pub = (
        pubs.where("success")
        .groupBy("msg_id")
        .agg(F.first("topic").alias("topic"), F.min("timestamp").alias("sent"))
    )
    deliveries = records.where("type = 'SubBefore'").select(
        "msg_id", "group", "timestamp", "retry_times", "request_id"
    )
    first_delivery = (
        deliveries.where("retry_times = 0")
        .groupBy("msg_id", "group")
        .agg(F.min("timestamp").alias("delivered"))
        .join(first_pub, "msg_id")
        .withColumn("latency_ms", F.unix_millis("delivered") - F.unix_millis("sent"))
    )
    latency = (
        first_delivery.groupBy("topic", "group")
        .agg(
            F.count("*").alias("deliveries"),
            *(
                F.percentile_approx("latency_ms", q, 10_000).alias(f"p{int(q * 100)}_ms")
                for q in (0.5, 0.9, 0.99)
            ),
            F.max("latency_ms").alias("max_ms"),
        )
        .orderBy("topic", "group")
    )
    width = bucket_seconds(records)
    bucket = (F.floor(F.col("timestamp").cast("long") / width) * width).cast("timestamp").alias("bucket")
    produced = pubs.groupBy(bucket, "topic").agg(F.count("*").alias("messages")).orderBy("bucket", "topic")
    consumed = (
        deliveries.groupBy(bucket, "group").agg(F.count("*").alias("messages")).orderBy("bucket", "group")
    )
    failed_consumes = (
        records.where("type = 'SubAfter' AND NOT success")
        .select("request_id", "msg_id")
        .join(deliveries.select("request_id", "msg_id", "group").dropDuplicates(["request_id", "msg_id"]),
              ["request_id", "msg_id"])
        .groupBy("msg_id", "group")
        .agg(F.count("*").alias("failed"))
    )  # fmt: skip
    redeliveries = (
        deliveries.where("retry_times > 0").groupBy("msg_id", "group").agg(F.count("*").alias("redeliveries"))
    )
    retries = (
        redeliveries.join(failed_consumes, ["msg_id", "group"], "full_outer")
        .join(first_pub.select("msg_id", "topic"), "msg_id", "left")
        .groupBy(F.coalesce("topic", F.lit("?")).alias("topic"), "group")
        .agg(F.sum(F.coalesce("redeliveries", F.lit(0))).alias("redeliveries"),
             F.sum(F.coalesce("failed", F.lit(0))).alias("failed"))
        .orderBy("topic", "group")
    )  # fmt: skip
    send_failures = (
        pubs.where("NOT success").groupBy("topic").agg(F.count("*").alias("failed")).orderBy("topic")
    )
    tables = {
        "latency": latency,
        "produced": produced,
        "consumed": consumed,
        "retries": retries,
        "send_failures": send_failures,
    }
    rows = {name: [r.asDict() for r in df.collect()] for name, df in tables.items()}
    counts = {r["type"]: r["count"] for r in records.groupBy("type").count().collect()}
    report = Report(counts, rows["latency"], rows["produced"], rows["consumed"], rows["retries"],
                    rows["send_failures"], bucket_seconds=width)  # fmt: skip
    return report, tables


def dead_letters(namesrv: str, groups: list[str]) -> dict[str, int]:
    """How many messages each group's %DLQ% topic holds (groups without one are left out)."""
    out = {}
    with Blocking(namesrv) as cluster:
        for group in groups:
            try:
                queues = cluster.run(topic_queues, (DLQ_PREFIX + group,), None)
            except SparkSourceError:
                continue  # no dead letters ever: the DLQ topic is made on the first one
            out[group] = sum(high - low for low, high in (cluster.run(queue_bounds, mq) for mq in queues))
    return out


def run(spark: SparkSession, namesrv: str, out: Path, topic: str = TRACE_TOPIC, **range_options) -> Report:
    """Read the trace topic, write `out`/records (Parquet, by type), the figure tables and report.html."""
    from ferrymq.spark.html_report import render

    out = out.absolute()  # Spark's JVM resolves relative paths against its own working directory
    records = trace_records(spark, namesrv, topic, **range_options)
    records.write.mode("overwrite").partitionBy("type").parquet(str(out / "records"))
    report, tables = build(spark.read.parquet(str(out / "records")))
    for name, df in tables.items():
        df.write.mode("overwrite").parquet(str(out / name))
    groups = sorted({r["group"] for r in report.consumed if r["group"]})
    report.dead_letters = dead_letters(namesrv, groups)
    (out / "report.html").write_text(render(report))
    return report
