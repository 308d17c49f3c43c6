"""The official RocketMQ 5.x clients (Python rocketmq-python-client and Node.js rocketmq-client-nodejs,
each in its own cached environment) against our proxy: in local mode (`ferrymq dev`, the proxy inside
the broker process) and in cluster mode (`ferrymq proxy` in front of a NameServer and a broker, all
separate processes). A client runs as a driver process the test sends commands to (clients/driver.py,
clients/driver.js: the same protocol) and reads answers from, with bounded waits.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from ferrymq.bench.processes import free_ports
from ferrymq.protocol.bodies import SubscriptionGroupConfig, encode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from tests.compat.conftest import SERVER_START_TIMEOUT, ServerProcess, remoting_call, stop_process, wait_until
from tests.compat.venvs import client_node_modules, client_venv

PYTHON_CLIENT = ("rocketmq-python-client-5.1.2", ["rocketmq-python-client==5.1.2"])
NODE_CLIENT = ("rocketmq-client-nodejs-1.0.8", ["rocketmq-client-nodejs@1.0.8"])
DRIVER = Path(__file__).parent / "clients" / "driver.py"
NODE_DRIVER = Path(__file__).parent / "clients" / "driver.js"
PYTHON_LOG = "logs/rocketmq_python/rocketmq_client.log"  # under the client's home
NODE_LOG = "logs/rocketmq/rocketmq_client_nodejs.log"
DRIVER_LIFETIME = 240.0  # seconds before the driver's watchdog ends it, whatever the test does
ANSWER_TIMEOUT = 60.0  # seconds for one command (a receive long-polls; client start-up waits for settings)


@dataclass
class Proxied:
    """A proxy and the broker behind it, in one of the two modes."""

    mode: str
    proxy: str  # host:port of the gRPC proxy
    namesrv: str
    broker: str
    servers: list[ServerProcess]

    def describe(self) -> str:
        return "\n".join(server.describe() for server in self.servers)

    def create_group(self, group: str, *, orderly: bool = False, retry_max_times: int = 16) -> None:
        config = SubscriptionGroupConfig(
            group, consume_message_orderly=orderly, retry_max_times=retry_max_times
        )
        body = encode_body(config)
        reply = remoting_call(self.broker, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body=body)
        assert reply.code == ResponseCode.SUCCESS, reply.remark

    def create_topic(self, topic: str, queues: int = 2, message_type: str = "NORMAL") -> None:
        """A topic on the broker, routed by the NameServer (where the cluster-mode proxy looks), that
        takes messages of `message_type` (its message.type attribute)."""
        fields = {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues),
            "writeQueueNums": str(queues), "perm": "6", "topicFilterType": "SINGLE_TAG",
            "attributes": f"+message.type={message_type}",
        }  # fmt: skip
        reply = remoting_call(self.broker, RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
        assert reply.code == ResponseCode.SUCCESS, reply.remark

        def routed() -> bool:
            answer = remoting_call(self.namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            return answer.code == ResponseCode.SUCCESS

        wait_until(
            routed, SERVER_START_TIMEOUT, lambda: f"the NameServer to route {topic}:\n{self.describe()}"
        )


@pytest.fixture(scope="session")
def client_python() -> Path:
    return client_venv(*PYTHON_CLIENT)


@pytest.fixture(scope="session")
def client_node() -> Path:
    """The node_modules folder holding the Node.js client."""
    return client_node_modules(*NODE_CLIENT)


@pytest.fixture(params=["local", "cluster"])
def proxied(request, tmp_path) -> Iterator[Proxied]:
    log_dir = tmp_path / "servers"
    log_dir.mkdir()
    namesrv_port, broker_port, proxy_port = free_ports(3)
    namesrv, broker, proxy = (f"127.0.0.1:{p}" for p in (namesrv_port, broker_port, proxy_port))
    servers: list[ServerProcess] = []
    try:
        if request.param == "local":
            args = [
                "--data-dir", str(tmp_path / "data"), "--namesrv-port", str(namesrv_port),
                "--broker-port", str(broker_port), "--proxy-port", str(proxy_port), "--console-port", "-1",
                "--amqp-port", "-1",  # a fixed default port: another dev on this machine may hold it
            ]  # fmt: skip
            servers.append(ServerProcess("dev", args, log_dir))
        else:
            servers.append(ServerProcess("namesrv", ["--listen", namesrv], log_dir))
            servers[-1].wait_listening(namesrv)
            args = ["--namesrv", namesrv, "--listen", broker, "--store-dir", str(tmp_path / "store")]
            servers.append(ServerProcess("broker", args, log_dir))
            servers[-1].wait_listening(broker)
            servers.append(ServerProcess("proxy", ["--namesrv", namesrv, "--listen", proxy], log_dir))
        for address in (namesrv, broker, proxy):
            servers[-1].wait_listening(address)
        yield Proxied(request.param, proxy, namesrv, broker, servers)
    finally:
        for server in reversed(servers):
            server.stop()


class ClientDriver:
    """A driver process (`command` plus the endpoint and its lifetime) with `home` as its HOME, where the
    client writes its log (`log`, relative to home): `call` sends one command and returns its answer."""

    def __init__(
        self, command: Sequence[str], endpoint: str, home: Path, log: str, env: Mapping[str, str]
    ) -> None:
        home.mkdir(parents=True, exist_ok=True)
        dropped = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "NODE_PATH")
        environ = {k: v for k, v in os.environ.items() if k not in dropped}
        environ.update(HOME=str(home), **env)
        self.home = home
        self.log = home / log
        self.proc = subprocess.Popen(
            [*command, endpoint, str(DRIVER_LIFETIME)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ,
        )  # fmt: skip
        self._answers: queue.Queue[str] = queue.Queue()
        self._stderr: list[str] = []
        threading.Thread(target=self._read, args=(self.proc.stdout, self._answers.put), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, self._stderr.append), daemon=True).start()

    @staticmethod
    def _read(stream, put) -> None:
        for line in stream:
            put(line)

    def describe(self) -> str:
        state = "running" if self.proc.poll() is None else f"exit code {self.proc.returncode}"
        logs = sorted((self.home / "logs").rglob("*.log"))
        log = "\n".join(
            f"--- {p}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-20:]) for p in logs
        )
        return f"client driver {state}; stderr:\n{''.join(self._stderr[-30:])}\nclient log:\n{log}"

    def log_text(self) -> str:
        """The client's own log."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def call(self, op: str, **fields) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.proc.stdin.flush()
        try:
            return json.loads(self._answers.get(timeout=ANSWER_TIMEOUT))
        except queue.Empty:
            pytest.fail(f"no answer to {op} within {ANSWER_TIMEOUT:.0f}s: {self.describe()}", pytrace=False)

    def ok(self, op: str, **fields) -> dict:
        answer = self.call(op, **fields)
        if not answer["ok"]:
            pytest.fail(f"{op} {fields} failed: {answer}\n{self.describe()}", pytrace=False)
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                pass
        stop_process(self.proc)


