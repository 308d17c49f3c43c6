"""`ferrymq console`: the web console and its HTTP admin API over a cluster."""

from __future__ import annotations

import click

from ferrymq.cli.clients import credential_options
from ferrymq.cli.option_settings import settings_file
from ferrymq.cli.serving import serve


@click.command()
@settings_file
@click.option(
    "--namesrv", default="127.0.0.1:9876", show_default=True, help="NameServer address(es), ';'-separated."
)
@click.option("--port", default=8080, show_default=True, help="HTTP port (0 picks a free one).")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; the console has no login of its own and acts with the credentials it "
    "was started with, so keep it on loopback or behind a proxy that authenticates.",
)
@click.option("--meta", help="host:port of the metadata service, for the AMQP pages.")
@click.option("--controllers", help="Controller address(es), ';'-separated, for epochs and SyncStateSets.")
@click.option("--proxies", help="gRPC proxy address(es), ';'-separated: they register with no NameServer.")
@credential_options
def console(
    namesrv: str, port: int, host: str, meta: str | None, controllers: str | None, proxies: str | None,
    access_key: str | None, secret_key: str | None,
) -> None:  # fmt: skip
    """Serve the web console for the cluster at NAMESRV on http://HOST:PORT/."""
    from ferrymq.console.app import ConsoleServer
    from ferrymq.console.cluster import ClusterData

    metadata = None
    if meta:
        from ferrymq.meta.client import MetaClient

        metadata = MetaClient(meta)
    cluster = ClusterData(
        namesrv, controllers=controllers, metadata=metadata, access_key=access_key, secret_key=secret_key,
        proxies=proxies,
    )  # fmt: skip
    server = ConsoleServer(cluster, host, port)

    async def start() -> str:
        bound = await server.start()
        return f"Console on http://{host}:{bound}/ for the cluster at NameServer {namesrv}"

    async def stop() -> None:
        await server.close()
        if metadata is not None:
            await metadata.close()

    serve(start, stop, "Console")
