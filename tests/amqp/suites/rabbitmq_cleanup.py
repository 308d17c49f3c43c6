"""Delete queues and exchanges from a RabbitMQ (runs in a venv with pika).

Usage: rabbitmq_cleanup.py HOST:PORT '{"queue": [...], "exchange": [...]}'
Each deletion gets a channel of its own: a failed one closes its channel, not the rest.
"""

import json
import sys

import pika

host, port = sys.argv[1].rsplit(":", 1)
names = json.loads(sys.argv[2])
connection = pika.BlockingConnection(pika.ConnectionParameters(host, int(port)))
try:
    for kind, delete in (("queue", "queue_delete"), ("exchange", "exchange_delete")):
        for name in names.get(kind, []):
            channel = connection.channel()
            getattr(channel, delete)(name)
            channel.close()
finally:
    connection.close()
