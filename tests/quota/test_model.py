"""Quotas as values and the limiter's buckets, without a broker."""

from __future__ import annotations

import time

import pytest

from ferrymq.broker.quota import Quota, QuotaError, QuotaLimiter
from ferrymq.protocol.codes import FLOW_CONTROL_REMARK


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ({"kind": "publish", "resource": "Topic:t", "messages": 1}, "kind must be one of"),
        ({"kind": "produce", "resource": "Group:g", "messages": 1}, "on Topic:<name> or User:<name>"),
        ({"kind": "produce", "resource": "Topic:", "messages": 1}, "a produce quota is on"),
        ({"kind": "produce", "resource": "Topic:t"}, "sets messages and/or bytes"),
        ({"kind": "consume", "resource": "Group:g", "messages": -5}, "finite number >= 0"),
        ({"kind": "consume", "resource": "Group:g", "messages": "fast"}, "could not convert"),
        ({"kind": "connections", "resource": "User:u", "messages": 3}, "sets connections (> 0) only"),
        ({"kind": "connections", "resource": "Topic:t", "connections": 3}, "on User:<name>"),
        (["produce"], "a quota is a JSON object"),
    ],
)
def test_bad_quotas_are_refused_with_a_reason(data, reason):
    with pytest.raises(QuotaError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        Quota.from_json(data)


def test_round_trip_through_json():
    quota = Quota("consume", "Group:billing", messages=200, bytes=1 << 20)
    assert Quota.from_json(quota.to_json()) == quota
    assert quota.to_json() == {
        "kind": "consume",
        "resource": "Group:billing",
        "messages": 200,
        "bytes": 1 << 20,
    }


def test_a_put_over_the_topic_or_user_limit_is_flow_controlled_and_debts_are_waited_off():
    limiter = QuotaLimiter()
    assert not limiter.produce and limiter.admit_put("t", "u") is None
    limiter.set(Quota("produce", "Topic:t", messages=100))  # a burst of 10 messages
    admitted = 0
    while limiter.admit_put("t", None) is None and admitted < 1000:
        limiter.charge_put("t", None, 1, 10)
        admitted += 1
    assert 10 <= admitted <= 12  # the burst, plus what refilled meanwhile
    refusal = limiter.admit_put("t", None)
    assert refusal.startswith(FLOW_CONTROL_REMARK) and "Topic:t may produce 100 messages/s" in refusal
    assert limiter.admit_put("other", None) is None  # other topics are not limited
    limiter.set(Quota("produce", "User:u", bytes=1000))
    limiter.charge_put("x", "u", 1, 5000)  # a big message runs into debt: 4 s of the user's bytes
    assert "User:u may produce 1000 bytes/s" in limiter.admit_put("x", "u")
    time.sleep(0.12)
    assert limiter.admit_put("t", None) is None  # the topic's tokens came back
    limiter.delete("produce", "User:u")
    assert limiter.admit_put("x", "u") is None


def test_consume_allowance_is_the_smallest_of_group_topic_and_user():
    limiter = QuotaLimiter()
    limiter.set(Quota("consume", "Group:g", messages=500))  # burst 50
    limiter.set(Quota("consume", "Topic:t", messages=100))  # burst 10
    assert limiter.consume_allowance("g", "t", None)[0] == 10
    assert limiter.consume_allowance("g", "other", None)[0] == 50
    limiter.charge_consume("g", "t", None, 10, 100)
    allowed, wait = limiter.consume_allowance("g", "t", None)
    assert allowed == 0 and 0 < wait <= 0.011


def test_connections_are_counted_per_user_and_freed_when_closed():
    limiter = QuotaLimiter()
    limiter.set(Quota("connections", "User:app", connections=2))
    assert limiter.connected("10.0.0.1:1", "app") is None
    assert limiter.connected("10.0.0.1:1", "app") is None  # the same connection again
    assert limiter.connected("10.0.0.1:2", "app") is None
    refusal = limiter.connected("10.0.0.1:3", "app")
    assert refusal == "User:app has reached the maximum number of connections (2)"
    assert limiter.connected("10.0.0.1:3", "other") is None  # other users are not limited
    limiter.closed("10.0.0.1:1")
    assert limiter.connected("10.0.0.1:4", "app") is None and limiter.connections_of("app") == 2
