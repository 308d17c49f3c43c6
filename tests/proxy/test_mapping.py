"""The proxy's pure parts: v2 message <-> stored properties, queue choice for message groups, status
codes, settings merge, long-polling clamp and queue permissions."""

from __future__ import annotations

import gzip
import zlib
from collections import Counter

import pytest

from ferrymq.messaging.api import QueueData, SendOutcome, SubscriptionGroupConfig
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.message_ext import MessageExt
from ferrymq.protocol.pop import POP_CK
from ferrymq.protocol.properties import Prop, decode_properties
from ferrymq.proxy import settings
from ferrymq.proxy.consumer import polling_ms, wanted_tags
from ferrymq.proxy.messages import IllegalMessage, queue_for_group, to_message, to_stored
from ferrymq.proxy.producer import overall, writable_queues
from ferrymq.proxy.routes import permission
from ferrymq.proxy.status import from_response_code, status
from ferrymq.proxy.transactions import half_message, transaction_id
from ferrymq.proxy.v2 import messaging_pb2 as pb


def message(body: bytes = b"hi", **system) -> pb.Message:
    m = pb.Message(body=body)
    m.topic.name = "Orders"
    for key, value in system.items():
        if key == "keys":
            m.system_properties.keys.extend(value)
        else:
            setattr(m.system_properties, key, value)
    return m


def test_system_properties_become_rocketmq_properties():
    m = message(tag="new", keys=["k1", "k2"], message_id="01ABC", message_group="g1")
    m.user_properties["region"] = "eu"
    m.system_properties.delivery_timestamp.FromMilliseconds(1_700_000_000_123)
    body, text = to_stored(m)
    assert body == b"hi"
    assert decode_properties(text) == {
        "region": "eu", Prop.TAGS: "new", Prop.KEYS: "k1 k2", Prop.UNIQ_KEY: "01ABC",
        Prop.SHARDING_KEY: "g1", Prop.TIMER_DELIVER_MS: "1700000000123",
    }  # fmt: skip


def test_a_gzip_body_is_stored_as_its_content():
    for packed in (gzip.compress(b"x" * 1000), zlib.compress(b"x" * 1000)):
        body, _ = to_stored(message(packed, body_encoding=pb.GZIP))
        assert body == b"x" * 1000
    with pytest.raises(IllegalMessage) as bad:
        to_stored(message(b"not gzip", body_encoding=pb.GZIP))
    assert bad.value.code == pb.MESSAGE_CORRUPTED


@pytest.mark.parametrize("key", [Prop.TAGS, Prop.UNIQ_KEY, POP_CK, ""])
def test_a_user_property_may_not_take_a_system_name(key):
    m = message()
    m.user_properties[key] = "x"
    with pytest.raises(IllegalMessage) as bad:
        to_stored(m)
    assert bad.value.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY


@pytest.mark.parametrize("tag", ["", "  ", "a|b"])
def test_a_blank_tag_or_one_with_a_bar_is_refused(tag):
    with pytest.raises(IllegalMessage) as bad:
        to_stored(message(tag=tag))
    assert bad.value.code == pb.ILLEGAL_MESSAGE_TAG


def stored(properties: dict[str, str], reconsume_times: int = 0, topic: str = "Orders") -> MessageExt:
    return MessageExt(
        topic, b"body", properties, queue_id=1, queue_offset=7, born_timestamp=1000, store_timestamp=2000,
        born_host=("10.0.0.1", 5000), store_host=("10.0.0.2", 10911), reconsume_times=reconsume_times,
    )  # fmt: skip


def test_a_stored_message_is_delivered_with_its_system_properties():
    record = stored(
        {Prop.TAGS: "new", Prop.KEYS: "k1 k2", Prop.UNIQ_KEY: "01ABC", "region": "eu", POP_CK: "h"}
    )
    m = to_message(record, "h")
    sp = m.system_properties
    assert (m.topic.name, m.body, dict(m.user_properties)) == ("Orders", b"body", {"region": "eu"})
    assert (sp.tag, list(sp.keys), sp.message_id, sp.receipt_handle) == ("new", ["k1", "k2"], "01ABC", "h")
    assert (sp.message_type, sp.queue_id, sp.queue_offset, sp.delivery_attempt) == (pb.NORMAL, 1, 7, 1)
    assert sp.body_digest.type == pb.MD5
    assert sp.body_digest.checksum == "841A2D689AD86BD1611447453C22C6FC"  # MD5 of b"body", upper-case hex
    assert sp.born_timestamp.ToMilliseconds() == 1000 and sp.store_timestamp.ToMilliseconds() == 2000
    assert (sp.born_host, sp.store_host) == ("10.0.0.1", "10.0.0.2:10911")


