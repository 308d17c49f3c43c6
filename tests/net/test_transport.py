"""The remoting transport over real sockets on 127.0.0.1: matching, oneway, callbacks, limits, bad peers."""

import asyncio
import logging
import socket
import struct
import time

import pytest

from ferrymq.net import (
    ConnectionLimits,
    RemotingClient,
    RemotingConnectionError,
    RemotingError,
    RemotingServer,
    RemotingTimeoutError,
)
from ferrymq.protocol.codes import ONEWAY_FLAG, RequestCode, ResponseCode, SerializeType
from ferrymq.protocol.remoting import RemotingCommand

# Request codes private to these tests.
ECHO = 9001
STUCK = 9002
BROKEN = 9003
HANG_UP = 9004
UNKNOWN = 4242


async def echo(connection, request):
    return request.make_response(
        ResponseCode.SUCCESS, ext_fields=dict(request.ext_fields), body=bytes(request.body)
    )


def address(server):
    return f"127.0.0.1:{server.port}"


@pytest.fixture
async def server():
    server = RemotingServer("127.0.0.1", 0)
    server.register(ECHO, echo)
    await server.start()
    yield server
    await server.stop(grace=1)


@pytest.fixture
def closed_connections(server):
    """Server-side connections, as they close."""
    closed = asyncio.Queue()
    server.on_connection_closed(closed.put_nowait)
    return closed


def frame(header: bytes, *, serialize_type: int = 0, body: bytes = b"") -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), serialize_type << 24 | len(header)) + header + body


async def read_frame(reader, timeout=5.0) -> RemotingCommand:
    async with asyncio.timeout(timeout):
        prefix = await reader.readexactly(4)
        return RemotingCommand.decode(prefix + await reader.readexactly(int.from_bytes(prefix, "big")))


async def wait_for_eof(reader, timeout=5.0) -> None:
    """Return when the server has closed the connection (politely or with a reset)."""
    async with asyncio.timeout(timeout):
        try:
            while await reader.read(65536):
                pass
        except ConnectionResetError:
            pass


# --- requests and answers ----------------------------------------------------------------------


async def test_concurrent_requests_are_matched_to_their_answers_when_answered_out_of_order(server, client):
    count = 50
    arrived = 0
    turns = [asyncio.Event() for _ in range(count)]

    async def last_in_first_out(connection, request):
        nonlocal arrived
        index = int(request.ext_fields["index"])
        arrived += 1
        if arrived == count:
            turns[-1].set()
        await turns[index].wait()
        if index:
            turns[index - 1].set()  # the next answer goes out after this one
        return request.make_response(
            ResponseCode.SUCCESS, ext_fields={"index": str(index)}, body=b"%d" % index
        )

    server.register(STUCK, last_in_first_out)
    answered = []

    async def call(index):
        request = RemotingCommand(STUCK, ext_fields={"index": str(index)})
        answer = await client.invoke(address(server), request, timeout=10)
        answered.append(index)
        return answer

    answers = await asyncio.gather(*(call(i) for i in range(count)))
    assert [a.body for a in answers] == [b"%d" % i for i in range(count)]
    assert all(a.is_response and a.code == ResponseCode.SUCCESS for a in answers)
    assert answered == list(reversed(range(count)))


async def test_a_slow_handler_does_not_hold_up_other_requests_on_the_same_connection(server, client):
    release = asyncio.Event()

    async def long_poll(connection, request):
        await release.wait()
        return request.make_response(ResponseCode.SUCCESS, remark="woken")

    server.register(STUCK, long_poll)
    polling = asyncio.create_task(client.invoke(address(server), RemotingCommand(STUCK), timeout=10))
    for i in range(10):
        answer = await client.invoke(address(server), RemotingCommand(ECHO, body=b"%d" % i))
        assert answer.body == b"%d" % i
    assert not polling.done()
    release.set()
    assert (await polling).remark == "woken"


