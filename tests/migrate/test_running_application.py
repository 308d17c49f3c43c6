"""A running application moves from RabbitMQ to the gateway: producers publish and consumers consume the
whole time, each switched over on its own while the migrator follows the queue, and every message a
producer had confirmed reaches some consumer (duplicates allowed: at-least-once)."""

from __future__ import annotations

import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable

import pika
import pika.exceptions

from tests.migrate.conftest import RABBITMQ, Source, Target, migrate, start_migrate, went

PRODUCERS, CONSUMERS = 3, 2
RUN_S = 20.0  # the application's whole run; the switches happen at even steps inside it
DELIVERY_TIMEOUT_S = 60.0


class Side:
    """Which broker a client of the application talks to; the test flips it to switch."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.on_gateway = False

    def connect(self) -> pika.BlockingConnection:
        if self.on_gateway:
            return self.target.connect()
        return pika.BlockingConnection(pika.ConnectionParameters(*RABBITMQ))


def _run_producer(
    n: int, queue: str, side: Side, stop: threading.Event, sent: list[str], errors: list
) -> None:
    """Publish with confirms; a message counts as sent once its broker confirmed it."""
    seq = 0
    try:
        while not stop.is_set():
            where = side.on_gateway
            with side.connect() as c:
                ch = c.channel()
                ch.confirm_delivery()
                while not stop.is_set() and side.on_gateway == where:
                    message_id = f"p{n}-{seq}"
                    ch.basic_publish(
                        "", queue, message_id.encode(), pika.BasicProperties(message_id=message_id)
                    )
                    sent.append(message_id)
                    seq += 1
                    time.sleep(0.002)
    except Exception as e:  # reported by the test
        errors.append(f"producer {n}: {e!r}")


def _run_consumer(
    n: int, queue: str, side: Side, stop: threading.Event, got: list[str], errors: list
) -> None:
    """Consume with manual acks, acknowledging after 'processing' (recording) each message."""
    try:
        while not stop.is_set():
            where = side.on_gateway
            with side.connect() as c:
                ch = c.channel()
                ch.basic_qos(prefetch_count=50)
                for method, properties, _ in ch.consume(queue, inactivity_timeout=0.2):
                    if method is not None:
                        got.append(properties.message_id)
                        ch.basic_ack(method.delivery_tag)
                    if stop.is_set() or side.on_gateway != where:
                        break
                ch.cancel()
    except Exception as e:
        errors.append(f"consumer {n}: {e!r}")


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_producers_and_consumers_switch_one_by_one(
    source: Source, target: Target, into: tuple[str, ...], tmp_path
) -> None:
    queue = source.queue("app")
    migrate(target, "-q", queue, "--no-drain")  # the definitions first: the queue exists in the gateway
    sent: list[str] = []  # list.append is atomic: one list shared by the threads
    got: list[str] = []
    errors: list[str] = []
    producing, consuming = threading.Event(), threading.Event()
    producer_sides = [Side(target) for _ in range(PRODUCERS)]
    consumer_sides = [Side(target) for _ in range(CONSUMERS)]
    threads = [
        threading.Thread(target=_run_producer, args=(n, queue, side, producing, sent, errors))
        for n, side in enumerate(producer_sides)
    ] + [
        threading.Thread(target=_run_consumer, args=(n, queue, side, consuming, got, errors))
        for n, side in enumerate(consumer_sides)
    ]
    for thread in threads:
        thread.start()
    log = tmp_path / "migrate.log"
    migrator = start_migrate(target, log, "-q", queue, "--no-import", "--follow", "--prefetch", "200", *into)
    try:
        # one client at a time: consumers and producers alternate, each after an even step
        order = [
            consumer_sides[0],
            producer_sides[0],
            producer_sides[1],
            consumer_sides[1],
            producer_sides[2],
        ]
        for side in order:
            time.sleep(RUN_S / (len(order) + 1))
            assert migrator.poll() is None, log.read_text()
            side.on_gateway = True
        _wait(lambda: source.count(queue) == 0, 60, "RabbitMQ's queue to empty")
        time.sleep(1.0)
        producing.set()
        _wait(lambda: source.count(queue) == 0, 60, "RabbitMQ's queue to empty after the producers stopped")
        migrator.send_signal(signal.SIGINT)
        assert migrator.wait(60) == 0, log.read_text()
        assert went(log.read_text(), into), log.read_text()
        expected = set(sent)
        _wait(lambda: expected <= set(got), DELIVERY_TIMEOUT_S, "every sent message at a consumer")
    finally:
        producing.set()
        consuming.set()
        if migrator.poll() is None:
            migrator.kill()
        for thread in threads:
            thread.join(30)
    assert not errors, errors
    counts = Counter(got)
    duplicates = sum(counts.values()) - len(counts)
    assert len(sent) > 1000 and set(counts) == set(sent)
    assert duplicates <= 200  # at most the migrator's window when it stopped, in the worst case
    text = log.read_text()
    moved = re.search(r"moved ([\d,]+) messages", text)
    assert moved is not None and int(moved[1].replace(",", "")) > 0, text
    assert "failed" not in text
