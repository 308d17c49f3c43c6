"""`ferrymq relay`: put the messages producers diverted to a standby cluster back into the primary."""

from __future__ import annotations

import click

from ferrymq.cli.serving import serve
from ferrymq.client.standby import standby_topic


@click.command()
@click.option("--standby", "standby_namesrv", required=True, help="NameServer(s) of the standby cluster.")
@click.option("--primary", "primary_namesrv", required=True, help="NameServer(s) of the primary cluster.")
@click.option(
    "--primary-cluster", default="DefaultCluster", show_default=True,
    help="Whose standby topic to drain: producers divert to STANDBY_<cluster> by default.",
)  # fmt: skip
@click.option("--topic", help="The standby topic itself, when producers were given another one.")
@click.option("--group", help="Consumer group on the standby whose offsets are the relay's progress "
              "[default: RELAY_<topic>].")  # fmt: skip
def relay(standby_namesrv: str, primary_namesrv: str, primary_cluster: str, topic: str | None,
          group: str | None) -> None:  # fmt: skip
    """Move messages a primary cluster could not take from the standby back into the primary.

    Runs until SIGTERM or Ctrl-C; while the primary is down it waits, and once the primary takes
    messages again it sends each one to its own topic there, key, tags and properties unchanged.
    NameServer options take host:port[;host:port] or an address service's http:// URL.
    """
    from ferrymq.relay import Relay

    worker = Relay(standby_namesrv, primary_namesrv, topic or standby_topic(primary_cluster), group=group)

    async def start() -> str:
        await worker.start()
        return f"relay of {worker.topic} (group {worker.group}): {standby_namesrv} -> {primary_namesrv}"

    serve(start, worker.stop, "relay")
