"""RabbitMQ's direct reply-to for RPC: a client consumes the pseudo-queue `amq.rabbitmq.reply-to`
(no-ack) and publishes requests with reply_to set to that name; the gateway rewrites it to
`amq.rabbitmq.reply-to.<token>`, and a reply published to that routing key on the default exchange
goes straight to the requesting channel, never stored in a queue. The token names the gateway that
holds the channel: a reply arriving at another gateway travels through the holder's reply topic."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
from typing import TYPE_CHECKING, Protocol

from ferrymq.messaging.api import MessagingError
from ferrymq.protocol.amqp.basic_properties import BasicProperties, encode_basic_properties
from ferrymq.protocol.amqp.mapping import from_rocketmq, to_rocketmq
from ferrymq.protocol.caller import CALLER
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.message_ext import decode_records
from ferrymq.protocol.pop import INIT_MODE_MIN, POP_CK

if TYPE_CHECKING:
    from ferrymq.amqp.gateway import Gateway

log = logging.getLogger(__name__)
REPLY_TO = "amq.rabbitmq.reply-to"
REPLY_PREFIX = REPLY_TO + "."
TOKEN = "AMQP_REPLY_TOKEN"  # RocketMQ property of a reply relayed between gateways
INBOX_GROUP = "AMQP_GID-reply-to"
POLL_MS = 5_000


class ReplyReceiver(Protocol):
    def deliver_reply(
        self, consumer_tag: str, exchange: str, routing_key: str, properties: bytes, body: bytes
    ) -> None: ...


def reply_topic(gateway_id: str) -> str:
    return f"AMQP-reply-to-{gateway_id}"


class DirectReplies:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self._receivers: dict[str, tuple[ReplyReceiver, str]] = {}  # token: (channel, consumer tag)
        self._inbox: asyncio.Task | None = None

    async def register(self, receiver: ReplyReceiver, consumer_tag: str) -> str:
        """A reply consumer: the token its requests' reply_to will carry."""
        token = f"{self.gateway.id}.{secrets.token_urlsafe(18)}"
        self._receivers[token] = (receiver, consumer_tag)
        if self._inbox is None:
            await self.gateway.service.create_topic(reply_topic(self.gateway.id), 1)
            self._inbox = self.gateway.tasks.spawn(self._relayed(), "direct reply-to inbox")
        return token

    def unregister(self, token: str) -> None:
        self._receivers.pop(token, None)

    @staticmethod
    def rewritten(decoded: BasicProperties, token: str) -> bytes:
        """The request's properties with reply_to naming the reply consumer."""
        return encode_basic_properties(dataclasses.replace(decoded, reply_to=REPLY_PREFIX + token))

    async def reply(self, routing_key: str, properties: bytes, body: bytes) -> bool:
        """Deliver a reply published to `routing_key` (amq.rabbitmq.reply-to.<token>); False if its
        consumer is gone (the reply is dropped, or returned when mandatory)."""
        token = routing_key[len(REPLY_PREFIX) :]
        if self._hand(token, routing_key, properties, body):
            return True
        holder = token.split(".", 1)[0]
        if holder == self.gateway.id:
            return False
        relayed = to_rocketmq("", routing_key, properties) + f"{TOKEN}\x01{token}\x02"
        try:
            sent = await self.gateway.service.send(reply_topic(holder), body, relayed)
        except MessagingError:
            return False
        return sent.stored

    def _hand(self, token: str, routing_key: str, properties: bytes, body: bytes) -> bool:
        found = self._receivers.get(token)
        if found is None:
            return False
        receiver, consumer_tag = found
        receiver.deliver_reply(consumer_tag, "", routing_key, properties, body)
        return True

    async def _relayed(self) -> None:
        """Replies other gateways relayed to this one's reply topic."""
        CALLER.set(None)  # shared by every connection: no one user's quotas apply (the task copied
        # the context of the connection that started it)
        service, topic = self.gateway.service, reply_topic(self.gateway.id)
        while True:
            try:
                outcome = await service.pop(
                    INBOX_GROUP, topic, 32, 60_000, poll_ms=POLL_MS, init_mode=INIT_MODE_MIN
                )
            except MessagingError as e:
                log.warning("direct reply-to inbox: %s", e)
                await asyncio.sleep(1.0)
                continue
            if outcome.code != ResponseCode.SUCCESS:
                continue
            messages = decode_records(outcome.body)
            for message in messages:
                _, routing_key, properties = from_rocketmq(message.properties)
                self._hand(message.properties.get(TOKEN, ""), routing_key, properties, message.body)
            await service.ack_batch(INBOX_GROUP, topic, [m.properties[POP_CK] for m in messages])