@pytest.mark.parametrize("eager", [False, True], ids=["task", "eager"])
async def test_handlers_answer_alike_in_a_task_or_started_eagerly(server, client, eager):
    """Eager handlers run at once and become tasks only when they wait: every shape must still be
    answered, in any order, with failures before or after the first wait turned into SYSTEM_ERROR."""
    gate = asyncio.Event()

    async def shapes(connection, request):
        kind = request.ext_fields["kind"]
        if kind == "fail-now":
            raise ValueError("failed at once")
        if kind != "now":
            await asyncio.sleep(0)  # a bare yield to the loop
            await gate.wait()
            await asyncio.sleep(0.01)
            if kind == "fail-later":
                raise ValueError("failed after waiting")
        return request.make_response(ResponseCode.SUCCESS, remark=kind)

    server.register(STUCK, shapes, eager=eager)
    kinds = ("now", "fail-now", "wait", "fail-later")
    calls = {
        kind: asyncio.create_task(
            client.invoke(address(server), RemotingCommand(STUCK, ext_fields={"kind": kind}), timeout=10)
        )
        for kind in kinds
    }
    assert (await calls["now"]).remark == "now"
    failed = await calls["fail-now"]
    assert failed.code == ResponseCode.SYSTEM_ERROR and "failed at once" in failed.remark
    assert not calls["wait"].done() and not calls["fail-later"].done()
    gate.set()
    assert (await calls["wait"]).remark == "wait"
    failed = await calls["fail-later"]
    assert failed.code == ResponseCode.SYSTEM_ERROR and "failed after waiting" in failed.remark


async def test_a_late_handler_starts_after_the_answers_read_with_it_are_sent(server):
    """A oneway request nobody waits on (END_TRANSACTION) must not delay the answers to the requests
    that arrived with it: by the time it starts, those answers are at the peer's socket."""
    late_code = 9005
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.setblocking(False)
    started = asyncio.Event()
    at_peer = []

    async def late(connection, request):
        try:
            at_peer.append(sock.recv(65536, socket.MSG_PEEK))
        except BlockingIOError:
            at_peer.append(b"")
        started.set()

    server.register(ECHO, echo, eager=True)
    server.register(late_code, late, eager=True, late=True)
    try:  # both frames in one write: the server reads them together
        sock.sendall(
            RemotingCommand(ECHO, opaque=7).encode()
            + RemotingCommand(late_code, opaque=8, flag=ONEWAY_FLAG).encode()
        )
        await asyncio.wait_for(started.wait(), 5)
        answer = RemotingCommand.decode(at_peer[0])
        assert (answer.opaque, answer.code, answer.is_response) == (7, ResponseCode.SUCCESS, True)
    finally:
        sock.close()


async def test_large_bodies_and_binary_headers_round_trip(server, client):
    body = bytes(range(256)) * 8192  # 2 MiB
    answer = await client.invoke(address(server), RemotingCommand(ECHO, body=body), timeout=10)
    assert answer.body == body
    request = RemotingCommand(ECHO, ext_fields={"topic": "T"}, serialize_type=SerializeType.ROCKETMQ)
    answer = await client.invoke(address(server), request)
    assert answer.serialize_type == SerializeType.ROCKETMQ  # answered in the encoding the peer chose
    assert answer.ext_fields == {"topic": "T"}


async def test_unknown_code_is_answered_with_request_code_not_supported(server, client):
    answer = await client.invoke(address(server), RemotingCommand(UNKNOWN))
    assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert "4242" in answer.remark


async def test_a_default_handler_answers_codes_without_their_own(server, client):
    async def fallback(connection, request):
        return request.make_response(ResponseCode.SUCCESS, remark=f"default for {request.code}")

    server.register_default(fallback)
    assert (await client.invoke(address(server), RemotingCommand(UNKNOWN))).remark == "default for 4242"
    assert (await client.invoke(address(server), RemotingCommand(ECHO, body=b"own"))).body == b"own"


