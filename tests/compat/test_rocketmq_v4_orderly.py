"""The real rocketmq==0.4.4 client's ordered messaging through ferrymq: orderly sends with its hash
selector, and an orderly consumer whose failures are retried in place under ferrymq's queue locks."""

from __future__ import annotations

import pytest

from tests.compat.conftest import wait_until
from tests.compat.test_rocketmq_v4 import seq

pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]


def test_orderly_failures_are_retried_in_place_without_reordering(v4, cluster):
    shards = 3
    sent = v4.produce("OrderRetryTopic", 18, prefix="step", mode="orderly", shards=shards)
    shard_of = {s["body"]: s["shard"] for s in sent}
    cluster.queue_count("OrderRetryTopic")
    # Every message is refused once (RECONSUME_LATER): the client suspends its queue, then retries it.
    consumer = v4.consumer("OrderRetryTopic", "order_retry", label="reader", orderly=True, fail_times=1,
                           timeout=120)  # fmt: skip
    wait_until(lambda: len(consumer.messages) >= 2 * len(sent), 90, consumer.describe)
    consumer.stop()
    for shard in range(shards):
        steps = [seq(m["body"]) for m in consumer.messages if shard_of[m["body"]] == shard]
        mine = sorted(seq(s["body"]) for s in sent if s["shard"] == shard)
        assert steps == [step for step in mine for _ in (1, 2)], f"key {shard}: {steps}"
    assert cluster.consumer_ids("order_retry") == []  # it left the group cleanly
