"""The real RocketMQ 4.x C++ client (rocketmq==0.4.4) under a produce quota set from the shell: it
reads the broker's flow-control answer (SYSTEM_BUSY, "[TOO_MANY_REQUESTS]..."), tries twice more at
once, then raises (as "No route info of this topic"); the application sends again, the sends are
slowed to the quota and every acknowledged message is consumed."""

from __future__ import annotations

import time

import pytest

from tests.compat.test_rocketmq_v4 import bodies, wait_for_all
from tests.compat.test_rocketmq_v4_control import admin

pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]
RATE, COUNT = 20, 40


def test_the_cpp_client_is_slowed_to_a_topic_quota_and_loses_nothing(v4, cluster):
    topic = "QuotaTopic"
    v4.produce(topic, 1, prefix="warm")  # the topic and its route exist before the limit
    assert "set on 1 broker(s)" in admin(
        cluster, "quota", "set", "produce", f"Topic:{topic}", "-m", str(RATE)
    )
    started = time.monotonic()
    sent = v4.produce(topic, COUNT, prefix="limited", resend_busy=True)
    elapsed = time.monotonic() - started
    assert v4.busy, "no send was refused"
    producer = v4.processes[-1]
    log = "".join(p.read_text(errors="replace") for p in (producer.home / "logs" / "rocketmq-cpp").glob("*"))
    assert "remark:[TOO_MANY_REQUESTS]quota exceeded: Topic:QuotaTopic may produce 20 messages/s" in log
    assert elapsed >= (COUNT - RATE * 0.1) / RATE * 0.9, elapsed
    consumer = v4.consumer(topic, "quota_readers", label="reader", timeout=120)
    wait_for_all(bodies(sent) | {"warm-0"}, consumer)
    consumer.stop()
