"""Recall handles (RocketMQ 5.3): what a producer gets back for a delayed or timed message, to cancel
it before it is delivered. Version 1 is "v1 <topic> <broker name> <delivery ms> <message id>",
URL-safe base64; the broker cancels by storing a delete marker for "<topic>+<message id>" due at the
same time, which its timer drops together with the message."""

from __future__ import annotations

import base64
import binascii
from typing import NamedTuple

DELETE_KEY = "TIMER_DEL_UNIQKEY"  # the property of a delete marker: the key of the message it cancels
RECALL_TAG = "_RECALL_TAG_"  # the tag RocketMQ gives delete markers
_VERSION = "v1"


class RecallHandle(NamedTuple):
    topic: str
    broker_name: str
    deliver_ms: int
    message_id: str  # the UNIQ_KEY of the message

    def encode(self) -> str:
        raw = " ".join((_VERSION, self.topic, self.broker_name, str(self.deliver_ms), self.message_id))
        return base64.urlsafe_b64encode(raw.encode()).decode()

    @classmethod
    def decode(cls, text: str) -> RecallHandle:
        """ValueError if `text` is not a recall handle."""
        try:
            parts = base64.urlsafe_b64decode(text.encode()).decode().split(" ")
        except (binascii.Error, UnicodeError):
            raise ValueError("recall handle is invalid") from None
        if len(parts) < 5 or parts[0] != _VERSION or not parts[3].isdigit() or not all(parts[1:5]):
            raise ValueError("recall handle is invalid")
        return cls(parts[1], parts[2], int(parts[3]), parts[4])


def delete_key(topic: str, message_id: str) -> str:
    """The key a delete marker names its message by (RocketMQ's TimerMessageStore.buildDeleteKey)."""
    return f"{topic}+{message_id}"
