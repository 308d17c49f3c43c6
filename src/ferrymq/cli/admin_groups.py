"""`ferrymq admin` commands for consumer groups and stored messages: look-ups by id and key,
offset resets, pause/resume and rate limits (enforced by the brokers), group members."""

from __future__ import annotations

import datetime

import click

from ferrymq.cli.admin_common import OUTPUT, print_table, show, show_rows, with_admin
from ferrymq.client import Admin, MessageExt


def parse_time(value: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 time ("2026-11-22T06:30:00", local time unless it
    names a zone), "now", or "end" (-1: a queue's end, for resets)."""
    if value.lstrip("-").isdigit():
        return int(value)
    if value == "end":
        return -1
    if value == "now":
        return int(datetime.datetime.now().timestamp() * 1000)
    try:
        return int(datetime.datetime.fromisoformat(value).timestamp() * 1000)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is neither milliseconds since the epoch nor an ISO 8601 time"
        ) from None


class Timestamp(click.ParamType):
    name = "time"

    def convert(self, value, param, ctx) -> int:
        return value if isinstance(value, int) else parse_time(value)


TIME = Timestamp()


def _when(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000).isoformat(sep=" ", timespec="milliseconds")


def _describe(m: MessageExt) -> list[tuple[str, object]]:
    body = m.body[:200].decode(errors="replace") + (" ..." if len(m.body) > 200 else "")
    return [
        ("Topic", m.topic), ("Queue", f"{m.queue_id} at offset {m.queue_offset}"), ("Message id", m.msg_id),
        ("Offset message id", m.offset_msg_id), ("Tags", m.tags or ""), ("Keys", " ".join(m.keys)),
        ("Born", f"{_when(m.born_timestamp)} from {m.born_host[0]}:{m.born_host[1]}"),
        ("Stored", f"{_when(m.store_timestamp)} on {m.store_host[0]}:{m.store_host[1]}"),
        ("Reconsume times", m.reconsume_times), ("Properties", m.properties),
        ("Body", f"{len(m.body)} bytes: {body}"),
    ]  # fmt: skip


@click.command("message")
@click.argument("msg_id")
@click.option("--topic", help="The message's topic: needed for a unique id (the id send results show).")
@click.pass_context
def message(ctx: click.Context, msg_id: str, topic: str | None) -> None:
    """Show the message with MSG_ID (an offset id, or a unique id with --topic)."""

    async def action(client: Admin) -> None:
        for name, value in _describe(await client.view_message(msg_id, topic=topic)):
            click.echo(f"{name + ':':<19}{value}")

    with_admin(ctx, action)


@click.command("query-key")
@click.argument("topic")
@click.argument("key")
@click.option("--begin", type=TIME, default=0, help="Stored at or after (ms since the epoch or ISO time).")
@click.option("--end", type=TIME, help="Stored at or before (default: now).")
@click.option("--max", "max_num", default=64, show_default=True, help="At most this many messages.")
@OUTPUT
@click.pass_context
def query_key(
    ctx: click.Context, topic: str, key: str, begin: int, end: int | None, max_num: int, output: str
) -> None:
    """List TOPIC's messages with KEY, stored between --begin and --end."""

    async def action(client: Admin) -> None:
        found = await client.query_by_key(topic, key, begin=begin, end=end, max_num=max_num)
        rows = [[m.msg_id, m.queue_id, m.queue_offset, _when(m.store_timestamp), m.tags or "", len(m.body)]
                for m in found]  # fmt: skip
        show_rows(output, f"{len(rows)} messages with key {key} in {topic}",
                  ["message id", "queue", "offset", "stored", "tags", "bytes"], rows)  # fmt: skip

    with_admin(ctx, action)


@click.command("reset-offset")
@click.argument("group")
@click.argument("topic")
@click.argument("timestamp", type=TIME)
@click.option("--force/--no-force", default=True, show_default=True,
              help="Also move queues the group has not reached yet (back) to the timestamp.")  # fmt: skip
@click.pass_context
def reset_offset(ctx: click.Context, group: str, topic: str, timestamp: int, force: bool) -> None:
    """Move GROUP on TOPIC to the first message stored at or after TIMESTAMP (ms since the epoch, an
    ISO time, or "end"), while its consumers run."""

    async def action(client: Admin) -> None:
        offsets = await client.reset_offset(group, topic, timestamp, force=force)
        rows = [[mq.broker_name, mq.queue_id, offset] for mq, offset in sorted(offsets.items(), key=str)]
        print_table(f"{group} on {topic} reset to {timestamp}", ["broker", "queue", "offset"], rows)

    with_admin(ctx, action)


@click.command()
@click.argument("group")
@click.option("--client", "clients", multiple=True, help="Only this client id (repeatable); default: all.")
@click.pass_context
def pause(ctx: click.Context, group: str, clients: tuple[str, ...]) -> None:
    """Stop the brokers giving GROUP messages (every client, or the --client ones)."""
    _pause_or_resume(ctx, group, clients, pausing=True)


@click.command()
@click.argument("group")
@click.option("--client", "clients", multiple=True, help="Only this client id (repeatable); default: all.")
@click.pass_context
def resume(ctx: click.Context, group: str, clients: tuple[str, ...]) -> None:
    """Let GROUP consume again (the whole group, or the --client ones)."""
    _pause_or_resume(ctx, group, clients, pausing=False)


def _pause_or_resume(ctx: click.Context, group: str, clients: tuple[str, ...], *, pausing: bool) -> None:
    async def action(client: Admin) -> None:
        await (client.pause if pausing else client.resume)(group, list(clients) or None)
        done = "paused" if pausing else "resumed"
        click.echo(f"group {group} {done}" + (f" for {', '.join(clients)}" if clients else ""))

    with_admin(ctx, action)


@click.command("rate-limit")
@click.argument("group")
@click.argument("per_second")
@click.pass_context
def rate_limit(ctx: click.Context, group: str, per_second: str) -> None:
    """Give GROUP at most PER_SECOND messages a second per broker ("off" removes the limit)."""
    try:
        limit = None if per_second == "off" else float(per_second)
    except ValueError:
        raise click.BadParameter(f"{per_second!r} is not a number or 'off'") from None
    if limit is not None and limit <= 0:
        raise click.BadParameter("the limit must be above 0 (or 'off')")

    async def action(client: Admin) -> None:
        await client.set_rate_limit(group, limit)
        click.echo(f"group {group}: " + (f"at most {limit:g} messages/s" if limit else "no rate limit"))

    with_admin(ctx, action)


@click.command()
@click.argument("group")
@OUTPUT
@click.pass_context
def consumers(ctx: click.Context, group: str, output: str) -> None:
    """Show GROUP's online clients and its consumption controls on each broker."""

    async def action(client: Admin) -> None:
        ids = await client.consumers(group)
        controls = await client.consumption_controls(group)
        if output == "json":
            data = {
                "clients": ids,
                "controls": {name: {"paused": c.paused, "pausedClients": sorted(c.paused_clients),
                                    "rateLimit": c.rate_limit} for name, c in sorted(controls.items())},
            }  # fmt: skip
            show(output, data, "", [], [])
            return
        for client_id in ids:
            click.echo(client_id)
        rows = [
            [name, "yes" if c.paused else "no", ", ".join(sorted(c.paused_clients)),
             f"{c.rate_limit:g}/s" if c.rate_limit else "none"]
            for name, c in sorted(controls.items())
        ]  # fmt: skip
        print_table(
            f"{group}: consumption controls", ["broker", "paused", "paused clients", "rate limit"], rows
        )

    with_admin(ctx, action)


@click.command("amqp-queue")
@click.argument("queue")
@click.option("--vhost", default="/", show_default=True)
def amqp_queue(queue: str, vhost: str) -> None:
    """The RocketMQ topic and consumer group behind an AMQP queue: what pause, resume, rate-limit,
    consumer-progress and the other commands take."""
    from ferrymq.meta.naming import queue_group, queue_topic

    click.echo(f"topic {queue_topic(vhost, queue)}\ngroup {queue_group(vhost, queue)}")
