"""Compatibility harness: our NameServer and Broker as real subprocesses, driven by real client libraries.

Each client library lives in its own cached venv (``venvs.py``) and runs as a separate process (scripts
under ``clients/``), as design.md §9 asks. Clients get a private HOME because they write logs under
``~/logs``; a failure message shows the client's stderr and the tail of its log, and the servers' output.
The test process observes the cluster through remoting requests of its own (routes, committed offsets,
consumer lists), so tests wait on conditions instead of sleeping.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from ferrymq.bench.processes import free_port
from ferrymq.protocol.bodies import GetConsumerListByGroupResponseBody, TopicRouteData, decode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.remoting import FrameDecoder, RemotingCommand
from tests.compat.venvs import client_venv

CLIENTS_DIR = Path(__file__).parent / "clients"
ROCKETMQ_V4 = ("rocketmq-0.4.4", ["rocketmq==0.4.4"])  # venv name, pinned requirements

SERVER_START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0  # seconds after SIGTERM before SIGKILL
SCRIPT_GRACE = 45.0  # seconds a client script may take beyond its --timeout (clean shutdown, watchdog)
TAIL_LINES = 30

T = TypeVar("T")


def poll(condition: Callable[[], T], timeout: float) -> T | None:
    """Check `condition` every 50 ms until it returns something truthy (returned) or `timeout` ends (None)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)
    return value


def wait_until(condition: Callable[[], T], timeout: float, describe: Callable[[], str]) -> T:
    """Like poll(), but a timeout fails the test with describe(), built only then."""
    value = poll(condition, timeout)
    if not value:
        pytest.fail(f"gave up after {timeout:.0f}s waiting for {describe()}", pytrace=False)
    return value


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"({exc})"


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if it is still running after STOP_TIMEOUT; only this process, by its PID."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT)


# --- servers ---------------------------------------------------------------------------------------


class ServerProcess:
    """`python -m ferrymq <role> ...` with its stdout and stderr in one log file."""

    def __init__(self, role: str, args: list[str], log_dir: Path) -> None:
        self.role = role
        self.log = log_dir / f"{role}.log"
        self.argv = [sys.executable, "-m", "ferrymq", role, *args]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )

    def describe(self) -> str:
        state = "running" if self.proc.poll() is None else f"exited with {self.proc.returncode}"
        return f"{' '.join(self.argv)} ({state}), output:\n{tail(self.log)}"

    def wait_listening(self, address: str) -> None:
        """Until `address` accepts TCP connections; fails at once if the process exits."""

        def accepting() -> bool:
            if self.proc.poll() is not None:
                pytest.fail(
                    f"{self.role} exited before listening on {address}: {self.describe()}", pytrace=False
                )
            host, port = address.rsplit(":", 1)
            try:
                socket.create_connection((host, int(port)), timeout=0.5).close()
                return True
            except OSError:
                return False

        wait_until(
            accepting, SERVER_START_TIMEOUT, lambda: f"{address} to accept connections: {self.describe()}"
        )

    def stop(self) -> None:
        stop_process(self.proc)


_opaque = itertools.count(1)


def remoting_call(
    address: str, code: int, ext_fields: dict[str, str], timeout: float = 5.0, body: bytes = b""
) -> RemotingCommand:
    """One request/response over a fresh connection, decoded with the project's own codec."""
    request = RemotingCommand(code, opaque=next(_opaque), ext_fields=ext_fields, body=body)
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(request.encode())
        decoder = FrameDecoder()
        while data := sock.recv(65536):
            for reply in decoder.feed(data):
                if reply.is_response and reply.opaque == request.opaque:
                    return reply
    raise ConnectionError(f"{address} closed the connection without answering request code {code}")


