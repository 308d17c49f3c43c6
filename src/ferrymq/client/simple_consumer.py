"""SimpleConsumer: RocketMQ 5's pop consumption, with the broker keeping the state.

`receive` pops messages from any queue of a subscribed topic (long polling up to `await_duration`);
each message stays invisible to the group for `invisible_duration` and carries its receipt
handle. `ack` settles it, `change_invisible_duration` buys more time (and replaces the handle);
a message neither acked nor extended comes back with `delivery_attempt` raised, and after the
group's `retry_max_times` goes to its dead-letter queue. No rebalancing, no local offsets: any
number of SimpleConsumers of a group share its messages.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time

from ferrymq.client import notices, pop_calls
from ferrymq.client.instance import ClientError, ClientInstance, TLSOption
from ferrymq.client.message import MessageExt, MessageQueue
from ferrymq.client.selector import MessageSelector, check_on_brokers
from ferrymq.protocol.bodies import ConsumerData
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.message_ext import CompressedBodyError, decode_records, decompress_body
from ferrymq.protocol.pop import INIT_MODE_MAX, POP_CK

_NOT_FOUND = (ResponseCode.POLLING_TIMEOUT, ResponseCode.PULL_NOT_FOUND, ResponseCode.POLLING_FULL)

log = logging.getLogger(__name__)


class ReceivedMessage:
    """A popped message: the MessageExt (its attributes read through) plus what acking needs."""

    __slots__ = ("broker_addr", "message", "receipt_handle")

    def __init__(self, message: MessageExt, receipt_handle: str, broker_addr: str) -> None:
        self.message = message
        self.receipt_handle = receipt_handle
        self.broker_addr = broker_addr

    @property
    def delivery_attempt(self) -> int:
        """1 the first time, raised by each redelivery (RocketMQ 5: reconsume times + 1)."""
        return self.message.reconsume_times + 1

    def __getattr__(self, name: str):
        return getattr(self.message, name)

    def __repr__(self) -> str:
        return (
            f"ReceivedMessage({self.message.topic}, attempt={self.delivery_attempt}, {self.receipt_handle!r})"
        )


class SimpleConsumer:
    def __init__(
        self,
        group: str,
        namesrv_addr: str,
        *,
        subscriptions: dict[str, str | MessageSelector] | None = None,
        await_duration: float = 20.0,
        instance: ClientInstance | None = None,
        tls: TLSOption = False,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        self.group = group
        self.instance = instance or ClientInstance(
            namesrv_addr, tls=tls, access_key=access_key, secret_key=secret_key
        )
        self._own_instance = instance is None
        self.await_duration = await_duration
        self.subscriptions = {t: MessageSelector.of(e) for t, e in (subscriptions or {}).items()}
        self._turn = itertools.count()

    async def start(self) -> None:
        if self._own_instance:
            await self.instance.start()
        for topic, selector in self.subscriptions.items():
            await self._route(topic)
            await check_on_brokers(self.instance, self.group, topic, selector)
        # Brokers tell every member of a group when it changes; a pop group has nothing to rebalance.
        notices.listen(self.instance, self.group, notices.GroupListener(lambda: None, self._offsets_reset))
        self.instance.consumers[self.group] = self._consumer_data
        await self.instance.heartbeat_all()

    @staticmethod
    async def _offsets_reset(offsets: dict[MessageQueue, int]) -> None:
        """An admin moved the group's offsets: the broker keeps a pop group's, nothing to do here."""

    async def close(self) -> None:
        notices.forget(self.instance, self.group)
        self.instance.consumers.pop(self.group, None)
        if self._own_instance:
            await self.instance.close()

    shutdown = close  # the name the other SDK classes use

    async def __aenter__(self) -> SimpleConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        selector = MessageSelector.of(expression)
        await self._route(topic)
        await check_on_brokers(self.instance, self.group, topic, selector)
        self.subscriptions[topic] = selector

    def unsubscribe(self, topic: str) -> None:
        self.subscriptions.pop(topic, None)

    def _consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group, consume_type="CONSUME_POP", message_model="CLUSTERING",
            consume_from_where="CONSUME_FROM_LAST_OFFSET",
            subscription_data_set=[s.subscription(t, 0) for t, s in self.subscriptions.items()],
        )  # fmt: skip

    async def _route(self, topic: str):
        """The topic's route; a topic just created reaches the NameServers a moment later."""
        deadline = time.monotonic() + self.instance.request_timeout
        while (route := await self.instance.existing_route(topic)) is None:
            if time.monotonic() > deadline:
                raise ClientError(f"topic {topic} does not exist: no NameServer has a route for it")
            await asyncio.sleep(0.05)
        return route

    async def receive(
        self, max_messages: int = 16, invisible_duration: float = 30.0
    ) -> list[ReceivedMessage]:
        """Up to `max_messages` (1..32) from one broker of a subscribed topic, taken in turn;
        waits up to `await_duration` s for one to arrive. Each stays invisible to the group for
        `invisible_duration` s unless acked or extended."""
        if not self.subscriptions:
            raise ClientError("no subscription: pass subscriptions= or call subscribe() first")
        turn = next(self._turn)
        topics = sorted(self.subscriptions)
        topic = topics[turn % len(topics)]
        route = await self._route(topic)
        brokers = sorted(route.masters.items())
        if not brokers:
            raise ClientError(f"topic {topic} has no master broker now")
        _, addr = brokers[(turn // len(topics)) % len(brokers)]
        selector = self.subscriptions[topic]
        try:
            response = await pop_calls.pop(
                self.instance, addr, self.group, topic, max_messages=max_messages,
                invisible_ms=int(invisible_duration * 1000), poll_ms=int(self.await_duration * 1000),
                expression_type=selector.type, expression=selector.expression, init_mode=INIT_MODE_MAX,
            )  # fmt: skip
        except ClientError:
            await self.instance.refresh_route(topic)
            raise
        if response.code in _NOT_FOUND:
            return []
        if response.code != ResponseCode.SUCCESS:
            raise ClientError(f"receive from {addr} refused: {response.remark}")
        tags = selector.tags()
        out = []
        for m in decode_records(response.body):
            handle = m.properties.get(POP_CK)
            if handle is None:
                raise ClientError(f"broker {addr} sent a popped message without a receipt handle")
            try:
                decompress_body(m)
            except CompressedBodyError as e:  # left unacked: it comes back, then goes to the DLQ
                log.warning("%s: not handed out", e)
                continue
            received = ReceivedMessage(m, handle, addr)
            if tags is not None and m.tags not in tags:  # a tag hash collision: settle it here
                await self.ack(received)
                continue
            out.append(received)
        return out

    async def ack(self, message: ReceivedMessage) -> None:
        """Settle a received message for good; ClientError if its handle is no longer current
        (it was redelivered meanwhile, or its invisible time was changed: use the newer handle)."""
        handle, addr = message.receipt_handle, message.broker_addr
        response = await pop_calls.ack(self.instance, self.group, message.topic, handle, fallback_addr=addr)
        if response.code != ResponseCode.SUCCESS:
            raise ClientError(f"ack refused: {response.remark}")

    async def change_invisible_duration(self, message: ReceivedMessage, duration: float) -> str:
        """Keep the message invisible for `duration` s from now; sets and returns its new handle."""
        response, renewed = await pop_calls.change_invisible(
            self.instance, self.group, message.topic, message.receipt_handle, int(duration * 1000),
            fallback_addr=message.broker_addr,
        )  # fmt: skip
        if renewed is None:
            raise ClientError(f"change of invisible duration refused: {response.remark}")
        message.receipt_handle = renewed
        return renewed
