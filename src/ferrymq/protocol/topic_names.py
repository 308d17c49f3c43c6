"""Which names a topic may have (RocketMQ's TopicValidator): brokers refuse others, and the proxy
answers ILLEGAL_TOPIC for them before asking a broker. Pure."""

from __future__ import annotations

from ferrymq.protocol.trace import TRACE_TOPIC

# The topics brokers keep for themselves (RocketMQ's TopicValidator), one definition each.
AUTO_CREATE_TOPIC = "TBW102"  # the template auto-created topics copy (AUTO_CREATE_TOPIC_KEY_TOPIC)
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # delayed messages: one queue per delay level, queue id = level - 1
BENCHMARK_TOPIC = "BenchmarkTest"
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"  # transactional messages until they end
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"  # the ends of transactions, by half message offset
CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"  # half messages checked too often
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"

MAX_TOPIC_LENGTH = 127
_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789%|-_")


def topic_problem(topic: str) -> str | None:
    """Why `topic` is not a valid topic name, or None."""
    if not topic:
        return "the topic name is empty"
    if len(topic) > MAX_TOPIC_LENGTH + 128 or (len(topic) > MAX_TOPIC_LENGTH and not topic.startswith("%")):
        return f"the topic name is longer than {MAX_TOPIC_LENGTH} characters"
    if not set(topic) <= _TOPIC_CHARS:
        return f"the topic name {topic!r} may only contain letters, digits, %, |, - and _"
    return None


SYSTEM_TOPICS = frozenset({
    AUTO_CREATE_TOPIC, SCHEDULE_TOPIC, BENCHMARK_TOPIC, HALF_TOPIC, TRACE_TOPIC, OP_TOPIC,
    CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC, OFFSET_MOVED_EVENT,
})  # fmt: skip
"""RocketMQ's TopicValidator system topic set (GET_SYSTEM_TOPIC_LIST_FROM_BROKER)."""


def is_system_topic(topic: str) -> bool:
    """A topic brokers make for themselves: the fixed set, and rmq_sys_/RMQ_SYS_ prefixed ones."""
    return topic in SYSTEM_TOPICS or topic.lower().startswith("rmq_sys_")
