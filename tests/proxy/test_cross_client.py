"""One cluster, every client at once: the C++ 4.x client over remoting and the official 5.x Python
client through the proxy, on the same topics. What one produces the other consumes with tag, keys,
properties and message id intact, and a 4.x group and a 5.x group read one topic independently."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.compat.conftest import V4Clients, rocketmq_v4_python  # noqa: F401  (fixture)

pytestmark = pytest.mark.compat

WAIT = 30.0


@pytest.fixture
def v4(rocketmq_v4_python, proxied, tmp_path) -> Iterator[V4Clients]:  # noqa: F811
    clients = V4Clients(rocketmq_v4_python, proxied, tmp_path / "v4")
    yield clients
    clients.close()


def receive_and_ack(client, count: int) -> dict[str, dict]:
    """Body -> message, for `count` messages received through the proxy (each acked)."""
    got: dict[str, dict] = {}
    deadline = time.monotonic() + WAIT
    while len(got) < count and time.monotonic() < deadline:
        for m in client.ok("receive", max=16, invisible_s=30)["messages"]:
            got[m["body"]] = m
            client.ok("ack", id=m["id"])
    return got


def test_a_4x_producer_s_messages_reach_a_5x_consumer_and_a_4x_group_alike(proxied, client, v4):
    proxied.create_topic("Mixed", 2)
    sent = v4.produce("Mixed", 6, prefix="cpp", keys=True, tags=("TagA",), properties={"origin": "cpp"})
    client.ok("consumer", group="FiveReaders", topic="Mixed", await_s=5)
    got = receive_and_ack(client, 6)
    assert sorted(got) == sorted(s["body"] for s in sent), proxied.describe()
    for s in sent:
        m = got[s["body"]]
        assert (m["topic"], m["tag"], m["keys"], m["attempt"]) == ("Mixed", "TagA", [s["keys"]], 1)
        assert m["properties"] == {"origin": "cpp"}
        assert m["id"] == s["msg_id"]

    # a 4.x group of its own reads the same messages, whatever the 5.x group did with them
    readers = v4.consumer("Mixed", "four_readers", label="reader", count=6, timeout=WAIT)
    readers.wait_exit()
    assert readers.bodies() == set(got)


def test_a_5x_producer_s_messages_reach_a_4x_consumer_intact(proxied, client, v4):
    proxied.create_topic("Mixed", 2)
    client.ok("producer", topics=["Mixed"])
    ids = {
        f"grpc-{i}": client.ok("send", topic="Mixed", body=f"grpc-{i}", tag="TagB", keys=[f"grpc-key-{i}"],
                               properties={"origin": "grpc"})["id"]
        for i in range(6)
    }  # fmt: skip
    consumer = v4.consumer(
        "Mixed", "four_readers", label="reader", properties=("origin",), count=6, timeout=WAIT
    )
    consumer.wait_exit()
    received = {m["body"]: m for m in consumer.messages}
    assert received.keys() == ids.keys(), consumer.describe()
    for body, m in received.items():
        i = body.removeprefix("grpc-")
        assert (m["topic"], m["tags"], m["keys"]) == ("Mixed", "TagB", f"grpc-key-{i}")
        assert m["properties"] == {"origin": "grpc"}
        assert m["msg_id"] == ids[body]
