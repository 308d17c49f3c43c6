"""The Spark suite's fixtures: one SparkSession for the whole run, and a real NameServer and Broker.

Spark calls block, so the cluster runs on an event loop in a thread of its own; Spark's Python
workers (other processes) reach it over loopback like any client.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from ferrymq.broker.server import Broker
from ferrymq.client import Admin, Message, Producer
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.server import NameServer

from ..broker.conftest import broker_config

# Spark's Python workers must be this interpreter (it has pyarrow); Spark binds loopback only.
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"


class ClusterThread:
    """A NameServer and a Broker on an event loop in a daemon thread; `run` calls into it."""

    def __init__(self, tmp_path, **settings) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="ferrymq-cluster", daemon=True)
        self.thread.start()
        self.namesrv = NameServer(NamesrvConfig(listen_host="127.0.0.1", listen_port=0))
        self.run(self.namesrv.start())
        self.broker = Broker(broker_config(tmp_path, self.namesrv.port, **settings))
        self.run(self.broker.start())
        self.namesrv_addr = f"127.0.0.1:{self.namesrv.port}"

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def create_topic(self, topic: str, queues: int) -> None:
        async def create() -> None:
            async with Admin(self.namesrv_addr) as admin:
                await admin.create_topic(topic, queue_nums=queues)
                for _ in range(200):  # the route reaches the NameServer with the next registration
                    if await admin.instance.existing_route(topic) is not None:
                        return
                    await asyncio.sleep(0.05)
                raise AssertionError(f"topic {topic} never got a route")

        self.run(create())

    def send(self, messages: list[Message]) -> list:
        """Send in order; results in the same order."""

        async def send_all() -> list:
            async with Producer("TestProducer", self.namesrv_addr) as producer:
                return [await producer.send(m) for m in messages]

        results = self.run(send_all(), timeout=300)
        self.settle()
        return results

    def settle(self) -> None:
        assert self.broker.store.wait_dispatched(), "the dispatcher did not catch up"

    def stop(self) -> None:
        self.run(self.broker.stop())
        self.run(self.namesrv.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    c = ClusterThread(tmp_path_factory.mktemp("cluster"))
    yield c
    c.stop()


@pytest.fixture(scope="session")
def standalone(tmp_path_factory):
    """A Spark standalone master and worker (one core) on loopback, shared by the suite."""
    from ferrymq.spark.standalone import standalone

    with standalone(tmp_path_factory.mktemp("standalone")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def executor_python(tmp_path_factory) -> str:
    """An interpreter with ferrymq's dependencies and pyarrow but without ferrymq, as a cluster
    node's Python would be before a job ships ferrymq to it: a venv whose site-packages links
    every package of this one except ferrymq."""
    import site
    import subprocess
    import venv

    env = tmp_path_factory.mktemp("executor-python")
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env)
    python = env / "bin" / "python"
    target = Path(subprocess.check_output([python, "-c", "import site; print(site.getsitepackages()[0])"],
                                          text=True).strip())  # fmt: skip
    for source in map(Path, site.getsitepackages()):
        for entry in source.iterdir():
            if not entry.name.startswith(("ferrymq", "__editable__", "_ferrymq")) and entry.suffix != ".pth":
                (target / entry.name).symlink_to(entry)
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = subprocess.run([python, "-c", "import pyarrow, msgspec; import ferrymq"], env=clean,
                           capture_output=True, text=True)  # fmt: skip
    assert "No module named 'ferrymq'" in probe.stderr, probe.stderr
    return str(python)


@pytest.fixture(scope="session")
def spark():
    from ferrymq.spark import LOCAL_CONF, spark_session

    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        pytest.fail("the Spark suite needs Java 17 or 21: apt-get install openjdk-17-jre-headless")

    session = spark_session("local[2]", "ferrymq-tests", LOCAL_CONF)
    yield session
    session.stop()
