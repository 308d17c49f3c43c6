"""Messaging scenarios with pika (BlockingConnection) in pika's own venv: each declares what it needs
under a unique prefix, does its work, deletes what it declared and prints one JSON line with what
the client saw, so a run against the gateway and one against RabbitMQ can be compared.
Usage: pika_messaging.py SCENARIO HOST PORT."""

from __future__ import annotations

import json
import sys
import time
import uuid

import pika
from pika.exceptions import ChannelClosedByBroker, UnroutableError

scenario, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
PREFIX = f"ferrymq-compat-{uuid.uuid4().hex[:8]}"
WAIT = 10.0


def connect() -> pika.BlockingConnection:
    credentials = pika.PlainCredentials("guest", "guest")
    return pika.BlockingConnection(
        pika.ConnectionParameters(host, port, credentials=credentials, socket_timeout=10)
    )


def name(what: str) -> str:
    return f"{PREFIX}-{what}"


def props_of(properties: pika.BasicProperties) -> dict:
    return {k: v for k, v in vars(properties).items() if v is not None}


def drain(channel, queue: str) -> list[dict]:
    """basic.get until empty: each message's body, redelivered flag and routing key (acked)."""
    got = []
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        method, _, body = channel.basic_get(queue)
        if method is None:
            break
        got.append({"body": body.decode(), "redelivered": method.redelivered, "key": method.routing_key})
        channel.basic_ack(method.delivery_tag)
    return got


def closed_by_broker(action) -> dict:
    try:
        action()
    except ChannelClosedByBroker as e:
        return {"code": e.reply_code, "text": e.reply_text.replace(PREFIX, "<prefix>")}
    return {"code": None}


def passive_probe(connection, queue: str) -> dict:
    """A passive declare on a fresh channel: its close code and text, or code None."""
    probe = connection.channel()
    return closed_by_broker(lambda: probe.queue_declare(queue, passive=True))


def properties_round_trip() -> dict:
    """Every basic property and a header table of each type survive publish and consume."""
    connection = connect()
    channel = connection.channel()
    channel.confirm_delivery()
    queue = name("props")
    channel.queue_declare(queue, durable=True)
    sent = pika.BasicProperties(
        content_type="application/json", content_encoding="utf-8", delivery_mode=2, priority=3,
        correlation_id="corr-1", reply_to="replies", expiration="60000", message_id="msg-1",
        timestamp=1700000000, type="order.created", user_id="guest", app_id="shop",
        headers={"s": "text", "i": 42, "neg": -7, "big": 2**40, "b": True, "none": None,
                 "list": [1, "two", False], "table": {"nested": "yes"}, "bytes": b"raw"},
    )  # fmt: skip
    channel.basic_publish("", queue, b'{"id": 1}', sent)
    channel.basic_qos(prefetch_count=10)
    seen = {}
    for method, properties, body in channel.consume(queue, inactivity_timeout=WAIT):
        seen = {"body": body.decode(), "exchange": method.exchange, "key": method.routing_key,
                "redelivered": method.redelivered, "properties": props_of(properties)}  # fmt: skip
        channel.basic_ack(method.delivery_tag)
        break
    channel.cancel()
    channel.queue_delete(queue)
    connection.close()
    seen["properties"]["headers"]["bytes"] = repr(seen["properties"]["headers"]["bytes"])
    return seen


