"""Runs one scenario with aio-pika in its own venv and prints one JSON line with what the client saw.
Usage: aio_pika_scenarios.py SCENARIO HOST PORT."""

from __future__ import annotations

import asyncio
import json
import sys

import aio_pika
from aio_pika.exceptions import AMQPError, ChannelClosed

scenario, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])


def url(user: str = "guest", password: str = "guest", query: str = "") -> str:
    return f"amqp://{user}:{password}@{host}:{port}/{query}"


async def session() -> dict:
    connection = await aio_pika.connect(url(query="?heartbeat=7"), timeout=10)
    tune = connection.transport.connection.connection_tune
    product = connection.transport.connection.server_properties.get("product")
    channels = [await connection.channel() for _ in range(3)]
    await channels[1].close()
    again = await connection.channel()
    numbers = [c.number for c in channels] + [again.number]
    closed = [c.is_closed for c in channels] + [again.is_closed]
    await connection.close()
    return {
        "heartbeat": tune.heartbeat,
        "frame_max": tune.frame_max,
        "product": product,
        "channels": numbers,
        "closed_channels": closed,
        "closed": connection.is_closed,
    }


async def wrong_password() -> dict:
    try:
        await aio_pika.connect(url(password="wrong"), timeout=10)
    except (AMQPError, ConnectionError) as e:
        return {"error": type(e).__name__, "message": str(e)}
    return {"error": None}


async def passive_declare() -> dict:
    connection = await aio_pika.connect(url(), timeout=10)
    channel = await connection.channel()
    result: dict = {}
    try:
        await channel.declare_queue("ferrymq-compat-absent-queue", passive=True)
    except ChannelClosed as e:
        # aiormq raises a subclass per reply code; a 404 carries only the reply text
        result = {"error": type(e).__name__, "args": list(e.args)}
    other = await connection.channel()
    result["next_channel_open"] = not other.is_closed
    await connection.close()
    return result


SCENARIOS = {"session": session, "wrong_password": wrong_password, "passive_declare": passive_declare}
print(json.dumps(asyncio.run(asyncio.wait_for(SCENARIOS[scenario](), 60))), flush=True)
