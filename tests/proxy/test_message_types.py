"""Per-topic message types through the proxy: QueryRoute answers the types a topic accepts (its
message.type attribute, NORMAL when unset) and a send of another type is refused with
MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, as RocketMQ's proxy answers."""

from __future__ import annotations

import time

import pytest

from ferrymq.protocol.bodies import TopicConfig
from ferrymq.proxy.message_types import sent_type
from ferrymq.proxy.v2 import messaging_pb2 as pb

from ..broker.conftest import make_cluster  # noqa: F401  (fixture)
from .test_rpcs import message, stub  # noqa: F401  (fixture)

V2 = {"NORMAL": pb.NORMAL, "FIFO": pb.FIFO, "DELAY": pb.DELAY, "TRANSACTION": pb.TRANSACTION}
KINDS = list(V2)


def of_kind(kind: str, topic: str) -> pb.Message:
    m = message(topic=topic)
    sp = m.system_properties
    if kind == "FIFO":
        sp.message_group = "g"
    elif kind == "DELAY":
        sp.delivery_timestamp.FromSeconds(int(time.time()) + 3600)
    elif kind == "TRANSACTION":
        sp.message_type = pb.TRANSACTION
    return m


@pytest.fixture
async def typed(stub):  # noqa: F811
    """The stub, with topic Plain (no attribute) and one topic per message type on the broker."""
    broker = stub.cluster.broker
    broker.topics.put(TopicConfig("Plain", 1, 1, 6))
    for kind in KINDS:
        broker.topics.put(TopicConfig(f"Only{kind}", 1, 1, 6, attributes={"message.type": kind}))
    await broker.registrar.register_all()
    return stub


async def accepted(stub, topic: str) -> list[list[int]]:  # noqa: F811
    reply = await stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=topic)))
    assert reply.status.code == pb.OK, reply
    return [list(q.accept_message_types) for q in reply.message_queues]


async def test_routes_answer_the_types_a_topic_accepts(typed):
    assert await accepted(typed, "Plain") == [[pb.NORMAL]]
    for kind, v2 in V2.items():
        assert await accepted(typed, f"Only{kind}") == [[v2]]
    assert await accepted(typed, "Orders") == [[pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]] * 2
    assignment = await typed.QueryAssignment(
        pb.QueryAssignmentRequest(topic=pb.Resource(name="OnlyFIFO"), group=pb.Resource(name="G"))
    )
    assert [list(a.message_queue.accept_message_types) for a in assignment.assignments] == [[pb.FIFO]]


@pytest.mark.parametrize("topic_kind", KINDS)
async def test_a_send_of_another_type_than_its_topic_s_is_refused(typed, topic_kind):
    for kind in KINDS:
        sent = await typed.SendMessage(pb.SendMessageRequest(messages=[of_kind(kind, f"Only{topic_kind}")]))
        expected = pb.OK if kind == topic_kind else pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
        assert sent.status.code == expected, (kind, sent)
        if expected != pb.OK:
            assert topic_kind in sent.status.message and kind in sent.status.message


async def test_a_topic_without_the_attribute_takes_normal_messages_only(typed):
    plain = await typed.SendMessage(pb.SendMessageRequest(messages=[message(topic="Plain")]))
    assert plain.status.code == pb.OK
    fifo = await typed.SendMessage(pb.SendMessageRequest(messages=[of_kind("FIFO", "Plain")]))
    assert fifo.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


def test_a_message_is_of_the_first_kind_its_system_properties_say():
    assert sent_type(of_kind("NORMAL", "T").system_properties) == "NORMAL"
    both = of_kind("DELAY", "T")
    both.system_properties.message_group = "g"
    assert sent_type(both.system_properties) == "DELAY"
    both.system_properties.message_type = pb.TRANSACTION
    assert sent_type(both.system_properties) == "TRANSACTION"
