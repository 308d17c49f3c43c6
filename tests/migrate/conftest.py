"""The machine's RabbitMQ (127.0.0.1:5672; the tests skip without it) as the source, and `ferrymq dev`
with its gateway in a subprocess as the target. Every test names its own queues, exchanges and users
and deletes what it made on RabbitMQ."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pika
import pytest

from ferrymq.bench.processes import free_port
from tests.amqp.conftest import RABBITMQ, rabbitmq_running
from tests.compat.conftest import ServerProcess, wait_until

MIGRATE_TIMEOUT = 180.0
SOURCE = f"amqp://guest:guest@{RABBITMQ[0]}:{RABBITMQ[1]}/"


@dataclass(frozen=True)
class Target:
    """`ferrymq dev`: its gateway's port and the database its metadata lives in."""

    port: int
    meta_database: str
    server: ServerProcess
    user: tuple[str, str] = ("guest", "guest")  # who logs in to its gateway

    @property
    def url(self) -> str:
        return f"amqp://{self.user[0]}:{self.user[1]}@127.0.0.1:{self.port}/"

    @property
    def namesrv(self) -> str:
        """The NameServer's address, as `ferrymq dev` printed it."""
        found = re.search(r"NameServer\s+(\S+)", self.server.log.read_text())
        assert found is not None, self.server.describe()
        return found[1]

    def connect(self, user: str | None = None, password: str | None = None) -> pika.BlockingConnection:
        credentials = pika.PlainCredentials(user or self.user[0], password or self.user[1])
        return pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", self.port, credentials=credentials)
        )


def rabbitmqctl(*args: str, check: bool = True) -> str:
    done = subprocess.run(
        ["rabbitmqctl", *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    if check and done.returncode != 0:
        raise AssertionError(f"rabbitmqctl {' '.join(args)}: {done.stderr}")
    return done.stdout


@dataclass
class Source:
    """The machine's RabbitMQ, with what a test made on it, deleted afterwards."""

    queues: list[str] = field(default_factory=list)
    exchanges: list[str] = field(default_factory=list)
    users: list[str] = field(default_factory=list)

    def name(self, what: str) -> str:
        return f"ferrymq-migrate-{what}-{uuid.uuid4().hex[:8]}"

    def connect(self) -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.ConnectionParameters(*RABBITMQ))

    def queue(self, what: str = "q", **arguments) -> str:
        name = self.name(what)
        self.queues.append(name)
        with self.connect() as c:
            c.channel().queue_declare(name, durable=True, arguments=arguments or None)
        return name

    def count(self, queue: str) -> int:
        with self.connect() as c:
            return c.channel().queue_declare(queue, passive=True).method.message_count

    def cleanup(self) -> None:
        with self.connect() as c:
            ch = c.channel()
            for q in self.queues:
                ch.queue_delete(q)
            for x in self.exchanges:
                ch.exchange_delete(x)
        for user in self.users:
            rabbitmqctl("delete_user", user, check=False)


@pytest.fixture
def source() -> Iterator[Source]:
    if not rabbitmq_running():
        pytest.skip("no RabbitMQ on 127.0.0.1:5672 to migrate from")
    made = Source()
    try:
        yield made
    finally:
        made.cleanup()


@contextlib.contextmanager
def running_target(where: Path, auth_user: tuple[str, str] | None = None) -> Iterator[Target]:
    """`ferrymq dev` on free ports; its metadata is SQLite under its data directory. With
    `auth_user`, authentication is on and that super user logs in to its gateway."""
    port, data = free_port(), where / "data"
    argv = ["--data-dir", str(data), "--namesrv-port", "0", "--broker-port", "0", "--proxy-port", "-1",
            "--console-port", "-1", "--amqp-port", str(port)]  # fmt: skip
    if auth_user is not None:
        argv += ["--auth-user", ":".join(auth_user)]
    server = ServerProcess("dev", argv, where)
    try:
        server.wait_listening(f"127.0.0.1:{port}")
        wait_until(lambda: "ferrymq dev is running" in server.log.read_text(), 60, server.describe)
        meta_database = f"sqlite:///{(data / 'meta' / 'meta.db').resolve()}"
        yield Target(port, meta_database, server, *([auth_user] if auth_user else []))
    finally:
        server.stop()


@pytest.fixture(scope="session")
def target(tmp_path_factory) -> Iterator[Target]:
    with running_target(tmp_path_factory.mktemp("migrate-target")) as running:
        yield running


def migrate_argv(target: Target, *args: str) -> list[str]:
    return [
        sys.executable, "-m", "ferrymq", "migrate", "rabbitmq", "--source", SOURCE,
        "--gateway", target.url, "--meta-database", target.meta_database, "--settle", "1", *args,
    ]  # fmt: skip


def migrate(target: Target, *args: str) -> subprocess.CompletedProcess:
    """Run `ferrymq migrate rabbitmq` to the end; fails the test if it exits non-zero."""
    done = subprocess.run(
        migrate_argv(target, *args), capture_output=True, text=True, timeout=MIGRATE_TIMEOUT,
        stdin=subprocess.DEVNULL, env=migrate_env(),
    )  # fmt: skip
    if done.returncode != 0:
        pytest.fail(
            f"ferrymq migrate exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done


def start_migrate(target: Target, log: Path, *args: str) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen(
            migrate_argv(target, *args),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=migrate_env(),
        )


def migrate_env() -> dict[str, str]:
    root = Path(__file__).resolve().parents[2]
    return {**os.environ, "PYTHONPATH": f"{root / 'src'}:{root}"}


DIRECT = "stored straight into the brokers"  # what the summary says of such a queue


@pytest.fixture(params=["gateway", "brokers"])
def into(request, target: Target) -> tuple[str, ...]:
    """Through the gateway (publishes and confirms), or straight into its brokers (`--namesrv`)."""
    return ("--namesrv", target.namesrv) if request.param == "brokers" else ()


def went(output: str, into: tuple[str, ...]) -> bool:
    """Whether a migrator's output says it stored where it was asked to."""
    return (DIRECT in output) == bool(into)
