"""`ferrymq dev`: a whole local cluster in one process, on loopback, with an embedded data directory.

Today: a NameServer and a Broker (more roles join as they arrive). Ctrl-C stops everything cleanly:
the broker unregisters, flushes and writes its checkpoint.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ferrymq.cli.metrics import metrics_option, start_metrics, stop_metrics
from ferrymq.cli.proxying import start_local_proxy
from ferrymq.cli.serving import serve
from ferrymq.metrics.registry import Registry
from ferrymq.metrics.roles import add_broker, add_namesrv, add_proxy
from ferrymq.store import StoreConfig, StoreError

if TYPE_CHECKING:
    from ferrymq.metrics.http import MetricsServer
    from ferrymq.proxy.server import ProxyServer


def default_data_dir() -> Path:
    """./.ferrymq/data when the current directory is writable, else ~/.ferrymq/data."""
    here = Path.cwd()
    return (here if os.access(here, os.W_OK) else Path.home()) / ".ferrymq" / "data"


@click.command()
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
@metrics_option("broker")
def dev(
    data_dir: Path, namesrv_port: int, broker_port: int, proxy_port: int, metrics_port: int | None
) -> None:
    """Start a local development cluster on DATA_DIR; stop it cleanly with Ctrl-C."""
    from ferrymq.broker.config import BrokerConfig
    from ferrymq.broker.server import Broker
    from ferrymq.namesrv.config import NamesrvConfig
    from ferrymq.namesrv.server import NameServer

    namesrv = NameServer(NamesrvConfig(listen_host="127.0.0.1", listen_port=namesrv_port))
    store = StoreConfig(store_path_root_dir=data_dir / "store", mapped_file_size_commit_log=256 << 20)
    broker = Broker(BrokerConfig(listen_host="127.0.0.1", listen_port=broker_port, store=store))
    proxy: ProxyServer | None = None
    registry = Registry()
    metrics: MetricsServer | None = None

    async def start() -> str:
        nonlocal proxy, metrics
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
        try:
            if proxy_port >= 0:
                proxy, port = await start_local_proxy(broker, "127.0.0.1", proxy_port)
                add_proxy(registry, proxy, broker.config.broker_cluster_name)
                lines.append(f"  Proxy       127.0.0.1:{port} (gRPC, RocketMQ 5 clients)")
            metrics, _ = await start_metrics(registry, "127.0.0.1", metrics_port, "broker")
        except BaseException:
            await stop()
            raise
        if metrics is not None:
            lines.append(
                f"  Metrics     http://127.0.0.1:{metrics.port}/metrics (and /health/live, /health/ready)"
            )
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
        if proxy is not None:
            await proxy.close()
        await broker.stop()
        await namesrv.stop()
        await stop_metrics(metrics)

    serve(start, stop, "ferrymq dev")