@dataclass
class Cluster:
    """A running NameServer and Broker, and what the test can ask them."""

    namesrv: str
    broker: str
    namesrv_process: ServerProcess
    broker_process: ServerProcess

    def describe(self) -> str:
        return f"{self.namesrv_process.describe()}\n{self.broker_process.describe()}"

    def route(self, topic: str) -> TopicRouteData | None:
        reply = remoting_call(self.namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        return decode_body(TopicRouteData, reply.body) if reply.code == ResponseCode.SUCCESS else None

    def queue_count(self, topic: str) -> int:
        """Readable queues of `topic`, once the NameServer routes it (clients learn routes from there)."""
        route = wait_until(
            lambda: self.route(topic),
            SERVER_START_TIMEOUT,
            lambda: f"the NameServer to route topic {topic!r}:\n{self.describe()}",
        )
        return sum(queue.read_queue_nums for queue in route.queue_datas)

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        fields = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)}
        reply = remoting_call(self.broker, RequestCode.QUERY_CONSUMER_OFFSET, fields)
        return int(reply.ext_fields["offset"]) if reply.code == ResponseCode.SUCCESS else None

    def consumer_ids(self, group: str) -> list[str]:
        reply = remoting_call(self.broker, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
        if reply.code != ResponseCode.SUCCESS:
            return []
        return decode_body(GetConsumerListByGroupResponseBody, reply.body).consumer_id_list


@pytest.fixture
def cluster(tmp_path) -> Iterator[Cluster]:
    """NameServer + Broker (DefaultCluster/broker-a) on free loopback ports, with a fresh store."""
    with running_cluster(tmp_path) as started:
        yield started


@contextlib.contextmanager
def running_cluster(tmp_path: Path, server_args: Sequence[str] = ()) -> Iterator[Cluster]:
    """The ``cluster`` fixture's NameServer and Broker, both given ``server_args`` too (e.g. TLS)."""
    log_dir = tmp_path / "servers"
    log_dir.mkdir()
    namesrv = f"127.0.0.1:{free_port()}"
    broker = f"127.0.0.1:{free_port()}"
    servers = []
    try:
        servers.append(ServerProcess("namesrv", ["--listen", namesrv, *server_args], log_dir))
        servers[0].wait_listening(namesrv)
        (tmp_path / "store").mkdir()
        broker_args = ["--namesrv", namesrv, "--listen", broker, "--store-dir", str(tmp_path / "store")]
        servers.append(
            ServerProcess(
                "broker",
                [*broker_args, "--cluster", "DefaultCluster", "--name", "broker-a", *server_args],
                log_dir,
            )
        )
        servers[1].wait_listening(broker)
        yield Cluster(namesrv, broker, *servers)
    finally:
        for server in reversed(servers):
            server.stop()


# --- clients ---------------------------------------------------------------------------------------


class ClientProcess:
    """A client script running in its venv; the JSON lines it prints are collected as they arrive."""

    def __init__(
        self, python: Path, script: Path, args: list[str], home: Path, label: str, timeout: float
    ) -> None:
        self.label = label
        self.timeout = timeout  # the script's own --timeout: it ends by itself soon after
        self.home = home
        self.argv = [str(python), str(script), *args]
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env.update(HOME=str(home), PYTHONUNBUFFERED="1")
        home.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._events: list[dict] = []
        self._stderr: list[str] = []
        self._lock = threading.Lock()
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read_stdout(self) -> None:
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                event = {"event": "unparsed", "text": line.rstrip("\n")}
            with self._lock:
                self._events.append(event)

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            with self._lock:
                self._stderr.append(line.rstrip("\n"))

    def events(self, kind: str) -> list[dict]:
        with self._lock:
            return [event for event in self._events if event.get("event") == kind]

    @property
    def messages(self) -> list[dict]:
        return self.events("message")

    def bodies(self) -> set[str]:
        return {message["body"] for message in self.messages}

    def describe(self) -> str:
        state = "running" if self.proc.poll() is None else f"exit code {self.proc.returncode}"
        with self._lock:
            stderr = "\n".join(self._stderr[-TAIL_LINES:])
            lines = len(self._events)
        logs = sorted((self.home / "logs" / "rocketmq-cpp").glob(f"{self.proc.pid}_*"))
        log = "\n".join(f"--- {path}\n{tail(path)}" for path in logs) or "(no client log)"
        return (
            f"[{self.label}] {' '.join(self.argv)}\n{state}, {lines} output line(s)\n"
            f"stderr:\n{stderr or '(empty)'}\nclient log:\n{log}"
        )

    def wait_exit(self, timeout: float | None = None) -> dict:
        """Its summary line, once it exited by itself with code 0 (by default, wait as long as it may run)."""
        timeout = self.timeout + SCRIPT_GRACE if timeout is None else timeout
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT)
            pytest.fail(
                f"{self.label} still running after {timeout:.0f}s, killed:\n{self.describe()}", pytrace=False
            )
        self._join_readers()
        summaries = self.events("summary")
        if self.proc.returncode != 0 or not summaries:
            pytest.fail(f"{self.label} failed:\n{self.describe()}", pytrace=False)
        return summaries[-1]

    def stop(self) -> dict:
        """Ask it to stop (SIGTERM: a clean client shutdown) and return its summary."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait_exit(SCRIPT_GRACE)

    def kill(self) -> None:
        stop_process(self.proc)
        self._join_readers()

    def _join_readers(self) -> None:
        for reader in self._readers:
            reader.join(STOP_TIMEOUT)


def credential_args(credentials: tuple[str, str] | None) -> list[str]:
    """The scripts' options to sign as (access key, secret key)."""
    return ["--access-key", credentials[0], "--secret-key", credentials[1]] if credentials else []


