"""`ferrymq amqp`: the AMQP 0-9-1 gateway as its own process."""

from __future__ import annotations

import click

from ferrymq.cli.serving import host_port, serve


@click.command()
@click.option(
    "--namesrv",
    default=None,
    help="NameServer address(es), ';'-separated, of the cluster behind the gateway (connected at start; "
    "not used for messages yet).",
)
@click.option(
    "--listen",
    default="0.0.0.0:5673",
    show_default=True,
    callback=host_port,
    help="Address to accept AMQP 0-9-1 clients on (port 0 picks a free one).",
)
@click.option("--heartbeat", default=60, show_default=True, help="Heartbeat interval offered to clients (s).")
def amqp(namesrv: str | None, listen: tuple[str, int], heartbeat: int) -> None:
    """Serve AMQP 0-9-1 (RabbitMQ) clients: connections and channels only so far, no messaging yet."""
    from ferrymq.amqp.server import AMQPServer
    from ferrymq.messaging.remote import RemoteMessageService

    host, port = listen
    service = RemoteMessageService(namesrv) if namesrv else None
    server = AMQPServer(host, port, heartbeat=heartbeat, service=service)

    async def start() -> str:
        if service is not None:
            await service.start()
        try:
            bound = await server.start()
        except BaseException:
            if service is not None:
                await service.close()
            raise
        cluster = f"cluster at NameServer {namesrv}" if namesrv else "no cluster"
        return (
            f"AMQP gateway listening on {host}:{bound} (user guest/guest, vhost /), {cluster}. "
            "Connections and channels only: exchanges, queues and messages answer 540 NOT_IMPLEMENTED."
        )

    async def stop() -> None:
        await server.close()
        if service is not None:
            await service.close()

    serve(start, stop, "AMQP gateway")
