"""Dropping messages a consumer has already consumed, by msg id (an idempotent consumer's memory).

RocketMQ delivers at least once: a producer's retry, a rebalance, or a Spark write replayed after a
failure (which resends the same UNIQ_KEYs) can deliver a message twice. RocketMQ leaves dropping
repeats to the application; `PushConsumer(dedupe_window=N)` does it for the last N msg ids consumed.
An id is claimed when its message goes to the listener, so two copies consumed at once are not both
passed on, and released if the listener fails, so the redelivery of a failed message still comes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from ferrymq.protocol.message_ext import MessageExt


class SeenIds:
    """The msg ids of the last `capacity` messages consumed (or being consumed), oldest forgotten first."""

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"a dedupe window holds at least one msg id, not {capacity}")
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()
        self.dropped = 0  # repeats dropped so far

    def claim(self, messages: Iterable[MessageExt]) -> list[MessageExt]:
        """The messages whose ids are new (each id once), now remembered; the rest are repeats."""
        ids, fresh = self._ids, []
        for m in messages:
            key = m.msg_id
            if key in ids:
                self.dropped += 1
                continue
            ids[key] = None
            fresh.append(m)
        while len(ids) > self.capacity:
            ids.popitem(last=False)
        return fresh

    def release(self, messages: Iterable[MessageExt]) -> None:
        """Forget the ids of messages the listener did not consume: their redelivery must pass."""
        for m in messages:
            self._ids.pop(m.msg_id, None)
