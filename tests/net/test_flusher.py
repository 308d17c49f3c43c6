"""A server writes its connections' answers together, one loop pass after the first: an answer its
tasks give in that pass (a long poll woken by a put) leaves before the answer that woke it."""

import asyncio

import pytest

from ferrymq.net import RemotingClient, RemotingServer
from ferrymq.net.connection import Connection
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.remoting import RemotingCommand

WAIT = 9101  # a long poll: answered once a PUT arrives
PUT = 9102


@pytest.fixture
def flushes(monkeypatch):
    """Every server-side flush that writes something, in order, as (connection, frames written)."""
    seen: list[tuple[Connection, int]] = []
    real = Connection._flush

    def flush(connection: Connection) -> None:
        if connection._outgoing:
            seen.append((connection, len(connection._outgoing)))
        real(connection)

    monkeypatch.setattr(Connection, "_flush", flush)
    return seen


async def test_a_woken_long_poll_is_answered_before_the_put_that_woke_it(flushes):
    arrived = asyncio.get_running_loop().create_future()
    waiting = asyncio.Event()

    async def wait(connection, request):
        waiting.set()
        await arrived
        return request.make_response(ResponseCode.SUCCESS, body=b"message")

    async def put(connection, request):
        arrived.set_result(None)
        return request.make_response(ResponseCode.SUCCESS)

    server = RemotingServer("127.0.0.1", 0)
    server.register(WAIT, wait)
    server.register(PUT, put, eager=True)
    await server.start()
    consumer, producer = RemotingClient(), RemotingClient()
    try:
        address = f"127.0.0.1:{server.port}"
        polled = asyncio.ensure_future(consumer.invoke(address, RemotingCommand(WAIT), 5))
        await asyncio.wait_for(waiting.wait(), 5)
        flushes.clear()
        answer = await producer.invoke(address, RemotingCommand(PUT), 5)
        assert answer.code == ResponseCode.SUCCESS
        assert (await polled).body == b"message"
        served = [c.remote_address for c, _ in flushes if c in server._connections]
        assert served == [f"127.0.0.1:{local_port(consumer)}", f"127.0.0.1:{local_port(producer)}"]
    finally:
        await consumer.close()
        await producer.close()
        await server.stop(grace=1)


def local_port(client: RemotingClient) -> int:
    """The local port of the client's one connection (the server sees it as the remote port)."""
    (connection,) = client._connections.values()
    return connection._transport.get_extra_info("sockname")[1]
