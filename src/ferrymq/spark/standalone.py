"""A Spark standalone cluster on loopback, started from the installed PySpark: one master and one
worker, each a JVM of its own (what `sbin/start-master.sh` and `start-worker.sh` start). The tests
and benchmarks submit jobs to it with spark-submit, the way jobs reach a real cluster."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
SPARK_SUBMIT = SPARK_HOME / "bin" / "spark-submit"


def spark_env(**extra: str) -> dict[str, str]:
    """The environment for Spark's launchers: loopback only, no PYTHONPATH of ours leaking in (an
    executor must find ferrymq where the job put it, not where the caller's shell had it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON")}
    return {**env, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1", **extra}


def _start(args: list[str], log: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(SPARK_CLASS), *args], stdout=out, stderr=subprocess.STDOUT, env=spark_env(),
            start_new_session=True, stdin=subprocess.DEVNULL,
        )  # fmt: skip


def wait_for_line(
    log: Path, pattern: str, process: subprocess.Popen, name: str, timeout: float = 120.0
) -> re.Match:
    """The first match of `pattern` in `log`, waiting while `process` (the `name` daemon) runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := re.search(pattern, log.read_text(errors="replace")):
            return found
        if process.poll() is not None:
            raise RuntimeError(f"the Spark {name} exited:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)
    raise TimeoutError(
        f"no {pattern!r} in {log} after {timeout} s:\n{log.read_text(errors='replace')[-3000:]}"
    )


def _stop(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


@dataclass(frozen=True)
class Standalone:
    url: str  # spark://127.0.0.1:<port>
    work: Path  # the master's and worker's logs; executors' directories under work/work

    def executor_logs(self) -> list[Path]:
        return sorted((self.work / "work").glob("app-*/*/stderr"))


@contextmanager
def standalone(work: Path, cores: int = 1, memory: str = "1g") -> Iterator[Standalone]:
    """A master with one worker of `cores` cores registered; logs and executors' directories under
    `work`."""
    work.mkdir(parents=True, exist_ok=True)
    processes = []
    try:
        master = _start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0",
                         "--webui-port", "0"], work / "master.log")  # fmt: skip
        processes.append(master)
        started = wait_for_line(
            work / "master.log", r"Starting Spark master at (spark://\S+)", master, "master"
        )
        url = started[1]
        worker = _start(["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--port", "0",
                         "--webui-port", "0", "--cores", str(cores), "--memory", memory,
                         "--work-dir", str(work / "work")], work / "worker.log")  # fmt: skip
        processes.append(worker)
        wait_for_line(work / "master.log", r"Registering worker", master, "master")
        yield Standalone(url, work)
    finally:
        for process in reversed(processes):
            _stop(process)
