"""The request-code → handler table of a server or client, and how one request is answered.

Every request that expects an answer gets one, whatever happens: an unknown code gets
REQUEST_CODE_NOT_SUPPORTED and a failing handler SYSTEM_ERROR, as a Java peer would answer, so a
client never waits out its timeout because of our bug and a connection is never dropped for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from ferrymq.net.connection import Connection
from ferrymq.net.errors import RemotingConnectionError
from ferrymq.net.latency import RequestLatency
from ferrymq.protocol.codes import RESPONSE_FLAG, ResponseCode
from ferrymq.protocol.remoting import Answer, RemotingCommand, RemotingProtocolError

log = logging.getLogger(__name__)
_now = time.perf_counter

Handler = Callable[[Connection, RemotingCommand], Awaitable[Answer | None]]
"""``async def handler(connection, request)``: the response, or None to send nothing."""

Guard = Callable[[str, RemotingCommand], RemotingCommand | None]
"""``guard(peer_address, request)``, run before every handler: None lets the request through, a
response refuses it (e.g. authentication and access control)."""


class RequestDispatcher:
    def __init__(self) -> None:
        self._handlers: dict[int, Handler] = {}
        self._default: Handler | None = None
        self._eager: set[int] = set()
        self._late: set[int] = set()
        # asked once per request read: the sets' own look-ups, without a Python call around them
        self.is_eager: Callable[[int], bool] = self._eager.__contains__
        self.is_late: Callable[[int], bool] = self._late.__contains__
        self.latency = RequestLatency()
        self.guards: tuple[Guard, ...] = ()
        """Checked in order before every handler; the first refusal answers the request."""

    def register(self, code: int, handler: Handler, *, eager: bool = False, late: bool = False) -> None:
        """Route requests with ``code`` to ``handler`` (replacing any earlier one).

        ``eager``: start the handler at once rather than in a task of its own; until its first
        real wait it runs outside any task (so it must not use ``asyncio.timeout`` before then).
        For hot, mostly non-waiting handlers, where a task costs more than the work.
        ``late`` (with ``eager``): start it only once the answers to the requests read with it are
        sent, for work no caller waits on.
        """
        self._handlers[code] = handler
        for flag, codes in ((eager, self._eager), (eager and late, self._late)):
            if flag:
                codes.add(code)
            else:
                codes.discard(code)

    def register_default(self, handler: Handler) -> None:
        """Route every code without its own handler to ``handler``."""
        self._default = handler

    async def handle(self, connection: Connection, request: RemotingCommand) -> None:
        """Run the request's handler and send its answer (none for a oneway request)."""
        started = _now()
        handler = self._handlers.get(request.code, self._default)
        response: Answer | None
        refusal = None
        for guard in self.guards:  # a loop, not a chain of closures: one call per guard per request
            if (refusal := guard(connection.remote_address, request)) is not None:
                break
        if refusal is not None:
            response = refusal
        elif handler is None:
            log.warning("request code %d from %s is not supported", request.code, connection.remote_address)
            response = request.make_response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request code {request.code} not supported"
            )
        else:
            try:
                response = await handler(connection, request)
            except RemotingProtocolError as exc:  # the peer's header or body did not parse
                log.warning("bad request code %d from %s: %s", request.code, connection.remote_address, exc)
                response = request.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
            except Exception as exc:
                log.exception(
                    "handler of request code %d from %s failed", request.code, connection.remote_address
                )
                response = request.make_response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if response is None or request.is_oneway:
            return
        self.latency.record(request.code, response.code, _now() - started)
        response.opaque = request.opaque
        response.flag |= RESPONSE_FLAG
        try:
            try:
                if not connection.try_send(response):
                    await connection.send(response)
            except RemotingProtocolError as exc:  # e.g. a code that the peer's binary header cannot hold
                log.exception("cannot encode the answer to request code %d", request.code)
                await connection.send(request.make_response(ResponseCode.SYSTEM_ERROR, str(exc)))
        except RemotingConnectionError:
            log.debug("answer to request code %d dropped: %s closed", request.code, connection.remote_address)
