"""Telemetry, the bidirectional stream each client keeps open: it sends its settings, the proxy
answers with the merged ones. No other call depends on a client's settings (a receive carries its
own batch size, invisible time and polling time), so a client that calls before sending them is
served all the same — RocketMQ's proxy once failed such calls."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from ferrymq.proxy.settings import merged
from ferrymq.proxy.status import OK
from ferrymq.proxy.v2 import messaging_pb2 as pb

log = logging.getLogger(__name__)


async def serve(
    client_id: str, commands: AsyncIterator[pb.TelemetryCommand]
) -> AsyncIterator[pb.TelemetryCommand]:
    """Answer each settings command; the client's results of server commands (stack traces, message
    verification) answer nothing this proxy sends yet and are only logged."""
    async for command in commands:
        kind = command.WhichOneof("command")
        if kind == "settings":
            yield pb.TelemetryCommand(status=OK, settings=merged(command.settings))
        else:
            log.debug("telemetry from %s: %s ignored", client_id, kind)
