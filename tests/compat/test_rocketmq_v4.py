"""PyPI rocketmq==0.4.4 (the C++ 4.x client over remoting) against our NameServer and Broker.

Every test gets a fresh cluster; the client runs in its own venv and processes (clients/v4). Message i
of a batch has body ``<prefix>-<i>``, which is how deliveries are matched with sends. Facts about the
client that the tests rely on are in shared/reference/real-clients.md §2 and noted where used.
"""

from __future__ import annotations

import itertools
import time

import pytest

from ferrymq.client.sync import Message, Producer, PullConsumer
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.message_ext import decode_records
from ferrymq.protocol.sys_flag import COMPRESSED_FLAG
from tests.compat.conftest import poll, remoting_call, wait_until

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

WAIT = 30.0  # seconds for sent messages to reach a running consumer
CONVERGE = 45.0  # seconds for consumers to settle; the C++ client rebalances every 10 s at least


def bodies(records) -> set[str]:
    return {record["body"] for record in records}


def first_deliveries(messages) -> dict[str, dict]:
    """Body → its first delivery (at-least-once allows more)."""
    first: dict[str, dict] = {}
    for message in messages:
        first.setdefault(message["body"], message)
    return first


def seq(body: str) -> int:
    return int(body.rsplit("-", 1)[1])


def wait_for_all(wanted: set[str], *consumers, timeout: float = WAIT) -> None:
    """Until the consumers together received every body in `wanted`."""

    def missing() -> set[str]:
        return wanted - set().union(*(consumer.bodies() for consumer in consumers))

    wait_until(
        lambda: not missing(),
        timeout,
        lambda: (
            f"{len(missing())} of {len(wanted)} messages, e.g. {sorted(missing())[:5]}:\n"
            + "\n".join(consumer.describe() for consumer in consumers)
        ),
    )


def test_send_sync_results_match_what_the_consumer_receives(v4, cluster):
    sent = v4.produce("SyncTopic", 20, prefix="sync")
    assert {s["status"] for s in sent} == {"OK"}
    assert len({s["msg_id"] for s in sent}) == 20 and all(s["msg_id"] for s in sent)

    cluster.queue_count("SyncTopic")
    consumer = v4.consumer("SyncTopic", "sync_readers", label="reader", count=20, timeout=WAIT)
    consumer.wait_exit()
    received = first_deliveries(consumer.messages)
    assert received.keys() == bodies(sent)
    for s in sent:  # msg_id is the client-made UNIQ_KEY; offset is the queue offset
        message = received[s["body"]]
        assert (message["msg_id"], message["queue_offset"]) == (s["msg_id"], s["offset"]), s
    positions = {(m["queue_id"], m["queue_offset"]) for m in received.values()}
    assert len(positions) == 20, "two messages share a queue position"


def test_send_oneway_messages_all_arrive(v4, cluster):
    sent = v4.produce("OnewayTopic", 20, prefix="oneway", mode="oneway")
    assert {s["status"] for s in sent} == {"SENT_ONEWAY"}

    cluster.queue_count("OnewayTopic")
    consumer = v4.consumer("OnewayTopic", "oneway_readers", label="reader", count=20, timeout=WAIT)
    consumer.wait_exit()
    assert consumer.bodies() == bodies(sent)


def test_send_orderly_keeps_each_sharding_key_in_order(v4, cluster):
    shards = 4
    sent = v4.produce("OrderTopic", 40, prefix="order", mode="orderly", shards=shards)
    assert {s["status"] for s in sent} == {"OK"}
    for shard in range(shards):
        mine = [s for s in sent if s["shard"] == shard]
        assert len({s["queue"] for s in mine}) == 1, f"key {shard} went to several queues: {mine}"
        offsets = [s["offset"] for s in mine]
        assert offsets == sorted(set(offsets)), f"key {shard}: queue offsets do not follow the send order"

    cluster.queue_count("OrderTopic")
    # An orderly consumer locks its queues on the broker (LOCK_BATCH_MQ) before it consumes them.
    consumer = v4.consumer(
        "OrderTopic", "order_readers", label="reader", orderly=True, count=40, timeout=WAIT
    )
    consumer.wait_exit()
    assert consumer.bodies() == bodies(sent)
    shard_of = {s["body"]: s["shard"] for s in sent}
    for shard in range(shards):
        delivered = [seq(body) for body in first_deliveries(consumer.messages) if shard_of[body] == shard]
        assert delivered == sorted(delivered), f"key {shard} delivered out of order: {delivered}"


