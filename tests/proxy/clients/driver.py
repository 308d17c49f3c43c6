"""Drives the official RocketMQ 5.x Python client (rocketmq-python-client) from a test: runs in the
client's own venv, reads one JSON command per stdin line, answers each with one JSON line on stdout.

Commands: producer {topics}; send {topic, body, tag?, keys?, properties?, group?, deliver_at_s?,
transaction? ("commit" or "rollback": a transactional send ended so; "open": left unended, and
`check` ("commit" or "rollback", default rollback) is what the checker answers when asked)};
checks (the bodies the transaction checker was asked about so far); client_id {of: producer,
consumer or push}; shutdown {of} (shuts that client down);
consumer {group, topic, await_s}; receive {max, invisible_s}; ack {id}; change {id, invisible_s};
push {group, topic, fail_attempts?, fail_bodies?} (a PushConsumer); pushed (what its listener got so
far); quit.
With DRIVER_TLS=1 in its environment every client is built with tls_enable=True (it then trusts the
roots grpc finds, e.g. GRPC_DEFAULT_SSL_ROOTS_FILE_PATH).
A received message is remembered by its message id (its latest copy, whose receipt handle acks it).
A client exception answers {"ok": false, "error": <class name>, "message": ...}. A watchdog ends
the process if the test stops talking to it.
"""

from __future__ import annotations

import json
import os
import sys
import threading

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)

endpoint = sys.argv[1]
watchdog = threading.Timer(float(sys.argv[2]), lambda: os._exit(3))
watchdog.daemon = True
watchdog.start()

# Signed as this user when the environment says so (a proxy with authentication on).
config = ClientConfiguration(
    endpoint, Credentials(os.environ.get("DRIVER_ACCESS_KEY", ""), os.environ.get("DRIVER_SECRET_KEY", ""))
)
tls = os.environ.get("DRIVER_TLS") == "1"
producer = None
consumer = None
pusher = None
received: dict[str, Message] = {}
pushed: list[dict] = []
pushed_lock = threading.Lock()


class Checker(TransactionChecker):
    """Answers a check of an orphaned transaction as its send said (by body), ROLLBACK otherwise;
    records the bodies it was asked about."""

    def __init__(self) -> None:
        self.verdicts: dict[str, TransactionResolution] = {}
        self.checked: list[str] = []

    def check(self, message: Message) -> TransactionResolution:
        body = message.body.decode()
        with pushed_lock:
            self.checked.append(body)
        return self.verdicts.get(body, TransactionResolution.ROLLBACK)


checker = Checker()
CLIENTS = {"producer": "producer", "consumer": "consumer", "push": "pusher"}  # command name: global


class Listener(MessageListener):
    """Fails each message's first `fail_attempts` deliveries, and those with a body in `fail_bodies`
    always; succeeds otherwise; records every call."""

    def __init__(self, fail_attempts: int, fail_bodies: list[str]) -> None:
        self.fail_attempts = fail_attempts
        self.fail_bodies = set(fail_bodies)

    def consume(self, message: Message) -> ConsumeResult:
        ok = message.delivery_attempt > self.fail_attempts and message.body.decode() not in self.fail_bodies
        with pushed_lock:
            pushed.append({**describe(message), "ok": ok})
        return ConsumeResult.SUCCESS if ok else ConsumeResult.FAILURE


def describe(m: Message) -> dict:
    return {
        "id": m.message_id,
        "topic": m.topic,
        "body": m.body.decode(),
        "tag": m.tag,
        "keys": sorted(m.keys),
        "properties": dict(m.properties),
        "attempt": m.delivery_attempt,
        "group": m.message_group,
        "handle": m.receipt_handle,
        "deliver_at_ms": m.delivery_timestamp,
    }


def run(command: dict) -> dict:
    global producer, consumer, pusher
    op = command["op"]
    if op == "producer":
        producer = Producer(config, tuple(command["topics"]), checker=checker, tls_enable=tls)
        producer.startup()
        return {}
    if op == "send":
        message = Message()
        message.topic = command["topic"]
        message.body = command["body"].encode()
        if "tag" in command:
            message.tag = command["tag"]
        if "keys" in command:
            Message.keys.fset(message, *command["keys"])  # the setter takes *keys
        if "group" in command:
            message.message_group = command["group"]
        if "deliver_at_s" in command:
            message.delivery_timestamp = command["deliver_at_s"]
        for key, value in command.get("properties", {}).items():
            message.add_property(key, value)
        if "transaction" not in command:
            receipt = producer.send(message)
            return {"id": receipt.message_id, "recall_handle": receipt.recall_handle}
        transaction = producer.begin_transaction()
        if command["transaction"] == "open" and command.get("check") == "commit":
            checker.verdicts[command["body"]] = TransactionResolution.COMMIT
        receipt = producer.send(message, transaction)
        if command["transaction"] == "commit":
            transaction.commit()
        elif command["transaction"] == "rollback":
            transaction.rollback()
        return {"id": receipt.message_id}
    if op == "recall":
        return {"id": producer.recall_message(command["topic"], command["handle"])}
    if op == "checks":
        with pushed_lock:
            return {"bodies": list(checker.checked)}
    if op == "client_id":
        return {"client_id": globals()[CLIENTS[command["of"]]].client_id}
    if op == "shutdown":
        globals()[CLIENTS[command["of"]]].shutdown()
        globals()[CLIENTS[command["of"]]] = None
        return {}
    if op == "consumer":
        consumer = SimpleConsumer(
            config,
            command["group"],
            {command["topic"]: FilterExpression(command.get("tag", "*"))},
            await_duration=command.get("await_s", 5),
            tls_enable=tls,
        )
        consumer.startup()
        return {}
    if op == "receive":
        messages = consumer.receive(command["max"], command["invisible_s"])
        for m in messages:
            received[m.message_id] = m
        return {"messages": [describe(m) for m in messages]}
    if op == "ack":
        consumer.ack(received[command["id"]])
        return {}
    if op == "change":
        message = received[command["id"]]
        consumer.change_invisible_duration(message, command["invisible_s"])
        return {"handle": message.receipt_handle}
    if op == "push":
        listener = Listener(command.get("fail_attempts", 0), command.get("fail_bodies", []))
        subscription = {command["topic"]: FilterExpression(command.get("tag", "*"))}
        pusher = PushConsumer(config, command["group"], listener, subscription, tls_enable=tls)
        pusher.startup()
        return {}
    if op == "pushed":
        with pushed_lock:
            return {"messages": list(pushed)}
    raise ValueError(f"unknown command {op!r}")


for line in sys.stdin:
    command = json.loads(line)
    if command["op"] == "quit":
        break
    try:
        answer = {"ok": True, **run(command)}
    except Exception as e:  # the client's exceptions are what the test checks
        answer = {"ok": False, "error": type(e).__name__, "message": str(e)}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
for client in (pusher, consumer, producer):
    if client is not None:
        client.shutdown()
sys.stdout.flush()
os._exit(0)
