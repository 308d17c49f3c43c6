"""`ferrymq admin dlq list|resend`: a consumer group's dead letters."""

from __future__ import annotations

import time

import click

from ferrymq.cli.admin_common import OUTPUT, show_rows, with_admin
from ferrymq.client import Admin


@click.group()
def dlq() -> None:
    """Dead letters: messages a group gave up on after its maximum retries."""


@dlq.command("list")
@click.argument("group")
@click.option("--limit", default=100, show_default=True, help="Show at most this many, oldest first.")
@OUTPUT
@click.pass_context
def list_(ctx: click.Context, group: str, limit: int, output: str) -> None:
    """List GROUP's dead letters."""

    async def action(client: Admin) -> None:
        letters = await client.dead_letters(group, limit)
        rows = [
            [m.msg_id, m.properties.get("RETRY_TOPIC", "?"), m.tags or "", " ".join(m.keys),
             m.reconsume_times, _when(m.store_timestamp), _preview(m.body)]
            for m in letters
        ]  # fmt: skip
        show_rows(
            output,
            f"dead letters of {group}: {len(letters)}{' (limit reached)' if len(letters) == limit else ''}",
            ["message id", "topic", "tags", "keys", "attempts", "dead since", "body"],
            rows,
        )

    with_admin(ctx, action)


@dlq.command()
@click.argument("group")
@click.option(
    "--msg-id", "msg_ids", multiple=True, help="Re-send this one (repeatable); message or offset id."
)
@click.option("--all", "everything", is_flag=True, help="Re-send every dead letter (up to --limit).")
@click.option("--limit", default=1000, show_default=True, help="With --all: at most this many.")
@click.pass_context
def resend(ctx: click.Context, group: str, msg_ids: tuple[str, ...], everything: bool, limit: int) -> None:
    """Send GROUP's dead letters back to the topics they failed on, to be consumed again."""

    if bool(msg_ids) == everything:
        raise click.UsageError("give --msg-id (one or more) or --all")

    async def action(client: Admin) -> None:
        sent = await client.resend_dead_letters(group, msg_ids or None, limit)
        for m, result in sent:
            click.echo(f"{m.msg_id} -> {result.message_queue.topic} (queue {result.message_queue.queue_id})")
        click.echo(f"re-sent {len(sent)} dead letter(s) of {group}")

    with_admin(ctx, action)


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def _preview(body: bytes, width: int = 40) -> str:
    text = body[:width].decode(errors="replace")
    return text + ("…" if len(body) > width else "")
