"""Streaming reads: exactly once into Parquet across restarts (one SIGKILLs the driver mid-batch),
maxMessagesPerTrigger, new queues, failOnDataLoss, and offsets mirrored to a consumer group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ferrymq.client import Admin, Message
from ferrymq.spark import mirror_offsets

from .stream_job import start_query

pytestmark = pytest.mark.spark


def wait_for(check, what: str, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def run_available_now(spark, cluster, topic, tmp_path, **kw) -> int:
    """One run of the job in this SparkSession; returns how many batches it ran."""
    query = start_query(spark, cluster.namesrv_addr, topic, str(tmp_path / "ck"), str(tmp_path / "out"), **kw)
    assert query.awaitTermination(300), "the availableNow run did not finish"
    assert query.exception() is None
    return len(query.recentProgress)


def sent_bodies(cluster, topic: str, start: int, n: int) -> list[bytes]:
    bodies = [f"{topic}-{i}".encode() for i in range(start, start + n)]
    cluster.send([Message(topic, b) for b in bodies])
    return bodies


def test_exactly_once_into_parquet_across_restarts_and_a_killed_driver(spark, cluster, tmp_path):
    topic = "SparkRestarts"
    cluster.create_topic(topic, 2)
    mirror = mirror_offsets(spark, cluster.namesrv_addr, "SparkRestartsMirror", "restart-test")
    try:
        # Run 1: 100 messages in one go.
        expected = sent_bodies(cluster, topic, 0, 100)
        run_available_now(spark, cluster, topic, tmp_path)

        # Run 2, a driver of its own: 100 more, 30 a batch; killed while its third batch is written.
        expected += sent_bodies(cluster, topic, 100, 100)
        marker = tmp_path / "hanging"
        ck = tmp_path / "ck"
        driver = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("stream_job.py")),
             "--namesrv", cluster.namesrv_addr, "--topic", topic, "--checkpoint", str(ck),
             "--out", str(tmp_path / "out"), "--marker", str(marker),
             "--max-per-trigger", "30", "--hang-at", "3"],
            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            wait_for(lambda: marker.exists() or driver.poll() is not None, "the driver to reach batch 3")
            assert driver.poll() is None, f"the driver exited with {driver.returncode} before batch 3"
        finally:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(30)
        hung = int(marker.read_text())
        assert (ck / "offsets" / str(hung)).exists() and not (ck / "commits" / str(hung)).exists()

        # Run 3: 50 more, 40 a batch: Spark replays the killed batch first, then goes on.
        expected += sent_bodies(cluster, topic, 200, 50)
        assert run_available_now(spark, cluster, topic, tmp_path, max_per_trigger=40) >= 3
        assert (ck / "commits" / str(hung)).exists()

        # Run 4: nothing new, nothing written.
        before = sorted(p.name for p in (tmp_path / "out").iterdir())
        run_available_now(spark, cluster, topic, tmp_path)
        assert sorted(p.name for p in (tmp_path / "out").iterdir()) == before

        rows = spark.read.parquet(str(tmp_path / "out")).collect()
        assert sorted(r.body for r in rows) == sorted(expected)  # every message, exactly once
        assert len({(r.queue_id, r.queue_offset) for r in rows}) == 250

        async def lag() -> int:
            async with Admin(cluster.namesrv_addr) as admin:
                return sum(p.lag for p in await admin.consumer_progress("SparkRestartsMirror", topic))

        wait_for(lambda: cluster.run(lag()) == 0, "the mirrored group to show no lag", 30)
    finally:
        spark.streams.removeListener(mirror)


def test_max_messages_per_trigger_and_new_queues(spark, cluster, tmp_path):
    topic = "SparkNewQueues"
    cluster.create_topic(topic, 2)
    expected = sent_bodies(cluster, topic, 0, 40)
    assert run_available_now(spark, cluster, topic, tmp_path, max_per_trigger=10) >= 4
    cluster.create_topic(topic, 4)  # two more queues
    expected += sent_bodies(cluster, topic, 40, 40)
    run_available_now(spark, cluster, topic, tmp_path)
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted(r.body for r in rows) == sorted(expected)
    assert {r.queue_id for r in rows} == {0, 1, 2, 3}