def test_a_redelivered_message_keeps_its_topic_and_counts_its_attempts():
    record = stored({Prop.RETRY_TOPIC: "Orders", Prop.UNIQ_KEY: "01ABC"}, 2, "%RETRY%G_Orders")
    m = to_message(record)
    assert (m.topic.name, m.system_properties.delivery_attempt) == ("Orders", 3)
    assert not m.user_properties and not m.system_properties.HasField("receipt_handle")


def test_message_types_are_told_by_their_properties():
    fifo = to_message(stored({Prop.SHARDING_KEY: "g1"})).system_properties
    assert (fifo.message_type, fifo.message_group) == (pb.FIFO, "g1")
    delay = to_message(stored({Prop.TIMER_DELIVER_MS: "5000"})).system_properties
    assert (delay.message_type, delay.delivery_timestamp.ToMilliseconds()) == (pb.DELAY, 5000)
    assert to_message(stored({Prop.TRAN_MSG: "true"})).system_properties.message_type == pb.TRANSACTION


def test_a_message_group_keeps_one_queue_and_groups_spread():
    assert {queue_for_group("order-42", 8) for _ in range(3)} == {queue_for_group("order-42", 8)}
    spread = Counter(queue_for_group(f"order-{i}", 8) for i in range(800))
    assert set(spread) == set(range(8)) and min(spread.values()) > 50


def test_writable_queues_are_in_a_stable_order():
    datas = [QueueData("broker-b", 2, 2, 6), QueueData("broker-a", 1, 1, 6), QueueData("broker-c", 4, 4, 4)]
    queues = writable_queues("T", datas)
    assert [(q.broker_name, q.queue_id) for q in queues] == [
        ("broker-a", 0),
        ("broker-b", 0),
        ("broker-b", 1),
    ]


@pytest.mark.parametrize(
    "code, v2",
    [
        (ResponseCode.SUCCESS, pb.OK),
        (ResponseCode.TOPIC_NOT_EXIST, pb.TOPIC_NOT_FOUND),
        (ResponseCode.NO_PERMISSION, pb.FORBIDDEN),
        (ResponseCode.FLUSH_DISK_TIMEOUT, pb.MASTER_PERSISTENCE_TIMEOUT),
        (ResponseCode.FLUSH_SLAVE_TIMEOUT, pb.SLAVE_PERSISTENCE_TIMEOUT),
        (ResponseCode.SLAVE_NOT_AVAILABLE, pb.HA_NOT_AVAILABLE),
        (ResponseCode.SYSTEM_BUSY, pb.TOO_MANY_REQUESTS),
        (ResponseCode.POLLING_TIMEOUT, pb.MESSAGE_NOT_FOUND),
        (ResponseCode.SUBSCRIPTION_PARSE_FAILED, pb.ILLEGAL_FILTER_EXPRESSION),
        (ResponseCode.SYSTEM_ERROR, pb.INTERNAL_SERVER_ERROR),
        (None, pb.INTERNAL_SERVER_ERROR),
    ],
)
def test_response_codes_become_v2_codes(code, v2):
    result = from_response_code(code, "why")
    assert result.code == v2
    assert result.message == ("OK" if v2 == pb.OK else "why")


def test_a_call_with_entries_answers_their_common_status_or_multiple_results():
    ok = pb.SendResultEntry(status=status(pb.OK, "OK"))
    missing = pb.SendResultEntry(status=status(pb.TOPIC_NOT_FOUND, "no"))
    assert overall([ok, ok]).code == pb.OK
    assert overall([missing]).code == pb.TOPIC_NOT_FOUND
    assert overall([ok, missing]).code == pb.MULTIPLE_RESULTS


