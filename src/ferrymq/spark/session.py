"""A SparkSession ready for ferrymq: the data source registered, Python workers on this interpreter."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from pyspark.sql import SparkSession

from ferrymq.spark.errors import SparkSourceError
from ferrymq.spark.source import FerryMQDataSource

# For one machine: no web UI, few shuffle partitions, the driver on loopback only.
LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}

WORKERS_HELP = "docs/spark.md, 'Python workers'"


def register(spark: SparkSession) -> None:
    """Make `format("ferrymq")` available in this session.

    In local mode the Python workers are started on this machine with the interpreter Spark noted
    when the session began (PYSPARK_PYTHON, else `python3` on PATH): if that one cannot import
    ferrymq, every read would fail later inside a worker with a bare ModuleNotFoundError, so this
    fails now and names the fix. (On a cluster the executors' interpreter cannot be checked here.)
    """
    check_local_workers(spark)
    spark.dataSource.register(FerryMQDataSource)


def check_local_workers(spark: SparkSession) -> None:
    context = spark.sparkContext
    if not (context.master or "").startswith("local"):
        return
    worker = context.pythonExec
    found = shutil.which(worker)
    if found is not None and os.path.abspath(found) == os.path.abspath(sys.executable):
        return
    probe = [found or worker, "-c", "import ferrymq, pyarrow"]
    try:
        done = subprocess.run(probe, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        failure = done.stderr.decode(errors="replace").strip().splitlines()[-1:] if done.returncode else None
    except (OSError, subprocess.TimeoutExpired) as e:
        failure = [str(e)]
    if failure is not None:
        raise SparkSourceError(
            f"Spark starts its Python workers with {worker!r} ({found or 'not found on PATH'}), which "
            f"cannot import ferrymq: {(failure or ['no output'])[0]}. Set PYSPARK_PYTHON to an interpreter "
            f"that has ferrymq before the session starts, e.g. os.environ['PYSPARK_PYTHON'] = sys.executable "
            f"(this one: {sys.executable}), or create the session with ferrymq.spark.spark_session(). "
            f"See {WORKERS_HELP}."
        )


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
