"""RemotingClient: calls to many remoting servers over one pooled connection each.

The shape of RocketMQ's ``NettyRemotingClient``: connections are made on first use and again after
one closes, concurrent callers share a single connection attempt, and the same connections carry
the requests servers send back to us (NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE, ...).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
from collections.abc import Awaitable, Callable

from ferrymq.net.connection import DEFAULT_LIMITS, Connection, ConnectionLimits, cancel_handlers, close_all
from ferrymq.net.dispatch import Handler, RequestDispatcher
from ferrymq.net.errors import RemotingConnectionError
from ferrymq.net.tasks import BackgroundTasks
from ferrymq.net.tls import handshake_failure
from ferrymq.protocol.remoting import MAX_FRAME_SIZE, RemotingCommand

log = logging.getLogger(__name__)


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` (or ``"[v6]:port"``) → ``(host, port)``."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise RemotingConnectionError(f"bad address {address!r}: expected host:port")
    return host.strip("[]"), int(port)


ADDRESS = "address"
"""The attribute of a client's connection that holds the address it was made to."""


class RemotingClient:
    def __init__(
        self,
        *,
        connect_timeout: float = 3.0,
        max_frame_size: int = MAX_FRAME_SIZE,
        limits: ConnectionLimits = DEFAULT_LIMITS,
        tls: ssl.SSLContext | None = None,
        signer: Callable[[RemotingCommand], None] | None = None,
    ) -> None:
        """``tls``: connect with this client context (see ``ferrymq.net.tls``); plaintext if None.
        ``signer``: called on every request before it leaves (e.g. ``Credentials.sign``)."""
        self.connect_timeout = connect_timeout
        self.tls = tls
        self.signer = signer
        self._max_frame_size = max_frame_size
        self._limits = limits
        self._dispatcher = RequestDispatcher()
        self._connections: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Task[Connection | RemotingConnectionError]] = {}
        self._tasks = BackgroundTasks("remoting client")
        self._closed = False

    def register(self, code: int, handler: Handler) -> None:
        """Answer the requests servers send us with ``code`` by ``async def handler(connection, request)``."""
        self._dispatcher.register(code, handler)

    def register_default(self, handler: Handler) -> None:
        self._dispatcher.register_default(handler)

    def call(
        self, address: str, request: RemotingCommand, timeout: float = 3.0
    ) -> Awaitable[RemotingCommand]:
        """``invoke`` for the hot paths (sends, pulls): over an open connection, unsigned, what this
        returns is the answer's future itself, one coroutine fewer per request; await it."""
        connection = self._connections.get(address)
        if connection is None or connection.closed or self.signer is not None:
            return self.invoke(address, request, timeout)
        return connection.call(request, timeout)

    async def invoke(self, address: str, request: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Send ``request`` to ``address`` and return the answer.

        ``timeout`` counts from the call, so it includes connecting (which ``connect_timeout`` bounds).
        """
        if self.signer is not None:
            self.signer(request)
        connection = self._connections.get(address)
        if connection is None or connection.closed:
            loop = asyncio.get_running_loop()
            started = loop.time()
            connection = await self.connection(address)
            timeout -= loop.time() - started
        return await connection.call(request, timeout)

    async def invoke_oneway(self, address: str, request: RemotingCommand) -> None:
        """Send ``request`` to ``address`` with the oneway flag; nothing comes back."""
        if self.signer is not None:
            self.signer(request)
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
            attempt = self._tasks.spawn(self._connect(address), name=f"connect {address}")
            self._connecting[address] = attempt
            attempt.add_done_callback(functools.partial(self._connect_done, address))
        try:
            outcome = await asyncio.shield(
                attempt
            )  # one caller giving up must not cancel the others' attempt
        except asyncio.CancelledError:
            if attempt.cancelled() and self._closed:
                raise RemotingConnectionError("the remoting client is closed") from None
            raise
        if isinstance(outcome, RemotingConnectionError):
            raise outcome
        return outcome

    async def close(self) -> None:
        """Close every connection and end the tasks running on them (connection attempts, the
        servers' requests to us); calls still waiting fail with ``RemotingConnectionError``."""
        self._closed = True
        await self._tasks.close()
        connections = list(self._connections.values())
        await close_all(connections)
        await cancel_handlers(connections)

    async def _connect(self, address: str) -> Connection | RemotingConnectionError:
        """One connection attempt, shared by its callers: a failure is their answer, not the task's."""
        try:
            host, port = split_address(address)
        except RemotingConnectionError as exc:
            return exc
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, connection = await loop.create_connection(
                    functools.partial(self._new_connection, address),
                    host,
                    port,
                    ssl=self.tls,
                    server_hostname=host if self.tls is not None else None,
                    ssl_handshake_timeout=self.connect_timeout if self.tls is not None else None,
                )
        except TimeoutError:
            return RemotingConnectionError(
                f"connecting to {address} timed out after {self.connect_timeout:g} s"
            )
        except OSError as exc:
            if self.tls is not None and isinstance(exc, ssl.SSLError | ConnectionResetError):  # handshake
                error = RemotingConnectionError(handshake_failure(address, exc))
            else:
                error = RemotingConnectionError(f"cannot connect to {address}: {exc.strerror or exc}")
            error.__cause__ = exc
            return error
        if self._closed:
            connection.close()
            return RemotingConnectionError("the remoting client is closed")
        self._connections[address] = connection
        return connection

    def _new_connection(self, address: str) -> Connection:
        connection = Connection(
            self._dispatcher.handle,
            max_frame_size=self._max_frame_size,
            limits=self._limits,
            on_close=functools.partial(self._forget, address),
        )
        connection.attributes[ADDRESS] = address  # as asked for: servers' requests say who sent them
        return connection

    def _forget(self, address: str, connection: Connection) -> None:
        if self._connections.get(address) is connection:
            del self._connections[address]

    def _connect_done(self, address: str, attempt: asyncio.Task) -> None:
        del self._connecting[address]
