"""`ferrymq admin trace MSG_ID`: one message's life, read from the trace topic."""

from __future__ import annotations

import time

import click
from rich.console import Console
from rich.table import Table

from ferrymq.cli.admin_common import with_admin
from ferrymq.client import Admin
from ferrymq.client.trace_view import MessageTrace, message_trace
from ferrymq.protocol.trace import TRACE_TOPIC


@click.command("trace")
@click.argument("msg_id")
@click.option("--trace-topic", default=TRACE_TOPIC, show_default=True, help="Where the clients write traces.")
@click.pass_context
def trace(ctx: click.Context, msg_id: str, trace_topic: str) -> None:
    """Show the life of message MSG_ID (its UNIQ_KEY): sent, stored, consumed, retried, dead-lettered."""

    async def action(client: Admin) -> None:
        found = await message_trace(client.instance, msg_id, trace_topic)
        if not found.found:
            raise click.ClickException(f"no trace of message {msg_id} in {trace_topic}")
        print_trace(found, Console(soft_wrap=True))

    with_admin(ctx, action)


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f".{ms % 1000:03d}"


def print_trace(trace: MessageTrace, console: Console) -> None:
    console.print(f"[bold]Message {trace.msg_id}[/bold]")
    for pub in trace.sends:
        outcome = "sent" if pub.success else "send FAILED"
        console.print(
            f"  {outcome:<12} {_when(pub.timestamp)} by producer group {pub.group} to topic {pub.topic} "
            f"on {pub.store_host} in {pub.cost_time} ms ({pub.msg_type.name.lower()} message, "
            f"tags {pub.tags or '-'}, keys {pub.keys or '-'}, {pub.body_length} bytes)"
        )
    stored = trace.stored
    if stored is not None:
        console.print(
            f"  {'stored':<12} {_when(stored.store_timestamp)} on {trace.stored_at}: topic {stored.topic} "
            f"queue {stored.queue_id} offset {stored.queue_offset} (commitlog {stored.commitlog_offset})"
        )
    elif trace.sends:
        console.print(f"  {'stored':<12} not found on the broker (removed by retention, or never stored)")
    for end in trace.transaction:
        source = "answering a check-back" if end.from_transaction_check else "after the local transaction"
        console.print(f"  {'transaction':<12} {_when(end.timestamp)} {end.transaction_state.value} {source}")
    if not trace.groups:
        console.print("  consumed     by no group yet")
    for consumption in trace.groups.values():
        table = Table(title=f"consumer group {consumption.group}", title_justify="left")
        for column in ("attempt", "delivered at", "retry times", "took", "result"):
            table.add_column(column)
        for i, a in enumerate(consumption.attempts, 1):
            result = "running or lost" if a.success is None else ("success" if a.success else "FAILED")
            took = "-" if a.cost_ms is None else f"{a.cost_ms} ms"
            table.add_row(str(i), _when(a.started), str(a.retry_times), took, result)
        console.print(table)
        verdict = (
            "dead-lettered"
            if consumption.dead_lettered
            else ("consumed" if consumption.consumed else "not consumed yet")
        )
        console.print(f"  {consumption.group}: {verdict} after {len(consumption.attempts)} attempt(s)")
