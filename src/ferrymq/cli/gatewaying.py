"""Putting an AMQP gateway together for the commands that start one: its metadata (the metadata
service over HTTP, or a store of its own in this process) and its messaging core (a broker in this
process, or a cluster through its NameServers)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ferrymq.amqp.catalog import Metadata
    from ferrymq.amqp.gateway import GatewayLimits
    from ferrymq.amqp.server import AMQPServer
    from ferrymq.auth.registry import AuthRegistry
    from ferrymq.messaging.api import MessageService
    from ferrymq.net.tls import ServerTLS

META_HELP = (
    "The metadata service: host:port of a `ferrymq meta` server, or a SQLAlchemy database URL "
    "(postgresql+psycopg://...) to keep the metadata in this process; default: SQLite under the data dir."
)


def open_metadata(meta: str | None, data_dir: Path) -> tuple[Metadata, Callable[[], Awaitable[None]]]:
    """The gateway's metadata and how to close it. A URL with "://" is a database this process
    serves itself; host:port is a metadata server."""
    if meta and "://" not in meta:
        from ferrymq.meta.client import MetaClient

        client = MetaClient(meta)
        return client, client.close
    from ferrymq.meta.database import database_url, make_engine
    from ferrymq.meta.service import MetaService
    from ferrymq.meta.store import MetaStore

    store = MetaStore(make_engine(meta or database_url(data_dir)))
    store.ensure_defaults()

    async def close() -> None:
        store.engine.dispose()

    return MetaService(store), close


async def start_gateway(
    service: MessageService,
    metadata: Metadata,
    host: str,
    port: int,
    *,
    heartbeat: int = 60,
    limits: GatewayLimits | None = None,
    tls: ServerTLS | None = None,
    tls_port: int | None = None,
    acl: AuthRegistry | None = None,
) -> tuple[AMQPServer, int]:
    """An AMQP gateway serving on host:port (0: any free port), and AMQPS on ``tls_port`` if given;
    the server and the port it bound. ``acl``: the cluster's users and rules, whose users may then
    log in too."""
    from ferrymq.amqp.gateway import Gateway
    from ferrymq.amqp.server import AMQPServer

    gateway = Gateway(service, metadata, limits, acl=acl)
    server = AMQPServer(host, port, gateway, heartbeat=heartbeat, tls=tls, tls_port=tls_port)
    return server, await server.start()


def limit_options(fn: Callable) -> Callable:
    """--max-message-size and --consumer-timeout, for the commands that start a gateway."""
    import click

    from ferrymq.amqp.gateway import CONSUMER_TIMEOUT_MS, DEFAULT_MAX_MESSAGE_SIZE

    fn = click.option(
        "--consumer-timeout", default=CONSUMER_TIMEOUT_MS, show_default=True,
        help="AMQP: ms a delivery may stay unacknowledged before its channel is closed (RabbitMQ's).",
    )(fn)  # fmt: skip
    return click.option(
        "--max-message-size", default=DEFAULT_MAX_MESSAGE_SIZE, show_default=True,
        help="AMQP: the largest message body taken (larger: channel closed with 406).",
    )(fn)  # fmt: skip
