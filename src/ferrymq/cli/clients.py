"""`ferrymq produce` and `ferrymq consume`: try a cluster from the shell."""

from __future__ import annotations

import asyncio
import sys
import time

import click

from ferrymq.cli.tls import client_tls, client_tls_options
from ferrymq.client import ClientError, Message, Producer, PullConsumer
from ferrymq.net import install_uvloop
from ferrymq.protocol.errors import ProtocolError


def credential_options(command):
    """--access-key / --secret-key (or FERRYMQ_ACCESS_KEY / FERRYMQ_SECRET_KEY): sign every request
    as this user, for clusters with authentication on."""
    command = click.option(
        "--secret-key", envvar="FERRYMQ_SECRET_KEY", help="SecretKey (password) to sign requests with."
    )(command)
    return click.option(
        "--access-key", envvar="FERRYMQ_ACCESS_KEY", help="AccessKey (username) to sign requests as."
    )(command)


@click.command()
@click.option("--namesrv", default="127.0.0.1:9876", show_default=True, help="NameServer address(es).")
@click.option("--topic", required=True)
@click.option("--tag", help="Tag of every message.")
@click.option("--key", help="Business key of every message.")
@click.option("--group", default="ferrymq-cli-producer", show_default=True)
@client_tls_options
@credential_options
@click.argument("bodies", nargs=-1)
def produce(
    namesrv: str, topic: str, tag: str | None, key: str | None, group: str, access_key: str | None,
    secret_key: str | None, bodies: tuple[str, ...], **tls,
) -> None:  # fmt: skip
    """Send each BODY as a message (or each line of standard input when none is given)."""
    lines = list(bodies) if bodies else [line.rstrip("\n") for line in sys.stdin]
    tls_option = client_tls(tls)

    async def run() -> None:
        async with Producer(
            group, namesrv, tls=tls_option, access_key=access_key, secret_key=secret_key
        ) as producer:
            for text in lines:
                result = await producer.send(Message(topic, text.encode(), tags=tag, keys=key))
                where = f"queue={result.message_queue.queue_id} offset={result.queue_offset}"
                click.echo(f"{result.status.value} msgId={result.msg_id} {where}")

    run_client(run())


@click.command()
@click.option("--namesrv", default="127.0.0.1:9876", show_default=True, help="NameServer address(es).")
@click.option("--topic", required=True)
@click.option("--group", required=True, help="Consumer group; its offsets are committed as it goes.")
@click.option("--expression", default="*", show_default=True, help='Tags to take, e.g. "TagA || TagB".')
@click.option(
    "--from",
    "consume_from",
    type=click.Choice(["last", "first"]),
    default="last",
    show_default=True,
    help="Where a group new to the topic starts.",
)
@click.option("--count", type=int, help="Stop after this many messages.")
@click.option("--timeout", type=float, help="Stop after this many seconds without a message.")
@client_tls_options
@credential_options
def consume(
    namesrv, topic, group, expression, consume_from, count, timeout, access_key, secret_key, **tls
) -> None:
    """Print the topic's messages as they arrive (Ctrl-C to stop)."""
    tls_option = client_tls(tls)

    async def run() -> None:
        async with PullConsumer(
            group, namesrv, consume_from=consume_from, tls=tls_option, access_key=access_key,
            secret_key=secret_key,
        ) as consumer:  # fmt: skip
            await consumer.subscribe(topic, expression)
            seen, idle_since = 0, time.monotonic()
            while count is None or seen < count:
                messages = await consumer.poll(1.0)
                for m in messages:
                    click.echo(
                        f"[{m.queue_id}:{m.queue_offset}] {m.tags or '-'} {m.body.decode(errors='replace')}"
                    )
                seen += len(messages)
                if messages:
                    idle_since = time.monotonic()
                    await consumer.commit()
                elif timeout is not None and time.monotonic() - idle_since > timeout:
                    break

    run_client(run())


def run_client(coro) -> None:
    """Run a client coroutine on uvloop; Ctrl-C stops quietly, client errors and undecodable messages
    become CLI errors."""
    install_uvloop()
    try:
        asyncio.run(coro)
    except KeyboardInterrupt:
        pass
    except (ClientError, ProtocolError) as e:
        raise click.ClickException(str(e)) from None
