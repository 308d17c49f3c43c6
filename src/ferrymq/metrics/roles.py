"""How each role plugs into a Registry, and serving it on the role's metrics port.

A role calls ``add_<role>(registry, server)`` once its server started, then ``serve_metrics``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ferrymq.metrics.amqp import AmqpCollector, amqp_ready
from ferrymq.metrics.broker import BrokerCollector, broker_ready
from ferrymq.metrics.http import MetricsServer
from ferrymq.metrics.node import Node
from ferrymq.metrics.registry import Registry
from ferrymq.metrics.remoting import RemotingCollector
from ferrymq.metrics.replication import ReplicationCollector
from ferrymq.metrics.servers import (
    ControllerCollector,
    NamesrvCollector,
    ProxyCollector,
    controller_ready,
    proxy_ready,
)

if TYPE_CHECKING:
    from ferrymq.amqp.server import AMQPServer
    from ferrymq.broker.server import Broker
    from ferrymq.controller.server import Controller
    from ferrymq.namesrv.server import NameServer
    from ferrymq.proxy.server import ProxyServer

log = logging.getLogger(__name__)

DEFAULT_PORTS = {"namesrv": 5556, "broker": 5557, "proxy": 5558, "controller": 5559, "amqp": 15692}
"""Each role's metrics port when none is given (the broker's is RocketMQ's metricsPromExporterPort,
the AMQP gateway's RabbitMQ's Prometheus plugin's)."""
OFF = -1


def add_broker(registry: Registry, broker: Broker) -> None:
    collector = BrokerCollector(broker)
    registry.add(collector, lambda: broker_ready(broker))
    registry.add(ReplicationCollector(collector.node, broker))
    registry.add(RemotingCollector(collector.node, broker.server))


def add_namesrv(registry: Registry, namesrv: NameServer) -> None:
    node = Node("", "namesrv", f"{namesrv.config.listen_host}:{namesrv.port}")
    registry.add(NamesrvCollector(node, namesrv))
    registry.add(RemotingCollector(node, namesrv.remoting))


def add_controller(registry: Registry, controller: Controller) -> None:
    node = Node("", "controller", controller.config.node_id)
    registry.add(ControllerCollector(node, controller), lambda: controller_ready(controller))
    registry.add(RemotingCollector(node, controller.remoting))


def add_proxy(registry: Registry, proxy: ProxyServer, cluster: str = "") -> None:
    node = Node(cluster, "proxy", f"{proxy.host}:{proxy.port}")
    registry.add(ProxyCollector(node, proxy), lambda: proxy_ready(proxy))


def add_amqp(registry: Registry, server: AMQPServer, cluster: str = "") -> None:
    node = Node(cluster, "amqp", f"{server.host}:{server.port}")
    registry.add(AmqpCollector(node, server), lambda: amqp_ready(server))


async def serve_metrics(registry: Registry, host: str, port: int | None, role: str) -> MetricsServer | None:
    """Serve `registry` on host:port; None: the role's default port, or any free port when that one
    is taken (as several roles may share a host); 0: any free port; -1: no metrics server."""
    if port == OFF:
        return None
    if port is not None and not 0 <= port <= 65535:
        raise ValueError(f"metrics port must be -1 (off), 0 (any) or a port number, not {port}")
    server = MetricsServer(registry, host, DEFAULT_PORTS[role] if port is None else port)
    try:
        await server.start()
    except OSError as exc:
        if port is not None:
            raise
        log.warning("metrics port %d is not free (%s): using any free port", server.port, exc)
        server.port = 0
        await server.start()
    return server