class V4Clients:
    """Runs the rocketmq 0.4.4 scripts (clients/v4) against a cluster."""

    def __init__(self, python: Path, cluster: Cluster, home_root: Path) -> None:
        self.python = python
        self.cluster = cluster
        self.home_root = home_root
        self.processes: list[ClientProcess] = []
        self.busy: list[dict] = []  # the last produce's flow-control refusals it sent again

    def start(self, script: str, label: str, args: list[str], timeout: float) -> ClientProcess:
        """A script with --namesrv set; one HOME per label, so a restarted client finds its own files."""
        argv = ["--namesrv", self.cluster.namesrv, "--timeout", str(timeout), *args]
        home = self.home_root / label
        process = ClientProcess(self.python, CLIENTS_DIR / "v4" / script, argv, home, label, timeout)
        self.processes.append(process)
        return process

    def produce(
        self,
        topic: str,
        count: int,
        *,
        prefix: str,
        mode: str = "sync",
        keys: bool = False,
        tags: tuple[str, ...] = (),
        properties: dict[str, str] | None = None,
        shards: int | None = None,
        delay_level: int = 0,
        pad: int = 0,
        credentials: tuple[str, str] | None = None,
        timeout: float = 60.0,
        resend_busy: bool = False,
    ) -> list[dict]:
        """Send `count` messages (bodies `<prefix>-<i>`, after `pad` dots) and return the producer's
        line for each (with `resend_busy`, flow-control refusals are sent again: its "busy" lines
        are in `self.busy`)."""
        args = ["--topic", topic, "--count", str(count), "--prefix", prefix, "--mode", mode]
        args += ["--keys"] * keys + [arg for tag in tags for arg in ("--tag", tag)]
        args += [
            arg for name, value in (properties or {}).items() for arg in ("--property", f"{name}={value}")
        ]
        args += ["--shards", str(shards)] if shards else []
        args += ["--delay-level", str(delay_level)] if delay_level else []
        args += ["--pad", str(pad)] if pad else []
        args += credential_args(credentials)
        args += ["--resend-busy"] * resend_busy
        producer = self.start("produce.py", f"produce-{prefix}", args, timeout)
        producer.wait_exit()
        self.busy = producer.events("busy")
        sent = producer.events("sent")
        assert len(sent) == count, producer.describe()
        return sent

    def consumer(
        self,
        topic: str,
        group: str,
        *,
        label: str,
        expression: str = "*",
        broadcasting: bool = False,
        orderly: bool = False,
        count: int | None = None,
        threads: int | None = None,
        properties: tuple[str, ...] = (),
        fail_times: int = 0,
        credentials: tuple[str, str] | None = None,
        timeout: float = 90.0,
    ) -> ClientProcess:
        """A PushConsumer running in the background until it stops by itself or is stopped."""
        args = ["--topic", topic, "--group", group, "--expression", expression]
        args += ["--model", "broadcasting" if broadcasting else "clustering"] + ["--orderly"] * orderly
        args += ["--count", str(count)] if count else []
        args += ["--threads", str(threads)] if threads else []
        args += [arg for name in properties for arg in ("--property", name)]
        args += ["--fail-times", str(fail_times)] if fail_times else []
        args += credential_args(credentials)
        return self.start("consume.py", label, args, timeout)

    def close(self) -> None:
        for process in self.processes:
            process.kill()


@pytest.fixture(scope="session")
def rocketmq_v4_python() -> Path:
    """The python of the rocketmq==0.4.4 venv (its wheel bundles an x86_64 Linux librocketmq.so only)."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        pytest.skip(
            f"rocketmq 0.4.4 ships a Linux x86_64 library only (this is {sys.platform}/{platform.machine()})"
        )
    return client_venv(*ROCKETMQ_V4)


@pytest.fixture
def v4(rocketmq_v4_python, cluster, tmp_path) -> Iterator[V4Clients]:
    clients = V4Clients(rocketmq_v4_python, cluster, tmp_path / "clients")
    yield clients
    clients.close()
