"""The other way to drain: RabbitMQ's own shovel plugin (Erlang's AMQP client, one more real peer)
pushes a queue into the gateway with ack-mode on-confirm. The plugin is enabled for the test and
disabled again afterwards if it was off."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import pika
import pytest

from tests.migrate.conftest import Source, Target, migrate, rabbitmqctl

SHOVEL_TIMEOUT_S = 120.0


def _plugins(*args: str) -> str:
    done = subprocess.run(
        ["rabbitmq-plugins", *args], capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def shovel_plugin(source: Source) -> Iterator[None]:
    was_enabled = "[E" in _plugins("list", "-E", "^rabbitmq_shovel$")
    if not was_enabled:
        _plugins("enable", "rabbitmq_shovel")
    try:
        yield
    finally:
        if not was_enabled:
            _plugins("disable", "rabbitmq_shovel")


def test_the_shovel_plugin_moves_a_queue_into_the_gateway(
    source: Source, target: Target, shovel_plugin: None
) -> None:
    count = 2000
    queue = source.queue("shovel")
    with source.connect() as c:
        ch = c.channel()
        ch.confirm_delivery()
        for i in range(count):
            headers = {"i": i, "tag": f"t{i % 3}"}
            ch.basic_publish(
                "", queue, f"body {i}".encode(), pika.BasicProperties(message_id=f"s{i}", headers=headers)
            )
    migrate(target, "-q", queue, "--no-drain")  # the queue in the gateway first
    name = source.name("shovel")
    definition = {
        "src-protocol": "amqp091", "src-uri": "amqp://guest:guest@127.0.0.1:5672", "src-queue": queue,
        "dest-protocol": "amqp091", "dest-uri": target.url.rstrip("/"), "dest-queue": queue,
        "ack-mode": "on-confirm", "src-delete-after": "never",
    }  # fmt: skip
    rabbitmqctl("set_parameter", "shovel", name, json.dumps(definition))
    try:
        deadline = time.monotonic() + SHOVEL_TIMEOUT_S
        with target.connect() as c:
            ch = c.channel()
            while ch.queue_declare(queue, passive=True).method.message_count < count:
                assert time.monotonic() < deadline, rabbitmqctl("shovel_status", check=False)
                time.sleep(0.2)
        assert source.count(queue) == 0
    finally:
        rabbitmqctl("clear_parameter", "shovel", name, check=False)
    with target.connect() as c:
        ch = c.channel()
        for i in range(count):
            method, properties, body = ch.basic_get(queue, auto_ack=True)
            assert method is not None, i
            assert (properties.message_id, body) == (f"s{i}", f"body {i}".encode())
            assert properties.headers["i"] == i and properties.headers["tag"] == f"t{i % 3}"
        assert ch.queue_declare(queue, passive=True).method.message_count == 0
