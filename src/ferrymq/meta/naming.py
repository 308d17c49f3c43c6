"""The RocketMQ names behind each AMQP queue: a topic and a consumer group, derived from the vhost and
queue name deterministically, injectively and within RocketMQ's rules (letters, digits, '-' and '_';
a topic at most 127 characters; a group short enough that its %RETRY% and %DLQ% topics fit too)."""

from __future__ import annotations

import hashlib

from ferrymq.protocol.topic_names import MAX_TOPIC_LENGTH, topic_problem

MAX_GROUP_LENGTH = MAX_TOPIC_LENGTH - len("%RETRY%")
_PLAIN = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_HASH_SUFFIX = 16  # hex digits of SHA-256 kept when a name is shortened


def _escape(text: str) -> str:
    """Letters and digits as they are, every other UTF-8 byte as '_' + two hex digits: so the result
    never holds '-' (the separator below) nor "__" (the mark of a shortened name)."""
    return "".join(chr(b) if b in _PLAIN else f"_{b:02x}" for b in text.encode())


def _fit(name: str, limit: int) -> str:
    """`name` itself when short enough, else a prefix + "__" + a hash of the whole name."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_HASH_SUFFIX]
    return f"{name[: limit - _HASH_SUFFIX - 2]}__{digest}"


def queue_topic(vhost: str, queue: str) -> str:
    """The topic holding the messages of `queue` in `vhost`, e.g. "AMQP-_2f-orders" for "/"."""
    name = _fit(f"AMQP-{_escape(vhost)}-{_escape(queue)}", MAX_TOPIC_LENGTH)
    assert topic_problem(name) is None, name
    return name


def queue_group(vhost: str, queue: str) -> str:
    """The consumer group that consumes `queue` in `vhost` (pop-style, shared by every gateway)."""
    return _fit(f"AMQP_GID-{_escape(vhost)}-{_escape(queue)}", MAX_GROUP_LENGTH)


def exchange_resource(vhost: str, exchange: str) -> str:
    """The name ACL rules give `exchange` in `vhost` (a topic name no queue's topic can take, e.g.
    "AMQP_EX-_2f-logs"; no such topic exists: exchanges hold no messages)."""
    return _fit(f"AMQP_EX-{_escape(vhost)}-{_escape(exchange)}", MAX_TOPIC_LENGTH)
