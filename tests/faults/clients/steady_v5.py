"""Keep producing and consuming through the gRPC proxy with the official 5.x Python client
(rocketmq-python-client), each message sent until it is acknowledged.

Runs in the client's own venv. Message i has body ``<prefix>-<i>``. A Producer sends for --seconds;
a SimpleConsumer (unless --no-consumer) receives and acks all along, then until every acknowledged
send was received or --drain seconds passed. Output, one JSON line each:
``{"event": "sent", "body", "t", "started"}`` per acknowledged send (``t``: wall-clock seconds;
``started``: when its successful attempt began), ``{"event": "failed", "error", "t"}`` per failed
attempt (producer or consumer), ``{"event": "received", "body", "t"}`` per received message, then
``{"event": "summary", "sent", "received"}``.

    python steady_v5.py --proxy HOST:PORT --topic T --group G [--seconds 30] [--drain 60] [--timeout 120]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer

lock = threading.Lock()


def emit(event: str, **fields) -> None:
    with lock:
        sys.stdout.write(json.dumps({"event": event, "t": time.time(), **fields}) + "\n")
        sys.stdout.flush()


def produce(producer: Producer, topic: str, prefix: str, seconds: float, interval: float, sent: set) -> None:
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        body = f"{prefix}-{i}"
        message = Message()
        message.topic = topic
        message.body = body.encode()
        started = time.time()
        try:
            producer.send(message)
        except Exception as e:  # the client's own exceptions: try the same message again
            emit("failed", side="producer", error=f"{type(e).__name__}: {e}"[:300])
            time.sleep(0.05)
            continue
        sent.add(body)
        emit("sent", body=body, started=started)
        i += 1
        time.sleep(interval)


def consume(
    consumer: SimpleConsumer, sent: set, received: set, done: threading.Event, drain_until: list
) -> None:
    while not (done.is_set() and (sent <= received or time.monotonic() > drain_until[0])):
        try:
            messages = consumer.receive(32, 15)
        except Exception as e:
            emit("failed", side="consumer", error=f"{type(e).__name__}: {e}"[:300])
            time.sleep(0.2)
            continue
        for m in messages:
            body = m.body.decode()
            received.add(body)
            emit("received", body=body)
            try:
                consumer.ack(m)
            except Exception as e:  # it comes back after its invisible time
                emit("failed", side="ack", error=f"{type(e).__name__}: {e}"[:300])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--proxy", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", default="steady-v5")
    parser.add_argument("--prefix", default="v5")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=0.02)
    parser.add_argument("--drain", type=float, default=60.0)
    parser.add_argument("--no-consumer", action="store_true")
    parser.add_argument("--timeout", type=float, default=180.0, help="the process ends after this, whatever")
    args = parser.parse_args()
    watchdog = threading.Timer(args.timeout, lambda: os._exit(3))
    watchdog.daemon = True
    watchdog.start()
    config = ClientConfiguration(args.proxy, Credentials())
    producer = Producer(config, (args.topic,))
    producer.startup()
    sent: set = set()
    received: set = set()
    done = threading.Event()
    drain_until = [float("inf")]
    consumer = None
    if not args.no_consumer:
        consumer = SimpleConsumer(config, args.group, {args.topic: FilterExpression("*")}, await_duration=5)
        consumer.startup()
        reader = threading.Thread(
            target=consume, args=(consumer, sent, received, done, drain_until), daemon=True
        )
        reader.start()
    produce(producer, args.topic, args.prefix, args.seconds, args.interval, sent)
    drain_until[0] = time.monotonic() + args.drain
    done.set()
    if consumer is not None:
        reader.join(args.drain + 30)
    emit("summary", sent=len(sent), received=len(received & sent))
    os._exit(0)  # the client's threads may linger on a dead endpoint


if __name__ == "__main__":
    main()
