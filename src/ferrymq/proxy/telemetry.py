"""Telemetry, the bidirectional stream each client keeps open: it sends its settings, the proxy
answers with the merged ones (a consumer's after its group's config, looked up on a broker of its
first subscribed topic), and registers the client with the brokers in the groups they name
(clients.py). No other call depends on a client's settings (a receive carries its own batch size,
invisible time and polling time), so a client that calls before sending them is served all the
same — RocketMQ's proxy once failed such calls. The stream also carries the brokers' requests to
the client and its answers (relay.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from ferrymq.messaging.api import MessageService, MessagingError, SubscriptionGroupConfig
from ferrymq.proxy.clients import LiveClients
from ferrymq.proxy.relay import Relay
from ferrymq.proxy.settings import CONSUMER_TYPES, merged
from ferrymq.proxy.status import OK
from ferrymq.proxy.v2 import messaging_pb2 as pb

log = logging.getLogger(__name__)


async def serve(
    service: MessageService, clients: LiveClients, relay: Relay, client_id: str,
    commands: AsyncIterator[pb.TelemetryCommand],
) -> AsyncIterator[pb.TelemetryCommand]:  # fmt: skip
    """What goes down one stream of the client: the answers to its settings and the server's
    commands, until the client ends the stream (or goes away: the caller's cancellation)."""
    outbox = clients.open(client_id)
    reader = asyncio.ensure_future(_read(service, clients, relay, client_id, commands, outbox))
    try:
        while (command := await outbox.get()) is not None:
            yield command
        await reader  # its error, if it had one
    finally:
        reader.cancel()
        clients.stream_ended(client_id, outbox)


async def _read(
    service: MessageService, clients: LiveClients, relay: Relay, client_id: str,
    commands: AsyncIterator[pb.TelemetryCommand], outbox: asyncio.Queue[pb.TelemetryCommand | None],
) -> None:  # fmt: skip
    try:
        async for command in commands:
            kind = command.WhichOneof("command")
            if kind == "settings":
                group = await _group_of(service, command.settings)
                answer = merged(command.settings, group, max_body_size=service.max_body_size)
                outbox.put_nowait(pb.TelemetryCommand(status=OK, settings=answer))
                await clients.settle(client_id, command.settings)
            elif kind in ("thread_stack_trace", "verify_message_result"):
                relay.answered(client_id, command)
            else:
                log.debug("telemetry from %s: %s ignored", client_id, kind)
    finally:
        outbox.put_nowait(None)


async def _group_of(service: MessageService, settings: pb.Settings) -> SubscriptionGroupConfig | None:
    if settings.client_type not in CONSUMER_TYPES or not settings.subscription.subscriptions:
        return None
    topic = settings.subscription.subscriptions[0].topic.name
    try:
        return await service.consumer_group(settings.subscription.group.name, topic)
    except MessagingError as e:  # the defaults then; the client's calls will tell it what is wrong
        log.info("no group config for %s: %s", settings.subscription.group.name, e)
        return None
