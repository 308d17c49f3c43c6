"""The AMQP gateway in this process over an in-process broker (`local_gateway`), or inside `ferrymq dev`
as a subprocess shared by the session (`gateway`); real AMQP clients in their own venvs as one-shot
scenario scripts (clients/); and the machine's RabbitMQ (127.0.0.1:5672) as the reference where it
runs (the scenarios delete what they create there)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ferrymq.amqp.gateway import Gateway, GatewayLimits
from ferrymq.amqp.server import AMQPServer
from ferrymq.bench.processes import free_port, free_ports
from ferrymq.cli.proxying import local_message_service
from ferrymq.meta.database import database_url, make_engine
from ferrymq.meta.service import MetaService
from ferrymq.meta.store import MetaStore
from tests.broker.conftest import Cluster, make_cluster  # noqa: F401  (fixture)
from tests.compat.conftest import ServerProcess
from tests.compat.venvs import client_venv
from tests.meta.conftest import postgres_url  # noqa: F401  (fixture)

CLIENTS = Path(__file__).parent / "clients"
PIKA = ("pika-1.4.4", ["pika==1.4.4"])
AIO_PIKA = ("aio-pika-10.2.1", ["aio-pika==10.2.1"])
RABBITMQ = ("127.0.0.1", 5672)
SCENARIO_TIMEOUT = 90.0


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int


def rabbitmq_running() -> bool:
    try:
        socket.create_connection(RABBITMQ, timeout=1).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def gateway(tmp_path_factory) -> Iterator[Endpoint]:
    """`ferrymq dev` with its gateway (local mode) on a free port, shared by the session's tests:
    each test names its own queues and exchanges."""
    port, where = free_port(), tmp_path_factory.mktemp("gateway")
    argv = [
        "--data-dir",
        str(where / "data"),
        "--namesrv-port",
        "0",
        "--broker-port",
        "0",
        "--proxy-port",
        "-1",
    ]
    server = ServerProcess("dev", [*argv, "--console-port", "-1", "--amqp-port", str(port)], where)
    try:
        server.wait_listening(f"127.0.0.1:{port}")
        yield Endpoint("127.0.0.1", port)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def two_gateways(tmp_path_factory, postgres_url) -> Iterator[tuple[Endpoint, Endpoint]]:  # noqa: F811
    """Two stateless gateways (`ferrymq amqp`) in front of one cluster, sharing a metadata server
    (`ferrymq meta`) on the machine's PostgreSQL."""
    where = tmp_path_factory.mktemp("two-gateways")
    namesrv, broker, meta, *gateways = free_ports(5)
    for name in ("meta", *(f"gateway-{port}" for port in gateways)):
        (where / name).mkdir()
    started = [
        ServerProcess(
            "dev",
            ["--data-dir", str(where / "data"), "--namesrv-port", str(namesrv), "--broker-port", str(broker),
             "--proxy-port", "-1", "--amqp-port", "-1", "--console-port", "-1"],
            where,
        ),
        ServerProcess("meta", ["--database", postgres_url, "--listen", f"127.0.0.1:{meta}"], where / "meta"),
    ]  # fmt: skip
    try:
        started[0].wait_listening(f"127.0.0.1:{broker}")
        started[1].wait_listening(f"127.0.0.1:{meta}")
        for port in gateways:
            argv = [
                "--namesrv",
                f"127.0.0.1:{namesrv}",
                "--listen",
                f"127.0.0.1:{port}",
                "--meta",
                f"127.0.0.1:{meta}",
                "--metrics-port",
                "-1",
            ]
            started.append(ServerProcess("amqp", argv, where / f"gateway-{port}"))
            started[-1].wait_listening(f"127.0.0.1:{port}")
        yield Endpoint("127.0.0.1", gateways[0]), Endpoint("127.0.0.1", gateways[1])
    finally:
        for server in reversed(started):
            server.stop()


@dataclass
class LocalGateway:
    gateway: Gateway
    server: AMQPServer
    port: int
    cluster: Cluster


@pytest.fixture
async def make_local_gateway(make_cluster, tmp_path) -> AsyncIterator:  # noqa: F811
    """Starts a broker, a SQLite metadata store and a gateway with given limits, all in this process."""
    started: list[tuple[AMQPServer, MetaStore]] = []

    async def start(limits: GatewayLimits | None = None, **server_options) -> LocalGateway:
        """``server_options``: more of AMQPServer's (e.g. TLS)."""
        cluster = await make_cluster()
        store = MetaStore(make_engine(database_url(tmp_path / f"meta{len(started)}")))
        store.ensure_defaults()
        gateway = Gateway(local_message_service(cluster.broker), MetaService(store), limits)
        server = AMQPServer("127.0.0.1", 0, gateway, **server_options)
        started.append((server, store))
        return LocalGateway(gateway, server, await server.start(), cluster)

    yield start
    for server, store in started:
        await server.close()
        store.engine.dispose()


@pytest.fixture
async def local_gateway(make_local_gateway) -> LocalGateway:
    return await make_local_gateway()


@pytest.fixture
def rabbitmq() -> Endpoint:
    if not rabbitmq_running():
        pytest.skip("no RabbitMQ on 127.0.0.1:5672 to compare with")
    return Endpoint(*RABBITMQ)


def run_scenario(python: Path, script: str, scenario: str, where: Endpoint, *more: str) -> dict:
    """What the client script reported for `scenario` against `where` (`more` arguments after it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    argv = [str(python), str(CLIENTS / script), scenario, where.host, str(where.port), *more]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=SCENARIO_TIMEOUT, env=env, stdin=subprocess.DEVNULL
    )
    if done.returncode != 0 or not done.stdout.strip():
        pytest.fail(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def pika_python() -> Path:
    return client_venv(*PIKA)


@pytest.fixture(scope="session")
def aio_pika_python() -> Path:
    return client_venv(*AIO_PIKA)
