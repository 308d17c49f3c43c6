"""The replay job: copy a topic's messages in an offset or time range to another topic, on the same
cluster or another one — redriving dead letters, or the data half of moving a topic.

Bodies, tags, keys, user properties and msg ids (UNIQ_KEY) are kept, so consumers that drop repeated
msg ids see a message once even if the job is run again; what the broker added for the old copy
(its queue offsets, retry and delay state, the real topic of a retried message) is dropped.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from ferrymq.protocol.properties import Prop
from ferrymq.spark.progress import reporting

# Properties that describe the stored copy or its delivery state, not the message.
BROKER_PROPERTIES = (
    Prop.MIN_OFFSET, Prop.MAX_OFFSET, Prop.REAL_TOPIC, Prop.REAL_QID, Prop.RETRY_TOPIC, Prop.DELAY,
    Prop.TIMER_DELIVER_MS, Prop.TIMER_DELAY_SEC, Prop.TIMER_DELAY_MS, Prop.TRAN_MSG, Prop.PGROUP,
    Prop.TRANSACTION_CHECK_TIMES, Prop.RECONSUME_TIME, Prop.MAX_RECONSUME_TIMES, "CLUSTER",
)  # fmt: skip


def source_frame(spark: SparkSession, namesrv: str, topic: str, **range_options: str | None) -> DataFrame:
    """The messages to copy. `range_options`: startingOffsets, endingOffsets, startingTimestamp,
    endingTimestamp (None values are left out)."""
    reader = spark.read.format("ferrymq").option("namesrv", namesrv).option("topic", topic)
    for name, value in range_options.items():
        if value is not None:
            reader = reader.option(name, value)
    return reader.load()


def as_copies(messages: DataFrame) -> DataFrame:
    """The columns the ferrymq writer takes, broker-added properties removed."""
    dropped = F.array(*(F.lit(p) for p in BROKER_PROPERTIES))
    properties = F.map_filter("properties", lambda k, _: ~F.array_contains(dropped, k))
    return messages.select("body", "keys", "tags", properties.alias("properties"))


def replay(messages: DataFrame, namesrv: str, topic: str) -> None:
    """Send `messages` (as read from ferrymq) to `topic` on the cluster of `namesrv`."""
    writer = as_copies(messages).write.format("ferrymq").mode("append")
    writer.option("namesrv", namesrv).option("topic", topic).save()


def replay_counted(
    spark: SparkSession, messages: DataFrame, namesrv: str, topic: str, echo: Callable[[str], None]
) -> int:
    """`replay`, reading the source once: the count is observed as the rows go by (no count() job
    first, which would read everything twice), and stage progress is echoed while it runs."""
    observation = Observation("replay")
    counted = messages.observe(observation, F.count(F.lit(1)).alias("messages"))
    with reporting(spark, echo):
        replay(counted, namesrv, topic)
    return observation.get["messages"]
