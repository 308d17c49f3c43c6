"""Telemetry, the bidirectional stream each client keeps open: it sends its settings, the proxy
answers with the merged ones (a consumer's after its group's config, looked up on a broker of its
first subscribed topic). No other call depends on a client's settings (a receive carries its
own batch size, invisible time and polling time), so a client that calls before sending them is
served all the same — RocketMQ's proxy once failed such calls."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from ferrymq.messaging.api import MessageService, MessagingError, SubscriptionGroupConfig
from ferrymq.proxy.settings import CONSUMER_TYPES, merged
from ferrymq.proxy.status import OK
from ferrymq.proxy.v2 import messaging_pb2 as pb

log = logging.getLogger(__name__)


async def serve(
    service: MessageService, client_id: str, commands: AsyncIterator[pb.TelemetryCommand]
) -> AsyncIterator[pb.TelemetryCommand]:
    """Answer each settings command; the client's results of server commands (stack traces, message
    verification) answer nothing this proxy sends yet and are only logged."""
    async for command in commands:
        kind = command.WhichOneof("command")
        if kind == "settings":
            group = await _group_of(service, command.settings)
            yield pb.TelemetryCommand(status=OK, settings=merged(command.settings, group))
        else:
            log.debug("telemetry from %s: %s ignored", client_id, kind)


async def _group_of(service: MessageService, settings: pb.Settings) -> SubscriptionGroupConfig | None:
    if settings.client_type not in CONSUMER_TYPES or not settings.subscription.subscriptions:
        return None
    topic = settings.subscription.subscriptions[0].topic.name
    try:
        return await service.consumer_group(settings.subscription.group.name, topic)
    except MessagingError as e:  # the defaults then; the client's calls will tell it what is wrong
        log.info("no group config for %s: %s", settings.subscription.group.name, e)
        return None