async def test_a_failing_handler_is_answered_with_system_error_and_the_connection_stays(
    server, client, caplog
):
    async def broken(connection, request):
        raise ValueError("disk on fire")

    server.register(BROKEN, broken)
    connection = await client.connection(address(server))
    with caplog.at_level(logging.ERROR, logger="ferrymq.net"):
        answer = await client.invoke(address(server), RemotingCommand(BROKEN))
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert "disk on fire" in answer.remark
    assert "disk on fire" in caplog.text
    assert (await client.invoke(address(server), RemotingCommand(ECHO, body=b"ok"))).body == b"ok"
    assert await client.connection(address(server)) is connection


async def test_a_timed_out_call_raises_and_leaves_the_connection_usable(server, client):
    release = asyncio.Event()

    async def stuck(connection, request):
        await release.wait()
        return request.make_response(ResponseCode.SUCCESS)

    server.register(STUCK, stuck)
    started = time.monotonic()
    with pytest.raises(RemotingTimeoutError, match="9002"):
        await client.invoke(address(server), RemotingCommand(STUCK), timeout=0.2)
    assert 0.15 < time.monotonic() - started < 3  # uvloop's clock ticks in milliseconds
    assert issubclass(RemotingTimeoutError, RemotingError)
    connection = await client.connection(address(server))
    release.set()  # its late answer arrives now, and is dropped
    assert (await client.invoke(address(server), RemotingCommand(ECHO, body=b"after"))).body == b"after"
    assert await client.connection(address(server)) is connection
    assert not connection.closed


async def test_each_call_times_out_at_its_own_deadline(server, client):
    """Calls share one timer per connection: a short timeout behind a long one still fires on time,
    the long one keeps waiting, and calls answered meanwhile never time out."""
    release = asyncio.Event()

    async def stuck(connection, request):
        await release.wait()
        return request.make_response(ResponseCode.SUCCESS)

    server.register(STUCK, stuck)
    await client.connection(address(server))
    long = asyncio.ensure_future(client.invoke(address(server), RemotingCommand(STUCK), timeout=30))
    started = time.monotonic()
    with pytest.raises(RemotingTimeoutError, match=r"in 0\.2 s"):
        await client.invoke(address(server), RemotingCommand(STUCK), timeout=0.2)
    assert 0.15 < time.monotonic() - started < 3
    for _ in range(3):  # answered in time, each with a deadline the sweep passes over
        assert (await client.invoke(address(server), RemotingCommand(ECHO), timeout=0.1)).code == 0
    with pytest.raises(RemotingTimeoutError):
        await client.invoke(address(server), RemotingCommand(STUCK), timeout=0.1)  # re-armed after a sweep
    assert not long.done()
    release.set()
    assert (await long).code == ResponseCode.SUCCESS


async def test_a_cancelled_call_is_forgotten_at_its_answer_or_at_its_deadline(server, client):
    """Awaiting the answer's future itself, a cancelled call leaves its entry behind only until its
    answer comes (then dropped) or its deadline passes, whichever is first."""
    release = asyncio.Event()

    async def stuck(connection, request):
        await release.wait()
        return request.make_response(ResponseCode.SUCCESS)

    async def until(condition) -> None:
        async with asyncio.timeout(5):
            while not condition():
                await asyncio.sleep(0.01)

    server.register(STUCK, stuck)
    connection = await client.connection(address(server))
    answered = asyncio.ensure_future(client.invoke(address(server), RemotingCommand(STUCK), timeout=30))
    expiring = asyncio.ensure_future(client.invoke(address(server), RemotingCommand(STUCK), timeout=0.3))
    await until(lambda: len(connection._pending) == 2)
    for call in (answered, expiring):
        call.cancel()
    await asyncio.wait((answered, expiring))
    assert answered.cancelled() and expiring.cancelled()
    await until(lambda: len(connection._pending) == 1)  # the short deadline passed
    release.set()
    await until(lambda: not connection._pending)  # the other's answer came, and was dropped
    assert (await client.invoke(address(server), RemotingCommand(ECHO, body=b"after"))).body == b"after"
    assert not connection.closed


