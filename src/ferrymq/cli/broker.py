"""`ferrymq broker`: one Broker process, stopped cleanly (flush, checkpoint, unregister) by SIGTERM."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ferrymq.broker.config import BrokerConfig, ConfigError
from ferrymq.cli.metrics import metrics_option, start_metrics, stop_metrics
from ferrymq.cli.proxying import start_local_proxy
from ferrymq.cli.serving import host_port, serve
from ferrymq.cli.tls import check_tls, client_tls_options, server_tls_options, tls_overrides
from ferrymq.metrics.registry import Registry
from ferrymq.metrics.roles import add_broker, add_proxy
from ferrymq.store import StoreError

if TYPE_CHECKING:
    from ferrymq.metrics.http import MetricsServer
    from ferrymq.proxy.server import ProxyServer


@click.command()
@click.option("-c", "--config", "config_file", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="broker.toml with RocketMQ's settings in snake_case (flush_disk_type, ...).")  # fmt: skip
@click.option("--namesrv", help='NameServer addresses, "host:port;host2:port2".')
@click.option("--listen", callback=host_port, help="Address to serve clients on [default: 0.0.0.0:10911].")
@click.option("--store-dir", type=click.Path(path_type=Path, file_okay=False), help="Where the store lives.")
@click.option("--cluster", help="Cluster name [default: DefaultCluster].")
@click.option("--name", help="Broker name [default: broker-a].")
@click.option("--broker-id", type=int, help="0 for a master, > 0 for a slave [default: 0].")
@click.option("--role", type=click.Choice(["ASYNC_MASTER", "SYNC_MASTER", "SLAVE"], case_sensitive=False),
              help="Replication role (broker_role) [default: ASYNC_MASTER].")  # fmt: skip
@click.option("--ha-port", type=int, help="Port replicas connect to (0: any) [default: listen port + 1].")
@click.option("--controller", "controller_addr",
              help='Controller mode: the controllers "host:port;host2:port2" give id and role.')  # fmt: skip
@click.option("--proxy-port", type=int, default=-1, show_default=True,
              help="Also serve RocketMQ 5 gRPC clients on this port of the listen host, in this process "
                   "(0: any free port; -1: no proxy).")  # fmt: skip
@click.option("--proxy-plaintext-port", type=click.IntRange(0, 65535),
              help="With --tls-server-mode permissive: the proxy's plaintext gRPC port.")  # fmt: skip
@server_tls_options
@client_tls_options
@metrics_option("broker")
def broker(
    config_file,
    namesrv,
    listen,
    store_dir,
    cluster,
    name,
    broker_id,
    role,
    ha_port,
    controller_addr,
    proxy_port,
    proxy_plaintext_port,
    metrics_port,
    **tls_options,
):
    """Start a Broker: it stores messages and serves producers and consumers.

    Settings come from defaults, then the TOML file, then FERRYMQ_<SETTING> environment variables,
    then these options.
    """
    overrides = {
        "namesrv_addr": namesrv,
        "store_path_root_dir": store_dir,
        "broker_cluster_name": cluster,
        "broker_name": name,
        "broker_id": broker_id,
        "broker_role": role.upper() if role else None,
        "ha_listen_port": ha_port,
        "controller_addr": controller_addr,
        "enable_controller_mode": True if controller_addr else None,
        **tls_overrides(tls_options),
    }
    if listen:
        overrides["listen_host"], overrides["listen_port"] = listen
    try:
        config = BrokerConfig.load(config_file, overrides)
    except ConfigError as e:
        raise click.ClickException(str(e)) from None
    check_tls(config)
    from ferrymq.broker.server import Broker

    server = Broker(config)
    proxy: ProxyServer | None = None
    registry = Registry()
    metrics: MetricsServer | None = None

    async def start() -> str:
        nonlocal proxy, metrics
        try:
            await server.start()
        except StoreError as e:
            raise click.ClickException(str(e)) from None
        role = (
            "controller mode: the controllers give its role and id"
            if config.enable_controller_mode
            else f"{config.broker_role} id {config.broker_id}"
        )
        started = (
            f"Broker {config.broker_name} (cluster {config.broker_cluster_name}, {role}) listening on "
            f"{config.broker_addr}, HA port {config.ha_listen_port}, store {config.store.store_path_root_dir}"
        )
        add_broker(registry, server)
        try:
            if proxy_port >= 0:
                try:
                    proxy, port = await start_local_proxy(
                        server, config.listen_host, proxy_port, server.server_tls, proxy_plaintext_port
                    )
                except ValueError as e:
                    raise click.UsageError(f"{e} (--proxy-plaintext-port)") from None
                add_proxy(registry, proxy, config.broker_cluster_name)
                started += f"; gRPC proxy for RocketMQ 5 clients on {config.listen_host}:{port}"
            metrics, line = await start_metrics(registry, config.listen_host, metrics_port, "broker")
        except BaseException:
            await stop()
            raise
        return started + line

    async def stop() -> None:
        registry.stopping = True
        if proxy is not None:
            await proxy.close()
        await server.stop()
        await stop_metrics(metrics)

    serve(start, stop, "Broker")
