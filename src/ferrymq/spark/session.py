"""A SparkSession ready for ferrymq: the data source registered, Python workers on this interpreter."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from ferrymq.spark.source import FerryMQDataSource

# For one machine: no web UI, few shuffle partitions, the driver on loopback only.
LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}


def register(spark: SparkSession) -> None:
    """Make `format("ferrymq")` available in this session."""
    spark.dataSource.register(FerryMQDataSource)


def spark_session(
    master: str | None, app: str = "ferrymq", conf: dict[str, str] | None = None
) -> SparkSession:
    """Get or create the session: `master` if given, else spark-submit's, else local[*]. Workers run
    this interpreter (it has pyarrow and ferrymq), unless PYSPARK_PYTHON says otherwise."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app)
    if master:
        builder = builder.master(master)
    elif "--master" not in os.environ.get("PYSPARK_SUBMIT_ARGS", ""):
        builder = builder.master("local[*]")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session
