"""`ferrymq admin` look-ups under mqadmin's names: where topics and groups stand (topicStatus,
topicClusterList, topicRoute, consumerProgress, producerConnection, consumerConnection,
consumerStatus, queryCq, queryTopicConsumeByWho, getSystemTopicList) and what brokers report
(brokerStatus, getAllTopicConfig, getAllSubscriptionGroup)."""

from __future__ import annotations

import datetime
from typing import Any

import click
import msgspec

from ferrymq.cli.admin_common import BROKER, CLUSTER, OUTPUT, broker_addrs, print_table, show, with_admin
from ferrymq.client import Admin, AdminRefused, ConsumeStats
from ferrymq.client.instance import TopicRoute


def _when(ms: int) -> str:
    return (
        datetime.datetime.fromtimestamp(ms / 1000).isoformat(sep=" ", timespec="seconds") if ms > 0 else "-"
    )


def _plain(value: object) -> Any:
    """Structs as the JSON RocketMQ tools write (camelCase), for --output json."""
    return msgspec.to_builtins(value)


async def _route(client: Admin, topic: str) -> TopicRoute:
    """The topic's route, or a clear error when no NameServer knows the topic."""
    route = await client.instance.existing_route(topic)
    if route is None:
        raise click.ClickException(f"topic {topic} does not exist")
    return route


@click.command("topicStatus")
@click.option("-t", "--topic", required=True)
@OUTPUT
@click.pass_context
def topic_status(ctx: click.Context, topic: str, output: str) -> None:
    """Each queue of a topic: min and max offset, last message stored."""

    async def action(client: Admin) -> None:
        stats = await client.topic_stats(topic)
        rows = [[mq.broker_name, mq.queue_id, o.min_offset, o.max_offset, _when(o.last_update_timestamp)]
                for mq, o in stats.items()]  # fmt: skip
        data = [
            {"brokerName": mq.broker_name, "queueId": mq.queue_id, **_plain(o)} for mq, o in stats.items()
        ]
        show(output, data, f"{topic}", ["broker", "queue", "min offset", "max offset", "last updated"], rows)

    with_admin(ctx, action)


@click.command("topicClusterList")
@click.option("-t", "--topic", required=True)
@OUTPUT
@click.pass_context
def topic_cluster_list(ctx: click.Context, topic: str, output: str) -> None:
    """The clusters a topic has queues in."""

    async def action(client: Admin) -> None:
        route = await _route(client, topic)
        info = await client.cluster_info()
        names = {b.broker_name for b in route.data.broker_datas}
        clusters = sorted(c for c, brokers in info.cluster_addr_table.items() if names & set(brokers))
        show(output, clusters, f"clusters of {topic}", ["cluster"], [[c] for c in clusters])

    with_admin(ctx, action)


@click.command("topicRoute")
@click.option("-t", "--topic", required=True)
@OUTPUT
@click.pass_context
def topic_route(ctx: click.Context, topic: str, output: str) -> None:
    """A topic's route as the NameServers give it: brokers and queues."""

    async def action(client: Admin) -> None:
        route = await _route(client, topic)
        rows = [[q.broker_name, route.masters.get(q.broker_name, "-"), q.read_queue_nums, q.write_queue_nums,
                 q.perm] for q in route.data.queue_datas]  # fmt: skip
        show(
            output,
            _plain(route.data),
            topic,
            ["broker", "master", "read queues", "write queues", "perm"],
            rows,
        )

    with_admin(ctx, action)


def _group_rows(stats: dict[str, ConsumeStats]) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    data = [
        {"group": group, "topics": len({mq.topic for mq in s.offsets}), "consumeTps": s.consume_tps,
         "diffTotal": s.diff}
        for group, s in stats.items()
    ]  # fmt: skip
    rows = [[d["group"], d["topics"], f"{d['consumeTps']:.2f}", d["diffTotal"]] for d in data]
    return rows, data


