"""docs/spark.md runs as written: every code block, in order, against the suite's live NameServer,
Broker and standalone Spark cluster, as a new user would (no PYSPARK_PYTHON set, jobs given to
spark-submit with ferrymq shipped in a zip to executors whose Python lacks it).

The page's placeholders become the live addresses (ADDRESSES). Python blocks run one after another
in one interpreter, like a tutorial; `# file: NAME` blocks are saved as NAME; bash blocks run in
bash (one `ferrymq` command: through the CLI in this process) and must exit 0. All run in one empty directory.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ferrymq.cli.main import main
from ferrymq.client import Message
from ferrymq.protocol.trace import TRACE_TOPIC
from ferrymq.spark.standalone import SPARK_HOME

from .test_jobs import trace_messages

pytestmark = pytest.mark.spark

ROOT = Path(__file__).parents[2]
DOC = ROOT / "docs" / "spark.md"
README = ROOT / "README.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
ORDERS = 200

# A tiny REPL: reads length-prefixed blocks on stdin and runs each in one namespace.
RUNNER = r"""
import sys, traceback
scope = {"__name__": "__main__"}
while line := sys.stdin.readline():
    code = sys.stdin.read(int(line))
    try:
        exec(compile(code, "<docs/spark.md>", "exec"), scope)
        print("\n@@ok", flush=True)
    except BaseException:
        traceback.print_exc(file=sys.stdout)
        print("\n@@failed", flush=True)
"""


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of every fenced block, in order."""
    return [(m[1], m[2]) for m in BLOCK.finditer(text)]


