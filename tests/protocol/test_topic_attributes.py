"""Topic attribute changes and message types, as pure functions."""

from __future__ import annotations

import pytest

from ferrymq.protocol.topic_attributes import (
    AttributeChangeError,
    accepts,
    altered,
    topic_message_type,
)


def test_changes_set_and_remove_attributes():
    assert altered({}, "+message.type=FIFO") == {"message.type": "FIFO"}
    assert altered({"message.type": "FIFO", "x": "1"}, "-x, +y=2") == {"message.type": "FIFO", "y": "2"}
    assert altered({"a": "1"}, None) == {"a": "1"}
    for bad in ("message.type=FIFO", "+message.type=Fifo", "+=v", "-", "-a=b"):
        with pytest.raises(AttributeChangeError):
            altered({}, bad)


def test_message_types_of_topics():
    assert topic_message_type({}) == "NORMAL" and topic_message_type({"message.type": "DELAY"}) == "DELAY"
    assert accepts("MIXED", "FIFO") and accepts("FIFO", "FIFO")
    assert not accepts("NORMAL", "FIFO") and not accepts("FIFO", "UNSPECIFIED")