def test_consumers_get_batch_size_long_polling_and_a_customized_backoff():
    client = pb.Settings(client_type=pb.SIMPLE_CONSUMER)
    client.subscription.group.name = "G"
    client.subscription.subscriptions.add().topic.name = "Orders"
    client.request_timeout.FromSeconds(3)
    client.metric.on = True
    out = settings.merged(client)
    sub = out.subscription
    assert (sub.group.name, [s.topic.name for s in sub.subscriptions]) == ("G", ["Orders"])
    assert (sub.receive_batch_size, sub.long_polling_timeout.ToSeconds(), sub.fifo) == (32, 20, False)
    policy = out.backoff_policy
    assert policy.max_attempts == 17 and policy.WhichOneof("strategy") == "customized_backoff"
    ladder = [d.ToSeconds() for d in policy.customized_backoff.next]
    assert ladder[0] == 1 and ladder[-1] == 7200 and ladder == sorted(ladder)
    assert out.request_timeout.ToSeconds() == 3 and not out.metric.on


def test_producers_get_a_body_limit_and_an_exponential_backoff():
    client = pb.Settings(client_type=pb.PRODUCER)
    client.publishing.topics.add().name = "Orders"
    out = settings.merged(client)
    assert [t.name for t in out.publishing.topics] == ["Orders"]
    assert (out.publishing.max_body_size, out.publishing.validate_message_type) == (4 << 20, True)
    assert settings.merged(client, max_body_size=256 << 10).publishing.max_body_size == 256 << 10
    assert out.backoff_policy.max_attempts == 3
    assert out.backoff_policy.WhichOneof("strategy") == "exponential_backoff"


@pytest.mark.parametrize(
    "requested_ms, remaining_s, expected",
    [
        (None, None, 20_000),
        (1_000, None, 5_000),
        (60_000, None, 20_000),
        (15_000, 23.0, 15_000),
        (20_000, 12.0, 11_500),
        (20_000, 5.0, None),
    ],
)
def test_long_polling_is_clamped_and_cut_to_the_deadline(requested_ms, remaining_s, expected):
    assert polling_ms(requested_ms, remaining_s) == expected


def test_queue_permissions_follow_read_and_write_queue_counts():
    data = QueueData("b", read_queue_nums=2, write_queue_nums=3, perm=6)
    assert [permission(i, data) for i in range(3)] == [pb.READ_WRITE, pb.READ_WRITE, pb.WRITE]
    assert permission(0, QueueData("b", 1, 1, 4)) == pb.READ
    assert permission(0, QueueData("b", 1, 1, 0)) == pb.NONE


def test_a_half_message_carries_its_producer_group_and_check_immunity():
    m = message(message_type=pb.TRANSACTION)
    m.system_properties.orphaned_transaction_recovery_duration.FromSeconds(30)
    _, text = to_stored(m)
    props = decode_properties(text)
    assert (props[Prop.TRAN_MSG], props[Prop.PGROUP], props["CHECK_IMMUNITY_TIME_IN_SECONDS"]) == (
        "true", "Orders", "30",
    )  # fmt: skip


def test_a_transaction_id_names_its_half_message():
    sent = SendOutcome(0, None, "broker-a", 3, 42, "7F00000100002A9F0000000000001234")
    found = half_message(transaction_id(sent))
    assert found is not None
    assert (found.broker_name, found.queue_id, found.queue_offset, found.msg_id) == (
        "broker-a", 3, 42, "7F00000100002A9F0000000000001234",
    )  # fmt: skip
    for bad in ("", "broker-a 3 42", "broker-a x 42 id", " 3 42 id", "b 3 -1 id"):
        assert half_message(bad) is None, bad


@pytest.mark.parametrize(
    "kind, text, tags",
    [
        (pb.TAG, "Aa", {"Aa"}),
        (pb.TAG, "Aa || BB ||", {"Aa", "BB"}),
        (pb.TAG, "*", None),
        (pb.TAG, "", None),
        (pb.FILTER_TYPE_UNSPECIFIED, "x", {"x"}),
        (pb.SQL, "a > 1", None),
    ],
)
def test_a_tag_filter_names_the_tags_the_proxy_checks_exactly(kind, text, tags):
    found = wanted_tags(pb.FilterExpression(type=kind, expression=text))
    assert found == (None if tags is None else frozenset(tags))


def test_a_consumer_of_an_orderly_group_is_told_fifo_and_its_attempts():
    client = pb.Settings(client_type=pb.PUSH_CONSUMER)
    group = SubscriptionGroupConfig("G", consume_message_orderly=True, retry_max_times=1)
    out = settings.merged(client, group)
    assert out.subscription.fifo and out.backoff_policy.max_attempts == 2
    assert not settings.merged(client, SubscriptionGroupConfig("G")).subscription.fifo
