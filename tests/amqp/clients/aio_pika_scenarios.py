"""Runs one scenario with aio-pika in its own venv and prints one JSON line with what the client saw.
Usage: aio_pika_scenarios.py SCENARIO HOST PORT."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid

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


async def rpc() -> dict:
    """Requests through a queue, replies through direct reply-to (amq.rabbitmq.reply-to), with the
    server on its own connection."""
    prefix = f"ferrymq-compat-{uuid.uuid4().hex[:8]}"
    server = await aio_pika.connect(url(), timeout=10)
    serving = await server.channel()
    requests = await serving.declare_queue(f"{prefix}-rpc", auto_delete=True)

    async def answer(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        async with message.process():
            reply = aio_pika.Message(message.body.upper(), correlation_id=message.correlation_id)
            await serving.default_exchange.publish(reply, routing_key=message.reply_to)

    await requests.consume(answer)
    client = await aio_pika.connect(url(), timeout=10)
    channel = await client.channel()
    replies: asyncio.Queue = asyncio.Queue()
    reply_queue = await channel.get_queue("amq.rabbitmq.reply-to", ensure=False)
    await reply_queue.consume(lambda m: replies.put_nowait((m.correlation_id, m.body.decode())), no_ack=True)
    for i in range(5):
        request = aio_pika.Message(
            f"ping {i}".encode(), correlation_id=str(i), reply_to="amq.rabbitmq.reply-to"
        )
        await channel.default_exchange.publish(request, routing_key=requests.name)
    got = sorted([await asyncio.wait_for(replies.get(), 10) for _ in range(5)])
    await client.close()
    await server.close()
    return {"replies": got}


async def confirms_and_prefetch() -> dict:
    """A window of confirmed publishes, then a consumer with prefetch 10 acking in batches."""
    prefix = f"ferrymq-compat-{uuid.uuid4().hex[:8]}"
    connection = await aio_pika.connect(url(), timeout=10)
    channel = await connection.channel(publisher_confirms=True)
    queue = await channel.declare_queue(f"{prefix}-window", durable=True)
    confirms = await asyncio.gather(
        *(
            channel.default_exchange.publish(aio_pika.Message(f"m{i}".encode(), delivery_mode=2), queue.name)
            for i in range(200)
        )
    )
    await channel.set_qos(prefetch_count=10)
    got = []
    async with queue.iterator() as messages:
        async for message in messages:
            got.append(message.body.decode())
            if len(got) % 10 == 0:
                await message.ack(multiple=True)
            if len(got) == 200:
                break
    declared = await channel.declare_queue(queue.name, passive=True)
    await queue.delete()
    await connection.close()
    return {
        "confirmed": sum(1 for c in confirms if type(c).__name__ == "Ack"),
        "in_order": got == [f"m{i}" for i in range(200)],
        "left": declared.declaration_result.message_count,
    }


SCENARIOS = {
    "session": session,
    "wrong_password": wrong_password,
    "passive_declare": passive_declare,
    "rpc": rpc,
    "confirms_and_prefetch": confirms_and_prefetch,
}
print(json.dumps(asyncio.run(asyncio.wait_for(SCENARIOS[scenario](), 60))), flush=True)
