"""ferrymq on Apache Spark: the "ferrymq" Python data source and the jobs built on it (extra [spark]).

from ferrymq.spark import register
register(spark)
spark.read.format("ferrymq").option("namesrv", "127.0.0.1:9876").option("topic", "Orders").load()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferrymq.spark.errors import DataLossError, SparkSourceError
from ferrymq.spark.mirror import OffsetMirror, mirror_offsets
from ferrymq.spark.source import FerryMQDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DataLossError",
    "FerryMQDataSource",
    "OffsetMirror",
    "SparkSourceError",
    "mirror_offsets",
    "register",
]


def register(spark: SparkSession) -> None:
    """Make `format("ferrymq")` available in this session."""
    spark.dataSource.register(FerryMQDataSource)
