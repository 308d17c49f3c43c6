"""What every server command shares: HOST:PORT options and running until SIGTERM or Ctrl-C."""

from __future__ import annotations

import asyncio
import gc
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ferrymq import _native, settings
from ferrymq.cli import logs
from ferrymq.cli.logs import configure_logging
from ferrymq.net import install_uvloop


def host_port(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, int] | None:
    """click callback: "host:port" (IPv6 in brackets) → (host, port), or a clear usage error."""
    if value is None:
        return None
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise click.BadParameter(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)


T = TypeVar("T")


def load_settings(
    cls: type[T], config_file: Path | None, overrides: dict[str, Any], defaults: dict[str, Any] | None = None
) -> T:
    """A role's settings (see ferrymq.settings), or the command stopped with the one clear line."""
    try:
        return settings.load(cls, config_file, overrides, defaults=defaults)
    except settings.SettingsError as e:
        raise click.ClickException(str(e)) from None


def serve(start: Callable[[], Awaitable[str]], stop: Callable[[], Awaitable[None]], what: str) -> None:
    """Run `start` (which returns the line to print), then wait for SIGINT/SIGTERM and run `stop`."""
    configure_logging(*logs.chosen)
    install_uvloop()

    async def main() -> None:
        click.echo(await start())
        click.echo(_native.status())
        quiet_gc()
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, done.set)
        await done.wait()
        click.echo(f"{what} stopping ...")
        await stop()
        click.echo(f"{what} stopped.")

    try:
        asyncio.run(main())
    except OSError as exc:  # typically the port is taken
        raise click.ClickException(f"{what} cannot start: {exc.strerror or exc}") from None


def quiet_gc() -> None:
    """Keep the cyclic GC off the latency path of a long-running server (or benchmark).

    Everything alive after start-up lives as long as the process, so it is frozen out of every
    future collection, and young collections run every 50,000 allocations instead of 700: a server
    allocates short-lived objects per request, almost all freed by reference counting, and each
    full collection otherwise walks the whole heap (a pause of many milliseconds).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
