"""`ferrymq dev`: a whole local cluster in one process, on loopback, with an embedded data directory.

A NameServer, a Broker, and in the broker's process the gRPC proxy, the AMQP gateway (its
metadata in SQLite under the data directory) and the web console. Ctrl-C stops everything cleanly:
the broker unregisters, flushes and writes its checkpoint.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ferrymq.cli.gatewaying import limit_options, open_metadata, start_gateway
from ferrymq.cli.metrics import metrics_option, start_metrics, stop_metrics
from ferrymq.cli.option_settings import settings_file
from ferrymq.cli.proxying import local_message_service, start_local_proxy
from ferrymq.cli.serving import load_settings, serve
from ferrymq.cli.tls import check_tls, server_tls_options, tls_overrides
from ferrymq.metrics.registry import Registry
from ferrymq.metrics.roles import add_amqp, add_broker, add_namesrv, add_proxy
from ferrymq.store import StoreError

log = logging.getLogger(__name__)
CONSOLE_PORT = 8080
DEV_COMMITLOG_SEGMENT = 256 << 20  # a development disk need not give 1 GiB per segment

if TYPE_CHECKING:
    from ferrymq.amqp.server import AMQPServer
    from ferrymq.broker.config import BrokerConfig
    from ferrymq.console.app import ConsoleServer
    from ferrymq.metrics.http import MetricsServer
    from ferrymq.namesrv.config import NamesrvConfig
    from ferrymq.proxy.server import ProxyServer


def default_data_dir() -> Path:
    """./.ferrymq/data when the current directory is writable, else ~/.ferrymq/data."""
    here = Path.cwd()
    return (here if os.access(here, os.W_OK) else Path.home()) / ".ferrymq" / "data"


@click.command()
@settings_file
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=default_data_dir,
    show_default="./.ferrymq/data",
    help="Where the cluster keeps its data.",
)
@click.option(
    "--namesrv-port", default=9876, show_default=True, help="NameServer port on 127.0.0.1 (0: any)."
)
@click.option("--broker-port", default=10911, show_default=True, help="Broker port on 127.0.0.1 (0: any).")
@click.option(
    "--proxy-port",
    default=8081,
    show_default=True,
    help="gRPC proxy port on 127.0.0.1, for RocketMQ 5 clients (0: any, -1: no proxy).",
)
@click.option(
    "--amqp-port",
    default=5673,
    show_default=True,
    help="AMQP 0-9-1 gateway port on 127.0.0.1, for RabbitMQ clients (0: any, -1: no gateway; 5673 "
    "because RabbitMQ's 5672 is often taken).",
)
@click.option(
    "--auth-user",
    metavar="NAME:PASSWORD",
    help="Turn authentication and ACL on, with this first super user (off by default).",
)
@click.option(
    "--console-port",
    type=click.IntRange(-1, 65535),
    default=None,
    help="Web console port on 127.0.0.1 (0: any free port; -1: no console) [default: 8080, or any free "
    "port when taken].",
)
@click.option(
    "--flush-disk-type",
    type=click.Choice(["ASYNC_FLUSH", "SYNC_FLUSH"]),
    help="When a send is acknowledged: written to the page cache, or fdatasync'd (group commit) "
    "[default: ASYNC_FLUSH].",
)
@limit_options
@server_tls_options
@metrics_option("broker")
def dev(
    data_dir: Path,
    namesrv_port: int,
    broker_port: int,
    proxy_port: int,
    amqp_port: int,
    console_port: int | None,
    max_message_size: int,
    consumer_timeout: int,
    metrics_port: int | None,
    auth_user: str | None,
    flush_disk_type: str | None,
    **tls_options,
) -> None:
    """Start a local development cluster on DATA_DIR; stop it cleanly with Ctrl-C.

    Its NameServer and broker read FERRYMQ_<SETTING> environment variables as `ferrymq namesrv` and
    `ferrymq broker` do (these options win over them). The --tls-server-* options (off by default)
    apply to the NameServer and broker ports; the proxy and the AMQP gateway stay plaintext here
    (their own commands serve TLS)."""
    from ferrymq.amqp.gateway import GatewayLimits
    from ferrymq.broker.server import Broker
    from ferrymq.console.app import ConsoleServer
    from ferrymq.console.cluster import ClusterData
    from ferrymq.namesrv.server import NameServer

    name, _, password = (auth_user or "").partition(":")
    if auth_user is not None and not (name and password):
        raise click.BadParameter("give NAME:PASSWORD", param_hint="--auth-user")
    user = (name, password) if auth_user is not None else None
    namesrv_config, broker_config = dev_settings(
        data_dir, namesrv_port, broker_port, flush_disk_type, user, tls_overrides(tls_options)
    )
    namesrv = NameServer(namesrv_config)
    broker = Broker(broker_config)
    proxy: ProxyServer | None = None
    gateway: AMQPServer | None = None
    metadata, close_metadata = open_metadata(None, data_dir / "meta")
    registry = Registry()
    metrics: MetricsServer | None = None
    console: ConsoleServer | None = None

    async def start() -> str:
        nonlocal proxy, gateway, metrics, console
        await namesrv.start()
        namesrv_addr = f"127.0.0.1:{namesrv.port}"
        broker.config.namesrv_addr = namesrv_addr
        try:
            await broker.start()
        except StoreError as e:
            await namesrv.stop()
            raise click.ClickException(str(e)) from None
        lines = []
        add_namesrv(registry, namesrv)
        add_broker(registry, broker)
        if proxy_port >= 0:
            try:
                proxy, port = await start_local_proxy(broker, "127.0.0.1", proxy_port)
            except BaseException:
                await stop()
                raise
            add_proxy(registry, proxy, broker.config.broker_cluster_name)
            lines.append(f"  Proxy       127.0.0.1:{port} (gRPC, RocketMQ 5 clients)")
        if amqp_port >= 0:
            try:
                limits = GatewayLimits(max_message_size, consumer_timeout)
                acl = broker.auth if broker.config.auth_enabled else None
                gateway, port = await start_gateway(
                    local_message_service(broker), metadata, "127.0.0.1", amqp_port, limits=limits, acl=acl
                )
            except BaseException:
                await stop()
                raise
            add_amqp(registry, gateway, broker.config.broker_cluster_name)
            users = "the cluster's users, or guest/guest" if acl is not None else "guest/guest"
            lines.append(f"  AMQP        127.0.0.1:{port} (RabbitMQ clients, {users}, vhost /)")
        if console_port != -1:
            try:
                config = broker.config
                credentials = (
                    {"access_key": config.init_username, "secret_key": config.init_password}
                    if config.auth_enabled
                    else {}
                )
                proxies = f"127.0.0.1:{proxy.port}" if proxy is not None else None
                cluster = ClusterData(namesrv_addr, metadata=metadata, proxies=proxies, **credentials)
                console = ConsoleServer(cluster, "127.0.0.1", 0)
                port = await start_console(console, console_port)
            except BaseException:
                await stop()
                raise
            lines.append(f"  Console     http://127.0.0.1:{port}/")
        try:
            metrics, _ = await start_metrics(registry, "127.0.0.1", metrics_port, "broker")
        except BaseException:
            await stop()
            raise
        if metrics is not None:
            url = f"http://127.0.0.1:{metrics.port}"
            lines.append(f"  Metrics     {url}/metrics, {url}/health/live, {url}/health/ready")
        return "\n".join(
            [
                "ferrymq dev is running.",
                f"  NameServer  {namesrv_addr}",
                f"  Broker      {broker.config.broker_name} at {broker.config.broker_addr} "
                f"(cluster {broker.config.broker_cluster_name})",
                *lines,
                f"  Data        {data_dir}",
                "Try it from another shell:",
                f'  ferrymq produce --namesrv {namesrv_addr} --topic Demo "hello ferrymq"',
                f"  ferrymq consume --namesrv {namesrv_addr} --topic Demo --group DemoGroup --from first",
                "Press Ctrl-C to stop.",
            ]
        )

    async def stop() -> None:
        registry.stopping = True
        if console is not None:
            await console.close()
        if gateway is not None:
            await gateway.close()
        await close_metadata()
        if proxy is not None:
            await proxy.close()
        await broker.stop()
        await namesrv.stop()
        await stop_metrics(metrics)

    serve(start, stop, "ferrymq dev")


def dev_settings(
    data_dir: Path,
    namesrv_port: int,
    broker_port: int,
    flush_disk_type: str | None,
    user: tuple[str, str] | None,
    tls: dict[str, Any],
) -> tuple[NamesrvConfig, BrokerConfig]:
    """The NameServer's and broker's settings: dev's choices (loopback, its ports and data directory,
    256 MiB CommitLog segments), then FERRYMQ_<SETTING> environment variables, then its options."""
    from ferrymq.broker.config import BrokerConfig
    from ferrymq.namesrv.config import NamesrvConfig

    both: dict[str, Any] = {"listen_host": "127.0.0.1", **tls}
    if user is not None:  # --auth-user: authentication on, with this first super user
        both.update(auth_enabled=True, init_username=user[0], init_password=user[1])
    namesrv = load_settings(NamesrvConfig, None, {**both, "listen_port": namesrv_port})
    broker_overrides = {
        **both,
        "listen_port": broker_port,
        "store_path_root_dir": data_dir / "store",
        "flush_disk_type": flush_disk_type,
    }
    dev_defaults = {"mapped_file_size_commit_log": DEV_COMMITLOG_SEGMENT}
    broker = load_settings(BrokerConfig, None, broker_overrides, dev_defaults)
    for config in (namesrv, broker):
        check_tls(config)
    if broker.tls_server_mode != "disabled":  # the broker's hop to its own NameServer, in-process
        broker.tls_enable, broker.tls_client_auth_server = True, False
    return namesrv, broker


async def start_console(console: ConsoleServer, port: int | None) -> int:
    """Start on `port`; None: 8080, or any free port when something else has it (as metrics do)."""
    console.port = CONSOLE_PORT if port is None else port
    try:
        return await console.start()
    except OSError as exc:
        if port is not None:
            raise
        log.warning("console port %d is not free (%s): using any free port", CONSOLE_PORT, exc)
        console.port = 0
        return await console.start()