def routing() -> dict:
    """Direct, fanout, topic and headers exchanges, an exchange-to-exchange binding, the default exchange."""
    connection = connect()
    channel = connection.channel()
    channel.confirm_delivery()
    ex = {t: name(t) for t in ("direct", "fanout", "topic", "headers")}
    for kind, exchange in ex.items():
        channel.exchange_declare(exchange, kind, auto_delete=False)
    queues = {q: name(q) for q in ("q1", "q2", "q3")}
    for queue in queues.values():
        channel.queue_declare(queue)
    channel.queue_bind(queues["q1"], ex["direct"], "red")
    channel.queue_bind(queues["q2"], ex["direct"], "blue")
    channel.queue_bind(queues["q1"], ex["fanout"])
    channel.queue_bind(queues["q3"], ex["fanout"])
    channel.queue_bind(queues["q1"], ex["topic"], "a.*.c")
    channel.queue_bind(queues["q2"], ex["topic"], "a.#")
    channel.queue_bind(queues["q3"], ex["headers"], arguments={"x-match": "all", "kind": "x", "n": 1})
    channel.queue_bind(queues["q2"], ex["headers"], arguments={"x-match": "any", "kind": "y", "n": 1})
    channel.exchange_bind(ex["direct"], ex["topic"], "a.b.c")
    publishes = [
        (ex["direct"], "red", {}), (ex["direct"], "blue", {}), (ex["direct"], "green", {}),
        (ex["fanout"], "whatever", {}), (ex["topic"], "a.b.c", {}), (ex["topic"], "a", {}),
        (ex["topic"], "b.c", {}), (ex["headers"], "", {"kind": "x", "n": 1}),
        (ex["headers"], "", {"kind": "y", "n": 2}), (ex["headers"], "", {"kind": "z"}),
        ("", queues["q3"], {}),
    ]  # fmt: skip
    for i, (exchange, key, headers) in enumerate(publishes):
        channel.basic_publish(exchange, key, f"m{i}".encode(), pika.BasicProperties(headers=headers or None))
    got = {q: [m["body"] for m in drain(channel, queue)] for q, queue in queues.items()}
    for queue in queues.values():
        channel.queue_delete(queue)
    for exchange in ex.values():
        channel.exchange_delete(exchange)
    connection.close()
    return got


def mandatory_and_errors() -> dict:
    """An unroutable mandatory publish comes back before its confirm; channel errors as RabbitMQ's."""
    connection = connect()
    channel = connection.channel()
    channel.confirm_delivery()
    result = {}
    try:
        channel.basic_publish("", name("nowhere"), b"lost", mandatory=True)
        result["unroutable"] = None
    except UnroutableError as e:
        result["unroutable"] = [m.body.decode() for m in e.messages]
    channel.basic_publish("", name("nowhere"), b"dropped")  # not mandatory: confirmed, dropped
    queue = name("q")
    channel.queue_declare(queue, durable=True)
    result["redeclare"] = closed_by_broker(lambda: channel.queue_declare(queue, durable=False))
    channel = connection.channel()
    result["absent_exchange"] = closed_by_broker(lambda: channel.basic_publish(name("absent"), "k", b"x"))
    channel = connection.channel()
    result["absent_queue"] = closed_by_broker(lambda: channel.queue_declare(name("absent"), passive=True))
    channel = connection.channel()
    result["bind_absent"] = closed_by_broker(lambda: channel.queue_bind(queue, name("absent")))
    channel = connection.channel()
    channel.basic_publish("", queue, b"one")
    method, _, _ = channel.basic_get(queue)
    result["ack_unknown"] = closed_by_broker(
        lambda: (channel.basic_ack(method.delivery_tag + 5), channel.basic_qos())
    )
    channel = connection.channel()
    result["reserved"] = closed_by_broker(lambda: channel.exchange_declare("amq.mine", "direct"))
    channel = connection.channel()
    channel.queue_delete(queue)
    connection.close()
    return result


def acks_and_redelivery() -> dict:
    """Reject and nack with and without requeue, basic.recover, unacked messages coming back when
    their channel closes, prefetch limiting what a consumer holds."""
    connection = connect()
    channel = connection.channel()
    channel.confirm_delivery()
    queue = name("acks")
    channel.queue_declare(queue)
    for i in range(6):
        channel.basic_publish("", queue, f"m{i}".encode())
    result = {"count": channel.queue_declare(queue, passive=True).method.message_count}
    m0, _, _ = channel.basic_get(queue)
    channel.basic_reject(m0.delivery_tag, requeue=False)
    m1, _, _ = channel.basic_get(queue)
    channel.basic_nack(m1.delivery_tag, requeue=True)
    held = []
    channel.basic_qos(prefetch_count=2)
    for method, _, body in channel.consume(queue, inactivity_timeout=1.0):
        if method is None:
            break
        held.append(body.decode())
    result["prefetched"] = len(held)
    channel.close()  # two unacked messages go back
    channel = connection.channel()
    got = drain(channel, queue)
    result["after_close"] = sorted((m["body"], m["redelivered"]) for m in got)
    channel.queue_delete(queue)
    connection.close()
    return result


