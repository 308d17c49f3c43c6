"""Telemetry, the bidirectional stream each client keeps open: it sends its settings, the proxy
answers with the merged ones. The clients' settings are kept by client id (the `x-mq-client-id`
header) while their stream is open, for the calls that depend on them."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from ferrymq.proxy import settings as proxy_settings
from ferrymq.proxy.status import OK
from ferrymq.proxy.v2 import messaging_pb2 as pb

log = logging.getLogger(__name__)


class Clients:
    """The merged settings of each client with an open Telemetry stream."""

    def __init__(self) -> None:
        self._settings: dict[str, pb.Settings] = {}

    def settings(self, client_id: str, client_type: int) -> pb.Settings:
        """The client's settings, or the defaults of `client_type` if it sent none (yet)."""
        found = self._settings.get(client_id)
        return found if found is not None else proxy_settings.default_for(client_type)

    def __len__(self) -> int:
        return len(self._settings)

    async def serve(
        self, client_id: str, commands: AsyncIterator[pb.TelemetryCommand]
    ) -> AsyncIterator[pb.TelemetryCommand]:
        """Answer each settings command; the client's results of server commands (stack traces,
        message verification) have no command of ours to go with yet and are only logged."""
        try:
            async for command in commands:
                kind = command.WhichOneof("command")
                if kind == "settings":
                    answer = proxy_settings.merged(command.settings)
                    self._settings[client_id] = answer
                    yield pb.TelemetryCommand(status=OK, settings=answer)
                else:
                    log.debug("telemetry from %s: %s ignored", client_id, kind)
        finally:
            self._settings.pop(client_id, None)
