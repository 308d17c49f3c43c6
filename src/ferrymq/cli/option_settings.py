"""Settings files for the roles whose settings are their options (controller, proxy, AMQP gateway,
metadata service, console): `-c FILE` in TOML, then FERRYMQ_<OPTION> environment variables, then the
options themselves, read with the same names, spelling and errors as the brokers' and NameServers'
settings (ferrymq.settings): `--max-message-size` is `max_message_size` (or `maxMessageSize`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ferrymq import settings

F = TypeVar("F", bound=Callable[..., Any])


def settings_file(command: F) -> F:
    """Give `command` a `-c/--config FILE` option and FERRYMQ_<OPTION> environment variables."""
    return click.option(
        "-c", "--config", "config_file", type=click.Path(path_type=Path, dir_okay=False, exists=True),
        is_eager=True, expose_value=False, callback=_defaults_from_file_and_environment,
        help="Settings file (TOML): the options' names (listen = \"0.0.0.0:8081\"); FERRYMQ_<OPTION> "
             "environment variables and the options themselves win over it.",
    )(command)  # fmt: skip


def _defaults_from_file_and_environment(
    ctx: click.Context, param: click.Parameter, path: Path | None
) -> None:
    """Make the file's and the environment's values the options' defaults (so flags still win),
    checked against each option's type now."""
    options: dict[str, click.Option] = {}  # by its value's name and by its long flags' (`id`: --id)
    for p in ctx.command.params:
        if isinstance(p, click.Option) and p.name and p is not param:
            options[p.name] = p
            options.update((settings.snake(o.lstrip("-")), p) for o in p.opts if o.startswith("--"))
    values: dict[str, tuple[Any, str]] = {}
    if path is not None:
        try:
            found = settings.read_toml(path)
        except settings.SettingsError as e:
            raise click.ClickException(str(e)) from None
        for key, raw in found.items():
            name = key if key in options else settings.snake(key)
            if name not in options:
                raise click.ClickException(settings.unknown(key, options, str(path)))
            values[name] = (raw, str(path))
    for name in options:
        env = os.environ.get(settings.ENV_PREFIX + name.upper())
        if env is not None:
            values[name] = (env, f"${settings.ENV_PREFIX}{name.upper()}")
    defaults = dict(ctx.default_map or {})
    for name, (raw, where) in values.items():
        option = options[name]
        try:
            option.type_cast_value(ctx, raw)
        except click.BadParameter as e:
            raise click.ClickException(f"setting {name!r} {e.message} (from {where})") from None
        assert option.name is not None
        defaults[option.name] = raw
    ctx.default_map = defaults
