"""The two brokers a suite runs against: the gateway from this checkout (``ferrymq amqp`` as a
subprocess) and the machine's RabbitMQ.

A suite that hard-codes 127.0.0.1:5672 meets the gateway inside a network namespace made for the run:
the gateway listens on the namespace's own loopback 5672, the suite runs there too, and the machine's
RabbitMQ on the real 5672 is neither seen nor touched. Everything started is stopped by PID, and the
namespace deleted, however the run ends; a harness killed outright takes its gateway with it (SIGKILL on
parent death), and the next run removes the namespace it left.

On RabbitMQ the suites declare durable queues and exchanges and leave some behind. ``rabbitmq()`` lists
them before and after the run (``rabbitmqctl``) and deletes what the run added under the names the suite
uses, through AMQP since ``rabbitmqctl`` cannot delete an exchange. Other clients of that RabbitMQ declare
things too, meanwhile: those stay.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ferrymq.bench.processes import _die_with_parent, free_port, netns_available
from tests.amqp.conftest import PIKA
from tests.compat.conftest import stop_process
from tests.compat.venvs import client_venv

RABBITMQ = ("127.0.0.1", 5672)
GATEWAY_START_TIMEOUT = 30.0
COMMAND_TIMEOUT = 60.0
READY_LINE = "ferrymq dev is running."
NAMESPACE_PREFIX = "ferrymq-suites-"  # + the harness's PID
CLEANUP_SCRIPT = Path(__file__).parent / "rabbitmq_cleanup.py"


class BrokerError(RuntimeError):
    """A broker could not be started, reached or cleaned up; the message says which and why."""


@dataclass
class Target:
    """Where a suite finds its broker, and the command prefix that puts it in the broker's network."""

    name: str
    host: str
    port: int
    prefix: list[str] = field(default_factory=list)
    version: str = ""


@contextmanager
def gateway(log_dir: Path, fixed_port: bool) -> Iterator[Target]:
    """The gateway on a free loopback port, or on 127.0.0.1:5672 of a namespace of its own."""
    if not fixed_port:
        port = free_port()
        with _gateway_process(log_dir, [], port):
            yield Target("gateway", "127.0.0.1", port, version="ferrymq dev")
        return
    with _namespace() as prefix, _gateway_process(log_dir, prefix, 5672):
        yield Target("gateway", "127.0.0.1", 5672, prefix, "ferrymq dev")


def namespace_problem() -> str:
    """Why the fixed-port suites cannot meet the gateway here, or '' when they can."""
    return netns_available()[1]


@contextmanager
def _namespace() -> Iterator[list[str]]:
    available, why = netns_available()
    if not available:
        raise BrokerError(f"a suite that dials 127.0.0.1:5672 needs a network namespace: {why}")
    _remove_orphans()
    name = f"{NAMESPACE_PREFIX}{os.getpid()}"
    _ip("netns", "add", name)
    try:
        _ip("netns", "exec", name, "ip", "link", "set", "lo", "up")
        yield ["ip", "netns", "exec", name]  # `ip netns exec` execs the command: its PID is the command's
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=COMMAND_TIMEOUT)


def _remove_orphans() -> None:
    """Namespaces left by a harness that was killed outright (its PID is gone), and what runs in them."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    for line in listed.stdout.splitlines():
        name = line.split(" ", 1)[0]
        owner = name.removeprefix(NAMESPACE_PREFIX)
        if name == owner or not owner.isdigit() or Path(f"/proc/{owner}").exists():
            continue
        pids = subprocess.run(
            ["ip", "netns", "pids", name], capture_output=True, text=True, timeout=COMMAND_TIMEOUT
        )
        for pid in pids.stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=COMMAND_TIMEOUT)


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    if done.returncode != 0:
        raise BrokerError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")


@contextmanager
def _gateway_process(log_dir: Path, prefix: list[str], port: int) -> Iterator[None]:
    log = log_dir / "gateway.log"
    argv = [
        *prefix, sys.executable, "-m", "ferrymq", "dev", "--data-dir", str(log_dir / "data"),
        "--namesrv-port", "0", "--broker-port", "0", "--proxy-port", "-1", "--console-port", "-1",
        "--amqp-port", str(port),
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent
        )
    try:
        deadline = time.monotonic() + GATEWAY_START_TIMEOUT
        while READY_LINE not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                state = (
                    "exited" if proc.poll() is not None else f"not ready after {GATEWAY_START_TIMEOUT:.0f}s"
                )
                raise BrokerError(f"{' '.join(argv)} {state}:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.05)
        yield
    finally:
        stop_process(proc)


# --- RabbitMQ ---------------------------------------------------------------------------------------


@contextmanager
def rabbitmq(declares: str) -> Iterator[Target]:
    """The machine's RabbitMQ; the queues and exchanges named as `declares` (a regular expression for the
    whole name) that the run leaves there are deleted afterwards. Others that appear meanwhile belong to
    someone else and stay."""
    version = _rabbitmqctl("version").strip()
    before = _objects()
    try:
        yield Target("RabbitMQ", *RABBITMQ, version=f"RabbitMQ {version}")
    finally:
        ours = re.compile(declares) if declares else None
        left = {(kind, name) for kind, name in _objects() - before if ours and ours.fullmatch(name)}
        if left:
            _delete(left)
            if remaining := left & _objects():
                raise BrokerError(f"could not delete from RabbitMQ: {sorted(remaining)}")


def _objects() -> set[tuple[str, str]]:
    """("queue" | "exchange", name) of every queue and non-default exchange in vhost /."""
    found = {("queue", name) for name in _names("list_queues")}
    found |= {("exchange", name) for name in _names("list_exchanges") if not name.startswith("amq.")}
    return found


def _names(command: str) -> list[str]:
    """Names in vhost /, less the default exchange's empty one."""
    return [
        line for line in _rabbitmqctl(command, "--quiet", "--no-table-headers", "name").splitlines() if line
    ]


def _rabbitmqctl(*args: str) -> str:
    try:
        done = subprocess.run(
            ["rabbitmqctl", *args],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BrokerError(f"rabbitmqctl {' '.join(args)}: {exc}") from None
    if done.returncode != 0:
        raise BrokerError(f"rabbitmqctl {' '.join(args)} failed: {(done.stdout + done.stderr).strip()}")
    return done.stdout


def _delete(objects: set[tuple[str, str]]) -> None:
    python = client_venv(*PIKA)  # the venv of tests/amqp's own pika tests
    names = {kind: sorted(name for k, name in objects if k == kind) for kind in ("queue", "exchange")}
    argv = [str(python), str(CLEANUP_SCRIPT), f"{RABBITMQ[0]}:{RABBITMQ[1]}", json.dumps(names)]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, stdin=subprocess.DEVNULL
    )
    if done.returncode != 0:
        raise BrokerError(f"deleting {names} from RabbitMQ failed:\n{done.stderr[-3000:]}")