# --- oneway and calls from the server to the client --------------------------------------------


async def test_oneway_requests_run_but_are_never_answered(server):
    seen = asyncio.Queue()

    async def record(connection, request):
        seen.put_nowait(request)
        return request.make_response(ResponseCode.SUCCESS)  # must not be sent: the request was oneway

    server.register(STUCK, record)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(RemotingCommand(STUCK, opaque=1, flag=ONEWAY_FLAG).encode())
        seen_request = await asyncio.wait_for(seen.get(), 5)
        assert seen_request.is_oneway
        writer.write(RemotingCommand(ECHO, opaque=2).encode())
        assert (await read_frame(reader)).opaque == 2  # the first and only frame answers the second request
    finally:
        writer.close()


async def test_client_oneway_calls_reach_the_server(server, client):
    seen = asyncio.Queue()

    async def record(connection, request):
        seen.put_nowait(request)

    server.register(RequestCode.UPDATE_CONSUMER_OFFSET, record)
    await client.invoke_oneway(
        address(server), RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, body=b"x")
    )
    request = await asyncio.wait_for(seen.get(), 5)
    assert request.is_oneway and request.body == b"x"


async def test_the_server_calls_the_client_back_over_the_clients_own_connection(server, client):
    clients = asyncio.Queue()
    notified = asyncio.Queue()

    async def heartbeat(connection, request):
        connection.attributes["client_id"] = request.ext_fields["clientID"]
        clients.put_nowait(connection)
        return request.make_response(ResponseCode.SUCCESS)

    async def running_info(connection, request):
        return request.make_response(
            ResponseCode.SUCCESS, body=b"running " + request.ext_fields["consumerGroup"].encode()
        )

    async def ids_changed(connection, request):
        notified.put_nowait(request)

    server.register(RequestCode.HEART_BEAT, heartbeat)
    client.register(RequestCode.GET_CONSUMER_RUNNING_INFO, running_info)
    client.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ids_changed)
    await client.invoke(
        address(server), RemotingCommand(RequestCode.HEART_BEAT, ext_fields={"clientID": "c1"})
    )
    connection = await asyncio.wait_for(clients.get(), 5)
    assert connection.attributes == {"client_id": "c1"}
    assert connection in server.connections

    request = RemotingCommand(RequestCode.GET_CONSUMER_RUNNING_INFO, ext_fields={"consumerGroup": "g"})
    assert (await connection.request(request, timeout=5)).body == b"running g"
    await connection.send_oneway(
        RemotingCommand(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ext_fields={"consumerGroup": "g"})
    )
    notice = await asyncio.wait_for(notified.get(), 5)
    assert notice.is_oneway and notice.ext_fields == {"consumerGroup": "g"}
    unknown = await connection.request(RemotingCommand(UNKNOWN), timeout=5)
    assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


# --- connections: making, losing, closing -------------------------------------------------------


async def test_the_client_reconnects_after_the_server_hangs_up(server, client):
    async def hang_up(connection, request):
        connection.close()

    server.register(HANG_UP, hang_up)
    first = await client.connection(address(server))
    with pytest.raises(RemotingConnectionError):
        await client.invoke(address(server), RemotingCommand(HANG_UP))
    await asyncio.wait_for(first.wait_closed(), 5)
    assert (await client.invoke(address(server), RemotingCommand(ECHO, body=b"again"))).body == b"again"
    assert await client.connection(address(server)) is not first


async def test_connecting_to_a_closed_port_fails_clearly(client):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nobody listens here once the socket is closed
    with pytest.raises(RemotingConnectionError, match=f"127.0.0.1:{port}"):
        await client.invoke(f"127.0.0.1:{port}", RemotingCommand(ECHO))
    with pytest.raises(RemotingConnectionError, match="host:port"):
        await client.invoke("no-port", RemotingCommand(ECHO))


