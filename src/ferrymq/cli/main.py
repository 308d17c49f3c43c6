"""The `ferrymq` command: one entry point with a sub-command per role and tool.

Sub-commands are imported when used, not at start: each role pulls in its own libraries (the AMQP
gateway SQLAlchemy and aiohttp, the proxy gRPC, ...), and an admin command should not wait for them.
"""

from __future__ import annotations

import importlib

import click

from ferrymq.cli import logs

COMMANDS = {  # name: "module:attribute" under ferrymq.cli
    "admin": "admin:admin",
    "amqp": "amqp:amqp",
    "bench": "bench:bench",
    "config": "config:config",
    "broker": "broker:broker",
    "consume": "clients:consume",
    "console": "console:console",
    "controller": "controller:controller",
    "dev": "dev:dev",
    "meta": "meta:meta",
    "migrate": "migrate:migrate",
    "namesrv": "namesrv:namesrv",
    "operator": "operator:operator",
    "produce": "clients:produce",
    "proxy": "proxy:proxy",
    "relay": "relay:relay",
    "spark": "spark:spark",
}


class LazyGroup(click.Group):
    """A group whose sub-commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = COMMANDS.get(cmd_name)
        if where is None:
            return None
        module, _, attribute = where.partition(":")
        command = getattr(importlib.import_module(f"ferrymq.cli.{module}"), attribute)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ferrymq")
@click.option(
    "--log-level", type=click.Choice(logs.LEVELS, case_sensitive=False), default="info", show_default=True,
    envvar="FERRYMQ_LOG_LEVEL", help="What the servers log (FERRYMQ_LOG_LEVEL).",
)  # fmt: skip
@click.option(
    "--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
    envvar="FERRYMQ_LOG_FORMAT", help="Plain lines, or one JSON object a line for log collectors.",
)  # fmt: skip
def main(log_level: str, log_format: str) -> None:
    """ferrymq: a RocketMQ-compatible message broker in Python."""
    logs.chosen = (log_level.lower(), log_format)
