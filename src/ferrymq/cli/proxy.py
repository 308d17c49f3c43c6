"""`ferrymq proxy`: the RocketMQ 5 gRPC proxy as its own process, in front of a cluster (cluster mode:
routes from the NameServers, messages to and from the brokers over remoting)."""

from __future__ import annotations

import click

from ferrymq.cli.clients import credential_options
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
@credential_options
@metrics_option("proxy")
def proxy(
    namesrv: str, listen: tuple[str, int], metrics_port: int | None, plaintext_port: int | None,
    access_key: str | None, secret_key: str | None, **tls_options,
) -> None:  # fmt: skip
    """Serve RocketMQ 5 gRPC clients (apache.rocketmq.v2.MessagingService) for the cluster at NAMESRV.

    With --tls-server-mode it serves TLS on its port (--tls for its own calls to the cluster). With
    --access-key (a super user of a cluster with authentication on) it signs its calls to the cluster
    as that user and checks every client against the cluster's users and rules."""
    from ferrymq.auth.grpc_gate import GrpcGate
    from ferrymq.auth.mirror import AuthMirror
    from ferrymq.messaging.remote import RemoteMessageService
    from ferrymq.proxy.server import ProxyServer

    host, port = listen
    tls = tls_settings(tls_options)
    service = RemoteMessageService(
        namesrv, tls=tls.client_tls() or False, access_key=access_key, secret_key=secret_key
    )
    users = AuthMirror(service.instance.invoke, service.instance.namesrvs) if access_key else None
    gates = [GrpcGate(users.registry)] if users is not None else []
    server = proxy_server(
        ProxyServer, service, host, port, tls=tls.server_tls(), plaintext_port=plaintext_port,
        interceptors=gates,
    )  # fmt: skip
    registry = Registry()
    metrics: MetricsServer | None = None

    async def start() -> str:
        nonlocal metrics
        await service.start()
        try:
            if users is not None:
                await users.start()
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
        if users is not None:
            await users.close()
        await service.close()
        await stop_metrics(metrics)

    serve(start, stop, "Proxy")