class Tutorial:
    """One Python interpreter the page's Python blocks run in, in turn."""

    def __init__(self, cwd: Path, env: dict[str, str], log: Path) -> None:
        self.log = log.open("wb")
        pipe = subprocess.PIPE
        self.process = subprocess.Popen(
            [sys.executable, "-c", RUNNER],
            cwd=cwd,
            env=env,
            text=True,
            stdin=pipe,
            stdout=pipe,
            stderr=self.log,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put("")

    def run(self, code: str, timeout: float = 300) -> str:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{len(code)}\n{code}")
        self.process.stdin.flush()
        out, deadline = [], time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line in ("@@ok\n", "@@failed\n", ""):
                text = "".join(out)
                assert line == "@@ok\n", f"docs block failed:\n{code}\n---\n{text}"
                return text
            out.append(line)
        raise AssertionError(f"docs block ran over {timeout} s:\n{code}")

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.log.close()


def user_env() -> dict[str, str]:
    """A shell with this venv's commands first, ferrymq from this checkout, and no PYSPARK_PYTHON."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    bin_dirs = [str(Path(sys.executable).parent), str(SPARK_HOME / "bin")]
    return {**env, "PATH": os.pathsep.join([*bin_dirs, env.get("PATH", "")]), "PYTHONPATH": str(ROOT / "src"),
            "SPARK_LOCAL_IP": "127.0.0.1"}  # fmt: skip


def seed(cluster) -> None:
    for topic, queues in (("Orders", 4), ("OrdersCopy", 2), ("OrdersArchive", 2), ("OrdersLive", 2),
                          ("OrdersReplayed", 2), (TRACE_TOPIC, 2)):  # fmt: skip
        cluster.create_topic(topic, queues)
    cluster.send([Message("Orders", f"order {i}".encode(), tags="new", keys=f"o{i}") for i in range(ORDERS)])
    cluster.send([Message(TRACE_TOPIC, b) for b in trace_messages(int(time.time() * 1000) - 100_000)])


def run_page(text: str, addresses: dict[str, str], work: Path) -> list[tuple[str, str, str]]:
    """Run every block of `text` in `work`; (language, code, output) of each."""
    for placeholder, live in addresses.items():
        text = text.replace(placeholder, live)
    env = user_env()
    tutorial = Tutorial(work, env, work / "tutorial.log")
    results = []
    try:
        for language, code in blocks(text):
            started = time.monotonic()
            if language == "python" and (name := re.match(r"# file: (\S+)\n", code)):
                (work / name[1]).write_text(code)
                output = ""
            elif language == "python":
                output = tutorial.run(code)
            elif language == "bash" and is_cli(code):
                output = run_cli(code, work)
            elif language == "bash":
                done = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=work, env=env,
                                      capture_output=True, text=True, timeout=600)  # fmt: skip
                output = done.stdout + done.stderr
                assert done.returncode == 0, f"docs block failed:\n{code}\n---\n{output[-4000:]}"
            else:
                assert language == "text", f"a {language} block the test does not know how to run"
                output = ""
            results.append((language, code, output))
            print(f"{time.monotonic() - started:6.1f} s  {language} {code.splitlines()[0][:60]}")
    finally:
        tutorial.close()
    return results


def is_cli(code: str) -> bool:
    return code.startswith("ferrymq ") and code.count("\n") <= 2 and "&&" not in code and "|" not in code


def run_cli(code: str, cwd: Path) -> str:
    """A one-command block of `ferrymq ...`, run through the CLI in this process (its Spark jobs then
    share the suite's session instead of starting a JVM of their own)."""
    with contextlib.chdir(cwd):
        result = CliRunner().invoke(main, shlex.split(code.replace("\\\n", " "))[1:])
    assert result.exit_code == 0, f"docs block failed:\n{code}\n---\n{result.output}"
    return result.output


def output_of(results, command: str) -> str:
    """The output of the one block whose code contains `command`."""
    (found,) = [out for _, code, out in results if command in code]
    return found


@pytest.mark.timeout(900)
def test_every_block_of_the_spark_page_runs(spark, cluster, standalone, executor_python, tmp_path):
    seed(cluster)
    addresses = {"spark://127.0.0.1:7077": standalone.url, "127.0.0.1:9876": cluster.namesrv_addr,
                 "/opt/spark-python/bin/python": executor_python}  # fmt: skip
    results = run_page(DOC.read_text(), addresses, tmp_path)

    def topic(name: str) -> list:
        return spark.read.format("ferrymq").option("namesrv", cluster.namesrv_addr).option("topic", name) \
            .load().select("body").collect()  # fmt: skip

    cluster.settle()
    assert "|       3|   50|" in output_of(results, 'orders.groupBy("queue_id")')  # counts per queue
    assert len(topic("OrdersCopy")) == int(output_of(results, "orders from offset 10").split()[0])
    orders = sorted(f"order {i}".encode() for i in range(ORDERS))
    for out, copy in (("orders-parquet", "OrdersArchive"), ("orders-stream-parquet", "OrdersLive")):
        assert sorted(r.body for r in spark.read.parquet(str(tmp_path / out)).collect()) == orders
        assert sorted(r.body for r in topic(copy)) == orders
    per_minute = spark.read.parquet(str(tmp_path / "per-minute")).agg({"orders": "sum"}).first()
    assert per_minute is not None and per_minute[0] == ORDERS
    progress = output_of(results, "consumer-progress")
    assert "orders-per-minute on Orders" in progress and "(total lag 0)" in progress, progress
    assert f"replayed {ORDERS} messages" in output_of(results, "spark replay")
    assert (tmp_path / "trace-report" / "report.html").exists()
    assert len(standalone.executor_logs()) >= 3, "the submitted jobs did not run executors on the worker"


def test_readme_spark_lines_name_the_page_and_the_extra():
    readme = README.read_text()
    assert "docs/spark.md" in readme and "[spark]" in readme
    assert not [code for lang, code in blocks(readme) if "spark" in code.lower()], (
        "a Spark code block in the README is not run by any test: move it to docs/spark.md"
    )


def test_register_names_the_fix_when_workers_lack_ferrymq(spark, executor_python, monkeypatch):
    from ferrymq.spark import SparkSourceError, register

    monkeypatch.setattr(spark.sparkContext, "pythonExec", executor_python)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    with pytest.raises(SparkSourceError) as failure:
        register(spark)
    message = str(failure.value)
    assert "No module named 'ferrymq'" in message and executor_python in message
    assert "PYSPARK_PYTHON" in message and "docs/spark.md" in message
