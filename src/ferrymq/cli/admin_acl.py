"""`ferrymq admin acl`: users and ACL rules of a cluster, changed at run time on every broker of the
cluster and every NameServer (mqadmin's createUser, createAcl, ... with -c)."""

from __future__ import annotations

import click

from ferrymq.cli.admin_common import print_table, with_admin
from ferrymq.client import Admin

_ACTIONS = "Pub, Sub, Create, Update, Delete, Get, List or All"
cluster_option = click.option("--cluster", "-c", help="Only this cluster's brokers (default: every broker).")


@click.group()
def acl() -> None:
    """Users (AccessKey/SecretKey) and their ACL rules."""


def _done(what: str, targets: list[str]) -> None:
    click.echo(f"{what} on {len(targets)} node(s): {', '.join(targets)}")


@acl.command("create-user")
@click.argument("username")
@click.option("--password", prompt=True, hide_input=True, help="The user's SecretKey.")
@click.option(
    "--type", "user_type", type=click.Choice(["Normal", "Super"]), default="Normal", show_default=True
)
@cluster_option
@click.pass_context
def create_user(
    ctx: click.Context, username: str, password: str, user_type: str, cluster: str | None
) -> None:
    """Create USERNAME (its AccessKey)."""

    async def action(client: Admin) -> None:
        _done(
            f"user {username} created",
            await client.create_user(username, password, user_type=user_type, cluster=cluster),
        )

    with_admin(ctx, action)


@acl.command("update-user")
@click.argument("username")
@click.option("--password", help="A new SecretKey.")
@click.option("--type", "user_type", type=click.Choice(["Normal", "Super"]))
@click.option("--status", type=click.Choice(["enable", "disable"]))
@cluster_option
@click.pass_context
def update_user(
    ctx, username: str, password: str | None, user_type: str | None, status: str | None, cluster
) -> None:
    """Change USERNAME's password, type or status."""

    async def action(client: Admin) -> None:
        targets = await client.update_user(
            username, password=password, user_type=user_type, status=status, cluster=cluster
        )
        _done(f"user {username} updated", targets)

    with_admin(ctx, action)


@acl.command("delete-user")
@click.argument("username")
@cluster_option
@click.pass_context
def delete_user(ctx: click.Context, username: str, cluster: str | None) -> None:
    """Delete USERNAME and its rules."""

    async def action(client: Admin) -> None:
        _done(f"user {username} deleted", await client.delete_user(username, cluster=cluster))

    with_admin(ctx, action)


@acl.command("list-users")
@cluster_option
@click.pass_context
def list_users(ctx: click.Context, cluster: str | None) -> None:
    """List the users (never their passwords)."""

    async def action(client: Admin) -> None:
        users = await client.list_users(cluster=cluster)
        print_table(
            "users",
            ["username", "type", "status"],
            [[u["username"], u["userType"], u["userStatus"]] for u in users],
        )

    with_admin(ctx, action)


def _acl_command(name: str, update: bool):
    @acl.command(name)
    @click.argument("username")
    @click.option(
        "--resource",
        "-r",
        "resources",
        multiple=True,
        required=True,
        help="Cluster, Topic:<name>, Group:<name>, a prefix (Topic:order-*) or *; repeatable.",
    )
    @click.option("--actions", "-a", required=True, help=f"Comma-separated: {_ACTIONS}.")
    @click.option("--decision", type=click.Choice(["Allow", "Deny"]), default="Allow", show_default=True)
    @click.option("--source-ip", "source_ips", multiple=True, help="Address or CIDR range; repeatable.")
    @cluster_option
    @click.pass_context
    def command(ctx, username, resources, actions, decision, source_ips, cluster) -> None:
        async def action(client: Admin) -> None:
            targets = await client.create_acl(
                username, list(resources), [a.strip() for a in actions.split(",") if a.strip()],
                decision=decision, source_ips=list(source_ips), cluster=cluster, update=update,
            )  # fmt: skip
            _done(f"rules of {username} {'updated' if update else 'created'}", targets)

        with_admin(ctx, action)

    command.__doc__ = f"{'Update' if update else 'Add'} USERNAME's rules: ACTIONS on each RESOURCE."
    return command


create_acl = _acl_command("create-acl", update=False)
update_acl = _acl_command("update-acl", update=True)


@acl.command("delete-acl")
@click.argument("username")
@click.option("--resource", "-r", "resources", multiple=True, help="Only the rules on these (default: all).")
@cluster_option
@click.pass_context
def delete_acl(ctx: click.Context, username: str, resources: tuple[str, ...], cluster: str | None) -> None:
    """Delete USERNAME's rules."""

    async def action(client: Admin) -> None:
        _done(
            f"rules of {username} deleted",
            await client.delete_acl(username, list(resources), cluster=cluster),
        )

    with_admin(ctx, action)


@acl.command("list-acls")
@click.option("--user", "username", default="", help="Only this user's rules.")
@click.option("--resource", default="", help="Only rules whose resource contains this.")
@cluster_option
@click.pass_context
def list_acls(ctx: click.Context, username: str, resource: str, cluster: str | None) -> None:
    """List the rules."""

    async def action(client: Admin) -> None:
        acls = await client.list_acls(
            cluster=cluster, subject=f"User:{username}" if username else "", resource=resource
        )
        rows = [
            [
                a["subject"],
                e["resource"],
                ",".join(e["actions"]),
                e["decision"],
                ",".join(e.get("sourceIps") or []) or "*",
            ]
            for a in acls
            for p in a.get("policies") or []
            for e in p.get("entries") or []
        ]
        print_table("ACL rules", ["subject", "resource", "actions", "decision", "source IPs"], rows)

    with_admin(ctx, action)
