"""Degradation to a standby cluster (as NetEase's Nydus does): when the primary cluster cannot take a
message (no route, every broker unreachable or refusing, or no answer within `standby_after` s), the
producer sends it to a standby (disaster-recovery) cluster instead, so that senders do not see the
outage; `ferrymq relay` moves it back into the primary once the primary is back.

Every diverted message of one primary cluster goes to one topic on the standby, its *standby topic*,
with its own topic in the ORIGIN_TOPIC property: the relay needs no list of topics, its progress is
one consumer group's offsets on that topic, and the standby's own consumers never see the messages.
Body, flag, tags, keys, properties and the message id (UNIQ_KEY) travel with the message; a message
that the primary stored although its send failed (it timed out after the broker wrote it) is also
diverted, and reaches the primary's consumers twice under the same id.

Once the primary failed, sends go straight to the standby; the primary is tried again after a
back-off (1 s, doubling up to 8 s), so its return is noticed within seconds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from ferrymq.client.faults import BrokerAvoidance
from ferrymq.client.instance import ClientError
from ferrymq.client.message import Message, SendResult
from ferrymq.net import RemotingError
from ferrymq.protocol.properties import Prop

if TYPE_CHECKING:
    from ferrymq.client.producer import Producer
    from ferrymq.client.uniq_key import UniqKeyGenerator

log = logging.getLogger(__name__)

ORIGIN_TOPIC = "FERRY_ORIGIN_TOPIC"  # on the standby: the topic of the primary a message belongs to
RELAYED_FROM = "FERRY_RELAYED_FROM"  # on the primary: the standby topic the relay took the message from
_PRIMARY = "primary cluster"


def standby_topic(primary_cluster: str) -> str:
    """The standby topic of a primary cluster (one per primary, so one relay per primary)."""
    return f"STANDBY_{primary_cluster}"


class Degradation:
    """A producer's way to its standby: a producer on the standby cluster, and when to use it."""

    def __init__(
        self, standby: Producer, topic: str, standby_after: float, uniq: UniqKeyGenerator,
        cannot_take: Callable[[Exception], bool],
    ) -> None:  # fmt: skip
        """`cannot_take(error)`: whether the primary's failure means "try elsewhere" (a refusal of
        the message itself, such as an illegal property, would be refused by the standby too)."""
        self.standby = standby
        self.topic = topic
        self.standby_after = standby_after
        self.diverted = 0  # messages sent to the standby
        self._uniq = uniq
        self._cannot_take = cannot_take
        self._primary = BrokerAvoidance(backoff=1.0, max_backoff=8.0)

    async def start(self) -> None:
        await self.standby.start()
        try:  # the standby topic's route now, not when the primary fails
            await self.standby.instance.route(self.topic)
        except ClientError as e:
            log.warning("standby cluster: %s (will try again when a message needs it)", e)

    async def shutdown(self) -> None:
        await self.standby.shutdown()

    async def send(
        self, messages: Sequence[Message], batch: bool,
        to_primary: Callable[[Sequence[Message]], Awaitable[SendResult]],
    ) -> SendResult:  # fmt: skip
        """Send to the primary by `to_primary`; to the standby if the primary cannot take them."""
        messages = [self._with_id(m) for m in messages]  # the same id on whichever cluster stores it
        failure: Exception | None = None
        if self._primary.available(_PRIMARY):
            result, failure = await self._to_primary(messages, to_primary)
            if result is not None:
                return result
        try:
            result = await self._to_standby(messages, batch)
        except (ClientError, RemotingError) as e:
            if failure is None:  # the primary was in back-off: it may be back before the back-off ends
                result, failure = await self._to_primary(messages, to_primary)
                if result is not None:
                    return result
            raise type(e)(f"primary: {failure}; standby: {e}") from e
        self.diverted += len(messages)
        return result

    async def _to_primary(
        self, messages: Sequence[Message], to_primary: Callable[[Sequence[Message]], Awaitable[SendResult]]
    ) -> tuple[SendResult | None, Exception | None]:
        """(its answer, None), or (None, why it cannot take the messages now: it is then avoided)."""
        try:
            async with asyncio.timeout(self.standby_after):
                return await to_primary(messages), None
        except (ClientError, RemotingError, TimeoutError) as e:
            if not self._cannot_take(e):
                raise
            why = str(e) or f"no answer within standby_after, {self.standby_after:g} s"
            if self._primary.available(_PRIMARY):
                log.warning("primary cluster cannot take messages (%s): sending to the standby", why)
            self._primary.failed(_PRIMARY)
            return None, e if str(e) else TimeoutError(why)

    def _with_id(self, message: Message) -> Message:
        if Prop.UNIQ_KEY in message.properties:
            return message
        return dataclasses.replace(
            message, properties={**message.properties, Prop.UNIQ_KEY: self._uniq.next()}
        )

    async def _to_standby(self, messages: Sequence[Message], batch: bool) -> SendResult:
        diverted = [
            dataclasses.replace(m, topic=self.topic, properties={**m.properties, ORIGIN_TOPIC: m.topic})
            for m in messages
        ]
        if batch:
            result = await self.standby.send_batch(diverted)
        else:
            result = await self.standby.send(diverted[0])
        result.to_standby = True
        return result
