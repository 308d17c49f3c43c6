"""ferrymq on Apache Spark: the "ferrymq" Python data source and the jobs built on it (extra [spark]).

from ferrymq.spark import register
register(spark)
spark.read.format("ferrymq").option("namesrv", "127.0.0.1:9876").option("topic", "Orders").load()
"""

from __future__ import annotations

from ferrymq.spark.errors import DataLossError, SparkSourceError
from ferrymq.spark.mirror import OffsetMirror, mirror_offsets
from ferrymq.spark.session import LOCAL_CONF, register, spark_session
from ferrymq.spark.source import FerryMQDataSource

__all__ = [
    "LOCAL_CONF",
    "DataLossError",
    "FerryMQDataSource",
    "OffsetMirror",
    "SparkSourceError",
    "mirror_offsets",
    "register",
    "spark_session",
]