def handed_back_at_once() -> dict:
    """A consumer stops in its callback, a message comes in just then, and the channel closes: the
    message is in the queue when close-ok arrives, so a basic.get right after finds it (several
    rounds, since a late hand-back shows only now and then)."""
    connection = connect()
    other = connection.channel()
    other.confirm_delivery()
    rounds = []
    for i in range(8):
        channel = connection.channel()
        queue = name(f"handback{i}")
        channel.queue_declare(queue)
        other.basic_publish("", queue, b"m1", mandatory=True)

        def first_only(ch, method, _properties, _body, queue=queue) -> None:
            ch.stop_consuming()
            ch.basic_ack(method.delivery_tag)
            other.basic_publish("", queue, b"m2", mandatory=True)

        channel.basic_consume(queue, first_only)
        channel.start_consuming()
        channel.close()
        channel = connection.channel()
        *_, body = channel.basic_get(queue, auto_ack=True)
        rounds.append([body.decode() if body else None, channel.basic_get(queue)[0] is None])
        channel.queue_delete(queue)
        channel.close()
    connection.close()
    return {"rounds": rounds}


def transactions() -> dict:
    connection = connect()
    channel = connection.channel()
    queue = name("tx")
    channel.queue_declare(queue)
    channel.tx_select()
    channel.basic_publish("", queue, b"rolled back")
    channel.tx_rollback()
    channel.basic_publish("", queue, b"committed")
    before = channel.queue_declare(queue, passive=True).method.message_count
    channel.tx_commit()
    got = [m["body"] for m in drain(channel, queue)]
    channel.tx_commit()
    channel.queue_delete(queue)
    connection.close()
    return {"before_commit": before, "got": got}


def queue_lifecycle() -> dict:
    """Counts in declare-ok, purge and delete; exclusive and auto-delete queues; a consumer cancelled
    when its queue is deleted."""
    connection = connect()
    channel = connection.channel()
    channel.confirm_delivery()
    queue = name("life")
    channel.queue_declare(queue)
    for i in range(3):
        channel.basic_publish("", queue, f"m{i}".encode())
    result = {"declared": channel.queue_declare(queue, passive=True).method.message_count}
    result["purged"] = channel.queue_purge(queue).method.message_count
    channel.basic_publish("", queue, b"left")
    result["deleted"] = channel.queue_delete(queue).method.message_count
    other = connect()
    exclusive = name("exclusive")
    channel.queue_declare(exclusive, exclusive=True)
    result["locked"] = closed_by_broker(lambda: other.channel().queue_declare(exclusive, passive=True))
    connection.close()
    probe = other.channel()
    result["exclusive_after_close"] = closed_by_broker(lambda: probe.queue_declare(exclusive, passive=True))
    channel = other.channel()
    auto = name("auto")
    channel.queue_declare(auto, auto_delete=True)
    tag = channel.basic_consume(auto, lambda *a: None)
    channel.basic_cancel(tag)
    probe = other.channel()
    result["auto_delete_after_cancel"] = closed_by_broker(lambda: probe.queue_declare(auto, passive=True))
    watched = name("watched")
    channel = other.channel()
    channel.queue_declare(watched)
    cancelled = []
    channel.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = channel.basic_consume(watched, lambda *a: None, consumer_tag="watcher")
    other.channel().queue_delete(watched)
    deadline = time.monotonic() + WAIT
    while not cancelled and time.monotonic() < deadline:
        other.process_data_events(time_limit=0.2)
    result["cancelled"] = cancelled
    other.close()
    return result


