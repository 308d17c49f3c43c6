"""The `ferrymq` command: one entry point with a sub-command per role and tool."""

import click

from ferrymq.cli.admin import admin
from ferrymq.cli.amqp import amqp
from ferrymq.cli.bench import bench
from ferrymq.cli.broker import broker
from ferrymq.cli.clients import consume, produce
from ferrymq.cli.controller import controller
from ferrymq.cli.dev import dev
from ferrymq.cli.meta import meta
from ferrymq.cli.migrate import migrate
from ferrymq.cli.namesrv import namesrv
from ferrymq.cli.operator import operator
from ferrymq.cli.proxy import proxy
from ferrymq.cli.spark import spark


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ferrymq")
def main() -> None:
    """ferrymq: a RocketMQ-compatible message broker in Python."""


main.add_command(admin)
main.add_command(amqp)
main.add_command(bench)
main.add_command(broker)
main.add_command(consume)
main.add_command(controller)
main.add_command(dev)
main.add_command(meta)
main.add_command(migrate)
main.add_command(namesrv)
main.add_command(operator)
main.add_command(produce)
main.add_command(proxy)
main.add_command(spark)