async def test_closing_the_client_fails_its_waiting_calls(server):
    client = RemotingClient()
    started = asyncio.Event()

    async def stuck(connection, request):
        started.set()
        await asyncio.Event().wait()

    server.register(STUCK, stuck)
    call = asyncio.create_task(client.invoke(address(server), RemotingCommand(STUCK), timeout=30))
    await asyncio.wait_for(started.wait(), 5)
    await client.close()
    with pytest.raises(RemotingConnectionError):
        await call
    with pytest.raises(RemotingConnectionError, match="closed"):
        await client.invoke(address(server), RemotingCommand(ECHO))


async def test_200_clients_at_once(server):
    clients = [RemotingClient() for _ in range(200)]
    busiest = 0

    async def count_connections(connection, request):
        nonlocal busiest
        busiest = max(busiest, len(server.connections))
        return await echo(connection, request)

    server.register(STUCK, count_connections)
    try:
        calls = [
            c.invoke(address(server), RemotingCommand(STUCK, body=b"%d-%d" % (i, j)), timeout=30)
            for i, c in enumerate(clients)
            for j in range(5)
        ]
        answers = await asyncio.gather(*calls)
        assert [a.body for a in answers] == [b"%d-%d" % (i, j) for i in range(200) for j in range(5)]
        assert len(server.connections) == 200
        assert busiest <= 200
    finally:
        await asyncio.gather(*(c.close() for c in clients))


async def test_idle_connections_are_closed_and_busy_ones_kept():
    server = RemotingServer("127.0.0.1", 0, idle_timeout=0.3)
    server.register(ECHO, echo)
    await server.start()
    idle_client, busy_client = RemotingClient(), RemotingClient()
    try:
        idle = await idle_client.connection(address(server))
        busy = await busy_client.connection(address(server))

        async def keep_busy():
            for _ in range(20):  # 1 s of traffic, more than three idle timeouts
                await busy_client.invoke(address(server), RemotingCommand(ECHO))
                await asyncio.sleep(0.05)

        await asyncio.gather(keep_busy(), asyncio.wait_for(idle.wait_closed(), 5))
        assert not busy.closed
        assert await busy_client.connection(address(server)) is busy
        assert (
            await idle_client.invoke(address(server), RemotingCommand(ECHO, body=b"back"))
        ).body == b"back"
    finally:
        await idle_client.close()
        await busy_client.close()
        await server.stop()


async def test_stop_lets_a_running_handler_answer(server, client):
    started = asyncio.Event()

    async def slow(connection, request):
        started.set()
        await asyncio.sleep(0.3)
        return request.make_response(ResponseCode.SUCCESS, remark="done")

    server.register(STUCK, slow)
    call = asyncio.create_task(client.invoke(address(server), RemotingCommand(STUCK), timeout=10))
    await asyncio.wait_for(started.wait(), 5)
    await server.stop(grace=5)
    assert (await call).remark == "done"
    assert not server.connections
    with pytest.raises(RemotingConnectionError):
        await RemotingClient().invoke(address(server), RemotingCommand(ECHO))


@pytest.mark.parametrize("eager", [False, True], ids=["task", "eager"])
async def test_stop_cancels_handlers_that_outlive_the_grace(server, client, eager):
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def endless(connection, request):
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    server.register(STUCK, endless, eager=eager)
    call = asyncio.create_task(client.invoke(address(server), RemotingCommand(STUCK), timeout=30))
    await asyncio.wait_for(started.wait(), 5)
    await asyncio.wait_for(server.stop(grace=0.2), 5)
    assert cancelled.is_set()
    with pytest.raises(RemotingConnectionError):
        await call


# --- peers that break the rules ------------------------------------------------------------------

MALFORMED = {
    "oversized length": struct.pack(">iI", 1 << 30, 0),
    "negative length": struct.pack(">iI", -5, 0),
    "header longer than its frame": struct.pack(">iI", 8, 1000) + b"{}{}",
    "header that is not JSON": frame(b"{not json"),
    "header fields of the wrong type": frame(b'{"code":"abc","opaque":[1]}'),
    "unknown serialize type": frame(b"{}", serialize_type=7),
    "binary header cut short": frame(b"\x00\x01", serialize_type=1),
}


