"""One remoting TCP connection, the same object on both sides of the wire.

Connections are bidirectional (a broker calls its clients back over their own connection), so a
``Connection`` both answers the peer's requests and matches the peer's responses to its own by
``opaque``. It is an ``asyncio.Protocol`` rather than a stream pair: bytes go straight from
``data_received`` into the sans-I/O ``FrameDecoder``, with no coroutine per frame.

Memory is bounded per peer: at most ``max_requests_in_flight`` handlers run at once (then reading
pauses), writers wait while the transport holds more than ``write_buffer_high`` unsent bytes, and a
peer that reads nothing for ``write_stall_timeout`` seconds is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, cast

from ferrymq.net.errors import RemotingConnectionError, RemotingTimeoutError
from ferrymq.protocol.codes import ONEWAY_FLAG, RESPONSE_FLAG
from ferrymq.protocol.remoting import (
    MAX_FRAME_SIZE,
    Answer,
    FrameDecoder,
    RemotingCommand,
    RemotingProtocolError,
)

log = logging.getLogger(__name__)

_OPAQUE_MASK = 0x7FFFFFFF  # opaque is a Java int: wrap before it turns negative
_CLOSE_GRACE = 1.0  # seconds a closing connection gets to flush its last bytes before it is aborted


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """How much one peer may make us hold in memory before we stop reading from it or drop it."""

    write_buffer_high: int = 4 << 20
    """Unsent bytes above which writers wait for the peer to read (resumed at a quarter of it)."""
    write_stall_timeout: float = 30.0
    """Seconds the buffer may stay above ``write_buffer_high`` before the peer is dropped."""
    max_requests_in_flight: int = 4096
    """Concurrent handlers per connection; further requests wait, and reading pauses until they start."""


DEFAULT_LIMITS = ConnectionLimits()


class Flusher:
    """Writes the answers of a server's connections together, one loop pass after the first of them.

    A put wakes the long polls of its queue, whose tasks answer in the next pass; flushing every
    connection after that pass sends a consumer the message it waits for before (rather than a pass
    after) its producer gets the put's answer, and a peer woken once reads both. The connections that
    got output last are written first: they are the ones the earlier output made."""

    def __init__(self) -> None:
        self._dirty: list[Connection] = []

    def add(self, connection: Connection) -> None:
        if not self._dirty:
            connection._loop.call_soon(self._next_pass, connection._loop)
        self._dirty.append(connection)

    def _next_pass(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.call_soon(self._flush)

    def _flush(self) -> None:
        dirty, self._dirty = self._dirty, []
        for connection in reversed(dirty):
            connection._flush()


_Call = tuple["asyncio.Future[RemotingCommand]", float, int, float]
"""A request waiting for its answer: (the answer's future, loop-time deadline, code, timeout)."""

RequestRunner = Callable[["Connection", RemotingCommand], Coroutine[Any, Any, None]]
"""Runs one request of the peer and sends its answer (``RequestDispatcher.handle``)."""


class Connection(asyncio.Protocol):
    """A remoting connection: requests out (``request``, ``send_oneway``), answers out (``send``),
    and the peer's requests run concurrently, one task each, by ``runner``."""

    def __init__(
        self,
        runner: RequestRunner,
        *,
        max_frame_size: int = MAX_FRAME_SIZE,
        limits: ConnectionLimits = DEFAULT_LIMITS,
        on_open: Callable[[Connection], None] | None = None,
        on_close: Callable[[Connection], None] | None = None,
        eager: Callable[[int], bool] | None = None,
        late: Callable[[int], bool] | None = None,
        flusher: Flusher | None = None,
    ) -> None:
        """`eager(code)` says which requests start at once, in the read callback (see _start_handler);
        `late(code)` which of those start only after the answers written before them are sent;
        `flusher` writes this connection's output with its server's others (else at the end of the
        loop pass that made it)."""
        self._runner = runner
        self._flusher = flusher
        self._eager = eager
        self._late = late
        self._decoder = FrameDecoder(max_frame_size)
        self._limits = limits
        self._on_open = on_open
        self._on_close = on_close
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, _Call] = {}
        self._sweep: asyncio.TimerHandle | None = None  # one timer for every request's timeout
        self._sweep_at = math.inf
        self._outgoing: list[bytes | memoryview] = []
        self._opaque = 0
        self._handlers: set[asyncio.Task[None]] = set()
        self._waiting: deque[RemotingCommand] = deque()  # requests read beyond max_requests_in_flight
        self._reading_paused = False
        self._writing_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._stall_timer: asyncio.TimerHandle | None = None
        self._lost: asyncio.Future[None] = self._loop.create_future()
        self.closed = False
        self.remote_address = "?"
        self.last_activity = self._loop.time()
        """Loop time of the last bytes read or written; idle connections are closed by it."""
        self.attributes: dict[str, Any] = {}
        """Free for the processors that own this peer (a client id, a broker's identity, ...)."""

    def __repr__(self) -> str:
        return f"<Connection {self.remote_address}{' closed' if self.closed else ''}>"

    # --- calls to the peer ---------------------------------------------------------------------

    async def request(self, command: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send ``command`` (its ``opaque`` is assigned here) and return the peer's answer.

        Raises ``RemotingTimeoutError`` after ``timeout`` seconds (the connection stays usable; a late
        answer is dropped) and ``RemotingConnectionError`` if the connection closes first.
        """
        return await self.call(command, timeout)

    def call(self, command: RemotingCommand, timeout: float) -> Awaitable[RemotingCommand]:
        """``request`` for the hot paths: what this returns is, while the peer reads, the answer's
        future itself (no coroutine around it); await it. A call whose awaiting task is cancelled
        is forgotten at its answer or its deadline, whichever comes first."""
        if self.closed:
            raise self._closed_error()
        loop = self._loop
        opaque = self._opaque = (self._opaque + 1) & _OPAQUE_MASK
        command.opaque = opaque
        future = loop.create_future()
        deadline = loop.time() + timeout
        self._pending[opaque] = (future, deadline, command.code, timeout)
        if deadline < self._sweep_at:
            self._arm_sweep(deadline)
        if self._writing_paused:
            return self._write_when_writable(command, future)
        try:
            self._write(command)
        except BaseException:  # nothing went out (a header that cannot be encoded): no answer comes
            del self._pending[opaque]
            raise
        return future

    async def _write_when_writable(
        self, command: RemotingCommand, answer: asyncio.Future[RemotingCommand]
    ) -> RemotingCommand:
        """A request made while the peer is not reading: written once it reads (unless its deadline
        or the connection's close comes first, which fail `answer`)."""
        try:
            await self._wait_writable(answer)
            if not answer.done():
                self._write(command)
            return await answer
        except BaseException:  # cancelled, or not written: forget the call now
            self._pending.pop(command.opaque, None)
            answer.cancel()
            raise

    async def send_oneway(self, command: RemotingCommand) -> None:
        """Send a request that gets no answer (its flag and ``opaque`` are set here)."""
        command.flag |= ONEWAY_FLAG
        command.opaque = self._opaque = (self._opaque + 1) & _OPAQUE_MASK
        await self.send(command)

    async def send(self, command: Answer) -> None:
        """Write ``command`` as it is (a response), first waiting while the peer is not reading."""
        if self._writing_paused:
            await self._wait_writable()
        self._write(command)

    def try_send(self, command: Answer) -> bool:
        """``send`` without a coroutine (every answer goes through here): False, with nothing
        written, while the peer is not reading; then await ``send``."""
        if self._writing_paused:
            return False
        self._write(command)
        return True

    def close(self) -> None:
        """Close after the buffered bytes are sent; calls waiting for an answer fail at once."""
        self._shut()
        if self._transport is not None:
            self._flush()
            self._transport.close()

    def abort(self) -> None:
        """Drop the connection now, discarding unsent bytes (for a peer that misbehaves)."""
        self._shut()
        if self._transport is not None:
            self._transport.abort()

    async def wait_closed(self) -> None:
        """Return once the socket is closed."""
        await asyncio.shield(self._lost)

    @property
    def handler_tasks(self) -> frozenset[asyncio.Task[None]]:
        """The tasks running this peer's requests right now."""
        return frozenset(self._handlers)

    @property
    def write_buffer_size(self) -> int:
        """Bytes written but not yet taken by the kernel."""
        return self._transport.get_write_buffer_size() if self._transport is not None else 0

    # --- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        transport.set_write_buffer_limits(high=self._limits.write_buffer_high)
        peer = transport.get_extra_info("peername")
        if peer:
            self.remote_address = f"{peer[0]}:{peer[1]}"
        if self._on_open is not None:
            self._on_open(self)

    def data_received(self, data: bytes) -> None:
        self.last_activity = self._loop.time()
        try:
            commands = self._decoder.feed(data)
        except RemotingProtocolError as exc:
            log.warning("closing %s: %s", self.remote_address, exc)
            self.abort()
            return
        late: list[RemotingCommand] = []
        pending = self._pending
        for command in commands:
            if command.flag & RESPONSE_FLAG:  # an answer: inline, as there is one per request
                call = pending.pop(command.opaque, None)
                if call is None:
                    log.debug(
                        "dropping an answer from %s to opaque %d: no call waits for it", self, command.opaque
                    )
                elif not call[0].done():
                    call[0].set_result(command)
            elif self._waiting or len(self._handlers) >= self._limits.max_requests_in_flight:
                self._waiting.append(command)
                if not self._reading_paused:
                    self._reading_paused = True
                    self._transport.pause_reading()  # type: ignore[union-attr]
            elif self._late is not None and self._late(command.code):
                late.append(command)
            else:
                self._start_handler(command)
        if late:  # work nobody waits on (a oneway END_TRANSACTION) does not hold back answers
            self._flush()
            for command in late:
                self._start_handler(command)

    def eof_received(self) -> bool:
        if self._decoder.buffered:
            log.warning(
                "%s closed in the middle of a frame (%d bytes)", self.remote_address, self._decoder.buffered
            )
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self._shut()
        if self._stall_timer is not None:
            self._stall_timer.cancel()
        if not self._lost.done():
            self._lost.set_result(None)
        if self._on_close is not None:
            self._on_close(self)

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._stall_timer = self._loop.call_later(self._limits.write_stall_timeout, self._write_stalled)

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None
        self._wake_writers()

    # --- internals -----------------------------------------------------------------------------

    def _write(self, command: Answer) -> None:
        """Queue the frame; everything queued in one loop pass leaves in one ``writev``."""
        if self.closed:
            raise self._closed_error()
        header, body = command.encode_parts()
        if not self._outgoing:
            if self._flusher is not None:
                self._flusher.add(self)
            else:
                self._loop.call_soon(self._flush)
        self._outgoing.append(header)
        if body:
            self._outgoing.append(body)  # not joined: uvloop passes the buffers to writev as they are

    def _flush(self) -> None:
        transport = self._transport
        if self._outgoing and transport is not None and not transport.is_closing():
            transport.writelines(self._outgoing)
            self.last_activity = self._loop.time()
        self._outgoing = []

    def _start_handler(self, request: RemotingCommand) -> None:
        """Run the request's handler in a task of its own.

        Hot handlers (sends, pulls) mostly finish without ever waiting, and a task costs more than
        many of them do: those marked eager run at once up to their first real wait, and only one
        that does wait becomes a task (Python 3.12's eager tasks; done by hand before 3.12).
        """
        coro = self._runner(self, request)
        task: asyncio.Task[None]
        if self._eager is None or not self._eager(request.code):
            task = self._loop.create_task(coro)
        elif _EAGER_TASKS:
            task = asyncio.Task(coro, loop=self._loop, eager_start=True)  # type: ignore[call-arg]  # 3.12+ only
            if task.done():
                return
        else:
            try:
                waiting_on = coro.send(None)
            except StopIteration:
                return
            except BaseException:  # the runner answers failures itself: this is a bug, not a request's fault
                log.exception("handler of request code %d failed", request.code)
                return
            task = self._loop.create_task(_continue(coro, waiting_on))
        self._handlers.add(task)
        task.add_done_callback(self._handler_done)

    def _handler_done(self, task: asyncio.Task[None]) -> None:
        self._handlers.discard(task)
        while self._waiting and len(self._handlers) < self._limits.max_requests_in_flight:
            self._start_handler(self._waiting.popleft())
        if self._reading_paused and not self._waiting:
            self._reading_paused = False
            if not self.closed:
                self._transport.resume_reading()  # type: ignore[union-attr]

    def _arm_sweep(self, when: float) -> None:
        """Fail the calls past their deadline at loop time `when`: a timer per call would cost more
        than the rest of a small request's bookkeeping, one per connection is re-armed as needed."""
        if self._sweep is not None:
            self._sweep.cancel()
        self._sweep = self._loop.call_at(when, self._expire)
        self._sweep_at = when

    def _expire(self) -> None:
        self._sweep, self._sweep_at = None, math.inf
        now, earliest = self._loop.time(), math.inf
        pending = self._pending
        for opaque, (future, deadline, code, timeout) in list(pending.items()):
            if deadline > now:
                earliest = min(earliest, deadline)
                continue
            del pending[opaque]
            if not future.done():
                future.set_exception(
                    RemotingTimeoutError(
                        f"no answer to request code {code} from {self.remote_address} in {timeout:g} s"
                    )
                )
        if earliest < math.inf:
            self._arm_sweep(earliest)

    async def _wait_writable(self, give_up: asyncio.Future[Any] | None = None) -> None:
        """Wait until the peer has read enough of what we wrote, the connection closes, or ``give_up``
        completes (a request's answer future, failed by its timeout)."""
        if self.closed:
            return
        waiter = self._loop.create_future()
        self._drain_waiters.append(waiter)
        try:
            await asyncio.wait(
                (waiter,) if give_up is None else (waiter, give_up), return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            waiter.cancel()

    def _wake_writers(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _write_stalled(self) -> None:
        log.warning(
            "closing %s: it left %d bytes unread for %g s",
            self.remote_address,
            self.write_buffer_size,
            self._limits.write_stall_timeout,
        )
        self.abort()

    def _shut(self) -> None:
        """Mark closed and fail what waits on the peer; runs once whichever way the end came."""
        if self.closed:
            return
        self.closed = True
        pending, self._pending = self._pending, {}
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep, self._sweep_at = None, math.inf
        for future, *_ in pending.values():
            if not future.done():
                future.set_exception(self._closed_error())
        self._wake_writers()  # the stall timer stays: a close that cannot flush still ends in an abort

    def _closed_error(self) -> RemotingConnectionError:
        return RemotingConnectionError(f"connection to {self.remote_address} is closed")


_EAGER_TASKS = sys.version_info >= (3, 12)


async def _continue(coro, waiting_on):
    """Go on with a coroutine started by hand, which stopped to wait on `waiting_on`."""
    return await _Resumed(coro, waiting_on)


class _Resumed:
    """Hands the driving task the future a coroutine first waited on, then relays every later step
    (results, exceptions, cancellation) to that coroutine, as `yield from` would have."""

    __slots__ = ("coro", "waiting_on")

    def __init__(self, coro, waiting_on) -> None:
        self.coro = coro
        self.waiting_on = waiting_on

    def __await__(self):
        coro, waiting_on = self.coro, self.waiting_on
        while True:
            try:
                sent = yield waiting_on
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:
                step, arg = coro.throw, exc
            else:
                step, arg = coro.send, sent
            try:
                waiting_on = step(arg)
            except StopIteration as done:
                return done.value


async def close_all(connections: Iterable[Connection]) -> None:
    """Close every connection, aborting those whose peer does not take the last bytes in time."""
    closing = list(connections)
    for connection in closing:
        connection.close()
    if not closing:
        return
    lost = {connection._lost: connection for connection in closing}  # futures: no task per connection
    _, stuck = await asyncio.wait(lost, timeout=_CLOSE_GRACE)
    for waiter in stuck:
        lost[waiter].abort()
    if stuck:
        await asyncio.wait(stuck)


async def cancel_handlers(connections: Iterable[Connection]) -> None:
    """Cancel the requests still running on these (closed) connections and wait until they end.

    The caller's own task is spared: a handler may be the one closing its connections."""
    current = asyncio.current_task()
    running = {task for connection in connections for task in connection.handler_tasks if task is not current}
    for task in running:
        task.cancel()
    if running:
        await asyncio.wait(running)
