"""RemotingClient: calls to many remoting servers over one pooled connection each.

The shape of RocketMQ's ``NettyRemotingClient``: connections are made on first use and again after
one closes, concurrent callers share a single connection attempt, and the same connections carry
the requests servers send back to us (NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE, ...).
"""

from __future__ import annotations

import asyncio
import functools
import logging

from ferrymq.net.connection import DEFAULT_LIMITS, Connection, ConnectionLimits, close_all
from ferrymq.net.dispatch import Handler, RequestDispatcher
from ferrymq.net.errors import RemotingConnectionError
from ferrymq.protocol.remoting import MAX_FRAME_SIZE, RemotingCommand

log = logging.getLogger(__name__)


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` (or ``"[v6]:port"``) → ``(host, port)``."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise RemotingConnectionError(f"bad address {address!r}: expected host:port")
    return host.strip("[]"), int(port)


class RemotingClient:
    def __init__(
        self,
        *,
        connect_timeout: float = 3.0,
        max_frame_size: int = MAX_FRAME_SIZE,
        limits: ConnectionLimits = DEFAULT_LIMITS,
    ) -> None:
        self.connect_timeout = connect_timeout
        self._max_frame_size = max_frame_size
        self._limits = limits
        self._dispatcher = RequestDispatcher()
        self._connections: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Task[Connection]] = {}
        self._closed = False

    def register(self, code: int, handler: Handler) -> None:
        """Answer the requests servers send us with ``code`` by ``async def handler(connection, request)``."""
        self._dispatcher.register(code, handler)

    def register_default(self, handler: Handler) -> None:
        self._dispatcher.register_default(handler)

    async def invoke(self, address: str, request: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Send ``request`` to ``address`` and return the answer.

        ``timeout`` counts from the call, so it includes connecting (which ``connect_timeout`` bounds).
        """
        connection = self._connections.get(address)
        if connection is None or connection.closed:
            loop = asyncio.get_running_loop()
            started = loop.time()
            connection = await self.connection(address)
            timeout -= loop.time() - started
        return await connection.request(request, timeout)

    async def invoke_oneway(self, address: str, request: RemotingCommand) -> None:
        """Send ``request`` to ``address`` with the oneway flag; nothing comes back."""
        await (await self.connection(address)).send_oneway(request)

    async def connection(self, address: str) -> Connection:
        """The open connection to ``address``, made now (within ``connect_timeout``) if needed."""
        if self._closed:
            raise RemotingConnectionError("the remoting client is closed")
        connection = self._connections.get(address)
        if connection is not None and not connection.closed:
            return connection
        attempt = self._connecting.get(address)
        if attempt is None:
            attempt = asyncio.get_running_loop().create_task(self._connect(address))
            self._connecting[address] = attempt
            attempt.add_done_callback(functools.partial(self._connect_done, address))
        return await asyncio.shield(attempt)  # one caller giving up must not cancel the others' attempt

    async def close(self) -> None:
        """Close every connection; calls still waiting fail with ``RemotingConnectionError``."""
        self._closed = True
        for attempt in list(self._connecting.values()):
            attempt.cancel()
        await close_all(self._connections.values())

    async def _connect(self, address: str) -> Connection:
        host, port = split_address(address)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, connection = await loop.create_connection(
                    functools.partial(self._new_connection, address), host, port
                )
        except TimeoutError:
            raise RemotingConnectionError(
                f"connecting to {address} timed out after {self.connect_timeout:g} s"
            ) from None
        except OSError as exc:
            raise RemotingConnectionError(f"cannot connect to {address}: {exc.strerror or exc}") from exc
        if self._closed:
            connection.close()
            raise RemotingConnectionError("the remoting client is closed")
        self._connections[address] = connection
        return connection

    def _new_connection(self, address: str) -> Connection:
        return Connection(
            self._dispatcher.handle,
            max_frame_size=self._max_frame_size,
            limits=self._limits,
            on_close=functools.partial(self._forget, address),
        )

    def _forget(self, address: str, connection: Connection) -> None:
        if self._connections.get(address) is connection:
            del self._connections[address]

    def _connect_done(self, address: str, attempt: asyncio.Task[Connection]) -> None:
        del self._connecting[address]
        if not attempt.cancelled():
            attempt.exception()  # retrieved here too, for when every caller gave up waiting
