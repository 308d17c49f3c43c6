"""`ferrymq admin move-topic`, `pin-topic` and `rebalance`: topic moves between broker groups and
clusters (ferrymq.client.topic_move), the plan shown first and applied only when confirmed."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable

import click
from rich.console import Console
from rich.status import Status

from ferrymq.cli.admin_common import AdminTarget, broker_list, print_table, with_admin
from ferrymq.client import Admin
from ferrymq.client.topic_move import MoveError, MoveEvent, Plan, TopicMover
from ferrymq.client.topic_rebalance import measure_put_tps, plan_rebalance, user_topics

YES = click.option("-y", "--yes", is_flag=True, help="Apply the plan without asking.")
DRY_RUN = click.option("--dry-run", is_flag=True, help="Show the plan and stop.")
DRAIN_TIMEOUT = click.option(
    "--drain-timeout", type=float, default=300.0, show_default=True,
    help="Seconds to wait for consumers to drain the source before undoing the move.",
)  # fmt: skip
POLL = click.option(
    "--poll-interval", type=float, default=2.0, show_default=True, help="Seconds between lag checks."
)


class MoveDisplay:
    """Progress of a move: a line per step; while draining, the lag left (on a terminal a spinner
    updated in place, elsewhere a line each time it changes)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._last_lag: int | None = None
        self._status: Status | None = None

    def __call__(self, event: MoveEvent) -> None:
        text = event.step.kind.value
        if event.state == "lag":
            self._lag(event.lag)
            return
        if self._status is not None:
            self._status.stop()
            self._status = None
        if event.state == "start":
            self.console.print(f"[bold]…[/] {text}")
        elif event.state == "done":
            self.console.print(f"[green]✓[/] {text}")
        elif event.state == "undo":
            self.console.print(f"[yellow]↶[/] undo: {text}")
        elif event.state == "failed":
            self.console.print(f"[red]✗[/] {text}: {event.detail}")

    def _lag(self, lag: int | None) -> None:
        line = f"lag on the source: {lag}"
        if self.console.is_terminal:
            if self._status is None:
                self._status = self.console.status(line)
                self._status.start()
            else:
                self._status.update(line)
        elif lag != self._last_lag:
            self.console.print(f"    {line}")
        self._last_lag = lag


def show_plan(console: Console, move: Plan) -> None:
    where = f"from {', '.join(move.source) or '-'} to {', '.join(move.target) or '-'}"
    console.print(f"[bold]Plan: move {move.topic} {where}[/]")
    for line in move.describe():
        console.print(f"  {line}")


def confirmed(yes: bool, question: str) -> bool:
    """--yes, or the answer of someone at a terminal; without a terminal --yes is required."""
    if yes:
        return True
    if not sys.stdin.isatty():
        raise click.ClickException(
            "the plan was not applied: stdin is not a terminal, pass --yes to apply it"
        )
    return click.confirm(question, default=False)


async def run_move(mover: TopicMover, move: Plan, console: Console) -> None:
    try:
        await mover.execute(move)
    except MoveError as e:
        undone = f" (undone: {', '.join(s.kind.value for s in e.undone)})" if e.undone else ""
        raise click.ClickException(f"{e}{undone}") from None
    console.print(f"[green]{move.topic} moved to {', '.join(move.target) or 'its remaining brokers'}[/]")


TwoAdmins = Callable[[Admin, Admin | None], Awaitable[None]]


def with_target(ctx: click.Context, namesrv: str | None, action: TwoAdmins) -> None:
    """Run `action` with the source Admin and, if `namesrv` names other NameServers, a target one."""
    target: AdminTarget = ctx.obj

    async def both(source: Admin) -> None:
        if not namesrv or namesrv == target.namesrv:
            await action(source, None)
            return
        async with Admin(namesrv, access_key=target.access_key, secret_key=target.secret_key) as other:
            await action(source, other)

    with_admin(ctx, both)


def move_command(topic: str, target_of: Callable[[Admin], Awaitable[list[str]]], *, ctx: click.Context,
                 namesrv: str | None, drain_timeout: float, poll_interval: float, yes: bool,
                 dry_run: bool) -> None:  # fmt: skip
    """Plan the move of `topic` to the broker groups `target_of` names, show it, and apply it."""
    console = Console()

    async def action(source: Admin, other: Admin | None) -> None:
        mover = TopicMover(source, other, drain_timeout=drain_timeout, poll_interval=poll_interval,
                           progress=MoveDisplay(console))  # fmt: skip
        try:
            move = await mover.plan(topic, await target_of(other or source))
        except MoveError as e:
            raise click.ClickException(str(e)) from None
        show_plan(console, move)
        if dry_run or not confirmed(yes, f"Move {topic}?"):
            return
        await run_move(mover, move, console)

    with_target(ctx, namesrv, action)


