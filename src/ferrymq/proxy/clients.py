"""The gRPC clients alive on this proxy: each one's Telemetry streams (where server commands go)
and its membership as the brokers see it. As RocketMQ's proxy does, the proxy heartbeats for a
client: once its settings say its groups (a producer's group per topic it publishes, as sends
through the proxy name it; a consumer's group with its subscriptions), then every `keepalive_s`
while a stream lives, and it unregisters the client on NotifyClientTermination or when its last
stream ends."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from ferrymq.messaging.api import ClientRegistration, MessageService, MessagingError
from ferrymq.net.tasks import BackgroundTasks
from ferrymq.protocol.bodies import ConsumerData, SubscriptionData
from ferrymq.proxy.settings import CONSUMER_TYPES
from ferrymq.proxy.v2 import messaging_pb2 as pb

log = logging.getLogger(__name__)

KEEPALIVE_S = 20.0  # well within the brokers' channel expiry (channelExpiredTimeout, 120 s)
_EXPRESSION_TYPES = {pb.SQL: "SQL92"}
# what a 5.x consumer is to a broker: pushed to (push) or pulling itself (simple, pull), clustered
_CONSUME_TYPES = {pb.PUSH_CONSUMER: "CONSUME_PASSIVELY"}


def registration(client_id: str, settings: pb.Settings) -> ClientRegistration:
    """The groups a client's settings put it in."""
    if settings.client_type == pb.PRODUCER:
        topics = tuple(sorted({t.name for t in settings.publishing.topics if t.name}))
        return ClientRegistration(client_id, producer_groups=topics, topics=topics)
    if settings.client_type in CONSUMER_TYPES and settings.subscription.group.name:
        subscriptions = [_subscription(s) for s in settings.subscription.subscriptions if s.topic.name]
        consumer = ConsumerData(
            group_name=settings.subscription.group.name,
            consume_type=_CONSUME_TYPES.get(settings.client_type, "CONSUME_ACTIVELY"),
            message_model="CLUSTERING", consume_from_where="CONSUME_FROM_LAST_OFFSET",
            subscription_data_set=subscriptions,
        )  # fmt: skip
        return ClientRegistration(
            client_id, consumers=(consumer,), topics=tuple(sorted({s.topic for s in subscriptions}))
        )
    return ClientRegistration(client_id)


def _subscription(entry: pb.SubscriptionEntry) -> SubscriptionData:
    expression = entry.expression.expression or "*"
    kind = _EXPRESSION_TYPES.get(entry.expression.type, "TAG")
    tags = [] if kind != "TAG" else sorted({t.strip() for t in expression.split("||")} - {"", "*"})
    return SubscriptionData(
        topic=entry.topic.name, sub_string=expression, tags_set=tags, expression_type=kind
    )


@dataclass
class LiveClient:
    client_id: str
    registration: ClientRegistration
    streams: list[asyncio.Queue[pb.TelemetryCommand | None]] = field(default_factory=list)

    def push(self, command: pb.TelemetryCommand) -> bool:
        """Send `command` down one of the client's streams; False if it has none."""
        if not self.streams:
            return False
        self.streams[-1].put_nowait(command)  # the newest: an older one may be a dead connection's
        return True


class LiveClients:
    def __init__(self, service: MessageService, *, keepalive_s: float = KEEPALIVE_S) -> None:
        self.service = service
        self.keepalive_s = keepalive_s
        self._clients: dict[str, LiveClient] = {}
        self._tasks = BackgroundTasks("proxy clients")
        self._closed = False

    def __len__(self) -> int:
        return len(self._clients)

    def get(self, client_id: str) -> LiveClient | None:
        return self._clients.get(client_id)

    def producers(self, group: str) -> list[LiveClient]:
        """The live clients of producer group `group` that have a stream to be asked on."""
        return [c for c in self._clients.values() if group in c.registration.producer_groups and c.streams]

    def open(self, client_id: str) -> asyncio.Queue[pb.TelemetryCommand | None]:
        """A new Telemetry stream of `client_id`: the queue of commands to send down it."""
        client = self._clients.get(client_id)
        if client is None:
            client = self._clients[client_id] = LiveClient(client_id, ClientRegistration(client_id))
        outbox: asyncio.Queue[pb.TelemetryCommand | None] = asyncio.Queue()
        client.streams.append(outbox)
        return outbox

    async def settle(self, client_id: str, settings: pb.Settings) -> None:
        """The client said its settings: register it in the groups they name."""
        client = self._clients.get(client_id)
        if client is None:
            return
        before, client.registration = client.registration, registration(client_id, settings)
        if before.producer_groups or before.consumers:
            dropped = ClientRegistration(
                client_id, tuple(set(before.producer_groups) - set(client.registration.producer_groups)),
                tuple(c for c in before.consumers if c not in client.registration.consumers), before.topics,
            )  # fmt: skip
            await self._unregister(dropped)
        await self._register(client.registration)

    def stream_ended(
        self, client_id: str, outbox: asyncio.Queue[pb.TelemetryCommand | None]
    ) -> asyncio.Task[None] | None:
        """A stream of the client ended; with its last one the client is gone (see `forget`)."""
        client = self._clients.get(client_id)
        if client is None:
            return None
        if outbox in client.streams:
            client.streams.remove(outbox)
        return None if client.streams else self.forget(client_id)

    def forget(self, client_id: str) -> asyncio.Task[None] | None:
        """The client is gone (NotifyClientTermination, or its streams ended): the brokers forget
        it too, in a task of this registry (a closing stream's own task may be cancelled), which
        a caller may wait for."""
        client = self._clients.pop(client_id, None)
        if client is None or not (client.registration.producer_groups or client.registration.consumers):
            return None
        if self._closed:  # the proxy is stopping: the brokers expire the client in time
            return None
        return self._tasks.spawn(self._unregister(client.registration), f"unregister {client_id}")

    async def run(self) -> None:
        """Heartbeat every live client's groups every `keepalive_s`, until cancelled."""
        while True:
            await asyncio.sleep(self.keepalive_s)
            for client in list(self._clients.values()):
                await self._register(client.registration)

    async def close(self) -> None:
        """Stop the unregistrations under way (the proxy is stopping)."""
        self._closed = True
        await self._tasks.close()

    async def _register(self, client: ClientRegistration) -> None:
        if not (client.producer_groups or client.consumers):
            return
        try:
            await self.service.register_client(client)
        except MessagingError as e:  # the next keepalive tries again
            log.warning("cannot register client %s with the brokers: %s", client.client_id, e)

    async def _unregister(self, client: ClientRegistration) -> None:
        if not (client.producer_groups or client.consumers):
            return
        try:
            await self.service.unregister_client(client)
        except MessagingError as e:  # the brokers expire it after their channel timeout
            log.warning("cannot unregister client %s from the brokers: %s", client.client_id, e)