@pytest.mark.parametrize("garbage", MALFORMED.values(), ids=MALFORMED.keys())
async def test_malformed_input_closes_only_that_connection(
    server, client, closed_connections, garbage, caplog
):
    bystander = await client.connection(address(server))
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    with caplog.at_level(logging.WARNING, logger="ferrymq.net"):
        writer.write(garbage)
        await wait_for_eof(reader)
        await asyncio.wait_for(closed_connections.get(), 5)
    writer.close()
    assert "closing 127.0.0.1:" in caplog.text
    assert (
        await client.invoke(address(server), RemotingCommand(ECHO, body=b"still here"))
    ).body == b"still here"
    assert await client.connection(address(server)) is bystander
    assert len(server.connections) == 1


async def test_a_peer_leaving_in_the_middle_of_a_frame_is_forgotten(
    server, client, closed_connections, caplog
):
    bystander = await client.connection(address(server))
    _, writer = await asyncio.open_connection("127.0.0.1", server.port)
    whole = RemotingCommand(ECHO, body=b"x" * 100).encode()
    with caplog.at_level(logging.WARNING, logger="ferrymq.net"):
        writer.write(whole[:60])
        await writer.drain()
        writer.close()
        await asyncio.wait_for(closed_connections.get(), 5)
    assert "in the middle of a frame" in caplog.text
    assert (await client.invoke(address(server), RemotingCommand(ECHO, body=b"ok"))).body == b"ok"
    assert await client.connection(address(server)) is bystander


async def test_a_peer_that_stops_reading_is_bounded_and_then_dropped():
    high, in_flight, answer_size = 64 << 10, 8, 16 << 10
    limits = ConnectionLimits(
        write_buffer_high=high, write_stall_timeout=0.5, max_requests_in_flight=in_flight
    )
    server = RemotingServer("127.0.0.1", 0, limits=limits)
    handled = 0
    most_buffered = 0
    most_running = 0

    async def big_answer(connection, request):
        nonlocal handled, most_buffered, most_running
        handled += 1
        most_buffered = max(most_buffered, connection.write_buffer_size)
        most_running = max(most_running, len(connection.handler_tasks))
        return request.make_response(ResponseCode.SUCCESS, body=bytes(answer_size))

    server.register(ECHO, big_answer)
    dropped = asyncio.Queue()
    server.on_connection_closed(dropped.put_nowait)
    await server.start()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting, so the window stays small
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", server.port))
    _, writer = await asyncio.open_connection(sock=sock, limit=1024)  # reads 1 KiB, then never again
    sent = 5000
    try:
        writer.write(b"".join(RemotingCommand(ECHO, opaque=i).encode() for i in range(sent)))
        await asyncio.wait_for(dropped.get(), 10)
        assert handled < sent  # it stopped taking requests it could not answer
        assert most_running <= in_flight
        # What one connection made the server hold: the buffer limit plus a round or two of answers.
        assert most_buffered <= high + 2 * in_flight * (answer_size + 256)
    finally:
        writer.close()
        await server.stop()


async def test_a_port_bound_before_start_is_held_and_then_served(client):
    """A broker learns its ephemeral port before it listens (its address goes into the records it
    recovers and writes): the port is held from then on, not merely looked up and hoped free."""
    early = RemotingServer("127.0.0.1", 0)
    early.register(ECHO, echo)
    port = early.bind()
    taken = socket.socket()
    try:
        with pytest.raises(OSError):
            taken.bind(("127.0.0.1", port))
    finally:
        taken.close()
    await early.start()
    try:
        assert early.port == port
        answer = await client.invoke(f"127.0.0.1:{port}", RemotingCommand(ECHO, body=b"hi"), timeout=5)
        assert answer.body == b"hi"
    finally:
        await early.stop(grace=1)
