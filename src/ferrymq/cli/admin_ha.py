"""`ferrymq admin cluster` and `ferrymq admin elect-master`: broker groups and their masters."""

from __future__ import annotations

import dataclasses

import click

from ferrymq.cli.admin_common import OUTPUT, print_table, show, with_admin
from ferrymq.client import Admin, ClientError
from ferrymq.client.admin import BrokerGroupView

_CONTROLLER = click.option(
    "--controller",
    "controllers",
    envvar="FERRYMQ_CONTROLLER_ADDR",
    help='Controller address(es) "h:p;h:p" (controller mode): adds epochs and SyncStateSets.',
)


@click.command()
@_CONTROLLER
@OUTPUT
@click.pass_context
def cluster(ctx: click.Context, controllers: str | None, output: str) -> None:
    """Show every broker group: replicas, roles, offsets, and in controller mode epochs and SyncStateSets."""

    async def action(client: Admin) -> None:
        groups = await client.broker_groups(controllers)
        qos = {g.broker_name: await _replication_qos(client, g) for g in groups}
        if output == "json":
            show(output, [{**dataclasses.asdict(g), **qos[g.broker_name]} for g in groups], "", [], [])
            return
        if not groups:
            click.echo("no broker is registered")
            return
        for g in groups:
            summary = f"{g.broker_name} (cluster {g.cluster or '?'})"
            if g.master_epoch is not None:
                in_sync = sorted(r.broker_id for r in g.replicas if r.in_sync)
                summary += f": master {g.master_id} epoch {g.master_epoch}, "
                summary += f"SyncStateSet {in_sync} epoch {g.sync_state_set_epoch}"
            if q := qos[g.broker_name]:
                level, state = q["replication_qos_level"], q["replication_qos_state"]
                summary += f"; replication {state} (QoS level {level})"
            click.echo(summary)  # not a table title: those wrap at the table's width
            rows = [
                [
                    r.broker_id,
                    r.address,
                    r.role,
                    _yes_no(r.in_sync),
                    "-" if r.max_offset is None else r.max_offset,
                ]
                for r in g.replicas
            ]
            print_table("", ["id", "address", "role", "in sync", "max offset"], rows)

    with_admin(ctx, action)


@click.command("elect-master")
@click.argument("broker_name")
@click.argument("broker_id", type=int)
@click.option("--cluster", "cluster_name", default="", help="The group's cluster (informational).")
@_CONTROLLER
@click.pass_context
def elect_master(
    ctx: click.Context, broker_name: str, broker_id: int, cluster_name: str, controllers: str | None
) -> None:
    """Make BROKER_ID the master of BROKER_NAME (it must be alive and in the SyncStateSet)."""
    if not controllers:
        raise click.UsageError("elect-master needs --controller (or FERRYMQ_CONTROLLER_ADDR)")

    async def action(client: Admin) -> None:
        master = await client.elect_master(controllers, broker_name, broker_id, cluster_name)
        click.echo(
            f"{broker_name}: master is broker {master.master_broker_id} ({master.master_address}) "
            f"at epoch {master.master_epoch}"
        )

    with_admin(ctx, action)


async def _replication_qos(client: Admin, group: BrokerGroupView) -> dict[str, str]:
    """The master's replication QoS level and state, as its runtime info says; {} when it has none."""
    master = next((r for r in group.replicas if r.role == "master"), None)
    if master is None or master.max_offset is None:
        return {}
    try:
        table = await client.broker_runtime(master.address)
    except ClientError:  # gone meanwhile: the table shows it without a state
        return {}
    if "replicationQosState" not in table:
        return {}
    return {"replication_qos_level": table["replicationQosLevel"],
            "replication_qos_state": table["replicationQosState"]}  # fmt: skip


def _yes_no(value: bool | None) -> str:
    return "-" if value is None else "yes" if value else "no"
