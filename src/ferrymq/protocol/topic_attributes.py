"""Topic attributes (RocketMQ 5's `TopicConfig.attributes`) as admin requests change them, and the
one every 5.x front reads: `message.type`, the kind of message a topic takes.

An UPDATE_AND_CREATE_TOPIC request carries changes as text: "+key=value" sets, "-key" removes,
several joined by commas ("+message.type=FIFO,-reserve.time"). Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

MESSAGE_TYPE = "message.type"
NORMAL, FIFO, DELAY, TRANSACTION, MIXED = "NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"
MESSAGE_TYPES = frozenset(("UNSPECIFIED", NORMAL, FIFO, DELAY, TRANSACTION, MIXED))


class AttributeChangeError(ValueError):
    """A change the broker refuses (answered as INVALID_PARAMETER)."""


def altered(current: Mapping[str, str], changes: str | None) -> dict[str, str]:
    """`current` with `changes` applied (RocketMQ's AttributeParser and alterCurrentAttributes)."""
    out = dict(current)
    for item in (changes or "").split(","):
        item = item.strip()
        if not item:
            continue
        if item.startswith("+") and "=" in item:
            key, value = item[1:].split("=", 1)
            if not key:
                raise AttributeChangeError(f"attribute change {item!r} names no key")
            if key == MESSAGE_TYPE and value not in MESSAGE_TYPES:
                raise AttributeChangeError(
                    f"{MESSAGE_TYPE} must be one of {sorted(MESSAGE_TYPES)}, not {value!r}"
                )
            out[key] = value
        elif item.startswith("-") and "=" not in item and len(item) > 1:
            out.pop(item[1:], None)
        else:
            raise AttributeChangeError(f"attribute change {item!r} is neither +key=value nor -key")
    return out


def topic_message_type(attributes: Mapping[str, str]) -> str:
    """The kind of message a topic takes: NORMAL unless its attributes say otherwise."""
    return attributes.get(MESSAGE_TYPE) or NORMAL


def accepts(topic_type: str, kind: str) -> bool:
    """Whether a topic of `topic_type` takes a message of `kind` (RocketMQ's topic message type
    validator: MIXED takes any, others their own kind only)."""
    return kind == topic_type or topic_type == MIXED
