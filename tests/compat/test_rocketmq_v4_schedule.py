"""PyPI rocketmq==0.4.4 (C++ 4.x client) with delay levels and consumer retries against our broker.

The broker runs with levels one second apart (RocketMQ's are 1s 5s 10s ..., set by the same
`message_delay_level`): level 2 is 2 s, and a failed message comes back through
CONSUMER_SEND_MSG_BACK at level 3 + attempts (3 s for the first retry).
"""

from __future__ import annotations

import pytest

from tests.compat.conftest import wait_until

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

WAIT = 45.0
LEVEL_S = 1  # seconds between one delay level and the next


@pytest.fixture(autouse=True)
def one_second_levels(monkeypatch):
    """Brokers started after this (they read FERRYMQ_* settings) delay level n by n seconds."""
    levels = " ".join(f"{n * LEVEL_S}s" for n in range(1, 19))
    monkeypatch.setenv("FERRYMQ_MESSAGE_DELAY_LEVEL", levels)


def test_a_delay_level_from_the_cpp_producer_is_delivered_after_its_delay(v4, cluster):
    v4.produce("DelayTopic", 1, prefix="create")  # the topic and its route exist before the consumer
    cluster.queue_count("DelayTopic")
    consumer = v4.consumer("DelayTopic", "delay_readers", label="reader")
    sent = v4.produce("DelayTopic", 5, prefix="delayed", delay_level=2)
    wanted = {s["body"] for s in sent}
    wait_until(lambda: wanted <= consumer.bodies(), WAIT, consumer.describe)
    consumer.stop()
    delayed = [m for m in consumer.messages if m["body"] in wanted]
    assert len(delayed) == 5, consumer.describe()
    for m in delayed:  # stored again under its topic 2 s (level 2) after it was born
        assert m["store_timestamp"] - m["born_timestamp"] >= 2 * LEVEL_S * 1000 - 50, m
        assert m["topic"] == "DelayTopic" and m["reconsume_times"] == 0


def test_a_failed_message_of_the_cpp_consumer_comes_back_through_the_retry_topic(v4, cluster):
    v4.produce("RetryTopic", 1, prefix="create")
    cluster.queue_count("RetryTopic")
    consumer = v4.consumer("RetryTopic", "retry_group", label="failer", fail_times=1)
    sent = {s["body"]: s for s in v4.produce("RetryTopic", 3, prefix="retried")}

    def retried() -> bool:
        return {m["body"] for m in consumer.messages if m["reconsume_times"] >= 1} >= sent.keys()

    wait_until(retried, WAIT, consumer.describe)
    consumer.stop()
    # The client fails a whole batch when one message of it fails, so a message may come back without
    # having been shown once; each must come back from the retry topic, as itself, after level 3.
    for body, s in sent.items():
        again = next(m for m in consumer.messages if m["body"] == body and m["reconsume_times"] >= 1)
        assert again["topic"] == "RetryTopic" and again["msg_id"] == s["msg_id"], again
        assert again["store_timestamp"] - again["born_timestamp"] >= 3 * LEVEL_S * 1000 - 50, again
    assert cluster.route("%RETRY%retry_group") is not None
