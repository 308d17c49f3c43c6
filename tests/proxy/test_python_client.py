"""The official 5.x Python client through our proxy, local and cluster mode: normal messages with tag,
keys and properties produced and received by a SimpleConsumer; an unknown topic; a PushConsumer with a
failing listener; a message group in order; a delayed message, and one recalled. What both 5.x clients
do alike is in test_both_clients.py."""

from __future__ import annotations

import time

import pytest

from tests.proxy.conftest import receive_until

pytestmark = pytest.mark.compat


def test_produce_and_receive_with_tag_keys_and_properties(proxied, client):
    proxied.create_topic("Orders")
    client.ok("producer", topics=["Orders"])
    sent = [
        client.ok("send", topic="Orders", body=f"order-{i}", tag="new", keys=[f"k{i}", "all"],
                  properties={"region": "eu", "n": str(i)})["id"]
        for i in range(3)
    ]  # fmt: skip
    client.ok("consumer", group="Billing", topic="Orders", await_s=5)
    got = {m["id"]: m for m in receive_until(client, lambda got: len({m["id"] for m in got}) >= 3)}
    assert sorted(got) == sorted(sent), proxied.describe()
    for m in got.values():
        i = m["body"].removeprefix("order-")
        assert (m["topic"], m["tag"], m["keys"], m["attempt"]) == ("Orders", "new", ["all", f"k{i}"], 1)
        assert m["properties"] == {"region": "eu", "n": i}
        assert client.ok("ack", id=m["id"])
    again = client.ok("receive", max=16, invisible_s=30)
    assert again["messages"] == []


def test_an_unknown_topic_is_refused_at_once_with_topic_not_found(proxied, client):
    client.ok("producer", topics=["NoSuchTopic"])  # the client starts without the route
    started = time.monotonic()
    answer = client.call("send", topic="NoSuchTopic", body="x")
    # the client logs the route's NotFoundException and raises its own "failed to fetch" error
    assert not answer["ok"] and answer["message"] == "failed to fetch topic:NoSuchTopic route.", answer
    assert time.monotonic() - started < 10
    log = client.log_text()
    assert "topic NoSuchTopic does not exist" in log and "40402" in log, log[-2000:]


def test_a_push_consumer_gets_messages_and_a_failed_one_again(proxied, client):
    proxied.create_topic("Events")
    client.ok("producer", topics=["Events"])
    client.ok("push", group="Listeners", topic="Events", fail_attempts=1)
    sent = {client.ok("send", topic="Events", body=f"event-{i}")["id"] for i in range(3)}

    def settled() -> list[dict]:
        return [m for m in client.ok("pushed")["messages"] if m["ok"]]

    deadline = time.monotonic() + 60
    while {m["id"] for m in settled()} != sent and time.monotonic() < deadline:
        time.sleep(0.2)
    calls = client.ok("pushed")["messages"]
    assert {m["id"] for m in settled()} == sent, (calls, proxied.describe())
    # each failed once (attempt 1), then came back as attempt 2 and succeeded
    assert sorted((m["id"], m["attempt"], m["ok"]) for m in calls) == sorted(
        [(i, 1, False) for i in sent] + [(i, 2, True) for i in sent]
    )


def test_a_message_group_is_received_in_order_one_settled_message_at_a_time(proxied, client):
    proxied.create_topic("Payments", 4, "FIFO")
    proxied.create_group("Ledger", orderly=True)
    client.ok("producer", topics=["Payments"])
    sent = [client.ok("send", topic="Payments", body=f"pay-{i}", group="account-7")["id"] for i in range(4)]
    client.ok("consumer", group="Ledger", topic="Payments", await_s=5)
    (first,) = client.ok("receive", max=1, invisible_s=20)["messages"]
    assert first["id"] == sent[0]
    # while the first is unsettled, the rest of its group waits (an empty long poll of 5 s)
    assert client.ok("receive", max=1, invisible_s=20)["messages"] == []
    client.ok("ack", id=first["id"])
    got = [first]
    deadline = time.monotonic() + 60
    while len(got) < len(sent) and time.monotonic() < deadline:
        batch = client.ok("receive", max=1, invisible_s=20)["messages"]
        assert len(batch) <= 1
        for m in batch:
            assert m["group"] == "account-7"
            got.append(m)
            client.ok("ack", id=m["id"])  # the next one of the group comes only after this
    assert [m["id"] for m in got] == sent, proxied.describe()
    assert [m["body"] for m in got] == [f"pay-{i}" for i in range(4)]


def test_a_delayed_message_is_delivered_at_its_time(proxied, client):
    proxied.create_topic("Reminders", 1, "DELAY")
    client.ok("producer", topics=["Reminders"])
    due = int(time.time()) + 3
    sent = client.ok("send", topic="Reminders", body="wake up", deliver_at_s=due)["id"]
    client.ok("consumer", group="Sleepers", topic="Reminders", await_s=5)
    got = receive_until(client, bool, invisible_s=20)
    assert time.time() >= due - 0.5  # not before its time (the clocks are the same machine's)
    assert [(m["id"], m["body"], m["deliver_at_ms"]) for m in got] == [(sent, "wake up", due * 1000)]
    client.ok("ack", id=sent)


def test_a_recalled_delayed_message_is_never_delivered(proxied, client):
    proxied.create_topic("Plans", 1, "DELAY")
    client.ok("producer", topics=["Plans"])
    due = int(time.time()) + 3
    cancelled, kept = (
        client.ok("send", topic="Plans", body=body, deliver_at_s=due) for body in ("off", "on")
    )
    assert cancelled["recall_handle"] and kept["recall_handle"]
    assert client.ok("recall", topic="Plans", handle=cancelled["recall_handle"])["id"] == cancelled["id"]
    client.ok("consumer", group="Planners", topic="Plans", await_s=5)
    got = receive_until(client, bool, invisible_s=20)
    assert [m["body"] for m in got] == ["on"], proxied.describe()
    late = client.call("recall", topic="Plans", handle=kept["recall_handle"])  # delivered already
    assert not late["ok"]


def test_a_fifo_push_consumer_retries_in_order_then_forwards_to_the_dead_letter_queue(proxied, client):
    proxied.create_topic("Shipments", 1, "FIFO")
    proxied.create_group("Shippers", orderly=True, retry_max_times=1)  # 2 attempts, then the DLQ
    client.ok("producer", topics=["Shipments"])
    poison = client.ok("send", topic="Shipments", body="poison", group="parcel-1")["id"]
    fine = client.ok("send", topic="Shipments", body="fine", group="parcel-1")["id"]
    client.ok("push", group="Shippers", topic="Shipments", fail_bodies=["poison"])

    def settled() -> bool:
        return any(m["ok"] for m in client.ok("pushed")["messages"])

    deadline = time.monotonic() + 60
    while not settled() and time.monotonic() < deadline:
        time.sleep(0.2)
    seen = [(m["id"], m["ok"]) for m in client.ok("pushed")["messages"]]
    # in order: the poison message twice (the client retries it itself), forwarded to the DLQ, then the
    # next one of its group
    assert seen == [(poison, False), (poison, False), (fine, True)], seen
    client.ok("consumer", group="Undertakers", topic="%DLQ%Shippers", await_s=5)
    dead: list[dict] = []
    deadline = time.monotonic() + 30
    while not dead and time.monotonic() < deadline:
        dead = client.ok("receive", max=1, invisible_s=30)["messages"]
    assert [(m["id"], m["body"]) for m in dead] == [(poison, "poison")], proxied.describe()
