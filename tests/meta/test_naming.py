"""The RocketMQ topic and group of each AMQP queue."""

from hypothesis import given
from hypothesis import strategies as st

from ferrymq.meta.naming import MAX_GROUP_LENGTH, queue_group, queue_topic
from ferrymq.protocol.topic_names import MAX_TOPIC_LENGTH, topic_problem

names = st.text(min_size=1, max_size=300)


def test_readable_for_plain_names():
    assert queue_topic("/", "orders") == "AMQP-_2f-orders"
    assert queue_group("/", "orders") == "AMQP_GID-_2f-orders"


@given(names, names)
def test_always_valid_rocketmq_names(vhost, queue):
    topic, group = queue_topic(vhost, queue), queue_group(vhost, queue)
    assert topic_problem(topic) is None and len(topic) <= MAX_TOPIC_LENGTH
    assert topic_problem(f"%RETRY%{group}") is None and len(group) <= MAX_GROUP_LENGTH
    assert queue_topic(vhost, queue) == topic  # deterministic


@given(names, names, names, names)
def test_different_queues_get_different_names(v1, q1, v2, q2):
    if (v1, q1) != (v2, q2):
        assert queue_topic(v1, q1) != queue_topic(v2, q2)
        assert queue_group(v1, q1) != queue_group(v2, q2)


def test_separators_cannot_be_forged():
    assert queue_topic("a-b", "c") != queue_topic("a", "b-c")
    assert queue_topic("a_2d", "b") != queue_topic("a-", "b")
    long = "q" * 200
    assert queue_topic("/", long) != queue_topic("/", long + "x")
