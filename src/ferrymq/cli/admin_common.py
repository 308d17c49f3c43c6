"""What every `ferrymq admin` sub-command shares: an Admin client on the NameServers named by
`-n/--namesrv` (before or after the sub-command's name, as mqadmin users type it) or NAMESRV_ADDR,
and listings as rich tables or, with `--output json`, as JSON. Apart from admin.py, which imports
the sub-commands, so they need not import it back."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

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


OUTPUT = click.option(
    "-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True,
    help="A text table, or JSON for scripts.",
)  # fmt: skip


def show(output: str, data: Any, title: str, columns: list[str], rows: Sequence[Sequence[object]]) -> None:
    """`data` as JSON, or `rows` as a table."""
    if output == "json":
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        print_table(title, columns, rows)


def show_rows(output: str, title: str, columns: list[str], rows: Sequence[Sequence[object]]) -> None:
    """A table, or in JSON a list of objects keyed by the column names."""
    show(output, [dict(zip(columns, row, strict=True)) for row in rows], title, columns, rows)


def show_settings(output: str, settings: dict[str, dict[str, str]], what: str) -> None:
    """Settings of one or more servers: `settings` is server → name → value."""
    rows = [
        [server, name, value] for server, table in settings.items() for name, value in sorted(table.items())
    ]
    show(output, settings, what, ["server", "name", "value"], rows)


async def broker_addrs(client: Admin, broker_addr: str | None, cluster: str | None) -> dict[str, str]:
    """The one broker asked for, or every master (of `cluster`): name → address."""
    if broker_addr:
        return {broker_addr: broker_addr}
    masters = await client.masters(cluster)
    if not masters:
        raise click.ClickException("no master broker is registered")
    return masters


def broker_list(ctx: click.Context, param: click.Parameter, value: str | None) -> list[str] | None:
    """A comma-separated list of broker groups (names or master addresses)."""
    if value is None:
        return None
    names = [b.strip() for b in value.split(",") if b.strip()]
    if not names:
        raise click.BadParameter("name at least one broker group", ctx, param)
    return names


BROKER = click.option("-b", "--broker-addr", help="One broker's address (default: every master).")
CLUSTER = click.option("-c", "--cluster", help="Only the masters of this cluster.")


def _namesrv_here(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value:
        ctx.obj = replace(ctx.obj, namesrv=value)


NAMESRV_HERE = click.Option(
    ["-n", "--namesrv"], expose_value=False, callback=_namesrv_here,
    help="NameServer address(es), \"host:port;host:port\" (overrides the one before the command).",
)  # fmt: skip


class AdminGroup(click.Group):
    """Gives every sub-command (and theirs) a `-n/--namesrv` option of its own, as mqadmin has."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        _accept_namesrv(cmd)
        super().add_command(cmd, name)


def _accept_namesrv(cmd: click.Command) -> None:
    if not any(isinstance(p, click.Option) and "--namesrv" in p.opts for p in cmd.params):
        cmd.params.append(NAMESRV_HERE)
    if isinstance(cmd, click.Group):
        for sub in cmd.commands.values():
            _accept_namesrv(sub)
