"""NameServer: the route registry, a remoting server over a RouteTable and a KVConfigStore.

Besides answering requests it forgets brokers on its own: the ones whose connection closes at once,
and the ones that stop re-registering after ``broker_channel_expired_time`` (checked every
``scan_not_active_broker_interval``), the way RocketMQ's NameServer does.
"""

from __future__ import annotations

import asyncio
import logging

from ferrymq.auth.serving import serve_auth
from ferrymq.namesrv.broker_processor import BrokerProcessor
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.config_processor import NamesrvConfigProcessor
from ferrymq.namesrv.kv_config import KVConfigStore
from ferrymq.namesrv.kv_processor import KVConfigProcessor
from ferrymq.namesrv.route_processor import RouteProcessor
from ferrymq.namesrv.route_table import RouteTable
from ferrymq.net import Connection, RemotingServer
from ferrymq.net.tasks import BackgroundTasks

log = logging.getLogger(__name__)


class NameServer:
    def __init__(self, config: NamesrvConfig | None = None) -> None:
        self.config = config = config or NamesrvConfig()
        self.routes = RouteTable(broker_timeout=config.broker_channel_expired_time / 1000)
        self.kv = KVConfigStore(config.kv_config_path)
        self.remoting = RemotingServer(config.listen_host, config.listen_port, tls=config.server_tls())
        BrokerProcessor(self.routes, self.kv).register_with(self.remoting)
        RouteProcessor(self.routes, self.kv, order_message_enable=config.order_message_enable).register_with(
            self.remoting
        )
        KVConfigProcessor(self.kv).register_with(self.remoting)
        self.auth = serve_auth(
            self.remoting, config.auth_path, enabled=config.auth_enabled,
            init_username=config.init_username, init_password=config.init_password,
        )  # fmt: skip
        NamesrvConfigProcessor(config, self._settings_changed).register_with(self.remoting)
        self.remoting.on_connection_closed(self._connection_closed)
        self._tasks = BackgroundTasks("name server")

    @property
    def port(self) -> int:
        """The bound port (after ``start``; a configured 0 becomes a free port)."""
        return self.remoting.port

    async def start(self) -> None:
        self.kv.load()
        await self.remoting.start()
        self._tasks.spawn(self._scan_not_active_brokers(), name="namesrv-scan-not-active-brokers")

    async def stop(self, grace: float = 5.0) -> None:
        await self._tasks.close()
        await self.remoting.stop(grace)

    def _settings_changed(self) -> None:
        self.routes.broker_timeout = self.config.broker_channel_expired_time / 1000

    def _connection_closed(self, connection: Connection) -> None:
        for cluster, addr in self.routes.remove_channel(connection):
            log.info("broker %s of cluster %s is gone: its connection closed", addr, cluster)

    async def _scan_not_active_brokers(self) -> None:
        while True:
            await asyncio.sleep(self.config.scan_not_active_broker_interval / 1000)
            for (cluster, addr), channel in self.routes.remove_expired():
                log.warning("broker %s of cluster %s expired: no registration in time", addr, cluster)
                if isinstance(channel, Connection):
                    channel.close()
