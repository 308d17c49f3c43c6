"""Runs in the official 5.x Python client's venv: starts a Producer on the proxy, sends a warm-up,
says `ready`, waits for `go` on stdin, then sends COUNT messages of BODY bytes with up to INFLIGHT
send_async futures open and prints one JSON line: {"seconds": ..., "failed": ...}.

    python rocketmq5_send.py <proxy host:port> <topic> <count> <body bytes> <inflight>
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import wait

from rocketmq import ClientConfiguration, Credentials, Message, Producer

endpoint, topic = sys.argv[1], sys.argv[2]
count, body_size, inflight = (int(a) for a in sys.argv[3:6])
body = os.urandom(body_size)


def message() -> Message:
    m = Message()
    m.topic = topic
    m.body = body
    return m


producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,))
producer.startup()
for _ in range(100):
    producer.send(message())
print("ready", flush=True)
sys.stdin.readline()
failed = 0
pending: set = set()
started = time.perf_counter()
for _ in range(count):
    if len(pending) >= inflight:
        done, pending = wait(pending, return_when="FIRST_COMPLETED")
        failed += sum(1 for f in done if f.exception() is not None)
    pending.add(producer.send_async(message()))
done, _ = wait(pending)
failed += sum(1 for f in done if f.exception() is not None)
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "failed": failed}), flush=True)
producer.shutdown()
os._exit(0)
