"""Draining several queues at once over one connection to each side, with the display kept current
and SIGINT/SIGTERM turned into a clean stop (in-flight publishes settle, the rest stays in RabbitMQ)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Sequence
from typing import Any

from pamqp import commands

from ferrymq.migrate.drain import DrainOptions, QueueDrain, QueueProgress
from ferrymq.migrate.progress import Display
from ferrymq.migrate.store import BrokerAccess, Brokers, StoreDrain
from ferrymq.migrate.wire import AMQPURL, Connection, WireError

REFRESH_S = 0.5


async def declare_queues(gateway_url: str, queues: Sequence[dict[str, Any]]) -> list[str]:
    """Declare `queues` (definitions records of the gateway URL's vhost) through the gateway, before
    the import records them: the gateway then makes each queue's topic itself, with one broker queue
    (RabbitMQ's order). What the gateway refuses is returned, and the rest declared all the same."""
    problems: list[str] = []
    connection = await Connection.open(gateway_url, "ferrymq migrate (declare)")
    try:
        channel = await connection.channel()
        for q in queues:
            declare = commands.Queue.Declare(
                queue=q["name"], durable=q.get("durable", True), auto_delete=q.get("auto_delete", False),
                arguments=q.get("arguments") or {},
            )  # fmt: skip
            try:
                await channel.call(declare)
            except WireError as e:
                problems.append(f"queue '{q['name']}': {e}")
                channel = await connection.channel()
    finally:
        await connection.close()
    return problems


async def drain_queues(
    source_url: str,
    gateway_url: str,
    queues: Sequence[str],
    options: DrainOptions,
    parallel: int = 4,
    display: Display | None = None,
    brokers: BrokerAccess | None = None,
) -> list[QueueProgress]:
    """Drain `queues` (at most `parallel` at a time); each queue's outcome, in order. With `brokers`,
    queues are stored straight into the gateway's brokers where they can be (see store.py)."""
    async with contextlib.AsyncExitStack() as stack:
        into = (
            None
            if brokers is None
            else await stack.enter_async_context(Brokers.open(brokers, AMQPURL.parse(gateway_url).vhost))
        )
        return await _drain(source_url, gateway_url, queues, options, parallel, display, into)


async def _drain(
    source_url: str,
    gateway_url: str,
    queues: Sequence[str],
    options: DrainOptions,
    parallel: int,
    display: Display | None,
    brokers: Brokers | None,
) -> list[QueueProgress]:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    source = await Connection.open(source_url, "ferrymq migrate (source)")
    try:
        sink = await Connection.open(gateway_url, "ferrymq migrate (gateway)")
    except BaseException:
        source.abort()
        raise
    drains: list[QueueDrain] = []
    for name in queues:
        place = None if brokers is None else await brokers.place(name)
        if brokers is None or place is None:
            drains.append(QueueDrain(name, source, sink, options, stop))
        else:
            drains.append(StoreDrain(name, source, sink, options, stop, brokers, place))
    if display is not None:
        display.queues = [d.progress for d in drains]
    slots = asyncio.Semaphore(max(1, parallel))

    async def one(drain: QueueDrain) -> QueueProgress:
        async with slots:
            if stop.is_set():
                drain.progress.state = "stopped"
                return drain.progress
            return await drain.run()

    work = asyncio.gather(*(one(d) for d in drains))
    try:
        while not work.done():
            await asyncio.wait([work], timeout=REFRESH_S)
            if display is not None:
                display.refresh()
        return list(work.result())
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
        await source.close()
        await sink.close()
