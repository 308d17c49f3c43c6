"""The AMQP gateway (`ferrymq amqp`) as a subprocess on a free port, real AMQP clients in their own
venvs as one-shot scenario scripts (clients/), and the machine's RabbitMQ (127.0.0.1:5672, read-only
use) as the reference where it runs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ferrymq.bench.processes import free_port
from tests.compat.conftest import ServerProcess
from tests.compat.venvs import client_venv

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


@pytest.fixture
def gateway(tmp_path) -> Iterator[Endpoint]:
    port = free_port()
    server = ServerProcess("amqp", ["--listen", f"127.0.0.1:{port}"], tmp_path)
    try:
        server.wait_listening(f"127.0.0.1:{port}")
        yield Endpoint("127.0.0.1", port)
    finally:
        server.stop()


@pytest.fixture
def rabbitmq() -> Endpoint:
    if not rabbitmq_running():
        pytest.skip("no RabbitMQ on 127.0.0.1:5672 to compare with")
    return Endpoint(*RABBITMQ)


def run_scenario(python: Path, script: str, scenario: str, where: Endpoint) -> dict:
    """What the client script reported for `scenario` against `where`."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    argv = [str(python), str(CLIENTS / script), scenario, where.host, str(where.port)]
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
