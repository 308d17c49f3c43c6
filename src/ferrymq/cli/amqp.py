"""`ferrymq amqp`: the AMQP 0-9-1 gateway as its own process."""

from __future__ import annotations

import click

from ferrymq.cli.serving import host_port, serve


@click.command()
@click.option(
    "--listen",
    default="0.0.0.0:5673",
    show_default=True,
    callback=host_port,
    help="Address to accept AMQP 0-9-1 clients on (port 0 picks a free one).",
)
@click.option("--heartbeat", default=60, show_default=True, help="Heartbeat interval offered to clients (s).")
def amqp(listen: tuple[str, int], heartbeat: int) -> None:
    """Serve AMQP 0-9-1 (RabbitMQ) clients: connections and channels only so far, no messaging yet."""
    from ferrymq.amqp.server import AMQPServer

    host, port = listen
    server = AMQPServer(host, port, heartbeat=heartbeat)

    async def start() -> str:
        bound = await server.start()
        return (
            f"AMQP gateway listening on {host}:{bound} (user guest/guest, vhost /). "
            "Connections and channels only: exchanges, queues and messages answer 540 NOT_IMPLEMENTED."
        )

    serve(start, server.close, "AMQP gateway")
