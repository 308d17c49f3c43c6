"""The gateway's asyncio server in-process: a stopping server closes its connections as RabbitMQ does
(320 CONNECTION_FORCED), and the authenticator decides who gets in."""

from __future__ import annotations

import asyncio

from pamqp import commands, frame

from ferrymq.amqp.auth import StaticAuthenticator
from ferrymq.amqp.server import AMQPServer
from ferrymq.protocol.amqp.frames import PROTOCOL_HEADER

WAIT = 10.0


async def next_frame(reader: asyncio.StreamReader):
    head = await asyncio.wait_for(reader.readexactly(7), WAIT)
    rest = await asyncio.wait_for(reader.readexactly(int.from_bytes(head[3:7], "big") + 1), WAIT)
    return frame.unmarshal(head + rest)[2]


async def handshake(port: int, user: str, password: str):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(PROTOCOL_HEADER)
    assert isinstance(await next_frame(reader), commands.Connection.Start)
    start_ok = commands.Connection.StartOk(mechanism="PLAIN", response=f"\0{user}\0{password}")
    writer.write(frame.marshal(start_ok, 0))
    return reader, writer, await next_frame(reader)


async def test_stopping_server_closes_connections_with_320(local_gateway):
    server, port = local_gateway.server, local_gateway.port
    reader, writer, tune = await handshake(port, "guest", "guest")
    assert isinstance(tune, commands.Connection.Tune)
    writer.write(frame.marshal(commands.Connection.TuneOk(0, 0, 0), 0))
    writer.write(frame.marshal(commands.Connection.Open("/"), 0))
    assert isinstance(await next_frame(reader), commands.Connection.OpenOk)
    closing = asyncio.create_task(server.close())
    close = await next_frame(reader)
    assert (close.reply_code, close.reply_text) == (
        320,
        "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'",
    )
    writer.write(frame.marshal(commands.Connection.CloseOk(), 0))
    await asyncio.wait_for(closing, WAIT)
    assert await asyncio.wait_for(reader.read(), WAIT) == b""
    writer.close()


async def test_authenticator_users(local_gateway):
    server = AMQPServer("127.0.0.1", 0, local_gateway.gateway, StaticAuthenticator({"app": "s3cret"}))
    port = await server.start()
    try:
        _, writer, tune = await handshake(port, "app", "s3cret")
        assert isinstance(tune, commands.Connection.Tune)
        writer.close()
        _, writer, refused = await handshake(port, "guest", "guest")
        assert refused.reply_code == 403
        writer.close()
    finally:
        await server.close()
