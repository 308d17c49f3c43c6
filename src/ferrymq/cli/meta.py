"""`ferrymq meta`: the metadata service every AMQP gateway reads and watches, over HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ferrymq.cli.option_settings import settings_file
from ferrymq.cli.serving import host_port, serve


@click.group(invoke_without_command=True)
@settings_file
@click.option(
    "--data-dir",
    default="./.ferrymq/meta",
    show_default=True,
    type=click.Path(path_type=Path),
    help="Where the SQLite store lives (unless --database is given).",
)
@click.option(
    "--database", envvar="FERRYMQ_META_DATABASE", help="A SQLAlchemy URL, e.g. postgresql+psycopg://..."
)
@click.option(
    "--listen",
    default="127.0.0.1:9890",
    show_default=True,
    callback=host_port,
    help="Address to serve the HTTP API on (port 0 picks a free one).",
)
@click.option(
    "--import",
    "import_file",
    type=click.Path(exists=True, path_type=Path),
    help="Import this RabbitMQ definitions JSON first.",
)
@click.pass_context
def meta(
    ctx: click.Context,
    data_dir: Path,
    database: str | None,
    listen: tuple[str, int],
    import_file: Path | None,
) -> None:
    """Serve vhosts, users, exchanges, queues, bindings and policies to AMQP gateways."""
    if ctx.invoked_subcommand is not None:
        return
    from ferrymq.meta.database import database_url, make_engine
    from ferrymq.meta.definitions import import_definitions
    from ferrymq.meta.server import MetaServer
    from ferrymq.meta.service import MetaService
    from ferrymq.meta.store import MetaStore

    url = database or database_url(data_dir)
    store = MetaStore(make_engine(url))
    if store.ensure_defaults():
        click.echo("created vhost '/' and user 'guest'")
    if import_file is not None:
        click.echo(import_definitions(store, json.loads(import_file.read_text())).summary())
    host, port = listen
    server = MetaServer(MetaService(store), host, port)

    async def start() -> str:
        bound = await server.start()
        return f"Metadata service listening on http://{host}:{bound} ({store.engine.url.render_as_string()})"

    async def stop() -> None:
        await server.close()
        store.engine.dispose()

    serve(start, stop, "Metadata service")
