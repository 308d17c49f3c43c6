"""basic.consume with pika through standalone gateways, which consume through the remote messaging
service (long-polling pops): a consumer on one gateway gets what was published on the other, shares a
queue with the other's consumers, gets back what they left unacked, keeps its prefetch, and still
hears of a message after idling past a long poll."""

from __future__ import annotations

import pytest

from ferrymq.amqp.feeds import POLL_MS
from tests.amqp.conftest import run_scenario

pytestmark = pytest.mark.compat
SCRIPT = "pika_remote_consume.py"


def scenario(pika_python, two_gateways, name: str, *more: str) -> dict:
    first, second = two_gateways
    return run_scenario(pika_python, SCRIPT, name, first, str(second.port), *more)


def test_consumer_gets_every_message_once_in_order_and_acks_hold(pika_python, two_gateways):
    outcome = scenario(pika_python, two_gateways, "in_order_once")
    assert outcome["got"] == [[f"m{i}", False] for i in range(40)]
    assert outcome["after_reconnect"] == [["marker", False]]


def test_consumers_on_two_gateways_share_a_queue(pika_python, two_gateways):
    outcome = scenario(pika_python, two_gateways, "shared")
    a, b = outcome["a"], outcome["b"]
    assert a and b, "each gateway's consumer takes a share"
    assert sorted(a + b) == sorted(f"m{i}" for i in range(40))  # all, none twice
    for got in (a, b):  # each in publish order
        assert got == sorted(got, key=lambda body: int(body[1:]))


def test_unacked_come_back_to_the_other_gateway_on_close(pika_python, two_gateways):
    outcome = scenario(pika_python, two_gateways, "back_on_close")
    held = [body for body, _ in outcome["held"]]
    assert len(held) == 3 and not any(redelivered for _, redelivered in outcome["held"])
    assert outcome["other"] == sorted([body, body in held] for body in (f"m{i}" for i in range(5)))


def test_prefetch_is_kept_through_the_remote_path(pika_python, two_gateways):
    outcome = scenario(pika_python, two_gateways, "prefetch_held")
    assert outcome == {"got": [f"m{i}" for i in range(12)], "most_unacked": 3}


def test_idle_consumer_gets_a_message_published_after_a_long_poll(pika_python, two_gateways):
    pause_s = POLL_MS / 1000 + 1.5
    outcome = scenario(pika_python, two_gateways, "idle_then_late", str(pause_s))
    assert outcome == {"got": ["early", "late"], "idle_s_at_least": True}
