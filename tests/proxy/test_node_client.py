"""The official 5.x Node.js client (npm rocketmq-client-nodejs 1.0.8, in its own cached environment)
through our proxy, local and cluster mode, driven by clients/driver.js: a Producer's normal messages
with tag, keys and properties; a message group consumed in order; a delayed message not before its
time; a SimpleConsumer's acks; a PushConsumer (1.0.8 has one) whose failed messages come back
until the last retry ends in the dead letter queue, and a FIFO one that forwards a failed message there
itself; an unknown topic; the Python 5.x client reading what the Node client wrote, and the other way
round; and one message group sent by both, received in send order. What both 5.x clients do alike is
in test_both_clients.py.

Three traits of the Node client 1.0.8 show here: a receive's deadline is its request timeout (3 s)
plus the await duration, and the proxy polls at least 5 s (as RocketMQ's does), so awaits are 3 s or
more (2 s gets ILLEGAL_POLLING_TIME); it ignores a customized backoff policy (what RocketMQ's
proxy and ours send consumers), so a FIFO PushConsumer gives a message one attempt only and retries
other messages at once; and its PushConsumer drops a message whose CRC32 body digest is not its own
decimal form, so the proxy sends MD5 digests, as RocketMQ's proxy does."""

from __future__ import annotations

import time

import pytest

from tests.proxy.conftest import WAIT, receive_until, wait_pushed

pytestmark = pytest.mark.compat


def test_produce_and_receive_with_tag_keys_and_properties(proxied, node):
    proxied.create_topic("Orders")
    node.ok("producer", topics=["Orders"])
    sent = [
        node.ok("send", topic="Orders", body=f"order-{i}", tag="new", keys=[f"k{i}", "all"],
                properties={"region": "eu", "n": str(i)})["id"]
        for i in range(3)
    ]  # fmt: skip
    node.ok("consumer", group="Billing", topic="Orders", await_s=5)
    got = {m["id"]: m for m in receive_until(node, lambda got: len(got) >= 3)}
    assert sorted(got) == sorted(sent), proxied.describe()
    for m in got.values():
        i = m["body"].removeprefix("order-")
        assert (m["topic"], m["tag"], m["keys"], m["attempt"]) == ("Orders", "new", ["all", f"k{i}"], 1)
        assert m["properties"] == {"region": "eu", "n": i}
        assert not m["corrupted"]  # the client checked the body digest
        node.ok("ack", id=m["id"])
    assert node.ok("receive", max=16, invisible_s=30)["messages"] == []


def test_a_message_group_is_received_in_order_one_settled_message_at_a_time(proxied, node):
    proxied.create_topic("Payments", 4, "FIFO")
    proxied.create_group("Ledger", orderly=True)
    node.ok("producer", topics=["Payments"])
    sent = [node.ok("send", topic="Payments", body=f"pay-{i}", group="account-7")["id"] for i in range(4)]
    node.ok("consumer", group="Ledger", topic="Payments", await_s=3)
    got: list[dict] = []
    deadline = time.monotonic() + WAIT
    while len(got) < len(sent) and time.monotonic() < deadline:
        batch = node.ok("receive", max=1, invisible_s=20)["messages"]
        assert len(batch) <= 1
        for m in batch:
            assert m["group"] == "account-7"
            got.append(m)
            if len(got) == 1:  # while the first is unsettled, the rest of its group waits
                assert node.ok("receive", max=1, invisible_s=20)["messages"] == []
            node.ok("ack", id=m["id"])  # the next one of the group comes only after this
    assert [m["id"] for m in got] == sent, proxied.describe()
    assert [m["body"] for m in got] == [f"pay-{i}" for i in range(4)]


def test_a_delayed_message_is_delivered_at_its_time(proxied, node):
    proxied.create_topic("Reminders", 1, "DELAY")
    node.ok("producer", topics=["Reminders"])
    due = int(time.time()) + 3
    sent = node.ok("send", topic="Reminders", body="wake up", deliver_at_s=due)["id"]
    node.ok("consumer", group="Sleepers", topic="Reminders", await_s=5)
    got = receive_until(node, bool)
    assert time.time() >= due - 0.5  # not before its time (the clocks are the same machine's)
    assert [(m["id"], m["body"], m["deliver_at_ms"]) for m in got] == [(sent, "wake up", due * 1000)]
    node.ok("ack", id=sent)


def test_an_unknown_topic_is_refused_at_once_with_not_found_and_a_known_one_works(proxied, node):
    proxied.create_topic("Known", 1)
    node.ok("producer", topics=[])  # the client starts without routes: its settings name no topic
    started = time.monotonic()
    answer = node.call("send", topic="NoSuchTopic", body="x")
    assert not answer["ok"] and answer["error"] == "NotFoundException", answer
    # the proxy's status (TOPIC_NOT_FOUND and its message) as the client reports it
    assert "response-code=40402" in answer["message"], answer
    assert "topic NoSuchTopic does not exist" in answer["message"], answer
    assert time.monotonic() - started < 10
    node.ok("send", topic="Known", body="y")