@click.command("consumerProgress")
@click.option("-g", "--group", help="One group, per queue (default: every group, summed).")
@click.option("-t", "--topic", help="Only this topic (with --group).")
@OUTPUT
@click.pass_context
def consumer_progress(ctx: click.Context, group: str | None, topic: str | None, output: str) -> None:
    """How far groups have consumed: per queue of one group, or a line per group."""

    async def action(client: Admin) -> None:
        if group is None:
            rows, summary = _group_rows(await client.all_consume_stats())
            show(output, summary, "consumer groups", ["group", "topics", "consume TPS", "diff total"], rows)
            return
        stats = await client.consume_stats(group, topic)
        rows = [
            [
                mq.topic,
                mq.broker_name,
                mq.queue_id,
                w.broker_offset,
                w.consumer_offset,
                w.broker_offset - w.consumer_offset,
                _when(w.last_timestamp),
            ]
            for mq, w in stats.offsets.items()
        ]
        table = [{**_plain(mq), **_plain(w)} for mq, w in stats.offsets.items()]
        data = {"consumeTps": stats.consume_tps, "diffTotal": stats.diff, "offsetTable": table}
        title = f"{group}: diff total {stats.diff}, consume TPS {stats.consume_tps:.2f}"
        show(output, data, title, ["topic", "broker", "queue", "broker offset", "consumer offset", "diff",
                                   "last consumed"], rows)  # fmt: skip

    with_admin(ctx, action)


@click.command("producerConnection")
@click.option("-g", "--group", required=True, help="The producer group.")
@click.option("-t", "--topic", help="Accepted for mqadmin's sake; connections are per group.")
@OUTPUT
@click.pass_context
def producer_connection(ctx: click.Context, group: str, topic: str | None, output: str) -> None:
    """The producers of a group connected to the brokers."""

    async def action(client: Admin) -> None:
        conns = (await client.producer_connections(group)).connection_set
        rows = [[c.client_id, c.client_addr, c.language, c.version] for c in conns]
        show(output, [_plain(c) for c in conns], f"producers of {group}", ["client id", "address", "language",
                                                                            "version"], rows)  # fmt: skip

    with_admin(ctx, action)


@click.command("consumerConnection")
@click.option("-g", "--group", required=True, help="The consumer group.")
@OUTPUT
@click.pass_context
def consumer_connection(ctx: click.Context, group: str, output: str) -> None:
    """The members of a group, what they subscribe to, and how they consume."""

    async def action(client: Admin) -> None:
        conn = await client.consumer_connections(group)
        if output == "json":
            show(output, _plain(conn), "", [], [])
            return
        print_table(
            f"members of {group}",
            ["client id", "address", "language", "version"],
            [[c.client_id, c.client_addr, c.language, c.version] for c in conn.connection_set],
        )
        print_table(
            "subscriptions",
            ["topic", "expression", "type"],
            [[t, s.sub_string, s.expression_type] for t, s in sorted(conn.subscription_table.items())],
        )
        click.echo(
            f"consume type {conn.consume_type}, model {conn.message_model}, from {conn.consume_from_where}"
        )

    with_admin(ctx, action)


@click.command("consumerStatus")
@click.option("-g", "--group", required=True, help="The consumer group.")
@click.option("-i", "--client-id", help="One member (default: every member).")
@click.option("-s", "--jstack", is_flag=True, help="Ask for the clients' thread stacks too.")
@OUTPUT
@click.pass_context
def consumer_status(ctx: click.Context, group: str, client_id: str | None, jstack: bool, output: str) -> None:
    """What the group's clients report of themselves (relayed by a broker)."""

    async def action(client: Admin) -> None:
        ids = (
            [client_id]
            if client_id
            else [c.client_id for c in (await client.consumer_connections(group)).connection_set]
        )
        infos = {}
        for cid in ids:
            try:
                infos[cid] = _plain(await client.consumer_running_info(group, cid, jstack=jstack))
            except AdminRefused as e:
                infos[cid] = {"error": str(e)}
        if output == "json":
            show(output, infos, "", [], [])
            return
        for cid, info in infos.items():
            props = info.get("properties", {}) if isinstance(info, dict) else {}
            rows = [[k, v] for k, v in sorted(props.items())] or [["error", info.get("error", "")]]
            print_table(f"{cid}", ["property", "value"], rows)

    with_admin(ctx, action)


