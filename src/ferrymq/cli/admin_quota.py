"""`ferrymq admin quota`: production and consumption rates and connections per user, group and
topic, set at run time on every broker of the cluster."""

from __future__ import annotations

import click

from ferrymq.cli.admin_acl import cluster_option
from ferrymq.cli.admin_common import print_table, with_admin
from ferrymq.client import Admin

_KIND = click.Choice(["produce", "consume", "connections"])


@click.group()
def quota() -> None:
    """Rate limits (messages/s, bytes/s) and connection limits, enforced by the brokers."""


@quota.command("set")
@click.argument("kind", type=_KIND)
@click.argument("resource")
@click.option("--messages", "-m", type=float, default=0, help="Messages per second.")
@click.option("--bytes", "-b", "nbytes", type=float, default=0, help="Bytes (of bodies) per second.")
@click.option("--connections", type=int, default=0, help="Client connections at once (kind connections).")
@cluster_option
@click.pass_context
def set_quota(
    ctx, kind: str, resource: str, messages: float, nbytes: float, connections: int, cluster
) -> None:
    """Limit KIND on RESOURCE (Topic:<name>, User:<AccessKey>, Group:<name>), replacing its quota.

    \b
    ferrymq admin quota set produce Topic:orders -m 5000
    ferrymq admin quota set consume Group:billing -m 200 -b 1048576
    ferrymq admin quota set connections User:app --connections 10
    """

    async def action(client: Admin) -> None:
        targets = await client.set_quota(
            kind, resource, messages=messages, bytes=nbytes, connections=connections, cluster=cluster
        )
        click.echo(f"{kind} quota on {resource} set on {len(targets)} broker(s): {', '.join(targets)}")

    with_admin(ctx, action)


@quota.command("delete")
@click.argument("kind", type=_KIND)
@click.argument("resource")
@cluster_option
@click.pass_context
def delete_quota(ctx, kind: str, resource: str, cluster: str | None) -> None:
    """Remove the KIND quota on RESOURCE."""

    async def action(client: Admin) -> None:
        targets = await client.delete_quota(kind, resource, cluster=cluster)
        click.echo(f"{kind} quota on {resource} deleted on {len(targets)} broker(s): {', '.join(targets)}")

    with_admin(ctx, action)


@quota.command("list")
@cluster_option
@click.pass_context
def list_quotas(ctx, cluster: str | None) -> None:
    """The quotas (as the first broker that answers keeps them)."""

    async def action(client: Admin) -> None:
        rows = [
            [q["kind"], q["resource"], q.get("messages", "-"), q.get("bytes", "-"), q.get("connections", "-")]
            for q in await client.list_quotas(cluster=cluster)
        ]
        print_table("quotas", ["kind", "resource", "messages/s", "bytes/s", "connections"], rows)

    with_admin(ctx, action)