def test_a_push_consumer_gets_failed_messages_again_and_the_last_retry_goes_to_the_dead_letter_queue(
    proxied, node
):
    proxied.create_topic("Events")
    proxied.create_group("Listeners", retry_max_times=1)  # 2 attempts, then the DLQ
    node.ok("producer", topics=["Events"])
    node.ok("push", group="Listeners", topic="Events", fail_attempts=1, fail_bodies=["poison"])
    sent = {node.ok("send", topic="Events", body=f"event-{i}")["id"] for i in range(3)}
    poison = node.ok("send", topic="Events", body="poison")["id"]

    def settled(calls: list[dict]) -> bool:
        return {m["id"] for m in calls if m["ok"]} == sent and [m["id"] for m in calls].count(poison) == 2

    calls = wait_pushed(node, settled)
    # each failed once (attempt 1), then came back as attempt 2 and succeeded, or failed for good
    assert sorted((m["id"], m["attempt"], m["ok"]) for m in calls) == sorted(
        [(i, 1, False) for i in sent]
        + [(i, 2, True) for i in sent]
        + [(poison, 1, False), (poison, 2, False)]
    ), proxied.describe()
    node.ok("consumer", group="Undertakers", topic="%DLQ%Listeners", await_s=5)
    dead = receive_until(node, bool)
    assert [(m["id"], m["body"]) for m in dead] == [(poison, "poison")], proxied.describe()


def test_a_fifo_push_consumer_forwards_a_failed_message_to_the_dead_letter_queue_then_goes_on(proxied, node):
    proxied.create_topic("Shipments", 1, "FIFO")
    proxied.create_group("Shippers", orderly=True, retry_max_times=1)
    node.ok("producer", topics=["Shipments"])
    poison = node.ok("send", topic="Shipments", body="poison", group="parcel-1")["id"]
    fine = node.ok("send", topic="Shipments", body="fine", group="parcel-1")["id"]
    node.ok("push", group="Shippers", topic="Shipments", fail_bodies=["poison"])
    calls = wait_pushed(node, lambda calls: any(m["ok"] for m in calls))
    # in order: the poison message once (1.0.8 has no customized backoff policy, the kind RocketMQ's
    # proxy sends, so it takes max attempts as 1), forwarded to the DLQ, then the next one of its group
    assert [(m["id"], m["ok"]) for m in calls] == [(poison, False), (fine, True)], calls
    node.ok("consumer", group="Undertakers", topic="%DLQ%Shippers", await_s=5)
    dead = receive_until(node, bool)
    assert [(m["id"], m["body"]) for m in dead] == [(poison, "poison")], proxied.describe()


def test_what_one_language_s_client_produces_the_other_s_consumes_intact(proxied, node, client):
    proxied.create_topic("FromNode", 2)
    proxied.create_topic("FromPython", 2)
    for producer, topic in ((node, "FromNode"), (client, "FromPython")):
        producer.ok("producer", topics=[topic])
    for consumer, topic in ((client, "FromNode"), (node, "FromPython")):
        consumer.ok("consumer", group=f"ReadersOf{topic}", topic=topic, await_s=3)
    for producer, consumer, topic in ((node, client, "FromNode"), (client, node, "FromPython")):
        ids = {
            producer.ok("send", topic=topic, body=f"{topic}-{i}", tag="Cross", keys=[f"key-{i}", "both"],
                        properties={"origin": topic, "n": str(i)})["id"]: str(i)
            for i in range(3)
        }  # fmt: skip
        got = {m["id"]: m for m in receive_until(consumer, lambda got: len(got) >= 3)}
        assert got.keys() == ids.keys(), (topic, got, proxied.describe())
        for message_id, i in ids.items():
            m = got[message_id]
            assert (m["topic"], m["body"], m["tag"], m["attempt"]) == (topic, f"{topic}-{i}", "Cross", 1)
            assert m["keys"] == ["both", f"key-{i}"]
            assert m["properties"] == {"origin": topic, "n": i}
            consumer.ok("ack", id=message_id)


@pytest.mark.parametrize("proxied", ["cluster"], indirect=True)  # the proxy picks queues alike in both modes
def test_one_message_group_sent_by_both_languages_is_received_in_send_order(proxied, node, client):
    # left to themselves the clients would put the group in different queues (Node's SipHash gives 0 of 4,
    # Python's SHA-256 1): the proxy picks one queue for it, whichever client sends
    proxied.create_topic("Accounts", 4, "FIFO")
    proxied.create_group("Bookkeepers", orderly=True)
    for producer in (node, client):
        producer.ok("producer", topics=["Accounts"])
    sent = [
        (node if i % 2 else client).ok("send", topic="Accounts", body=f"entry-{i}", group="account-9")["id"]
        for i in range(6)
    ]
    node.ok("consumer", group="Bookkeepers", topic="Accounts", await_s=3)
    got: list[str] = []
    deadline = time.monotonic() + WAIT
    while len(got) < len(sent) and time.monotonic() < deadline:
        for m in node.ok("receive", max=1, invisible_s=20)["messages"]:
            got.append(m["id"])
            node.ok("ack", id=m["id"])
    assert got == sent, proxied.describe()
