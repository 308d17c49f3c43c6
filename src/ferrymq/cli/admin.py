"""`ferrymq admin`: cluster administration, as RocketMQ's mqadmin does it.

Each area adds its sub-commands here with `admin.add_command(...)`; they take the Admin client from
`with_admin(ctx, ...)`, so every command accepts `-n/--namesrv` (or NAMESRV_ADDR). Commands also
answer to mqadmin's names (topicList, consumerProgress, brokerStatus, ...).
"""

from __future__ import annotations

import click

from ferrymq.cli.admin_common import OUTPUT, AdminGroup, AdminTarget, broker_list, show, with_admin
from ferrymq.cli.clients import credential_options
from ferrymq.client import Admin


@click.group(cls=AdminGroup)
@click.option(
    "-n", "--namesrv", default="127.0.0.1:9876", show_default=True, envvar="NAMESRV_ADDR",
    help="NameServer address(es), \"host:port;host:port\" (or NAMESRV_ADDR).",
)  # fmt: skip
@credential_options
@click.pass_context
def admin(ctx: click.Context, namesrv: str, access_key: str | None, secret_key: str | None) -> None:
    """Administer a cluster: topics, consumer groups, brokers, users and ACL rules."""
    ctx.obj = AdminTarget(namesrv, access_key, secret_key)


@admin.command()
@click.option("-c", "--cluster", help="Only the topics with queues on this cluster's brokers.")
@OUTPUT
@click.pass_context
def topics(ctx: click.Context, cluster: str | None, output: str) -> None:
    """List every topic the NameServers know (mqadmin topicList)."""

    async def action(client: Admin) -> None:
        names = await (client.topics_by_cluster(cluster) if cluster else client.topics())
        if output == "json":
            show(output, names, "", [], [])
        else:
            for topic in names:
                click.echo(topic)

    with_admin(ctx, action)


@admin.command("create-topic")
@click.argument("topic")
@click.option("--queues", default=8, show_default=True, help="Read and write queues per broker.")
@click.option("--cluster", help="Only on this cluster's masters (default: every master).")
@click.option("--order", is_flag=True, help="Mark the topic as ordered.")
@click.option(
    "-b", "--brokers", callback=broker_list,
    help="Only on these broker groups' masters (names or master addresses: b1,b2): the topic pinned to them.",
)  # fmt: skip
@click.pass_context
def create_topic(
    ctx: click.Context, topic: str, queues: int, cluster: str | None, order: bool, brokers: list[str] | None
) -> None:
    """Create or update TOPIC."""

    async def action(client: Admin) -> None:
        await client.create_topic(topic, queues, cluster=cluster, order=order, brokers=brokers)
        where = f" on {', '.join(brokers)}" if brokers else ""
        click.echo(f"topic {topic}: {queues} queues per broker{where}")

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
@OUTPUT
@click.pass_context
def progress(ctx: click.Context, group: str, topic: str, output: str) -> None:
    """Show GROUP's progress on TOPIC: offsets and lag per queue."""

    async def action(client: Admin) -> None:
        progress = await client.consumer_progress(group, topic)
        rows = [
            [p.queue.broker_name, p.queue.queue_id, p.broker_offset, p.consumer_offset, p.lag]
            for p in progress
        ]
        columns = ["broker", "queue", "broker offset", "consumer offset", "lag"]
        data = [dict(zip(columns, row, strict=True)) for row in rows]
        show(output, data, f"{group} on {topic} (total lag {sum(p.lag for p in progress)})", columns, rows)

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
from ferrymq.cli.admin_move import MOVE_COMMANDS  # noqa: E402
from ferrymq.cli.admin_quota import quota  # noqa: E402
from ferrymq.cli.admin_settings import SETTINGS_COMMANDS  # noqa: E402
from ferrymq.cli.admin_status import STATUS_COMMANDS  # noqa: E402
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
for command in (*STATUS_COMMANDS, *SETTINGS_COMMANDS, *MOVE_COMMANDS):
    admin.add_command(command)
# mqadmin's names for the commands above
for mqadmin_name, command in {
    "topicList": topics, "updateTopic": create_topic, "deleteTopic": delete_topic, "clusterList": cluster,
    "queryMsgById": message, "queryMsgByKey": query_key, "resetOffsetByTime": reset_offset,
}.items():  # fmt: skip
    admin.add_command(command, mqadmin_name)
