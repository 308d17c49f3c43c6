"""Definitions cross over: what RabbitMQ has (exchanges, queues, bindings, users with their password
hashes) is then in the gateway, and a user made in RabbitMQ logs in to the gateway unchanged."""

from __future__ import annotations

import json
import time

import pika
import pika.exceptions
import pytest

from tests.migrate.conftest import Source, Target, migrate, rabbitmqctl


def _routed(target: Target, exchange: str, key: str, queue: str, timeout: float = 15.0) -> bytes:
    """Publish through `exchange` until the gateway routes it into `queue` (its view of new
    bindings follows the metadata within a poll interval); the body that arrived."""
    deadline = time.monotonic() + timeout
    with target.connect() as c:
        ch = c.channel()
        ch.confirm_delivery()
        while time.monotonic() < deadline:
            try:
                ch.basic_publish(exchange, key, b"through the binding", mandatory=True)
            except pika.exceptions.UnroutableError:
                time.sleep(0.2)
                continue
            method, _, body = ch.basic_get(queue, auto_ack=True)
            assert method is not None
            return body
    pytest.fail(f"{exchange} -> {queue} with key {key} never routed in the gateway")


def test_exchanges_queues_bindings_and_users_come_across(source: Source, target: Target) -> None:
    exchange, queue = source.name("x"), source.queue("bound", **{"x-max-length": 1000})
    source.exchanges.append(exchange)
    user, password = source.name("user"), "s3cret-Passw0rd"
    with source.connect() as c:
        ch = c.channel()
        ch.exchange_declare(exchange, "topic", durable=True)
        ch.queue_bind(queue, exchange, "orders.#")
    rabbitmqctl("add_user", user, password)
    source.users.append(user)
    rabbitmqctl("set_permissions", "-p", "/", user, ".*", ".*", ".*")

    done = migrate(target, "--no-drain")
    assert "queues:" in done.stdout and "users:" in done.stdout

    with target.connect() as c:
        ch = c.channel()
        ch.exchange_declare(exchange, "topic", passive=True)
        declared = ch.queue_declare(queue, passive=True)
        assert declared.method.queue == queue
    assert _routed(target, exchange, "orders.eu.new", queue) == b"through the binding"
    with target.connect(user, password) as c:  # RabbitMQ's password hash came across
        c.channel().queue_declare(queue, passive=True)
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        target.connect(user, "not-the-password")


def test_dry_run_changes_nothing(source: Source, target: Target) -> None:
    queue = source.queue("dry")
    done = migrate(target, "--dry-run")
    assert "would import" in done.stdout and queue in done.stdout
    with target.connect() as c, pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        c.channel().queue_declare(queue, passive=True)
    assert closed.value.reply_code == 404


def test_definitions_from_a_file(source: Source, target: Target, tmp_path) -> None:
    queue = source.name("file")
    doc = {
        "vhosts": [{"name": "/"}],
        "queues": [{"name": queue, "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}}],
    }
    path = tmp_path / "definitions.json"
    path.write_text(json.dumps(doc))
    migrate(target, "--definitions", str(path), "--no-drain")
    with target.connect() as c:
        assert c.channel().queue_declare(queue, passive=True).method.message_count == 0


def test_bad_definitions_file_is_a_clear_error(target: Target, tmp_path) -> None:
    import subprocess

    from tests.migrate.conftest import migrate_argv, migrate_env

    path = tmp_path / "broken.json"
    path.write_text("{not json")
    done = subprocess.run(
        migrate_argv(target, "--definitions", str(path)), capture_output=True, text=True, timeout=60,
        env=migrate_env(), stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode != 0
    assert "is not definitions JSON" in done.stderr and "Traceback" not in done.stderr
