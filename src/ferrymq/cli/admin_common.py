"""What every `ferrymq admin` sub-command shares: an Admin client on the group's NameServers, and
tables. Apart from admin.py, which imports the sub-commands, so they need not import it back."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import click
from rich.console import Console
from rich.table import Table

from ferrymq.cli.clients import run_client
from ferrymq.client import Admin


@dataclass(frozen=True)
class AdminTarget:
    """What `ferrymq admin` was told: the NameServers, and the credentials to sign with."""

    namesrv: str
    access_key: str | None = None
    secret_key: str | None = None


def with_admin(ctx: click.Context, action: Callable[[Admin], Awaitable[None]]) -> None:
    """Run `action` with an Admin connected to the group's NameServers, then close it."""
    target: AdminTarget = ctx.obj

    async def run() -> None:
        async with Admin(
            target.namesrv, access_key=target.access_key, secret_key=target.secret_key
        ) as client:
            await action(client)

    run_client(run())


def print_table(title: str, columns: list[str], rows: Sequence[Sequence[object]]) -> None:
    table = Table(title=title)
    for name in columns:
        table.add_column(name)
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    Console().print(table)
