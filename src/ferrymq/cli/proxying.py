"""Fronts inside a broker's own process: a gRPC proxy (RocketMQ 5's local mode), for `ferrymq dev` and
`ferrymq broker --proxy-port`: it reaches the broker's services directly, with no remoting hop."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ferrymq.broker.server import Broker
    from ferrymq.messaging.local import LocalMessageService
    from ferrymq.net.tls import ServerTLS
    from ferrymq.proxy.server import ProxyServer


def local_message_service(broker: Broker) -> LocalMessageService:
    """The messaging core of a started broker, for a front in its process (proxy, AMQP gateway)."""
    from ferrymq.messaging.local import LocalMessageService

    return LocalMessageService(
        broker.puts, broker.reads, broker.pops, broker.topics, broker.config.broker_name,
        broker.transactions, broker.recalls, broker.clients, broker.topic_admin,
    )  # fmt: skip


async def start_local_proxy(
    broker: Broker, host: str, port: int, tls: ServerTLS | None = None, plaintext_port: int | None = None
) -> tuple[ProxyServer, int]:
    """Serve RocketMQ 5 clients on host:port (0: any free port) over a started broker (``tls`` and
    ``plaintext_port``: see ProxyServer); the proxy and the port it bound. With the broker's
    authentication on, the proxy checks its users too."""
    from ferrymq.auth.grpc_gate import GrpcGate
    from ferrymq.proxy.server import ProxyServer

    gates = [GrpcGate(broker.auth)] if broker.config.auth_enabled else []
    proxy = ProxyServer(
        local_message_service(broker), host, port, tls=tls, plaintext_port=plaintext_port, interceptors=gates
    )
    return proxy, await proxy.start()
