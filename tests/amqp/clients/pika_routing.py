"""Asks a real broker where messages go. Reads routing cases as JSON on stdin, each with exchanges
(name, type, arguments), queues, bindings (source, destination, kind "queue" or "exchange", key,
arguments) and messages (exchange, key, headers; "to_queue" when the key, and CC and BCC, name queues).
Names get a unique prefix (so do such keys); "" and amq.* exchanges are used as they are.
Prints, per case and message, the sorted names of the queues that got it, once per copy. Everything
it declares is deleted before it exits. Usage: pika_routing.py HOST PORT < cases."""

from __future__ import annotations

import json
import sys
import uuid

import pika

host, port = sys.argv[1], int(sys.argv[2])
cases = json.load(sys.stdin)
run = f"ferrymq-routing-{uuid.uuid4().hex[:8]}"
params = pika.ConnectionParameters(
    host, port, credentials=pika.PlainCredentials("guest", "guest"), connection_attempts=1, socket_timeout=10
)
connection = pika.BlockingConnection(params)
channel = connection.channel()
channel.confirm_delivery()  # a publish is routed once its confirm is back
exchanges: list[str] = []
queues: list[str] = []
results = []


def named(case: int, name: str) -> str:
    return name if name == "" or name.startswith("amq.") else f"{run}-{case}-{name}"


try:
    for n, case in enumerate(cases):
        for x in case.get("exchanges", []):
            arguments = dict(x.get("arguments", {}))
            if "alternate-exchange" in arguments:
                arguments["alternate-exchange"] = named(n, arguments["alternate-exchange"])
            channel.exchange_declare(named(n, x["name"]), x["type"], arguments=arguments)
            exchanges.append(named(n, x["name"]))
        for q in case["queues"]:
            channel.queue_declare(named(n, q))
            queues.append(named(n, q))
        for b in case.get("bindings", []):
            source, destination = named(n, b["source"]), named(n, b["destination"])
            if b.get("kind", "queue") == "queue":
                channel.queue_bind(destination, source, b.get("key", ""), arguments=b.get("arguments"))
            else:
                channel.exchange_bind(destination, source, b.get("key", ""), arguments=b.get("arguments"))
        got = []
        for m in case["messages"]:
            headers = m.get("headers")
            if headers and m.get("to_queue"):
                headers = {
                    k: [named(n, q) for q in v] if k in ("CC", "BCC") and isinstance(v, list) else v
                    for k, v in headers.items()
                }
            key = named(n, m["key"]) if m.get("to_queue") else m["key"]
            channel.basic_publish(named(n, m["exchange"]), key, b"m", pika.BasicProperties(headers=headers))
            hits = []
            for q in case["queues"]:
                while channel.basic_get(named(n, q), auto_ack=True)[0] is not None:
                    hits.append(q)
            got.append(sorted(hits))
        results.append(got)
finally:
    for queue in queues:
        channel.queue_delete(queue)
    for exchange in exchanges:
        channel.exchange_delete(exchange)
    connection.close()
print(json.dumps(results))
