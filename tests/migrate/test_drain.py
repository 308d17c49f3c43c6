"""Draining, through the gateway and straight into its brokers (`--namesrv`): every message crosses
with its properties and body as they were, none is lost, and a migrator killed mid-drain and started
again loses nothing either (its last window comes twice)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter

import pika

from tests.migrate.conftest import (
    DIRECT,
    Source,
    Target,
    migrate,
    migrate_argv,
    migrate_env,
    start_migrate,
    went,
)  # fmt: skip

FIELDS = (
    "content_type", "content_encoding", "headers", "delivery_mode", "priority", "correlation_id",
    "reply_to", "expiration", "message_id", "timestamp", "type", "user_id", "app_id",
)  # fmt: skip


def _properties(i: int) -> pika.BasicProperties:
    """A different mix of properties for each i (some messages have none but a message id)."""
    if i % 7 == 0:
        return pika.BasicProperties(message_id=f"m{i}")
    return pika.BasicProperties(
        content_type=("application/json", "text/plain")[i % 2],
        content_encoding="utf-8" if i % 3 else None,
        headers={
            "n": i,
            "neg": -i,
            "s": f"h{i}",
            "flag": bool(i % 2),
            "list": [1, "two", [3]],
            "nested": {"deep": {"i": i}},
            "big": 2**40 + i,
        },
        delivery_mode=1 + i % 2,
        priority=i % 10,
        correlation_id=f"corr-{i}",
        reply_to=f"reply-{i % 5}",
        expiration="3600000" if i % 4 == 0 else None,
        message_id=f"m{i}",
        timestamp=1_700_000_000 + i,
        type=f"type-{i % 3}",
        user_id="guest" if i % 5 == 0 else None,
        app_id="ferrymq-migrate-test",
    )


def _body(i: int) -> bytes:
    if i % 97 == 0:
        return b""
    if i % 499 == 0:
        return bytes(range(256)) * 800  # 200 KiB: several body frames
    return f"message {i} ".encode() * (1 + i % 13)


def _fill(source: Source, queue: str, count: int, varied: bool = True) -> None:
    with source.connect() as c:
        ch = c.channel()
        ch.confirm_delivery()
        for i in range(count):
            properties = _properties(i) if varied else pika.BasicProperties(message_id=f"m{i}")
            ch.basic_publish("", queue, _body(i) if varied else b"x" * 100, properties)


def _take_all(target: Target, queue: str, expected: int, quiet_s: float = 3.0, timeout: float = 120.0):
    """Everything the gateway's queue holds: (message id, properties, body), consumed with acks."""
    got = []
    deadline = time.monotonic() + timeout
    with target.connect() as c:
        ch = c.channel()
        ch.basic_qos(prefetch_count=500)
        for method, properties, body in ch.consume(queue, inactivity_timeout=quiet_s):
            if method is None:
                if len({m for m, _, _ in got}) >= expected or time.monotonic() > deadline:
                    break
                continue
            got.append((properties.message_id, properties, body))
            ch.basic_ack(method.delivery_tag)
            if time.monotonic() > deadline:
                break
        ch.cancel()
    return got


def test_every_message_crosses_with_its_properties(
    source: Source, target: Target, into: tuple[str, ...]
) -> None:
    count = 3000
    queue = source.queue("props", **{"x-message-ttl": 3_600_000})
    _fill(source, queue, count)

    done = migrate(target, "-q", queue, "--prefetch", "300", *into)

    assert f"{count:,} moved" in done.stdout and went(done.stdout, into)
    assert source.count(queue) == 0
    got = _take_all(target, queue, count)
    assert len(got) == count  # no duplicates without a crash
    for i, (message_id, properties, body) in enumerate(got):
        assert message_id == f"m{i}"  # RabbitMQ's order
        expected = _properties(i)
        for name in FIELDS:
            assert getattr(properties, name) == getattr(expected, name), (i, name)
        assert body == _body(i)


def test_killed_mid_drain_then_restarted_loses_nothing(
    source: Source, target: Target, into: tuple[str, ...], tmp_path
) -> None:
    count, prefetch = 30_000, 500
    queue = source.queue("kill")
    _fill(source, queue, count, varied=False)

    first = start_migrate(target, tmp_path / "first.log", "-q", queue, "--prefetch", str(prefetch), *into)
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

    # through the gateway, the restart stores through three channels at once: still nothing lost
    done = migrate(target, "-q", queue, "--prefetch", str(prefetch), "--lanes", "3", *into)
    assert source.count(queue) == 0 and went(done.stdout, into)

    seen = Counter(message_id for message_id, _, _ in _take_all(target, queue, count))
    assert set(seen) == {f"m{i}" for i in range(count)}  # nothing lost
    duplicates = sum(seen.values()) - count
    # only what was stored but not yet acknowledged upstream comes twice: at most
    # one prefetch window, and each of them was flagged redelivered by RabbitMQ
    assert duplicates <= prefetch
    if duplicates:
        assert "redelivered" in done.stdout


def test_a_queue_missing_in_the_gateway_fails_and_keeps_its_messages(source: Source, target: Target) -> None:
    queue = source.queue("missing")
    _fill(source, queue, 10, varied=False)
    done = subprocess.run(
        migrate_argv(target, "-q", queue, "--no-import"), capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL, env=migrate_env(),
    )  # fmt: skip
    assert done.returncode == 1
    assert "is not in the gateway" in done.stdout
    assert source.count(queue) == 10


def test_a_message_too_large_for_the_gateway_stays_in_rabbitmq(
    source: Source, target: Target, into: tuple[str, ...]
) -> None:
    queue = source.queue("large")
    with source.connect() as c:
        ch = c.channel()
        ch.confirm_delivery()
        for i in range(5):
            ch.basic_publish("", queue, b"small", pika.BasicProperties(message_id=f"s{i}"))
        ch.basic_publish("", queue, b"L" * (5 << 20), pika.BasicProperties(message_id="large"))  # > 4 MiB
        ch.basic_publish("", queue, b"after", pika.BasicProperties(message_id="after"))
    migrate(target, "-q", queue, "--no-drain")
    done = subprocess.run(
        migrate_argv(target, "-q", queue, "--no-import", *into), capture_output=True, text=True,
        timeout=120, stdin=subprocess.DEVNULL, env=migrate_env(),
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert ("the broker refused a put" if into else "larger than") in done.stdout
    assert source.count(queue) >= 2  # the large one and what came after it are still in RabbitMQ
    with target.connect() as c:
        ch = c.channel()
        got = []
        while (m := ch.basic_get(queue, auto_ack=True))[0] is not None:
            got.append(m[1].message_id)
    assert got == [f"s{i}" for i in range(5)]


def test_a_length_limited_queue_goes_through_the_gateway(source: Source, target: Target) -> None:
    """Its puts are the gateway's to shape (drop the oldest past the limit): not stored directly."""
    queue = source.queue("limited", **{"x-max-length": 1000})
    _fill(source, queue, 50, varied=False)

    done = migrate(target, "-q", queue, "--namesrv", target.namesrv)

    assert "50 moved" in done.stdout and DIRECT not in done.stdout
    assert [m for m, _, _ in _take_all(target, queue, 50)] == [f"m{i}" for i in range(50)]
