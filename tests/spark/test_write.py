"""Writes: keys, tags and properties land intact; a replayed streaming batch resends the same msg ids."""

from __future__ import annotations

import pytest
from pyspark.sql import Row
from pyspark.sql.types import ArrayType, MapType, StringType, StructField, StructType

from ferrymq.client import Message

pytestmark = pytest.mark.spark

WRITE_SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("body", StringType()),
        StructField("keys", ArrayType(StringType())),
        StructField("tags", StringType()),
        StructField("properties", MapType(StringType(), StringType())),
    ]
)


def read_topic(spark, cluster, topic: str):
    return spark.read.format("ferrymq").option("namesrv", cluster.namesrv_addr).option("topic", topic).load()


def test_batch_write_keeps_keys_tags_and_properties(spark, cluster):
    for topic in ("SparkWriteA", "SparkWriteB"):
        cluster.create_topic(topic, 2)
    rows = [
        Row(topic="SparkWriteA" if i % 3 else "SparkWriteB", body=f"m{i}", keys=[f"k{i}", "all"],
            tags=f"T{i % 2}", properties={"i": str(i), "kind": "test"})
        for i in range(30)
    ]  # fmt: skip
    df = spark.createDataFrame(rows, WRITE_SCHEMA).repartition(3)
    df.write.format("ferrymq").option("namesrv", cluster.namesrv_addr).mode("append").save()
    cluster.settle()
    got = {r.body: r for t in ("SparkWriteA", "SparkWriteB") for r in read_topic(spark, cluster, t).collect()}
    assert set(got) == {f"m{i}".encode() for i in range(30)}
    for i in range(30):
        r = got[f"m{i}".encode()]
        assert r.topic == ("SparkWriteA" if i % 3 else "SparkWriteB")
        assert r.keys == [f"k{i}", "all"] and r.tags == f"T{i % 2}"
        assert r.properties["i"] == str(i) and r.properties["kind"] == "test"
    assert len({r.msg_id for r in got.values()}) == 30


def test_write_with_a_topic_option_and_binary_bodies(spark, cluster):
    cluster.create_topic("SparkWriteBinary", 1)
    df = spark.createDataFrame([(bytes([i, 0, 255]),) for i in range(5)], "body binary")
    writer = df.write.format("ferrymq").mode("append").option("namesrv", cluster.namesrv_addr)
    writer.option("topic", "SparkWriteBinary").save()
    cluster.settle()
    bodies = sorted(r.body for r in read_topic(spark, cluster, "SparkWriteBinary").collect())
    assert bodies == sorted(bytes([i, 0, 255]) for i in range(5))


@pytest.mark.parametrize(
    ("ddl", "topic", "message"),
    [
        ("value string", "T", "needs a 'body' column"),
        ("body string", None, 'needs the "topic" option or a "topic" column'),
        ("body string, keys int", "T", "column 'keys' must be"),
    ],
)
def test_unwritable_dataframes_fail_clearly(spark, cluster, ddl, topic, message):
    writer = (
        spark.createDataFrame([], ddl)
        .write.format("ferrymq")
        .mode("append")
        .option("namesrv", cluster.namesrv_addr)
    )
    if topic:
        writer = writer.option("topic", topic)
    with pytest.raises(Exception, match=message):
        writer.save()


def test_a_replayed_stream_batch_resends_the_same_msg_ids(spark, cluster, tmp_path):
    source, target = "SparkPipeIn", "SparkPipeOut"
    cluster.create_topic(source, 2)
    cluster.create_topic(target, 2)
    cluster.send([Message(source, f"p{i}".encode(), tags="P", keys=f"key{i}") for i in range(40)])
    checkpoint = tmp_path / "ck"

    def run() -> None:
        query = (
            spark.readStream.format("ferrymq")
            .option("namesrv", cluster.namesrv_addr)
            .option("topic", source)
            .option("startingOffsets", "earliest")
            .option("maxMessagesPerTrigger", "20")
            .load()
            .select("body", "keys", "tags")
            .writeStream.format("ferrymq")
            .option("namesrv", cluster.namesrv_addr)
            .option("topic", target)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(300) and query.exception() is None

    run()
    # What a driver crash after the write and before the commit leaves behind: Spark replays the batch.
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    run()
    cluster.settle()
    rows = read_topic(spark, cluster, target).collect()
    assert len(rows) > 40  # the replayed batch really was sent again ...
    by_id: dict[str, set[bytes]] = {}
    for r in rows:
        by_id.setdefault(r.msg_id, set()).add(r.body)
    assert len(by_id) == 40  # ... with the same msg ids: a consumer that drops repeats sees 40
    assert all(len(bodies) == 1 for bodies in by_id.values())
    assert {r.body for r in rows} == {f"p{i}".encode() for i in range(40)}
    assert {r.tags for r in rows} == {"P"} and all(r.keys == [f"key{r.body.decode()[1:]}"] for r in rows)
