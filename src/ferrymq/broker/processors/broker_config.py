"""A broker's settings read and changed by admin tools: GET_BROKER_CONFIG and UPDATE_BROKER_CONFIG.

Settings travel as Java Properties text with RocketMQ's camelCase names (``brokerPermission=6``).
An update changes the running broker's config object, which requests read as they come
(permissions, polling, filters, ...); settings fixed at start (addresses, names, roles, paths)
are refused rather than silently ignored. Changes last until the broker restarts: its TOML file
is the operator's, and is not rewritten."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import msgspec

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.processors.common import error, ok
from ferrymq.net.connection import Connection
from ferrymq.protocol.admin_bodies import decode_properties, encode_properties
from ferrymq.protocol.bodies import DataVersion
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.headers import GetBrokerConfigResponseHeader
from ferrymq.protocol.remoting import RemotingCommand, RemotingProtocolError
from ferrymq.settings import ReadOnlySetting, SettingsError, apply_settings, settings_view

log = logging.getLogger(__name__)

FIXED_AT_START = frozenset({
    "brokerClusterName", "brokerName", "brokerId", "listenHost", "listenPort", "brokerIP1", "brokerIp1",
    "brokerRole", "haListenPort", "enableControllerMode", "controllerAddr", "namesrvAddr",
    "storePathRootDir", "mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue",
    "replicationQosLevel", "replicationQosSemiSyncGap", "enableSlaveActingMaster",
})  # fmt: skip


class BrokerConfigProcessor:
    def __init__(self, config: BrokerConfig, changed: Callable[[], None]) -> None:
        """`changed`: apply what the broker copied at start, and register again."""
        self.config = config
        self._changed = changed
        self.version = DataVersion(timestamp=0, counter=0)

    def register(self, server) -> None:
        server.register(RequestCode.GET_BROKER_CONFIG, self.get_config)
        server.register(RequestCode.UPDATE_BROKER_CONFIG, self.update_config)

    async def get_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetBrokerConfigResponseHeader(version=msgspec.json.encode(self.version).decode())
        return ok(request, header, encode_properties(settings_view(self.config, self.config.store)))

    async def update_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        try:
            updates = decode_properties(request.body or b"")
        except RemotingProtocolError as e:
            return error(request, ResponseCode.INVALID_PARAMETER, str(e))
        if not updates:
            return error(request, ResponseCode.INVALID_PARAMETER, "no key=value settings in the body")
        try:
            apply_settings(updates, self.config, self.config.store, read_only=FIXED_AT_START)
        except SettingsError as e:
            code = (
                ResponseCode.NO_PERMISSION
                if isinstance(e, ReadOnlySetting)
                else ResponseCode.INVALID_PARAMETER
            )
            return error(request, code, str(e))
        self.version = DataVersion(
            self.version.state_version, int(time.time() * 1000), self.version.counter + 1
        )
        log.info("broker settings changed by %s: %s", conn.remote_address, updates)
        self._changed()
        return ok(request)