def test_keys_tags_and_properties_arrive_intact(v4, cluster):
    properties = {"color": "blue", "note": "two words", "i18n": "żółw ✓"}
    sent = v4.produce("PropsTopic", 10, prefix="props", keys=True, tags=("TagA",), properties=properties)

    cluster.queue_count("PropsTopic")
    consumer = v4.consumer(
        "PropsTopic", "props_readers", label="reader", properties=tuple(properties), count=10, timeout=WAIT
    )
    consumer.wait_exit()
    received = first_deliveries(consumer.messages)
    assert received.keys() == bodies(sent)
    for s in sent:
        message = received[s["body"]]
        assert (message["topic"], message["keys"], message["tags"]) == ("PropsTopic", s["keys"], "TagA")
        assert message["properties"] == properties
        assert message["reconsume_times"] == 0


def test_tag_expression_delivers_only_the_named_tags(v4, cluster):
    topic = "TagTopic"
    sent = v4.produce(topic, 24, prefix="tagged", tags=("TagA", "TagB", "TagC"))
    # One more TagA message per queue (round-robin sends), so every queue ends with a wanted message: once
    # these arrived, any TagC that slipped through would have been delivered before them.
    fence = v4.produce(topic, cluster.queue_count(topic), prefix="fence", tags=("TagA",))
    wanted = {s["body"] for s in sent + fence if s["tags"] in ("TagA", "TagB")}

    consumer = v4.consumer(topic, "tag_readers", label="reader", expression="TagA || TagB")
    wait_for_all(wanted, consumer)
    consumer.stop()
    assert {m["tags"] for m in consumer.messages} == {"TagA", "TagB"}
    assert consumer.bodies() == wanted


def test_clustering_consumers_of_one_group_split_the_queues_and_miss_nothing(v4, cluster):
    topic, group = "ClusterTopic", "cluster_group"
    sent = v4.produce(topic, 8, prefix="before")  # a new group starts from these (see the new-group test)
    queues = cluster.queue_count(topic)
    assert queues >= 2, f"{topic} has {queues} queue(s): nothing to split"

    a = v4.consumer(topic, group, label="a")
    b = v4.consumer(topic, group, label="b")
    wait_until(
        lambda: len(cluster.consumer_ids(group)) == 2,
        WAIT,
        lambda: f"the broker to list both consumers of {group}, has {cluster.consumer_ids(group)}",
    )
    # Until both have rebalanced, a queue may be served by both. Send rounds (each hits every queue
    # twice) until a round is split: both consumers got part of it, from disjoint queues.
    deadline = time.monotonic() + CONVERGE
    for round_no in itertools.count():
        batch = v4.produce(topic, 2 * queues, prefix=f"round{round_no}")
        sent += batch
        wait_for_all(bodies(batch), a, b)
        mine_a = {m["queue_id"] for m in a.messages if m["body"] in bodies(batch)}
        mine_b = {m["queue_id"] for m in b.messages if m["body"] in bodies(batch)}
        if mine_a and mine_b and not mine_a & mine_b:
            break
        assert time.monotonic() < deadline, f"queues never split: last round a={mine_a} b={mine_b}"
    assert mine_a | mine_b == set(range(queues))
    wait_for_all(bodies(sent), a, b)  # and nothing sent during the rebalance was lost


def test_broadcasting_delivers_every_message_to_each_consumer(v4, cluster):
    topic, group = "BroadcastTopic", "broadcast_group"
    v4.produce(topic, 4, prefix="create")
    queues = cluster.queue_count(topic)

    a = v4.consumer(topic, group, label="a", broadcasting=True)
    b = v4.consumer(topic, group, label="b", broadcasting=True)
    # A new broadcasting consumer has no local offset, so CONSUME_FROM_LAST_OFFSET starts it at the end
    # of each queue, decided at its first rebalance: earlier messages are rightly skipped. Send a probe
    # (one message per queue) until one reaches both consumers whole.
    deadline = time.monotonic() + CONVERGE
    for round_no in itertools.count():
        probe = bodies(v4.produce(topic, queues, prefix=f"probe{round_no}"))
        if poll(lambda probe=probe: probe <= a.bodies() and probe <= b.bodies(), 5.0):
            break
        assert time.monotonic() < deadline, (
            f"no probe reached both consumers:\n{a.describe()}\n{b.describe()}"
        )

    final = bodies(v4.produce(topic, 20, prefix="final"))
    wait_for_all(final, a)
    wait_for_all(final, b)


