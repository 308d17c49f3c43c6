"""`ferrymq amqp`: the AMQP 0-9-1 gateway as its own stateless process in front of a cluster."""

from __future__ import annotations

from pathlib import Path

import click

from ferrymq.cli.clients import credential_options
from ferrymq.cli.gatewaying import META_HELP, limit_options, open_metadata, start_gateway
from ferrymq.cli.metrics import metrics_option, start_metrics, stop_metrics
from ferrymq.cli.option_settings import settings_file
from ferrymq.cli.serving import host_port, serve
from ferrymq.cli.tls import client_tls_options, server_tls_options, tls_settings
from ferrymq.metrics.http import MetricsServer
from ferrymq.metrics.registry import Registry
from ferrymq.metrics.roles import add_amqp


@click.command()
@settings_file
@click.option(
    "--namesrv", required=True, help="NameServer address(es), ';'-separated, of the cluster behind it."
)
@click.option(
    "--listen",
    default="0.0.0.0:5672",
    show_default=True,
    callback=host_port,
    help="Address to accept AMQP 0-9-1 clients on (port 0 picks a free one).",
)
@click.option("--meta", default=None, help=META_HELP)
@click.option(
    "--data-dir",
    default="./.ferrymq/meta",
    show_default=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="Where the SQLite metadata lives when --meta is not given.",
)
@click.option("--heartbeat", default=60, show_default=True, help="Heartbeat interval offered to clients (s).")
@click.option(
    "--tls-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="AMQPS port (TLS only) on the listen host, with --tls-server-mode [default: 5671].",
)
@server_tls_options
@client_tls_options
@credential_options
@limit_options
@metrics_option("amqp")
def amqp(
    namesrv: str,
    listen: tuple[str, int],
    meta: str | None,
    data_dir: Path,
    heartbeat: int,
    max_message_size: int,
    consumer_timeout: int,
    tls_port: int | None,
    access_key: str | None,
    secret_key: str | None,
    metrics_port: int | None,
    **tls_options,
) -> None:
    """Serve AMQP 0-9-1 (RabbitMQ) clients: exchanges, queues and bindings from the metadata service,
    messages in the cluster's topics.

    With --access-key (a super user of a cluster with authentication on) it signs its calls to the
    cluster as that user, and the cluster's users log in too, held to its rules."""
    from ferrymq.amqp.gateway import GatewayLimits
    from ferrymq.auth.mirror import AuthMirror
    from ferrymq.messaging.remote import RemoteMessageService

    host, port = listen
    tls = tls_settings(tls_options)
    server_tls = tls.server_tls()
    if server_tls is None and tls_port is not None:
        raise click.UsageError("--tls-port needs --tls-server-mode and a certificate")
    if server_tls is not None and tls_port is None:
        from ferrymq.amqp.server import AMQPS_PORT

        tls_port = AMQPS_PORT
    service = RemoteMessageService(
        namesrv, tls=tls.client_tls() or False, access_key=access_key, secret_key=secret_key
    )
    users = AuthMirror(service.instance.invoke, service.instance.namesrvs) if access_key else None
    metadata, close_metadata = open_metadata(meta, data_dir)
    started = []
    registry = Registry()
    served: list[MetricsServer | None] = []

    async def start() -> str:
        await service.start()
        try:
            if users is not None:
                await users.start()
            limits = GatewayLimits(max_message_size, consumer_timeout)
            server, bound = await start_gateway(
                service, metadata, host, port, heartbeat=heartbeat, limits=limits, tls=server_tls,
                tls_port=tls_port, acl=users.registry if users is not None else None,
            )  # fmt: skip
        except BaseException:
            if users is not None:
                await users.close()
            await service.close()
            await close_metadata()
            raise
        started.append(server)
        add_amqp(registry, server)
        try:
            metrics, more = await start_metrics(registry, host, metrics_port, "amqp")
        except BaseException:
            await stop()
            raise
        served.append(metrics)
        where = f"metadata service {meta}" if meta and "://" not in meta else "metadata in this process"
        amqps = f" (TLS {server_tls.mode}), AMQPS on {server.tls_port}" if server_tls is not None else ""
        return (
            f"AMQP gateway listening on {host}:{bound}{amqps}, cluster at NameServer {namesrv}, {where}"
            f"{more}."
        )

    async def stop() -> None:
        registry.stopping = True
        for metrics in served:
            await stop_metrics(metrics)
        for server in started:
            await server.close()
        if users is not None:
            await users.close()
        await service.close()
        await close_metadata()

    serve(start, stop, "AMQP gateway")
