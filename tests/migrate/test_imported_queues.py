"""A queue that reaches the gateway only through the metadata (a definitions import) gets its own
one-queue topic at its first publish, so its messages keep RabbitMQ's order."""

from __future__ import annotations

import asyncio
import time
import uuid

import pika
import pika.exceptions

from ferrymq.migrate.definitions import import_into
from tests.migrate.conftest import Target


def test_a_queue_imported_into_the_metadata_keeps_fifo_order(target: Target) -> None:
    queue = f"ferrymq-imported-{uuid.uuid4().hex[:8]}"
    with target.connect() as c:  # the gateway has loaded vhost '/' before the import
        c.channel().queue_declare(f"{queue}-other", auto_delete=True)
    doc = {"queues": [{"name": queue, "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}}]}
    asyncio.run(import_into(doc, None, target.meta_database))
    count = 400
    with target.connect() as c:
        ch = c.channel()
        ch.confirm_delivery()
        deadline = time.monotonic() + 15
        while True:  # until the gateway's view of the vhost has the imported queue
            try:
                ch.basic_publish("", queue, b"0", pika.BasicProperties(message_id="0"), mandatory=True)
                break
            except pika.exceptions.UnroutableError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        for i in range(1, count):
            ch.basic_publish("", queue, str(i).encode(), pika.BasicProperties(message_id=str(i)))
        got = []
        for _ in range(count):
            method, _, body = ch.basic_get(queue, auto_ack=True)
            assert method is not None
            got.append(int(body))
        ch.queue_delete(queue)
    assert got == list(range(count))