@click.command("move-topic")
@click.argument("topic")
@click.option("--to-cluster", help="Move onto every master of this cluster.")
@click.option("--to-brokers", callback=broker_list, help="Move onto these broker groups: b1,b2.")
@click.option("--target-namesrv", help="The target cluster's NameServers, when they are not the source's.")
@DRAIN_TIMEOUT
@POLL
@YES
@DRY_RUN
@click.pass_context
def move_topic(ctx: click.Context, topic: str, to_cluster: str | None, to_brokers: list[str] | None,
               target_namesrv: str | None, drain_timeout: float, poll_interval: float, yes: bool,
               dry_run: bool) -> None:  # fmt: skip
    """Move TOPIC and its consumer groups to other broker groups or another cluster, in use: create
    on the target, stop writes on the source, wait for the consumers to drain it, clean up; undone
    if a step fails."""
    if (to_cluster is None) == (to_brokers is None):
        raise click.UsageError("give one of --to-cluster and --to-brokers")

    async def target_of(admin: Admin) -> list[str]:
        return to_brokers if to_brokers is not None else list(await admin.masters(to_cluster))

    move_command(topic, target_of, ctx=ctx, namesrv=target_namesrv, drain_timeout=drain_timeout,
                 poll_interval=poll_interval, yes=yes, dry_run=dry_run)  # fmt: skip


@click.command("pin-topic")
@click.argument("topic")
@click.option("-b", "--brokers", required=True, callback=broker_list, help="The broker groups: b1,b2.")
@DRAIN_TIMEOUT
@POLL
@YES
@DRY_RUN
@click.pass_context
def pin_topic(ctx: click.Context, topic: str, brokers: list[str], drain_timeout: float, poll_interval: float,
              yes: bool, dry_run: bool) -> None:  # fmt: skip
    """Keep TOPIC on these broker groups only (a team's traffic isolated): a move within the cluster."""

    async def target_of(admin: Admin) -> list[str]:
        return brokers

    move_command(topic, target_of, ctx=ctx, namesrv=None, drain_timeout=drain_timeout,
                 poll_interval=poll_interval, yes=yes, dry_run=dry_run)  # fmt: skip


@click.command()
@click.option("-c", "--cluster", help="Only this cluster's broker groups and topics.")
@click.option("--top", default=10, show_default=True, help="How many of the busiest topics to consider.")
@click.option("--window", default=10.0, show_default=True, help="Seconds over which put TPS is measured.")
@DRAIN_TIMEOUT
@POLL
@YES
@DRY_RUN
@click.pass_context
def rebalance(ctx: click.Context, cluster: str | None, top: int, window: float, drain_timeout: float,
              poll_interval: float, yes: bool, dry_run: bool) -> None:  # fmt: skip
    """Spread the busiest topics' write queues from loaded broker groups onto idle (new) ones, each by
    a topic move; the plan is shown first."""
    console = Console()

    async def action(admin: Admin) -> None:
        brokers = sorted(await admin.masters(cluster))
        names = await (admin.topics_by_cluster(cluster) if cluster else admin.topics())
        system = set(await admin.system_topics())
        console.print(f"measuring put TPS of {len(names)} topics over {window:g} s …")
        tps = await measure_put_tps(admin, [t for t in user_topics(names) if t not in system], window)
        relocations = plan_rebalance(tps, brokers, top)
        load = {b: sum(per.get(b, 0.0) for per in tps.values()) for b in brokers}
        after = dict(load)
        for r in relocations:
            after[r.source] -= r.tps
            after[r.target] += r.tps
        print_table("put TPS per broker group", ["broker", "now", "after"],
                    [[b, f"{load[b]:.1f}", f"{after[b]:.1f}"] for b in brokers])  # fmt: skip
        if not relocations:
            console.print("nothing to move: the load is as even as moving whole topics makes it")
            return
        print_table("Plan", ["topic", "from", "to", "put TPS moving", "topic ends on"],
                    [[r.topic, r.source, r.target, f"{r.tps:.1f}", ", ".join(r.placement)]
                     for r in relocations])  # fmt: skip
        if dry_run or not confirmed(yes, f"Apply {len(relocations)} move(s)?"):
            return
        for r in relocations:
            mover = TopicMover(admin, drain_timeout=drain_timeout, poll_interval=poll_interval,
                               progress=MoveDisplay(console))  # fmt: skip
            try:
                move = await mover.plan(r.topic, r.placement)
            except MoveError as e:
                raise click.ClickException(str(e)) from None
            show_plan(console, move)
            await run_move(mover, move, console)

    with_admin(ctx, action)


MOVE_COMMANDS = (move_topic, pin_topic, rebalance)
