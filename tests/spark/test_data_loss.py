"""failOnDataLoss: what retention deleted before a query read it is an error, or skipped when allowed."""

from __future__ import annotations

import pytest

from ferrymq.client import Message
from ferrymq.spark import DataLossError

from .conftest import ClusterThread

pytestmark = pytest.mark.spark


@pytest.fixture
def short_lived(tmp_path):
    """A cluster whose retention, run by hand, deletes every CommitLog segment but the last."""
    cluster = ClusterThread(tmp_path, file_reserved_time=0)
    yield cluster
    cluster.stop()


def stream(spark, cluster, tmp_path, **options):
    reader = (
        spark.readStream.format("ferrymq")
        .option("namesrv", cluster.namesrv_addr)
        .option("topic", "Expiring")
        .option("startingOffsets", "earliest")
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(300), "the availableNow run did not finish"


def test_data_loss_fails_or_skips(spark, short_lived, tmp_path):
    cluster = short_lived
    cluster.create_topic("Expiring", 1)
    cluster.send([Message("Expiring", b"early")])
    stream(spark, cluster, tmp_path)
    body = b"x" * 1024
    cluster.send([Message("Expiring", body) for _ in range(1500)])  # over one 1 MiB segment
    assert cluster.broker.store.retention.run(manual=True) >= 1
    low = cluster.run(_min_offset(cluster))
    assert low > 1  # unread messages are gone

    with pytest.raises(Exception, match=r"offsets 1\.\.\d+ are gone"):
        stream(spark, cluster, tmp_path)
    with pytest.raises(Exception, match="are gone"):
        spark.read.format("ferrymq").option("namesrv", cluster.namesrv_addr).option(
            "topic", "Expiring"
        ).option("startingOffsets", '{"Expiring": {"0": 0}}').load().collect()

    stream(spark, cluster, tmp_path, failOnDataLoss="false")
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted(r.queue_offset for r in rows) == [0, *range(low, 1501)]
    assert issubclass(DataLossError, ValueError)


async def _min_offset(cluster):
    from ferrymq.client.instance import ClientInstance
    from ferrymq.spark.cluster import queue_bounds, topic_queues

    instance = ClientInstance(cluster.namesrv_addr)
    try:
        (mq,) = await topic_queues(instance, ("Expiring",), None)
        return (await queue_bounds(instance, mq))[0]
    finally:
        await instance.close()