def test_restarted_consumer_resumes_from_its_committed_offset(v4, cluster):
    topic, group = "ResumeTopic", "resume_group"
    first = v4.produce(topic, 40, prefix="first")
    cluster.queue_count(topic)

    # Stop after 10 of 40: the rest is in flight or not pulled yet. One consume thread consumes each
    # queue in offset order, so a clean shutdown commits, per queue, the offset after the last message
    # consumed (the first offset not consumed), and nothing beyond it was consumed.
    before = v4.consumer(topic, group, label="resumer", count=10, threads=1, timeout=WAIT)
    before.wait_exit()
    consumed: dict[int, set[int]] = {}
    for m in before.messages:
        consumed.setdefault(m["queue_id"], set()).add(m["queue_offset"])
    expected = {
        queue: next(o for o in itertools.count() if o not in offsets) for queue, offsets in consumed.items()
    }
    committed = {}

    def all_committed() -> bool:
        committed.update({queue: cluster.committed_offset(group, topic, queue) for queue in expected})
        return committed == expected

    wait_until(all_committed, 10.0, lambda: f"committed offsets {expected}, the broker has {committed}")
    beyond = {m["body"] for m in before.messages if m["queue_offset"] >= expected[m["queue_id"]]}
    assert not beyond, f"offsets skipped, or consumed past the first unconsumed one: {sorted(beyond)}"

    later = v4.produce(topic, 20, prefix="later")  # sent while no consumer runs
    after = v4.consumer(topic, group, label="resumer")
    wait_for_all(bodies(first + later) - before.bodies(), after)
    after.stop()
    again = after.bodies() & before.bodies()
    assert not again, f"re-delivered although committed: {sorted(again)}"


def test_new_group_starts_from_the_first_message(v4, cluster):
    # CONSUME_FROM_LAST_OFFSET is the client's default. For a group with no offset the broker must answer
    # QUERY_CONSUMER_OFFSET with 0 (the queue still starts at 0), or the client asks GET_MAX_OFFSET and
    # silently skips everything already sent.
    sent = v4.produce("NewGroupTopic", 12, prefix="early")
    cluster.queue_count("NewGroupTopic")
    consumer = v4.consumer("NewGroupTopic", "fresh_group", label="fresh", count=12, timeout=WAIT)
    consumer.wait_exit()
    assert consumer.bodies() == bodies(sent)
    starts: dict[int, int] = {}
    for m in consumer.messages:
        starts[m["queue_id"]] = min(m["queue_offset"], starts.get(m["queue_id"], m["queue_offset"]))
    assert set(starts.values()) == {0}, f"first offset delivered per queue: {starts}"


def stored_records(cluster, topic: str) -> list:
    """Every record of `topic` as the broker stores it (bodies not decompressed)."""
    records = []
    for queue_id in range(cluster.queue_count(topic)):
        fields = {
            "consumerGroup": "compat-inspector", "topic": topic, "queueId": str(queue_id), "queueOffset": "0",
            "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
            "subscription": "*", "subVersion": "0",
        }  # fmt: skip
        reply = remoting_call(cluster.broker, RequestCode.PULL_MESSAGE, fields)
        if reply.code == ResponseCode.SUCCESS:
            records += decode_records(reply.body)
        else:
            assert reply.code == ResponseCode.PULL_NOT_FOUND, reply.remark
    return records


def stored_soon(cluster, topic: str, count: int) -> list:
    """The records of `topic` once all `count` are there to read."""
    return wait_until(
        lambda: (found := stored_records(cluster, topic)) and len(found) >= count and found,
        WAIT,
        lambda: f"{count} records of {topic} on the broker",
    )


def test_bodies_over_4_kib_are_compressed_by_either_client_and_read_by_the_other(v4, cluster):
    pad = 6000  # both clients compress bodies of 4 KiB and more (RocketMQ's compressMsgBodyOverHowmuch)
    sent = v4.produce("BigFromCpp", 6, prefix="cpp", pad=pad)
    stored = stored_soon(cluster, "BigFromCpp", 6)
    assert len(stored) == 6 and all(r.sys_flag & COMPRESSED_FLAG and len(r.body) < pad for r in stored)
    with PullConsumer("big-readers", cluster.namesrv, consume_from="first") as consumer:
        consumer.subscribe("BigFromCpp")
        got: set[str] = set()
        deadline = time.monotonic() + WAIT
        while len(got) < 6 and time.monotonic() < deadline:
            got |= {m.body.decode() for m in consumer.poll(timeout=1.0)}
    assert got == bodies(sent)

    back = {"." * pad + f"sdk-{i}" for i in range(6)}
    with Producer("big-writers", cluster.namesrv) as producer:  # zlib, flagged as RocketMQ 5 does
        for body in sorted(back):
            producer.send(Message("BigFromSdk", body.encode()))
    assert all(r.sys_flag & COMPRESSED_FLAG for r in stored_soon(cluster, "BigFromSdk", 6))
    consumer = v4.consumer("BigFromSdk", "big_cpp_readers", label="reader", count=6, timeout=WAIT)
    consumer.wait_exit()
    assert consumer.bodies() == back
