"""The --metrics-port option every server command shares, and starting its metrics server."""

from __future__ import annotations

from collections.abc import Callable

import click

from ferrymq.metrics.http import MetricsServer
from ferrymq.metrics.registry import Registry
from ferrymq.metrics.roles import DEFAULT_PORTS, serve_metrics


def metrics_option(role: str) -> Callable:
    return click.option(
        "--metrics-port",
        type=click.IntRange(-1, 65535),
        default=None,
        help=f"Serve /metrics, /health/live and /health/ready on this port of the listen host "
        f"(0: any free port; -1: off) [default: {DEFAULT_PORTS[role]}, or any free port when taken].",
    )


async def start_metrics(
    registry: Registry, host: str, port: int | None, role: str
) -> tuple[MetricsServer | None, str]:
    """The metrics server (None when off) and the words to add to the role's start-up line."""
    server = await serve_metrics(registry, host, port, role)
    return server, "" if server is None else f"; metrics on http://{host}:{server.port}/metrics"


async def stop_metrics(server: MetricsServer | None) -> None:
    if server is not None:
        await server.close()
