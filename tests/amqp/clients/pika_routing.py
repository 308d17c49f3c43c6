"""Asks a real broker where messages go: reads routing cases as JSON on stdin (exchange type, bindings
as routing key + arguments, messages as routing key + headers), binds one queue per binding, publishes
each message and prints, per case and message, the indexes of the bindings whose queue got it. Every
exchange and queue it declares is deleted before it exits. Usage: pika_routing.py HOST PORT < cases."""

from __future__ import annotations

import json
import sys
import uuid

import pika

host, port = sys.argv[1], int(sys.argv[2])
cases = json.load(sys.stdin)
prefix = f"ferrymq-routing-{uuid.uuid4().hex[:8]}"
params = pika.ConnectionParameters(
    host, port, credentials=pika.PlainCredentials("guest", "guest"), connection_attempts=1, socket_timeout=10
)
connection = pika.BlockingConnection(params)
channel = connection.channel()
channel.confirm_delivery()  # each publish is routed once its confirm is back
exchanges: list[str] = []
queues: list[str] = []
results = []
try:
    for n, case in enumerate(cases):
        exchange = f"{prefix}-{n}"
        channel.exchange_declare(exchange, case["type"])
        exchanges.append(exchange)
        bound = []
        for i, binding in enumerate(case["bindings"]):
            queue = f"{exchange}-q{i}"
            channel.queue_declare(queue)
            queues.append(queue)
            channel.queue_bind(queue, exchange, binding["key"], arguments=binding.get("arguments"))
            bound.append(queue)
        got = []
        for message in case["messages"]:
            properties = pika.BasicProperties(headers=message.get("headers"))
            channel.basic_publish(exchange, message["key"], b"m", properties)
            hits = []
            for i, queue in enumerate(bound):
                while channel.basic_get(queue, auto_ack=True)[0] is not None:
                    hits.append(i)
            got.append(hits)
        results.append(got)
finally:
    for queue in queues:
        channel.queue_delete(queue)
    for exchange in exchanges:
        channel.exchange_delete(exchange)
    connection.close()
print(json.dumps(results))