@click.command("queryCq")
@click.option("-t", "--topic", required=True)
@click.option("-q", "--queue", "queue_id", type=int, required=True, help="The queue id.")
@click.option("-i", "--index", type=int, default=0, show_default=True, help="The first entry.")
@click.option("-c", "--count", type=int, default=10, show_default=True, help="How many entries.")
@click.option("-g", "--group", help="Also show this group's subscription.")
@BROKER
@OUTPUT
@click.pass_context
def query_cq(ctx: click.Context, topic: str, queue_id: int, index: int, count: int, group: str | None,
             broker_addr: str | None, output: str) -> None:  # fmt: skip
    """ConsumeQueue entries of one queue: CommitLog offset, size and tag hash of each message."""

    async def action(client: Admin) -> None:
        body = await client.query_consume_queue(
            topic, queue_id, index, count, group=group, broker_addr=broker_addr
        )
        rows = [
            [index + i, e.physic_offset, e.physic_size, e.tags_code] for i, e in enumerate(body.queue_data)
        ]
        title = f"{topic} queue {queue_id}: entries {body.min_queue_index}..{body.max_queue_index - 1}"
        show(output, _plain(body), title, ["index", "CommitLog offset", "size", "tags code"], rows)

    with_admin(ctx, action)


@click.command("queryTopicConsumeByWho")
@click.option("-t", "--topic", required=True)
@OUTPUT
@click.pass_context
def consumed_by(ctx: click.Context, topic: str, output: str) -> None:
    """The groups that consume a topic."""

    async def action(client: Admin) -> None:
        groups = await client.topic_consumed_by(topic)
        show(output, groups, f"groups consuming {topic}", ["group"], [[g] for g in groups])

    with_admin(ctx, action)


@click.command("getSystemTopicList")
@OUTPUT
@click.pass_context
def system_topic_list(ctx: click.Context, output: str) -> None:
    """The system topics: cluster and broker names, and the brokers' own."""

    async def action(client: Admin) -> None:
        names = await client.system_topics()
        show(output, names, "system topics", ["topic"], [[n] for n in names])

    with_admin(ctx, action)


@click.command("brokerStatus")
@BROKER
@CLUSTER
@OUTPUT
@click.pass_context
def broker_status(ctx: click.Context, broker_addr: str | None, cluster: str | None, output: str) -> None:
    """A broker's runtime figures: offsets, message counts and rates (TPS over 10 s, 60 s, 600 s)."""

    async def action(client: Admin) -> None:
        tables = {
            name: await client.broker_runtime(addr)
            for name, addr in (await broker_addrs(client, broker_addr, cluster)).items()
        }
        rows = [[name, key, value] for name, table in tables.items() for key, value in sorted(table.items())]
        show(output, tables, "broker status", ["broker", "name", "value"], rows)

    with_admin(ctx, action)


@click.command("getAllTopicConfig")
@BROKER
@CLUSTER
@OUTPUT
@click.pass_context
def all_topic_config(ctx: click.Context, broker_addr: str | None, cluster: str | None, output: str) -> None:
    """Every topic's config on a broker (or every master)."""

    async def action(client: Admin) -> None:
        tables = {name: (await client.all_topic_config(addr)).topic_config_table
                  for name, addr in (await broker_addrs(client, broker_addr, cluster)).items()}  # fmt: skip
        rows = [
            [name, t.topic_name, t.read_queue_nums, t.write_queue_nums, t.perm, t.order]
            for name, table in tables.items()
            for t in sorted(table.values(), key=lambda t: t.topic_name)
        ]
        show(output, {n: _plain(t) for n, t in tables.items()}, "topic configs",
             ["broker", "topic", "read queues", "write queues", "perm", "order"], rows)  # fmt: skip

    with_admin(ctx, action)


@click.command("getAllSubscriptionGroup")
@BROKER
@CLUSTER
@OUTPUT
@click.pass_context
def all_group_config(ctx: click.Context, broker_addr: str | None, cluster: str | None, output: str) -> None:
    """Every subscription group's config on a broker (or every master)."""

    async def action(client: Admin) -> None:
        tables = {name: (await client.all_group_config(addr)).subscription_group_table
                  for name, addr in (await broker_addrs(client, broker_addr, cluster)).items()}  # fmt: skip
        rows = [
            [name, g.group_name, g.consume_enable, g.consume_message_orderly, g.retry_max_times]
            for name, table in tables.items()
            for g in sorted(table.values(), key=lambda g: g.group_name)
        ]
        show(output, {n: _plain(t) for n, t in tables.items()}, "subscription groups",
             ["broker", "group", "consume enabled", "orderly", "max retries"], rows)  # fmt: skip

    with_admin(ctx, action)


STATUS_COMMANDS = (
    topic_status, topic_cluster_list, topic_route, consumer_progress, producer_connection,
    consumer_connection, consumer_status, query_cq, consumed_by, system_topic_list, broker_status,
    all_topic_config, all_group_config,
)  # fmt: skip
