"""`ferrymq config`: the settings every role reads, as a reference, and a check of a settings file."""

from __future__ import annotations

from pathlib import Path

import click

from ferrymq import settings

ROLES = ("broker", "namesrv", "controller")


def _role_config(role: str) -> type:
    if role == "broker":
        from ferrymq.broker.config import BrokerConfig

        return BrokerConfig
    if role == "namesrv":
        from ferrymq.namesrv.config import NamesrvConfig

        return NamesrvConfig
    from ferrymq.controller.config import ControllerConfig

    return ControllerConfig


@click.group()
def config() -> None:
    """The settings of each role: a reference, and a check of a settings file."""


@config.command()
@click.argument("role", type=click.Choice(ROLES))
def reference(role: str) -> None:
    """Every setting of ROLE with its type and default, as a Markdown table."""
    click.echo("| setting | type | default |\n|---|---|---|")
    for name, kind, default in settings.reference(_role_config(role)):
        click.echo(f"| `{name}` | {kind.replace('|', chr(92) + '|')} | `{default}` |")


@config.command()
@click.argument("role", type=click.Choice(ROLES[:2]))  # a controller's settings are its options
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False, exists=True))
def check(role: str, file: Path) -> None:
    """Read FILE (and the FERRYMQ_* environment) as ROLE would at start, and say what is wrong."""
    try:
        settings.load(_role_config(role), file)
    except settings.SettingsError as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"{file}: fine for a {role}")
