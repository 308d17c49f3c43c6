"""The real rocketmq==0.4.4 client obeys consumption control set with `ferrymq admin`: the broker
enforces pause, resume and the rate limit, so nothing in the client needs to know about them."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.compat.conftest import poll, wait_until
from tests.compat.test_rocketmq_v4 import WAIT, bodies, wait_for_all

pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]


def admin(cluster, *args: str) -> str:
    command = [sys.executable, "-m", "ferrymq", "admin", "--namesrv", cluster.namesrv, *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_paused_group_gets_nothing_until_resumed_and_a_rate_limit_slows_it(v4, cluster):
    topic, group = "ControlTopic", "controlled"
    before = v4.produce(topic, 4, prefix="before")
    cluster.queue_count(topic)
    consumer = v4.consumer(topic, group, label="reader", timeout=150)
    wait_for_all(bodies(before), consumer)

    admin(cluster, "pause", group)
    during = bodies(v4.produce(topic, 8, prefix="during"))
    leaked = poll(lambda: consumer.bodies() & during, 3.0)  # a window in which nothing may arrive
    assert not leaked, f"delivered while paused: {sorted(leaked)}"
    admin(cluster, "resume", group)
    wait_for_all(during, consumer)

    admin(cluster, "pause", group)  # the next 40 wait for the limit to be in place
    limited = bodies(v4.produce(topic, 40, prefix="limited"))
    admin(cluster, "rate-limit", group, "10")
    started = time.monotonic()
    admin(cluster, "resume", group)
    wait_for_all(limited, consumer, timeout=WAIT + 10)
    # 10 a second with a second's worth up front: the other 30 cannot arrive in much under 3 s
    assert time.monotonic() - started >= 2.0
    consumer.stop()


def test_an_offset_reset_reaches_the_running_real_consumer(v4, cluster):
    topic, group = "ResetTopic", "resetters"
    sent = bodies(v4.produce(topic, 6, prefix="first"))
    cluster.queue_count(topic)
    consumer = v4.consumer(topic, group, label="reader", timeout=120)
    wait_for_all(sent, consumer)
    assert "offset" in admin(cluster, "reset-offset", group, topic, "0")  # back to the start, while it runs
    # The broker sends C++ clients the list form of the offsets (Java's ResetOffsetBodyForC).
    wait_until(lambda: len(consumer.messages) >= 2 * len(sent), WAIT, consumer.describe)
    consumer.stop()
    assert sorted(m["body"] for m in consumer.messages) == sorted(list(sent) * 2)
