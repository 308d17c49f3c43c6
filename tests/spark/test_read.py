"""Batch reads: offset and time ranges return exactly the expected rows; bad options fail clearly."""

from __future__ import annotations

import json
import time

import pytest

from ferrymq.client import Message, Producer

pytestmark = pytest.mark.spark

TOPIC = "SparkBatchRead"


@pytest.fixture(scope="module")
def sent(cluster):
    """30 messages over 3 queues in two waves 1 s apart (for the time range), by queue."""
    cluster.create_topic(TOPIC, 3)
    first = [
        Message(TOPIC, f"a{i}".encode(), tags=f"T{i % 2}", keys=[f"k{i}", "wave-a"], properties={"n": str(i)})
        for i in range(15)
    ]
    results = cluster.send(first)
    time.sleep(1.1)  # the second wave must have later store timestamps (ms resolution)
    between = int(time.time() * 1000)
    time.sleep(0.05)
    results += cluster.send([Message(TOPIC, f"b{i}".encode(), tags="TB") for i in range(15)])
    return results, between


def load(spark, cluster, **options):
    reader = spark.read.format("ferrymq").option("namesrv", cluster.namesrv_addr).option("topic", TOPIC)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def ids(rows) -> set[tuple[int, int]]:
    return {(r.queue_id, r.queue_offset) for r in rows}


def test_whole_topic_with_every_column(spark, cluster, sent):
    results, _ = sent
    rows = load(spark, cluster).collect()
    assert len(rows) == 30
    assert ids(rows) == {(r.message_queue.queue_id, r.queue_offset) for r in results}
    by_body = {r.body: r for r in rows}
    a3 = by_body[b"a3"]
    assert a3.topic == TOPIC and a3.broker_name == "broker-a" and a3.tags == "T1"
    assert a3.keys == ["k3", "wave-a"] and a3.properties["n"] == "3"
    assert a3.msg_id == results[3].msg_id
    assert a3.reconsume_times == 0 and a3.commitlog_offset >= 0
    assert a3.born_timestamp <= a3.store_timestamp
    assert load(spark, cluster).rdd.getNumPartitions() == 3  # one per queue


def test_compressed_bodies_read_as_their_content(spark, cluster):
    """Bodies a RocketMQ 5 producer compressed (zlib, LZ4, zstd) come out of the source decompressed."""
    topic, body = "SparkCompressed", b"".join(b"row %d of a big body; " % i for i in range(400))
    cluster.create_topic(topic, 1)

    async def send_compressed() -> list:
        sent = []
        for compression in ("zlib", "lz4", "zstd"):
            async with Producer(
                f"P-{compression}", cluster.namesrv_addr, compression=compression
            ) as producer:
                sent.append(await producer.send(Message(topic, body + compression.encode())))
        return sent

    sent = cluster.run(send_compressed())
    cluster.settle()
    rows = spark.read.format("ferrymq").option("namesrv", cluster.namesrv_addr).option("topic", topic).load()
    got = sorted((r.msg_id, r.body) for r in rows.collect())
    assert got == sorted(
        (s.msg_id, body + c.encode()) for s, c in zip(sent, ("zlib", "lz4", "zstd"), strict=True)
    )


def test_offset_range_per_queue_json(spark, cluster, sent):
    starting = json.dumps({TOPIC: {"broker-a:0": 2, "1": 5}})
    ending = json.dumps({TOPIC: {"broker-a:0": 7, "broker-a:2": 3}})
    rows = load(spark, cluster, startingOffsets=starting, endingOffsets=ending).collect()
    # queue 0: 2..6; queue 1: 5..end (10 per queue); queue 2: 0..2
    expected = {(0, o) for o in range(2, 7)} | {(1, o) for o in range(5, 10)} | {(2, o) for o in range(3)}
    assert ids(rows) == expected and len(rows) == len(expected)


def test_split_large_ranges(spark, cluster, sent):
    df = load(spark, cluster, maxMessagesPerPartition="4")
    assert df.rdd.getNumPartitions() == 9  # 10 messages a queue: 4 + 4 + 2
    assert len(df.collect()) == 30


def test_time_range(spark, cluster, sent):
    _, between = sent
    later = load(spark, cluster, startingTimestamp=str(between)).collect()
    assert sorted(r.body for r in later) == sorted(f"b{i}".encode() for i in range(15))
    earlier = load(spark, cluster, endingTimestamp=str(between)).collect()
    assert sorted(r.body for r in earlier) == sorted(f"a{i}".encode() for i in range(15))


def test_queue_filter_and_latest(spark, cluster, sent):
    assert ids(load(spark, cluster, queues="1").collect()) == {(1, o) for o in range(10)}
    assert load(spark, cluster, startingOffsets="latest").count() == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "NoSuchTopic"}, "topic NoSuchTopic does not exist"),
        ({"startingOffsets": "{not json"}, "not valid JSON"),
        ({"startingOffsets": json.dumps({TOPIC: {"broker-a:9": 1}})}, "queue 'broker-a:9'"),
        ({"startingOffsets": json.dumps({"Other": {"0": 1}})}, "names topic 'Other'"),
        ({"endingOffsets": json.dumps({TOPIC: {"0": "x"}})}, "must be an integer"),
        ({"queues": "7"}, "queues that do not exist: 7"),
        ({"maxMessagesPerPartition": "0"}, "positive integer"),
        ({"startingTimestamp": "yesterday"}, "ISO-8601"),
        ({"namesrv": ""}, '"namesrv" is required'),
    ],
)
def test_bad_options_fail_clearly(spark, cluster, sent, options, message):
    reader = spark.read.format("ferrymq").option("namesrv", cluster.namesrv_addr).option("topic", TOPIC)
    for k, v in options.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception, match=message):
        reader.load().collect()
