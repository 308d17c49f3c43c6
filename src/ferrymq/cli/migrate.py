"""`ferrymq migrate rabbitmq`: move a live RabbitMQ's definitions and backlog into the AMQP gateway
while its applications switch over one by one."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from ferrymq.cli.clients import credential_options


@click.group()
def migrate() -> None:
    """Move from another broker to ferrymq."""


@migrate.command()
@click.option(
    "--source",
    default="amqp://guest:guest@127.0.0.1:5672/",
    show_default=True,
    help="RabbitMQ to drain: amqp://user:password@host:port/vhost.",
)
@click.option(
    "--gateway",
    "gateway_url",
    default="amqp://guest:guest@127.0.0.1:5673/",
    show_default=True,
    help="The ferrymq AMQP gateway to move into (same vhost).",
)
@click.option("--meta", default=None, help="The gateway's metadata service (host:port) to import into.")
@click.option(
    "--meta-database",
    default=None,
    help="Or the database the gateway's metadata lives in (SQLAlchemy URL, e.g. the "
    "sqlite:///<data-dir>/meta/meta.db of `ferrymq dev`).",
)
@click.option(
    "--definitions",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Take the definitions from this JSON file instead of asking RabbitMQ.",
)
@click.option(
    "--management-url",
    default=None,
    help="Ask RabbitMQ's management API (http://host:15672) instead of `rabbitmqctl` on this machine.",
)
@click.option("--no-import", is_flag=True, help="Do not import the definitions (done already).")
@click.option("--no-drain", is_flag=True, help="Only import the definitions.")
@click.option(
    "--queues", "-q", multiple=True, help="Drain only these queues (repeatable; default: all of the vhost)."
)
@click.option(
    "--prefetch",
    default=2000,
    show_default=True,
    type=click.IntRange(1, 65535),
    help="Messages in flight per queue (RabbitMQ's prefetch window).",
)
@click.option(
    "--lanes",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Gateway channels per queue: more is faster, but RabbitMQ's order then holds only within a "
    "read of a few hundred messages.",
)
@click.option(
    "--parallel", default=4, show_default=True, type=click.IntRange(1, 256), help="Queues drained at once."
)
@click.option(
    "--settle",
    default=2.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Seconds a queue must stay empty in RabbitMQ to count as drained.",
)
@click.option(
    "--namesrv",
    default=None,
    help="The gateway's NameServer (host:port): store each queue's messages straight into its brokers, "
    "in batch puts, instead of publishing them through the gateway (needs --meta or --meta-database; "
    "with authentication on, --access-key and --secret-key sign the puts).",
)
@credential_options
@click.option("--follow", is_flag=True, help="Keep draining until interrupted (producers still switching).")
@click.option("--dry-run", is_flag=True, help="Show what would be imported and drained, change nothing.")
def rabbitmq(
    source: str, gateway_url: str, meta: str | None, meta_database: str | None, definitions: Path | None,
    management_url: str | None, no_import: bool, no_drain: bool, queues: tuple[str, ...], prefetch: int,
    lanes: int, parallel: int, settle: float, namesrv: str | None, access_key: str | None,
    secret_key: str | None, follow: bool, dry_run: bool,
) -> None:  # fmt: skip
    """Import RabbitMQ's definitions into the gateway's metadata, then drain every queue's backlog into
    the gateway: each message is acknowledged in RabbitMQ only after the gateway confirmed it."""
    from ferrymq.messaging.api import MessagingError
    from ferrymq.migrate import definitions as defs
    from ferrymq.migrate.drain import DrainOptions
    from ferrymq.migrate.progress import Display
    from ferrymq.migrate.runner import declare_queues, drain_queues
    from ferrymq.migrate.store import BrokerAccess
    from ferrymq.migrate.wire import AMQPURL, WireError

    try:
        src, dst = AMQPURL.parse(source), AMQPURL.parse(gateway_url)
    except WireError as e:
        raise click.UsageError(str(e)) from None
    if src.vhost != dst.vhost:
        raise click.UsageError(f"--source vhost '{src.vhost}' and --gateway vhost '{dst.vhost}' differ")
    if not (no_import or dry_run or meta or meta_database):
        raise click.UsageError("give --meta host:port or --meta-database URL (or --no-import)")
    if namesrv and not (meta or meta_database):
        raise click.UsageError("--namesrv needs --meta host:port or --meta-database URL")
    need_doc = not no_import or not queues
    try:
        doc: dict = {}
        if need_doc:
            if definitions is not None:
                doc = defs.from_file(definitions)
            elif management_url:
                doc = defs.from_management(management_url, src.username, src.password)
            else:
                doc = defs.from_rabbitmqctl()
        names, left = (list(queues), []) if queues else defs.queues_to_drain(doc, src.vhost)
        if dry_run:
            kinds = ("vhosts", "users", "permissions", "policies", "exchanges", "queues", "bindings")
            if not no_import:
                click.echo("would import " + ", ".join(f"{len(doc.get(k, []))} {k}" for k in kinds))
            click.echo(f"would drain {len(names)} queues of vhost '{src.vhost}': {', '.join(names)}")
            for why in left:
                click.echo(f"  {why}")
            return
        if not no_import:
            records = [q for q in doc.get("queues", []) if q.get("vhost") == src.vhost and q["name"] in names]
            for problem in asyncio.run(declare_queues(gateway_url, records)):
                click.echo(f"not declared in the gateway: {problem}")
            report = asyncio.run(defs.import_into(doc, meta, meta_database))
            click.echo(report.summary())
        for why in left:
            click.echo(why)
    except (defs.DefinitionsError, WireError) as e:
        raise click.ClickException(str(e)) from None
    if no_drain or not names:
        return
    options = DrainOptions(prefetch=prefetch, lanes=lanes, settle_s=settle, follow=follow)
    display = Display([])
    brokers = BrokerAccess(namesrv, meta, meta_database, access_key, secret_key) if namesrv else None
    try:
        outcome = asyncio.run(drain_queues(source, gateway_url, names, options, parallel, display, brokers))
    except (WireError, defs.DefinitionsError, MessagingError) as e:
        raise click.ClickException(str(e)) from None
    finally:
        display.finish()
    if any(p.state == "failed" for p in outcome):
        raise SystemExit(1)