def tls_env(trust: Path | None) -> dict[str, str]:
    """A driver's environment for TLS trusting only ``trust`` (a CA file), or none for plaintext: the
    5.x clients have no CA option and trust only what grpc's roots say."""
    return {} if trust is None else {"DRIVER_TLS": "1", "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(trust)}


def python_driver(
    python: Path, endpoint: str, home: Path, credentials: tuple[str, str] | None = None, *,
    trust: Path | None = None,
) -> ClientDriver:  # fmt: skip
    """The Python client's driver, run by the python of its venv (over TLS with ``trust``, signing
    with ``credentials``)."""
    env = {"PYTHONUNBUFFERED": "1", **tls_env(trust)}
    if credentials:
        env.update(DRIVER_ACCESS_KEY=credentials[0], DRIVER_SECRET_KEY=credentials[1])
    return ClientDriver([str(python), str(DRIVER)], endpoint, home, PYTHON_LOG, env)


def node_driver(node_modules: Path, endpoint: str, home: Path, *, trust: Path | None = None) -> ClientDriver:
    """The Node.js client's driver, finding the client in `node_modules` (over TLS with ``trust``)."""
    env = {"NODE_PATH": str(node_modules), **tls_env(trust)}
    return ClientDriver(["node", str(NODE_DRIVER)], endpoint, home, NODE_LOG, env)


@pytest.fixture
def client(client_python, proxied, tmp_path) -> Iterator[ClientDriver]:
    driver = python_driver(client_python, proxied.proxy, tmp_path / "client-home")
    try:
        yield driver
    finally:
        driver.close()


@pytest.fixture
def node(client_node, proxied, tmp_path) -> Iterator[ClientDriver]:
    driver = node_driver(client_node, proxied.proxy, tmp_path / "node-home")
    try:
        yield driver
    finally:
        driver.close()


WAIT = 30.0  # seconds for messages to arrive


def receive_until(client, done: Callable[[list[dict]], bool], *, invisible_s: int = 30) -> list[dict]:
    """What `client`'s SimpleConsumer receives (in order) until `done` says it is enough, or WAIT ends."""
    got: list[dict] = []
    deadline = time.monotonic() + WAIT
    while not done(got) and time.monotonic() < deadline:
        got += client.ok("receive", max=16, invisible_s=invisible_s)["messages"]
    return got


def wait_pushed(client, done: Callable[[list[dict]], bool]) -> list[dict]:
    """The calls `client`'s PushConsumer listener got, once `done` says they are enough (or WAIT ends)."""
    deadline = time.monotonic() + 2 * WAIT
    calls = client.ok("pushed")["messages"]
    while not done(calls) and time.monotonic() < deadline:
        time.sleep(0.2)
        calls = client.ok("pushed")["messages"]
    return calls
