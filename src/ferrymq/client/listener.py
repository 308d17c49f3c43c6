"""A push consumer's subscriptions and the call of their listeners, shared by both ways of consuming.

The listener of a batch's topic is called with the consume hooks around it; with a dedupe window,
messages consumed before count as consumed and are not passed on again.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ferrymq.client.dedupe import SeenIds
from ferrymq.client.hooks import ConsumeHook, hooked_consume
from ferrymq.client.message import MessageExt
from ferrymq.client.selector import MessageSelector
from ferrymq.protocol.bodies import SubscriptionData

log = logging.getLogger(__name__)


class ConsumeResult(enum.Enum):
    """What a listener returns (RocketMQ's ConsumeConcurrentlyStatus); True and None count as SUCCESS,
    False as RECONSUME_LATER."""

    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


Listener = Callable[[list[MessageExt]], Any]  # returns (async: resolves to) bool | ConsumeResult | None


@dataclass
class Subscription:
    selector: MessageSelector
    listener: Listener | None  # None for the retry topic: its messages go to their original topic's
    version: int = field(default_factory=lambda: time.time_ns() // 1_000_000)

    def data(self, topic: str) -> SubscriptionData:
        return self.selector.subscription(topic, self.version)


class Listeners:
    """Calls the listener of a batch's topic; True when it consumed the batch."""

    def __init__(
        self,
        group: str,
        subscriptions: dict[str, Subscription],
        hooks: list[ConsumeHook],
        seen: SeenIds | None,
    ) -> None:
        self.group = group
        self.subscriptions = subscriptions
        self.hooks = hooks
        self.seen = seen

    async def __call__(self, messages: list[MessageExt]) -> bool:
        seen = self.seen
        if seen is not None:
            messages = seen.claim(messages)
            if not messages:
                return True
        if self.hooks:
            ok = await hooked_consume(self.hooks, self.group, messages, self._listen(messages))
        else:
            ok = await self._listen(messages)
        if not ok and seen is not None:
            seen.release(messages)
        return ok

    async def _listen(self, messages: list[MessageExt]) -> bool:
        topic = messages[0].topic
        sub = self.subscriptions.get(topic)
        if sub is None or sub.listener is None:
            log.warning("group %s has no listener for topic %s: %d messages skipped", self.group, topic,
                        len(messages))  # fmt: skip
            return True
        listener = sub.listener
        try:
            if inspect.iscoroutinefunction(listener) or inspect.iscoroutinefunction(
                getattr(listener, "__call__", None)  # noqa: B004 - an object with an async __call__
            ):
                result = await listener(messages)
            else:
                result = await asyncio.to_thread(listener, messages)
        except Exception:
            log.exception("listener of group %s failed on %d messages of %s", self.group, len(messages),
                          topic)  # fmt: skip
            return False
        return result is not False and result is not ConsumeResult.RECONSUME_LATER
