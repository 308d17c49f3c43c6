"""A gRPC proxy inside a broker's own process (RocketMQ 5's local mode), for `ferrymq dev` and
`ferrymq broker --proxy-port`: it reaches the broker's services directly, with no remoting hop."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ferrymq.broker.server import Broker
    from ferrymq.proxy.server import ProxyServer


async def start_local_proxy(broker: Broker, host: str, port: int) -> tuple[ProxyServer, int]:
    """Serve RocketMQ 5 clients on host:port (0: any free port) over a started broker; the proxy
    and the port it bound."""
    from ferrymq.messaging.local import LocalMessageService
    from ferrymq.proxy.server import ProxyServer

    local = LocalMessageService(
        broker.puts, broker.reads, broker.pops, broker.topics, broker.config.broker_name,
        broker.transactions, broker.recalls, broker.clients,
    )  # fmt: skip
    proxy = ProxyServer(local, host, port)
    return proxy, await proxy.start()
