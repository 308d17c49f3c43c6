"""`ferrymq amqp`: the AMQP 0-9-1 gateway as its own stateless process in front of a cluster."""

from __future__ import annotations

from pathlib import Path

import click

from ferrymq.cli.clients import credential_options
from ferrymq.cli.gatewaying import META_HELP, limit_options, open_metadata, start_gateway
from ferrymq.cli.serving import host_port, serve


@click.command()
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
@credential_options
@limit_options
def amqp(
    namesrv: str,
    listen: tuple[str, int],
    meta: str | None,
    data_dir: Path,
    heartbeat: int,
    max_message_size: int,
    consumer_timeout: int,
    access_key: str | None,
    secret_key: str | None,
) -> None:
    """Serve AMQP 0-9-1 (RabbitMQ) clients: exchanges, queues and bindings from the metadata service,
    messages in the cluster's topics."""
    from ferrymq.amqp.gateway import GatewayLimits
    from ferrymq.messaging.remote import RemoteMessageService

    host, port = listen
    service = RemoteMessageService(namesrv, access_key=access_key, secret_key=secret_key)
    metadata, close_metadata = open_metadata(meta, data_dir)
    started = []

    async def start() -> str:
        await service.start()
        try:
            limits = GatewayLimits(max_message_size, consumer_timeout)
            server, bound = await start_gateway(
                service, metadata, host, port, heartbeat=heartbeat, limits=limits
            )
        except BaseException:
            await service.close()
            await close_metadata()
            raise
        started.append(server)
        where = f"metadata service {meta}" if meta and "://" not in meta else "metadata in this process"
        return f"AMQP gateway listening on {host}:{bound}, cluster at NameServer {namesrv}, {where}."

    async def stop() -> None:
        for server in started:
            await server.close()
        await service.close()
        await close_metadata()

    serve(start, stop, "AMQP gateway")
