"""`ferrymq proxy`: the RocketMQ 5 gRPC proxy as its own process, in front of a cluster (cluster mode:
routes from the NameServers, messages to and from the brokers over remoting)."""

from __future__ import annotations

import click

from ferrymq.cli.metrics import metrics_option, start_metrics, stop_metrics
from ferrymq.cli.option_settings import settings_file
from ferrymq.cli.serving import host_port, serve
from ferrymq.cli.tls import (
    client_tls_options,
    plaintext_port_option,
    proxy_server,
    server_tls_options,
    tls_settings,
)
from ferrymq.metrics.http import MetricsServer
from ferrymq.metrics.registry import Registry
from ferrymq.metrics.roles import add_proxy


@click.command()
@settings_file
@click.option(
    "--namesrv", default="127.0.0.1:9876", show_default=True, help="NameServer address(es), ';'-separated."
)
@click.option(
    "--listen",
    default="0.0.0.0:8081",
    show_default=True,
    callback=host_port,
    help="Address to accept gRPC (v2) clients on (port 0 picks a free one).",
)
@server_tls_options
@plaintext_port_option
@client_tls_options
@metrics_option("proxy")
def proxy(
    namesrv: str, listen: tuple[str, int], metrics_port: int | None, plaintext_port: int | None, **tls_options
) -> None:
    """Serve RocketMQ 5 gRPC clients (apache.rocketmq.v2.MessagingService) for the cluster at NAMESRV.

    With --tls-server-mode it serves TLS on its port (--tls for its own calls to the cluster)."""
    from ferrymq.messaging.remote import RemoteMessageService
    from ferrymq.proxy.server import ProxyServer

    host, port = listen
    tls = tls_settings(tls_options)
    service = RemoteMessageService(namesrv, tls=tls.client_tls() or False)
    server = proxy_server(
        ProxyServer, service, host, port, tls=tls.server_tls(), plaintext_port=plaintext_port
    )
    registry = Registry()
    metrics: MetricsServer | None = None

    async def start() -> str:
        nonlocal metrics
        await service.start()
        try:
            bound = await server.start()
            add_proxy(registry, server)
            metrics, line = await start_metrics(registry, host, metrics_port, "proxy")
        except BaseException:
            await stop()
            raise
        return f"Proxy listening on {host}:{bound} (gRPC v2), cluster at NameServer {namesrv}{line}"

    async def stop() -> None:
        registry.stopping = True
        await server.close()
        await service.close()
        await stop_metrics(metrics)

    serve(start, stop, "Proxy")
