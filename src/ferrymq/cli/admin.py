"""`ferrymq admin`: cluster administration, as RocketMQ's mqadmin does it.

Each area adds its sub-commands here with `admin.add_command(...)`; they take the Admin client from
`admin_client(ctx)` so every command shares the `--namesrv` option.
"""

from __future__ import annotations

import click

from ferrymq.cli.admin_common import AdminTarget, print_table, with_admin
from ferrymq.cli.clients import credential_options
from ferrymq.client import Admin


@click.group()
@click.option("--namesrv", default="127.0.0.1:9876", show_default=True, help="NameServer address(es).")
@credential_options
@click.pass_context
def admin(ctx: click.Context, namesrv: str, access_key: str | None, secret_key: str | None) -> None:
    """Administer a cluster: topics, consumer groups, brokers, users and ACL rules."""
    ctx.obj = AdminTarget(namesrv, access_key, secret_key)


@admin.command()
@click.pass_context
def topics(ctx: click.Context) -> None:
    """List every topic the NameServers know."""

    async def action(client: Admin) -> None:
        for topic in await client.topics():
            click.echo(topic)

    with_admin(ctx, action)


@admin.command("create-topic")
@click.argument("topic")
@click.option("--queues", default=8, show_default=True, help="Read and write queues per broker.")
@click.option("--cluster", help="Only on this cluster's masters (default: every master).")
@click.option("--order", is_flag=True, help="Mark the topic as ordered.")
@click.pass_context
def create_topic(ctx: click.Context, topic: str, queues: int, cluster: str | None, order: bool) -> None:
    """Create or update TOPIC."""

    async def action(client: Admin) -> None:
        await client.create_topic(topic, queues, cluster=cluster, order=order)
        click.echo(f"topic {topic}: {queues} queues per broker")

    with_admin(ctx, action)


@admin.command("delete-topic")
@click.argument("topic")
@click.option("--cluster", help="Only on this cluster's masters (default: every master).")
@click.pass_context
def delete_topic(ctx: click.Context, topic: str, cluster: str | None) -> None:
    """Delete TOPIC from the brokers and the NameServers."""

    async def action(client: Admin) -> None:
        await client.delete_topic(topic, cluster=cluster)
        click.echo(f"topic {topic} deleted")

    with_admin(ctx, action)


@admin.command()
@click.argument("group")
@click.argument("topic")
@click.pass_context
def progress(ctx: click.Context, group: str, topic: str) -> None:
    """Show GROUP's progress on TOPIC: offsets and lag per queue."""

    async def action(client: Admin) -> None:
        progress = await client.consumer_progress(group, topic)
        rows = [
            [p.queue.broker_name, p.queue.queue_id, p.broker_offset, p.consumer_offset, p.lag]
            for p in progress
        ]
        print_table(
            f"{group} on {topic} (total lag {sum(p.lag for p in progress)})",
            ["broker", "queue", "broker offset", "consumer offset", "lag"],
            rows,
        )

    with_admin(ctx, action)


from ferrymq.cli.admin_acl import acl  # noqa: E402 - after the group they join
from ferrymq.cli.admin_dlq import dlq  # noqa: E402
from ferrymq.cli.admin_groups import (  # noqa: E402
    amqp_queue,
    consumers,
    message,
    pause,
    query_key,
    rate_limit,
    reset_offset,
    resume,
)
from ferrymq.cli.admin_ha import cluster, elect_master  # noqa: E402
from ferrymq.cli.admin_quota import quota  # noqa: E402
from ferrymq.cli.admin_trace import trace  # noqa: E402

admin.add_command(acl)
admin.add_command(quota)
admin.add_command(cluster)
admin.add_command(dlq)
admin.add_command(elect_master)
admin.add_command(trace)
admin.add_command(message)
admin.add_command(message, "query-msg")  # mqadmin's name for it
admin.add_command(progress, "consumer-progress")
admin.add_command(query_key)
admin.add_command(reset_offset)
admin.add_command(pause)
admin.add_command(resume)
admin.add_command(rate_limit)
admin.add_command(consumers)
admin.add_command(amqp_queue)
