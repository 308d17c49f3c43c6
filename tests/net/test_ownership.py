"""Stopping a server or closing a client leaves none of its tasks running, whatever they were doing."""

import asyncio

import pytest

from ferrymq.net import RemotingClient, RemotingConnectionError, RemotingServer
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.remoting import RemotingCommand

STUCK = 9002
CALL_BACK = 9005


def started_since(before: set[asyncio.Task]) -> set[asyncio.Task]:
    """Tasks started after ``before`` was taken that are still running."""
    return {task for task in asyncio.all_tasks() if task not in before and not task.done()}


async def test_stopping_the_server_ends_its_sweeper_and_handlers_of_connections_already_gone():
    before = asyncio.all_tasks()
    server = RemotingServer("127.0.0.1", 0, idle_timeout=60)
    started = asyncio.Event()

    async def endless(connection, request):
        started.set()
        await asyncio.Event().wait()

    server.register(STUCK, endless)
    await server.start()
    client = RemotingClient()
    connection = await client.connection(f"127.0.0.1:{server.port}")
    await connection.send_oneway(RemotingCommand(STUCK))
    await asyncio.wait_for(started.wait(), 5)
    await client.close()  # the peer leaves while its request still runs on the server
    async with asyncio.timeout(5):
        while server.connections:
            await asyncio.sleep(0.01)
    assert started_since(before), "the sweeper and the handler run until the server stops"

    await asyncio.wait_for(server.stop(grace=0.2), 5)
    assert started_since(before) == set()


async def test_closing_the_client_ends_the_servers_requests_running_on_it():
    before = asyncio.all_tasks()
    server = RemotingServer("127.0.0.1", 0)
    connections = asyncio.Queue()
    handlers = asyncio.Queue()

    async def hello(connection, request):
        connections.put_nowait(connection)
        return request.make_response(ResponseCode.SUCCESS)

    async def endless(connection, request):
        handlers.put_nowait(asyncio.current_task())
        await asyncio.Event().wait()

    server.register(STUCK, hello)
    await server.start()
    client = RemotingClient()
    client.register(CALL_BACK, endless)
    try:
        await client.invoke(f"127.0.0.1:{server.port}", RemotingCommand(STUCK))
        server_side = await asyncio.wait_for(connections.get(), 5)
        await server_side.send_oneway(RemotingCommand(CALL_BACK))
        handler = await asyncio.wait_for(handlers.get(), 5)

        await asyncio.wait_for(client.close(), 5)
        assert handler.cancelled()
    finally:
        await server.stop(grace=0.2)
    assert started_since(before) == set()


async def test_closing_the_client_ends_a_connection_attempt_and_fails_its_callers():
    before = asyncio.all_tasks()
    client = RemotingClient()
    call = asyncio.create_task(client.connection("127.0.0.1:9"))
    await asyncio.sleep(0)  # the caller has started the shared attempt and waits on it
    await client.close()
    with pytest.raises(RemotingConnectionError, match="closed"):
        await asyncio.wait_for(call, 5)
    assert started_since(before) == set()
