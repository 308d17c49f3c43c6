"""The four published AMQP client suites: where each one's tests and client come from, the command that
runs them with a JUnit XML report, and how each one is told which broker to test.

kombu and py-amqp read the broker's address from the environment, so they test whatever runs on any
port. pika and amqplib hard-code ``127.0.0.1:5672`` / ``localhost``: against the gateway they run in a
network namespace of their own (see ``brokers``), where the gateway owns 5672 and the machine's
RabbitMQ is out of sight.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.amqp.suites import reports
from tests.compat.venvs import client_node_modules, client_sdist, client_venv

VENDOR = Path(__file__).parent / "vendor"
NODE_TIMEOUTS = Path(__file__).parent / "node_test_timeouts.js"  # per-test limits for node --test
NODE_REPORTER = Path(__file__).parent / "node_reporter.js"
PYTEST = ["pytest==8.4.2", "pytest-timeout==2.4.0"]  # the runner's own; each suite's venv gets them


@dataclass(frozen=True)
class Invocation:
    """One run of a suite: the command, its working directory, its extra environment, and the file its
    report goes to."""

    argv: list[str]
    cwd: Path
    env: dict[str, str]
    report: Path


@dataclass(frozen=True)
class Suite:
    name: str
    title: str  # what it is, for reports and docs
    fixed_port: bool  # the suite connects to 127.0.0.1:5672 whatever it is told
    test_timeout: float  # seconds one test may take before the suite's own runner fails it
    suite_timeout: float  # seconds the whole run may take; then it is interrupted, the rest "not run"
    prepare: Callable[[Path, str, int, float], Invocation]  # (workdir, host, port, test_timeout)
    read: Callable[[Path], dict[str, reports.Outcome]]  # the report's outcomes
    # The queues and exchanges it declares and may leave on a broker (a regular expression for the whole
    # name): after a run on the machine's RabbitMQ only new ones of these are deleted.
    declares: str = ""


def _pytest(python: Path, workdir: Path, test_timeout: float, args: list[str]) -> tuple[list[str], Path]:
    """The pytest command line, and where its JUnit XML goes. -p no:cacheprovider: nothing is written into
    the cached source trees. The suites' flaky marker (pytest-rerunfailures, not installed) would only
    multiply the time every failure takes."""
    xml = workdir / "report.xml"
    argv = [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rN", "--color=no",
            f"--timeout={test_timeout:g}", f"--junitxml={xml}", *args]  # fmt: skip
    return argv, xml


def _env_broker(host: str, port: int) -> dict[str, str]:
    """kombu's and py-amqp's integration fixtures read these (their docker-compose names)."""
    return {"RABBITMQ_HOST": host, "RABBITMQ_5672_TCP": str(port)}


def _kombu(workdir: Path, host: str, port: int, test_timeout: float) -> Invocation:
    python = client_venv("suite-kombu-5.7.0", ["kombu==5.7.0", "amqp==5.4.2", *PYTEST])
    source = client_sdist("kombu-5.7.0", "kombu==5.7.0")
    argv, xml = _pytest(python, workdir, test_timeout, ["t/integration/test_py_amqp.py"])
    return Invocation(argv, source, _env_broker(host, port), xml)


def _py_amqp(workdir: Path, host: str, port: int, test_timeout: float) -> Invocation:
    python = client_venv("suite-amqp-5.4.2", ["amqp==5.4.2", *PYTEST])
    source = client_sdist("amqp-5.4.2", "amqp==5.4.2")
    # The TLS cases need certificates the sdist lacks, and two of them dial tls-v1-2.badssl.com.
    argv, xml = _pytest(python, workdir, test_timeout, ["t/integration/test_rmq.py", "-k", "not tls"])
    return Invocation(argv, source, _env_broker(host, port), xml)


PIKA_INI = """[pytest]
python_files = *_test.py *_tests.py
python_classes = Test* *Test *Tests *TestCase
"""


def _pika(workdir: Path, host: str, port: int, test_timeout: float) -> Invocation:
    python = client_venv("suite-pika-1.4.4", ["pika==1.4.4", *PYTEST])
    tree = workdir / "pika"
    shutil.copytree(VENDOR / "pika", tree)  # run apart from this repository's own tests/ and config
    (tree / "pytest.ini").write_text(PIKA_INI)  # pika's pyproject.toml settings that select tests
    # gevent, tornado and twisted are optional adapters not installed here.
    select = ["-k", "not gevent and not tornado and not twisted"]
    # A test stopped by pytest-timeout leaves its thread running, and Python 3.11's traceback module calls
    # ast.parse, whose recursion guard is not thread-safe: pytest quoting a test's source at the same time
    # can end the whole run ("SystemError: AST constructor recursion depth mismatch"). --tb=line quotes none.
    argv, xml = _pytest(python, workdir, test_timeout, ["tests/acceptance", *select, "--tb=line"])
    return Invocation(argv, tree, {"PYTHONPATH": str(tree)}, xml)


def _amqplib(workdir: Path, host: str, port: int, test_timeout: float) -> Invocation:
    modules = client_node_modules("amqplib-2.3.1", ["amqplib@2.3.1"])
    tree = workdir / "amqplib"
    # The tests load the library as '../channel_api', '../../lib/connection': the npm package's tree
    # with the tests beside its lib/.
    shutil.copytree(modules / "amqplib", tree)
    shutil.copytree(VENDOR / "amqplib" / "test", tree / "test")
    events = workdir / "events.jsonl"
    argv = ["node", "--require", str(NODE_TIMEOUTS), "--test", "--test-force-exit",
            "--test-concurrency=1",
            f"--test-reporter={NODE_REPORTER}", "--test-reporter-destination=stdout",
            "test/channel_api.test.js", "test/callback_api.test.js"]  # fmt: skip
    env = {
        "URL": f"amqp://guest:guest@{host}:{port}",  # channel_api; callback_api dials amqp://localhost
        "NODE_TEST_TIMEOUT_MS": f"{test_timeout * 1000:.0f}",
        "NODE_TEST_EVENTS": str(events),
    }
    return Invocation(argv, tree, env, events)


SUITES = {
    suite.name: suite
    for suite in (
        Suite("kombu", "kombu 5.7.0 t/integration/test_py_amqp.py (PyPI sdist)", fixed_port=False,
              test_timeout=20, suite_timeout=240, prepare=_kombu, read=reports.junit,
              declares=r"test|test[_-].+|revive_(in)?active_.+|(priority|ttl)_.+|simple_queue_test|"
                       r"(direct|fanout|topic|rk_direct)\d"),
        Suite("py-amqp", "py-amqp 5.4.2 t/integration/test_rmq.py, not tls (PyPI sdist)", fixed_port=False,
              test_timeout=20, suite_timeout=120, prepare=_py_amqp, read=reports.junit,
              declares=r"py-amqp-unittest"),
        # pika's slowest test takes 0.7 s on RabbitMQ; its async tests wait 15 s on their own for a reply
        # that never comes, which would add up to far more than the suite's limit.
        Suite("pika", "pika 1.4.4 tests/acceptance (vendored)", fixed_port=True,
              test_timeout=4, suite_timeout=300, prepare=_pika, read=reports.junit,
              declares=r"Test\w+|[eq]-Test\w+:[0-9a-f]+"),
        Suite("amqplib", "amqplib 2.3.1 test/channel_api + callback_api (vendored)", fixed_port=True,
              test_timeout=10, suite_timeout=150, prepare=_amqplib, read=reports.node_events,
              declares=r"test\..+"),
    )
}  # fmt: skip
