"""A real Spark cluster, not local mode: a standalone master and worker on loopback, started from the
installed PySpark, run the streaming job (driver, executor and Python workers all separate processes)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyspark
import pytest

from ferrymq.client import Message

pytestmark = pytest.mark.spark

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"


def start(args: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(SPARK_CLASS), *args], stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def wait_for_line(log: Path, pattern: str, process: subprocess.Popen, timeout: float = 120.0) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := re.search(pattern, log.read_text(errors="replace")):
            return found
        assert process.poll() is None, f"{process.args[1]} exited:\n{log.read_text(errors='replace')[-3000:]}"
        time.sleep(0.2)
    raise AssertionError(
        f"no {pattern!r} in {log} after {timeout} s:\n{log.read_text(errors='replace')[-3000:]}"
    )


@pytest.fixture
def standalone(tmp_path):
    """spark://127.0.0.1:<port> with one worker of one core registered."""
    processes = []
    try:
        master = start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0",
                        "--webui-port", "0"], tmp_path / "master.log")  # fmt: skip
        processes.append(master)
        url = wait_for_line(tmp_path / "master.log", r"Starting Spark master at (spark://\S+)", master)[1]
        worker = start(["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--port", "0",
                        "--webui-port", "0", "--cores", "1", "--memory", "1g",
                        "--work-dir", str(tmp_path / "work")], tmp_path / "worker.log")  # fmt: skip
        processes.append(worker)
        wait_for_line(tmp_path / "master.log", r"Registering worker", master)
        yield url
    finally:
        for process in reversed(processes):
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)


def test_streaming_job_on_a_standalone_cluster(spark, cluster, standalone, tmp_path):
    topic = "SparkStandalone"
    cluster.create_topic(topic, 2)
    bodies = [f"s{i}".encode() for i in range(60)]
    cluster.send([Message(topic, b) for b in bodies])
    driver = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("stream_job.py")), "--master", standalone,
         "--namesrv", cluster.namesrv_addr, "--topic", topic, "--checkpoint", str(tmp_path / "ck"),
         "--out", str(tmp_path / "out"), "--max-per-trigger", "25"],
        capture_output=True, timeout=300,
    )  # fmt: skip
    assert driver.returncode == 0, driver.stderr.decode(errors="replace")[-3000:]
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted(r.body for r in rows) == sorted(bodies)
    assert len(list((tmp_path / "out").iterdir())) >= 3  # 60 messages, 25 a batch
    app_logs = list((tmp_path / "work").glob("app-*/*/stderr"))
    assert app_logs, "no executor ran on the worker"
