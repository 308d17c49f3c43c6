"""Draining straight into the brokers (`--namesrv`): the messages read back through the gateway are
those RabbitMQ held, with their properties, in order, none lost even when the migrator is killed;
queues whose puts the gateway shapes (a length limit) still go through the gateway."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter

import pika

from tests.migrate.conftest import Source, Target, migrate, migrate_argv, migrate_env, start_migrate
from tests.migrate.test_drain import FIELDS, _body, _fill, _properties, _take_all

DIRECT = "stored straight into the brokers"


def test_every_message_crosses_with_its_properties(source: Source, target: Target) -> None:
    count = 3000
    queue = source.queue("store-props", **{"x-message-ttl": 3_600_000})
    _fill(source, queue, count)

    done = migrate(target, "-q", queue, "--prefetch", "300", "--namesrv", target.namesrv)

    assert f"{count:,} moved" in done.stdout and DIRECT in done.stdout
    assert source.count(queue) == 0
    got = _take_all(target, queue, count)
    assert len(got) == count  # no duplicates without a crash
    for i, (message_id, properties, body) in enumerate(got):
        assert message_id == f"m{i}"  # RabbitMQ's order
        expected = _properties(i)
        for name in FIELDS:
            assert getattr(properties, name) == getattr(expected, name), (i, name)
        assert body == _body(i)


def test_killed_mid_drain_then_restarted_loses_nothing(source: Source, target: Target, tmp_path) -> None:
    count, prefetch = 30_000, 500
    queue = source.queue("store-kill")
    _fill(source, queue, count, varied=False)

    direct = ("--prefetch", str(prefetch), "--namesrv", target.namesrv)
    first = start_migrate(target, tmp_path / "first.log", "-q", queue, *direct)
    deadline = time.monotonic() + 120
    try:
        while source.count(queue) > count * 2 // 3:  # a third moved: kill it mid-stream
            assert first.poll() is None, (tmp_path / "first.log").read_text()
            assert time.monotonic() < deadline, "the first migrator made no progress"
            time.sleep(0.05)
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)
    left = source.count(queue)
    assert 0 < left < count

    done = migrate(target, "-q", queue, *direct)
    assert source.count(queue) == 0 and DIRECT in done.stdout

    seen = Counter(message_id for message_id, _, _ in _take_all(target, queue, count))
    assert set(seen) == {f"m{i}" for i in range(count)}  # nothing lost
    duplicates = sum(seen.values()) - count
    # only what the broker stored but RabbitMQ had not heard acknowledged comes twice: at most one
    # prefetch window, and each of them was flagged redelivered by RabbitMQ
    assert duplicates <= prefetch
    if duplicates:
        assert "redelivered" in done.stdout


def test_a_length_limited_queue_goes_through_the_gateway(source: Source, target: Target) -> None:
    queue = source.queue("store-limited", **{"x-max-length": 1000})
    _fill(source, queue, 50, varied=False)

    done = migrate(target, "-q", queue, "--namesrv", target.namesrv)

    assert "50 moved" in done.stdout and DIRECT not in done.stdout
    assert [m for m, _, _ in _take_all(target, queue, 50)] == [f"m{i}" for i in range(50)]


def test_a_message_the_broker_refuses_stays_in_rabbitmq(source: Source, target: Target) -> None:
    queue = source.queue("store-large")
    with source.connect() as c:
        ch = c.channel()
        ch.confirm_delivery()
        for i in range(5):
            ch.basic_publish("", queue, b"small", pika.BasicProperties(message_id=f"s{i}"))
        ch.basic_publish("", queue, b"L" * (5 << 20), pika.BasicProperties(message_id="large"))  # > 4 MiB
        ch.basic_publish("", queue, b"after", pika.BasicProperties(message_id="after"))
    migrate(target, "-q", queue, "--no-drain")
    done = subprocess.run(
        migrate_argv(target, "-q", queue, "--no-import", "--namesrv", target.namesrv), capture_output=True,
        text=True, timeout=120, stdin=subprocess.DEVNULL, env=migrate_env(),
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the broker refused a put" in done.stdout
    assert source.count(queue) >= 2  # the large one and what came after it are still in RabbitMQ
    assert [m for m, _, _ in _take_all(target, queue, 5)] == [f"s{i}" for i in range(5)]
