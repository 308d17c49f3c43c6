"""`ferrymq namesrv`: one NameServer process, stopped cleanly by SIGTERM or Ctrl-C."""

from __future__ import annotations

from pathlib import Path

import click

from ferrymq.cli.serving import host_port, serve
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.server import NameServer


@click.command()
@click.option(
    "--listen",
    default="0.0.0.0:9876",
    show_default=True,
    callback=host_port,
    help="Address to accept brokers and clients on (port 0 picks a free one).",
)
@click.option(
    "--kv-config-path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Keep KV config (e.g. ORDER_TOPIC_CONFIG) in this JSON file; in memory only when not given.",
)
def namesrv(listen: tuple[str, int], kv_config_path: Path | None) -> None:
    """Start a NameServer: brokers register with it, clients ask it for routes."""
    host, port = listen
    server = NameServer(NamesrvConfig(listen_host=host, listen_port=port, kv_config_path=kv_config_path))

    async def start() -> str:
        await server.start()
        return f"NameServer listening on {host}:{server.port}"

    serve(start, server.stop, "NameServer")