def death_view(properties: pika.BasicProperties) -> dict:
    """The dead-lettering headers without their times."""
    headers = dict(properties.headers or {})
    deaths = [{k: v for k, v in d.items() if k != "time"} for d in headers.pop("x-death", [])]
    return {"x-death": deaths, **{k: v for k, v in headers.items() if k.startswith("x-first-death")}}


def wait_get(channel, queue: str) -> tuple | None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        method, properties, body = channel.basic_get(queue, auto_ack=True)
        if method is not None:
            return method, properties, body
        time.sleep(0.05)
    return None


def queue_arguments() -> dict:
    """TTL with a dead-letter exchange as a delay line, per-message expiration, rejected messages
    dead-lettered, max-length with drop-head and reject-publish, priorities."""
    connection = connect()
    channel = connection.channel()
    channel.confirm_delivery()
    names = {k: name(k) for k in ("delay", "target", "plain", "work", "dead", "short", "full", "prio")}
    channel.queue_declare(names["target"])
    channel.queue_declare(
        names["delay"],
        arguments={
            "x-message-ttl": 300,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": names["target"],
        },
    )
    channel.basic_publish("", names["delay"], b"later", pika.BasicProperties(headers={"n": 1}))
    arrived = wait_get(channel, names["target"])
    result: dict = {"delayed": None if arrived is None else [arrived[2].decode(), death_view(arrived[1])]}
    result["delayed"][1]["x-death"][0]["routing-keys"] = [
        k.replace(PREFIX, "<prefix>") for k in result["delayed"][1]["x-death"][0]["routing-keys"]
    ]
    for d in result["delayed"][1]["x-death"]:
        d["queue"] = d["queue"].replace(PREFIX, "<prefix>")
    result["delayed"][1]["x-first-death-queue"] = result["delayed"][1]["x-first-death-queue"].replace(
        PREFIX, "<prefix>"
    )
    channel.queue_declare(names["plain"])
    channel.basic_publish("", names["plain"], b"short-lived", pika.BasicProperties(expiration="50"))
    time.sleep(0.3)
    result["expired_get"] = channel.basic_get(names["plain"])[0] is None
    channel.queue_declare(names["dead"])
    channel.queue_declare(
        names["work"], arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": names["dead"]}
    )
    channel.basic_publish("", names["work"], b"bad")
    method, _, _ = channel.basic_get(names["work"])
    channel.basic_reject(method.delivery_tag, requeue=False)
    dead = wait_get(channel, names["dead"])
    result["rejected"] = (
        None
        if dead is None
        else [
            dead[2].decode(),
            dead[1].headers["x-death"][0]["reason"],
            dead[1].headers["x-death"][0]["count"],
        ]
    )
    channel.queue_declare(names["short"], arguments={"x-max-length": 2})
    for i in range(4):
        channel.basic_publish("", names["short"], f"s{i}".encode())
    result["drop_head"] = [m["body"] for m in drain(channel, names["short"])]
    channel.queue_declare(names["full"], arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    outcomes = []
    for i in range(2):
        try:
            channel.basic_publish("", names["full"], f"f{i}".encode())
            outcomes.append("ack")
        except pika.exceptions.NackError:
            outcomes.append("nack")
    result["reject_publish"] = outcomes
    channel.queue_declare(names["prio"], arguments={"x-max-priority": 5})
    for priority in (1, 5, 3, 0):
        channel.basic_publish(
            "", names["prio"], f"p{priority}".encode(), pika.BasicProperties(priority=priority)
        )
    result["priority_order"] = [m["body"] for m in drain(channel, names["prio"])]
    for queue in names.values():
        channel.queue_delete(queue)
    channel.queue_declare(name("unused"), arguments={"x-expires": 300})
    deadline, gone = time.monotonic() + WAIT, None
    while gone is None and time.monotonic() < deadline:
        time.sleep(1.0)  # each probe (a passive declare) renews the lease: look less often than it lasts
        gone = passive_probe(connection, name("unused"))["code"]
    result["unused_queue_expired"] = gone
    connection.close()
    return result


def priority_requeue() -> dict:
    """Messages of several priorities; a consumer takes the three highest without acking, more are
    published, and the three go back (nacked with requeue, or by their channel closing): every message
    then comes in priority order, the requeued ones first within their level and marked redelivered."""
    connection = connect()
    publisher = connection.channel()
    publisher.confirm_delivery()
    result = {}
    for way in ("nack", "close"):
        queue = name(f"prio-requeue-{way}")
        publisher.queue_declare(queue, arguments={"x-max-priority": 9})
        for body, priority in (("a1", 1), ("b5", 5), ("c1", 1), ("d9", 9), ("e5", 5), ("f3", 3)):
            publisher.basic_publish("", queue, body.encode(), pika.BasicProperties(priority=priority))
        channel = connection.channel()
        channel.basic_qos(prefetch_count=3)
        taken = []
        for method, _, body in channel.consume(queue, inactivity_timeout=WAIT):
            if method is None:
                break
            taken.append(body.decode())
            if len(taken) == 3:
                break
        for body, priority in (("g7", 7), ("h5", 5), ("i0", 0)):
            publisher.basic_publish("", queue, body.encode(), pika.BasicProperties(priority=priority))
        if way == "nack":  # (after the cancel: else they would go to this consumer again)
            channel.cancel()
            channel.basic_nack(method.delivery_tag, multiple=True, requeue=True)
        channel.close()
        got = drain(publisher, queue)
        result[way] = {"taken": taken, "after": [[m["body"], m["redelivered"]] for m in got]}
        publisher.queue_delete(queue)
    connection.close()
    return result


SCENARIOS = {
    "priority_requeue": priority_requeue,
    "queue_arguments": queue_arguments,
    "properties_round_trip": properties_round_trip,
    "routing": routing,
    "mandatory_and_errors": mandatory_and_errors,
    "acks_and_redelivery": acks_and_redelivery,
    "handed_back_at_once": handed_back_at_once,
    "transactions": transactions,
    "queue_lifecycle": queue_lifecycle,
}


def two_gateways() -> dict:
    """Declared through one gateway, seen by the other at once: publish on one, consume on the other,
    RPC with direct reply-to across them, a queue deleted on one cancels its consumer on the other."""
    other = int(sys.argv[4])
    first = connect()
    second = pika.BlockingConnection(pika.ConnectionParameters(host, other, socket_timeout=10))
    one, two = first.channel(), second.channel()
    one.confirm_delivery()
    two.confirm_delivery()
    exchange, queue = name("orders"), name("orders-eu")
    one.exchange_declare(exchange, "topic")
    one.queue_declare(queue)
    one.queue_bind(queue, exchange, "order.eu.*")
    for i in range(3):
        two.basic_publish(exchange, "order.eu.created", f"o{i}".encode())
    got = [m["body"] for m in drain(one, queue)]
    requests = name("rpc")
    two.queue_declare(requests)
    replies = []
    one.basic_consume("amq.rabbitmq.reply-to", lambda ch, m, p, b: replies.append(b.decode()), auto_ack=True)
    one.basic_publish(
        "", requests, b"ping", pika.BasicProperties(reply_to="amq.rabbitmq.reply-to", correlation_id="c2")
    )
    request = wait_get(two, requests)
    if request is not None:
        two.basic_publish(
            "", request[1].reply_to, b"pong", pika.BasicProperties(correlation_id=request[1].correlation_id)
        )
    deadline = time.monotonic() + WAIT
    while not replies and time.monotonic() < deadline:
        first.process_data_events(time_limit=0.1)
    cancelled = []
    watch = first.channel()
    watch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    watch.basic_consume(queue, lambda *a: None, consumer_tag="eu-watcher")
    two.queue_delete(queue)
    deadline = time.monotonic() + WAIT
    while not cancelled and time.monotonic() < deadline:
        first.process_data_events(time_limit=0.1)
    two.queue_delete(requests)
    two.exchange_delete(exchange)
    first.close()
    second.close()
    return {"moved": got, "replies": replies, "cancelled": cancelled}


def declared_elsewhere() -> dict:
    """Exchanges and bindings declared through one gateway, published to through the other at once,
    mandatory with confirms, round after round: every publish routed (RabbitMQ's declare-ok and
    bind-ok mean every node routes by them), none returned or refused for a missing exchange."""
    rounds = 20
    first = connect()
    second = pika.BlockingConnection(pika.ConnectionParameters(host, int(sys.argv[4]), socket_timeout=10))
    one = first.channel()
    outcomes: dict[str, int] = {"routed": 0, "returned": 0, "no_exchange": 0}
    two = second.channel()
    two.confirm_delivery()
    for i in range(rounds):
        exchange, queue = name(f"x{i}"), name(f"q{i}")
        one.exchange_declare(exchange, "direct" if i % 2 else "topic")
        one.queue_declare(queue)
        one.queue_bind(queue, exchange, f"key.{i}")
        try:
            two.basic_publish(exchange, f"key.{i}", f"m{i}".encode(), mandatory=True)
            outcomes["routed"] += 1
        except UnroutableError:
            outcomes["returned"] += 1
        except ChannelClosedByBroker:
            outcomes["no_exchange"] += 1
            two = second.channel()
            two.confirm_delivery()
    got = [m["body"] for i in range(rounds) for m in drain(one, name(f"q{i}"))]
    for i in range(rounds):
        one.queue_delete(name(f"q{i}"))
        one.exchange_delete(name(f"x{i}"))
    first.close()
    second.close()
    return {**outcomes, "got": got}


def ferrymq_extras() -> dict:
    """What the gateway adds to RabbitMQ: graded retry (a requeued message comes back after a delay,
    and past x-max-retries goes to the dead-letter exchange), broadcast queues (every consumer gets
    every message) and the message size limit."""
    connection = connect()
    channel = connection.channel()
    channel.confirm_delivery()
    names = {k: name(k) for k in ("graded", "last", "dead", "news")}
    channel.queue_declare(names["dead"])
    channel.queue_declare(names["graded"], arguments={"x-graded-retry": True})
    channel.queue_declare(names["last"], arguments={
        "x-graded-retry": True, "x-max-retries": 0, "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": names["dead"]})  # fmt: skip
    result: dict = {}
    for queue in ("graded", "last"):
        channel.basic_publish("", names[queue], f"{queue} job".encode())
        method, _, _ = channel.basic_get(names[queue])
        channel.basic_nack(method.delivery_tag, requeue=True)
    dead = wait_get(channel, names["dead"])
    result["past_max_retries"] = (
        None if dead is None else [dead[2].decode(), dead[1].headers["x-death"][0]["reason"]]
    )
    result["graded_back_at_once"] = channel.basic_get(names["graded"], auto_ack=True)[0] is not None
    channel.queue_declare(names["news"], arguments={"x-broadcast": True})
    readers = [connection.channel() for _ in range(2)]
    got: list[list[str]] = [[], []]
    for i, reader in enumerate(readers):
        reader.basic_consume(names["news"], lambda ch, m, p, b, i=i: got[i].append(b.decode()), auto_ack=True)
    connection.process_data_events(time_limit=0.5)
    for i in range(3):
        channel.basic_publish("", names["news"], f"n{i}".encode())
    deadline = time.monotonic() + WAIT
    while (len(got[0]) < 3 or len(got[1]) < 3) and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.1)
    result["broadcast"] = got
    big = connection.channel()
    result["too_big"] = closed_by_broker(
        lambda: (big.basic_publish("", names["news"], b"x" * (4 * 1024 * 1024 + 1)), big.basic_qos())
    )
    for queue in names.values():
        channel.queue_delete(queue)
    connection.close()
    return result


SCENARIOS["two_gateways"] = two_gateways
SCENARIOS["ferrymq_extras"] = ferrymq_extras
SCENARIOS["declared_elsewhere"] = declared_elsewhere
print(json.dumps(SCENARIOS[scenario]()), flush=True)
