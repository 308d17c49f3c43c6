"""The NameServer's settings read and changed by admin tools: GET_NAMESRV_CONFIG and
UPDATE_NAMESRV_CONFIG, as Java Properties text with RocketMQ's camelCase names.

An update changes the running NameServer's config object (expiry times and the like are read
where they are used); the listen address and the KV file are fixed at start and refused.
Changes last until restart."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.net import Connection, RemotingServer
from ferrymq.protocol.admin_bodies import decode_properties, encode_properties
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.remoting import RemotingCommand, RemotingProtocolError
from ferrymq.settings import ReadOnlySetting, SettingsError, apply_settings, settings_view

log = logging.getLogger(__name__)

FIXED_AT_START = frozenset({"listenHost", "listenPort", "kvConfigPath"})


class NamesrvConfigProcessor:
    def __init__(self, config: NamesrvConfig, changed: Callable[[], None]) -> None:
        """`changed`: apply the new settings where they were copied at start."""
        self.config = config
        self._changed = changed

    def register_with(self, server: RemotingServer) -> None:
        server.register(RequestCode.GET_NAMESRV_CONFIG, self.get_config)
        server.register(RequestCode.UPDATE_NAMESRV_CONFIG, self.update_config)

    async def get_config(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, body=encode_properties(settings_view(self.config)))

    async def update_config(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        try:
            updates = decode_properties(request.body or b"")
            if not updates:
                raise RemotingProtocolError("no key=value settings in the body")
            apply_settings(updates, self.config, read_only=FIXED_AT_START)
        except SettingsError as e:
            code = (
                ResponseCode.NO_PERMISSION
                if isinstance(e, ReadOnlySetting)
                else ResponseCode.INVALID_PARAMETER
            )
            return request.make_response(code, str(e))
        except RemotingProtocolError as e:
            return request.make_response(ResponseCode.INVALID_PARAMETER, str(e))
        log.info("NameServer settings changed by %s: %s", connection.remote_address, updates)
        self._changed()
        return request.make_response(ResponseCode.SUCCESS)
