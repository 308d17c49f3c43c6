"""`ferrymq controller`: one node of the controller Raft group (RocketMQ's mqcontroller)."""

from __future__ import annotations

from pathlib import Path

import click

from ferrymq.cli.metrics import metrics_option, start_metrics, stop_metrics
from ferrymq.cli.option_settings import settings_file
from ferrymq.cli.serving import host_port, serve
from ferrymq.cli.tls import client_tls_options, server_tls_options, tls_settings
from ferrymq.controller.config import ControllerConfig, PeersError, parse_peers
from ferrymq.controller.server import Controller
from ferrymq.metrics.http import MetricsServer
from ferrymq.metrics.registry import Registry
from ferrymq.metrics.roles import add_controller
from ferrymq.net.tls import TLSSettings


def controller_options(prefix: str = ""):
    """The options that make a controller node; `prefix` keeps them apart when embedded (namesrv)."""

    def decorate(command):
        for option in reversed(
            [
                click.option(
                    f"--{prefix}id", "node_id", required=not prefix, help="This node's id among the peers."
                ),
                click.option(
                    f"--{prefix}peers",
                    "peers",
                    required=not prefix,
                    help='Every node\'s Raft address: "n1@host:port;n2@host:port;n3@host:port".',
                ),
                click.option(
                    f"--{prefix}data-dir",
                    "data_dir",
                    type=click.Path(path_type=Path, file_okay=False),
                    help="Where the Raft log and snapshots live.",
                ),
                click.option(
                    f"--{prefix}listen",
                    "controller_listen",
                    default="0.0.0.0:9878",
                    show_default=True,
                    callback=host_port,
                    help="Address brokers and admins reach this controller on (port 0 picks one).",
                ),
                click.option(
                    f"--{prefix}scan-interval",
                    "scan_interval",
                    default=5000,
                    show_default=True,
                    help="ms between two looks for brokers whose heartbeats stopped.",
                ),
                click.option(
                    f"--{prefix}elect-unclean-master",
                    "unclean",
                    is_flag=True,
                    help="When no SyncStateSet member is alive, elect any replica (may lose messages).",
                ),
                click.option(
                    f"--{prefix}raft-password",
                    "raft_password",
                    default="",
                    help="The group's shared secret: Raft messages are encrypted and authenticated with it "
                    "(every node needs the same one; better from FERRYMQ_RAFT_PASSWORD).",
                ),
            ]
        ):
            command = option(command)
        return command

    return decorate


def make_controller(
    node_id: str,
    peers: str,
    data_dir: Path | None,
    controller_listen: tuple[str, int],
    scan_interval: int,
    unclean: bool,
    raft_password: str = "",
    tls: TLSSettings | None = None,
) -> Controller:
    """``tls``: its remoting port's (pysyncobj speaks no TLS: the Raft port is protected by
    ``raft_password`` instead)."""
    try:
        config = ControllerConfig(
            node_id=node_id,
            peers=parse_peers(peers),
            data_dir=data_dir or Path("controller-data") / node_id,
            listen_host=controller_listen[0],
            listen_port=controller_listen[1],
            scan_not_active_broker_interval=scan_interval,
            enable_elect_unclean_master=unclean,
            raft_password=raft_password,
            **vars(tls or TLSSettings()),
        )
    except PeersError as exc:
        raise click.BadParameter(str(exc), param_hint="--peers") from None
    return Controller(config)


@click.command()
@settings_file
@controller_options()
@server_tls_options
@client_tls_options
@metrics_option("controller")
def controller(
    node_id: str, peers: str, data_dir: Path | None, controller_listen: tuple[str, int], scan_interval: int,
    unclean: bool, raft_password: str, metrics_port: int | None, **tls_options,
) -> None:  # fmt: skip
    """Start a controller: with its peers it elects each broker group's master (controller mode)."""
    tls = tls_settings(tls_options)
    node = make_controller(
        node_id, peers, data_dir, controller_listen, scan_interval, unclean, raft_password, tls
    )
    registry = Registry()
    metrics: MetricsServer | None = None

    async def start() -> str:
        nonlocal metrics
        await node.start()
        add_controller(registry, node)
        metrics, line = await start_metrics(registry, controller_listen[0], metrics_port, "controller")
        return f"controller {node_id} listening on {node.config.address}{line}"

    async def stop() -> None:
        registry.stopping = True
        await node.stop()
        await stop_metrics(metrics)

    serve(start, stop, "controller")
