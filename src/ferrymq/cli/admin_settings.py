"""`ferrymq admin` changes under mqadmin's names: broker and NameServer settings
(getBrokerConfig, updateBrokerConfig, getNamesrvConfig, updateNamesrvConfig), a broker's write
permission on the NameServers (wipeWritePerm, addWritePerm), and cloneGroupOffset."""

from __future__ import annotations

import click

from ferrymq.cli.admin_common import BROKER, CLUSTER, OUTPUT, broker_addrs, show, show_settings, with_admin
from ferrymq.client import Admin

KEY = click.option(
    "-k", "--key", required=True, help="The setting's name, as RocketMQ spells it (camelCase)."
)
VALUE = click.option("-v", "--value", required=True)


@click.command("getBrokerConfig")
@BROKER
@CLUSTER
@OUTPUT
@click.pass_context
def get_broker_config(ctx: click.Context, broker_addr: str | None, cluster: str | None, output: str) -> None:
    """A broker's settings (or every master's)."""

    async def action(client: Admin) -> None:
        addrs = await broker_addrs(client, broker_addr, cluster)
        show_settings(
            output,
            {name: await client.broker_config(addr) for name, addr in addrs.items()},
            "broker settings",
        )

    with_admin(ctx, action)


@click.command("updateBrokerConfig")
@KEY
@VALUE
@BROKER
@CLUSTER
@click.pass_context
def update_broker_config(
    ctx: click.Context, key: str, value: str, broker_addr: str | None, cluster: str | None
) -> None:
    """Change a setting on a running broker (or every master); it lasts until the broker restarts."""

    async def action(client: Admin) -> None:
        for addr in await client.update_broker_config({key: value}, broker_addr=broker_addr, cluster=cluster):
            click.echo(f"{addr}: {key}={value}")

    with_admin(ctx, action)


@click.command("getNamesrvConfig")
@OUTPUT
@click.pass_context
def get_namesrv_config(ctx: click.Context, output: str) -> None:
    """Every NameServer's settings."""

    async def action(client: Admin) -> None:
        show_settings(output, await client.namesrv_config(), "NameServer settings")

    with_admin(ctx, action)


@click.command("updateNamesrvConfig")
@KEY
@VALUE
@click.pass_context
def update_namesrv_config(ctx: click.Context, key: str, value: str) -> None:
    """Change a setting on every NameServer; it lasts until they restart."""

    async def action(client: Admin) -> None:
        for addr in await client.update_namesrv_config({key: value}):
            click.echo(f"{addr}: {key}={value}")

    with_admin(ctx, action)


def _perm_command(name: str, verb: str, doc: str):
    @click.command(name, help=doc)
    @click.option("-b", "--broker-name", required=True, help="The broker group's name.")
    @OUTPUT
    @click.pass_context
    def command(ctx: click.Context, broker_name: str, output: str) -> None:
        async def action(client: Admin) -> None:
            change = client.wipe_write_perm if verb == "wipe" else client.add_write_perm
            counts = await change(broker_name)
            rows = [[addr, count] for addr, count in counts.items()]
            show(output, counts, f"{verb} write permission of {broker_name}", ["NameServer", "topics"], rows)

        with_admin(ctx, action)

    return command


wipe_write_perm = _perm_command(
    "wipeWritePerm", "wipe", "Stop producers writing to a broker (before maintenance): its topics lose "
    "write permission on every NameServer, until addWritePerm or the broker registers again."
)  # fmt: skip
add_write_perm = _perm_command(
    "addWritePerm", "add", "Give a broker's topics their write permission back on every NameServer."
)


@click.command("cloneGroupOffset")
@click.option("-s", "--src-group", required=True)
@click.option("-d", "--dest-group", required=True)
@click.option("-t", "--topic", help="Only this topic (default: every topic the source group has offsets on).")
@click.option(
    "--offline", is_flag=True, help="Clone even topics the online source group no longer subscribes to."
)
@click.pass_context
def clone_group_offset(
    ctx: click.Context, src_group: str, dest_group: str, topic: str | None, offline: bool
) -> None:
    """Give a group another group's committed offsets."""

    async def action(client: Admin) -> None:
        brokers = await client.clone_group_offset(src_group, dest_group, topic, offline=offline)
        click.echo(f"offsets of {src_group} cloned to {dest_group} on {', '.join(brokers)}")

    with_admin(ctx, action)


SETTINGS_COMMANDS = (
    get_broker_config, update_broker_config, get_namesrv_config, update_namesrv_config, wipe_write_perm,
    add_write_perm, clone_group_offset,
)  # fmt: skip
