"""`ferrymq namesrv`: one NameServer process, stopped cleanly by SIGTERM or Ctrl-C."""

from __future__ import annotations

from pathlib import Path

import click

from ferrymq.cli.controller import controller_options, make_controller
from ferrymq.cli.metrics import metrics_option, start_metrics, stop_metrics
from ferrymq.cli.serving import host_port, load_settings, serve
from ferrymq.cli.tls import check_tls, client_tls_options, server_tls_options, tls_overrides
from ferrymq.metrics.http import MetricsServer
from ferrymq.metrics.registry import Registry
from ferrymq.metrics.roles import add_controller, add_namesrv
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.server import NameServer


@click.command()
@click.option(
    "-c", "--config", "config_file", type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Settings file (TOML): NamesrvConfig's names, or RocketMQ's camelCase ones; then FERRYMQ_<NAME> "
         "environment variables and these options win over it.",
)  # fmt: skip
@click.option(
    "--listen",
    callback=host_port,
    help="Address to accept brokers and clients on (port 0 picks a free one) [default: 0.0.0.0:9876].",
)
@click.option(
    "--kv-config-path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Keep KV config (e.g. ORDER_TOPIC_CONFIG) in this JSON file; in memory only when not given.",
)
@click.option(
    "--auth-enabled", is_flag=True, default=None,
    help="Refuse requests not signed by a known user (AccessKey/Signature), and check their rules.",
)  # fmt: skip
@click.option("--init-username", help="The first super user.")
@click.option("--init-password", help="Its password (SecretKey).")
@click.option(
    "--auth-path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Keep users and ACL rules in this JSON file (default: auth.json beside --kv-config-path).",
)
@server_tls_options
@client_tls_options
@controller_options(prefix="controller-")
@metrics_option("namesrv")
def namesrv(
    config_file: Path | None,
    listen: tuple[str, int] | None,
    kv_config_path: Path | None,
    auth_enabled: bool | None,
    init_username: str | None,
    init_password: str | None,
    auth_path: Path | None,
    node_id: str | None,
    metrics_port: int | None,
    **controller_args,
) -> None:
    """Start a NameServer: brokers register with it, clients ask it for routes.

    Settings come from defaults, then the TOML file, then FERRYMQ_<SETTING> environment variables,
    then these options. With --controller-id and --controller-peers it also runs a controller node
    in the same process (RocketMQ's enableControllerInNamesrv), on its own --controller-listen port."""
    overrides = {
        "kv_config_path": kv_config_path, "auth_enabled": auth_enabled, "init_username": init_username,
        "init_password": init_password, "auth_path": auth_path, **tls_overrides(controller_args),
    }  # fmt: skip
    if listen:
        overrides["listen_host"], overrides["listen_port"] = listen
    config = load_settings(NamesrvConfig, config_file, overrides)
    check_tls(config)
    host = config.listen_host
    tls = config.tls_only()
    server = NameServer(config)
    embedded = None
    if node_id:
        if not controller_args["peers"]:
            raise click.UsageError("--controller-id needs --controller-peers")
        embedded = make_controller(node_id, **controller_args, tls=tls)

    registry = Registry()
    metrics: MetricsServer | None = None

    async def start() -> str:
        nonlocal metrics
        await server.start()
        add_namesrv(registry, server)
        line = f"NameServer listening on {host}:{server.port}"
        if embedded is not None:
            await embedded.start()
            add_controller(registry, embedded)
            line += f"; controller {node_id} on {embedded.config.address}"
        metrics, more = await start_metrics(registry, host, metrics_port, "namesrv")
        return line + more

    async def stop() -> None:
        registry.stopping = True
        if embedded is not None:
            await embedded.stop()
        await server.stop()
        await stop_metrics(metrics)

    serve(start, stop, "NameServer")
